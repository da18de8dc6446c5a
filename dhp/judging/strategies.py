"""Pairwise judge strategies (DnA-Eval, Li et al.; LLMBar, Zeng et al. 2023): which of two responses to an
instruction is better? Each strategy is one registered function; every one runs with the two responses in
both orders ("12": output_1 shown first as Output (a); "21": output_2 first) and maps its verdict back to the
dataset's labelling, so position bias can be measured.

- ``llmbar:<Strategy>`` (Vanilla, Vanilla_NoRules, Vanilla_1shot, Vanilla_2shot, CoT, Metrics, Reference,
  Metrics_Reference; Rating, Rating_NoRules, Rating_Metrics, Rating_Reference, Rating_Metrics_Reference; Swap,
  Swap_CoT): LLMBar's own evaluators, verbatim (Zeng et al. 2023; github.com/princeton-nlp/LLMBar @ 900616b,
  LLMEvaluator/evaluate.py): the template, decoding settings and verdict regexes are READ AT RUN TIME from the data
  root's ``llmbar_prompts/`` (``config/<judge>/<Strategy>.json`` names them; never copied into this project), the
  template is filled with ``str.format_map`` and split into chat roles at its ChatML markers
  (:func:`chatml_messages`), the reply is stripped and the first parsing rule whose regex matches gives the
  winner (:func:`llmbar_parse`), both orders as evaluate.py runs them. Rating: each output scored alone, the two
  integers give both orders' verdicts (:func:`llmbar_rating_verdicts`); Swap: a second round with both first-round
  explanations where the orders disagree, the last round is the verdict (:func:`llmbar_swap_fields`). These are the protocol of LLMBar's recorded
  verdicts; the leaderboard ranks a live judge beside the recorded ones only on the same protocol
  (:func:`llmbar_protocol`). As evaluate.py, every strategy asks each pair's calls on its own (each call has its own
  cache key: strategy, pair, step), and the refusals evaluate.py handles are answers, not failures for the circuit
  breaker (:func:`llmbar_handled`): too long is asked again at 80 % max_tokens, a content filter or a reply without
  content is the empty reply. ``share_requests`` answers identical requests once across strategies and pairs, named
  in the protocol identity (:data:`LLMBAR_SHARED`).
- ``dhp_vanilla``: this project's own rewording of LLMBar's Vanilla evaluator (one prompt with evaluation rules, the
  instruction and both outputs; the reply is "Output (a)" or "Output (b)", :func:`parse_choice`): not LLMBar's
  protocol, so never in the view of LLMBar's recorded Vanilla verdicts.
- ``direct``: DnA-Eval's direct-scoring baseline (Li et al. §4.1 "Baselines", appendix B): one prompt with the
  instruction and BOTH responses; an overall 1–5 score for each ("Output (a): x / Output (b): y",
  :func:`parse_pair`); the higher wins, equal scores are a tie.
- ``cot``: DnA-Eval's CoT baseline: the same prompt, an explanation first, then the two scores (the last
  "Output (a): x ... Output (b): y" in the reply is read).
- ``direct_pointwise``: each response scored alone in its own call (1–5, ``mode`` logprobs or sample through
  dhp.judging.score_prompts). The order is then only a relabelling — its position consistency is 1 by
  construction, so it is NOT the paper's baseline; kept for comparison with DHP's pointwise scoring.
- ``dna`` (decompose and aggregate, Li et al. §3): (a) three aspects proposed from the instruction alone;
  (b) both responses scored on each aspect, one inference per aspect; (c) aspect weights in percent proposed
  from the instruction and aspects (:func:`parse_weights`); (d) f = Σ w·s computed here, the higher wins.
- ``chain_of_aspects`` (ablation, Li et al. Table 2): (a) and (b) as in dna, then the LLM itself turns the
  aspect scores into overall scores.

dna and chain_of_aspects use the same rule for when the aspects are usable (:func:`aspects_unusable`): three
aspects, each with a score for both responses in this order; otherwise the (item, order) gets a NaN verdict
with the reason and no further call is made for it. All calls go through dhp.calls / dhp.judging.score_prompts:
cached, any backend, temperature 0. A step whose reply does not parse gives a None verdict with its reason —
never a guessed label.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np
import pandas as pd

from dhp import calls
from dhp.analysis.decomposition import (LLMBAR_COMMIT, LLMBAR_OWN_DECODING_TEXT, LLMBAR_OWN_FORMAT,  # one source
                                        LLMBAR_OWN_RULE_TEXT, llmbar_identity)  # of the identity and its words
from dhp.backends import ChatRequest, get_backend
from dhp.backends.baseline import is_metric_backend
from dhp.backends.control import is_control_backend, prefer_rows
from dhp.datasets import declared_files
from dhp.errors import DHPError
from dhp.extensions import Registry
from dhp.judging.pointwise import score_prompts
from dhp.prompts import fill, load

__all__ = ["STRATEGIES", "strategy", "run_strategies", "metric_requests", "parse_pair", "parse_choice",
           "parse_weights", "parse_aspects", "aspects_unusable", "verdict_from", "VERDICT_COLUMNS", "N_ASPECTS",
           "LLMBAR_STRATEGIES",
           "llmbar_protocol", "llmbar_auxiliary_requests", "llmbar_messages", "chatml_messages", "llmbar_parse", "LLMBarProtocol",
           "llmbar_prompts_dir", "llmbar_kind", "llmbar_rating_score", "llmbar_rating_verdicts", "reverse_output_ab",
           "llmbar_swap_fields", "llmbar_plan_requests", "llmbar_plan_jobs", "llmbar_retry_bound", "llmbar_handled",
           "LLMBAR_SHARED", "LLMBAR_COMPARISON", "LLMBAR_RATING", "LLMBAR_SWAP"]

#: The pairwise judge protocols by name (the ``strategies`` of decompose_aggregate); found by discovery (dhp.extensions):
#: the modules of dhp.judging (a new protocol is one module there) and the entry-point group ``dhp.strategies``.
STRATEGIES: "Registry[Callable]" = Registry(
    "pairwise strategy", "dhp.judging", group="dhp.strategies",
    fix="use some of those, or add a module to dhp/judging/ with @strategy(\"name\") on fn(items, ctx) -> rows.")
ORDERS = ("12", "21")
N_ASPECTS = 3  # DnA-Eval's default number of aspects (Li et al. §4.1); the aspects prompt asks for three
WEIGHT_TOLERANCE = 5.0  # percentage points a weight sum may be off 100 and still be used (renormalised, flagged)
#: The verdicts table, one row per item × strategy × order: the one schema live runs and imported LLMBar
#: results share (an import adds judge, mode, source). verdict is "1", "2", "tie" or None, in the dataset's
#: labelling whatever the order; label is the gold "1", "2" (or "tie" in a user's own file).
VERDICT_COLUMNS = ["item_id", "subset", "strategy", "order", "aspects", "aspect_scores_1", "aspect_scores_2",
                   "weights", "f1", "f2", "verdict", "label", "failure"]
MAX_TOKENS = {"dhp_vanilla": 8, "direct": 16, "cot": 200, "aspects": 96, "aspect_scores": 16, "weights": 24,
              "aggregate": 16}


def strategy(name: str):
    """Register a pairwise strategy: ``fn(items, ctx) -> list of row dicts`` (one per item and order)."""
    return STRATEGIES.decorator(name)


@dataclass
class Context:
    judge: object
    mode: str
    cache: object
    seed: int
    progress: bool | str
    calls: int = 0
    prompt_tokens: int = 0
    notes: list = field(default_factory=list)
    data_dir: object = None
    protocol: str = ""  # the protocol identity of the strategy's verdicts ("" for the project's own wordings)
    share_requests: bool = False  # llmbar: identical requests answered once across strategies and pairs (named)


def _template(name: str) -> str:
    return load("dna", name)


# ---------------------------------------------------------------------------------------------- parsing

_PAIR = re.compile(r"output\s*\(?a\)?\s*[:=]\s*(\d+(?:\.\d+)?).*?output\s*\(?b\)?\s*[:=]\s*(\d+(?:\.\d+)?)",
                   re.IGNORECASE | re.DOTALL)
# a line that starts (after spaces, quotes, markdown) with "Output (a)", "Output a" or "(a)"
_CHOICE = re.compile(r"^[\s\"'*#>`-]*(?:output\s*\(([ab])\)|output\s+([ab])\b|\(([ab])\))",
                     re.IGNORECASE | re.MULTILINE)


def parse_pair(text: str | None, last: bool = False) -> tuple[float, float, str]:
    """Scores of Output (a) and Output (b) from "Output (a): 4 ... Output (b): 3" on the 1–5 scale:
    (s_a, s_b, "") or (NaN, NaN, reason). ``last``: read the last such pair (CoT: the scores follow the
    explanation, which may quote scores of its own)."""
    found = list(_PAIR.finditer(str(text or "")))
    if not found:
        return math.nan, math.nan, f"no 'Output (a): x / Output (b): y' in reply: {str(text or '')[:80]!r}"
    m = found[-1] if last else found[0]
    a, b = float(m.group(1)), float(m.group(2))
    if not (1 <= a <= 5 and 1 <= b <= 5):
        return math.nan, math.nan, f"out of scale: {m.group(1)}, {m.group(2)}"
    return a, b, ""


def parse_choice(text: str | None) -> tuple[str | None, str]:
    """LLMBar Vanilla's answer: ("a" | "b", "") when lines of the reply start with "Output (a)" or "Output (b)"
    (also "Output a", "(a)"), else (None, reason). LLMBar's own parser takes (a) whenever any line starts with
    it; here a reply naming both at line starts is ambiguous and gives None with the reason."""
    got = {next(g for g in m.groups() if g).lower() for m in _CHOICE.finditer(str(text or ""))}
    if len(got) == 1:
        return got.pop(), ""
    if not got:
        return None, f"no line starting with 'Output (a)' or 'Output (b)' in reply: {str(text or '')[:80]!r}"
    return None, f"names both outputs: {str(text or '')[:80]!r}"


_PERCENT = re.compile(r"(-?\d+(?:\.\d+)?)\s*%")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
# a numbered-list marker: "1." / "2)" / "(3)" at a line start or after a space, followed by more text
_LIST_INDEX = re.compile(r"(?:^|(?<=\s))\(?\d+[.)](?=[ \t]+\S)", re.MULTILINE)


def parse_weights(text: str | None, k: int) -> tuple[list[float] | None, str]:
    """k aspect weights in percent from the reply (DnA-Eval appendix B: percentages on one line, sum 100).

    Which numbers are weights: when any number carries a percent sign, only those do ("1. 50% 2. 30% 3. 20%"
    is [50, 30, 20]: list indices are not weights); k + 1 percentages whose last equals the sum of the others
    (± WEIGHT_TOLERANCE) are k weights and their total. Otherwise the bare numbers after numbered-list markers
    ("1.", "2)") are removed ("50 30 20" is read). Returns (weights summing to 1, note): note "" when the
    numbers sum to exactly 100, "renormalised: sum was S" when they sum to 100 ± WEIGHT_TOLERANCE and were
    rescaled (used, and flagged); (None, reason) when there are not exactly k of them, one is negative, or
    the sum is further from 100 — such a reply is never used."""
    s = str(text or "")
    pct = [float(x) for x in _PERCENT.findall(s)]
    if pct:
        nums, kind = pct, "percentages"
        if len(nums) == k + 1 and abs(sum(nums[:k]) - nums[k]) <= WEIGHT_TOLERANCE:
            nums = nums[:k]  # "50% 30% 20% (total 100%)"
    else:
        nums, kind = [float(x) for x in _NUMBER.findall(_LIST_INDEX.sub(" ", s))], "numbers"
    if len(nums) != k:
        return None, f"{len(nums)} {kind} for {k} aspects in reply: {s[:80]!r}"
    if any(x < 0 for x in nums):
        return None, f"negative weight in reply: {s[:80]!r}"
    total = sum(nums)
    if abs(total - 100) > WEIGHT_TOLERANCE:
        return None, f"weights sum to {total:g}, not 100 ± {WEIGHT_TOLERANCE:g}: {s[:80]!r}"
    return [x / total for x in nums], "" if total == 100 else f"renormalised: sum was {total:g}"


def parse_aspects(text: str | None, k: int = N_ASPECTS) -> list[str]:
    """Up to k questions from a numbered or line-separated reply (the prompt already wrote "1.")."""
    lines = [re.sub(r"^\s*(?:\d+[.)]|[-*•])\s*", "", ln).strip() for ln in ("1. " + str(text or "")).splitlines()]
    return [ln for ln in lines if len(ln) > 3][:k]


def aspects_unusable(aspects: list[str], s1, s2, reasons=()) -> str:
    """Why the aspect scores of one (item, order) cannot be aggregated ("" when they can): fewer than
    N_ASPECTS aspects, or an aspect without a score for both responses (``reasons``: the parse failures).
    dna and chain_of_aspects both refuse exactly these cases."""
    if len(aspects) < N_ASPECTS:
        return f"{len(aspects)} aspects proposed, {N_ASPECTS} needed"
    bad = [i + 1 for i, (x, y) in enumerate(zip(s1, s2)) if not (math.isfinite(x) and math.isfinite(y))]
    if bad:
        return f"no score on aspect(s) {bad}" + (f" ({'; '.join(r for r in reasons if r)})" if any(reasons) else "")
    return ""


def verdict_from(f1: float, f2: float) -> str | None:
    """"1", "2" or "tie" from the two overall scores; None when either is NaN."""
    if not (math.isfinite(f1) and math.isfinite(f2)):
        return None
    return "tie" if abs(f1 - f2) < 1e-9 else ("1" if f1 > f2 else "2")


# ---------------------------------------------------------------------------------------------- calls

def _chat(ctx: Context, prompts: list[str], max_tokens: int) -> list[tuple[str | None, str]]:
    if not prompts:
        return []
    reqs = [ChatRequest.make([{"role": "user", "content": p}], max_tokens, 0.0, ctx.seed) for p in prompts]
    out = calls.chat(ctx.judge, reqs, ctx.cache, progress=ctx.progress, desc="pairwise")
    res = []
    for o in out:
        text = getattr(o, "text", None)
        ctx.calls += 1
        ctx.prompt_tokens += int(getattr(o, "prompt_tokens", 0) or 0)
        res.append((text, "" if text is not None else getattr(o, "reason", "call failed")))
    return res


def _oriented(item, order: str) -> tuple[str, str]:
    return (item.output_1, item.output_2) if order == "12" else (item.output_2, item.output_1)


def _back(a, b, order: str):
    """Values about (Output (a), Output (b)) as shown in ``order`` -> about (output_1, output_2)."""
    return (a, b) if order == "12" else (b, a)


def _row(item, name, order, **kw) -> dict:
    base = {"item_id": item.item_id, "subset": item.subset, "strategy": name, "order": order, "aspects": "",
            "aspect_scores_1": "", "aspect_scores_2": "", "weights": "", "f1": math.nan, "f2": math.nan,
            "verdict": None, "label": item.label, "failure": ""}
    base.update(kw)
    return base


def _both_orders(ctx: Context, items: pd.DataFrame, template: str) -> list[tuple[object, str, str | None, str]]:
    """One call per item and order with the instruction and both responses: (item, order, reply, why)."""
    t = _template(template)
    jobs = [(it, order) for it in items.itertuples() for order in ORDERS]
    prompts = [fill(t, dict(zip(("instruction", "response_a", "response_b"), (it.instruction, *_oriented(it, order)))))
               for it, order in jobs]
    return [(it, order, txt, why) for (it, order), (txt, why) in zip(jobs, _chat(ctx, prompts, MAX_TOKENS[template]))]


@strategy("dhp_vanilla")
def dhp_vanilla(items: pd.DataFrame, ctx: Context) -> list[dict]:
    rows = []
    for it, order, txt, why in _both_orders(ctx, items, "dhp_vanilla"):
        choice, reason = parse_choice(txt) if txt is not None else (None, why)
        verdict = None if choice is None else _back("1", "2", order)[0 if choice == "a" else 1]
        rows.append(_row(it, "dhp_vanilla", order, verdict=verdict, failure=reason))
    return rows


def _scored_pair(name: str, items: pd.DataFrame, ctx: Context) -> list[dict]:
    rows = []
    for it, order, txt, why in _both_orders(ctx, items, name):
        sa, sb, reason = parse_pair(txt, last=(name == "cot")) if txt is not None else (math.nan, math.nan, why)
        f1, f2 = _back(sa, sb, order)
        rows.append(_row(it, name, order, f1=f1, f2=f2, verdict=verdict_from(f1, f2), failure=reason))
    return rows


@strategy("direct")
def direct(items: pd.DataFrame, ctx: Context) -> list[dict]:
    return _scored_pair("direct", items, ctx)


@strategy("cot")
def cot(items: pd.DataFrame, ctx: Context) -> list[dict]:
    return _scored_pair("cot", items, ctx)


@strategy("direct_pointwise")
def direct_pointwise(items: pd.DataFrame, ctx: Context) -> list[dict]:
    t = _template("direct_pointwise")
    prompts = pd.DataFrame([{"item_id": it.item_id, "which": w, "metric": "score",
                             "prompt": fill(t, {"instruction": it.instruction, "response": getattr(it, f"output_{w}")})}
                            for it in items.itertuples() for w in (1, 2)])
    scored = score_prompts(prompts, judge=ctx.judge, mode=ctx.mode, n_samples=1, seed=ctx.seed, cache=ctx.cache,
                           progress=ctx.progress).table  # the costs table counts this strategy's calls itself
    ctx.calls += int(len(scored))
    ctx.prompt_tokens += int(scored["prompt_tokens"].sum())
    s = scored.set_index(["item_id", "which"])
    rows = []
    for it in items.itertuples():
        f1, f2 = float(s.at[(it.item_id, 1), "score"]), float(s.at[(it.item_id, 2), "score"])
        why = "; ".join(x for x in (s.at[(it.item_id, 1), "failure"], s.at[(it.item_id, 2), "failure"]) if x)
        for order in ORDERS:  # separate calls: the order is only the labelling, consistent by construction
            rows.append(_row(it, "direct_pointwise", order, f1=f1, f2=f2, verdict=verdict_from(f1, f2), failure=why))
    return rows


def _decompose(items: pd.DataFrame, ctx: Context) -> dict:
    """Aspects per item (a) and aspect-wise pair scores per item and order (b). An item with fewer than
    N_ASPECTS aspects is not scored (it would be refused anyway)."""
    asp_replies = _chat(ctx, [fill(_template("aspects"), {"instruction": it.instruction}) for it in items.itertuples()],
                        MAX_TOKENS["aspects"])
    aspects = {it.item_id: (parse_aspects(txt), why) for it, (txt, why) in zip(items.itertuples(), asp_replies)}
    jobs, prompts = [], []
    t = _template("aspect_scores")
    for it in items.itertuples():
        found = aspects[it.item_id][0]
        for a_i, aspect in enumerate(found if len(found) >= N_ASPECTS else []):
            for order in ORDERS:
                ra, rb = _oriented(it, order)
                jobs.append((it.item_id, order, a_i))
                prompts.append(fill(t, {"aspect": aspect, "instruction": it.instruction, "response_a": ra,
                                         "response_b": rb}))
    scores: dict = {}
    for (iid, order, a_i), (txt, why) in zip(jobs, _chat(ctx, prompts, MAX_TOKENS["aspect_scores"])):
        sa, sb, reason = parse_pair(txt) if txt is not None else (math.nan, math.nan, why)
        s1, s2 = _back(sa, sb, order)  # s1 is output_1's score whatever position it was shown in
        scores[(iid, order, a_i)] = (s1, s2, reason)
    return {"aspects": aspects, "scores": scores}


def _aspect_vectors(d: dict, it, order: str):
    """(aspects, s1, s2, refusal): the item's aspects, the aspect scores of output_1 and output_2 in this order,
    and why they cannot be aggregated ("" when they can)."""
    aspects, why = d["aspects"][it.item_id]
    got = [d["scores"].get((it.item_id, order, a), (math.nan, math.nan, "")) for a in range(len(aspects))]
    s1 = np.array([g[0] for g in got], dtype=float)
    s2 = np.array([g[1] for g in got], dtype=float)
    refusal = aspects_unusable(aspects, s1, s2, [g[2] for g in got])
    if refusal and len(aspects) < N_ASPECTS and why:
        refusal += f" ({why})"
    return aspects, s1, s2, refusal


def _scores_text(s) -> str:
    return ";".join(f"{x:g}" for x in s)


@strategy("dna")
def dna(items: pd.DataFrame, ctx: Context) -> list[dict]:
    d = _decompose(items, ctx)
    t = _template("weights")
    usable = [it for it in items.itertuples() if len(d["aspects"][it.item_id][0]) >= N_ASPECTS]
    prompts = [fill(t, {"instruction": it.instruction, "aspect_list": "\n".join(
        f"{i + 1}. {a}" for i, a in enumerate(d["aspects"][it.item_id][0]))}) for it in usable]
    weight_replies = dict(zip([it.item_id for it in usable], _chat(ctx, prompts, MAX_TOKENS["weights"])))
    rows = []
    for it in items.itertuples():
        wtxt, wwhy = weight_replies.get(it.item_id, (None, ""))
        w, note = parse_weights(wtxt, N_ASPECTS) if wtxt is not None else (None, wwhy)
        for order in ORDERS:
            aspects, s1, s2, refusal = _aspect_vectors(d, it, order)
            reasons = [refusal] if refusal else []
            if w is None and note:  # no note: no weights were asked (too few aspects)
                reasons.append(f"weights: {note}")
            elif note:
                reasons.append(note)  # renormalised weights are used, and flagged
            ok = w is not None and not refusal
            f1 = float(np.dot(w, s1)) if ok else math.nan
            f2 = float(np.dot(w, s2)) if ok else math.nan
            rows.append(_row(it, "dna", order, aspects=" | ".join(aspects), f1=f1, f2=f2, verdict=verdict_from(f1, f2),
                             aspect_scores_1=_scores_text(s1), aspect_scores_2=_scores_text(s2),
                             weights=";".join(f"{x:.3f}" for x in w) if w else "", failure="; ".join(reasons)))
    return rows


@strategy("chain_of_aspects")
def chain_of_aspects(items: pd.DataFrame, ctx: Context) -> list[dict]:
    d = _decompose(items, ctx)
    t = _template("aggregate")
    jobs, prompts, refused = [], [], []
    for it in items.itertuples():
        for order in ORDERS:
            aspects, s1, s2, refusal = _aspect_vectors(d, it, order)
            if refusal:  # the same cases dna refuses: no call, a NaN verdict with the reason
                refused.append(_row(it, "chain_of_aspects", order, aspects=" | ".join(aspects), failure=refusal,
                                    aspect_scores_1=_scores_text(s1), aspect_scores_2=_scores_text(s2)))
                continue
            sa, sb = _back(s1, s2, order)  # as shown in this order
            ra, rb = _oriented(it, order)
            lines = "\n".join(f"{q} — Output (a): {x:g}, Output (b): {y:g}" for q, x, y in zip(aspects, sa, sb))
            jobs.append((it, order, aspects, s1, s2))
            prompts.append(fill(t, {"instruction": it.instruction, "response_a": ra, "response_b": rb,
                                     "score_list": lines}))
    rows = list(refused)
    for (it, order, aspects, s1, s2), (txt, why) in zip(jobs, _chat(ctx, prompts, MAX_TOKENS["aggregate"])):
        fa, fb, reason = parse_pair(txt) if txt is not None else (math.nan, math.nan, why)
        f1, f2 = _back(fa, fb, order)
        rows.append(_row(it, "chain_of_aspects", order, aspects=" | ".join(aspects), f1=f1, f2=f2,
                         verdict=verdict_from(f1, f2), aspect_scores_1=_scores_text(s1),
                         aspect_scores_2=_scores_text(s2), failure=reason))
    return rows


# ---------------------------------------------------------------------------------------------- LLMBar, verbatim

#: LLMBar's evaluators as evaluate.py groups them: the one-round comparisons (its NonSwap set), the Rating ones (each
#: output scored alone, the two scores give the verdict) and Swap and Synthesize (a second round when the two orders
#: disagree). All run here verbatim.
LLMBAR_COMPARISON = ("Vanilla", "Vanilla_NoRules", "Vanilla_1shot", "Vanilla_2shot", "CoT", "Metrics", "Reference",
                     "Metrics_Reference")
LLMBAR_RATING = ("Rating", "Rating_NoRules", "Rating_Metrics", "Rating_Reference", "Rating_Metrics_Reference")
LLMBAR_SWAP = ("Swap", "Swap_CoT")
LLMBAR_STRATEGIES = LLMBAR_COMPARISON + LLMBAR_RATING + LLMBAR_SWAP
#: whose config (decoding, parsing) a live judge follows: GPT-4's, the recorded judge it is ranked beside
LLMBAR_CONFIG_JUDGE = "GPT-4"
_START, _END = "<|im_start|>", "<|im_end|>"


def llmbar_kind(strategy: str) -> str:
    """"comparison", "rating" or "swap": which of evaluate.py's three procedures runs ``strategy``."""
    return "rating" if strategy in LLMBAR_RATING else "swap" if strategy in LLMBAR_SWAP else "comparison"


