"""Controls: judges of known quality, with no model behind them, that bracket every method's scale.

A control reads what the method scores a judge against — the gold label or the human rating — and answers from it
by a stated rule: ``oracle@e`` gives the gold answer and errs on a share ``e`` of the units (an erring unit gets a
chance answer), ``chance`` answers at random (seeded), and the biased ones answer by a rule that ignores quality:
``first`` (the first shown of a pair; the scale's first level for a rating), ``longer`` (the longer text),
``constant`` (the scale's middle; a tie for a pair). What a method gives them is what a good, a useless and a biased
judge score on it, at full size in seconds: a method that does not order oracle > chance on its units cannot tell
judges apart there.

Controls are judges named ``control:<name>[@<parameter>]`` (dhp.backends.control: a backend of mode "metric" that
no prompt reaches); a method hands the control its rows with a ``gold`` column (a quality in [0, 1], or for a pair
the better candidate "1"/"2") through the same tables as any judge, so the card, the leaderboard and every view see
them like any judge — and :func:`judge_kind` names them "control" wherever a judge is shown.

One registered object per control, one file each in this package (:func:`register_control`); a new control is a
new file here. Every draw is seeded by the control's spec and the unit's key, so a unit's answer does not depend on
which other units are judged, or in which order.
"""

from __future__ import annotations

import hashlib
import math
from typing import Callable, ClassVar

import numpy as np

from dhp.errors import DHPError
from dhp.extensions import Registry, origin_of, registrar

__all__ = ["Control", "CONTROLS", "register_control", "get_control", "judge_kind", "is_control", "PREFIX",
           "unit_rng", "JUDGE_KINDS"]

PREFIX = "control:"
#: What kind of judge a judge name is (the card's and the leaderboard's ``judge_kind`` column).
JUDGE_KINDS = ("control", "baseline", "recorded", "model")


class Control:
    """A judge of known quality (module docstring). ``rate`` answers pointwise questions, ``prefer`` pairwise ones.

    ``rate(gold, lengths, rngs) -> quality in [0, 1]``: ``gold`` the quality each unit deserves (NaN: unknown),
    ``lengths`` its text's length in words, ``rngs`` one numpy Generator per unit. ``prefer(gold, len_1, len_2,
    rngs) -> "1" | "2" | "tie"`` per pair shown in its order: ``gold`` the better candidate ("1"/"2"; "tie" or ""
    unknown). The caller maps a quality to its scale (1 + 4 q on a 1-5 scale)."""

    name: ClassVar[str] = ""
    #: what it is, in a line (python -m dhp extensions, the docs)
    doc: ClassVar[str] = ""
    #: its expected agreement with the gold where the gold decides between two answers (the power tables' X)
    quality: float = math.nan

    def __init__(self, parameter: str = ""):
        if parameter:
            raise DHPError(f"The control {self.name!r} takes no parameter (got {parameter!r}).",
                           f"use 'control:{self.name}'.")
        self.parameter = ""

    @property
    def spec(self) -> str:
        return f"{PREFIX}{self.name}" + (f"@{self.parameter}" if self.parameter else "")

    def rate(self, gold: np.ndarray, lengths: np.ndarray, rngs: list) -> np.ndarray:
        raise NotImplementedError

    def prefer(self, gold: list, len_1: np.ndarray, len_2: np.ndarray, rngs: list) -> list:
        raise NotImplementedError


#: Every control by name; found by discovery (dhp.extensions): the modules of this package and the entry-point group
#: ``dhp.controls``.
CONTROLS: "Registry[type[Control]]" = Registry(
    "control", "dhp.controls", fix="use one of those controls, or add a module to dhp/controls/ with "
                                   "@register_control.", show=lambda name, cls: cls.doc)


@registrar
def register_control(cls: type[Control]) -> type[Control]:
    """Register a Control subclass under its ``name``."""
    if not cls.name:
        raise DHPError(f"Control {cls.__qualname__} has no name.", "set its class attribute name.")
    CONTROLS.add(cls.name, cls, origin_of(cls))
    return cls



def get_control(spec: str) -> Control:
    """The control of ``control:<name>[@<parameter>]`` (the prefix may be left out)."""
    rest = str(spec).strip()
    rest = rest[len(PREFIX):] if rest.startswith(PREFIX) else rest
    name, _, parameter = rest.partition("@")
    return CONTROLS.lookup(name)(parameter)


def is_control(judge) -> bool:
    return str(judge).startswith(PREFIX)


def judge_kind(judge, mode: str = "") -> str:
    """"control" (control:…), "baseline" (baseline:…, a surface statistic), "recorded" (judgments imported from a
    paper's release: mode "recorded") or "model" (a language model run here)."""
    j = str(judge)
    if j.startswith(PREFIX):
        return "control"
    if j.startswith("baseline:"):
        return "baseline"
    if str(mode) == "recorded":
        return "recorded"
    return "model"


def unit_rng(spec: str, key) -> np.random.Generator:
    """The seeded generator of one unit: from the control's spec and the unit's key, nothing else."""
    digest = hashlib.sha256(f"{spec}\x1f{key}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def chance_quality(rngs: list) -> np.ndarray:
    """A chance answer on a rating scale: a quality drawn uniformly from the five levels of a 1-5 scale."""
    return np.array([rng.integers(0, 5) / 4.0 for rng in rngs], dtype=float)


def chance_choice(rngs: list) -> list:
    return [("1", "2")[int(rng.integers(0, 2))] for rng in rngs]
