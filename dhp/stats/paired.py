"""Paired comparisons of judges on the same items, and intervals from resampling items.

- ``mcnemar_exact``: two judges' binary correctness on the same items (e.g. LLMBar verdicts). Only the
  discordant items carry information: n_ab (a right, b wrong) and n_ba; under H0 n_ab ~ Binomial(n_ab +
  n_ba, 1/2), two-sided p = min(1, 2 P(X <= min(n_ab, n_ba))).
- ``holm``: Holm's step-down adjustment within a family (a view): sorted p_(1) <= ... <= p_(m),
  adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)); NaN p-values are not part of the family.
- ``paired_bootstrap``: a per-item statistic (e.g. a mean of per-item scores) of two judges on the same
  items, items resampled with replacement, the same draw for both judges (percentile intervals for each and
  for the difference, and a two-sided p-value for "no difference").
- ``item_bootstrap_draws`` / ``segment_bootstrap``: the segment statistics (tau_b, acc_eq, acc*_eq) of
  several judges on resampled items (every system of a drawn item kept; one draw matrix for every judge,
  so differences between judges are paired). acc*_eq re-optimises its threshold on every resample.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from dhp.errors import DHPError
from dhp.stats.multitest import adjust
from dhp.stats.resample import MIN_RESAMPLE_UNITS
from dhp.stats.permutation import STATISTICS
from dhp.stats import segment
from dhp.stats.segment import SegmentPairs, _pair_terms, sweep_order
from dhp.lazy import lazy_module

sps = lazy_module("scipy.stats")  # imported when first used (dhp.lazy)

__all__ = ["mcnemar_exact", "holm", "paired_bootstrap", "percentile_interval", "item_bootstrap_draws",
           "segment_bootstrap"]


def mcnemar_exact(correct_a, correct_b) -> dict:
    """Exact (binomial) McNemar test of two judges' correctness on the same items. Items where either is
    missing (NaN) are left out. Returns n (items), n_ab (a right, b wrong), n_ba, accuracy_a, accuracy_b
    and p_value (two-sided; 1.0 when no item is discordant: no evidence of a difference)."""
    a, b = np.asarray(correct_a, dtype=float), np.asarray(correct_b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise DHPError(f"correct_a {a.shape} and correct_b {b.shape} must be one value per item, same items.",
                       "pass two equally long 0/1 (or boolean) arrays over the same items.")
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if not np.isin(a, (0, 1)).all() or not np.isin(b, (0, 1)).all():
        raise DHPError("McNemar's test needs correctness coded 0/1 (or booleans).", "pass 0/1 per item.")
    n_ab, n_ba = int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())
    n_disc = n_ab + n_ba
    p = min(1.0, 2 * sps.binom.cdf(min(n_ab, n_ba), n_disc, 0.5)) if n_disc else 1.0
    return {"n": int(len(a)), "n_ab": n_ab, "n_ba": n_ba,
            "accuracy_a": float(a.mean()) if len(a) else math.nan,
            "accuracy_b": float(b.mean()) if len(b) else math.nan, "p_value": float(p)}


def holm(pvalues) -> np.ndarray:
    """Holm-adjusted p-values in the input order (NaN stays NaN and does not count in the family); the one
    implementation is :func:`dhp.stats.multitest.adjust`."""
    return adjust(np.asarray(pvalues, dtype=float), "holm")


def percentile_interval(boots, n_units: int, ci: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the finite resampled values; NaN with fewer than MIN_RESAMPLE_UNITS resampling
    units (a resample of one item is that item, of two one of three sets: the interval would claim a certainty
    the data do not have) or no finite value."""
    boots = np.asarray(boots, dtype=float)
    boots = boots[np.isfinite(boots)]
    if n_units < MIN_RESAMPLE_UNITS or not len(boots):
        return math.nan, math.nan
    lo, hi = np.percentile(boots, [100 * (1 - ci) / 2, 100 * (1 + ci) / 2])
    return float(lo), float(hi)