def llmbar_prompts_dir(data_dir=None):
    """The data root's ``llmbar_prompts/`` folder (LLMBar's LLMEvaluator/evaluators/{prompts,config})."""
    # fetched on first need, like every other declared input
    return declared_files.path("llmbar_prompts", data_dir)


@dataclass(frozen=True)
class LLMBarModule:
    """One step of an LLMBar evaluator as its config file says: the template, the decoding settings and the
    parsing rules (label -> regex, in the config's order; empty for an auxiliary step, whose reply is used as is,
    and for a Rating step, whose reply is read as an integer)."""

    template: str
    prompt_file: str
    max_tokens: int
    temperature: float
    parsing: tuple[tuple[str, str], ...]
    not_applied: tuple[str, ...] = ()


@dataclass(frozen=True)
class LLMBarProtocol:
    strategy: str
    modules: tuple[LLMBarModule, ...]
    identity: str  # "llmbar/<Strategy>@<commit> sha256:<template digest>": what the leaderboard compares
    share_requests: bool = False  # identical requests answered once across strategies and pairs (not evaluate.py's)

    @property
    def kind(self) -> str:
        return llmbar_kind(self.strategy)

    @property
    def differences(self) -> tuple[str, ...]:
        """Where a live run deliberately differs from evaluate.py (the protocol record; the CHANGELOG says why)."""
        out = [f"{', '.join(sorted({k for m in self.modules for k in m.not_applied}))} not applied (logit biases on "
               "tiktoken ids of OpenAI's models)"] if any(m.not_applied for m in self.modules) else []
        if self.kind == "rating":
            out.append("a score reply that is not an integer gives no verdict (evaluate.py: '1' in order 12, '2' "
                       "in order 21), as the recorded rows are imported")
        out.append("a too-long call is retried at 80 % max_tokens down to 1, then read as the empty reply without the "
                   "call at max_tokens 0 (evaluate.py sends it; the API refuses it and evaluate.py reads '')")
        if self.share_requests:
            out.append(LLMBAR_SHARED)
        return tuple(out)

    @property
    def auxiliary(self) -> tuple[LLMBarModule, ...]:
        """The steps run on the instruction alone before the verdict (Metrics, Reference); none for Swap."""
        return () if self.kind == "swap" else self.modules[:-1]


