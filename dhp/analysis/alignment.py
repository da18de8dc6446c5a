"""Classic human alignment (the G-Eval paper's layout): correlations between judge scores and human
ratings, per aspect, at summary level (per document over its systems, then averaged), at system level
(per system means over documents) and at dataset level (all rated targets of the aspect pooled, the
level of Hu et al. 2025's Table 1), with bootstrap intervals over documents.

Segment level (MT meta-evaluation, WMT22 zh-en against MQM and DA): Kendall τ_b, pairwise accuracy with exact ties
and with calibrated ties (acc*_eq, Deutsch et al. 2023; the headline, as in WMT since 2023), intervals from
resampling segments (dhp.stats).

Input of the summary/system/dataset views: one row per (doc_id, system, aspect) with ``human`` (the experts' mean
rating) and ``judge_score``. Output: the ``alignment.csv`` schema — judge, mode, view, aspect, statistic, value,
ci_lo, ci_hi, n, epsilon. :func:`alignment_tables` computes it for every judge in the collected tables.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dhp.analysis.leaderboard import RECORDED_MODE
from dhp.errors import DHPError
from dhp.stats import paired
from dhp.stats import segment as seg
from dhp.lazy import lazy_module

sps = lazy_module("scipy.stats")  # imported when first used (dhp.lazy)

__all__ = ["document_correlations", "summary_level", "system_level", "dataset_level", "alignment_table", "segment_level", "segment_table",
           "segment_rows", "other_reference_rows", "variant_label", "alignment_tables", "ALIGNMENT_COLUMNS"]

STATISTICS = {"spearman": "spearmanr", "kendall": "kendalltau", "pearson": "pearsonr"}  # scipy.stats functions
COLUMNS = ["view", "aspect", "statistic", "value", "ci_lo", "ci_hi", "n"]


def _check(df: pd.DataFrame) -> pd.DataFrame:
    missing = {"doc_id", "system", "aspect", "human", "judge_score"} - set(df.columns)
    if missing:
        raise DHPError(f"The alignment input lacks columns {sorted(missing)}.",
                       "pass one row per (doc_id, system, aspect) with the human rating and the judge_score.")
    return df[np.isfinite(df["human"].astype(float)) & np.isfinite(df["judge_score"].astype(float))]


def _corr(stat: str, x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan  # undefined for constant input: left out of the average, never a 0
    return float(getattr(sps, STATISTICS[stat])(x, y)[0])


def document_correlations(df: pd.DataFrame, stat: str = "spearman") -> pd.Series:
    """The correlation across each document's systems, by doc_id (NaN where the human ratings or the judge's
    scores of a document are constant: undefined, not 0)."""
    return pd.Series({doc: _corr(stat, g["human"].to_numpy(float), g["judge_score"].to_numpy(float))
                      for doc, g in df.groupby("doc_id")}, dtype=float)


def summary_level(df: pd.DataFrame, stat: str = "spearman") -> tuple[float, int]:
    """Mean over documents of the correlation across that document's systems; (value, documents used)."""
    vals = document_correlations(df, stat).dropna()
    return (float(vals.mean()) if len(vals) else math.nan), len(vals)


def system_level(df: pd.DataFrame, stat: str = "kendall") -> tuple[float, int]:
    """Correlation of per-system means (over documents); (value, systems)."""
    m = df.groupby("system")[["human", "judge_score"]].mean()
    return _corr(stat, m["human"].to_numpy(float), m["judge_score"].to_numpy(float)), len(m)


def dataset_level(df: pd.DataFrame, stat: str = "pearson") -> tuple[float, int]:
    """Correlation over all targets pooled, every (document, system) row one unit — Hu et al. 2025 App.
    A.3: rho({h_ij}, {x_ij}) over i = 1..n documents, j = 1..m systems; (value, targets). NaN below two
    targets or with constant input."""
    return _corr(stat, df["human"].to_numpy(float), df["judge_score"].to_numpy(float)), len(df)


