"""Segment-level agreement of a metric (a judge's scores) with human scores, as in MT meta-evaluation.

Inputs are parallel 1-D arrays over rows (one row = one system's output on one item/segment): ``human``,
``metric`` and, for the pairwise accuracies, ``groups`` (the item of each row). Rows where the human or
the metric score is not finite are left out (mt-metrics-eval drops rows without a gold score; its metrics
score every row).

- ``kendall_tau_b``: Kendall's tau-b over all rows, no grouping (WMT22's segment-level tau),
  tau_b = (C - D) / sqrt((n0 - n1)(n0 - n2)), n0 = n(n-1)/2, n1 / n2 = pairs tied in metric / human.
- ``pairwise_accuracy``: acc_eq (Deutsch et al. 2023, "Ties Matter"), grouped by item: for every pair of
  rows of the same item, the pair is *correct* when the metric orders it as the humans do, where a metric
  difference |Δm| <= ε counts as a metric tie and a tie is correct only when the humans tie too
  (ε = 0: exact ties). The value is the mean over items of the item's share of correct pairs
  (mt-metrics-eval's ``average_by="item"``); with equally many pairs per item this is the pooled share.
- ``tie_calibrated_accuracy``: acc*_eq = max over ε of acc_eq(ε), with ε searched over {0} and every
  |Δm| of the pairs (the tie calibration of Deutsch et al. 2023; mt-metrics-eval ``KendallWithTiesOpt``,
  variant "acc23", sample_rate 1). Returns (value, ε), ε the smallest threshold reaching the maximum.

The ε search sorts all |Δm| once and sweeps thresholds with cumulative counts: raising ε past a pair's
|Δm| turns it into a metric tie, which changes its correctness by δ = +1 (human tie: now right) or -1
(pair the metric ordered correctly: now wrong); acc_eq(ε) = acc_eq(0) + Σ_{|Δm| <= ε} w δ, so the best ε
is a prefix maximum: O(P log P) for P pairs instead of re-scoring every pair for every candidate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dhp.errors import DHPError
from dhp.lazy import lazy_module

sps = lazy_module("scipy.stats")  # imported when first used (dhp.lazy)


def __getattr__(name: str):
    """``_kendall_dis``: scipy's Fenwick-tree count of discordant pairs (private; checked against kendalltau in the
    tests), or None in a scipy without it (callers then use scipy.stats.kendalltau). Looked up on first use, as
    it comes with all of scipy.stats (dhp.lazy)."""
    if name != "_kendall_dis":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from scipy.stats._stats import _kendall_dis
    except ImportError:  # pragma: no cover - a scipy without it
        _kendall_dis = None
    globals()["_kendall_dis"] = _kendall_dis
    return _kendall_dis


__all__ = ["SegmentPairs", "JudgeScores", "judge_scores", "kendall_tau_b", "pairwise_accuracy",
           "tie_calibrated_accuracy", "finite_rows", "sweep_order", "tau_b_of_sorted"]


def _as_float(name: str, x) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim != 1:
        raise DHPError(f"{name} must be one score per row (1-D), got shape {a.shape}.", "pass a flat array or column.")
    return a


def finite_rows(human, metric, groups=None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The rows where both scores are finite (others cannot be compared), as float arrays."""
    h, m = _as_float("human", human), _as_float("metric", metric)
    if len(h) != len(m) or (groups is not None and len(groups) != len(h)):
        raise DHPError(f"human ({len(h)}), metric ({len(m)}) and groups "
                       f"({'-' if groups is None else len(groups)}) differ in length.",
                       "pass one value per row in each array.")
    ok = np.isfinite(h) & np.isfinite(m)
    g = None if groups is None else np.asarray(groups)[ok]
    return h[ok], m[ok], g


