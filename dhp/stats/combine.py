"""Harmonic-mean combination of p-values, row by row, and the discernment score D = log_0.05(p).

For the p-values p_j of one row (e.g. the metrics of one perturbation; NaN = no test, left out):

    paper, no weights:   1 / Σ_j (1/p_j)            as printed in the DHP paper (§4.3.2)
    wilson, no weights:  M / Σ_j (1/p_j)            Wilson's (2019) weighted harmonic mean, w_j = 1/M
    weights w (either):  Σ_j w_j / Σ_j (w_j/p_j)    expert-weighted; = the paper's EW form when Σ w_j = 1

The weights of the p-values left out are dropped and the rest renormalised; a row with no finite p (or
no positive weight) combines to NaN. p is clipped to [P_FLOOR, 1] first, so a p that underflowed to 0
gives a finite D.
"""

from __future__ import annotations

import numpy as np

from dhp.errors import DHPError

__all__ = ["COMBINES", "P_FLOOR", "combine_p", "combine_rows", "discernment_score"]

COMBINES = ("paper", "wilson")

#: Smallest p used in D = log_0.05(p): p = 0 (e.g. an underflowed normal tail) would give D = inf.
#: The smallest positive normal double keeps D finite (D <= ~236) and never changes a real p-value.
P_FLOOR = float(np.finfo(float).tiny)

#: From this many p-values per row on, numpy's pairwise summation groups a row's terms by position, so a
#: row padded with the zeros of its missing p-values would not sum like its p-values alone; below it a
#: row sums term after term and the zeros change nothing.
_PAIRWISE_FROM = 8


def combine_rows(p, weights=None, combine: str = "paper") -> np.ndarray:
    """Combined p of every row of `p` (rows × p-values, NaN = no test); `weights`: None or the same shape
    (expert weights: the combination is then the weighted harmonic mean, whatever `combine` says)."""
    if combine not in COMBINES:
        raise DHPError(f"Unknown combine={combine!r}.", f"use one of {list(COMBINES)}.")
    # C order: a row's terms are then summed the same way whatever layout the caller had (a transposed view
    # would be reduced column after column)
    pm = np.ascontiguousarray(p, dtype=float)
    wm = None if weights is None else np.ascontiguousarray(weights, dtype=float)
    if pm.ndim != 2 or (wm is not None and wm.shape != pm.shape):
        raise ValueError(f"p must be (rows × p-values) and weights the same shape, got {pm.shape}"
                         f"{'' if wm is None else f' and {wm.shape}'}")
    if pm.shape[1] < _PAIRWISE_FROM:
        return _harmonic(pm, wm, combine)
    out = np.empty(pm.shape[0])
    for i, row in enumerate(pm):  # each row's own p-values only (see _PAIRWISE_FROM)
        keep = np.isfinite(row)
        out[i] = _harmonic(row[keep][None], None if wm is None else wm[i, keep][None], combine)[0]
    return out


def _harmonic(pm: np.ndarray, wm: np.ndarray | None, combine: str) -> np.ndarray:
    keep = np.isfinite(pm)
    pc = np.clip(np.where(keep, pm, 1.0), P_FLOOR, 1.0)
    m = keep.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # Σ 1/p = inf: p = 0, floored later
        if wm is None:
            inv = np.where(keep, 1.0 / pc, 0.0).sum(axis=1)
            p = 1.0 / inv if combine == "paper" else np.minimum(1.0, m / inv)
            return np.where(m > 0, p, np.nan)
        wk = np.where(keep, wm, 0.0)
        wsum = wk.sum(axis=1)
        p = np.minimum(1.0, 1.0 / np.where(keep, wk / wsum[:, None] / pc, 0.0).sum(axis=1))
    return np.where((m > 0) & (wsum > 0), p, np.nan)


def combine_p(p, weights=None, combine: str = "paper") -> float:
    """:func:`combine_rows` of one row of p-values (and its weights)."""
    p = np.asarray(p, dtype=float).reshape(1, -1)
    w = None if weights is None else np.asarray(weights, dtype=float).reshape(1, -1)
    return float(combine_rows(p, w, combine)[0])


def discernment_score(p):
    """D = log_0.05(p), with p clipped to [P_FLOOR, 1] (so D >= 0 and finite; NaN stays NaN).
    D > 1 exactly when p < 0.05."""
    p = np.clip(np.asarray(p, dtype=float), P_FLOOR, 1.0)
    out = np.log(p) / np.log(0.05) + 0.0  # + 0.0 turns log(1)'s -0.0 into 0.0
    return float(out) if out.ndim == 0 else out

