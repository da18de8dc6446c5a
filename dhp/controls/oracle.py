"""``control:oracle@e``: the gold answer, wrong on a share ``e`` of the units (default 0.2)."""

from __future__ import annotations

import numpy as np

from dhp.controls import Control, chance_choice, chance_quality, register_control
from dhp.errors import DHPError


@register_control
class Oracle(Control):
    name = "oracle"
    doc = "reads the gold label / human rating; on a share e of the units (control:oracle@e, default 0.2) it errs"

    def __init__(self, parameter: str = ""):
        try:
            self.error = float(parameter) if parameter else 0.2
        except ValueError:
            self.error = float("nan")
        if not 0.0 <= self.error <= 1.0:
            raise DHPError(f"control:oracle@{parameter}: the error rate must be a number in [0, 1].",
                           "write e.g. control:oracle@0.2 (wrong on 20% of the units).")
        self.parameter = f"{self.error:g}"
        # an erring unit answers at chance: on a pair it still hits the gold half of the time
        self.quality = 1.0 - self.error / 2

    def _errs(self, rngs: list) -> np.ndarray:
        return np.array([rng.random() < self.error for rng in rngs], dtype=bool)

    def rate(self, gold, lengths, rngs):
        gold = np.asarray(gold, dtype=float)
        errs = self._errs(rngs)
        return np.where(errs, chance_quality(rngs), gold)

    def prefer(self, gold, len_1, len_2, rngs):
        errs = self._errs(rngs)
        guess = chance_choice(rngs)
        return [x if e or g not in ("1", "2") else g for g, e, x in zip(gold, errs, guess)]