def _template_digest(texts) -> str:
    return "+".join(hashlib.sha256(t.encode("utf-8")).hexdigest()[:12] for t in texts)


#: The option of sharing replies, as named on a protocol that uses it (evaluate.py asks every strategy and pair on its own)
LLMBAR_SHARED = "identical requests answered once across strategies and pairs"


def llmbar_protocol(strategy: str, data_dir=None, judge_config: str = LLMBAR_CONFIG_JUDGE,
                    share_requests: bool = False) -> LLMBarProtocol:
    """LLMBar's evaluator ``strategy`` read from the data root: ``config/<judge_config>/<strategy>.json`` and the
    templates it names. Decoding: max_tokens (or max_new_tokens) and temperature as configured (temperature 0
    where the config names none: greedy generation); the configs' tokens_to_avoid/tokens_to_favor are logit biases
    on tiktoken ids of OpenAI's models, which mean nothing to another tokenizer: not applied, and recorded in
    ``not_applied``. ``share_requests``: identical requests share one reply across strategies and pairs (cheaper, not
    evaluate.py's procedure): named in the identity, so such rows are never "the same protocol" as the recorded ones."""
    if strategy not in LLMBAR_STRATEGIES:
        raise DHPError(f"LLMBar strategy {strategy!r} is not one of LLMBar's evaluators.",
                       f"use one of {list(LLMBAR_STRATEGIES)}.")
    root = llmbar_prompts_dir(data_dir)
    cfg_path = root / "config" / judge_config / f"{strategy}.json"
    if not cfg_path.is_file():
        raise DHPError(f"LLMBar's evaluator config {cfg_path} is missing.",
                       "put LLMBar's LLMEvaluator/evaluators/{prompts,config} (github.com/princeton-nlp/LLMBar @ "
                       f"{LLMBAR_COMMIT}) into <data root>/llmbar_prompts/, or set DHP_DATA_DIR.")
    try:
        configs = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DHPError(f"{cfg_path} is not a readable JSON config ({e}).", "use the unmodified upstream file.") from None
    modules = []
    for c in configs:
        path = root / "prompts" / c["prompt"]
        if not path.is_file():
            raise DHPError(f"LLMBar template {path} (named by {cfg_path.name}) is missing.",
                           "copy LLMBar's evaluators/prompts/ folder into <data root>/llmbar_prompts/prompts/.")
        kwargs = c.get("openai_kwargs") or c.get("generate_kwargs") or c.get("palm_kwargs") or {}
        max_tokens = kwargs.get("max_tokens", kwargs.get("max_new_tokens", kwargs.get("max_output_tokens")))
        if max_tokens is None:
            raise DHPError(f"{cfg_path} names no max_tokens for {c['prompt']}.", "use the unmodified upstream file.")
        not_applied = tuple(k for k in ("tokens_to_avoid", "tokens_to_favor") if k in kwargs)
        modules.append(LLMBarModule(path.read_text(encoding="utf-8"), str(c["prompt"]), int(max_tokens),
                                    float(kwargs.get("temperature", 0.0)),
                                    tuple((str(k), str(v)) for k, v in (c.get("parsing") or {}).items()), not_applied))
    kind = llmbar_kind(strategy)
    # the shape evaluate.py asserts or relies on for each procedure
    ok = bool(modules) and (not modules[-1].parsing if kind == "rating" else bool(modules[-1].parsing)) and \
        (kind != "swap" or (len(modules) == 2 and bool(modules[0].parsing)))
    if not ok:
        raise DHPError(f"{cfg_path} does not have the steps LLMBar's {kind} evaluators have.",
                       "use the unmodified upstream file.")
    diffs = _config_differences(data_dir, strategy, configs, modules) \
        if judge_config != LLMBAR_CONFIG_JUDGE else ()
    digest = _template_digest(m.template for m in modules)
    identity = llmbar_identity(strategy, digest, judge_config, diffs) if diffs or not share_requests else \
        llmbar_identity(strategy, digest, "shared", (LLMBAR_SHARED,))
    if diffs and share_requests:
        identity += f" [shared: {LLMBAR_SHARED}]"
    return LLMBarProtocol(strategy, tuple(modules), identity, share_requests)