@dataclass(frozen=True)
class SegmentPairs:
    """Every pair of rows of the same item: the units of the pairwise accuracies.

    ``i``, ``j``: row indices of each pair (i < j); ``group``: the item code of each pair (0..n_groups-1,
    items with fewer than two rows have no pairs and do not count); ``weight``: each pair's weight in the
    mean over items, 1 / (pairs of its item × items with pairs); ``uniform``: every item has as many pairs
    (then counts are exact integers and weight = 1 / n_pairs)."""

    i: np.ndarray
    j: np.ndarray
    group: np.ndarray
    n_groups: int
    weight: np.ndarray
    uniform: bool

    @classmethod
    def from_groups(cls, groups) -> "SegmentPairs":
        groups = np.asarray(groups)
        if groups.ndim != 1:
            raise DHPError("groups must be one item id per row.", "pass a flat array of item ids.")
        if not len(groups):  # no scored row: no pair (statistics over it are NaN)
            empty = np.zeros(0, dtype=np.intp)
            return cls(empty, empty, empty, 0, np.zeros(0), False)
        _, code = np.unique(groups, return_inverse=True)
        order = np.argsort(code, kind="stable")
        sizes = np.bincount(code)
        starts = np.r_[0, np.cumsum(sizes)[:-1]]
        pos = np.arange(len(code)) - np.repeat(starts, sizes)  # position of each sorted row in its item
        later = np.repeat(sizes, sizes) - 1 - pos  # rows after it in its item: its partners
        first = np.repeat(np.arange(len(code)), later)
        offset = np.arange(len(first)) - np.repeat(np.cumsum(later) - later, later)
        i, j = order[first], order[first + 1 + offset]
        pair_group = code[i]
        per_group = sizes * (sizes - 1) // 2
        used = np.flatnonzero(per_group > 0)
        remap = np.full(len(sizes), -1)
        remap[used] = np.arange(len(used))
        pair_group = remap[pair_group]
        n_pairs = per_group[used]
        weight = (1.0 / (n_pairs[pair_group] * len(used))) if len(used) else np.zeros(0)
        uniform = bool(len(used)) and bool((n_pairs == n_pairs[0]).all())
        return cls(i.astype(np.intp), j.astype(np.intp), pair_group.astype(np.intp), int(len(used)), weight, uniform)

    def __len__(self) -> int:
        return len(self.i)


def kendall_tau_b(human, metric) -> float:
    """Kendall's tau-b over all rows with finite scores (no grouping); NaN for fewer than two rows or a
    constant input (undefined, never 0). scipy.stats.kendalltau computes it."""
    h, m, _ = finite_rows(human, metric)
    if len(h) < 2 or np.ptp(h) == 0 or np.ptp(m) == 0:
        return math.nan
    return float(sps.kendalltau(h, m)[0])


