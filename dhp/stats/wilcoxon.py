"""One-sided Wilcoxon signed-rank tests (H1: the differences lean positive), many at once.

:func:`wilcoxon_greater_many` is the one implementation: every row of a (tests × pairs) matrix of
differences is a test, ranked together in one array pass; :func:`wilcoxon_greater` is one row of it.
DHP's discernment (dhp.analysis.discernment: the point tests, the item bootstrap, the sign-flip null)
and criteria confusion (dhp.analysis.confusion) all call these.

The p-values are those of ``scipy.stats.wilcoxon(d, alternative="greater", zero_method=...,
correction=..., method=...)`` with the null distribution chosen by scipy's ``method="auto"`` rule (see
:func:`resolve`), and the null actually used is recorded per test:

- ``"exact"``: scipy's exact null (no ties, no zeros); it depends on n and T+ only, so scipy is asked
  once per n, with one row per distinct T+;
- ``"permutation"``: all 2^k sign patterns of the k nonzero differences (k <= 13), enumerated as scipy's
  ``PermutationMethod`` does, for every test of a batch in one matrix product;
- ``"asymptotic"``: the normal approximation of T+ with scipy's tie correction and Pratt's zero
  adjustment, p = erfc(z / √2) / 2.

A sign-flip null (``flips``) reuses the ranks: flipping signs leaves |d|, hence the ranks, the ties, the
zeros and the null distribution unchanged, so T+ of every pattern is one matrix product.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from dhp.lazy import lazy_module

sps = lazy_module("scipy.stats")  # imported when first used (dhp.lazy)

__all__ = ["METHODS", "ZERO_METHODS", "TestResult", "WilcoxonTests", "resolve", "resolve_method",
           "wilcoxon_greater", "wilcoxon_greater_many"]

ZERO_METHODS = ("wilcox", "pratt", "zsplit")
METHODS = ("auto", "exact", "asymptotic", "approx", "permutation")


def __getattr__(name: str):
    """``SCIPY_ASYMPTOTIC``: scipy's name of the normal approximation ("approx" in older scipy, "asymptotic" in
    newer), asked of scipy on first use (scipy.stats is imported when first used: dhp.lazy)."""
    if name != "SCIPY_ASYMPTOTIC":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        sps.wilcoxon([1.0, 2.0, 3.0], method="asymptotic")
        value = "asymptotic"
    except ValueError:  # pragma: no cover - depends on the installed scipy
        value = "approx"
    globals()[name] = value
    return value


#: scipy's rule: up to this many pairs the exact null (no ties or zeros); up to PERMUTATION_MAX_N pairs
#: with ties or zeros, all sign patterns (2^13 < scipy's default 9999 resamples, so it enumerates).
EXACT_MAX_N = 50
PERMUTATION_MAX_N = 13

#: Cells of the (tests × pairs) matrix ranked per slice: small temporaries are reused instead of fresh
#: memory for every one (page faults made a single pass over a 10^7-cell matrix twice as slow).
_SLICE_CELLS = 1 << 18


@dataclass
class TestResult:
    """Outcome of one one-sided Wilcoxon test (original > perturbed)."""

    p: float
    n_pairs: int
    n_nonzero: int
    n_dropped_nan: int
    method_used: str
    flags: list[str] = field(default_factory=list)


@dataclass
class WilcoxonTests:
    """Outcome of many tests (one per row of the differences).

    p: (tests,), or (tests, patterns) with sign flips; NaN without a pair, 1 when every difference is 0.
    method_used: "exact", "permutation", "asymptotic", or "none" (no pair, or all differences zero).
    flags: a tuple per test: ("no_pairs",), ("all_zero",), ("exact_fallback",) — scipy's exact null is
    wrong with ties or zeros, so method="exact" falls back like "auto" — or ("permutation_too_large",).
    n_pairs, n_nonzero: usable pairs and nonzero differences per test.
    """

    p: np.ndarray
    method_used: np.ndarray
    flags: np.ndarray
    n_pairs: np.ndarray
    n_nonzero: np.ndarray


def resolve(n: int, ties_or_zeros: bool, method: str) -> tuple[str, list[str]]:
    """The null distribution for `n` pairs, given whether ranked values tie or a difference is zero.

    Mirrors scipy's ``method="auto"`` (exact null for n <= 50 without ties or zeros; every sign pattern
    for n <= 13 otherwise; the normal approximation for the rest), so that the method actually used can be
    recorded whatever the scipy version. ``method="exact"`` with ties or zeros is never run (scipy's exact
    null is wrong then): it falls back like "auto" and is flagged. Returns (method_used, flags).
    """
    if method in ("asymptotic", "approx"):
        return "asymptotic", []
    if method == "permutation":
        if n > PERMUTATION_MAX_N:
            return "asymptotic", ["permutation_too_large"]
        return "permutation", []
    if method == "exact":
        if not ties_or_zeros:
            return "exact", []
        return ("permutation" if n <= PERMUTATION_MAX_N else "asymptotic"), ["exact_fallback"]
    if n > EXACT_MAX_N:
        return "asymptotic", []
    if not ties_or_zeros:
        return "exact", []
    return ("permutation" if n <= PERMUTATION_MAX_N else "asymptotic"), []


def resolve_method(d, method: str, zero_method: str) -> tuple[str, list[str]]:
    """:func:`resolve` for differences `d` (NaN already dropped)."""
    d = np.asarray(d, dtype=float)
    ranked = np.abs(d[d != 0]) if zero_method == "wilcox" else np.abs(d)
    ties = len(np.unique(ranked)) < len(ranked)
    return resolve(len(d), bool(np.any(d == 0)) or ties, method)


def wilcoxon_greater(original, perturbed, zero_method: str = "wilcox", method: str = "auto",
                     correction: bool = False) -> TestResult:
    """One test that originals score higher than their paired perturbed scores (one row of
    :func:`wilcoxon_greater_many`). Pairs where either score is NaN (or infinite) are dropped and counted."""
    o = np.asarray(original, dtype=float)
    q = np.asarray(perturbed, dtype=float)
    if o.shape != q.shape:
        raise ValueError("original and perturbed must be paired (same length)")
    ok = np.isfinite(o) & np.isfinite(q)
    with np.errstate(invalid="ignore"):  # inf - inf: such pairs are not usable anyway
        d = o - q
    t = wilcoxon_greater_many(d.reshape(1, -1), ok.reshape(1, -1), zero_method, method, correction)
    return TestResult(float(t.p[0]), int(t.n_pairs[0]), int(t.n_nonzero[0]), int((~ok).sum()),
                      str(t.method_used[0]), list(t.flags[0]))


def wilcoxon_greater_many(d, ok=None, zero_method: str = "wilcox", method: str = "auto",
                          correction: bool = False, flips=None) -> WilcoxonTests:
    """One-sided Wilcoxon signed-rank test of every row of `d` (tests × pairs).

    ok: (tests × pairs) bool, the usable pairs (default: the non-NaN differences); other cells are
    ignored, so rows of different lengths share one matrix. An infinite difference is usable (it ranks
    last). flips: optional (patterns × pairs) bool, True where a pair keeps its sign: p is then given for
    every pattern (tests × patterns), the same patterns for every test (the sign-flip null).
    """
    d = np.asarray(d, dtype=float)
    ok = ~np.isnan(d) if ok is None else np.asarray(ok, dtype=bool)
    if d.ndim != 2 or ok.shape != d.shape:
        raise ValueError(f"d must be (tests × pairs) with ok of the same shape, got {d.shape} and {ok.shape}")
    n_tests = d.shape[0]
    n_pairs, n_nonzero = ok.sum(axis=1), (ok & (d != 0)).sum(axis=1)
    rank, tiesum, tie = _ranks(d, ok, zero_method)
    pos = np.where(ok & (d > 0), rank, 0.0)
    # T+ without the zeros' share (zsplit gives them half their ranks: a constant under any sign pattern).
    if flips is None:
        t_nonzero = pos.sum(axis=1)[:, None]
    else:
        flips = np.asarray(flips, dtype=bool)
        if flips.ndim != 2 or flips.shape[1] != d.shape[1]:
            raise ValueError(f"flips must be (patterns × {d.shape[1]}), got {flips.shape}")
        # a kept sign counts a positive difference, a flipped one a negative: half-integers, so exact
        neg = np.where(ok & (d < 0), rank, 0.0)
        keep = np.ascontiguousarray(flips.T, dtype=float)  # BLAS is ten times slower on the transposed view
        t_nonzero = (pos - neg) @ keep + neg.sum(axis=1)[:, None]
    r_plus = t_nonzero
    if zero_method == "zsplit":
        r_plus = t_nonzero + (np.where(ok & (d == 0), rank, 0.0).sum(axis=1) / 2)[:, None]

    used, flags = np.full(n_tests, "none", dtype=object), _objects(n_tests, ())
    key = n_pairs * 2 + ((n_pairs > n_nonzero) | tie)  # (n, ties or zeros): all `resolve` looks at
    for k in np.unique(key):
        u, f = resolve(int(k // 2), bool(k % 2), method)
        used[key == k], flags[key == k] = u, _objects(1, tuple(f))
    flags[n_pairs == 0] = _objects(1, ("no_pairs",))
    flags[(n_pairs > 0) & (n_nonzero == 0)] = _objects(1, ("all_zero",))
    used[n_nonzero == 0] = "none"

    p = np.repeat(np.where(n_pairs == 0, np.nan, 1.0)[:, None], r_plus.shape[1], axis=1)
    rows = used == "asymptotic"
    p[rows] = _normal_p(r_plus[rows], n_pairs[rows], n_nonzero[rows], tiesum[rows], zero_method, correction)
    rows = np.flatnonzero(used == "exact")
    p[rows] = _exact_p(n_pairs[rows], r_plus[rows])
    rows = np.flatnonzero(used == "permutation")
    p[rows] = _permutation_p(rank[rows], ok[rows] & (d[rows] != 0), n_nonzero[rows], t_nonzero[rows])
    return WilcoxonTests(p=p[:, 0] if flips is None else p, method_used=used, flags=flags,
                         n_pairs=n_pairs, n_nonzero=n_nonzero)


def _objects(n: int, value) -> np.ndarray:
    """An object array of n references to `value` (numpy would unpack a tuple given directly)."""
    out = np.empty(n, dtype=object)
    out.fill(value)
    return out


def _ranks(d: np.ndarray, ok: np.ndarray, zero_method: str):
    """Average ranks of |d| in place (0 where a cell is not ranked), the tie term Σ(t³ − t) of the normal
    approximation and whether ranked values tie, for every row.

    The ranks are scipy.stats.rankdata's average ranks, read off the sorted |d| of each row; they are
    half-integers, so every sum of them is exact whatever its order. Zeros are ranked except under
    zero_method="wilcox"; under "pratt" they stay out of the tie term, as in scipy."""
    rank = np.zeros(d.shape)
    tiesum, tie = np.zeros(d.shape[0]), np.zeros(d.shape[0], bool)
    step = max(1, _SLICE_CELLS // max(d.shape[1], 1))
    for i in range(0, d.shape[0], step):
        sl = slice(i, i + step)
        rank[sl], tiesum[sl], tie[sl] = _ranks_slice(d[sl], ok[sl], zero_method)
    return rank, tiesum, tie


def _ranks_slice(d: np.ndarray, ok: np.ndarray, zero_method: str):
    ranked = ok & (d != 0) if zero_method == "wilcox" else ok
    a = np.where(ranked, np.abs(d), np.nan)  # cells not ranked sort last (after a real inf) and tie nothing
    order = np.argsort(a, axis=1)
    a = np.take_along_axis(a, order, axis=1)
    col = np.arange(a.shape[1])
    valid = col < ranked.sum(axis=1)[:, None]
    first = np.ones(a.shape, bool)
    first[:, 1:] = a[:, 1:] != a[:, :-1]
    last = np.ones(a.shape, bool)
    last[:, :-1] = first[:, 1:]
    start = np.maximum.accumulate(np.where(first, col, 0), axis=1)  # where each run of ties starts
    end = np.minimum.accumulate(np.where(last, col, a.shape[1])[:, ::-1], axis=1)[:, ::-1]  # and ends
    t = (end - start + 1).astype(float)
    rank = np.zeros(a.shape)
    np.put_along_axis(rank, order, np.where(valid, (start + end) * 0.5 + 1.0, 0.0), axis=1)
    counted = valid & (a != 0) if zero_method == "pratt" else valid
    tiesum = np.where(counted, t * t - 1.0, 0.0).sum(axis=1)  # each of t tied values adds t² − 1
    return rank, tiesum, (valid & (t > 1)).any(axis=1)


def _normal_p(r_plus, n_pairs, n_nonzero, tiesum, zero_method: str, correction: bool) -> np.ndarray:
    """Normal approximation of T+ (tests × patterns) with scipy's mean, variance and tie term.

    The tail is 0.5·erfc(z/√2) with math.erfc per value, as DHP's p-values have always been computed (so
    they stay bit-identical); scipy's own tail, ndtr(-z), differs from it by up to ~1e-14 relative."""
    count = (n_nonzero if zero_method == "wilcox" else n_pairs).astype(np.int64)
    mn = (count * (count + 1)) * 0.25
    var = count * (count + 1) * (2 * count + 1)
    if zero_method == "pratt":
        n0 = (n_pairs - n_nonzero).astype(np.int64)
        mn = mn - (n0 * (n0 + 1)) * 0.25
        var = var - n0 * (n0 + 1) * (2 * n0 + 1)
    se = np.sqrt((var.astype(float) - tiesum / 2) / 24)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (r_plus - mn[:, None]) / se
        if correction:
            z = z - 0.5 / se
        x = z / math.sqrt(2.0)
    p = 0.5 * np.fromiter(map(math.erfc, x.ravel().tolist()), float, x.size).reshape(x.shape)
    return np.where(se == 0, 1.0, p)