def _config_differences(data_dir, strategy: str, configs: list, modules: list) -> tuple[str, ...]:
    """How a judge's config of ``strategy`` differs from the live one (GPT-4's), read as evaluate.py reads it:
    the answer rule (parsing), the message format (evaluate.py's dispatch on the model name: Llama-2 and Falcon get
    their own text formats, PaLM one text prompt; the rest ChatML) and the decoding (a temperature or none)."""
    live = llmbar_protocol(strategy, data_dir)
    rule = [m.parsing for m in modules] != [m.parsing for m in live.modules]
    name = str(configs[0].get("model_name", ""))
    fmt = "LLaMA2" if "meta-llama/Llama-2" in name else "Falcon" if "tiiuae/falcon-180B" in name else \
        "PaLM2" if "PaLM" in name else ""
    own_decoding = any("temperature" not in (c.get("openai_kwargs") or c.get("generate_kwargs")
                                             or c.get("palm_kwargs") or {}) for c in configs)
    out = [LLMBAR_OWN_RULE_TEXT] if rule else []
    out += [LLMBAR_OWN_FORMAT[fmt]] if fmt else []
    out += [LLMBAR_OWN_DECODING_TEXT] if own_decoding else []
    return tuple(out)


def chatml_messages(prompt: str) -> list[dict[str, str]]:
    """A filled LLMBar template as chat messages, split at its ChatML markers the way LLMBar's evaluate.py
    (prompt_to_chatml) does: the whole prompt stripped; each ``<|im_start|>`` opens a message whose role is the
    rest of that line (stripped) and whose content is what follows up to ``<|im_end|>``, stripped."""
    text = prompt.strip()
    if not (text.startswith(_START) and text.endswith(_END)):
        raise DHPError("An LLMBar template does not start with <|im_start|> and end with <|im_end|>.",
                       "use the unmodified upstream template.")
    out = []
    for chunk in text.split(_START)[1:]:
        head, _, rest = chunk.partition("\n")
        role = head.strip()
        if role != role.split(" ")[0]:  # "system name=example_user": extra fields a (role, content) call cannot carry
            raise DHPError(f"LLMBar template role {role!r} carries fields this project's chat calls cannot send.",
                           "use one of the comparison templates (system/user/assistant roles only).")
        out.append({"role": role, "content": rest.split(_END, 1)[0].strip()})
    return out