def tau_b_of_sorted(x: np.ndarray, y: np.ndarray, n2: int) -> float:
    """tau_b of rows already sorted by (x, y): ``y`` dense human ranks from 1, ``n2`` the pairs tied in the
    human scores. tau_b = (n0 - n1 - n2 + n3 - 2 D) / sqrt((n0 - n1)(n0 - n2)), computed as scipy does (D:
    discordant pairs by scipy's Fenwick tree; n1 / n3: pairs tied in x / in both). Lets resampling code
    that can produce the sorted order in O(n) skip kendalltau's two sorts. Needs ``_kendall_dis``."""
    n = len(x)
    n0 = n * (n - 1) // 2
    new_x = np.r_[True, x[1:] != x[:-1]]
    kendall_dis = globals()["_kendall_dis"] if "_kendall_dis" in globals() else __getattr__("_kendall_dis")
    dis = kendall_dis(np.cumsum(new_x, dtype=np.intp), y)
    runs = np.diff(np.flatnonzero(np.r_[new_x, True])).astype(np.int64)
    n1 = int((runs * (runs - 1) // 2).sum())
    runs = np.diff(np.flatnonzero(np.r_[new_x | np.r_[True, y[1:] != y[:-1]], True])).astype(np.int64)
    n3 = int((runs * (runs - 1) // 2).sum())
    if n < 2 or n1 == n0 or n2 == n0:
        return math.nan
    tau = (n0 - n1 - n2 + n3 - 2 * int(dis)) / np.sqrt(n0 - n1) / np.sqrt(n0 - n2)
    return float(min(1.0, max(-1.0, tau)))


def _pair_terms(h: np.ndarray, m: np.ndarray, pairs: SegmentPairs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per pair: |Δm|, correct at ε = 0 (exact ties) and δ, the change in correctness once |Δm| <= ε."""
    sh = np.sign(h[pairs.i] - h[pairs.j])
    dm = m[pairs.i] - m[pairs.j]
    sm = np.sign(dm)
    base = sm == sh  # exact ties: a pair is right when both order it the same way or both tie
    delta = np.where(sh == 0, (sm != 0).astype(np.int8), -((sm == sh) & (sm != 0)).astype(np.int8))
    return np.abs(dm), base, delta


def pairwise_accuracy(human, metric, groups, epsilon: float = 0.0) -> float:
    """acc_eq with tie threshold ``epsilon`` (0: exact ties), mean over items of the share of correct
    pairs (see the module docstring). NaN when no item has two rows."""
    if not epsilon >= 0:
        raise DHPError(f"epsilon must be >= 0, got {epsilon}.", "pass a non-negative tie threshold.")
    h, m, g = finite_rows(human, metric, groups)
    pairs = SegmentPairs.from_groups(g)
    if not len(pairs):
        return math.nan
    absd, base, delta = _pair_terms(h, m, pairs)
    correct = base + (absd <= epsilon) * delta
    if pairs.uniform:  # integer counts: exact
        return float(correct.sum() / len(pairs))
    return float(np.dot(pairs.weight, correct))


def sweep_order(absd: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Indices of the pairs with δ != 0 sorted by |Δm|, losses (δ < 0) before gains among equal |Δm|.

    With that order any prefix ending inside a run of equal |Δm| sums to at most the larger of the sums
    before and after the run, so the maximum over prefixes is the maximum over thresholds. (One unstable
    sort, then only the tied runs re-sorted by δ: several times faster than a two-key lexsort.)"""
    nz = np.flatnonzero(delta)
    order = nz[np.argsort(absd[nz])]
    d = absd[order]
    tied = np.r_[d[1:] == d[:-1], False] | np.r_[False, d[1:] == d[:-1]]
    if tied.any():
        at = np.flatnonzero(tied)
        run = np.cumsum(np.r_[True, d[1:] != d[:-1]])[at]
        order[at] = order[at][np.lexsort((delta[order[at]], run))]
    return order


def _sweep(absd: np.ndarray, delta: np.ndarray, weight: np.ndarray) -> tuple[float, float]:
    """Best gain over the baseline and its threshold: max over ε in {0} ∪ {|Δm|} of Σ_{|Δm|<=ε} w δ."""
    order = sweep_order(absd, delta)
    if not len(order):
        return 0.0, 0.0
    gains = np.cumsum(weight[order] * delta[order])
    d = absd[order]
    ends = np.flatnonzero(np.r_[d[1:] != d[:-1], True])  # a threshold turns every pair at that |Δm| into a tie
    at = gains[ends]
    best = at.max()
    if best <= 1e-12:  # float sums of exact ties: no threshold beats exact ties (ε = 0, as mt-metrics-eval)
        return 0.0, 0.0
    k = int(np.flatnonzero(at >= best - 1e-12)[0])  # the smallest threshold reaching the maximum
    return float(best), float(d[ends[k]])


def tie_calibrated_accuracy(human, metric, groups) -> tuple[float, float]:
    """acc*_eq and its tie threshold ε: (max over ε of pairwise_accuracy(ε), the smallest such ε), ε in
    the metric's units. (NaN, NaN) when no item has two rows."""
    h, m, g = finite_rows(human, metric, groups)
    pairs = SegmentPairs.from_groups(g)
    if not len(pairs):
        return math.nan, math.nan
    absd, base, delta = _pair_terms(h, m, pairs)
    w = np.full(len(pairs), 1.0) if pairs.uniform else pairs.weight
    gain, eps = _sweep(absd, delta, w)
    if pairs.uniform:  # integer counts: the maximum and its threshold are exact
        return float((base.sum() + gain) / len(pairs)), eps
    return float(np.dot(pairs.weight, base) + gain), eps


@dataclass(frozen=True)
class JudgeScores:
    """Several judges' scores on the same rows: ``human`` (n,), ``scores`` (judges × n), ``groups`` (n,:
    the item of each row), ``judges`` (names, in the order of ``scores``' rows), ``dropped``: rows left
    out because the human or some judge had no finite score there (every judge is compared on the same
    rows)."""

    human: np.ndarray
    scores: np.ndarray
    groups: np.ndarray
    judges: list
    dropped: int


def judge_scores(df: pd.DataFrame, item: str = "seg_id", system: str = "system", judge: str = "judge", score: str = "score",
                 human: str = "human") -> JudgeScores:
    """Long format -> aligned arrays. ``df``: one row per (item, system, judge) with the judge's ``score``
    and the ``human`` score of that (item, system) (repeated for every judge). Rows sorted by item, then
    system; rows where any judge or the human lacks a finite score are dropped (``dropped`` counts them)."""
    missing = {item, system, judge, score, human} - set(df.columns)
    if missing:
        raise DHPError(f"The segment-score table lacks columns {sorted(missing)}.",
                       f"pass one row per ({item}, {system}, {judge}) with {score} and {human} columns.")
    if df.duplicated([item, system, judge]).any():
        raise DHPError(f"The segment-score table has several rows for one ({item}, {system}, {judge}).",
                       "keep one score per judge, item and system (e.g. average repeated samples first).")
    hum = df.groupby([item, system], sort=True)[human].agg(["min", "max"])
    if not np.allclose(hum["min"].to_numpy(float), hum["max"].to_numpy(float), equal_nan=True):
        raise DHPError(f"The {human} score differs between judges' rows of the same ({item}, {system}).",
                       "give every judge's row of an output the same human score.")
    wide = df.pivot(index=[item, system], columns=judge, values=score).sort_index()
    h = hum["min"].reindex(wide.index).to_numpy(float)
    x = wide.to_numpy(float).T
    ok = np.isfinite(h) & np.isfinite(x).all(axis=0)
    return JudgeScores(h[ok], x[:, ok], wide.index.get_level_values(0).to_numpy()[ok], list(wide.columns),
                       int((~ok).sum()))
