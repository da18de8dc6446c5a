"""Pairwise judge strategies (DnA-Eval, Li et al.; LLMBar, Zeng et al. 2023): which of two responses to an
instruction is better? Each strategy is one registered function; every one runs with the two responses in
both orders ("12": output_1 shown first; "21": output_2 first) and maps its verdict back to the dataset's
labelling, so position bias can be measured.

- ``direct``: an overall 1–5 score for each response in separate calls; the higher wins.
- ``cot``: the same, with an explanation before the score ("Score: X" parsed by dhp.judging.parse_reply).
- ``dna`` (decompose and aggregate): (a) three aspects proposed from the instruction alone; (b) both
  responses scored on each aspect, one inference per aspect; (c) aspect weights in percent proposed from
  the instruction and aspects (:func:`parse_weights`); (d) f = Σ w·s computed here, the higher wins.
- ``chain_of_aspects`` (ablation): (a) and (b) as in dna, then the LLM itself turns the aspect scores into
  overall scores.

All calls go through dhp.calls / dhp.judging.score_prompts: cached, any backend. A step whose reply does not
parse gives a NaN verdict with its reason — never a guessed label.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from dhp.prompts import fill, load
from dhp.errors import DHPError

__all__ = ["STRATEGIES", "strategy", "run_strategies", "parse_pair", "parse_weights", "parse_aspects",
           "verdict_from", "VERDICT_COLUMNS"]

STRATEGIES: dict[str, Callable] = {}
ORDERS = ("12", "21")
WEIGHT_TOLERANCE = 5.0  # percentage points a weight sum may be off 100 before it is renormalised and flagged
VERDICT_COLUMNS = ["item_id", "subset", "strategy", "order", "aspects", "aspect_scores_1", "aspect_scores_2",
                   "weights", "f1", "f2", "verdict", "label", "failure"]


def strategy(name: str):
    """Register a pairwise strategy: ``fn(items, ctx) -> list of row dicts`` (one per item and order)."""
    def deco(fn):
        if name in STRATEGIES:
            raise DHPError(f"Pairwise strategy {name!r} is registered twice.", "give the new strategy another name.")
        STRATEGIES[name] = fn
        return fn
    return deco


@dataclass
class Context:
    judge: object
    mode: str
    cache: object
    seed: int
    progress: bool
    calls: int = 0
    prompt_tokens: int = 0
    notes: list = field(default_factory=list)


def _template(name: str) -> str:
    return load("dna", name)


# ---------------------------------------------------------------------------------------------- parsing

_PAIR = re.compile(r"output\s*\(?a\)?\s*[:=]\s*(\d+(?:\.\d+)?).*?output\s*\(?b\)?\s*[:=]\s*(\d+(?:\.\d+)?)",
                   re.IGNORECASE | re.DOTALL)


def parse_pair(text: str | None) -> tuple[float, float, str]:
    """Scores of Output (a) and Output (b) from "Output (a): 4 ... Output (b): 3" on the 1–5 scale:
    (s_a, s_b, "") or (NaN, NaN, reason)."""
    m = _PAIR.search(str(text or ""))
    if not m:
        return math.nan, math.nan, f"no 'Output (a): x / Output (b): y' in reply: {str(text or '')[:80]!r}"
    a, b = float(m.group(1)), float(m.group(2))
    if not (1 <= a <= 5 and 1 <= b <= 5):
        return math.nan, math.nan, f"out of scale: {m.group(1)}, {m.group(2)}"
    return a, b, ""


def parse_weights(text: str | None, k: int) -> tuple[list[float] | None, str]:
    """k aspect weights in percent from a reply like "50% 30% 20%" (percent signs optional).

    Returns (weights summing to 1, note): note "" when the numbers sum to 100 ± WEIGHT_TOLERANCE;
    "renormalised: sum was S" when they were rescaled; (None, reason) when fewer than k non-negative
    numbers are given or they sum to 0."""
    nums = [float(x) for x in re.findall(r"(\d+(?:\.\d+)?)\s*%?", str(text or ""))]
    if len(nums) < k:
        return None, f"{len(nums)} weights for {k} aspects in reply: {str(text or '')[:80]!r}"
    w = nums[:k]
    total = sum(w)
    if total <= 0:
        return None, "weights sum to 0"
    note = "" if abs(total - 100) <= WEIGHT_TOLERANCE else f"renormalised: sum was {total:g}"
    return [x / total for x in w], note


def parse_aspects(text: str | None, k: int = 3) -> list[str]:
    """Up to k questions from a numbered or line-separated reply (the prompt already wrote "1.")."""
    lines = [re.sub(r"^\s*(?:\d+[.)]|[-*•])\s*", "", ln).strip() for ln in ("1. " + str(text or "")).splitlines()]
    return [ln for ln in lines if len(ln) > 3][:k]


def verdict_from(f1: float, f2: float) -> str | None:
    """"1", "2" or "tie" from the two overall scores; None when either is NaN."""
    if not (math.isfinite(f1) and math.isfinite(f2)):
        return None
    return "tie" if abs(f1 - f2) < 1e-9 else ("1" if f1 > f2 else "2")


# ---------------------------------------------------------------------------------------------- calls

def _chat(ctx: Context, prompts: list[str], max_tokens: int) -> list[tuple[str | None, str]]:
    from dhp import calls
    from dhp.backends import ChatRequest

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


def _row(item, name, order, **kw) -> dict:
    base = {"item_id": item.item_id, "subset": item.subset, "strategy": name, "order": order, "aspects": "",
            "aspect_scores_1": "", "aspect_scores_2": "", "weights": "", "f1": math.nan, "f2": math.nan,
            "verdict": None, "label": item.label, "failure": ""}
    base.update(kw)
    return base


def _pointwise(name: str, template: str, items: pd.DataFrame, ctx: Context, mode: str, max_tokens) -> list[dict]:
    from dhp.judging import score_prompts

    t = _template(template)
    prompts = pd.DataFrame([{"item_id": it.item_id, "which": w, "metric": "score",
                             "prompt": fill(t, {"instruction": it.instruction, "response": getattr(it, f"output_{w}")})}
                            for it in items.itertuples() for w in (1, 2)])
    scored = score_prompts(prompts, judge=ctx.judge, mode=mode, n_samples=1, seed=ctx.seed, cache=ctx.cache,
                           max_tokens=max_tokens, progress=ctx.progress)
    ctx.calls += int(len(scored))
    ctx.prompt_tokens += int(scored["prompt_tokens"].sum())
    s = scored.set_index(["item_id", "which"])
    rows = []
    for it in items.itertuples():
        f1, f2 = float(s.at[(it.item_id, 1), "score"]), float(s.at[(it.item_id, 2), "score"])
        why = "; ".join(x for x in (s.at[(it.item_id, 1), "failure"], s.at[(it.item_id, 2), "failure"]) if x)
        for order in ORDERS:  # separate calls: the order is only the labelling, consistent by construction
            rows.append(_row(it, name, order, f1=f1, f2=f2, verdict=verdict_from(f1, f2), failure=why))
    return rows


@strategy("direct")
def direct(items: pd.DataFrame, ctx: Context) -> list[dict]:
    return _pointwise("direct", "direct", items, ctx, ctx.mode, None)


@strategy("cot")
def cot(items: pd.DataFrame, ctx: Context) -> list[dict]:
    return _pointwise("cot", "cot", items, ctx, "sample", 120)


def _decompose(items: pd.DataFrame, ctx: Context) -> dict:
    """Aspects per item (a) and aspect-wise pair scores per item and order (b)."""
    asp_replies = _chat(ctx, [fill(_template("aspects"), {"instruction": it.instruction}) for it in items.itertuples()], 96)
    aspects = {it.item_id: (parse_aspects(txt), why) for it, (txt, why) in zip(items.itertuples(), asp_replies)}
    jobs, prompts = [], []
    t = _template("aspect_scores")
    for it in items.itertuples():
        for a_i, aspect in enumerate(aspects[it.item_id][0]):
            for order in ORDERS:
                ra, rb = _oriented(it, order)
                jobs.append((it.item_id, order, a_i))
                prompts.append(fill(t, {"aspect": aspect, "instruction": it.instruction, "response_a": ra,
                                         "response_b": rb}))
    scores: dict = {}
    for (iid, order, a_i), (txt, why) in zip(jobs, _chat(ctx, prompts, 16)):
        sa, sb, reason = parse_pair(txt)
        # back to the dataset's labelling: s1 is output_1's score whatever position it was shown in
        s1, s2 = (sa, sb) if order == "12" else (sb, sa)
        scores[(iid, order, a_i)] = (s1, s2, why or reason)
    return {"aspects": aspects, "scores": scores}


def _aspect_vectors(d: dict, it, order: str):
    aspects, why = d["aspects"][it.item_id]
    k = len(aspects)
    got = [d["scores"][(it.item_id, order, a)] for a in range(k)]
    s1 = np.array([g[0] for g in got], dtype=float)
    s2 = np.array([g[1] for g in got], dtype=float)
    reasons = [g[2] for g in got if g[2]]
    if k < 3:
        reasons.insert(0, f"{k} aspects proposed, 3 needed" + (f" ({why})" if why else ""))
    return aspects, s1, s2, reasons


@strategy("dna")
def dna(items: pd.DataFrame, ctx: Context) -> list[dict]:
    d = _decompose(items, ctx)
    t = _template("weights")
    weight_replies = _chat(ctx, [fill(t, {"instruction": it.instruction, "aspect_list": "\n".join(
        f"{i + 1}. {a}" for i, a in enumerate(d["aspects"][it.item_id][0]))}) for it in items.itertuples()], 24)
    rows = []
    for it, (wtxt, wwhy) in zip(items.itertuples(), weight_replies):
        for order in ORDERS:
            aspects, s1, s2, reasons = _aspect_vectors(d, it, order)
            w, note = parse_weights(wtxt, len(aspects)) if aspects else (None, "no aspects")
            if w is None:
                reasons.append(wwhy or note)
            elif note:
                reasons.append(note)  # renormalised weights are used, and flagged
            ok = w is not None and len(aspects) == 3 and np.isfinite(s1).all() and np.isfinite(s2).all()
            f1 = float(np.dot(w, s1)) if ok else math.nan
            f2 = float(np.dot(w, s2)) if ok else math.nan
            rows.append(_row(it, "dna", order, aspects=" | ".join(aspects), f1=f1, f2=f2, verdict=verdict_from(f1, f2),
                             aspect_scores_1=";".join(f"{x:g}" for x in s1), aspect_scores_2=";".join(f"{x:g}" for x in s2),
                             weights=";".join(f"{x:.3f}" for x in w) if w else "", failure="; ".join(reasons)))
    return rows


@strategy("chain_of_aspects")
def chain_of_aspects(items: pd.DataFrame, ctx: Context) -> list[dict]:
    d = _decompose(items, ctx)
    t = _template("aggregate")
    jobs, prompts = [], []
    for it in items.itertuples():
        for order in ORDERS:
            aspects, s1, s2, _ = _aspect_vectors(d, it, order)
            sa, sb = (s1, s2) if order == "12" else (s2, s1)  # as shown in this order
            ra, rb = _oriented(it, order)
            lines = "\n".join(f"{q} — Output (a): {x:g}, Output (b): {y:g}" for q, x, y in zip(aspects, sa, sb))
            jobs.append((it, order))
            prompts.append(fill(t, {"instruction": it.instruction, "response_a": ra, "response_b": rb,
                                     "score_list": lines}))
    rows = []
    for (it, order), (txt, why) in zip(jobs, _chat(ctx, prompts, 16)):
        aspects, s1, s2, reasons = _aspect_vectors(d, it, order)
        fa, fb, reason = parse_pair(txt)
        f1, f2 = (fa, fb) if order == "12" else (fb, fa)
        if why or reason:
            reasons.append(why or reason)
        rows.append(_row(it, "chain_of_aspects", order, aspects=" | ".join(aspects), f1=f1, f2=f2,
                         verdict=verdict_from(f1, f2), aspect_scores_1=";".join(f"{x:g}" for x in s1),
                         aspect_scores_2=";".join(f"{x:g}" for x in s2), failure="; ".join(reasons)))
    return rows


def run_strategies(items: pd.DataFrame, strategies=("direct", "dna"), judge="embedded", mode="logprobs",
                   cache=None, seed: int = 0, progress: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run the named strategies on a pairwise table (dhp.datasets.llmbar). Returns (verdicts, costs):
    verdicts has VERDICT_COLUMNS, one row per item × strategy × order (verdict in the dataset's labelling);
    costs has strategy, calls, prompt_tokens (calls asked, cached or not: the cost of the protocol)."""
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise DHPError(f"Unknown pairwise strategy {unknown}.", f"use some of {sorted(STRATEGIES)}.")
    rows, costs = [], []
    for name in strategies:
        ctx = Context(judge, mode, cache, seed, progress)
        rows += STRATEGIES[name](items, ctx)
        costs.append({"strategy": name, "calls": ctx.calls, "prompt_tokens": ctx.prompt_tokens})
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS), pd.DataFrame(costs)
