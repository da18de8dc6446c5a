"""Failed judge replies: the failures table and per-metric failure rates."""

from __future__ import annotations


import pandas as pd

from dhp.errors import DHPError


def failure_summary(scores: pd.DataFrame) -> pd.DataFrame:
    """Parse/call failures per (judge, mode, metric).

    Columns: judge, mode, metric; rows (score rows); calls (replies asked for: n_valid + n_failed);
    n_failed; failure_rate (n_failed / calls); nan_rows (rows whose score is NaN)."""
    cols = ["judge", "mode", "metric", "rows", "calls", "n_failed", "failure_rate", "nan_rows"]
    if scores.empty:
        return pd.DataFrame(columns=cols)
    g = scores.assign(calls=scores["n_valid"] + scores["n_failed"], nan_row=scores["score"].isna())
    out = g.groupby(["judge", "mode", "metric"], sort=True).agg(
        rows=("score", "size"), calls=("calls", "sum"), n_failed=("n_failed", "sum"), nan_rows=("nan_row", "sum"))
    out["failure_rate"] = out["n_failed"] / out["calls"].where(out["calls"] > 0)
    return out.reset_index()[cols]


FAILURE_COLUMNS = ["dataset", "task", "judge", "mode", "item_id", "perturbation", "severity", "metric",
                   "n_valid", "n_failed", "score", "failure"]


def failures_table(scores: pd.DataFrame) -> pd.DataFrame:
    """One row per (item, variant, metric) with at least one failed reply, with its reason (the
    scores table's ``failure`` column): what ``failures.csv`` holds. Columns: FAILURE_COLUMNS."""
    if "failure" not in scores.columns:
        raise DHPError("The scores table has no 'failure' column.", "rescore it with this version of dhp.judging.")
    bad = scores[scores["n_failed"] > 0]
    return bad[[c for c in FAILURE_COLUMNS if c in bad.columns]].reset_index(drop=True)