def no_width(lo: float, hi: float) -> bool:
    """Whether a finite interval has no width (up to rounding: a resampled mean of equal values differs from them in
    its last bits): every resample gave the same value, which says nothing about the value's precision."""
    return math.isfinite(lo) and abs(hi - lo) <= 1e-12 * max(1.0, abs(lo))


def wilson_interval(k: float, n: int, ci: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of ``k`` successes in ``n`` trials: the interval of a proportion that keeps a width
    where every trial agrees (k = 0 or n), where a bootstrap of the trials has no spread at all. NaN for n = 0."""
    if n <= 0:
        return math.nan, math.nan
    from scipy.stats import norm

    z = float(norm.ppf((1 + ci) / 2))
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    # at k = 0 (k = n) the bound is exactly 0 (1); mid - half leaves rounding noise (2.8e-17) in a table
    return (0.0 if k <= 0 else max(0.0, mid - half)), (1.0 if k >= n else min(1.0, mid + half))


def paired_bootstrap(values_a, values_b, statistic: Callable[[np.ndarray], float] = np.mean, k: int = 1000,
                     seed: int = 0, ci: float = 0.95) -> dict:
    """Paired bootstrap over items of ``statistic`` for two judges. ``values_a`` / ``values_b``: per-item
    values (first axis = the same items in the same order; further axes allowed), ``statistic`` maps such an
    array to a number. Each draw resamples items with replacement, the same items for both judges.

    Returns value_a, value_b, delta (a - b), their percentile intervals (a_lo, a_hi, b_lo, b_hi, delta_lo,
    delta_hi) and p_two_sided = (1 + #{|Δ* - Δ| >= |Δ|}) / (1 + k), the bootstrap test of Δ = 0 that centres
    the resampled differences on the null (Hall & Wilson 1991). Intervals are NaN with fewer than 2 items."""
    a, b = np.asarray(values_a), np.asarray(values_b)
    if a.shape[:1] != b.shape[:1] or a.ndim == 0:
        raise DHPError(f"values_a ({a.shape}) and values_b ({b.shape}) must list the same items.",
                       "pass per-item values of both judges over the same items (first axis).")
    n = len(a)
    va, vb = float(statistic(a)), float(statistic(b))
    out = {"value_a": va, "value_b": vb, "delta": va - vb, "n": n}
    idx = np.random.default_rng(seed).integers(0, n, size=(k, n)) if n else np.zeros((k, 0), int)
    ba = np.array([statistic(a[i]) for i in idx], dtype=float)
    bb = np.array([statistic(b[i]) for i in idx], dtype=float)
    for name, boots in (("a", ba), ("b", bb), ("delta", ba - bb)):
        out[f"{name}_lo"], out[f"{name}_hi"] = percentile_interval(boots, n, ci)
    d = (ba - bb)[np.isfinite(ba - bb)]
    delta = va - vb
    out["p_two_sided"] = (float((1 + np.sum(np.abs(d - delta) >= abs(delta) - 1e-12)) / (1 + len(d)))
                          if n >= 2 and len(d) and math.isfinite(delta) else math.nan)
    return out


def item_bootstrap_draws(n_items: int, k: int = 1000, seed: int = 0) -> np.ndarray:
    """k × n_items multiplicities: how often each item is drawn when n_items items are drawn with
    replacement (item order: sorted item ids, as ``np.unique``)."""
    if n_items < 1 or k < 1:
        raise DHPError(f"Bootstrap draws need items >= 1 and k >= 1 (got {n_items}, {k}).", "pass scored items.")
    idx = np.random.default_rng(seed).integers(0, n_items, size=(k, n_items))
    return np.stack([np.bincount(r, minlength=n_items) for r in idx])


def _acc_boot(h, x, pairs: SegmentPairs, item_of_pair, counts, calibrate: bool) -> np.ndarray:
    """acc_eq / acc*_eq per draw: the mean over drawn items (with multiplicity) of each item's share."""
    absd, base, delta = _pair_terms(h, x, pairs)
    n_pairs_item = np.bincount(item_of_pair, minlength=counts.shape[1]).astype(float)
    has = n_pairs_item > 0
    w_item = np.zeros(len(n_pairs_item))
    w_item[has] = 1.0 / n_pairs_item[has]
    base_item = np.bincount(item_of_pair, weights=base.astype(float), minlength=counts.shape[1]) * w_item
    denom = counts[:, has].sum(axis=1).astype(float)  # drawn items that have pairs
    out = (counts @ base_item) / np.where(denom > 0, denom, np.nan)
    if not calibrate:
        return out
    order = sweep_order(absd, delta)  # prefix max = threshold max
    it = item_of_pair[order]
    wd = delta[order] * w_item[it]
    for t in range(len(counts)):
        gain = np.cumsum(wd * counts[t, it]).max() if len(order) else 0.0
        out[t] += max(gain, 0.0) / denom[t] if denom[t] > 0 else math.nan
    return out


def _tau_boot(h, x, code, counts, out) -> np.ndarray:
    """tau_b per draw over the rows of the drawn items (a row drawn c times enters c times). A resample's
    sorted order is the judge's presorted order with each row repeated by its item's count: O(n) per draw
    plus scipy's discordant-pair count (kendalltau on the repeated rows without scipy's private counter)."""
    _, y, _ = np.unique(h, return_inverse=True, return_counts=True)
    y = (y + 1).astype(np.intp)
    orders = [np.lexsort((y, xn)) for xn in x]
    for t, c in enumerate(counts):
        mult = c[code]
        if mult.sum() < 2:
            continue
        level = np.bincount(y, weights=mult).astype(np.int64)
        n2 = int((level * (level - 1) // 2).sum())
        for n, order in enumerate(orders):
            rows = np.repeat(order, mult[order])
            if segment._kendall_dis is None:
                out[n, t] = segment.kendall_tau_b(h[rows], x[n, rows])
            else:
                out[n, t] = segment.tau_b_of_sorted(x[n, rows], y[rows], n2)
    return out


def segment_bootstrap(human, scores, groups, statistic: str, k: int = 1000, seed: int = 0,
                      counts: np.ndarray | None = None) -> np.ndarray:
    """Resampled segment statistics, judges × k: items drawn with replacement (``counts``: k × items
    multiplicities from ``item_bootstrap_draws``, item order = sorted ids; overrides k and seed), every
    system of a drawn item kept, the same draws for every judge. ``scores``: judges × rows. Rows where the
    human or any judge lacks a finite score are left out. tau_b is over the rows of the drawn items (an
    item drawn twice contributes its rows twice); acc_eq / acc*_eq are means over drawn items, acc*_eq with
    its threshold re-optimised per draw."""
    if statistic not in STATISTICS:
        raise DHPError(f"Unknown segment statistic {statistic!r}.", f"use one of {list(STATISTICS)}.")
    h = np.asarray(human, dtype=float)
    x = np.atleast_2d(np.asarray(scores, dtype=float))
    g = np.asarray(groups)
    if x.shape[1] != len(h) or len(g) != len(h):
        raise DHPError(f"scores {x.shape}, human ({len(h)}) and groups ({len(g)}) do not line up.",
                       "pass judges × rows scores and one human score and item id per row.")
    items, code = np.unique(g, return_inverse=True)
    if counts is None:
        counts = item_bootstrap_draws(len(items), k, seed)
    elif counts.shape[1] != len(items):
        raise DHPError(f"counts has {counts.shape[1]} items, the data {len(items)}.", "draw over the same items.")
    ok = np.isfinite(h) & np.isfinite(x).all(axis=0)
    h, x, code = h[ok], x[:, ok], code[ok]
    out = np.full((len(x), len(counts)), math.nan)
    if statistic == "tau_b":
        return _tau_boot(h, x, code, counts, out)
    pairs = SegmentPairs.from_groups(code)
    if not len(pairs):
        return out
    item_of_pair = code[pairs.i]
    for n in range(len(x)):
        out[n] = _acc_boot(h, x[n], pairs, item_of_pair, counts, statistic == "acc_eq_calibrated")
    return out
