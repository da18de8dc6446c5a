"""Aspect-targeted pointwise judging (criteria confusion, Hu et al. 2024 §3): every variant of an item is
scored on each quality aspect separately, 1–5, with the aspect's description of a chosen type (gold,
detailed, simplified, term, list, selection1–3) in the prompt (dhp/prompts/confusion/score_aspect.txt).
The same cache as every other protocol (dhp.judging.score_prompts).

The defaults are the paper's evaluation setting (App. C.2, prompt of Table 18): the judge first analyses
the text on the criterion ("Analysis: ..."), then gives a 1–5 rating on its own line ("Rating: 4"); 10
replies at temperature 1.0, asked as ONE request with ``n`` = 10, averaged over the replies whose rating
parses. The prompt holds no instruction to ignore what the criterion does not mention: the paper studies
that as a mitigation (§6), and ``instruction="mitigated"`` adds it, so its effect can be measured.

Aspects that compare the text with its source (faithfulness, non-contradiction, non-hallucination,
informativeness, adequacy; and overall quality, which covers them) are only asked when the item has a
source; the others read the text alone, but the source is shown either way, as in the paper. The prompt
holds the paper's parts in our words (Table 18: the task, the criterion, the source, the text, the answer
form) with the source before the criterion, so that all prompts of one item share the instructions and the
source as a prefix (the embedded backend and vLLM/llama.cpp servers compute a shared prefix once).
"""

from __future__ import annotations

import pandas as pd

from dhp.backends import get_backend
from dhp.calls import MAX_CONSECUTIVE_FAILURES, Estimate
from dhp.errors import DHPError
from dhp.judging.pointwise import Judged, score_prompts
from dhp.prompts import fill, load

SOURCE_ASPECTS = frozenset({"faithfulness", "non_contradiction", "non_hallucination", "informativeness",
                            "adequacy", "overall_quality"})
ASPECT_SCORE_COLUMNS = ["dataset", "item_id", "attack", "variant", "method", "aspect", "description_type",
                        "instruction", "judge", "mode", "score", "n_valid", "n_failed", "failure"]
#: What the prompt asks beyond the criterion. "paper": nothing (the setting of the paper's main results);
#: "mitigated": the explicit instruction to rate on the given criterion only (the first mitigation of §6);
#: "rating_only": nothing, but the answer is the rating alone (:data:`ANSWER_FORMS`).
INSTRUCTIONS = {
    "paper": "",
    "mitigated": " Judge this criterion only: a problem that the criterion does not mention must not change "
                 "your rating.",
    "rating_only": "",
}
#: How the reply is asked to look. The paper's (Table 18): an analysis, then the rating on its own line. A judge too
#: small to analyse first (the embedded 135M model writes "Rating:" in a quarter of its coherence replies and in no
#: fluency reply within 8 tokens) rates every prompt when asked for the rating alone — the cheap route of
#: instruction "rating_only", not the paper's setting (its scores are read by the same "Rating:" rule).
ANALYSIS_FIRST = ('How to answer: start with "Analysis:" and analyse the {unit} with respect to the criterion, as '
                  'briefly as you can. Then, on a new line, write "Rating:" followed by one number from 1 to 5.')
ANSWER_FORMS = {"rating_only": 'How to answer: write "Rating:" followed by one number from 1 to 5, and nothing '
                               'else.'}
#: The paper's sampling (App. C.2): 10 replies at temperature 1.0.
N_SAMPLES = 10
TEMPERATURE = 1.0
#: Room for a short analysis and the rating line; a reply cut off before "Rating:" is NaN with its reason.
MAX_TOKENS = 256


def aspect_prompts(perturbed: pd.DataFrame, dataset: pd.DataFrame, criteria: pd.DataFrame,
                   description_types=("detailed",), aspects=None, unit: str = "summary",
                   instruction: str = "paper", likelihood: bool = False) -> pd.DataFrame:
    """One prompt per ok variant × aspect × description type. ``perturbed`` is a dhp.perturb table (its
    "original" rows are the reference variant), ``criteria`` the table of dhp.datasets.criteria_hu2024,
    ``instruction`` a key of :data:`INSTRUCTIONS`. Columns: dataset, item_id, attack ("" for the original),
    variant ("original"/"perturbed"), method, aspect, description_type, instruction, prompt.
    ``likelihood``: ``prompt`` is the text the candidate is scored after (GPTScore's form, Fu et al. 2023: the task,
    the source and the criterion, then the text; dhp/prompts/confusion/likelihood_aspect.txt), not a question."""
    if instruction not in INSTRUCTIONS:
        raise DHPError(f"Unknown instruction {instruction!r}.",
                       f"use one of {sorted(INSTRUCTIONS)} ('paper' is the paper's setting).")
    missing = [t for t in description_types if t not in set(criteria["description_type"])]
    if missing:
        raise DHPError(f"Unknown description type(s) {missing}.",
                       f"use some of {sorted(set(criteria['description_type']))}.")
    wanted = list(aspects) if aspects is not None else list(dict.fromkeys(criteria["aspect"]))
    desc = criteria.set_index(["aspect", "description_type"])["description"]
    sources = dataset.set_index(dataset["item_id"].astype(str))["source"].fillna("")
    template = load("confusion", "likelihood_aspect" if likelihood else "score_aspect")
    answer_form = fill(ANSWER_FORMS.get(instruction, ANALYSIS_FIRST), {"unit": unit})
    task = (f"The {unit} was written from the source. A good {unit} conveys the source's important content "
            f"and says nothing that the source does not support.")
    rows = []
    for r in perturbed[perturbed["status"] == "ok"].itertuples():
        source = str(sources.get(str(r.item_id), ""))
        for aspect in wanted:
            if aspect in SOURCE_ASPECTS and not source.strip():
                continue  # nothing to compare the text with
            for dtype in description_types:
                text = fill(str(desc[(aspect, dtype)]), {"T": unit, "S": "source"})
                rows.append({"dataset": r.dataset, "item_id": str(r.item_id),
                             "attack": "" if r.perturbation == "original" else r.perturbation,
                             "variant": "original" if r.perturbation == "original" else "perturbed",
                             "method": r.method, "aspect": aspect, "description_type": dtype,
                             "instruction": instruction,
                             "prompt": fill(template, {"unit": unit, "unit_title": unit.capitalize(),
                                                       "mitigation": INSTRUCTIONS[instruction],
                                                       "answer_form": answer_form,
                                                       "task_description": task, "aspect_description": text,
                                                       "source": source, "candidate": r.text}),
                             "source": source, "candidate": r.text})
    # source and candidate ride along for a judge that reads the texts, not the prompt (a baseline, mode "metric")
    return pd.DataFrame(rows, columns=["dataset", "item_id", "attack", "variant", "method", "aspect",
                                       "description_type", "instruction", "prompt", "source", "candidate"])


