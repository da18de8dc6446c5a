"""Leaderboard views of rated outputs (item_scores.parquet beside item_human.parquet: HANNA stories, FRANK
summaries), with the statistics of their own papers; pure — tables in, views out.

- HANNA (Chhun et al. 2022/2024; upstream ``data_visualization.ipynb``, ``get_overall_correlation`` and
  ``get_system_level_correlation``), per criterion: **overall** — Pearson, Spearman or Kendall τ_b of a judge's
  scores and the human criterion over all stories but the ``Human`` system's, pooled (960) — and **system-level** —
  the same correlation of the 10 systems' means over their 96 stories. Units of the paired bootstrap: stories
  (overall) or prompts (system-level: a resampled prompt brings all its systems' stories, so a system's mean keeps
  its 96 stories' structure).
- FRANK (Pagnoni et al. 2021; upstream ``evaluation/evaluate.py``, ``human_metric_correlation`` with
  ``partial_correlation_variable='model_name'``): **partial** Pearson and Spearman correlation with human
  Factuality controlling for the system, on the test split; units: summaries. Every pair also carries upstream's
  **Williams test** (``metric_metric_correlation``: partial Pearson residuals of both metrics and the human score
  on the summaries both scored; one-sided p) in ``p_upstream``.

Headline views (``which="headline"``, the leaderboard's default, measured to keep ``make demo`` fast): HANNA overall
Kendall τ_b per criterion with the LLM judges and the 17 metrics upstream's notebook shows (``METRICS_FILTERED``),
FRANK partial Pearson and Spearman with every metric. ``which="all"``: every level × correlation and every judge.
Live judges (mode other than "recorded") are always in. Every measure is signed and higher-is-better, as the papers'
tables read.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dhp.analysis.leaderboard import View
from dhp.stats import correlation as corr

__all__ = ["item_views", "hanna_views", "frank_views", "HANNA_HEADLINE_METRICS", "HANNA_EXCLUDED_SYSTEM",
           "williams_p"]

#: the automatic metrics of upstream's notebook's METRICS_FILTERED (its family tags removed, as imported)
HANNA_HEADLINE_METRICS = ("BLEU", "ROUGE-1 Recall", "METEOR", "chrF", "ROUGE-WE-3 Recall", "BERTScore F1",
                          "MoverScore", "DepthScore", "BaryScore-W", "S3-Pyramid", "SummaQA", "InfoLM-FisherRao",
                          "BARTScore-SH", "Coverage", "Repetition-1", "SUPERT-PS", "BLANC-Tune-PS")
#: upstream's analysis drops the human-written stories (METRICS_DF_NO_HUMAN)
HANNA_EXCLUDED_SYSTEM = "Human"
FRANK_SPLIT = "test"


def _joined(scores: pd.DataFrame, human: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """The dataset's judge scores beside the human score of the same output and criterion (a judge with one score
    per output, criterion "", is compared with every criterion); NaN scores dropped."""
    s = scores[scores["dataset"] == dataset]
    h = human[human["dataset"] == dataset]
    keys = ["system", "item"]
    per = s[s["criterion"] != ""].merge(h[[*keys, "criterion", "human"]], on=[*keys, "criterion"], how="inner")
    any_ = s[s["criterion"] == ""].drop(columns="criterion").merge(h[[*keys, "criterion", "human"]], on=keys,
                                                                   how="inner")
    out = pd.concat([per, any_], ignore_index=True)
    out = out[np.isfinite(out["score"].astype(float)) & np.isfinite(out["human"].astype(float))]
    return out.assign(score=out["score"].astype(float), human=out["human"].astype(float))


# ---------------------------------------------------------------------------------------------- statistics

def _overall(method: str):
    def statistic(rows: pd.DataFrame) -> float:
        return corr.correlation(rows["score"].to_numpy(), rows["human"].to_numpy(), method)

    cache: dict = {}

    def draws(rows: pd.DataFrame, units: list, idx: np.ndarray) -> np.ndarray:
        r = rows.drop_duplicates("unit").set_index("unit").reindex(units)
        x, y = r["score"].to_numpy(float), r["human"].to_numpy(float)
        key = (id(idx), len(units))
        if key not in cache:  # the counts and the human side are shared by every judge of the view
            cache.clear()
            w = corr.counts_of(idx, len(units))
            cache[key] = {"w": w, "ry": corr.weighted_midranks(y, w) if method == "spearman" else None}
        c = cache[key]
        if method == "kendall":
            return corr.weighted_kendall(x, y, c["w"])
        if method == "spearman":
            return corr.weighted_spearman(x, y, c["w"], ry=c["ry"])
        return corr.weighted_pearson(x, y, c["w"])

    return statistic, draws


def _natural(units) -> list:
    """Items in their natural order (HANNA's prompts 0..95 numerically: the order upstream sums them in)."""
    return sorted(units, key=lambda u: (len(str(u)), str(u)))


def _snap(a: np.ndarray, digits: int = 12) -> np.ndarray:
    """``a`` rounded to ``digits`` significant digits of its largest value: means equal in exact arithmetic are tied
    again (the weighted sums leave last-bit noise that would break ties for Kendall and Spearman)."""
    top = np.nanmax(np.abs(a)) if np.isfinite(a).any() else 0.0
    if not top:
        return a
    return np.round(a, digits - 1 - int(np.floor(np.log10(top))))


def _system_level(method: str):
    """Units: prompts (``unit``); rows: one per system × prompt."""

    def matrices(rows: pd.DataFrame, units: list):
        score = rows.pivot_table(index="system", columns="unit", values="score", aggfunc="mean").reindex(columns=units)
        human = rows.pivot_table(index="system", columns="unit", values="human", aggfunc="mean").reindex(columns=units)
        # systems × prompts, C order: upstream's np.array(per-system lists), whose .T.mean(axis=0) it correlates
        return np.ascontiguousarray(score.to_numpy(float)), np.ascontiguousarray(human.to_numpy(float))

    def statistic(rows: pd.DataFrame) -> float:
        s, h = matrices(rows, _natural(rows["unit"].unique()))
        return corr.correlation(s.T.mean(axis=0), h.T.mean(axis=0), method)

    def draws(rows: pd.DataFrame, units: list, idx: np.ndarray) -> np.ndarray:
        s, h = matrices(rows, units)
        w = corr.counts_of(idx, len(units))
        return corr.columnwise_correlation(_snap(corr.system_means(s, w)), _snap(corr.system_means(h, w)), method)

    return statistic, draws


def _partial(method: str):
    """FRANK: rows carry system (the controlled variable)."""

    def statistic(rows: pd.DataFrame) -> float:
        return corr.partial_correlation(rows["score"].to_numpy(), rows["human"].to_numpy(), rows["system"].to_numpy(),
                                        method)

    cache: dict = {}

    def draws(rows: pd.DataFrame, units: list, idx: np.ndarray) -> np.ndarray:
        r = rows.drop_duplicates("unit").set_index("unit").reindex(units)
        key = (id(idx), len(units))
        if key not in cache:  # counts and the human residuals are shared by every judge of the view
            cache.clear()
            w = corr.counts_of(idx, len(units))
            ry = corr.draw_residuals(r["human"].to_numpy(float), r["system"].to_numpy(), w)
            cache[key] = (w, corr.residual_ranks(ry, w) if method == "spearman" else ry)
        w, ry = cache[key]
        return corr.resampled_partial(r["score"].to_numpy(float), None, r["system"].to_numpy(), w, method, ry=ry)

    return statistic, draws


def _aligned(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    r = rows.sort_values("unit", kind="stable")
    return (r["unit"].to_numpy(), r["system"].to_numpy(), r["score"].to_numpy(float), r["human"].to_numpy(float))


def williams_p(rows_a: pd.DataFrame, rows_b: pd.DataFrame) -> float:
    """Upstream FRANK's Williams test of two metrics (``metric_metric_correlation``): partial (system-controlled)
    Pearson residuals of both metrics and the human score on the summaries both scored; r12, r13 their correlations
    with the human score (the larger first), r23 theirs with each other; the one-sided p that the better correlates
    better."""
    ua, ga, xa, ha = _aligned(rows_a)
    ub, _, xb, _ = _aligned(rows_b)
    if len(ua) != len(ub) or (ua != ub).any():  # not on the same summaries: keep those both scored
        both = np.intersect1d(ua, ub)
        ka, kb = np.isin(ua, both), np.isin(ub, both)
        ga, xa, ha, xb = ga[ka], xa[ka], ha[ka], xb[kb]
    if len(xa) <= 3:
        return math.nan
    x, y, z = (corr.partial_residuals(v, ga) for v in (xa, xb, ha))
    r12, r13, r23 = (corr.correlation(x, z, "pearson"), corr.correlation(y, z, "pearson"),
                     corr.correlation(x, y, "pearson"))
    if r12 < r13:
        r12, r13 = r13, r12
    return corr.williams_test(r12, r13, r23, len(xa))[1]


# ---------------------------------------------------------------------------------------------- views

def _keep_judges(rows: pd.DataFrame, which: str) -> pd.DataFrame:
    if which == "all":
        return rows
    llm = rows["judge"].str.contains(r" \(setting \d+\)$", regex=True)
    keep = (rows["mode"] != "recorded") | llm | rows["judge"].isin(HANNA_HEADLINE_METRICS)
    return rows[keep]


def hanna_views(scores: pd.DataFrame, human: pd.DataFrame, which: str = "headline") -> list[View]:
    """The HANNA views (module docstring)."""
    rows = _joined(scores, human, "hanna")
    rows = _keep_judges(rows[rows["system"] != HANNA_EXCLUDED_SYSTEM], which)
    levels = ("overall",) if which == "headline" else ("overall", "system")
    methods = ("kendall",) if which == "headline" else corr.METHODS
    out = []
    for criterion, g in rows.groupby("criterion", sort=False):
        for level in levels:
            if level == "overall":
                data = g.assign(unit=g["system"] + "/" + g["item"])
            else:
                data = g.assign(unit=g["item"])
            data = data[["judge", "mode", "unit", "system", "score", "human"]].reset_index(drop=True)
            for method in methods:
                statistic, draws = (_overall if level == "overall" else _system_level)(method)
                out.append(View("hanna", f"HANNA {criterion}", f"{level}_{method}", "statistic", data,
                                statistic=statistic, draws=draws,
                                notes={"follows": "hanna-benchmark-asg data_visualization.ipynb "
                                                  f"get_{'overall' if level == 'overall' else 'system_level'}"
                                                  "_correlation", "units": "stories" if level == "overall"
                                       else "prompts"}))
    order = {c: i for i, c in enumerate(("Relevance", "Coherence", "Empathy", "Surprise", "Engagement",
                                         "Complexity"))}
    return sorted(out, key=lambda v: (order.get(v.scope[6:], 99), v.measure))


def frank_views(scores: pd.DataFrame, human: pd.DataFrame, which: str = "headline",
                split: str = FRANK_SPLIT) -> list[View]:
    """The FRANK views (module docstring); ``split``: "test", "valid" or "all"."""
    rows = _joined(scores, human, "frank")
    if split != "all":
        rows = rows[rows["split"] == split]
    out = []
    for criterion, g in rows.groupby("criterion", sort=True):
        data = g.assign(unit=g["system"] + "/" + g["item"])[["judge", "mode", "unit", "system", "score", "human"]]
        for method in ("pearson", "spearman"):
            statistic, draws = _partial(method)
            out.append(View("frank", f"FRANK {split} {criterion}", f"partial_{method}", "statistic",
                            data.reset_index(drop=True), statistic=statistic, draws=draws,
                            pair_test=williams_p if method == "pearson" else None,
                            pair_test_name="Williams (FRANK evaluate.py)" if method == "pearson" else "",
                            notes={"follows": "frank evaluation/evaluate.py human_metric_correlation",
                                   "units": "summaries"}))
    return out


def item_views(scores: pd.DataFrame | None, human: pd.DataFrame | None,
               which: str = "headline") -> tuple[list[View], list[dict]]:
    """(views, views that cannot be built with the reason) of item_scores.parquet and item_human.parquet."""
    views, missing = [], []
    datasets = sorted(set(scores["dataset"])) if scores is not None and len(scores) else []
    have_human = set(human["dataset"]) if human is not None and len(human) else set()
    for ds in datasets:
        if ds not in have_human:
            missing.append({"view": ds, "scope": "", "measure": "",
                            "status": f"not built: item_scores.parquet holds {ds} judges but item_human.parquet has "
                                      f"no {ds} human scores (import them: python -m dhp import-judgments {ds})"})
            continue
        if ds == "hanna":
            views += hanna_views(scores, human, which)
        elif ds == "frank":
            views += frank_views(scores, human, which)
        else:
            missing.append({"view": ds, "scope": "", "measure": "",
                            "status": f"not built: no view is defined for dataset {ds!r} of item_scores.parquet"})
    return views, missing
