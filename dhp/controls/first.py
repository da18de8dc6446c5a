"""``control:first``: position bias at its extreme — the first candidate shown wins; a rating is the scale's first
level."""

from __future__ import annotations

import numpy as np

from dhp.controls import Control, register_control


@register_control
class First(Control):
    name = "first"
    doc = "always prefers the candidate shown first (a rating: always the scale's first level)"
    quality = 0.5

    def rate(self, gold, lengths, rngs):
        return np.zeros(len(rngs))

    def prefer(self, gold, len_1, len_2, rngs):
        return ["1"] * len(rngs)
