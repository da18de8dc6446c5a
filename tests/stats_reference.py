"""The statistics as they were before dhp.stats (one scipy call per test, scalar per-test code, 1-D
combination): the reference the vectorised package is checked against, bit for bit. Test code only.

Each piece was itself checked against scipy (tests/test_stats.py): scipy.stats.wilcoxon for the exact
null, scipy's PermutationMethod for the enumeration, scipy's normal approximation for the asymptotic one.
"""

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

from dhp.errors import DHPError

P_FLOOR = float(np.finfo(float).tiny)
COMBINES = ("paper", "wilson")

try:
    sps.wilcoxon([1.0, 2.0, 3.0], method="asymptotic")
    _ASYMPTOTIC = "asymptotic"
except ValueError:  # pragma: no cover - depends on the installed scipy
    _ASYMPTOTIC = "approx"

_EXACT_MAX_N = 50
_PERMUTATION_MAX_N = 13


@dataclass
class TestResult:
    """Outcome of one one-sided Wilcoxon test (original > perturbed)."""

    p: float
    n_pairs: int
    n_nonzero: int
    n_dropped_nan: int
    method_used: str
    flags: list[str] = field(default_factory=list)


def _has_ties(d: np.ndarray, zero_method: str) -> bool:
    """Ties among the values that get ranked (zeros are not ranked with zero_method='wilcox')."""
    a = np.abs(d[d != 0]) if zero_method == "wilcox" else np.abs(d)
    return len(np.unique(a)) < len(a)


def resolve_method(d: np.ndarray, method: str, zero_method: str) -> tuple[str, list[str]]:
    """Which null distribution to use for differences `d` (NaN already dropped).

    Mirrors scipy's `method="auto"` (exact null for n <= 50 without ties or zeros; an exhaustive
    permutation null for n <= 13 otherwise; the normal approximation for the rest), so that the method
    actually used can be recorded whatever the scipy version. `method="exact"` with ties or zeros is
    never run (scipy's exact null is wrong then): it falls back like "auto" and is flagged.
    Returns (method_used, flags) with method_used in {"exact", "permutation", "asymptotic"}.
    """
    return _resolve(len(d), bool(np.any(d == 0)) or _has_ties(d, zero_method), method)


def _resolve(n: int, ties_or_zeros: bool, method: str) -> tuple[str, list[str]]:
    """The rule of :func:`resolve_method` from the number of pairs and whether ties or zeros occur (the
    vectorised path applies it to each distinct (n, ties_or_zeros) once)."""
    if method in ("asymptotic", "approx"):
        return "asymptotic", []
    if method == "permutation":
        if n > _PERMUTATION_MAX_N:
            return "asymptotic", ["permutation_too_large"]
        return "permutation", []
    if method == "exact":
        if not ties_or_zeros:
            return "exact", []
        return ("permutation" if n <= _PERMUTATION_MAX_N else "asymptotic"), ["exact_fallback"]
    # auto
    if n > _EXACT_MAX_N:
        return "asymptotic", []
    if not ties_or_zeros:
        return "exact", []
    return ("permutation" if n <= _PERMUTATION_MAX_N else "asymptotic"), []


def wilcoxon_greater(
    original, perturbed, zero_method: str = "wilcox", method: str = "auto", correction: bool = False
) -> TestResult:
    """One-sided Wilcoxon signed-rank test that originals score higher than their perturbed pairs.

    Pairs where either score is NaN are dropped and counted (`n_dropped_nan`). When every remaining
    difference is zero scipy has no test (it returns NaN or 1 depending on the version): we report
    p = 1 and the flag "all_zero". No pair at all gives p = NaN and the flag "no_pairs".
    The p-value is `scipy.stats.wilcoxon(d, alternative="greater")`'s, with the method decided by
    :func:`resolve_method`; the permutation and normal-approximation cases are computed here with scipy's
    rules (identical p, tested) because scipy's per-call overhead dominated large tables.
    """
    o = np.asarray(original, dtype=float)
    q = np.asarray(perturbed, dtype=float)
    if o.shape != q.shape:
        raise ValueError("original and perturbed must be paired (same length)")
    ok = np.isfinite(o) & np.isfinite(q)
    return _test_on_diffs((o - q)[ok], int((~ok).sum()), zero_method, method, correction)


