"""Correlations of a judge's scores with human scores as the HANNA and FRANK papers compute them, and their
resampled versions for the leaderboard's paired bootstrap. Pure: arrays in, numbers out.

- Pearson, Spearman, Kendall τ_b: scipy's ``pearsonr``, ``spearmanr``, ``kendalltau`` (what both upstream
  analyses call), NaN when undefined (a constant vector, fewer than 3 points).
- FRANK's partial correlation (``evaluation/evaluate.py``): the correlation of the residuals of the metric and of
  the human score after a least-squares regression on the one-hot system; with an intercept and a one-hot
  design, the fitted value is the system's mean, so the residual is the value minus its system's mean.
- The Williams test (Williams 1959) of r12 > r13 for correlations sharing variable 1, as FRANK's and HANNA's
  code computes it (one-sided, t with n − 3 degrees of freedom).
- Resampled versions: ``w`` is a k × n matrix of bootstrap counts (how often each unit was drawn in each of k
  draws); each statistic equals the statistic of the data with each unit repeated its count times (copies of a
  unit are tied with each other), computed without materialising the copies.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from dhp.lazy import lazy_module

sps = lazy_module("scipy.stats")  # imported when first used (dhp.lazy)

__all__ = ["correlation", "METHODS", "partial_residuals", "partial_correlation", "williams_test", "counts_of",
           "weighted_pearson", "weighted_midranks", "weighted_spearman", "weighted_kendall", "system_means",
           "columnwise_correlation", "draw_residuals", "row_midranks", "residual_ranks", "resampled_partial"]

METHODS = ("pearson", "spearman", "kendall")


def correlation(x, y, method: str) -> float:
    """scipy's Pearson r, Spearman ρ or Kendall τ_b of x and y; NaN when undefined."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    fn = {"pearson": sps.pearsonr, "spearman": sps.spearmanr, "kendall": sps.kendalltau}[method]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(fn(x, y)[0])


def partial_residuals(x, groups) -> np.ndarray:
    """x minus the mean of its group (the residual of a regression on the one-hot group with an intercept)."""
    x = np.asarray(x, float)
    codes, inverse = np.unique(np.asarray(groups), return_inverse=True)
    means = np.bincount(inverse, weights=x, minlength=len(codes)) / np.bincount(inverse, minlength=len(codes))
    return x - means[inverse]


#: Residuals equal to this many decimals are ties for a rank correlation: y - mean(group) of two units can be equal in
#: exact arithmetic yet differ in the last bits, by an amount that depends on the summation order (BLAS kernel, CPU),
#: which would rank them apart on one machine and as a tie on another.
TIE_DECIMALS = 9


def partial_correlation(x, y, groups, method: str = "pearson") -> float:
    """The correlation of x and y controlling for ``groups`` (FRANK's partial correlation); for a rank correlation
    the residuals are compared to :data:`TIE_DECIMALS` decimals."""
    rx, ry = partial_residuals(x, groups), partial_residuals(y, groups)
    if method != "pearson":
        rx, ry = np.round(rx, TIE_DECIMALS), np.round(ry, TIE_DECIMALS)
    return correlation(rx, ry, method)


def williams_test(r12: float, r13: float, r23: float, n: int) -> tuple[float, float]:
    """(t, one-sided p) of Williams' test that corr(1, 2) > corr(1, 3), given corr(2, 3) and n, as FRANK's
    evaluate.py computes it (it expects r12 >= r13). NaN when n <= 3 or an input is NaN."""
    if n <= 3 or not all(math.isfinite(v) for v in (r12, r13, r23)):
        return math.nan, math.nan
    k = 1 - r12 ** 2 - r13 ** 2 - r23 ** 2 + 2 * r12 * r13 * r23
    den = math.sqrt(2 * k * (n - 1) / (n - 3) + ((r12 + r13) ** 2 / 4) * (1 - r23) ** 3)
    t = (r12 - r13) * math.sqrt((n - 1) * (1 + r23)) / den if den > 0 else math.nan
    return t, (float(1 - sps.t.cdf(t, df=n - 3)) if math.isfinite(t) else math.nan)


# ---------------------------------------------------------------------------------------------- resampled

def counts_of(idx: np.ndarray, n: int) -> np.ndarray:
    """k × n counts of a k × m matrix of drawn positions (0..n-1)."""
    k = idx.shape[0]
    flat = (idx + (np.arange(k) * n)[:, None]).ravel()
    return np.bincount(flat, minlength=k * n).reshape(k, n).astype(float)


