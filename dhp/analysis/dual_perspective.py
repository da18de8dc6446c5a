"""Dual-perspective meta-evaluation (Hu et al. 2025): a global view — ordinal agreement with human
ratings on targets where annotators agree, linear weighted kappa (Cohen 1968) — and a local view —
adjacent pairwise accuracy along sequences of targets of decreasing quality (each step one more error,
counted against the reference).

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
    """Ordinal 1-5 rating from a judge score by the "expected" rating rule: the expected (logprobs) or
    mean (sample) score rounded half up, so 3.5 is 4 (numpy's round-half-to-even would make 2.5 and 3.5
    disagree in direction). NaN stays NaN."""
    s = np.asarray(score, dtype=float)
    return np.where(np.isfinite(s), np.clip(np.floor(s + 0.5), 1, 5), np.nan)


def global_kappa(targets: pd.DataFrame) -> pd.DataFrame:
    """Linear weighted kappa per aspect between human and judge ratings.

    ``targets``: columns aspect, human_rating, judge_rating (NaN judge ratings — no usable reply — are
    left out and not counted in n), optionally rating_rule (how judge_rating was made, see
    :func:`global_targets`). Returns aspect, [rating_rule,] kappa, n: one row per aspect (and rule, when
    the table has the column). Uses ``sklearn.metrics.cohen_kappa_score(weights="linear",
    labels=[1..5])``; kappa is NaN when fewer than two targets remain or the ratings do not vary at all.
    """
    from sklearn.metrics import cohen_kappa_score

    missing = {"aspect", "human_rating", "judge_rating"} - set(targets.columns)
    if missing:
        raise DHPError(f"The global-targets table lacks columns {sorted(missing)}.",
                       "pass a table with aspect, human_rating and judge_rating.")
    keys = ["aspect", "rating_rule"] if "rating_rule" in targets.columns else ["aspect"]
    rows = []
    for key, g in targets.groupby(keys, sort=True):
        g = g[np.isfinite(g["judge_rating"].astype(float))]
        h, j = g["human_rating"].astype(int).to_numpy(), g["judge_rating"].astype(int).to_numpy()
        k = math.nan
        if len(g) >= 2 and len(set(h) | set(j)) > 1:
            k = float(cohen_kappa_score(h, j, weights="linear", labels=LABELS))
        rows.append({**dict(zip(keys, key)), "kappa": k, "n": int(len(g))})
    return pd.DataFrame(rows, columns=[*keys, "kappa", "n"])


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
#: The error each aspect's chain adds at every step, and how it is counted against the REFERENCE (not
#: against the previous step: an edit that undoes an earlier one must not pass as one more error).
CHAIN_EDITS = {"fluency": "typo", "coherence": "sentence_swap", "consistency": "entity_swap",
               "relevance": "sentence_deletion"}
CHAIN_COUNTS = {
    "fluency": "typos: optimal-string-alignment edit distance to the reference (dhp.perturb.rules.edit_distance)",
    "coherence": "inversions of the sentence order against the reference's (dhp.perturb.rules.sentence_inversions)",
    "consistency": "distinct reference entities replaced (dhp.perturb.entities.n_entities_changed)",
    "relevance": "reference sentences deleted (dhp.perturb.rules.kept_sentences)",
}
_ATTEMPTS = 20  # redraws of one step whose edit does not add exactly one error


def count_errors(reference: str, text: str, aspect: str) -> int | None:
    """How many errors of the aspect's kind separate ``text`` from ``reference`` (CHAIN_COUNTS says how
    each is counted); None when ``text`` is not the reference with errors of that kind only."""
    from dhp.perturb import entities, rules

    if aspect not in CHAIN_EDITS:
        raise DHPError(f"No error chain for aspect {aspect!r}.", f"use one of {sorted(CHAIN_EDITS)}.")
    if aspect == "fluency":
        return rules.edit_distance(reference, text, transpositions=True)
    if aspect == "coherence":
        return rules.sentence_inversions(reference, text)
    if aspect == "consistency":
        return entities.n_entities_changed(reference, text)
    kept = rules.kept_sentences(reference, text)
    return None if kept is None else len(rules.sentence_spans(reference)) - len(kept)


def _compose(reference: str, spans, picked: list[int], keep_separators: bool) -> str:
    """The reference's sentences ``picked`` (indices, in this order) with the reference's separators:
    position by position (a reordering) or the one that preceded each kept sentence (a deletion)."""
    ends = [0] + [b for _, b in spans]
    starts = [a for a, _ in spans] + [len(reference)]
    seps = [reference[e:s] for e, s in zip(ends, starts)]  # before sentence i; the last: after all
    out = [seps[0]]
    for pos, k in enumerate(picked):
        if pos:
            out.append(seps[pos] if keep_separators else seps[k])
        out.append(reference[spans[k][0]: spans[k][1]])
    out.append(seps[-1])
    return "".join(out)


def _next_error(reference: str, spans, state, aspect: str, rng, fake):
    """One more error on top of ``state`` (the previous text; for coherence the sentence order, for
    relevance the kept sentences): (text, new state), or Skip when none can be added."""
    from dhp.perturb import entities, rules
    from dhp.perturb.rules import Skip

    if aspect == "fluency":
        text = rules.char_typo(state, 1, rng)[0]
        return text, text
    if aspect == "consistency":
        text = entities.fictional_entities(state, "minor", rng, fake)[0]
        return text, text
    sents = [reference[a:b] for a, b in spans]
    if aspect == "coherence":
        # swapping two neighbours still in reference order adds exactly one inversion; any other swap
        # adds an odd number or removes some (the old chain's 0, 1, 2, 3, 2, 1)
        ups = [p for p in range(len(state) - 1) if state[p] < state[p + 1] and sents[state[p]] != sents[state[p + 1]]]
        if not ups:
            raise Skip("the sentences are in reverse reference order already: no swap adds an inversion")
        p = rng.choice(ups)
        order = state[:p] + [state[p + 1], state[p]] + state[p + 2:]
        return _compose(reference, spans, order, keep_separators=True), order
    if len(state) < 2:
        raise Skip("one sentence left: deleting it would leave no summary")
    drop = rng.choice(state)
    kept = [k for k in state if k != drop]
    return _compose(reference, spans, kept, keep_separators=False), kept


def error_chain(text: str, aspect: str, length: int, seed: int = 0) -> list[str]:
    """Targets of decreasing quality for one aspect: the reference, then 1, 2, ..., ``length`` errors of
    the aspect's kind (CHAIN_EDITS).

    Guarantee, checked on every step (:func:`is_one_more_error`), not assumed: step j is step j - 1
    plus one error with every earlier error kept, and :func:`count_errors` against the REFERENCE is
    exactly j — typos (edit distance), inversions of the sentence order (coherence swaps two
    neighbouring sentences that are still in reference order), reference entities replaced, reference
    sentences deleted. So no step undoes an earlier error: the chain never gets better. A text that
    cannot take another error (coherence: sentences fully reversed; relevance: one sentence left;
    fluency/consistency: nothing left to edit) or a step not drawn in 20 tries ends the chain early:
    shorter, never padded."""
    import random

    from faker import Faker

    from dhp.perturb.rules import Skip, isolated_global_random, sentence_spans, stable_seed

    if aspect not in CHAIN_EDITS:
        raise DHPError(f"No error chain for aspect {aspect!r}.", f"use one of {sorted(CHAIN_EDITS)}.")
    spans = sentence_spans(text) if aspect in ("coherence", "relevance") else []
    if aspect in ("coherence", "relevance") and not spans:
        return [text]  # no sentences to reorder or delete
    state = list(range(len(spans))) if spans else text
    chain = [text]
    with isolated_global_random():  # typo reseeds the global random
        for step in range(1, int(length) + 1):
            nxt = None
            for attempt in range(_ATTEMPTS):
                rng = random.Random(stable_seed("dhp-chain", seed, aspect, step, attempt, chain[-1]))
                fake = Faker("en_US")
                fake.seed_instance(rng.randrange(2**31))
                try:
                    cand, cand_state = _next_error(text, spans, state, aspect, rng, fake)
                except Skip:
                    break
                if cand not in chain and is_one_more_error(text, chain[-1], cand, aspect):
                    nxt = cand
                    break
            if nxt is None:
                break
            chain.append(nxt)
            state = cand_state
    return chain


def is_one_more_error(reference: str, prev: str, nxt: str, aspect: str) -> bool:
    """True when ``nxt`` is ``prev`` plus exactly one error of the aspect's kind, every earlier error
    kept: one more against the reference (:func:`count_errors`) and one edit from ``prev`` (one typo;
    one swap of neighbouring sentences; the same entity replacements plus one; the same deletions plus
    one). Checked by the verifiers the perturbation audit uses, not by re-running the edit."""
    from dhp.perturb import entities, rules

    before, after = count_errors(reference, prev, aspect), count_errors(reference, nxt, aspect)
    if before is None or after != before + 1:
        return False
    if aspect == "fluency":
        return rules.edit_distance(prev, nxt, transpositions=True) == 1
    if aspect == "coherence":
        a, b = rules.sentence_order(reference, prev), rules.sentence_order(reference, nxt)
        moved = [i for i in range(len(a)) if a[i] != b[i]]
        return len(moved) == 2 and moved[1] == moved[0] + 1
    if aspect == "consistency":
        a, b = entities.entity_changes(reference, prev) or [], entities.entity_changes(reference, nxt) or []
        return set(a) < set(b)
    return set(rules.kept_sentences(reference, nxt)) < set(rules.kept_sentences(reference, prev))


def local_pairs(step_scores: pd.DataFrame) -> pd.DataFrame:
    """Adjacent pairs from one score per (source_id, aspect, step): columns source_id, aspect, step,
    score_step, score_next (the ``local_pairs.parquet`` schema), where step+1 has one more error."""
    s = step_scores.sort_values(["source_id", "aspect", "step"])
    nxt = s.groupby(["source_id", "aspect"])["score"].shift(-1)
    nstep = s.groupby(["source_id", "aspect"])["step"].shift(-1)
    out = s.assign(score_next=nxt, _n=nstep)
    out = out[out["_n"] == out["step"] + 1]
    return out.rename(columns={"score": "score_step"})[["source_id", "aspect", "step", "score_step", "score_next"]]


# --------------------------------------------------------------------------------------------------
# Running a judge on the three views (calls go through dhp.judging.score_prompts and the shared cache)
# --------------------------------------------------------------------------------------------------
TASK = "summarization"


def _score(rows: list[dict], judge, mode, cache, seed, progress, n_samples: int = 5,
           temperature: float = 0.0) -> pd.DataFrame:
    from dhp.judging import build_prompt, score_prompts

    prompts = pd.DataFrame([{**{k: v for k, v in r.items() if k not in ("source", "candidate", "item", "task")},
                             "metric": r["aspect"],
                             "prompt": build_prompt(r.get("task", TASK), r["aspect"],
                                                    r.get("item") or {"source": r["source"]}, r["candidate"])}
                            for r in rows])
    return score_prompts(prompts, judge=judge, mode=mode, seed=seed, cache=cache, progress=progress,
                         n_samples=n_samples if mode == "sample" else 1,
                         temperature=temperature if mode == "sample" else 0.0)


#: How a judge's replies become the ordinal rating the global view's kappa compares with the humans'.
RATING_RULES = {
    "mode": "the most frequent of the sampled ratings (each parsed reply rounded half up; a tie goes to the "
            "lower rating, the conservative choice) — Hu et al. 2025 App. A.4: ten samples at temperature 1, "
            "their mode; needs mode='sample'",
    "expected": "the expected score rounded half up: the probability-weighted score (logprobs) or the mean "
                "of the sampled ratings (sample)",
}


def default_rating_rule(mode: str) -> str:
    """The rating rule a scoring mode uses unless told otherwise: "mode" for sampled replies (the
    paper's), "expected" for logprobs (one reply: there is no sample to take a mode of)."""
    return "mode" if mode == "sample" else "expected"


def global_targets(targets: pd.DataFrame, ratings: pd.DataFrame, aspects, n_per_aspect: int, judge="embedded",
                   mode="logprobs", cache=None, seed: int = 0, progress: bool = False,
                   rating_rule: str | None = None, n_samples: int = 10, temperature: float = 1.0) -> pd.DataFrame:
    """Judge ``n_per_aspect`` agreed-upon targets per aspect (seeded sample) and map each to an ordinal
    rating by ``rating_rule`` (RATING_RULES; None: :func:`default_rating_rule` of ``mode``):

    - ``"mode"``: the most frequent of ``n_samples`` sampled ratings at ``temperature`` (defaults 10 and
      1.0, the paper's); a tie goes to the lower rating. Sample mode only: logprobs mode has one reply.
    - ``"expected"``: the expected score rounded half up (:func:`to_rating`) — logprobs: the
      probability-weighted score; sample: the mean of the sampled ratings.

    ``n_samples`` and ``temperature`` apply in sample mode; logprobs is one reply at temperature 0.
    Columns (``global_targets.parquet``): target_id, aspect, human_rating, judge_score (the expected /
    mean score), judge_rating, rating_rule, failure."""
    from dhp.datasets.summeval_annotators import agreed_targets

    rule = default_rating_rule(mode) if rating_rule is None else rating_rule
    if rule not in RATING_RULES:
        raise DHPError(f"Unknown rating rule {rating_rule!r}.", f"use one of {sorted(RATING_RULES)} (or None).")
    if rule == "mode" and mode != "sample":
        raise DHPError(f"rating_rule='mode' takes the most frequent of sampled ratings, but mode={mode!r} gives "
                       "one reply per target.", "use mode='sample' (the paper's ten samples at temperature 1) "
                       "or rating_rule='expected'.")
    if mode == "sample" and int(n_samples) < 1:
        raise DHPError(f"n_samples={n_samples} leaves no sampled rating.", "pass n_samples >= 1 (the paper: 10).")
    agreed = agreed_targets(ratings)
    by_id = targets.set_index("target_id")
    rows = []
    for aspect in aspects:
        pool = agreed[agreed["aspect"] == aspect]
        pick = pool.sample(n=min(n_per_aspect, len(pool)), random_state=seed) if len(pool) else pool
        for t in pick.itertuples():
            rows.append({"target_id": t.target_id, "aspect": aspect, "human_rating": int(t.human_rating),
                         "source": by_id.at[t.target_id, "source"], "candidate": by_id.at[t.target_id, "candidate"]})
    scored = _score(rows, judge, mode, cache, seed, progress, n_samples=int(n_samples), temperature=float(temperature))
    # score_prompts' rating is the sampled mode (ties to the lower) in sample mode
    rating = scored["rating"].astype(float) if rule == "mode" else to_rating(scored["score"])
    return pd.DataFrame({"target_id": scored["target_id"], "aspect": scored["aspect"],
                         "human_rating": scored["human_rating"], "judge_score": scored["score"],
                         "judge_rating": rating, "rating_rule": rule, "failure": scored["failure"]})


def chain_scores(references: pd.DataFrame, aspects, chain_length: int, judge="embedded", mode="logprobs",
                 cache=None, seed: int = 0, progress: bool = False) -> pd.DataFrame:
    """Build each reference's error chain per aspect and judge every step on that aspect. ``references``:
    source_id, source, reference. Columns: source_id, aspect, step (errors injected), score, failure."""
    rows = []
    for r in references.itertuples():
        for aspect in aspects:
            for step, text in enumerate(error_chain(r.reference, aspect, chain_length, seed)):
                rows.append({"source_id": r.source_id, "aspect": aspect, "step": step, "source": r.source,
                             "candidate": text})
    scored = _score(rows, judge, mode, cache, seed, progress)
    return scored[["source_id", "aspect", "step", "score", "failure"]]


def pair_matrix(step_scores: pd.DataFrame) -> pd.DataFrame:
    """Accuracy for every pair of error counts (i < j): share of sources where the target with i errors
    scores above the one with j (the paper's Figure 5). Columns: aspect, errors_i, errors_j, accuracy, n."""
    rows = []
    for (aspect, src), g in step_scores.groupby(["aspect", "source_id"]):
        s = dict(zip(g["step"], g["score"]))
        for i in s:
            for j in s:
                if i < j and np.isfinite(s[i]) and np.isfinite(s[j]):
                    rows.append((aspect, i, j, float(s[i] > s[j])))
    d = pd.DataFrame(rows, columns=["aspect", "errors_i", "errors_j", "hit"])
    out = d.groupby(["aspect", "errors_i", "errors_j"])["hit"].agg(["mean", "size"]).reset_index()
    return out.rename(columns={"mean": "accuracy", "size": "n"})


#: table1's traditional columns: <level>_<statistic>, the paper's (dataset level: r, rho) first.
TABLE1_CORRELATIONS = [f"{level}_{stat}" for level in ("dataset", "system")
                       for stat in ("pearson", "spearman", "kendall")]


def table1(global_kappa_table: pd.DataFrame, local_accuracy_table: pd.DataFrame, alignment: pd.DataFrame,
           judge: str) -> pd.DataFrame:
    """The paper's Table 1 for one judge, per aspect: kappa (global), accuracy (local) and the
    traditional correlations labelled by level — dataset_pearson / dataset_spearman / dataset_kendall
    (all targets pooled: the level of the paper's r and rho, Hu et al. 2025 App. A.3) beside
    system_pearson / system_spearman / system_kendall (per-system means), from ``alignment``
    (:func:`dhp.analysis.alignment.alignment_table`). Columns: judge, aspect, kappa, accuracy,
    *TABLE1_CORRELATIONS (NaN where the alignment table lacks that level). Concatenate several
    judges' tables and rank with :func:`rank_judges`."""
    if global_kappa_table["aspect"].duplicated().any():
        raise DHPError("The kappa table has several rows for one aspect (several rating rules?).",
                       "pass the global_kappa rows of one rating rule.")
    a = alignment[alignment["view"].isin(["dataset", "system"])]
    wide = a.assign(column=a["view"] + "_" + a["statistic"]).pivot_table(index="aspect", columns="column",
                                                                         values="value", dropna=False)
    out = (global_kappa_table.set_index("aspect")[["kappa"]]
           .join(local_accuracy_table.set_index("aspect")[["accuracy"]], how="outer")
           .join(wide.reindex(columns=TABLE1_CORRELATIONS), how="outer"))
    return out.reset_index().assign(judge=judge)[["judge", "aspect", "kappa", "accuracy", *TABLE1_CORRELATIONS]]


def rank_judges(table: pd.DataFrame) -> pd.DataFrame:
    """Add rank_<column> columns to concatenated :func:`table1` rows: per aspect, 1 = the judge with the
    highest value (ties share the better rank; NaN is not ranked). The paper's point is that the views
    can rank judges differently."""
    out = table.copy()
    for col in ("kappa", "accuracy", *TABLE1_CORRELATIONS):
        out[f"rank_{col}"] = out.groupby("aspect")[col].rank(ascending=False, method="min")
    return out


def traditional_targets(targets: pd.DataFrame, ratings: pd.DataFrame, aspects, n_docs: int, judge="embedded",
                        mode="logprobs", cache=None, seed: int = 0, progress: bool = False) -> pd.DataFrame:
    """Judge every rated system summary of ``n_docs`` seeded documents per aspect, next to the mean of the
    experts' ratings (the classic view's input). Columns: doc_id, system, aspect, human, judge, failure."""
    docs = sorted(targets["doc_id"].unique())
    pick = pd.Series(docs).sample(n=min(n_docs, len(docs)), random_state=seed).tolist()
    human = ratings.groupby(["target_id", "aspect"])["rating"].mean()
    rows = []
    for aspect in aspects:
        for t in targets[targets["doc_id"].isin(pick)].sort_values(["doc_id", "system"]).itertuples():
            rows.append({"doc_id": t.doc_id, "system": t.system, "aspect": aspect,
                         "human": float(human[(t.target_id, aspect)]), "source": t.source, "candidate": t.candidate})
    scored = _score(rows, judge, mode, cache, seed, progress)
    return scored.rename(columns={"score": "judge"})[["doc_id", "system", "aspect", "human", "judge", "failure"]]


def mt_segments(mqm: pd.DataFrame, n_segments: int, systems, judge="embedded", mode="logprobs", cache=None,
                seed: int = 0, progress: bool = False) -> pd.DataFrame:
    """Judge ``systems``' outputs on ``n_segments`` seeded WMT22 zh-en segments for translation accuracy.
    Columns: seg_id, system, mqm, judge, failure."""
    d = mqm[mqm["system"].isin(systems)]
    segs = sorted(d["seg_id"].unique())
    pick = pd.Series(segs).sample(n=min(n_segments, len(segs)), random_state=seed).tolist()
    rows = [{"seg_id": r.seg_id, "system": r.system, "mqm": r.mqm, "aspect": "accuracy", "task": "translation",
             "item": {"source": r.source, "src_lang": "zh", "tgt_lang": "en"}, "source": r.source,
             "candidate": r.target} for r in d[d["seg_id"].isin(pick)].sort_values(["seg_id", "system"]).itertuples()]
    scored = _score(rows, judge, mode, cache, seed, progress)
    return scored.rename(columns={"score": "judge"})[["seg_id", "system", "mqm", "judge", "failure"]]


# --------------------------------------------------------------------------------------------------
# Local view by direct comparison (Hu et al. 2025, Table 10's question: compare, or score separately?)
# --------------------------------------------------------------------------------------------------
ASPECT_DEFINITIONS = {
    "coherence": "the summary is well organised: sentences follow each other in a sensible order and build a whole.",
    "consistency": "every fact in the summary is supported by the article; nothing is invented or contradicted.",
    "fluency": "each sentence is well written: correct spelling, grammar and word choice.",
    "relevance": "the summary keeps the article's important information and leaves out what is not.",
}


def compare_adjacent(references: pd.DataFrame, aspects, chain_length: int, judge="embedded", cache=None,
                     seed: int = 0, progress: bool = False) -> pd.DataFrame:
    """Show each adjacent pair of a chain (step j, step j+1: one more error) to the judge side by side, in
    both orders through the pairwise protocol (dhp.judging.pairwise; candidate 1 = step j). Columns:
    source_id, aspect, step, order ("12": step j shown first, "21"), preferred ("better", "worse", "tie" or
    None when the reply does not start with a label), reply. A pair counts as correct in
    :func:`comparison_accuracy` only when both orders prefer the better target."""
    from dhp.judging.pairwise import compare_pairs

    rows = []
    for r in references.itertuples():
        for aspect in aspects:
            chain = error_chain(r.reference, aspect, chain_length, seed)
            rows += [{"pair_id": f"{r.source_id}|{aspect}|{step}", "source": r.source, "candidate_1": chain[step],
                      "candidate_2": chain[step + 1], "aspect_title": aspect.capitalize(),
                      "aspect_definition": ASPECT_DEFINITIONS[aspect]} for step in range(len(chain) - 1)]
    v = compare_pairs(pd.DataFrame(rows), judge, mode="sample", cache=cache, seed=seed,
                      template=("pairwise", "summarization_compare"), progress=progress)
    parts = v["pair_id"].str.split("|", expand=True) if len(v) else pd.DataFrame(columns=[0, 1, 2])
    preferred = v["verdict"].map({"1": "better", "2": "worse", "tie": "tie"}).astype(object)
    out = pd.DataFrame({"source_id": parts[0], "aspect": parts[1], "step": parts[2].astype(int), "order": v["order"],
                        "preferred": preferred.where(v["verdict"].notna(), None),
                        "reply": v["reply"].fillna(v["failure"]).str[:80]})
    return out[["source_id", "aspect", "step", "order", "preferred", "reply"]]


def comparison_accuracy(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Per aspect: accuracy (both orders prefer the target with fewer errors), position_consistency (both
    orders give the same verdict about the pair), parsed (share of replies with a verdict), n_pairs."""
    rows = []
    for aspect, g in comparisons.groupby("aspect", sort=True):
        w = g.pivot_table(index=["source_id", "step"], columns="order", values="preferred", aggfunc="first")
        both = w.reindex(columns=["12", "21"])
        correct = (both["12"] == "better") & (both["21"] == "better")
        consistent = both["12"].notna() & (both["12"] == both["21"])
        rows.append({"aspect": aspect, "accuracy": float(correct.mean()) if len(both) else math.nan,
                     "position_consistency": float(consistent.mean()) if len(both) else math.nan,
                     "parsed": float(g["preferred"].notna().mean()), "n_pairs": int(len(both))})
    return pd.DataFrame(rows, columns=["aspect", "accuracy", "position_consistency", "parsed", "n_pairs"])

