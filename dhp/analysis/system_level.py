"""System-level pairwise accuracy of MT judges against MQM (Kocmi et al. 2021, "To Ship or Not to Ship"; GEMBA's
headline statistic), by mt-metrics-eval's definition (``stats.Agreement``, used by
``data.CompareMetricsWithGlobalAccuracy``): over every pair of systems, the share whose judge difference has the
sign of the human difference (``np.sign(Δgold) == np.sign(Δmetric)``: a human tie is right only when the judge ties
too). Pure: tables in, views out.

System scores: a judge's mean over the segments it scored (GEMBA's ``scores.py``: a segment without a valid answer,
``None``, is left out of its system's mean — the rule behind GEMBA's ``.sys.score`` files, which the importer checks);
the human score: the mean MQM of the system's rated segments. Systems: every system with MQM scores except the human
translations (systems named ``ref*``) — GEMBA's ``evaluate.py`` runs mt-metrics-eval with ``include_human=False``
(WMT22 zh-en has no outlier systems). For a WMT22 metric the mean of its segment scores is not the system score its
authors submitted (those files are not in the data root): the view's notes say so.

Units of the paired bootstrap: segments (a resampled segment brings every system's output of it, each system's mean
is recomputed; mt-metrics-eval resamples segments too).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from dhp.analysis.leaderboard import View

__all__ = ["pairwise_accuracy", "system_accuracy_view", "HUMAN_SYSTEM"]

#: mt-metrics-eval's human translations of WMT22 are named refA, refB, ...
HUMAN_SYSTEM = re.compile(r"ref[A-Za-z0-9]*")
#: Fewest segments a system-level row is read as a ranking on (status "too few units ..." below it)
MIN_SEGMENTS_RANKED = 100


def pairwise_accuracy(human: np.ndarray, metric: np.ndarray) -> tuple[float, int]:
    """(share of system pairs ordered as the humans order them, number of pairs), mt-metrics-eval's Agreement;
    ``human`` and ``metric``: system scores, NaN where a system has none (its pairs are left out)."""
    h, m = np.asarray(human, float), np.asarray(metric, float)
    ok = np.isfinite(h) & np.isfinite(m)
    h, m = h[ok], m[ok]
    i, j = np.triu_indices(len(h), 1)
    if not len(i):
        return float("nan"), 0
    return float(np.mean(np.sign(h[i] - h[j]) == np.sign(m[i] - m[j]))), int(len(i))


def _means(values: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per draw (rows of ``w``: counts per unit) the mean of every system (rows of ``values``: systems × units, NaN
    where not scored) over its scored units."""
    ok = np.isfinite(values)
    sums = w @ np.where(ok, values, 0.0).T
    counts = w @ ok.T.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts  # k × systems


def _agreement(h: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Row-wise pairwise accuracy of k × systems means."""
    i, j = np.triu_indices(h.shape[1], 1)
    same = np.sign(h[:, i] - h[:, j]) == np.sign(m[:, i] - m[:, j])
    valid = np.isfinite(h[:, i] - h[:, j]) & np.isfinite(m[:, i] - m[:, j])
    with np.errstate(invalid="ignore"):
        return np.where(valid.any(axis=1), (same & valid).sum(axis=1) / valid.sum(axis=1), np.nan)


def _matrices(rows: pd.DataFrame, units: list) -> tuple[np.ndarray, np.ndarray]:
    score = rows.pivot(index="system", columns="unit", values="score").reindex(columns=units)
    human = rows.pivot(index="system", columns="unit", values="human")
    human = human.reindex(index=score.index, columns=units)
    return human.to_numpy(float), score.to_numpy(float)


def _statistic(rows: pd.DataFrame) -> float:
    h = rows.groupby("system")["human"].mean()
    m = rows.groupby("system")["score"].mean().reindex(h.index)  # NaN scores skipped: GEMBA's scores.py
    return pairwise_accuracy(h.to_numpy(), m.to_numpy())[0]


def _draws(rows: pd.DataFrame, units: list, idx: np.ndarray) -> np.ndarray:
    h, m = _matrices(rows, units)
    w = np.zeros((idx.shape[0], len(units)))
    np.add.at(w, (np.repeat(np.arange(idx.shape[0]), idx.shape[1]), idx.ravel()), 1.0)
    return _agreement(_means(h, w), _means(m, w))


def system_accuracy_view(rows: pd.DataFrame, scope: str, protocols: dict | None = None) -> View | None:
    """The system-level view of segment rows (judge, mode, unit = segment, system, score, human; the segment view's
    rows): human translations dropped; None when fewer than two systems are left. ``protocols``: {(judge, mode):
    protocol} of the judges that name one (the segment view's), carried to the view's rows as there."""
    data = rows[~rows["system"].astype(str).str.fullmatch(HUMAN_SYSTEM.pattern)]
    data = data[np.isfinite(data["human"].astype(float))]
    systems = sorted(data["system"].unique())
    if len(systems) < 2:
        return None
    n_pairs = len(systems) * (len(systems) - 1) // 2
    return View("system", f"{scope} ({len(systems)} systems, {n_pairs} pairs)", "sys_pairwise_accuracy",
                "statistic", data[["judge", "mode", "unit", "system", "score", "human"]].reset_index(drop=True),
                statistic=_statistic, draws=_draws,
                notes={"follows": "mt-metrics-eval stats.Agreement (CompareMetricsWithGlobalAccuracy, "
                                  "include_human=False), as GEMBA's evaluate.py",
                       "units": "segments", "n_systems": len(systems), "n_pairs": n_pairs,
                       "protocols": {k: v for k, v in (protocols or {}).items()
                                     if k in set(data[["judge", "mode"]].drop_duplicates().itertuples(index=False,
                                                                                                    name=None))},
                       # system means of fewer segments order systems by noise (WMT22 zh-en: 1,875 segments)
                       "min_units_ranked": MIN_SEGMENTS_RANKED,
                       "system_score": "mean of the judge's scored segments (GEMBA scores.py); for WMT22 metrics "
                                       "not their submitted system scores"})
