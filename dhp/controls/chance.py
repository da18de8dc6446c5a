"""``control:chance``: a seeded coin or die, blind to the texts and the gold: the floor of every scale."""

from __future__ import annotations

from dhp.controls import Control, chance_choice, chance_quality, register_control


@register_control
class Chance(Control):
    name = "chance"
    doc = "answers at random (seeded per unit): a rating drawn from the scale's levels, a pair's winner by a coin"
    quality = 0.5

    def rate(self, gold, lengths, rngs):
        return chance_quality(rngs)

    def prefer(self, gold, len_1, len_2, rngs):
        return chance_choice(rngs)
