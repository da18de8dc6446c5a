"""Dual-perspective meta-evaluation (Hu et al. 2025): a global view — ordinal agreement with human
ratings on targets where annotators agree, linear weighted kappa (Cohen 1968) — and a local view —
adjacent pairwise accuracy along sequences of targets of strictly decreasing quality.

Tables in, tables out; the judging that produces the scores lives elsewhere.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dhp.errors import DHPError

__all__ = ["to_rating", "global_kappa", "adjacent_accuracy"]

LABELS = [1, 2, 3, 4, 5]


def to_rating(score) -> np.ndarray:
    """Ordinal 1-5 rating from a judge score: the expected score (logprobs mode) rounded half up, so 3.5
    is 4 (numpy's round-half-to-even would make 2.5 and 3.5 disagree in direction). NaN stays NaN."""
    s = np.asarray(score, dtype=float)
    return np.where(np.isfinite(s), np.clip(np.floor(s + 0.5), 1, 5), np.nan)


def global_kappa(targets: pd.DataFrame) -> pd.DataFrame:
    """Linear weighted kappa per aspect between human and judge ratings.

    ``targets``: columns aspect, human_rating, judge_rating (NaN judge ratings — no usable reply — are
    left out and not counted in n). Returns aspect, kappa, n. Uses
    ``sklearn.metrics.cohen_kappa_score(weights="linear", labels=[1..5])``; kappa is NaN when fewer
    than two targets remain or the ratings do not vary at all.
    """
    from sklearn.metrics import cohen_kappa_score

    missing = {"aspect", "human_rating", "judge_rating"} - set(targets.columns)
    if missing:
        raise DHPError(f"The global-targets table lacks columns {sorted(missing)}.",
                       "pass a table with aspect, human_rating and judge_rating.")
    rows = []
    for aspect, g in targets.groupby("aspect", sort=True):
        g = g[np.isfinite(g["judge_rating"].astype(float))]
        h, j = g["human_rating"].astype(int).to_numpy(), g["judge_rating"].astype(int).to_numpy()
        k = math.nan
        if len(g) >= 2 and len(set(h) | set(j)) > 1:
            k = float(cohen_kappa_score(h, j, weights="linear", labels=LABELS))
        rows.append({"aspect": aspect, "kappa": k, "n": int(len(g))})
    return pd.DataFrame(rows, columns=["aspect", "kappa", "n"])


def adjacent_accuracy(pairs: pd.DataFrame) -> pd.DataFrame:
    """Share of adjacent pairs the judge orders correctly, per aspect:
    Acc = (1 / (n (k - 1))) * sum_i sum_j 1(x_ij > x_i,j+1), where step j+1 carries one more error than
    step j. ``pairs``: columns source_id, aspect, step, score_step, score_next. Ties count as wrong (the
    judge did not see the extra error); pairs with a NaN score are left out and not counted.
    Returns aspect, accuracy, n_pairs."""
    missing = {"aspect", "score_step", "score_next"} - set(pairs.columns)
    if missing:
        raise DHPError(f"The local-pairs table lacks columns {sorted(missing)}.",
                       "pass a table with source_id, aspect, step, score_step and score_next.")
    ok = np.isfinite(pairs["score_step"].astype(float)) & np.isfinite(pairs["score_next"].astype(float))
    p = pairs[ok]
    rows = []
    for aspect, g in p.groupby("aspect", sort=True):
        rows.append({"aspect": aspect, "accuracy": float((g["score_step"] > g["score_next"]).mean()),
                     "n_pairs": int(len(g))})
    return pd.DataFrame(rows, columns=["aspect", "accuracy", "n_pairs"])


# --------------------------------------------------------------------------------------------------
# Local perspective: cumulative error chains
# --------------------------------------------------------------------------------------------------
#: The error each aspect's chain adds at every step (a registered rule-based perturbation, k = 1).
CHAIN_EDITS = {"fluency": "typo", "coherence": "sentence_swap", "consistency": "entity_swap",
               "relevance": "sentence_deletion"}


def _delete_sentence(text: str, rng) -> str:
    from dhp.perturb.rules import Skip, sentence_spans

    spans = sentence_spans(text)
    if len(spans) < 2:
        raise Skip("fewer than two sentences left to delete from")
    a, b = spans[rng.randrange(len(spans))]
    return (text[:a] + text[b:]).replace("  ", " ").strip()


def _one_error(text: str, aspect: str, rng, fake) -> str:
    from dhp.perturb import entities, rules

    edit = CHAIN_EDITS[aspect]
    if edit == "typo":
        return rules.char_typo(text, 1, rng)[0]
    if edit == "sentence_swap":
        return rules.sentence_reorder(text, "minor", rng)[0]
    if edit == "entity_swap":
        return entities.fictional_entities(text, "minor", rng, fake)[0]
    return _delete_sentence(text, rng)


def error_chain(text: str, aspect: str, length: int, seed: int = 0) -> list[str]:
    """Targets of strictly decreasing quality for one aspect: the reference, then 1, 2, ..., ``length``
    errors, each step = the previous step + ONE new error of the aspect's kind (CHAIN_EDITS). A chain
    whose text cannot take another error (e.g. one sentence left) stops early: shorter, never padded."""
    import random

    from faker import Faker

    from dhp.perturb.rules import Skip, isolated_global_random, stable_seed

    if aspect not in CHAIN_EDITS:
        raise DHPError(f"No error chain for aspect {aspect!r}.", f"use one of {sorted(CHAIN_EDITS)}.")
    chain = [text]
    with isolated_global_random():  # typo reseeds the global random
        for step in range(1, int(length) + 1):
            nxt = None
            for attempt in range(20):  # an edit may undo or redo an earlier one: draw again
                rng = random.Random(stable_seed("dhp-chain", seed, aspect, step, attempt, chain[-1]))
                fake = Faker("en_US")
                fake.seed_instance(rng.randrange(2**31))
                try:
                    cand = _one_error(chain[-1], aspect, rng, fake)
                except Skip:
                    break
                if cand not in chain and _errors_so_far(text, cand, aspect) in (step, None):
                    nxt = cand
                    break
            if nxt is None:
                break
            chain.append(nxt)
    return chain


def _errors_so_far(original: str, text: str, aspect: str) -> int | None:
    """How many errors of the aspect's kind separate ``text`` from the reference, where that can be
    counted (typos: edit distance; entities: entities replaced); None where it cannot be."""
    from dhp.perturb import entities, rules

    edit = CHAIN_EDITS[aspect]
    if edit == "typo":
        return rules.edit_distance(original, text, transpositions=True)
    if edit == "entity_swap":
        return entities.n_entities_changed(original, text)
    return None


def is_one_more_error(prev: str, nxt: str, aspect: str) -> bool:
    """True when ``nxt`` is ``prev`` with exactly one more error of the aspect's kind (checked by the
    same verifiers the perturbation audit uses, not by re-running the edit)."""
    from dhp.perturb import entities, rules

    edit = CHAIN_EDITS[aspect]
    if edit == "typo":
        return rules.edit_distance(prev, nxt, transpositions=True) == 1
    if edit == "sentence_swap":
        return rules.reorder_displacement(prev, nxt) == 2
    if edit == "entity_swap":
        return entities.n_entities_changed(prev, nxt) == 1
    before = [prev[a:b].strip() for a, b in rules.sentence_spans(prev)]
    after = [nxt[a:b].strip() for a, b in rules.sentence_spans(nxt)]
    return len(after) == len(before) - 1 and any(before[:i] + before[i + 1:] == after for i in range(len(before)))


def local_pairs(step_scores: pd.DataFrame) -> pd.DataFrame:
    """Adjacent pairs from one score per (source_id, aspect, step): columns source_id, aspect, step,
    score_step, score_next (the ``local_pairs.parquet`` schema), where step+1 has one more error."""
    s = step_scores.sort_values(["source_id", "aspect", "step"])
    nxt = s.groupby(["source_id", "aspect"])["score"].shift(-1)
    nstep = s.groupby(["source_id", "aspect"])["step"].shift(-1)
    out = s.assign(score_next=nxt, _n=nstep)
    out = out[out["_n"] == out["step"] + 1]
    return out.rename(columns={"score": "score_step"})[["source_id", "aspect", "step", "score_step", "score_next"]]