def llmbar_messages(module: LLMBarModule, **fields) -> list[dict[str, str]]:
    """The messages of one call: the template filled with ``str.format_map`` (as evaluate.py), split by roles."""
    return chatml_messages(module.template.format_map(fields))


def llmbar_parse(module: LLMBarModule, reply: str | None) -> tuple[str | None, str]:
    """LLMBar's verdict rule: the reply stripped; the first label (in the config's order) whose regex is found
    anywhere in it wins ("1" = Output (a), "2" = Output (b)); none found: (None, reason)."""
    text = str(reply or "").strip()
    for label, exp in module.parsing:
        if re.search(exp, text):
            return label, ""
    return None, f"no verdict: the reply matches none of LLMBar's answer patterns: {text[:60]!r}"


def llmbar_rating_score(reply: str | None) -> tuple[int | float, str]:
    """A Rating reply read as evaluate.py reads it: Python's ``int()`` of the whole reply (spaces around it
    allowed); (score, "") with the score an int, compared as evaluate.py compares (a float would make two large
    integers equal), or (NaN, reason) — an empty reply or any other text is no score."""
    try:
        return int(str(reply if reply is not None else "")), ""
    except ValueError:
        return math.nan, f"not an integer: {str(reply or '')[:40]!r}"


def llmbar_rating_verdicts(reply_1: str | None, reply_2: str | None) -> tuple[float, float, str | None, str | None, str]:
    """The Rating verdicts from the replies scoring output_1 and output_2: (score_1, score_2, verdict of order
    "12", verdict of order "21", failure). evaluate.py's rule: order 12 "1" when score_1 > score_2 else "2", order
    21 "2" when score_2 > score_1 else "1" — equal scores are two different verdicts, kept so (the recorded
    rows keep them too). Where a reply is not an integer evaluate.py falls back to "1" / "2"; that made-up verdict
    is not kept here (None with the reason, as dhp.recorded.llmbar imports such rows): a deliberate difference."""
    (s1, why1), (s2, why2) = llmbar_rating_score(reply_1), llmbar_rating_score(reply_2)
    if why1 or why2:
        why = "; ".join(f"score_{k} {w}" for k, w in ((1, why1), (2, why2)) if w)
        return float(s1), float(s2), None, None, why + " (evaluate.py's fallback verdict not kept)"
    # compared as ints (evaluate.py's rule); the table's f1/f2 columns hold them as floats
    return float(s1), float(s2), "1" if s1 > s2 else "2", "2" if s2 > s1 else "1", ""