def alignment_table(df: pd.DataFrame, n_boot: int = 1000, seed: int = 0, ci: float = 0.95) -> pd.DataFrame:
    """Summary-level Spearman and Kendall, system-level and dataset-level Pearson/Spearman/Kendall per
    aspect, each with a percentile bootstrap interval over documents (documents resampled with
    replacement, all their systems kept; no interval from fewer than
    dhp.stats.resample.MIN_RESAMPLE_UNITS documents). ``n`` is documents (summary level), systems (system
    level) or targets (dataset level). Kendall is scipy's tau-b (the experts' mean ratings tie often)."""
    df = _check(df)
    rng = np.random.default_rng(seed)
    rows = []
    for aspect, g in df.groupby("aspect", sort=True):
        docs = g["doc_id"].unique()
        draws = [rng.choice(docs, len(docs)) for _ in range(n_boot)]
        # A resample is the drawn documents' rows, each draw a document of its own ("<doc>#<i>"). What each view
        # reads of it is taken without building it: a drawn document's correlation is its original's, averaged in
        # the order groupby sorts the drawn names; the system and dataset views read the rows in draw order (their
        # doc_id unused). The same numbers, bit for bit, as the views on the built resample (tests/test_alignment.py).
        rows_of = g.groupby("doc_id").indices  # doc -> its rows' positions, in g's order
        pooled = [g.iloc[np.concatenate([rows_of[d] for d in draw])] for draw in draws]
        orders = [sorted(range(len(draw)), key=[f"{d}#{i}" for i, d in enumerate(draw)].__getitem__) for draw in draws]

        def summary_boot(draw, order, per_doc):
            vals = pd.Series([per_doc[draw[i]] for i in order], dtype=float).dropna()
            return float(vals.mean()) if len(vals) else math.nan

        for view, fn, stats in (("summary", summary_level, ("spearman", "kendall")),
                                ("system", system_level, ("pearson", "spearman", "kendall")),
                                ("dataset", dataset_level, ("pearson", "spearman", "kendall"))):
            for stat in stats:
                value, n = fn(g, stat)
                if view == "summary":
                    per_doc = document_correlations(g, stat).to_dict()
                    boots = np.array([summary_boot(d, o, per_doc) for d, o in zip(draws, orders)])
                else:
                    boots = np.array([fn(s, stat)[0] for s in pooled])
                lo, hi = paired.percentile_interval(boots, len(docs), ci)
                rows.append({"view": view, "aspect": aspect, "statistic": stat, "value": value,
                             "ci_lo": lo, "ci_hi": hi, "n": n})
    return pd.DataFrame(rows, columns=COLUMNS)


# acc*_eq first: the segment view's headline (ties calibrated, Deutsch et al. 2023, as WMT since 2023)
SEGMENT_VARIANTS = ("acc_eq_calibrated", "tau_b", "acc_eq")
SEGMENT_COLUMNS = COLUMNS + ["epsilon"]


