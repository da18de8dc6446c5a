"""No-LLM baseline judges: a text's score from a well-kept surface statistic of the candidate and its source — the
floor an LLM judge must clear to be worth paying for. Spec ``baseline:<name>``; they run in mode ``metric`` (one
number per text, no prompt, no reply to parse) and go through the call engine and its cache like any judge.

- ``rouge_l_src``: ROUGE-L F1 of the candidate against its source (``rouge-score``, Porter stemming);
- ``chrf_src``: chrF of the candidate against its source (``sacrebleu``'s sentence chrF, 0-100);
- ``length_ratio``: the candidate's words over the source's words.

A source in another language than the candidate (a translation task) makes an overlap score meaningless: such a
text gets NaN with the reason "not applicable" (length_ratio too: the two languages count words differently).
"""

from __future__ import annotations

import math
from importlib import metadata
from typing import Callable

from dhp.backends.base import Backend, MetricScore, register_backend
from dhp.backends.control import is_control_backend
from dhp.errors import DHPError

__all__ = ["BaselineBackend", "BASELINES", "is_metric_backend"]

#: Tasks whose source is in another language than the candidate.
CROSS_LINGUAL = ("translation",)


def _rouge_l(source: str, candidate: str) -> float:
    from rouge_score import rouge_scorer

    return float(_scorer(rouge_scorer).score(source, candidate)["rougeL"].fmeasure)


_SCORERS: dict = {}


def _scorer(rouge_scorer):
    if "rougeL" not in _SCORERS:
        _SCORERS["rougeL"] = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return _SCORERS["rougeL"]


def _chrf(source: str, candidate: str) -> float:
    import sacrebleu

    return float(sacrebleu.sentence_chrf(candidate, [source]).score)


def _length_ratio(source: str, candidate: str) -> float:
    words = len(source.split())
    return len(candidate.split()) / words if words else math.nan


#: name -> (function(source, candidate) -> score, the package whose version identifies it, what it measures)
BASELINES: dict[str, tuple[Callable[[str, str], float], str, str]] = {
    "rouge_l_src": (_rouge_l, "rouge-score", "ROUGE-L F1 of the candidate against its source"),
    "chrf_src": (_chrf, "sacrebleu", "chrF of the candidate against its source"),
    "length_ratio": (_length_ratio, "", "the candidate's words over its source's words"),
}


def is_metric_backend(backend) -> bool:
    """A judge that scores one text at a time and reads no prompt (a baseline: mode "metric" only); a
    method hands it texts, where a control is handed gold labels."""
    return bool(backend.supports_metric and not backend.supports_chat and not backend.supports_logprobs
                and not backend.supports_loglikelihood and not is_control_backend(backend))


class BaselineBackend(Backend):
    """A surface statistic as a judge (module docstring). It has no chat and no likelihood: mode ``metric``."""

    supports_logprobs = False
    supports_loglikelihood = False
    supports_metric = True
    supports_chat = False
    deterministic = True

    def __init__(self, name: str):
        if name not in BASELINES:
            raise DHPError(f"Unknown baseline judge {name!r}.", f"use one of {sorted(BASELINES)}, e.g. "
                                                                 "'baseline:rouge_l_src'.")
        self.name = name
        self.fn, package, self.description = BASELINES[name]
        self.identity = f"baseline:{name}"
        self.model = name
        self.version = metadata.version(package) if package else "builtin"
        self.metric_name = name

    @property
    def fingerprint(self) -> str:
        return f"{self.name}@{self.version}"

    def metric_many(self, requests, on_result=None):
        """One MetricScore per (source, candidate, task) request; NaN with its reason where not applicable."""
        out = []
        for i, (source, candidate, task) in enumerate(requests):
            if task in CROSS_LINGUAL:
                res = MetricScore(math.nan, f"not applicable: a {task} source is in another language than the text")
            elif not str(source or "").strip():
                res = MetricScore(math.nan, "not applicable: no source text to compare with")
            else:
                value = self.fn(str(source), str(candidate))
                res = MetricScore(value, "" if math.isfinite(value) else "no score (empty source)")
            out.append(res)
            if on_result is not None:
                on_result(i, res)
        return out

    def chat_many(self, requests, on_result=None):
        raise DHPError(f"{self.identity} is a surface statistic, not a language model: it has no chat replies.",
                       "run it in mode 'metric' (e.g. python -m dhp run --judge baseline:rouge_l_src --mode metric).")

    def loglikelihood_many(self, pairs, on_result=None):
        raise DHPError(f"{self.identity} has no token likelihoods.", "run it in mode 'metric'.")


@register_backend("baseline", example="baseline:rouge_l_src")
def _make(rest: str, **options) -> BaselineBackend:
    if options:
        raise DHPError(f"A baseline judge takes no options (got {sorted(options)}).", "pass only the spec.")
    return BaselineBackend(rest)
