"""Leaderboard figures: one per view, a panel per scope × measure (for LLMBar the headline strategy of each scope),
judges sorted best first with their interval, significance clusters as bands, n in the panel title, recorded judges
drawn hollow, judges left out of a panel named under it with the reason."""

from __future__ import annotations

import math
import re
import textwrap

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dhp.plots.save import stable  # noqa: E402
from dhp.lazy import lazy_module  # noqa: E402

plt = lazy_module("matplotlib.pyplot")  # imported when a figure is drawn (dhp.lazy)

BAND_COLOURS = ("#EEF3FA", "#FFFFFF")
#: LLMBar's headline strategy, then the live ones: a view's figure shows one strategy per scope.
HEADLINE_STRATEGIES = ("Vanilla", "llmbar:Vanilla", "dhp_vanilla", "direct", "dna")
#: The cluster rule every figure states (leaderboard.csv's cluster_rule column says it in full).
RULE_NOTE = ("bands: significance clusters by the WMT rule (one-sided p_better <= alpha, unadjusted); "
             "'Holm' beside a band: the clusters from the Holm-adjusted decisions of 'significant'")


def _label(judge: str, mode: str) -> str:
    return f"{judge} ({mode})"


def _headline_groups(board: pd.DataFrame) -> list[tuple]:
    """The panels of one view: every scope × measure, with one strategy per scope (the headline one)."""
    groups = []
    for (scope, measure), g in board.groupby(["scope", "measure"], sort=True):
        strategies = list(dict.fromkeys(g["strategy"].fillna("")))
        pick = next((s for s in HEADLINE_STRATEGIES if s in strategies), None)
        if pick is None:
            ok = g[g["status"] == "ok"].groupby("strategy")["judge"].nunique()
            pick = ok.idxmax() if len(ok) else strategies[0]
        groups.append((scope, measure, pick))
    return groups


#: Figure width in inches (a page's content column shows it at about its 100-dpi size: 7-pt labels >= 9 px there)
#: and the tallest figure before a view is split into one figure per panel (HANNA's 6 × 37 judges were 30 in tall).
PAGE_WIDTH = 7.0
MAX_HEIGHT = 9.5


def _panel_height(g: pd.DataFrame) -> float:
    n = int((g["status"] == "ok").sum())
    per_row = 0.3 if n <= 20 else 0.22  # 30+ judges a panel (HANNA): denser rows, same font
    extra = 0.35 * _protocol_note(g[g["status"] == "ok"]).count("\n") + 0.3 * (len(g) > n)
    return max(1.6, per_row * n + 1.1 + extra)


def _panels(b: pd.DataFrame) -> list[tuple[tuple, pd.DataFrame]]:
    b = b.copy()
    b["strategy"] = b["strategy"].fillna("")
    return [(k, b[(b["scope"] == k[0]) & (b["measure"] == k[1]) & (b["strategy"] == k[2])])
            for k in _headline_groups(b)]


def plot_view(board: pd.DataFrame, view: str, panels: list[tuple] | None = None, part: str = ""):
    """One view's figure (see the module docstring): its panels one under the other, ``PAGE_WIDTH`` wide.
    ``panels`` ((scope, measure, strategy) keys): only those (a part of a view too tall for one figure)."""
    groups = _panels(stable(board[board["view"] == view]))  # the same numbers to 10 digits: the same bytes
    if panels is not None:
        groups = [(k, g) for k, g in groups if k in panels]
    heights = [_panel_height(g) for _, g in groups]
    height = sum(heights) + 0.9
    fig, axes = plt.subplots(len(groups), 1, figsize=(PAGE_WIDTH, height), squeeze=False, layout="constrained",
                             gridspec_kw={"height_ratios": heights})
    for ax, ((scope, measure, strategy), g) in zip(axes[:, 0], groups):
        _panel(ax, g, scope, measure, strategy)
    title = f"Leaderboard: {view.replace('_', ' ')}{' — ' + part if part else ''} (intervals: 95% bootstrap)"
    fig.suptitle(title + "\n" + textwrap.fill(RULE_NOTE, 100), fontsize=8)
    return fig