def reverse_output_ab(explanation: str) -> str:
    """evaluate.py's reverse_OutputAB: "Output (a)" and "Output (b)" (and lower-case "output") exchanged, so an
    explanation written for one order reads right in the other (the same placeholder strings as upstream)."""
    for w in ("Output", "output"):
        a, b = f"{w} (a)", f"{w} (b)"
        explanation = explanation.replace(a, f"**********{a}**********").replace(b, f"##########{b}##########")
        explanation = explanation.replace(f"**********{a}**********", b).replace(f"##########{b}##########", a)
    return explanation


def llmbar_swap_fields(item, first: dict[str, tuple[str | None, str]]) -> list[dict] | None:
    """The second round of Swap and Synthesize for one item, as evaluate.py builds it: ``first`` maps order ("12",
    "21") to (winner in the dataset's labelling, the stripped reply). Only when the two orders chose different
    outputs: the template fields for order "12" and "21" (explanation_1 argues for the output shown first, its
    Output (a)/(b) exchanged where it was written in the other order); otherwise None (round one is the verdict)."""
    if {first["12"][0], first["21"][0]} != {"1", "2"}:
        return None
    argues = {first[o][0]: o for o in ORDERS}  # output "1"/"2" -> the order whose reply argued for it
    texts = {w: first[argues[w]][1] for w in ("1", "2")}
    out = []
    for order in ORDERS:
        e1, e2 = (texts[w] if argues[w] == order else reverse_output_ab(texts[w]) for w in ("1", "2"))
        o1, o2 = _oriented(item, order)
        out.append(dict(input=item.instruction, output_1=o1, output_2=o2,
                        explanation_1=e1 if order == "12" else e2, explanation_2=e2 if order == "12" else e1))
    return out


def _llmbar_request(module: LLMBarModule, **fields):
    # no seed: LLMBar's evaluate.py never sent one (a parameter the protocol does not have)
    return ChatRequest.make(llmbar_messages(module, **fields), module.max_tokens, module.temperature, None)


#: evaluate.py (openai_completion): a call refused with "Please reduce" (prompt + max_tokens over the model's
#: context) is asked again with max_tokens x 0.8 (rounded down), until it fits
LLMBAR_REDUCE = 0.8


def llmbar_retry_bound(max_tokens: int) -> int:
    """The most calls one too-long request can take: max_tokens, int(x 0.8), ... down to 1 (evaluate.py's next try,
    at max_tokens 0, is refused by the API itself and gives an empty reply: not sent here)."""
    n = 0
    while max_tokens >= 1:
        n, max_tokens = n + 1, int(max_tokens * LLMBAR_REDUCE)
    return n


def _too_long(reason: str) -> bool:
    # evaluate.py's test, and only it: OpenAI's (and vLLM's) context-length refusal says "Please reduce the length of
    # the messages or completion". Any other HTTP 400 (an unrelated "integer above maximum value", a server's own
    # overflow wording) is a failed call, not a request to ask shorter
    return "Please reduce" in reason


def _content_filter(reason: str) -> bool:
    # evaluate.py's test: Azure OpenAI's refusal of a prompt or reply ("... content management policy ...")
    return "content management policy" in reason


def llmbar_handled(reason: str) -> bool:
    """The refusals evaluate.py handles as part of its protocol (an answer, not a failure: the circuit breaker does
    not count them): too long (asked again shorter) and the content filter (an empty reply)."""
    return _too_long(reason) or _content_filter(reason)


def _llmbar_chat(ctx: Context, requests, scopes=None) -> list[tuple[str | None, str]]:
    """(reply, note) per request, as evaluate.py's openai_completion returns it: the reply text ("" for a reply
    without content, as evaluate.py reads it); a too-long request asked again at 80 % of its max_tokens until it fits
    (below 1 token: the empty reply evaluate.py gets from its refused max_tokens-0 call); a content-filter refusal the
    empty reply (note: why). (None, reason) only for a call that failed otherwise (the server did not answer).
    ``scopes``: one per request, part of its cache key (None with ctx.share_requests: identical requests share)."""
    res: list = [None] * len(requests)
    scopes = list(scopes) if scopes is not None and not ctx.share_requests else [None] * len(requests)
    todo = [(i, r, s) for i, (r, s) in enumerate(zip(requests, scopes))]
    while todo:
        again = []
        out = calls.chat(ctx.judge, [r for _, r, _ in todo], ctx.cache, progress=ctx.progress, desc="llmbar",
                         scopes=[s for _, _, s in todo], handled=llmbar_handled)
        for (i, req, scope), o in zip(todo, out):
            ctx.calls += 1
            if not isinstance(o, calls.CallFailure):
                ctx.prompt_tokens += int(getattr(o, "prompt_tokens", 0) or 0)
                res[i] = (str(getattr(o, "text", None) or ""), "")  # no content: "" (evaluate.py)
                continue
            why = str(o.reason)
            smaller = int(req.max_tokens * LLMBAR_REDUCE)
            if _too_long(why) and smaller >= 1:
                again.append((i, replace(req, max_tokens=smaller), scope))
            elif _too_long(why):
                res[i] = ("", f"too long even at max_tokens {req.max_tokens}: the empty reply ({why[:120]})")
            elif _content_filter(why):
                res[i] = ("", f"content filter: the empty reply ({why[:120]})")
            else:
                res[i] = (None, why)
        todo = again
    return res


def _scope(name: str, item_id, step: str) -> str:
    # one cache key per call evaluate.py makes: the strategy, the pair and the step (evaluate.py asks each on its own)
    return f"llmbar:{name}|{item_id}|{step}"


def _auxiliary_jobs(items: pd.DataFrame, protocol: LLMBarProtocol) -> list[tuple[str, object]]:
    return [(_scope(protocol.strategy, it.item_id, f"auxiliary_{i}"), _llmbar_request(module, input=it.instruction))
            for i, module in enumerate(protocol.auxiliary) for it in items.itertuples()]


def llmbar_auxiliary_requests(items: pd.DataFrame, protocol: LLMBarProtocol) -> list:
    """The auxiliary steps' requests (Metrics / Reference: from the instruction alone), one per step and item."""
    return [r for _, r in _auxiliary_jobs(items, protocol)]


