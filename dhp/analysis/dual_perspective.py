"""Dual-perspective meta-evaluation (Hu et al. 2025): a global view — ordinal agreement with human ratings on
targets where annotators agree, linear weighted kappa (Cohen 1968) — and a local view — adjacent pairwise accuracy
along chains of targets of decreasing quality (each step one more error, counted against the reference;
dhp.perturb.chains builds them).

Pure: tables in, tables out. Every function handles tables of several judges: rows are grouped by ``judge`` and
``mode`` when the table has them (the method dhp.methods.dual_perspective collects them, one row per judge's reply).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dhp.errors import DHPError
from dhp.lazy import lazy_module

_sklearn_metrics = lazy_module("sklearn.metrics")  # imported when a kappa is first computed (dhp.lazy)


def cohen_kappa_score(*args, **kwargs) -> float:
    """``sklearn.metrics.cohen_kappa_score`` (sklearn takes ~0.3 s to import: only where a kappa is computed)."""
    return _sklearn_metrics.cohen_kappa_score(*args, **kwargs)


__all__ = ["to_rating", "RATING_RULES", "default_rating_rule", "global_kappa", "linear_kappa", "adjacent_accuracy",
           "local_pairs", "pair_matrix", "comparison_accuracy", "table1", "rank_judges", "dual_tables",
           "TABLE1_CORRELATIONS"]

LABELS = [1, 2, 3, 4, 5]
JUDGE_KEYS = ("judge", "mode")


def _keys(table: pd.DataFrame, *more: str) -> list[str]:
    """The judge columns the table has, then ``more``."""
    return [c for c in JUDGE_KEYS if c in table.columns] + list(more)


def _require(table: pd.DataFrame, columns, what: str, fix: str) -> None:
    missing = sorted(set(columns) - set(table.columns))
    if missing:
        raise DHPError(f"The {what} table lacks columns {missing}.", fix)


def to_rating(score) -> np.ndarray:
    """Ordinal 1-5 rating from a judge score by the "expected" rating rule: the expected (logprobs) or
    mean (sample) score rounded half up, so 3.5 is 4 (numpy's round-half-to-even would make 2.5 and 3.5
    disagree in direction). NaN stays NaN."""
    s = np.asarray(score, dtype=float)
    return np.where(np.isfinite(s), np.clip(np.floor(s + 0.5), 1, 5), np.nan)


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


def global_kappa(targets: pd.DataFrame) -> pd.DataFrame:
    """Linear weighted kappa per judge × aspect (× rating rule) between human and judge ratings.

    ``targets`` (global_targets.parquet): aspect, human_rating, judge_rating (NaN judge ratings — no usable
    reply — are left out and not counted in n), optionally judge, mode and rating_rule. Returns [judge, mode,]
    aspect, [rating_rule,] kappa, n. Uses ``sklearn.metrics.cohen_kappa_score(weights="linear", labels=[1..5])``;
    kappa is NaN when fewer than two targets remain or the ratings do not vary at all."""
    _require(targets, {"aspect", "human_rating", "judge_rating"}, "global-targets",
             "pass a table with aspect, human_rating and judge_rating.")
    keys = _keys(targets, "aspect") + (["rating_rule"] if "rating_rule" in targets.columns else [])
    rows = []
    for key, g in targets.groupby(keys, sort=True):
        k, n = linear_kappa(g["human_rating"].to_numpy(), g["judge_rating"].to_numpy())
        rows.append({**dict(zip(keys, key)), "kappa": k, "n": n})
    return pd.DataFrame(rows, columns=[*keys, "kappa", "n"])


def linear_kappa(human, judge) -> tuple[float, int]:
    """(κ, n): global_kappa's linear weighted κ of one judge's ratings against the human ones, the targets with no
    judge rating (NaN) left out of it and of n; NaN below two targets or when no rating varies."""
    ok = np.isfinite(np.asarray(judge, dtype=float))
    h, j = np.asarray(human)[ok].astype(int), np.asarray(judge, dtype=float)[ok].astype(int)
    k = math.nan
    if len(h) >= 2 and len(set(h) | set(j)) > 1:
        inside = bool(np.isin(h, LABELS).all() and np.isin(j, LABELS).all())
        k = _linear_kappa_1_to_5(h, j) if inside else float(cohen_kappa_score(h, j, weights="linear", labels=LABELS))
    return k, int(len(h))


_LINEAR_WEIGHTS = np.abs(np.zeros((5, 5)) + np.arange(5) - (np.zeros((5, 5)) + np.arange(5)).T)


def _linear_kappa_1_to_5(h: np.ndarray, j: np.ndarray) -> float:
    """sklearn's ``cohen_kappa_score(h, j, weights="linear", labels=[1..5])`` for ratings all in 1..5, with its
    arithmetic step for step (the same float, bit for bit: tests/test_dual_perspective.py) but without its input
    checks, ~100x cheaper: the leaderboard's κ views recompute it on every resample (py-spy: 57% of the demo's
    leaderboard process)."""
    confusion = np.bincount((h - 1) * 5 + (j - 1), minlength=25).reshape(5, 5).astype(np.float64)
    sum0, sum1 = np.sum(confusion, axis=0), np.sum(confusion, axis=1)
    total = np.sum(sum0)
    if total == 0:
        return math.nan  # sklearn's replace_undefined_by (never here: h holds at least two ratings)
    expected = np.outer(sum0, sum1) / total
    denominator = np.sum(_LINEAR_WEIGHTS * expected)
    if denominator == 0:
        return math.nan  # one label in common: undefined, sklearn's replace_undefined_by
    return float(1 - np.sum(_LINEAR_WEIGHTS * confusion) / denominator)


def local_pairs(step_scores: pd.DataFrame) -> pd.DataFrame:
    """Adjacent pairs from one score per (judge, mode, source_id, aspect, step): columns [judge, mode,] source_id,
    aspect, step, score_step, score_next, where step + 1 carries one more error."""
    keys = _keys(step_scores, "source_id", "aspect")
    s = step_scores.sort_values([*keys, "step"])
    nxt = s.groupby(keys)["score"].shift(-1)
    nstep = s.groupby(keys)["step"].shift(-1)
    out = s.assign(score_next=nxt, _n=nstep)
    out = out[out["_n"] == out["step"] + 1]
    return out.rename(columns={"score": "score_step"})[[*keys, "step", "score_step", "score_next"]].reset_index(
        drop=True)


def adjacent_accuracy(pairs: pd.DataFrame) -> pd.DataFrame:
    """Share of adjacent pairs the judge orders correctly, per judge × aspect:
    Acc = (1 / (n (k - 1))) * sum_i sum_j 1(x_ij > x_i,j+1), where step j+1 carries one more error than step j.
    ``pairs`` (:func:`local_pairs`): [judge, mode,] aspect, score_step, score_next. Ties count as wrong (the judge did
    not see the extra error); pairs with a NaN score are left out and not counted. Returns [judge, mode,] aspect,
    accuracy, n_pairs."""
    _require(pairs, {"aspect", "score_step", "score_next"}, "local-pairs",
             "pass a table with source_id, aspect, step, score_step and score_next.")
    ok = np.isfinite(pairs["score_step"].astype(float)) & np.isfinite(pairs["score_next"].astype(float))
    keys = _keys(pairs, "aspect")
    rows = [{**dict(zip(keys, key)), "accuracy": float((g["score_step"] > g["score_next"]).mean()),
             "n_pairs": int(len(g))} for key, g in pairs[ok].groupby(keys, sort=True)]
    return pd.DataFrame(rows, columns=[*keys, "accuracy", "n_pairs"])


def pair_matrix(step_scores: pd.DataFrame) -> pd.DataFrame:
    """Accuracy for every pair of error counts (i < j) per judge: the share of sources whose target with i errors
    scores above the one with j (the paper's Figure 5). Columns: [judge, mode,] aspect, errors_i, errors_j,
    accuracy, n."""
    keys = _keys(step_scores, "aspect")
    rows = []
    for key, g in step_scores.groupby([*keys, "source_id"], sort=True):
        s = dict(zip(g["step"], g["score"]))
        for i in s:
            for j in s:
                if i < j and np.isfinite(s[i]) and np.isfinite(s[j]):
                    rows.append((*key[:-1], i, j, float(s[i] > s[j])))
    d = pd.DataFrame(rows, columns=[*keys, "errors_i", "errors_j", "hit"])
    out = d.groupby([*keys, "errors_i", "errors_j"])["hit"].agg(["mean", "size"]).reset_index()
    return out.rename(columns={"mean": "accuracy", "size": "n"})


def comparison_accuracy(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Per judge × aspect, from adjacent chain targets shown side by side in both orders: accuracy (both orders
    prefer the target with fewer errors), position_consistency (both orders give the same verdict about the pair),
    parsed (share of replies with a verdict), n_pairs. ``comparisons``: [judge, mode,] source_id, aspect, step,
    order ("12", "21"), preferred ("better", "worse", "tie" or None)."""
    keys = _keys(comparisons, "aspect")
    rows = []
    for key, g in comparisons.groupby(keys, sort=True):
        w = g.pivot_table(index=["source_id", "step"], columns="order", values="preferred", aggfunc="first")
        both = w.reindex(columns=["12", "21"])
        correct = (both["12"] == "better") & (both["21"] == "better")
        consistent = both["12"].notna() & (both["12"] == both["21"])
        rows.append({**dict(zip(keys, key)), "accuracy": float(correct.mean()) if len(both) else math.nan,
                     "position_consistency": float(consistent.mean()) if len(both) else math.nan,
                     "parsed": float(g["preferred"].notna().mean()), "n_pairs": int(len(both))})
    return pd.DataFrame(rows, columns=[*keys, "accuracy", "position_consistency", "parsed", "n_pairs"])


#: table1's traditional columns: <level>_<statistic>, the paper's (dataset level: r, rho) first.
TABLE1_CORRELATIONS = [f"{level}_{stat}" for level in ("dataset", "system")
                       for stat in ("pearson", "spearman", "kendall")]


def table1(global_kappa_table: pd.DataFrame, local_accuracy_table: pd.DataFrame,
           alignment: pd.DataFrame | None = None) -> pd.DataFrame:
    """The paper's Table 1 per judge × aspect: kappa (global), accuracy (local) and the traditional correlations
    labelled by level — dataset_pearson / dataset_spearman / dataset_kendall (all targets pooled: the level of the
    paper's r and rho, Hu et al. 2025 App. A.3) beside system_pearson / system_spearman / system_kendall
    (per-system means), from ``alignment`` (alignment.csv of the human_alignment method; None or a judge without
    those rows: NaN). With several rating rules the kappa of the judge's default rule is used. Columns: judge,
    mode, aspect, kappa, accuracy, *TABLE1_CORRELATIONS. Rank with :func:`rank_judges`."""
    kappa = global_kappa_table
    if "rating_rule" in kappa.columns:  # one kappa per judge and aspect: the judge's default rule
        kappa = kappa[kappa["rating_rule"] == kappa["mode"].map(default_rating_rule)]
    keys = ["judge", "mode", "aspect"]
    for t, name in ((kappa, "global_kappa"), (local_accuracy_table, "local_accuracy")):
        _require(t, keys, name, "pass the method's tables (judge and mode columns included).")
    out = kappa.set_index(keys)[["kappa"]].join(local_accuracy_table.set_index(keys)[["accuracy"]], how="outer")
    if alignment is not None and len(alignment):
        a = alignment[alignment["view"].isin(["dataset", "system"])]
        wide = a.assign(column=a["view"] + "_" + a["statistic"]).pivot_table(
            index=keys, columns="column", values="value", dropna=False)
        out = out.join(wide.reindex(columns=TABLE1_CORRELATIONS), how="left")
    out = out.reindex(columns=["kappa", "accuracy", *TABLE1_CORRELATIONS]).reset_index()
    return out[[*keys, "kappa", "accuracy", *TABLE1_CORRELATIONS]]


def rank_judges(table: pd.DataFrame) -> pd.DataFrame:
    """Add rank_<column> columns to concatenated :func:`table1` rows: per aspect, 1 = the judge with the
    highest value (ties share the better rank; NaN is not ranked). The paper's point is that the views
    can rank judges differently."""
    out = table.copy()
    for col in ("kappa", "accuracy", *TABLE1_CORRELATIONS):
        out[f"rank_{col}"] = out.groupby("aspect")[col].rank(ascending=False, method="min")
    return out


def dual_tables(global_targets: pd.DataFrame | None, chain_scores: pd.DataFrame | None,
                comparisons: pd.DataFrame | None = None, alignment: pd.DataFrame | None = None
                ) -> dict[str, pd.DataFrame]:
    """The dual-perspective results of every judge in the tables: global_kappa.csv, local_accuracy.csv,
    local_pair_matrix.csv, local_comparison.csv (when side-by-side comparisons were collected) and table1.csv
    (κ and Acc beside the alignment table's dataset- and system-level correlations, when it is given)."""
    out: dict[str, pd.DataFrame] = {}
    kappa = global_kappa(global_targets) if global_targets is not None else None
    local = adjacent_accuracy(local_pairs(chain_scores)) if chain_scores is not None else None
    if kappa is not None:
        out["global_kappa.csv"] = kappa
    if local is not None:
        out["local_accuracy.csv"] = local
        out["local_pair_matrix.csv"] = pair_matrix(chain_scores)
    if comparisons is not None:
        out["local_comparison.csv"] = comparison_accuracy(comparisons)
    if kappa is not None and local is not None:
        out["table1.csv"] = rank_judges(table1(kappa, local, alignment))
    return out