def weighted_pearson(x, y, w) -> np.ndarray:
    """Pearson r of x and y (length n, or k × n) with each unit counted w times (k × n): one value per draw."""
    w = np.asarray(w, float)
    total = w.sum(axis=1)
    mx = (w * x).sum(axis=1) / total
    my = (w * y).sum(axis=1) / total
    dx = x - mx[:, None]
    dy = y - my[:, None]
    sxy, sxx, syy = (w * dx * dy).sum(axis=1), (w * dx * dx).sum(axis=1), (w * dy * dy).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = sxy / np.sqrt(sxx * syy)
    return np.where((sxx > 0) & (syy > 0), r, np.nan)


def weighted_midranks(x, w) -> np.ndarray:
    """k × n: the average rank each unit's value has in each draw's resampled data (units counted w times;
    a unit not drawn gets the rank it would have, which its weight 0 makes irrelevant)."""
    x = np.asarray(x, float)
    w = np.asarray(w, float)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])  # groups of equal values
    gc = np.add.reduceat(w[:, order], starts, axis=1)  # k × groups: draws per group
    below = np.cumsum(gc, axis=1) - gc
    mid = below + (gc + 1) / 2
    group_of = np.empty(len(x), dtype=np.int64)
    group_of[order] = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(x)]))
    return mid[:, group_of]


def weighted_spearman(x, y, w, ry: np.ndarray | None = None) -> np.ndarray:
    """Spearman ρ per draw: the weighted Pearson r of the draws' midranks (``ry``: y's, when already known)."""
    rx = weighted_midranks(x, w)
    ry = weighted_midranks(y, w) if ry is None else ry
    return weighted_pearson(rx, ry, w)


def _sign_matrix(x) -> np.ndarray:
    x = np.asarray(x, float)
    return np.sign(x[:, None] - x[None, :]).astype(np.float32)


def _untied_pairs(x, w) -> np.ndarray:
    """Per draw, twice the number of pairs of drawn copies whose x differ (copies of one unit are tied)."""
    x = np.asarray(x, float)
    if len(np.unique(x)) == len(x):  # no ties between units: every pair of copies of different units differs
        return w.sum(axis=1) ** 2 - (w * w).sum(axis=1)
    b = np.abs(_sign_matrix(x))
    return ((w.astype(np.float32) @ b) * w).sum(axis=1)


#: above this many distinct values on both sides, weighted_kendall uses n × n sign matrices
MAX_LEVELS = 64


def _kendall_levels(x, y, w) -> np.ndarray:
    """Kendall τ_b per draw when y takes few distinct values (L): walking the units in x order, a unit of level m
    meets the units before its tie group of x with sign(m − their level), a running sum of the counts — L running
    sums per draw, O(k·n·L) instead of O(k·n²)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    new_group = np.r_[True, xs[1:] != xs[:-1]]
    start = np.maximum.accumulate(np.where(new_group, np.arange(len(xs)), 0))  # first position of each tie group
    levels, code = np.unique(y[order], return_inverse=True)
    ws = np.asarray(w, float)[:, order]
    # units × draws, so the running sums run down contiguous rows; counts and their running sums are integers
    # below 2**24: exact in float32
    wt = np.ascontiguousarray(ws.T, dtype=np.float32)
    zero = np.zeros((1, len(ws)), dtype=np.float32)
    num = np.zeros(len(ws))
    for m in range(len(levels)):
        at = np.flatnonzero(code == m)
        running = np.concatenate([zero, np.cumsum(wt * np.sign(m - code).astype(np.float32)[:, None], axis=0)])
        num += (wt[at].astype(float) * running[start[at]]).sum(axis=0)
    n_tot = ws.sum(axis=1)
    gx = np.add.reduceat(ws, np.flatnonzero(new_group), axis=1)
    gy = np.stack([ws[:, code == m].sum(axis=1) for m in range(len(levels))], axis=1)
    ux = (n_tot ** 2 - (gx ** 2).sum(axis=1)) / 2
    uy = (n_tot ** 2 - (gy ** 2).sum(axis=1)) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((ux > 0) & (uy > 0), num / np.sqrt(ux * uy), np.nan)


def weighted_kendall(x, y, w, y_untied: np.ndarray | None = None) -> np.ndarray:
    """Kendall τ_b per draw of the data with each unit repeated w times: Σ w_i w_j s_ij t_ij over
    sqrt(untied pairs in x × untied pairs in y) (s, t: signs of the pairwise differences). ``y_untied``: y's
    term when already known (it is shared by every judge of a view). When either side takes at most
    :data:`MAX_LEVELS` values (human ratings, LLM ratings) a running-total walk replaces the n × n matrices."""
    w = np.asarray(w, float)
    nx, ny = len(np.unique(x)), len(np.unique(y))
    if min(nx, ny) <= MAX_LEVELS:
        return _kendall_levels(x, y, w) if ny <= nx else _kendall_levels(y, x, w)
    a = _sign_matrix(x) * _sign_matrix(y)
    num = ((w.astype(np.float32) @ a).astype(float) * w).sum(axis=1)
    ux = _untied_pairs(x, w)
    uy = _untied_pairs(y, w) if y_untied is None else y_untied
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = num / np.sqrt(ux * uy)
    return np.where((ux > 0) & (uy > 0), tau, np.nan)


def system_means(matrix, w) -> np.ndarray:
    """S × k: each system's mean over the resampled prompts (matrix: S systems × P prompts; w: k × P counts)."""
    return (np.asarray(matrix, float) @ np.asarray(w, float).T) / np.asarray(w, float).sum(axis=1)