def _panel(ax, g: pd.DataFrame, scope: str, measure: str, strategy: str) -> None:
    # ties in judge order (stable sort): which of two equal values comes first must not depend on their last bits
    ok = g[g["status"] == "ok"].sort_values(["value", "judge", "mode"], ascending=[False, True, True], kind="stable")
    out = g[g["status"] != "ok"]
    title = f"{scope} · {measure}" + (f" · {strategy}" if strategy else "")
    if ok.empty:
        ax.text(0.5, 0.5, "no judge with a value here", ha="center", va="center", fontsize=8, transform=ax.transAxes)
        ax.set_axis_off()
        ax.set_title(title, fontsize=8, loc="left")
        return
    y = np.arange(len(ok))
    clusters = ok["cluster"].to_numpy()
    holm = ok["cluster_holm"].to_numpy() if "cluster_holm" in ok else np.full(len(ok), np.nan)
    for k, c in enumerate(pd.unique(clusters)):  # alternating bands, one per cluster
        rows = np.flatnonzero(clusters == c)
        ax.axhspan(rows.min() - 0.5, rows.max() + 0.5, color=BAND_COLOURS[k % 2], zorder=0)
        h = sorted({int(x) for x in holm[rows] if np.isfinite(x)})
        note = f" (Holm {'/'.join(map(str, h))})" if h else ""
        ax.text(1.0, rows.mean(), f" cluster {int(c)}{note}", va="center", ha="left", fontsize=7, color="#555555",
                transform=ax.get_yaxis_transform())
    # each interval drawn as it is, lo to hi: a percentile interval need not contain its point (a system-level
    # correlation of 10 systems), which offsets from the point (errorbar's xerr) cannot draw
    lo, hi = ok["lo"].to_numpy(float), ok["hi"].to_numpy(float)
    has = np.isfinite(lo) & np.isfinite(hi)
    ax.hlines(y[has], lo[has], hi[has], color="#333333", lw=1, zorder=2)
    ax.scatter(np.r_[lo[has], hi[has]], np.r_[y[has], y[has]], marker="|", color="#333333", s=16, lw=1, zorder=2)
    recorded = ok["recorded"].astype(bool).to_numpy()
    ax.scatter(ok["value"][~recorded], y[~recorded], color="#1F4E8C", zorder=3, s=22, label="live")
    ax.scatter(ok["value"][recorded], y[recorded], facecolor="white", edgecolor="#1F4E8C", zorder=3, s=22,
               label="recorded")
    ax.set_yticks(y, [_label(j, m) for j, m in zip(ok["judge"], ok["mode"])], fontsize=7)
    ax.invert_yaxis()
    ax.set_ylim(len(ok) - 0.5, -0.5)
    ax.tick_params(axis="x", labelsize=7)
    label = measure
    if len(out):  # under the axis label, as part of it, so the layout makes room and nothing overlaps
        notes = "; ".join(f"{_label(j, m)}: {s}" for j, m, s in zip(out["judge"], out["mode"], out["status"]))
        label += "\n" + textwrap.fill("left out — " + notes[:240], 100)
    ax.set_xlabel(label, fontsize=7)
    n = int(ok["n"].iloc[0]) if ok["n"].notna().any() else 0
    ax.set_title(f"{title} (n = {n}){_protocol_note(ok)}", fontsize=8, loc="left")


def _short(difference: str) -> str:
    """A judge's protocol difference without its details in parentheses (they are in leaderboard.csv's protocol
    column): 'PaLM2: own answer rule, own message format' fits a panel's title."""
    prev = None
    while prev != difference:  # innermost parentheses first: the details nest, e.g. "(... Output (a)/(b) ...)"
        prev, difference = difference, re.sub(r"\s*\([^()]*\)", "", difference)
    return difference.replace("; ", ", ")


DIGESTS = re.compile(r"@[0-9a-f]{7,40}\b|\s*sha256:[0-9a-f+]+")


def _protocol_note(ok: pd.DataFrame) -> str:
    """The panel's protocol when it has one: live and recorded judges share a panel only on the same protocol. Named
    without its commit and sha256 digests (leaderboard.csv's protocol column has them): a title is read, not diffed."""
    protocols = {DIGESTS.sub("", str(p)) for p in ok.get("protocol", pd.Series(dtype=object)).dropna() if str(p)}
    bases = {p.split(" [", 1)[0] for p in protocols}
    if len(protocols) > 1 and len(bases) == 1:  # one template, some judges on their own config: say how they differ
        own = sorted(_short(p.split(" [", 1)[1].rstrip("]")) for p in protocols if " [" in p)
        return "\n" + textwrap.fill(f"protocol: {bases.pop()}; not the same protocol — " + " / ".join(own), 80)
    if len(protocols) != 1:
        return ""
    both = ok["recorded"].astype(bool).nunique() == 2
    return f"\n{'live and recorded judges, same protocol: ' if both else 'protocol: '}{protocols.pop()}"


def _part_names(keys: list[tuple]) -> list[str]:
    """File-safe names of a split view's panels: what tells them apart (the scope, else the measure, else both)."""
    for idx in ((0,), (1,), (2,), (0, 1, 2)):
        names = [" ".join(str(k[i]) for i in idx if k[i]) for k in keys]
        if len(set(names)) == len(names):
            break
    return [re.sub(r"[^a-z0-9]+", "_", n.lower()).strip("_") for n in names]


def leaderboard_figures(board: pd.DataFrame, pairs: pd.DataFrame | None = None) -> dict:
    """One figure per view (view name -> figure), panels one under the other at a page's width; a view taller than
    ``MAX_HEIGHT`` inches that way (HANNA: 6 aspects × 37 judges) is one figure per panel instead, named
    ``<view>_<part>`` (``hanna_coherence``; the part: what tells the panels apart)."""
    shown = board[board["status"] == "ok"]  # a view that could not be built has no figure (its row says why)
    board = stable(board[board["judge"] != ""])
    out = {}
    for view in sorted(set(shown["view"])):
        groups = _panels(board[board["view"] == view])
        if len(groups) > 1 and sum(_panel_height(g) for _, g in groups) + 0.9 > MAX_HEIGHT:
            keys = [k for k, _ in groups]
            for k, part in zip(keys, _part_names(keys)):
                prefix = re.sub(r"[^a-z0-9]+", "_", view.lower()) + "_"
                part = part[len(prefix):] if part.startswith(prefix) else part  # "hanna_coherence", not "hanna_hanna_..."
                out[f"{view}_{part}"] = plot_view(board, view, [k], part=" · ".join(x for x in k if x))
        else:
            out[view] = plot_view(board, view)
    return out