def _segment_arrays(df: pd.DataFrame, human: str, judge: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    missing = {"seg_id", human, judge} - set(df.columns)
    if missing:
        raise DHPError(f"The segment-level input lacks columns {sorted(missing)}.",
                       "pass one row per (seg_id, system) with the human and judge scores.")
    return df[human].to_numpy(float), df[judge].to_numpy(float), df["seg_id"].to_numpy()


def segment_level(df: pd.DataFrame, human: str = "mqm", judge: str = "judge_score", variant: str = "tau_b"
                  ) -> tuple[float, int]:
    """Segment-level agreement of judge and human scores (MT meta-evaluation), (value, pairs or rows).

    ``tau_b``: Kendall's tau-b over all (segment, system) rows ("no grouping", as in WMT22's
    segment-level tau), ties handled by tau-b. ``acc_eq``: pairwise accuracy with ties (Deutsch et al.
    2023), grouped by segment: over every pair of systems on the same segment, the share where the judge
    orders the pair as the humans do, a tie counting as agreement only when both tie (exact ties), averaged
    over segments. ``acc_eq_calibrated``: acc*_eq, the same with the judge's ties calibrated — differences
    up to a threshold ε count as ties, ε chosen to maximise the accuracy (segment_table reports ε; see
    dhp.stats.segment). ``df`` needs seg_id, system and the two score columns; NaN rows are left out.
    """
    if variant not in SEGMENT_VARIANTS:
        raise DHPError(f"Unknown segment-level variant {variant!r}.", f"use one of {list(SEGMENT_VARIANTS)}.")
    h, j, g = _segment_arrays(df, human, judge)
    ok = np.isfinite(h) & np.isfinite(j)
    if variant == "tau_b":
        return seg.kendall_tau_b(h, j), int(ok.sum())
    n_pairs = len(seg.SegmentPairs.from_groups(g[ok]))
    if variant == "acc_eq":
        return seg.pairwise_accuracy(h, j, g), n_pairs
    return seg.tie_calibrated_accuracy(h, j, g)[0], n_pairs


def segment_table(df: pd.DataFrame, human: str = "mqm", judge: str = "judge_score", n_boot: int = 1000, seed: int = 0,
                  ci: float = 0.95, aspect: str = "") -> pd.DataFrame:
    """alignment.csv rows (view "segment") for every variant, acc*_eq first, with percentile intervals from
    resampling segments (all systems of a drawn segment kept, the same draws for every variant; acc*_eq
    re-optimises ε on each resample; no interval from fewer than dhp.stats.resample.MIN_RESAMPLE_UNITS
    segments). ``epsilon``: acc*_eq's tie threshold in the judge's units (NaN for the other variants). Returns
    SEGMENT_COLUMNS."""
    h, j, g = _segment_arrays(df, human, judge)
    ok = np.isfinite(h) & np.isfinite(j)
    n_segs = len(np.unique(g[ok]))
    counts = paired.item_bootstrap_draws(len(np.unique(g)), n_boot, seed) if n_boot and len(g) else None
    rows = []
    for variant in SEGMENT_VARIANTS:
        value, n = segment_level(df, human, judge, variant)
        eps = seg.tie_calibrated_accuracy(h, j, g)[1] if variant == "acc_eq_calibrated" else math.nan
        lo = hi = math.nan
        if counts is not None:
            boots = paired.segment_bootstrap(h, j[None, :], g, variant, counts=counts)[0]
            lo, hi = paired.percentile_interval(boots, n_segs, ci)
        rows.append({"view": "segment", "aspect": aspect or human, "statistic": variant, "value": value,
                     "ci_lo": lo, "ci_hi": hi, "n": n, "epsilon": eps})
    return pd.DataFrame(rows, columns=SEGMENT_COLUMNS)


ALIGNMENT_COLUMNS = ["judge", "mode", *SEGMENT_COLUMNS]
#: The human scores of the segment view: column of segment_human.parquet -> the aspect name in alignment.csv.
SEGMENT_HUMAN = {"mqm": "mqm", "da_z": "da"}


def variant_label(judge: str, reference: str) -> str:
    """A recorded metric's name with its reference variant, as mt-metrics-eval names its files
    (``GEMBA-GPT4-DA-refA``, ``GEMBA-GPT4-DA-src``): one judge per metric × variant."""
    return f"{judge}-{reference}" if reference else judge


def _labelled(scores: pd.DataFrame) -> pd.DataFrame:
    """Recorded rows named by metric and reference variant (live judges keep their identity: they read the
    source), so two variants of one metric are two judges, never one judge with two rows per output."""
    rec = (scores["mode"] == RECORDED_MODE).to_numpy()
    if not rec.any():
        return scores
    ref = scores["reference"].fillna("").astype(str)
    judge = scores["judge"].astype(str).where(
        ~rec, [variant_label(j, r) for j, r in zip(scores["judge"].tolist(), ref.tolist())])  # lists: fast
    return scores.assign(judge=judge)


def segment_rows(scores: pd.DataFrame, human: pd.DataFrame, main_reference: str = "refA") -> pd.DataFrame:
    """The judges' segment scores joined to the human scores, as the segment view compares them: the variants of a
    metric that use the main reference or the source (``reference`` in {main_reference, "src", ""}: live judges read
    the source), and every scored system but the main reference itself (a metric cannot be judged on the text it
    takes as its reference) — mt-metrics-eval's primary setting (main reference refA; refB kept as a system).
    Recorded judges are named with their variant (:func:`variant_label`: ``BLEURT-20-refA``, ``COMETKiwi-src``).
    ``scores``: segment_scores.parquet (judge, mode, lp, reference, system, seg_id, score); ``human``:
    segment_human.parquet (lp, system, seg_id, mqm, da_z). Returns the scores with mqm and da_z beside them."""
    missing = {"judge", "mode", "lp", "reference", "system", "seg_id", "score"} - set(scores.columns)
    if missing:
        raise DHPError(f"The segment scores lack columns {sorted(missing)}.",
                       "pass segment_scores.parquet (live judges, or imported with import-judgments mtme).")
    keep = scores["reference"].fillna("").isin([main_reference, "src", ""]) & (scores["system"] != main_reference)
    return _labelled(scores[keep]).merge(human, on=["lp", "system", "seg_id"], how="inner")


def other_reference_rows(scores: pd.DataFrame, human: pd.DataFrame, main_reference: str = "refA") -> dict:
    """{reference: rows} for each single reference variant other than the main one and the source (WMT22 zh-en:
    refB): the recorded variants using it, on every scored system but that reference — mt-metrics-eval's setting
    with that reference as the main one (its other variants, and the source-only ones, are in the main view).
    Multi-reference variants ("refA,refB") are in no view."""
    ref = scores["reference"].fillna("").astype(str)
    out = {}
    for r in sorted(set(ref) - {main_reference, "src", ""}):
        if "," in r:
            continue
        keep = (ref == r) & (scores["system"] != r)
        out[r] = _labelled(scores[keep]).merge(human, on=["lp", "system", "seg_id"], how="inner")
    return out


def alignment_tables(targets: pd.DataFrame | None, segments: pd.DataFrame | None, human: pd.DataFrame | None,
                     n_boot: int = 1000, seed: int = 0, main_reference: str = "refA") -> pd.DataFrame:
    """alignment.csv for every judge in the collected tables: the summary, system and dataset views of
    ``targets`` (summary_targets.parquet: judge, mode, doc_id, system, aspect, human, judge_score) and the segment
    view of ``segments`` joined to ``human`` (:func:`segment_rows`; one block per judge × language pair × human
    score: aspect "mqm_<lp>" / "da_<lp>"). Columns ALIGNMENT_COLUMNS; epsilon is acc*_eq's threshold."""
    parts = []
    if targets is not None and len(targets):
        for (judge, mode), g in targets.groupby(["judge", "mode"], sort=True):
            parts.append(alignment_table(g, n_boot=n_boot, seed=seed).assign(judge=judge, mode=mode))
    if segments is not None and human is not None and len(segments):
        rows = segment_rows(segments, human, main_reference)
        for (judge, mode, lp), g in rows.groupby(["judge", "mode", "lp"], sort=True):
            for column, name in SEGMENT_HUMAN.items():
                sub = g[np.isfinite(g[column].astype(float))] if column in g.columns else g.iloc[:0]
                if len(sub):
                    parts.append(segment_table(sub.rename(columns={"score": "judge_score"}), human=column,
                                               judge="judge_score", n_boot=n_boot, seed=seed,
                                               aspect=f"{name}_{lp.replace('-', '_')}").assign(judge=judge, mode=mode))
    if not parts:
        return pd.DataFrame(columns=ALIGNMENT_COLUMNS)
    return pd.concat(parts, ignore_index=True).reindex(columns=ALIGNMENT_COLUMNS)