def _test_on_diffs(d: np.ndarray, n_dropped: int, zero_method: str, method: str, correction: bool) -> TestResult:
    """:func:`wilcoxon_greater` once the NaN pairs are dropped (`d`: the usable differences)."""
    n_pairs = len(d)
    n_nonzero = int(np.count_nonzero(d))
    if n_pairs == 0:
        return TestResult(math.nan, 0, 0, n_dropped, "none", ["no_pairs"])
    if n_nonzero == 0:
        return TestResult(1.0, n_pairs, 0, n_dropped, "none", ["all_zero"])
    used, flags = resolve_method(d, method, zero_method)
    if used == "permutation":
        # scipy's PermutationMethod enumerates all 2**n (n <= 13) sign flips too, but one statistic at a
        # time (seconds per test); the same enumeration vectorised gives the identical p (tested).
        p = _permutation_p(d, zero_method)
    elif used == "asymptotic":
        p = _asymptotic_p(d, zero_method, correction)
    else:
        scipy_method = "exact" if used == "exact" else _ASYMPTOTIC
        p = float(sps.wilcoxon(
            d, zero_method=zero_method, correction=correction, alternative="greater", method=scipy_method
        ).pvalue)  # fmt: skip
    return TestResult(p, n_pairs, n_nonzero, n_dropped, used, flags)


# --------------------------------------------------------------------------------------------------
# Fast path for the bootstrap (same rules, no scipy call overhead); cross-checked against scipy in tests
# --------------------------------------------------------------------------------------------------
_SIGN_PATTERNS: dict[int, np.ndarray] = {}


def _patterns(n: int) -> np.ndarray:
    if n not in _SIGN_PATTERNS:
        _SIGN_PATTERNS[n] = np.array(list(itertools.product((0.0, 1.0), repeat=n)))
    return _SIGN_PATTERNS[n]


def _ranks_and_stat(d: np.ndarray, zero_method: str):
    zeros = d == 0
    if zero_method == "wilcox":
        r = np.zeros_like(d)
        r[~zeros] = sps.rankdata(np.abs(d[~zeros]))
    else:
        r = sps.rankdata(np.abs(d))
    r_plus = r[d > 0].sum()
    if zero_method == "zsplit":
        r_plus += r[zeros].sum() / 2
    return r, r_plus


def _permutation_p(d: np.ndarray, zero_method: str) -> float:
    """Exact permutation p-value of T+ by enumerating every sign assignment (n <= 13).

    Under H0 every sign pattern of the nonzero differences is equally likely; zeros never move (their
    constant zsplit share cancels), so enumerating the nonzero ones gives scipy's permutation p exactly.
    """
    r, r_plus = _ranks_and_stat(d, zero_method)
    zeros = d == 0
    rn = r[~zeros]
    t_perm = _patterns(len(rn)) @ rn
    t_obs = r_plus - (r[zeros].sum() / 2 if zero_method == "zsplit" else 0.0)
    return float(np.mean(t_perm >= t_obs - 1e-9 * max(1.0, abs(t_obs))))


def _normal_null(d: np.ndarray, zero_method: str) -> tuple[float, float]:
    """Mean and standard deviation of T+ under H0 for the normal approximation, with the tie correction
    and Pratt's zero adjustment, as scipy computes them."""
    zeros = d == 0
    a = np.abs(d) if zero_method == "zsplit" else np.abs(d[~zeros])
    count = len(a) if zero_method == "wilcox" else len(d)
    mn = count * (count + 1) * 0.25
    var = count * (count + 1) * (2 * count + 1)
    if zero_method == "pratt":
        n0 = int(zeros.sum())
        mn -= n0 * (n0 + 1) * 0.25
        var -= n0 * (n0 + 1) * (2 * n0 + 1)
    _, t = np.unique(a, return_counts=True)
    return mn, math.sqrt((var - float(np.sum(t.astype(float) ** 3 - t)) / 2) / 24)


