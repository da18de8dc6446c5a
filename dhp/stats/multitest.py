"""Multiple-testing adjustment of a family of p-values.

``adjust(p, "holm")``: Holm's step-down adjustment (family-wise error rate): sorted p_(1) <= ... <= p_(m),
adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)). ``adjust(p, "bh")``: Benjamini-Hochberg (false discovery
rate), scipy.stats.false_discovery_control. NaN p-values are not part of the family and stay NaN.
"""

from __future__ import annotations

import numpy as np

from dhp.errors import DHPError
from dhp.lazy import lazy_module

stats = lazy_module("scipy.stats")  # imported when first used (dhp.lazy)

__all__ = ["ADJUST_METHODS", "adjust"]

#: Multiple-testing adjustments of `adjust`: Holm (family-wise error rate) and Benjamini-Hochberg (false discovery).
ADJUST_METHODS = ("holm", "bh")


def adjust(p, method: str = "holm") -> np.ndarray:
    """Adjust p values for multiple testing; NaN entries stay NaN and do not count as tests.

    method="holm": Holm step-down (family-wise error rate); method="bh": Benjamini-Hochberg
    (false discovery rate, via scipy.stats.false_discovery_control). Returns a float array
    of the input's shape.
    """
    arr = np.asarray(p, dtype=float)
    flat = arr.ravel()
    out = np.full(flat.shape, np.nan)
    ok = ~np.isnan(flat)
    vals = flat[ok]
    if vals.size == 0:
        return out.reshape(arr.shape)
    if np.any((vals < 0) | (vals > 1)):
        raise DHPError("p values must lie in [0, 1].", "pass probabilities, not test statistics.")
    if method == "holm":
        m = vals.size
        order = np.argsort(vals, kind="mergesort")
        stepped = np.maximum.accumulate((m - np.arange(m)) * vals[order])
        res = np.empty(m)
        res[order] = np.minimum(stepped, 1.0)
    elif method == "bh":
        res = stats.false_discovery_control(vals, method="bh")
    else:
        raise DHPError(f"Unknown adjustment method {method!r}.", 'use method="holm" or method="bh".')
    out[ok] = res
    return out.reshape(arr.shape)