def _exact_p(n: np.ndarray, r_plus: np.ndarray) -> np.ndarray:
    """scipy's exact p of T+ (integral: no ties or zeros) for `n` pairs. It depends on (n, T+) only, so
    scipy gets one row per distinct pair, with ranks 1..n signed so that the positive ones sum to T+."""
    out = np.empty(r_plus.shape)
    for size in np.unique(n):
        rows = n == size
        t = r_plus[rows].astype(np.int64)
        values, where = np.unique(t, return_inverse=True)
        plus = np.zeros((len(values), size), bool)
        left = values.copy()
        for r in range(size, 0, -1):  # greedy from the largest rank reaches every sum in [0, n(n+1)/2]
            plus[:, r - 1] = left >= r
            left -= np.where(plus[:, r - 1], r, 0)
        signed = np.where(plus, 1.0, -1.0) * np.arange(1, size + 1)
        p = sps.wilcoxon(signed, alternative="greater", method="exact", axis=-1).pvalue
        out[rows] = np.atleast_1d(p)[where.reshape(t.shape)]
    return out


_SIGN_PATTERNS: dict[int, np.ndarray] = {}


def _patterns(k: int) -> np.ndarray:
    """All 2^k (k <= 13) sign patterns, 1 where a difference is positive."""
    if k not in _SIGN_PATTERNS:
        _SIGN_PATTERNS[k] = np.array(list(itertools.product((0.0, 1.0), repeat=k))).reshape(-1, k)
    return _SIGN_PATTERNS[k]


