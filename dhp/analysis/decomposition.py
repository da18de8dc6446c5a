"""Decompose-and-aggregate analyses: agreement with human preference per strategy (DnA-Eval's Table 2
layout, with position consistency and cost), and two bridges to DHP — DnA as a pointwise score that the
discernment statistics read, and pairwise discernment (original and perturbed shown together).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dhp.errors import DHPError

__all__ = ["combine_orders", "agreement_table", "dna_scores", "pairwise_discernment", "compare_with_perturbed"]

AGREEMENT_COLUMNS = ["judge", "mode", "subset", "strategy", "agreement", "agreement_order_12", "agreement_order_21",
                     "position_consistency", "n", "no_verdict", "calls", "prompt_tokens"]


def combine_orders(verdicts: pd.DataFrame) -> pd.DataFrame:
    """One row per item × strategy: verdict_12, verdict_21 and combined (the verdict both orders give,
    else "inconsistent"; NaN when either order has no verdict)."""
    w = (verdicts.set_index(["item_id", "subset", "strategy", "label", "order"])["verdict"].astype(object)
         .unstack("order").reindex(columns=["12", "21"]).reset_index())
    w.columns.name = None
    w = w.rename(columns={"12": "verdict_12", "21": "verdict_21"})
    both = w["verdict_12"].notna() & w["verdict_21"].notna()
    w["combined"] = np.where(~both, None, np.where(w["verdict_12"] == w["verdict_21"], w["verdict_12"], "inconsistent"))
    return w


def agreement_table(verdicts: pd.DataFrame, costs: pd.DataFrame | None = None, judge: str = "", mode: str = ""
                    ) -> pd.DataFrame:
    """Per subset × strategy (AGREEMENT_COLUMNS): agreement — share of items whose combined verdict equals
    the gold label (an item without a verdict in either order counts as a miss, not as left out);
    agreement_order_12 / _21 — the same per order; position_consistency — share of items whose two orders
    agree; n — items; no_verdict — (item, order) runs whose replies did not parse (their reasons are in the
    verdicts' failure column); calls, prompt_tokens — the strategy's cost over the whole table."""
    c = combine_orders(verdicts)
    rows = []
    for (subset, strat), g in c.groupby(["subset", "strategy"], sort=True):
        cost = costs.set_index("strategy").loc[strat] if costs is not None and strat in set(costs["strategy"]) else None
        rows.append({"judge": judge, "mode": mode, "subset": subset, "strategy": strat,
                     "agreement": float((g["combined"] == g["label"]).mean()),
                     "agreement_order_12": float((g["verdict_12"] == g["label"]).mean()),
                     "agreement_order_21": float((g["verdict_21"] == g["label"]).mean()),
                     "position_consistency": float((g["verdict_12"].notna() & (g["verdict_12"] == g["verdict_21"])).mean()),
                     "n": int(len(g)),
                     "no_verdict": int(g["verdict_12"].isna().sum() + g["verdict_21"].isna().sum()),
                     "calls": int(cost["calls"]) if cost is not None else math.nan,
                     "prompt_tokens": int(cost["prompt_tokens"]) if cost is not None else math.nan})
    return pd.DataFrame(rows, columns=AGREEMENT_COLUMNS)


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


def pairwise_discernment(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Per perturbation: share of (item, order) comparisons the original wins, and a one-sided exact
    binomial (sign) test that the original wins more often than the perturbed copy
    (``scipy.stats.binomtest(wins, wins + losses, 0.5, alternative="greater")``; ties and unparsed replies
    are left out of the test and counted), turned into D = log_0.05(p). Columns: dataset, judge,
    perturbation, severity, level, original_wins, perturbed_wins, ties, unparsed, share_original, p, D."""
    from scipy.stats import binomtest

    from dhp.analysis.discernment import discernment_score

    rows = []
    for key, g in comparisons.groupby(["dataset", "judge", "perturbation", "severity", "level"], sort=True):
        wins = int((g["winner"] == "original").sum())
        losses = int((g["winner"] == "perturbed").sum())
        ties = int((g["winner"] == "tie").sum())
        unparsed = int(g["winner"].isna().sum())
        p = float(binomtest(wins, wins + losses, 0.5, alternative="greater").pvalue) if wins + losses else math.nan
        rows.append(dict(zip(["dataset", "judge", "perturbation", "severity", "level"], key),
                         original_wins=wins, perturbed_wins=losses, ties=ties, unparsed=unparsed,
                         share_original=wins / len(g) if len(g) else math.nan, p=p,
                         D=float(discernment_score(p)) if math.isfinite(p) else math.nan))
    return pd.DataFrame(rows)