def score_aspects(prompts: pd.DataFrame, judge="embedded", mode: str = "sample", n_samples: int = N_SAMPLES,
                  temperature: float | None = None, max_tokens: int = MAX_TOKENS, seed: int = 0, cache=None,
                  progress: bool | str = False, max_consecutive_failures: int = MAX_CONSECUTIVE_FAILURES,
                  dry_run: bool = False) -> "Judged | Estimate":
    """Score the prompts of :func:`aspect_prompts` (any backend). Defaults: the paper's setting, sample mode
    with ``n_samples`` = 10 replies at ``temperature`` = 1.0 in one request, the score being the mean of the
    replies whose rating parses. Each reply's rating is read after its analysis
    (:func:`dhp.judging.parsing.parse_rating`: the one acceptance rule applied from the "Rating:" label on).
    ``temperature`` None: 1.0 in sample mode (the paper's), 0 in logprobs mode. ``mode="logprobs"``: one
    greedy reply, scored by the expected value of the 1–5 tokens at the rating's position (the position is
    found by matching the reply to its most likely tokens, which only a greedy reply is). ``mode="likelihood"``:
    no reply; the score is the mean log-probability per token of the text after the prompt of
    ``aspect_prompts(..., likelihood=True)`` (higher is better; a scale of its own, in nats per token).
    ``max_consecutive_failures``: stop after this many failed calls in a row (answered calls stay cached).
    ``dry_run``: call nothing and return the :class:`dhp.calls.Estimate` of the calls not yet cached.
    Returns :class:`~dhp.judging.pointwise.Judged` ``(table, stats)``: the table has ASPECT_SCORE_COLUMNS, the run
    statistics are beside it; ``score`` is NaN with its ``failure`` reason when no reply holds a rating.
    This is the scores table dhp.analysis.confusion reads."""
    if mode not in ("sample", "logprobs", "likelihood"):
        raise DHPError(f"Aspect judging asks for a 1-5 score or a text's likelihood, so mode {mode!r} does not "
                       "apply.", "use mode='sample' (the paper's setting), 'logprobs' or 'likelihood'.")
    if int(n_samples) < 1 or int(max_tokens) < 1:
        raise DHPError(f"n_samples and max_tokens must be >= 1 (got {n_samples}, {max_tokens}).",
                       f"pass positive values (the paper's: n_samples={N_SAMPLES}, max_tokens={MAX_TOKENS}).")
    if temperature is None:
        temperature = TEMPERATURE if mode == "sample" else 0.0
    backend = get_backend(judge)
    ordered = prompts.assign(instruction=prompts["instruction"] if "instruction" in prompts else "paper")
    # Sorted by item and aspect: the prompts of one item share the instructions + source, the variants of one
    # aspect also the criterion; adjacent prompts let the backend reuse the shared prefix.
    ordered = ordered.sort_values(["dataset", "item_id", "aspect", "description_type", "variant"],
                                  kind="stable").reset_index(drop=True)
    scored = score_prompts(ordered.assign(metric=ordered["aspect"]), judge=backend, mode=mode, n_samples=n_samples,
                           seed=seed, cache=cache, max_tokens=max_tokens, temperature=temperature,
                           progress=progress, analysis_first=True, max_consecutive_failures=max_consecutive_failures,
                           dry_run=dry_run)
    if dry_run:
        return scored
    scored, stats = scored
    out = ordered.drop(columns=["prompt", "source", "candidate"], errors="ignore").assign(
        judge=backend.identity, mode=mode, score=scored["score"].values, n_valid=scored["n_valid"].values,
        n_failed=scored["n_failed"].values, failure=scored["failure"].values)
    return Judged(out[ASPECT_SCORE_COLUMNS], stats)
