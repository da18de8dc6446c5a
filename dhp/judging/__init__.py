"""Judging: how a judge model is asked and how its replies become numbers.

- ``prompts``: the G-Eval templates of dhp/prompts/judge/, filled per item and candidate;
- ``parsing``: the one acceptance rule for replies (a single 1–5 score, or NaN with its reason);
- ``pointwise``: the pointwise protocol — every perturbed variant scored per metric in the sample,
  logprobs or likelihood mode (``score_perturbed``; ``score_prompts`` for prompts you built);
- ``pairwise``: the pairwise protocols — two candidates compared, in both orders (``@strategy``
  registry: direct, cot, dna, chain_of_aspects; ``compare_pairs`` for plain A/B questions);
- ``failures``: the failures table written as failures.csv.

Every call goes through dhp.calls (one cache key per reply, shared by all protocols). ``PROTOCOLS`` names
each way of asking a judge; ``@protocol("name")`` registers your own (a function that takes its table and a
``judge=`` and returns a table; the pointwise and aspects protocols return it with their run statistics,
as ``Judged(table, stats)``).
"""

import functools
from typing import Callable

from dhp.extensions import Registry
from dhp.judging.aspects import score_aspects
from dhp.judging.gemba import GEMBA_PROTOCOLS, gemba_score
from dhp.judging.failures import FAILURE_COLUMNS, failure_summary, failures_table
from dhp.judging.pairwise import combine_pair_orders, compare_pairs
from dhp.judging.parsing import SCALE, VALID_SCORES, parse_reply, parse_score, score_from_logprobs
from dhp.judging.pointwise import (
    DEFAULT_MAX_TOKENS, MODES, PROMPT_SCORE_COLUMNS, Judged, load_judge_inputs, score_perturbed, score_prompts,
)
from dhp.judging.prompts import build_prompt, likelihood_prefix, load_prompt
from dhp.judging.strategies import run_strategies
from dhp.schema import SCORE_COLUMNS

#: The judge protocols by name; found by discovery (dhp.extensions): the modules of dhp.judging and the entry-point
#: group ``dhp.protocols``.
PROTOCOLS: "Registry[Callable]" = Registry(
    "judge protocol", "dhp.judging", group="dhp.protocols",
    fix="use one of those, or register yours with @dhp.judging.protocol(\"name\") in a module of dhp/judging/.")


def protocol(name: str) -> Callable:
    """Register a judge protocol under ``name`` (dhp.extensions's one rule for a name another definition holds)."""
    return PROTOCOLS.decorator(name)


def _register_builtins() -> None:
    for name, fn in (("pointwise", score_perturbed), ("pairwise", compare_pairs), ("aspects", score_aspects),
                     ("strategies", run_strategies)):
        protocol(name)(fn)


_register_builtins()


def _register_gemba() -> None:
    """gemba:DA ... gemba:classes_ref (dhp.judging.gemba): GEMBA's protocols, read from the data root when run."""
    for name in GEMBA_PROTOCOLS:
        protocol(f"gemba:{name}")(functools.partial(gemba_score, protocol=f"gemba:{name}"))


_register_gemba()

__all__ = [
    "Judged", "PROTOCOLS", "protocol", "compare_pairs", "combine_pair_orders", "DEFAULT_MAX_TOKENS", "FAILURE_COLUMNS", "MODES", "PROMPT_SCORE_COLUMNS", "SCALE", "SCORE_COLUMNS",
    "VALID_SCORES", "build_prompt", "failure_summary", "failures_table", "likelihood_prefix", "load_judge_inputs",
    "load_prompt", "parse_reply", "parse_score", "score_from_logprobs", "score_perturbed", "score_prompts",
]
