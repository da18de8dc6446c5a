"""``control:longer``: verbosity bias at its extreme — the longer text wins; a rating grows with the length."""

from __future__ import annotations

import numpy as np

from dhp.controls import Control, register_control


@register_control
class Longer(Control):
    name = "longer"
    doc = "prefers the longer candidate (a tie at equal length); a rating rises with the text's length in words"
    quality = float("nan")  # depends on how length goes with quality in the data

    def rate(self, gold, lengths, rngs):
        n = np.asarray(lengths, dtype=float)
        # 1 - 1/(1 + words/50): monotone in the length, inside [0, 1) whatever the texts
        return 1.0 - 1.0 / (1.0 + np.maximum(n, 0) / 50.0)

    def prefer(self, gold, len_1, len_2, rngs):
        return ["1" if a > b else "2" if b > a else "tie" for a, b in zip(len_1, len_2)]