def _permutation_p(rank, nonzero, k, t_obs) -> np.ndarray:
    """Share of the 2^k sign patterns of each test's k nonzero differences with T+ >= the observed one.

    Under H0 every sign pattern of the nonzero differences is equally likely; zeros never move (their
    constant zsplit share is left out of `t_obs`), so this is scipy's permutation p exactly (scipy
    enumerates the same 2^k patterns, one statistic at a time). `t_obs`: (tests × patterns) observed T+."""
    out = np.empty(t_obs.shape)
    for size in np.unique(k):
        same = np.flatnonzero(k == size)
        step = max(1, _SLICE_CELLS // 2 ** int(size))  # a bootstrap has thousands of such tests
        for rows in (same[i: i + step] for i in range(0, len(same), step)):
            # each row's nonzero ranks, left-aligned
            idx = np.argsort(~nonzero[rows], axis=1, kind="stable")[:, :size]
            t_perm = np.sort(np.take_along_axis(rank[rows], idx, axis=1) @ _patterns(int(size)).T, axis=1)
            thr = t_obs[rows] - 1e-9 * np.maximum(1.0, np.abs(t_obs[rows]))  # T+ is a half-integer
            above = [len(tp) - np.searchsorted(tp, th, side="left") for tp, th in zip(t_perm, thr)]
            out[rows] = np.array(above) / t_perm.shape[1]
    return out
