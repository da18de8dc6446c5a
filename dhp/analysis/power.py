"""Power, stated: how many units a method needs to tell a judge of a given quality from chance (pure).

A judge's quality is read the way the controls (dhp.controls) define it: ``control:oracle@e`` agrees with the gold
on a unit with probability X = 1 - e/2 (it answers at chance on the share e it errs on), ``control:chance`` with 1/2.
Two kinds of measure cover the methods:

- ``agreement``: per unit the judge is right or wrong against a gold that decides between two answers (DnA/LLMBar
  pairwise agreement, a local chain pair ordered right, DHP's original scored above its perturbed copy — a sign test,
  which the Wilcoxon signed-rank test DHP uses beats on continuous scores, so the n here is an upper bound there). A
  judge of agreement X is told from chance when the exact one-sided binomial test of "right on more than half" at
  ``alpha`` rejects; its power at n units is P(Binomial(n, X) >= the critical count), exact.
- ``correlation``: a rank correlation (Spearman, κ as its ordinal stand-in) of X against 0, one-sided, through
  Fisher's z with the Spearman variance factor 1.06/(n - 3) (Fieller, Hartley & Pearson 1957).

:func:`units_needed` is the fewest units at which a judge of quality X is told from chance with the stated power;
:func:`detectable` the least quality told from chance at n units; :func:`power_table` one method's table (the docs
print it on each method's page, ``python -m dhp evaluate --dry-run`` prints :func:`power_line` per view).
"""

from __future__ import annotations

import math

import pandas as pd

from dhp.errors import DHPError
from dhp.lazy import lazy_module

sps = lazy_module("scipy.stats")

__all__ = ["KINDS", "power", "units_needed", "detectable", "power_table", "power_line", "QUALITIES"]

KINDS = ("agreement", "correlation")
#: The qualities each kind's table lists (agreement: oracle@0.8, @0.6, @0.4, @0.2; correlation: small to large).
QUALITIES = {"agreement": (0.6, 0.7, 0.8, 0.9), "correlation": (0.1, 0.2, 0.3, 0.5)}
N_MAX = 100_000


def _check(kind: str, quality: float, alpha: float, target: float) -> None:
    if kind not in KINDS:
        raise DHPError(f"Unknown power kind {kind!r}.", f"use one of {list(KINDS)}.")
    if not 0 < alpha < 1 or not 0 < target < 1:
        raise DHPError(f"alpha={alpha} and power={target} must lie in (0, 1).", "pass e.g. alpha=0.05, power=0.8.")


def _critical(n: int, alpha: float) -> int:
    """The fewest right answers of n whose one-sided binomial p against 1/2 is <= alpha (n + 1: none)."""
    s = int(sps.binom.isf(alpha, n, 0.5)) + 1  # P(S >= s) <= alpha
    while s > 0 and sps.binom.sf(s - 2, n, 0.5) <= alpha:
        s -= 1
    while s <= n and sps.binom.sf(s - 1, n, 0.5) > alpha:
        s += 1
    return s


def power(kind: str, quality: float, n: int, alpha: float = 0.05) -> float:
    """The probability that a judge of ``quality`` on ``n`` units is told from chance at ``alpha`` (one-sided)."""
    _check(kind, quality, alpha, 0.5)
    n = int(n)
    if kind == "agreement":
        if n < 1:
            return 0.0
        s = _critical(n, alpha)
        return float(sps.binom.sf(s - 1, n, quality)) if s <= n else 0.0
    if n < 4 or not -1 < quality < 1:
        return 0.0 if n < 4 else 1.0
    se = math.sqrt(1.06 / (n - 3))
    return float(sps.norm.sf(sps.norm.isf(alpha) - math.atanh(quality) / se))


def units_needed(kind: str, quality: float, alpha: float = 0.05, target: float = 0.8, n_max: int = N_MAX) -> float:
    """The fewest units at which a judge of ``quality`` is told from chance with probability >= ``target`` (NaN: a
    quality at chance or below is never told from it, or more than ``n_max`` units)."""
    _check(kind, quality, alpha, target)
    if quality <= (0.5 if kind == "agreement" else 0.0):
        return math.nan
    lo, hi = 1, 2
    while power(kind, quality, hi, alpha) < target:  # power is not monotone in n for a discrete test: search up
        lo, hi = hi, hi * 2
        if hi > n_max:
            return math.nan
    for n in range(lo, hi + 1):
        # the first n from which power stays >= target over the next few (a binomial test's saw-tooth)
        if all(power(kind, quality, m, alpha) >= target for m in range(n, min(n + 5, hi + 1) + 1)):
            return float(n)
    return float(hi)


def detectable(kind: str, n: int, alpha: float = 0.05, target: float = 0.8) -> float:
    """The least quality a judge needs to be told from chance at ``n`` units with probability >= ``target`` (NaN: none
    below 1 is, e.g. n too small)."""
    _check(kind, 0.5, alpha, target)
    lo, hi = (0.5, 1.0) if kind == "agreement" else (0.0, 0.999)
    if power(kind, hi, n, alpha) < target:
        return math.nan
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if power(kind, mid, n, alpha) >= target else (mid, hi)
    return hi


def power_table(kind: str, qualities=None, alpha: float = 0.05, target: float = 0.8) -> pd.DataFrame:
    """One row per quality: the units needed (kind's QUALITIES unless given) and, for agreement, the oracle's error
    rate that quality stands for (X = 1 - e/2)."""
    qs = tuple(qualities or QUALITIES[kind])
    rows = [{"quality": q, "units_needed": units_needed(kind, q, alpha, target),
             "oracle": f"control:oracle@{2 * (1 - q):g}" if kind == "agreement" else ""} for q in qs]
    return pd.DataFrame(rows, columns=["quality", "units_needed", "oracle"])


def power_line(kind: str, n: int, units: str = "units", alpha: float = 0.05, target: float = 0.8) -> str:
    """evaluate's plan line: what a judge must reach to be told from chance at this n."""
    x = detectable(kind, n, alpha, target)
    what = "agreement" if kind == "agreement" else "rank correlation"
    if not math.isfinite(x):
        return (f"power: at n = {n} {units} no judge is told from chance at alpha = {alpha:g} "
                f"with {target:.0%} power — use more {units}")
    return (f"power: at n = {n} {units} you can tell a judge of {what} >= {x:.2f} from chance "
            f"(alpha = {alpha:g}, {target:.0%} power)")
