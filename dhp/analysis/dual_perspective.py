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
