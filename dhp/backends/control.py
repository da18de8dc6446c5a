"""Control judges (``control:<name>[@<parameter>]``, dhp.controls): judges of known quality with no model behind
them. They run in mode ``metric`` like the baselines, but no prompt and no text-only request reaches them: a method
hands them its rows with the gold answer (``gold``) through :func:`score_rows` / :func:`prefer_rows`, and what they
answer enters the method's tables like any judge's (named ``control:…`` everywhere; dhp.controls.judge_kind)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dhp.backends.base import Backend, register_backend
from dhp.controls import get_control, unit_rng
from dhp.errors import DHPError

__all__ = ["ControlBackend", "score_rows", "prefer_rows", "is_control_backend"]


class ControlBackend(Backend):
    """A control as a judge: mode ``metric``, deterministic, no chat, no likelihood, nothing cached (it costs nothing)."""

    supports_logprobs = False
    supports_loglikelihood = False
    supports_metric = True
    supports_chat = False
    deterministic = True
    #: a method gives it rows with their gold answer instead of prompts (score_rows / prefer_rows)
    reads_gold = True

    def __init__(self, rest: str):
        self.control = get_control(rest)
        self.identity = self.control.spec
        self.model = self.identity

    @property
    def fingerprint(self) -> str:
        return self.identity

    def metric_many(self, requests, on_result=None):
        raise DHPError(f"{self.identity} is a control: it answers from the gold label, which a text-only request "
                       "does not carry.", "run it through a method that hands controls their gold (every built-in "
                                          "method does), e.g. python -m dhp run --method dhp --judge "
                                          f"{self.identity} --mode metric.")


def is_control_backend(backend) -> bool:
    return bool(getattr(backend, "reads_gold", False))


def _words(texts) -> np.ndarray:
    return np.array([len(str(t or "").split()) for t in texts], dtype=float)


def score_rows(backend: ControlBackend, rows: pd.DataFrame, keys: list[str], text: str = "candidate",
               low: float = 1.0, high: float = 5.0) -> np.ndarray:
    """The control's score of every row on the scale [low, high]: its ``gold`` column (a quality in [0, 1], NaN
    unknown) and its text's length go in; each row's draw is seeded by the control and the row's ``keys``."""
    if "gold" not in rows.columns:
        raise DHPError(f"{backend.identity} needs each row's gold quality (column 'gold').",
                       "the method hands its rows with their gold; a method without one cannot run a control.")
    rngs = [unit_rng(backend.identity, "|".join(str(r[k]) for k in keys)) for r in rows[keys].to_dict("records")]
    gold = rows["gold"].astype(float).to_numpy()
    lengths = _words(rows[text]) if text in rows.columns else np.full(len(rows), math.nan)
    q = np.asarray(backend.control.rate(gold, lengths, rngs), dtype=float)
    # a unit whose gold is unknown gets no score from a control that reads it (a chance draw would be a guess
    # about nothing); controls that ignore the gold still answer
    q = np.where(np.isfinite(gold) | ~np.isfinite(q) | (backend.control.name not in ("oracle",)), q, math.nan)
    return low + (high - low) * np.clip(q, 0.0, 1.0)


def prefer_rows(backend: ControlBackend, rows: pd.DataFrame, keys: list[str]) -> list:
    """The control's verdict ("1", "2", "tie") on every pair as shown: columns ``gold`` ("1"/"2"/"tie"/""),
    ``first`` and ``second`` (the texts in the order shown); seeded by the control and the row's ``keys``."""
    rngs = [unit_rng(backend.identity, "|".join(str(r[k]) for k in keys)) for r in rows[keys].to_dict("records")]
    return list(backend.control.prefer([str(g or "") for g in rows["gold"]], _words(rows["first"]),
                                       _words(rows["second"]), rngs))


@register_backend("control", example="control:oracle@0.2")
def _make(rest: str, **options) -> ControlBackend:
    if options:
        raise DHPError(f"A control judge takes no options (got {sorted(options)}).", "pass only the spec.")
    return ControlBackend(rest)
