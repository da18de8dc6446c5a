"""Decompose-and-aggregate analyses: agreement with human preference per strategy (DnA-Eval's Table 2
layout, with position consistency and cost), and two bridges to DHP — DnA as a pointwise score that the
discernment statistics read, and pairwise discernment (original and perturbed shown together).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dhp.errors import DHPError

__all__ = ["combine_orders", "agreement_table", "dna_scores", "pairwise_discernment", "compare_with_perturbed",
           "AGREEMENT_COLUMNS", "PAIRWISE_D_COLUMNS"]

AGREEMENT_COLUMNS = ["judge", "mode", "subset", "strategy", "agreement", "agreement_order_12", "agreement_order_21",
                     "agreement_both", "position_consistency", "equal_llmbar", "n", "no_verdict", "ties", "calls",
                     "prompt_tokens"]
_RUN_KEYS = ("judge", "mode", "source")  # columns that tell runs apart when one verdicts table holds several
_NEEDED = ["item_id", "subset", "strategy", "order", "verdict", "label"]


def _run_keys(verdicts: pd.DataFrame) -> list[str]:
    return [c for c in _RUN_KEYS if c in verdicts.columns]


def combine_orders(verdicts: pd.DataFrame) -> pd.DataFrame:
    """One row per item × strategy (× judge, mode, source when the table has them): verdict_12, verdict_21
    (None where that order has no row or no verdict) and combined (the verdict both orders give, else
    "inconsistent"; None when either order has no verdict)."""
    missing = [c for c in _NEEDED if c not in verdicts.columns]
    if missing:
        raise DHPError(f"The verdicts table lacks column(s) {missing}.",
                       "give one row per item × strategy × order with " + ", ".join(_NEEDED) + ".")
    bad = sorted(set(verdicts["order"].astype(str)) - {"12", "21"})
    if bad:
        raise DHPError(f"Unknown order value(s) {bad} in the verdicts table.",
                       'use "12" (output_1 shown first) and "21" (output_2 shown first).')
    index = [*_run_keys(verdicts), "item_id", "subset", "strategy", "label", "order"]
    v = verdicts.assign(order=verdicts["order"].astype(str), label=verdicts["label"].astype(str))
    dup = v.duplicated(index)
    if dup.any():
        raise DHPError(f"{int(dup.sum())} duplicate row(s) for the same item, strategy and order, e.g. "
                       f"{v.loc[dup, index].iloc[0].to_dict()}.",
                       "keep one verdict per item × strategy × order (add judge, mode or source columns to tell "
                       "runs apart).")
    w = (v.set_index(index)["verdict"].astype(object).unstack("order").reindex(columns=["12", "21"]).reset_index())
    w.columns.name = None
    w = w.rename(columns={"12": "verdict_12", "21": "verdict_21"})
    w[["verdict_12", "verdict_21"]] = w[["verdict_12", "verdict_21"]].astype(object).where(
        w[["verdict_12", "verdict_21"]].notna(), None)
    both = w["verdict_12"].notna() & w["verdict_21"].notna()
    w["combined"] = np.where(~both, None, np.where(w["verdict_12"] == w["verdict_21"], w["verdict_12"], "inconsistent"))
    return w


def agreement_table(verdicts: pd.DataFrame, costs: pd.DataFrame | None = None, judge: str = "", mode: str = ""
                    ) -> pd.DataFrame:
    """Agreement with the gold label, computed the same way for every strategy and for live or imported
    verdicts — the statistics of LLMBar's evaluate.py (Zeng et al. 2023; github.com/princeton-nlp/LLMBar,
    LLMEvaluator/evaluate.py, statistics.json). One row per subset × strategy (× judge, mode, source when the
    verdicts table has those columns; otherwise judge and mode are the arguments), AGREEMENT_COLUMNS
    (+ source when present):

    - agreement_order_12, agreement_order_21: share of the n items whose verdict in that order equals the label
      (LLMBar's correct_False, correct_True);
    - agreement: their mean, (correct_12 + correct_21) / 2n — LLMBar's reported accuracy (correct_average);
    - agreement_both: share of items right in both orders (correct_both);
    - position_consistency: share of items whose two orders both gave a verdict and the same one;
    - equal_llmbar: LLMBar's "equal" (its positional agreement rate): share of items whose two orders' verdicts
      are identical, where two missing verdicts count as identical (evaluate.py compares None == None);
    - n: items; no_verdict: (item, order) runs without a verdict (unparsed reply, refused step, or no row for
      that order; reasons in the verdicts' failure column); ties: (item, order) runs whose verdict is "tie";
    - calls, prompt_tokens: the strategy's cost over the whole run (from ``costs``: strategy, calls,
      prompt_tokens, and judge/mode when it covers several runs; NaN without it).

    A missing verdict counts as wrong in every agreement column (as in LLMBar) and as inconsistent in
    position_consistency; a "tie" verdict is wrong against a "1"/"2" label and right against a "tie" label."""
    c = combine_orders(verdicts)
    keys = _run_keys(verdicts)
    group = [*keys, "subset", "strategy"]
    rows = []
    for key, g in c.groupby(group, sort=True, dropna=False):
        rec = dict(zip(group, key))
        n = len(g)
        right_12, right_21 = g["verdict_12"] == g["label"], g["verdict_21"] == g["label"]
        same = g["verdict_12"].fillna("<none>") == g["verdict_21"].fillna("<none>")
        answered = g["verdict_12"].notna() & g["verdict_21"].notna()
        rec.update(agreement=float((right_12.sum() + right_21.sum()) / (2 * n)),
                   agreement_order_12=float(right_12.mean()), agreement_order_21=float(right_21.mean()),
                   agreement_both=float((right_12 & right_21).mean()),
                   position_consistency=float((same & answered).mean()), equal_llmbar=float(same.mean()), n=int(n),
                   no_verdict=int(g["verdict_12"].isna().sum() + g["verdict_21"].isna().sum()),
                   ties=int((g["verdict_12"] == "tie").sum() + (g["verdict_21"] == "tie").sum()))
        rows.append(rec)
    out = pd.DataFrame(rows)
    if "judge" not in keys:
        out.insert(0, "judge", judge)
    if "mode" not in keys:
        out.insert(1, "mode", mode)
    if costs is not None and len(out):
        on = ["strategy", *[k for k in ("judge", "mode") if k in costs.columns and k in keys]]
        out = out.merge(costs[[*on, "calls", "prompt_tokens"]], on=on, how="left")
    else:
        out = out.assign(calls=math.nan, prompt_tokens=math.nan)
    cols = [*AGREEMENT_COLUMNS[:2], *(["source"] if "source" in keys else []), *AGREEMENT_COLUMNS[2:]]
    return out.reindex(columns=cols)


# ---------------------------------------------------------------------------------------------- DHP bridges

def dna_scores(scores: pd.DataFrame, weights: str | pd.DataFrame = "expert") -> pd.DataFrame:
    """DnA as a pointwise DHP score: aspects = the task's metrics (already scored one per inference by
    dhp.judging.score_perturbed), aggregated in code as f = Σ_m w_m s_m. ``weights``: "expert" — the shipped expert
    weights averaged over the task's perturbations (one weighting per task, fixed before seeing any
    variant), "equal", or a DataFrame (task, metric, weight). A row lacking any metric's score is NaN.
    Returns a scores table (same contract) with metric "dna"."""
    from dhp.weights import load_expert_weights

    s = scores[scores["metric"] != "likelihood"]
    if s.empty:
        raise DHPError("dna_scores needs metric scores (logprobs or sample mode).", "score with mode='logprobs'.")
    if isinstance(weights, pd.DataFrame):
        w = weights
    elif weights == "expert":
        ew = load_expert_weights()
        w = ew.groupby(["task", "metric"], as_index=False)["weight"].mean()
    elif weights == "equal":
        w = s[["task", "metric"]].drop_duplicates().assign(weight=1.0)
    else:
        raise DHPError(f"Unknown weights {weights!r}.", "use 'expert', 'equal' or a DataFrame (task, metric, weight).")
    w = w.assign(weight=w["weight"] / w.groupby("task")["weight"].transform("sum"))
    key = ["dataset", "task", "judge", "mode", "item_id", "perturbation", "severity", "level"]
    m = s.merge(w[["task", "metric", "weight"]], on=["task", "metric"], how="left")
    if m["weight"].isna().any():
        raise DHPError(f"No DnA weight for metric(s) {sorted(set(m.loc[m['weight'].isna(), 'metric']))}.",
                       "give a weight for every metric of the task.")
    m["wx"] = m["weight"] * m["score"]
    out = m.groupby(key, as_index=False).agg(score=("wx", lambda x: x.sum(min_count=len(x))),
                                            n_valid=("n_valid", "sum"), n_failed=("n_failed", "sum"))
    # a NaN metric score makes the weighted sum NaN (sum with min_count = all metrics)
    out["metric"] = "dna"
    from dhp.schema import SCORE_COLUMNS

    return out[SCORE_COLUMNS]


def compare_with_perturbed(perturbed: pd.DataFrame, dataset: pd.DataFrame, judge="embedded", cache=None,
                           seed: int = 0, progress: bool = False) -> pd.DataFrame:
    """Show each ok perturbed variant next to its original, in both orders, and ask which is better.
    Asked through the pairwise protocol (dhp.judging.pairwise, candidate 1 = the original). Columns:
    dataset, judge, item_id, perturbation, severity, level, order ("op": original first, "po"), winner
    ("original", "perturbed", "tie" or None when the reply does not start with a label)."""
    from dhp.judging.pairwise import compare_pairs
    from dhp.perturb.llm import PROMPT_UNITS

    ok = perturbed[perturbed["status"] == "ok"]
    orig = ok[ok["perturbation"] == "original"].set_index("item_id")["text"]
    source = dataset.set_index(dataset["item_id"].astype(str))["source"]
    variants = ok[ok["perturbation"] != "original"].reset_index(drop=True)
    pairs = pd.DataFrame({"pair_id": variants.index, "source": variants["item_id"].astype(str).map(source),
                          "candidate_1": variants["item_id"].map(orig), "candidate_2": variants["text"],
                          "unit": [PROMPT_UNITS.get(str(t), ("text", ""))[0] for t in variants["task"]]})
    v = compare_pairs(pairs, judge, mode="sample", cache=cache, seed=seed, progress=progress)
    meta = variants.loc[v["pair_id"], ["dataset", "item_id", "perturbation", "severity", "level"]].reset_index(drop=True)
    winner = v["verdict"].map({"1": "original", "2": "perturbed", "tie": "tie"}).astype(object)
    return meta.assign(judge=v["judge"].values, order=v["order"].map({"12": "op", "21": "po"}).values,
                       winner=winner.where(v["verdict"].notna(), None).values)[
        ["dataset", "judge", "item_id", "perturbation", "severity", "level", "order", "winner"]]


PAIRWISE_D_COLUMNS = ["dataset", "judge", "perturbation", "severity", "level", "n_items", "original_wins",
                      "perturbed_wins", "ties", "inconsistent", "unparsed", "share_original", "p", "D"]


def pairwise_discernment(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Per perturbation (PAIRWISE_D_COLUMNS): does the judge prefer the original to its perturbed copy when it
    sees both? The two orders of one item are one trial, not two: per item, both orders naming the same
    winner give one outcome (original_wins, perturbed_wins or ties); orders that disagree are counted in
    ``inconsistent``; an item with a missing winner in either order (unparsed reply, or no row for that order)
    in ``unparsed``. The one-sided exact binomial (sign) test counts the wins and losses only:
    ``scipy.stats.binomtest(wins, wins + losses, 0.5, alternative="greater")``, turned into D = log_0.05(p);
    ties, inconsistent and unparsed items are left out of it (p and D NaN when no item has a win or a loss).
    share_original = original_wins / n_items. Input: compare_with_perturbed's table (dataset, judge, item_id,
    perturbation, severity, level, order "op"/"po", winner)."""
    from scipy.stats import binomtest

    from dhp.stats.combine import discernment_score

    key = ["dataset", "judge", "perturbation", "severity", "level"]
    missing = [c for c in [*key, "item_id", "order", "winner"] if c not in comparisons.columns]
    if missing:
        raise DHPError(f"The comparisons table lacks column(s) {missing}.",
                       "pass the table dhp.analysis.decomposition.compare_with_perturbed returns.")
    dup = comparisons.duplicated([*key, "item_id", "order"])
    if dup.any():
        raise DHPError(f"{int(dup.sum())} duplicate comparison(s) of the same item, perturbation and order.",
                       "keep one comparison per item × perturbation × severity × order.")
    w = (comparisons.assign(winner=comparisons["winner"].astype(object))
         .set_index([*key, "item_id", "order"])["winner"].unstack("order").reindex(columns=["op", "po"]))
    both = w["op"].notna() & w["po"].notna()
    outcome = pd.Series(np.where(~both, "unparsed", np.where(w["op"] == w["po"], w["op"], "inconsistent")),
                        index=w.index)
    rows = []
    for k, g in outcome.groupby(level=key, sort=True):
        counts = g.value_counts()
        wins, losses = int(counts.get("original", 0)), int(counts.get("perturbed", 0))
        p = float(binomtest(wins, wins + losses, 0.5, alternative="greater").pvalue) if wins + losses else math.nan
        rows.append(dict(zip(key, k), n_items=int(len(g)), original_wins=wins, perturbed_wins=losses,
                         ties=int(counts.get("tie", 0)), inconsistent=int(counts.get("inconsistent", 0)),
                         unparsed=int(counts.get("unparsed", 0)), share_original=wins / len(g), p=p,
                         D=float(discernment_score(p)) if math.isfinite(p) else math.nan))
    return pd.DataFrame(rows, columns=PAIRWISE_D_COLUMNS)