def _final_jobs(items: pd.DataFrame, protocol: LLMBarProtocol, auxiliary=None) -> list[tuple[str, object]]:
    final = protocol.modules[0] if protocol.kind == "swap" else protocol.modules[-1]
    n_aux = len(protocol.auxiliary)
    jobs = []
    for it in items.itertuples():
        # no auxiliary replies yet (a plan): empty texts stand in, so the final step's requests can be priced
        got = list((auxiliary or {}).get(it.item_id, ()))
        aux = {f"auxiliary_input_{i}": a for i, a in enumerate(got + [""] * (n_aux - len(got)))}
        if protocol.kind == "rating":
            jobs += [(_scope(protocol.strategy, it.item_id, f"score_{k}"),
                      _llmbar_request(final, input=it.instruction, output=o, **aux))
                     for k, o in ((1, it.output_1), (2, it.output_2))]
            continue
        for order in ORDERS:
            o1, o2 = _oriented(it, order)
            jobs.append((_scope(protocol.strategy, it.item_id, order),
                         _llmbar_request(final, input=it.instruction, output_1=o1, output_2=o2, **aux)))
    return jobs


def llmbar_requests(items: pd.DataFrame, protocol: LLMBarProtocol, auxiliary=None) -> list:
    """The verdict step's requests, per item: a comparison or Swap's first round one per order ("12" then "21":
    output_1/output_2 of the template are the two responses in that order); a Rating one per output (output_1's
    then output_2's, as ``output``). ``auxiliary``: item_id -> the auxiliary steps' replies."""
    return [r for _, r in _final_jobs(items, protocol, auxiliary)]


def _second_jobs(protocol: LLMBarProtocol, pairs_fields) -> list[tuple[str, object]]:
    """Swap's second round: (item, [fields of order 12, fields of order 21]) -> (scope, request) per order."""
    return [(_scope(protocol.strategy, it.item_id, f"second_{order}"), _llmbar_request(protocol.modules[1], **f))
            for it, fields in pairs_fields for order, f in zip(ORDERS, fields)]


#: A plan prices Swap's second round with each first-round explanation as long as the first round's max_tokens allows
#: (the longest reply it can be, so the price is an upper bound); " ok" is one token in common tokenizers
_PLAN_TOKEN = " ok"


def llmbar_plan_jobs(items: pd.DataFrame, protocol: LLMBarProtocol) -> list[tuple[str, object]]:
    """(scope, request) of every call a run may send, for a plan: the auxiliary steps', the verdict step's and, for
    Swap, the second round of every pair (an upper bound: it is asked only where the two orders disagree), each
    first-round explanation standing in at the first round's max_tokens (the longest it can be). Too-long retries
    are not in it: at most :func:`llmbar_retry_bound` calls per request."""
    jobs = _auxiliary_jobs(items, protocol) + _final_jobs(items, protocol)
    if protocol.kind == "swap":
        filler = _PLAN_TOKEN * protocol.modules[0].max_tokens
        jobs += _second_jobs(protocol, [(it, llmbar_swap_fields(it, {"12": ("1", filler), "21": ("2", filler)}))
                                        for it in items.itertuples()])
    return jobs


def llmbar_plan_requests(items: pd.DataFrame, protocol: LLMBarProtocol) -> list:
    """The requests of :func:`llmbar_plan_jobs`."""
    return [r for _, r in llmbar_plan_jobs(items, protocol)]


def _to_dataset(winner: str | None, order: str) -> str | None:
    """A winner naming the position shown first ("1") or second -> the dataset's labelling."""
    return None if winner is None else _back("1", "2", order)[0 if winner == "1" else 1]


def _with_note(reason: str, note: str) -> str:
    return f"{reason} ({note})" if reason and note else reason


def _llmbar_strategy(name: str):
    def run(items: pd.DataFrame, ctx: Context) -> list[dict]:
        protocol = llmbar_protocol(name, ctx.data_dir, share_requests=ctx.share_requests)
        ctx.protocol = protocol.identity
        label = f"llmbar:{name}"
        aux: dict = {it.item_id: [] for it in items.itertuples()}
        notes: dict = {it.item_id: [] for it in items.itertuples()}  # what evaluate.py records of each auxiliary call
        failed: dict = {}  # item_id -> why an auxiliary call of it got no reply
        jobs = _auxiliary_jobs(items, protocol)  # Metrics / Reference: from the instruction alone, per step and item
        replies = _llmbar_chat(ctx, [r for _, r in jobs], [s for s, _ in jobs])
        steps = [(k, it) for k, _ in enumerate(protocol.auxiliary) for it in items.itertuples()]
        for (k, it), (txt, why) in zip(steps, replies):
            step = f"auxiliary step {k} ({protocol.auxiliary[k].prompt_file})"
            if txt is None:  # no reply: evaluate.py asks it again until answered and makes no verdict before that
                failed.setdefault(it.item_id, f"{step} failed, so no verdict (evaluate.py makes none without its "
                                              f"reply; a rerun asks it again): {why}")
                continue
            # a refusal evaluate.py reads as the empty reply (content filter, too long at every length) goes on
            # with the empty text, as there, and its note is kept on the pair's rows
            aux[it.item_id].append(str(txt).strip())
            if why:
                notes[it.item_id].append(f"{step}: {why}")
        asked = items[~items["item_id"].isin(list(failed))]  # no verdict step for a pair whose auxiliary call failed
        jobs = _final_jobs(asked, protocol, aux)
        replies = iter(_llmbar_chat(ctx, [r for _, r in jobs], [s for s, _ in jobs]))
        rows = [_row(it, label, order, verdict=None, failure=failed[it.item_id])
                for it in items.itertuples() if it.item_id in failed for order in ORDERS]

        def noted(it, failure: str) -> str:  # the auxiliary steps' notes, on every row of the pair
            return "; ".join(x for x in (failure, *notes[it.item_id]) if x)

        if protocol.kind == "rating":
            for it in asked.itertuples():
                (t1, w1), (t2, w2) = next(replies), next(replies)
                # a failed call is no reply: the same no-score rule, its reason kept
                s1, s2, v12, v21, failure = llmbar_rating_verdicts(t1, t2)
                if t1 is None or t2 is None:
                    failure = "; ".join(f"score_{k} call failed: {w}" for k, (t, w) in ((1, (t1, w1)), (2, (t2, w2)))
                                        if t is None) or failure
                else:
                    failure = _with_note(failure, "; ".join(w for w in (w1, w2) if w))
                rows += [_row(it, label, "12", f1=s1, f2=s2, verdict=v12, failure=noted(it, failure)),
                         _row(it, label, "21", f1=s1, f2=s2, verdict=v21, failure=noted(it, failure))]
            return rows
        first = {}
        for it in asked.itertuples():
            for order in ORDERS:
                txt, why = next(replies)
                winner, reason = llmbar_parse(protocol.modules[0 if protocol.kind == "swap" else -1], txt) \
                    if txt is not None else (None, why)
                first[(it.item_id, order)] = (_to_dataset(winner, order), str(txt or "").strip(),
                                              _with_note(reason, why) if txt is not None else reason)
        second: dict = {}
        if protocol.kind == "swap":  # the second round where the orders disagree; the last round is the verdict
            again = [(it, f) for it in asked.itertuples() if (f := llmbar_swap_fields(
                it, {o: first[(it.item_id, o)][:2] for o in ORDERS}))]
            jobs = _second_jobs(protocol, again)
            got = _llmbar_chat(ctx, [r for _, r in jobs], [s for s, _ in jobs])
            for (it, order), (txt, why) in zip([(it, o) for it, _ in again for o in ORDERS], got):
                winner, reason = llmbar_parse(protocol.modules[1], txt) if txt is not None else (None, why)
                second[(it.item_id, order)] = (_to_dataset(winner, order),
                                               _with_note(reason, why) if txt is not None else reason)
        for it in asked.itertuples():
            for order in ORDERS:
                verdict, _, reason = first[(it.item_id, order)]
                if (it.item_id, order) in second:
                    verdict, reason = second[(it.item_id, order)]
                    reason = f"second round: {reason}" if reason else ""
                rows.append(_row(it, label, order, verdict=verdict, failure=noted(it, reason)))
        return rows
    run.__name__ = f"llmbar_{name}"
    return run