def columnwise_correlation(a, b, method: str) -> np.ndarray:
    """The correlation of a[:, j] and b[:, j] for every column j (S points each, e.g. system means per draw)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if method == "spearman":
        a, b = sps.rankdata(a, axis=0), sps.rankdata(b, axis=0)
    if method in ("pearson", "spearman"):
        da, db = a - a.mean(axis=0), b - b.mean(axis=0)
        sab, saa, sbb = (da * db).sum(axis=0), (da * da).sum(axis=0), (db * db).sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where((saa > 0) & (sbb > 0), sab / np.sqrt(saa * sbb), np.nan)
    i, j = np.triu_indices(a.shape[0], 1)
    sa, sb = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
    na, nb = np.abs(sa).sum(axis=0), np.abs(sb).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((na > 0) & (nb > 0), (sa * sb).sum(axis=0) / np.sqrt(na * nb), np.nan)


def draw_residuals(x, groups, w) -> np.ndarray:
    """k × n: x minus its group's mean in each draw (counts w); 0 where the unit's group was not drawn (weight 0)."""
    x, w = np.asarray(x, float), np.asarray(w, float)
    _, g = np.unique(np.asarray(groups), return_inverse=True)
    onehot = np.zeros((len(x), g.max() + 1))
    onehot[np.arange(len(x)), g] = 1.0
    size = w @ onehot  # k × G draws per group
    means = np.divide((w * x) @ onehot, size, out=np.zeros_like(size), where=size > 0)
    return np.where(w > 0, x - means[:, g], 0.0)


def resampled_partial(x, y, groups, w, method: str, ry: np.ndarray | None = None) -> np.ndarray:
    """FRANK's partial correlation per draw: residuals from each draw's (count-weighted) system means, then the
    weighted Pearson r, or Spearman ρ of the residuals' midranks in the draw (``ry``: y's residuals, or for
    Spearman their midranks (:func:`row_midranks`), when known: shared by every judge of a view)."""
    w = np.asarray(w, float)
    rx = draw_residuals(x, groups, w)
    if method == "pearson":
        return weighted_pearson(rx, draw_residuals(y, groups, w) if ry is None else ry, w)
    # the residuals change per draw: rank each draw's own
    ranks_y = residual_ranks(draw_residuals(y, groups, w), w) if ry is None else ry
    return weighted_pearson(residual_ranks(rx, w), ranks_y, w)


def residual_ranks(r: np.ndarray, w: np.ndarray) -> np.ndarray:
    """:func:`row_midranks` of draw residuals, equal to :data:`TIE_DECIMALS` decimals counted as ties (as
    :func:`partial_correlation` compares them)."""
    return row_midranks(np.round(r, TIE_DECIMALS), w)


def row_midranks(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """k × n: the average rank of x[d, i] among draw d's values, each unit counted w[d, i] times."""
    k, n = x.shape
    order = np.argsort(x, axis=1)  # equal values form one group whatever their order: no stable sort needed
    xs = np.take_along_axis(x, order, axis=1)
    ws = np.take_along_axis(w, order, axis=1)
    new = np.ones((k, n), dtype=bool)
    new[:, 1:] = xs[:, 1:] != xs[:, :-1]
    gid = np.cumsum(new, axis=1) - 1  # each row's groups of equal values, 0..
    flat = (gid + (np.arange(k) * n)[:, None]).ravel()
    gc = np.bincount(flat, weights=ws.ravel(), minlength=k * n).reshape(k, n)  # draws per group
    mid = np.cumsum(gc, axis=1) - gc + (gc + 1) / 2
    out = np.empty((k, n))
    np.put_along_axis(out, order, np.take_along_axis(mid, gid, axis=1), axis=1)
    return out