def fast_p_greater(d: np.ndarray, zero_method: str = "wilcox", method: str = "auto", correction: bool = False) -> float:
    """p-value of the one-sided test on differences `d` (no NaN), same rules as :func:`wilcoxon_greater`.

    Used inside the bootstrap, where thousands of small tests make scipy's per-call overhead dominate.
    """
    d = np.asarray(d, dtype=float)
    n = len(d)
    if n == 0:
        return math.nan
    if not np.any(d != 0):
        return 1.0
    used, _ = resolve_method(d, method, zero_method)
    if used == "exact":
        return float(sps.wilcoxon(d, zero_method=zero_method, alternative="greater", method="exact").pvalue)
    if used == "permutation":
        return _permutation_p(d, zero_method)
    return _asymptotic_p(d, zero_method, correction)


def _asymptotic_p(d: np.ndarray, zero_method: str, correction: bool) -> float:
    """Normal approximation of T+ with scipy's tie correction (cross-checked against scipy in the tests);
    computed here because scipy's per-call overhead dominates thousands of small tests."""
    _, r_plus = _ranks_and_stat(d, zero_method)
    mn, se = _normal_null(d, zero_method)
    if se == 0:
        return 1.0
    z = (r_plus - mn) / se
    if correction:
        z -= 0.5 / se
    return 0.5 * math.erfc(z / math.sqrt(2.0))



def combine_p(p, weights=None, combine: str = "paper") -> float:
    """Harmonic-mean combination of metric p-values for one perturbation.

    paper, no weights:  1 / Σ_j (1/p_j)          (as printed in the paper, §4.3.2)
    paper, weights w:   1 / Σ_j (w_j/p_j)         (weights are the expert weights, Σ w_j = 1)
    wilson, no weights: M / Σ_j (1/p_j)          (weighted harmonic mean with w_j = 1/M)
    wilson, weights w:  Σ_j w_j / Σ_j (w_j/p_j)   (= the paper's EW form when Σ w_j = 1)
    NaN p-values (no pairs for that metric) are left out; the weights of the rest are renormalised.
    Returns NaN if no p-value is finite.
    """
    if combine not in COMBINES:
        raise DHPError(f"Unknown combine={combine!r}.", f"use one of {list(COMBINES)}.")
    p = np.asarray(p, dtype=float)
    w = np.ones_like(p) if weights is None else np.asarray(weights, dtype=float)
    keep = np.isfinite(p)
    if not keep.any():
        return math.nan
    p, w = np.clip(p[keep], P_FLOOR, 1.0), w[keep]
    if weights is not None:
        if w.sum() <= 0:
            return math.nan
        w = w / w.sum()
        return float(min(1.0, 1.0 / np.sum(w / p)))
    if combine == "paper":
        return float(1.0 / np.sum(1.0 / p))
    return float(min(1.0, len(p) / np.sum(1.0 / p)))




def boot_d(unit, idx, zero_method, method, correction, combine):
    """D and D_EW of one perturbation for each bootstrap resample of items (rows of idx), one test at a time."""
    n_boot = idx.shape[0]
    pm = np.full((n_boot, len(unit.metrics)), np.nan)
    for j in range(len(unit.metrics)):
        o, q, pr = unit.orig[j], unit.pert[j], unit.present[j]
        for b in range(n_boot):
            sel = idx[b][pr[idx[b]]]
            d = o[sel] - q[sel]
            pm[b, j] = fast_p_greater(d[np.isfinite(d)], zero_method, method, correction)
    p = np.array([combine_p(row, None, combine) for row in pm])
    p_ew = p if unit.ew is None else np.array([combine_p(row, unit.ew, combine) for row in pm])
    return discernment_score(p), discernment_score(p_ew)


def discernment_score(p):
    """D = log_0.05(p), p clipped to [P_FLOOR, 1]."""
    p = np.clip(np.asarray(p, dtype=float), P_FLOOR, 1.0)
    out = np.log(p) / np.log(0.05) + 0.0
    return float(out) if out.ndim == 0 else out