for _name in LLMBAR_STRATEGIES:
    strategy(f"llmbar:{_name}")(_llmbar_strategy(_name))


def run_strategies(items: pd.DataFrame, strategies=("dhp_vanilla", "direct", "dna"), judge="embedded", mode="logprobs",
                   cache=None, seed: int = 0, progress: bool | str = False, data_dir=None,
                   share_requests: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run the named strategies on a pairwise table (dhp.datasets.llmbar). Returns (verdicts, costs):
    verdicts has VERDICT_COLUMNS, one row per item × strategy × order (verdict in the dataset's labelling);
    costs has strategy, calls, prompt_tokens (calls asked, cached or not: the cost of the protocol) and protocol
    (the LLMBar template identity of an ``llmbar:`` strategy, "" for the project's own wordings).
    ``data_dir``: the data root the ``llmbar:`` strategies read LLMBar's templates from. ``share_requests``: the
    ``llmbar:`` strategies answer identical requests once across strategies and pairs (off: each strategy and pair
    asks on its own, as LLMBar's evaluate.py; on: named in their protocol identity).
    ``mode`` ("logprobs" or "sample") is used by direct_pointwise only; the other strategies read the text
    their prompt asks for, generated at temperature 0."""
    for name in strategies:
        STRATEGIES.lookup(name)  # the one unknown-name error, before any call
    backend = get_backend(judge)
    if is_control_backend(backend):
        return _control_verdicts(items, strategies, backend)
    if mode == "metric":
        if not is_metric_backend(backend):
            raise DHPError(f"{backend.identity} is a language model: mode 'metric' compares two outputs by a score "
                           "with no prompt (a baseline) or by the gold label (a control).",
                           "run the pairwise strategies in mode logprobs or sample.")
        return _metric_verdicts(items, strategies, backend, cache, progress)
    rows, costs = [], []
    position = {key: i for i, key in enumerate((it.item_id, o) for it in items.itertuples() for o in ORDERS)}
    for name in strategies:
        ctx = Context(backend, mode, cache, seed, progress, data_dir=data_dir, share_requests=share_requests)
        # rows in the items' order, each item's "12" then "21", whatever order the strategy made them in
        rows += sorted(STRATEGIES[name](items, ctx), key=lambda r: position[(r["item_id"], r["order"])])
        costs.append({"strategy": name, "calls": ctx.calls, "prompt_tokens": ctx.prompt_tokens,
                      "protocol": ctx.protocol})
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS), pd.DataFrame(costs)


def metric_requests(items: pd.DataFrame) -> pd.DataFrame:
    """What a baseline is asked on pairwise items: each output against its instruction (dhp.judging.score_prompts'
    mode "metric" rows; ``_item``, ``_k`` name the pair and the output)."""
    return pd.DataFrame([{"prompt": "", "source": str(r["instruction"] or ""), "candidate": str(r[f"output_{k}"] or ""),
                          "task": "", "_item": r["item_id"], "_k": k}
                         for r in items.to_dict("records") for k in ("1", "2")],
                        columns=["prompt", "source", "candidate", "task", "_item", "_k"])


def _metric_verdicts(items: pd.DataFrame, strategies, backend, cache, progress) -> tuple[pd.DataFrame, pd.DataFrame]:
    """run_strategies for a baseline (dhp.backends.baseline): each output scored once against the instruction (its
    source; cached calls), the higher score wins, equal scores are a tie, a missing score is no verdict with its
    reason. The floor a pairwise LLM judge must clear; it reads no prompt, so it has no strategy (each strategy gets
    the same verdicts, no tokens) and no position: both orders get the same verdict."""
    texts = metric_requests(items)
    scored = (score_prompts(texts, judge=backend, mode="metric", cache=cache, progress=progress).table
              if len(texts) else texts.assign(score=[], failure=[]))
    got = {(i, k): (s, f) for i, k, s, f in zip(scored["_item"], scored["_k"], scored["score"], scored["failure"])}
    rows = []
    for r in items.to_dict("records"):
        (s1, f1), (s2, f2) = got[(r["item_id"], "1")], got[(r["item_id"], "2")]
        if not (np.isfinite(s1) and np.isfinite(s2)):
            verdict, failure = None, f1 or f2 or "no score"
        else:
            verdict, failure = ("1" if s1 > s2 else "2" if s2 > s1 else "tie"), ""
        for order in ORDERS:
            rows.append({"item_id": r["item_id"], "subset": r.get("subset", ""), "order": order,
                         "label": str(r["label"]), "verdict": verdict, "failure": failure})
    base = pd.DataFrame(rows, columns=["item_id", "subset", "order", "label", "verdict", "failure"])
    out = pd.concat([base.assign(strategy=s) for s in strategies], ignore_index=True)
    costs = pd.DataFrame({"strategy": list(strategies), "calls": len(texts), "prompt_tokens": 0, "protocol": ""})
    return out.reindex(columns=VERDICT_COLUMNS), costs


def _control_verdicts(items: pd.DataFrame, strategies, backend) -> tuple[pd.DataFrame, pd.DataFrame]:
    """run_strategies for a control (dhp.controls): every pair shown in both orders and answered by the control from
    its gold label (dhp.backends.control.prefer_rows), mapped back to the pair's labelling. A control has no strategy:
    each strategy gets the same answers (seeded per pair and order), with no calls and no tokens."""
    swap = {"1": "2", "2": "1"}
    shown = []
    for r in items.to_dict("records"):
        for order in ORDERS:
            gold, flip = str(r["label"]), order == "21"
            shown.append({"item_id": r["item_id"], "subset": r.get("subset", ""), "order": order, "label": gold,
                          "gold": swap.get(gold, gold) if flip else gold,
                          "first": r["output_2"] if flip else r["output_1"],
                          "second": r["output_1"] if flip else r["output_2"]})
    shown = pd.DataFrame(shown, columns=["item_id", "subset", "order", "label", "gold", "first", "second"])
    said = prefer_rows(backend, shown, ["item_id", "order"]) if len(shown) else []
    verdict = [swap.get(v, v) if o == "21" else v for v, o in zip(said, shown["order"])]
    base = shown.drop(columns=["gold", "first", "second"]).assign(verdict=verdict, failure="")
    rows = pd.concat([base.assign(strategy=s) for s in strategies], ignore_index=True)
    costs = pd.DataFrame({"strategy": list(strategies), "calls": 0, "prompt_tokens": 0, "protocol": ""})
    return rows.reindex(columns=VERDICT_COLUMNS), costs
