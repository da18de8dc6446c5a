"""The judge report card: the five measurements of one judge side by side, from the result tables the
methods wrote (DHP discernment, criteria confusion, decompose-and-aggregate on LLMBar, dual perspective,
human alignment). A method whose table is absent is listed as "not run" — never as a number.

The card is a tidy long table (CARD_COLUMNS), one row per judge × mode × method × measure × scope:

- judge, mode: the judge and its scoring mode;
- method: dhp | criteria_confusion | decompose_aggregate | dual_perspective | human_alignment;
- measure: e.g. D_avg, D_min, control_D, null_fpr_avg_paper (dhp); share_ST_D_gt_1, share_SF_invariant,
  confusion_index (criteria_confusion); agreement, position_consistency (decompose_aggregate); kappa,
  local_accuracy (dual_perspective); spearman/kendall/pearson at summary or system level (human_alignment);
- scope: what the number is about (dataset, description type, subset/strategy, aspect, view/aspect);
- value, lo, hi: the number and its interval where the method gives one (NaN otherwise);
- n: items, cells, pairs or targets behind the number (NaN when the table does not say);
- status: "ok"; "no usable scores" (the method ran but the judge's replies gave no number: e.g. no LLMBar
  verdict in any order); "no significant drop" (a confusion index of 0/0); or "not run".
"""

from __future__ import annotations

import math
import os

import pandas as pd

CARD_COLUMNS = ["judge", "mode", "method", "measure", "scope", "value", "lo", "hi", "n", "status"]
METHODS = ("dhp", "criteria_confusion", "decompose_aggregate", "dual_perspective", "human_alignment")
# method -> the run-folder files it is read from
SOURCES = {"dhp": ("summary.csv",), "criteria_confusion": ("confusion_summary.csv",),
           "decompose_aggregate": ("pairwise_agreement.csv",),
           "dual_perspective": ("global_kappa.csv", "local_accuracy.csv"), "human_alignment": ("alignment.csv",)}


def _row(judge, mode, method, measure, scope, value, lo=math.nan, hi=math.nan, n=math.nan,
         nan_status: str = "no usable scores") -> dict:
    """One card row; a NaN value gets ``nan_status`` (why there is no number) instead of "ok"."""
    value = float(value) if value is not None and pd.notna(value) else math.nan
    return {"judge": judge, "mode": mode, "method": method, "measure": measure, "scope": str(scope),
            "value": value, "lo": float(lo) if pd.notna(lo) else math.nan,
            "hi": float(hi) if pd.notna(hi) else math.nan, "n": float(n) if pd.notna(n) else math.nan,
            "status": "ok" if math.isfinite(value) else nan_status}


def _dhp(summary: pd.DataFrame, judge: str, mode: str) -> list[dict]:
    rows = []
    for r in summary[(summary["judge"] == judge) & (summary["mode"] == mode)].to_dict("records"):
        for m in ("D_avg", "D_min", "D_avg_EW", "D_min_EW"):
            rows.append(_row(judge, mode, "dhp", m, r["dataset"], r[m], r.get(f"{m}_lo"), r.get(f"{m}_hi"),
                             r.get("n_perturbations")))
        rows.append(_row(judge, mode, "dhp", "control_D", r["dataset"], r.get("control_D")))
        rows.append(_row(judge, mode, "dhp", "null_fpr_avg_paper", r["dataset"], r.get("null_fpr_avg_paper"),
                         n=r.get("n_null")))
    return rows


def _of(table: pd.DataFrame | None, judge: str, mode: str) -> pd.DataFrame | None:
    """The rows of one judge × mode (a table without judge/mode columns is one judge's own run folder)."""
    if table is None or "judge" not in table or "mode" not in table:
        return table
    return table[(table["judge"] == judge) & (table["mode"] == mode)]


def _confusion(table: pd.DataFrame, judge: str, mode: str) -> list[dict]:
    sub = _of(table, judge, mode)
    # the confusion index is 0/0 when no cell dropped significantly: undefined, though scores were usable
    return [_row(judge, mode, "criteria_confusion", m, r["description_type"], r[m],
                 n=r["n_S_T"] if m == "share_ST_D_gt_1" else r["n_S_F"] if m.startswith("share_SF") else math.nan,
                 nan_status="no significant drop" if m == "confusion_index" and r["n_S_T"] + r["n_S_F"] > 0
                 else "no usable scores")
            for r in sub.to_dict("records") for m in ("share_ST_D_gt_1", "share_SF_invariant", "confusion_index")]


def _agreement(table: pd.DataFrame, judge: str, mode: str) -> list[dict]:
    sub = _of(table, judge, mode)
    # a miss counts against agreement, but with no verdict in any order there is nothing to agree: NaN
    return [_row(judge, mode, "decompose_aggregate", m, f"{r['subset']}/{r['strategy']}",
                 math.nan if r.get("no_verdict", 0) >= 2 * r["n"] else r[m], n=r["n"])
            for r in sub.to_dict("records") for m in ("agreement", "position_consistency")]


def _dual(kappa: pd.DataFrame | None, local: pd.DataFrame | None, judge: str, mode: str) -> list[dict]:
    rows = []
    kappa, local = _of(kappa, judge, mode), _of(local, judge, mode)
    for r in ([] if kappa is None else kappa.to_dict("records")):
        rows.append(_row(judge, mode, "dual_perspective", "kappa", r["aspect"], r["kappa"], n=r.get("n")))
    for r in ([] if local is None else local.to_dict("records")):
        rows.append(_row(judge, mode, "dual_perspective", "local_accuracy", r["aspect"], r["accuracy"],
                         n=r.get("n_pairs")))
    return rows


