"""``control:constant``: one answer for everything — the scale's middle, a tie for a pair."""

from __future__ import annotations

import numpy as np

from dhp.controls import Control, register_control


@register_control
class Constant(Control):
    name = "constant"
    doc = "gives every text the scale's middle rating and every pair a tie"
    quality = float("nan")  # a tie is never the gold answer: agreement 0, or undefined where ties are left out

    def rate(self, gold, lengths, rngs):
        return np.full(len(rngs), 0.5)

    def prefer(self, gold, len_1, len_2, rngs):
        return ["tie"] * len(rngs)
