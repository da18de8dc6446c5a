"""Resampling of items: bootstrap draws and sign flips, one matrix per group of tests.

A group's draws (e.g. one judge's: every perturbation and metric it was tested on) come from one matrix,
so the tests of the group are resampled together and their dependence is kept; the seed of a group
combines the run seed with a stable hash of the group's key, so one group's draws do not depend on
which other groups share the table.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["MIN_RESAMPLE_UNITS", "SCHEMES", "group_seed", "resample_items"]

#: Fewest resampling units (items, documents, segments) an interval or a resampling test is given for. With fewer,
#: no one-sided paired test reaches p < 0.05 (an exact sign test on 4 units bottoms out at 1/16) and a bootstrap
#: has only a handful of distinct resamples (2 units: 3), so its interval would look precise without being so;
#: such a statistic gets NaN with its reason instead.
MIN_RESAMPLE_UNITS = 5

#: "bootstrap": items drawn with replacement (indices); "sign_flip": a random sign per item (True keeps
#: it), the null of "no difference" for paired differences.
SCHEMES = ("bootstrap", "sign_flip")


def group_seed(seed: int, key) -> list[int]:
    """Seed of a group's draws: the run seed and a stable hash of the group's key (a tuple of values)."""
    h = hashlib.blake2b("\x1f".join(map(str, key)).encode("utf-8"), digest_size=8).digest()
    return [int(seed), int.from_bytes(h, "big")]


def resample_items(n_items: int, n_draws: int, seed, scheme: str = "bootstrap") -> np.ndarray:
    """(n_draws × n_items) draws over items 0..n_items-1 from ``numpy.random.default_rng(seed)``.

    scheme="bootstrap": item indices, each row a resample with replacement (use as ``values[..., draws]``);
    scheme="sign_flip": bool, True where the item keeps the sign of its differences.
    """
    rng = np.random.default_rng(seed)
    if scheme == "bootstrap":
        return rng.integers(0, n_items, size=(n_draws, n_items))
    if scheme == "sign_flip":
        return rng.integers(0, 2, size=(n_draws, n_items)).astype(bool)
    raise ValueError(f"Unknown resampling scheme {scheme!r}: use one of {list(SCHEMES)}")
