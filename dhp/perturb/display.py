"""HTML rendering of perturbations with the changes highlighted (for notebook 01)."""

from __future__ import annotations

import difflib
import html
import re

import pandas as pd

_DEL = '<del style="background:#fdd;color:#900">{}</del>'
_INS = '<ins style="background:#dfd;color:#060;text-decoration:none">{}</ins>'


def diff_html(original: str, new: str, granularity: str = "word") -> str:
    """HTML of `new` against `original`: deletions struck through in red, insertions in green.

    granularity "char" diffs characters (for character-level methods), "word" diffs words and
    the whitespace between them.
    """
    if granularity == "char":
        a, b = list(original), list(new)
    else:
        a, b = re.findall(r"\s+|[^\s]+", original), re.findall(r"\s+|[^\s]+", new)
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(html.escape("".join(a[i1:i2])))
            continue
        if i2 > i1:
            out.append(_DEL.format(html.escape("".join(a[i1:i2]))))
        if j2 > j1:
            out.append(_INS.format(html.escape("".join(b[j1:j2]))))
    return "".join(out)


def examples_html(perturbed: pd.DataFrame, item_id: str | None = None, max_chars: int = 1500) -> str:
    """An HTML table with one example per (perturbation, severity, method): the first ok row,
    preferably of `item_id`, with its changes highlighted against the original."""
    orig = {
        (r.dataset, r.item_id): r.text
        for r in perturbed[perturbed["perturbation"] == "original"].itertuples(index=False)
    }
    rows = []
    ok = perturbed[(perturbed["status"] == "ok") & (perturbed["perturbation"] != "original")]
    for (p, sev, method), g in ok.groupby(["perturbation", "severity", "method"], sort=False):
        pick = g[g["item_id"] == item_id] if item_id is not None else g.iloc[0:0]
        r = (pick if len(pick) else g).iloc[0]
        ref = orig.get((r["dataset"], r["item_id"]), "") or ""
        gran = "char" if r["level"] == "character" else "word"
        body = diff_html(ref[:max_chars], r["text"][:max_chars], gran)
        rows.append(
            f"<tr><td style='vertical-align:top'><b>{html.escape(p)}</b><br>{html.escape(sev)}"
            f"<br><small>{html.escape(method)}<br>item {html.escape(str(r['item_id']))}</small></td>"
            f"<td style='text-align:left'>{body}<br><small><i>{html.escape(r['edits'])}</i></small></td></tr>"
        )
    return (
        "<table><tr><th>perturbation</th><th style='text-align:left'>text (red: removed, green: added)"
        "</th></tr>" + "".join(rows) + "</table>"
    )
