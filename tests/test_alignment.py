"""Classic alignment statistics against scipy on hand-made tables (issue 13 groundwork)."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from dhp.analysis.alignment import alignment_table, summary_level, system_level
from dhp.errors import DHPError


def table(copies: int = 1):
    rows = []
    human = {"d1": [1, 2, 3, 4], "d2": [2, 4, 1, 3], "d3": [2, 2, 2, 2]}  # d3: humans give one level
    judge = {"d1": [1, 3, 2, 4], "d2": [1, 4, 2, 3], "d3": [1, 2, 3, 4]}
    for c in range(copies):  # copies of the three documents under new ids (enough documents for an interval)
        for d in human:
            for k, sysname in enumerate(["A", "B", "C", "D"]):
                rows.append({"doc_id": d if c == 0 else f"{d}_{c}", "system": sysname, "aspect": "coherence",
                             "human": float(human[d][k]), "judge_score": float(judge[d][k])})
    return pd.DataFrame(rows)


def test_summary_level_averages_per_document_correlations_and_skips_constant_documents():
    t = table()
    value, n = summary_level(t, "spearman")
    expected = np.mean([sps.spearmanr([1, 2, 3, 4], [1, 3, 2, 4])[0], sps.spearmanr([2, 4, 1, 3], [1, 4, 2, 3])[0]])
    assert n == 2 and value == pytest.approx(expected)  # d3 has no human variance: left out, not 0
    tau, _ = summary_level(t, "kendall")
    assert tau == pytest.approx(np.mean([sps.kendalltau([1, 2, 3, 4], [1, 3, 2, 4])[0],
                                         sps.kendalltau([2, 4, 1, 3], [1, 4, 2, 3])[0]]))


def test_system_level_correlates_system_means():
    t = table()
    m = t.groupby("system")[["human", "judge_score"]].mean()
    value, n = system_level(t, "pearson")
    assert n == 4 and np.ptp(m["human"]) > 0
    assert value == pytest.approx(sps.pearsonr(m["human"], m["judge_score"])[0])


def test_alignment_table_schema_and_intervals_contain_the_estimate():
    out = alignment_table(table(copies=2), n_boot=200, seed=1)
    assert list(out.columns) == ["view", "aspect", "statistic", "value", "ci_lo", "ci_hi", "n"]
    assert len(out) == 8  # summary 2, system 3, dataset 3 statistics
    fin = out.dropna(subset=["ci_lo", "ci_hi"])
    assert (fin["ci_lo"] <= fin["ci_hi"]).all()
    s = out[(out["view"] == "summary") & (out["statistic"] == "spearman")].iloc[0]
    assert s["ci_lo"] <= s["value"] <= s["ci_hi"]
    with pytest.raises(DHPError, match="judge"):
        alignment_table(table().drop(columns="judge_score"))
    # 3 documents (fewer than MIN_RESAMPLE_UNITS): a bootstrap has a handful of distinct resamples, no interval
    few = alignment_table(table(), n_boot=200, seed=1)
    assert few["value"].notna().any() and few[["ci_lo", "ci_hi"]].isna().all().all()


def test_nan_judge_scores_are_left_out():
    t = table()
    t.loc[0, "judge_score"] = math.nan
    value, n = summary_level(t[np.isfinite(t["judge_score"])], "spearman")
    out = alignment_table(t, n_boot=0)
    assert out[(out["view"] == "summary") & (out["statistic"] == "spearman")]["value"].iloc[0] == pytest.approx(value)


def test_segment_level_tau_b_and_pairwise_accuracy_with_ties():
    from dhp.analysis.alignment import segment_level, segment_table

    df = pd.DataFrame({"seg_id": [1, 1, 1, 2, 2, 2], "system": list("ABCABC"),
                       "mqm": [0.0, -1.0, -1.0, -5.0, 0.0, -2.0], "judge_score": [5.0, 4.0, 4.0, 2.0, 3.0, 3.0]})
    tau, n = segment_level(df, variant="tau_b")
    assert n == 6 and tau == pytest.approx(sps.kendalltau(df["mqm"], df["judge_score"])[0])
    # seg 1: (A,B) same order, (A,C) same, (B,C) both tie -> 3/3; seg 2: (A,B) same, (A,C) same,
    # (B,C) humans prefer B, judge ties -> wrong -> 2/3; total 5/6
    acc, pairs = segment_level(df, variant="acc_eq")
    assert pairs == 6 and acc == pytest.approx(5 / 6)
    t = segment_table(df, n_boot=50)
    assert list(t["statistic"]) == ["acc_eq_calibrated", "tau_b", "acc_eq"] and (t["view"] == "segment").all()


def test_wmt22_loaders_align_outputs_scores_and_segments():
    from dhp.datasets import wmt22_human as w

    m = w.load_mqm_zh_en(systems=["Online-A", "HuaweiTSC"])
    assert set(m["system"]) == {"Online-A", "HuaweiTSC"} and m["seg_id"].between(1, 1875).all()
    assert (m["mqm"] <= 0).all() and m["target"].str.len().gt(0).mean() > 0.99
    assert not m.duplicated(["seg_id", "system"]).any()
    d = w.load_da("zh-en")
    assert d["seg_id"].between(1, 1875).all() and not d["system"].str.contains(r"\.\d+$").any()
    with pytest.raises(DHPError, match="pair"):
        w.load_da("fr-en")


def test_one_document_or_segment_gives_an_estimate_without_an_interval():
    one = table()[lambda t: t["doc_id"] == "d1"]
    out = alignment_table(one, n_boot=50, seed=0)
    assert out["value"].notna().all()
    assert out["ci_lo"].isna().all() and out["ci_hi"].isna().all()  # not a zero-width "certain" interval
    four = alignment_table(table(copies=2)[lambda t: ~t["doc_id"].str.startswith("d3")], n_boot=50, seed=0)
    assert four["ci_lo"].isna().all()  # 4 documents: still below MIN_RESAMPLE_UNITS
    six = alignment_table(table(copies=3)[lambda t: ~t["doc_id"].str.startswith("d3")], n_boot=50, seed=0)
    assert six["ci_lo"].notna().any()
    from dhp.analysis.alignment import segment_table

    seg = pd.DataFrame({"seg_id": [1, 1, 1], "system": ["A", "B", "C"], "mqm": [0.0, -1.0, -5.0], "judge_score": [3.0, 2.0, 1.0]})
    s = segment_table(seg, n_boot=20)
    assert s["ci_lo"].isna().all() and s["value"].notna().any()


def _alignment_table_on_built_resamples(df, n_boot, seed):
    """The definition alignment_table computes without building its resamples: each resample built (the drawn
    documents' rows, each draw renamed "<doc>#<i>") and every view computed on it."""
    from dhp.analysis.alignment import COLUMNS, _check, dataset_level
    from dhp.stats import paired

    df = _check(df)
    rng, rows = np.random.default_rng(seed), []
    for aspect, g in df.groupby("aspect", sort=True):
        docs = g["doc_id"].unique()
        by_doc = {d: x for d, x in g.groupby("doc_id")}
        samples = [pd.concat([by_doc[d].assign(doc_id=f"{d}#{i}") for i, d in enumerate(rng.choice(docs, len(docs)))])
                   for _ in range(n_boot)]
        for view, fn, stats in (("summary", summary_level, ("spearman", "kendall")),
                                ("system", system_level, ("pearson", "spearman", "kendall")),
                                ("dataset", dataset_level, ("pearson", "spearman", "kendall"))):
            for stat in stats:
                value, n = fn(g, stat)
                lo, hi = paired.percentile_interval(np.array([fn(s, stat)[0] for s in samples]), len(docs), 0.95)
                rows.append({"view": view, "aspect": aspect, "statistic": stat, "value": value, "ci_lo": lo,
                             "ci_hi": hi, "n": n})
    return pd.DataFrame(rows, columns=COLUMNS)


@pytest.mark.parametrize("int_ids", [False, True])
def test_alignment_table_equals_its_views_on_built_resamples_bit_for_bit(int_ids):
    """Ratings with ties, a document whose humans give one level, missing judge scores, 12 documents whose names sort
    differently once renamed ("d10#0" < "d2#1"), two aspects: every value and interval bound identical."""
    rng = np.random.default_rng(7)
    rows = [{"doc_id": (d if int_ids else f"d{d}"), "system": s, "aspect": a,
             "human": float(rng.integers(1, 4)) if d != 3 else 2.0, "judge_score": float(rng.integers(1, 6))}
            for a in ("coherence", "fluency") for d in range(12) for s in "ABCDE"]
    df = pd.DataFrame(rows)
    df.loc[rng.random(len(df)) < 0.1, "judge_score"] = np.nan
    got = alignment_table(df, n_boot=60, seed=3)
    want = _alignment_table_on_built_resamples(df, n_boot=60, seed=3)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert got["ci_lo"].notna().sum() >= 10  # intervals were drawn (the comparison is not of NaNs only)
