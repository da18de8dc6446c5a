"""Significance clusters and ranks of judges, as in the WMT metrics findings (mt-metrics-eval
``data.AssignRanks``).

Judges are sorted by decreasing value (name breaks ties). Walking down the list, judge i opens a new cluster
(rank + 1) when some judge of the current cluster — from the cluster's first judge to i - 1 — beats it
significantly (one-sided p <= alpha); otherwise it joins the current cluster. So rank r holds the judges not
significantly beaten by any other judge of rank r, each beaten by a judge of a better rank or first. Only
judges ranked above are compared with a judge, and no multiplicity adjustment is made (as WMT).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dhp.errors import DHPError

__all__ = ["assign_ranks", "significance_ranks", "RANK_COLUMNS"]

RANK_COLUMNS = ["judge", "value", "position", "rank"]


def assign_ranks(p_better: np.ndarray, alpha: float = 0.05) -> list[int]:
    """Cluster ranks for judges already sorted best first: ``p_better[i, j]`` (i < j) is the one-sided
    p-value that judge i beats judge j (entries with i >= j are ignored; NaN is never significant)."""
    p = np.asarray(p_better, dtype=float)
    if p.ndim != 2 or p.shape[0] != p.shape[1]:
        raise DHPError(f"p_better must be a square matrix, got shape {p.shape}.", "pass judges × judges p-values.")
    ranks, rank, start = [], 1, 0
    for i in range(len(p)):
        if (p[start:i, i] <= alpha).any():  # NaN compares False: not significant
            rank, start = rank + 1, i
        ranks.append(rank)
    return ranks


def significance_ranks(values, pairs: pd.DataFrame, alpha: float = 0.05, p_column: str = "p_a_better") -> pd.DataFrame:
    """Ranks from judges' values (mapping or Series judge -> value) and a pair table with judge_a, judge_b
    and ``p_column`` (the one-sided p-value that judge_a beats judge_b, e.g. ``permutation_table``'s).
    Judges with no finite value come last with rank NaN. Returns RANK_COLUMNS (position: 1 = best value)."""
    values = pd.Series(values, dtype=float)
    missing = {"judge_a", "judge_b", p_column} - set(pairs.columns)
    if missing:
        raise DHPError(f"The pair table lacks columns {sorted(missing)}.", "pass permutation_table's output.")
    finite = values[np.isfinite(values.to_numpy())]
    ordered = sorted(finite.index, key=lambda j: (-finite[j], str(j)))
    lookup = {(a, b): p for a, b, p in zip(pairs["judge_a"], pairs["judge_b"], pairs[p_column])}
    n = len(ordered)
    mat = np.full((n, n), math.nan)
    for i in range(n):
        for j in range(i + 1, n):
            key = (ordered[i], ordered[j])
            if key not in lookup:
                raise DHPError(f"No test of {ordered[i]!r} against {ordered[j]!r} (the better-valued first).",
                               "test every pair of judges (permutation_table orders each pair best first).")
            mat[i, j] = lookup[key]
    ranks = assign_ranks(mat, alpha)
    rows = [{"judge": j, "value": float(finite[j]), "position": i + 1, "rank": ranks[i]} for i, j in enumerate(ordered)]
    rows += [{"judge": j, "value": math.nan, "position": math.nan, "rank": math.nan}
             for j in sorted(set(values.index) - set(ordered), key=str)]
    return pd.DataFrame(rows, columns=RANK_COLUMNS)
