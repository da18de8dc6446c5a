"""Aspect-targeted pointwise judging (criteria confusion, Hu et al. 2024 §3): every variant of an item is
scored on each quality aspect separately, 1–5, with the aspect's description of a chosen type (gold,
detailed, simplified, term, list, selection1–3) in the prompt (dhp/prompts/confusion/score_aspect.txt).
The same reply rule and cache as every other protocol (dhp.judging.score_prompts).

Aspects that compare the text with its source (faithfulness, non-contradiction, non-hallucination,
informativeness, adequacy; and overall quality, which covers them) are only asked when the item has a
source; the others read the text alone, but the source is shown either way so that all aspects of one
item share a prompt prefix.
"""

from __future__ import annotations

import pandas as pd

from dhp.errors import DHPError

SOURCE_ASPECTS = frozenset({"faithfulness", "non_contradiction", "non_hallucination", "informativeness",
                            "adequacy", "overall_quality"})
ASPECT_SCORE_COLUMNS = ["dataset", "item_id", "attack", "variant", "method", "aspect", "description_type",
                        "judge", "mode", "score", "n_valid", "n_failed", "failure"]


def aspect_prompts(perturbed: pd.DataFrame, dataset: pd.DataFrame, criteria: pd.DataFrame,
                   description_types=("gold",), aspects=None, unit: str = "summary") -> pd.DataFrame:
    """One prompt per ok variant × aspect × description type. ``perturbed`` is a dhp.perturb table (its
    "original" rows are the reference variant), ``criteria`` the table of dhp.datasets.criteria_hu2024.
    Columns: dataset, item_id, attack ("" for the original), variant ("original"/"perturbed"), method,
    aspect, description_type, prompt."""
    from dhp.prompts import fill, load

    missing = [t for t in description_types if t not in set(criteria["description_type"])]
    if missing:
        raise DHPError(f"Unknown description type(s) {missing}.",
                       f"use some of {sorted(set(criteria['description_type']))}.")
    wanted = list(aspects) if aspects is not None else list(dict.fromkeys(criteria["aspect"]))
    desc = criteria.set_index(["aspect", "description_type"])["description"]
    sources = dataset.set_index(dataset["item_id"].astype(str))["source"].fillna("")
    template = load("confusion", "score_aspect")
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
                             "prompt": fill(template, {"unit": unit, "unit_title": unit.capitalize(),
                                                       "aspect_description": text, "source": source,
                                                       "candidate": r.text})})
    return pd.DataFrame(rows, columns=["dataset", "item_id", "attack", "variant", "method", "aspect",
                                       "description_type", "prompt"])


def score_aspects(prompts: pd.DataFrame, judge="embedded", mode: str = "logprobs", n_samples: int = 1,
                  seed: int = 0, cache=None, progress: bool = False) -> pd.DataFrame:
    """Score the prompts of :func:`aspect_prompts` (any backend; sample or logprobs mode). Returns
    ASPECT_SCORE_COLUMNS; ``score`` is NaN with its ``failure`` reason when the reply holds no 1–5 score.
    This is the scores table that dhp.analysis.confusion reads."""
    from dhp.backends import get_backend
    from dhp.judging.pointwise import score_prompts

    if mode not in ("sample", "logprobs"):
        raise DHPError(f"Aspect judging needs a 1-5 score, so mode {mode!r} does not apply.",
                       "use mode='logprobs' or 'sample'.")
    backend = get_backend(judge)
    # Sorted by item and aspect so variants sharing the instruction + source prefix are adjacent.
    ordered = prompts.sort_values(["dataset", "item_id", "aspect", "description_type", "variant"],
                                  kind="stable").reset_index(drop=True)
    scored = score_prompts(ordered.assign(metric=ordered["aspect"]), judge=backend, mode=mode, n_samples=n_samples,
                           seed=seed, cache=cache, progress=progress)
    out = ordered.drop(columns="prompt").assign(judge=backend.identity, mode=mode, score=scored["score"].values,
                                                n_valid=scored["n_valid"].values, n_failed=scored["n_failed"].values,
                                                failure=scored["failure"].values)
    return out[ASPECT_SCORE_COLUMNS]