def _alignment(table: pd.DataFrame, judge: str, mode: str) -> list[dict]:
    # the segment view's headline, acc*_eq (ties calibrated), before its other statistics (stable sort)
    records = sorted(_of(table, judge, mode).to_dict("records"),
                     key=lambda r: r["view"] == "segment" and r["statistic"] != "acc_eq_calibrated")
    return [_row(judge, mode, "human_alignment", f"{r['view']}_{r['statistic']}", r["aspect"], r["value"],
                 r.get("ci_lo"), r.get("ci_hi"), r.get("n")) for r in records]


def report_card(judge: str, mode: str, summary: pd.DataFrame | None = None, confusion: pd.DataFrame | None = None,
                agreement: pd.DataFrame | None = None, kappa: pd.DataFrame | None = None,
                local: pd.DataFrame | None = None, alignment: pd.DataFrame | None = None) -> pd.DataFrame:
    """The card of one judge × mode from the methods' tables (None: that method was not run). Returns
    CARD_COLUMNS (see the module docstring); a method without a table is one "not run" row."""
    parts = {"dhp": _dhp(summary, judge, mode) if summary is not None else None,
             "criteria_confusion": _confusion(confusion, judge, mode) if confusion is not None else None,
             "decompose_aggregate": _agreement(agreement, judge, mode) if agreement is not None else None,
             "dual_perspective": _dual(kappa, local, judge, mode) if kappa is not None or local is not None else None,
             "human_alignment": _alignment(alignment, judge, mode) if alignment is not None else None}
    rows = []
    for method in METHODS:
        got = parts[method]
        if got:
            rows += got
        else:  # absent, or present without a row for this judge: not run for it
            rows.append({**_row(judge, mode, method, "", "", math.nan), "status": "not run"})
    return pd.DataFrame(rows, columns=CARD_COLUMNS)


def _read_sources(runs: dict[str, str | os.PathLike | None]) -> dict[str, pd.DataFrame | None]:
    """report_card's keyword -> table read from the folder ``runs`` gives for its method (None: absent)."""
    from dhp.io import resolve

    def read(method: str, name: str) -> pd.DataFrame | None:
        folder = runs.get(method)
        path = resolve(folder) / name if folder else None
        return pd.read_csv(path) if path is not None and path.is_file() else None

    return {"summary": read("dhp", "summary.csv"), "confusion": read("criteria_confusion", "confusion_summary.csv"),
            "agreement": read("decompose_aggregate", "pairwise_agreement.csv"),
            "kappa": read("dual_perspective", "global_kappa.csv"), "local": read("dual_perspective", "local_accuracy.csv"),
            "alignment": read("human_alignment", "alignment.csv")}


def report_card_from_runs(judge: str, mode: str, runs: dict[str, str | os.PathLike | None]) -> pd.DataFrame:
    """The card from run folders: ``runs`` maps a method (METHODS) to the folder holding its tables
    (SOURCES); a missing folder or file means "not run"."""
    return report_card(judge, mode, **_read_sources(runs))


def report_cards_from_runs(runs: dict[str, str | os.PathLike | None], judge: str | None = None,
                           mode: str | None = None) -> pd.DataFrame:
    """The cards of every judge × mode named in the tables (or only ``judge`` / ``mode``), stacked; the pairs
    come from the tables' judge and mode columns, sorted. Empty (CARD_COLUMNS) when no table names one."""
    tables = _read_sources(runs)
    pairs = sorted({(j, m) for t in tables.values() if t is not None and {"judge", "mode"} <= set(t.columns)
                    for j, m in zip(t["judge"].astype(str), t["mode"].astype(str))
                    if (judge is None or j == judge) and (mode is None or m == mode)})
    if judge is not None and mode is not None and not pairs:
        pairs = [(judge, mode)]  # asked for explicitly: its card says what was not run
    cards = [report_card(j, m, **tables) for j, m in pairs]
    return pd.concat(cards, ignore_index=True) if cards else pd.DataFrame(columns=CARD_COLUMNS)


def headline(card: pd.DataFrame) -> pd.DataFrame:
    """One row per judge × mode, one column per method's headline number (the mean over its scopes of:
    D_avg, confusion_index, agreement, kappa, summary_spearman — segment_acc_eq_calibrated for human alignment
    without a summary view), with "not run" where the method did not run."""
    picks = {"dhp": "D_avg", "criteria_confusion": "confusion_index", "decompose_aggregate": "agreement",
             "dual_perspective": "kappa", "human_alignment": "summary_spearman"}
    out = []
    for (judge, mode), g in card.groupby(["judge", "mode"], sort=True):
        row: dict[str, object] = {"judge": judge, "mode": mode}
        for method, measure in picks.items():
            m = g[g["method"] == method]
            if (m["status"] == "not run").all():
                row[method] = "not run"
            else:
                rows = m[m["measure"] == measure]
                if method == "human_alignment" and not len(rows):  # MT runs have only the segment view
                    rows = m[m["measure"] == "segment_acc_eq_calibrated"]
                vals = rows["value"].dropna()
                # no number: say why, as the card's rows do
                row[method] = round(float(vals.mean()), 3) if len(vals) else (
                    rows["status"].iloc[0] if len(rows) else "no usable scores")
        out.append(row)
    return pd.DataFrame(out, columns=["judge", "mode", *picks])

