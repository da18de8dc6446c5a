"""Discernment statistics: hand-computed cases, scipy cross-checks, properties, table behaviour."""

import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats as sps
from hypothesis import given, settings
from hypothesis import strategies as st
import stats_reference as ref
from test_stats_fixtures import synth_scores

import dhp.analysis.discernment as dm
from dhp.analysis.discernment import (
    _units,
    discernment,
    group_seed,
    level_balanced_mean,
    level_weights,
    null_calibration,
    summarize,
)
from dhp.errors import DHPError
from dhp.stats.combine import combine_p, discernment_score
from dhp.stats.wilcoxon import SCIPY_ASYMPTOTIC, resolve_method, wilcoxon_greater, wilcoxon_greater_many


# ---------------------------------------------------------------- Wilcoxon, by hand
def test_all_positive_distinct_differences_give_one_over_two_to_the_n():
    # d = 1..5, all positive: only the all-plus sign pattern reaches T+ = 15 -> p = 1/2^5.
    r = wilcoxon_greater([2, 4, 6, 8, 10], [1, 2, 3, 4, 5])
    assert r.p == pytest.approx(1 / 32)
    assert (r.n_pairs, r.n_nonzero, r.n_dropped_nan, r.method_used) == (5, 5, 0, "exact")


def test_mixed_signs_hand_enumeration():
    # d = [3, -1, 2, 4]: ranks 3,1,2,4, T+ = 9. Subsets of {1,2,3,4} with sum >= 9: {2,3,4}, {1,2,3,4} -> 2/16.
    r = wilcoxon_greater([3, 0, 2, 4], [0, 1, 0, 0])
    assert r.p == pytest.approx(2 / 16)


def test_exact_with_ties_and_zeros_falls_back_and_is_recorded():
    # d = [1, 1, 2, 0]; zeros dropped (wilcox), ranks 1.5, 1.5, 3, all positive -> p = 1/8 by enumeration.
    r = wilcoxon_greater([2, 2, 3, 1], [1, 1, 1, 1], method="exact")
    assert r.method_used == "permutation"
    assert "exact_fallback" in r.flags
    assert r.p == pytest.approx(1 / 8)


def test_large_sample_with_ties_uses_normal_approximation():
    d = np.array([1.0] * 30 + [2.0] * 30 + [-1.0] * 5)
    used, flags = resolve_method(d, "exact", "wilcox")
    assert used == "asymptotic" and flags == ["exact_fallback"]
    r = wilcoxon_greater(d, np.zeros_like(d), method="exact")
    ref = sps.wilcoxon(d, alternative="greater", method="asymptotic").pvalue
    assert r.p == pytest.approx(ref)


def test_all_zero_differences_give_p_one_with_flag():
    r = wilcoxon_greater([3, 4, 5], [3, 4, 5])
    assert r.p == 1.0 and r.flags == ["all_zero"] and r.n_nonzero == 0 and r.n_pairs == 3


def test_nan_pairs_are_dropped_and_counted():
    r = wilcoxon_greater([5, np.nan, 3, 4, 6], [1, 1, np.nan, 2, 2])
    assert (r.n_pairs, r.n_dropped_nan) == (3, 2)
    assert r.p == pytest.approx(1 / 8)  # d = [4, 2, 4]: all positive, ties -> permutation 1/8


def test_no_pairs_give_nan():
    r = wilcoxon_greater([np.nan], [1.0])
    assert math.isnan(r.p) and r.flags == ["no_pairs"]


# ---------------------------------------------------------------- scipy cross-checks
@pytest.mark.parametrize("n", [6, 12, 20, 60])
@pytest.mark.parametrize("zero_method", ["wilcox", "pratt", "zsplit"])
def test_matches_scipy_default_auto(n, zero_method):
    rng = np.random.default_rng(n)
    x = rng.integers(1, 6, n).astype(float)
    y = rng.integers(1, 5, n).astype(float)
    ours = wilcoxon_greater(x, y, zero_method=zero_method).p
    ref = sps.wilcoxon(x, y, zero_method=zero_method, alternative="greater").pvalue
    assert ours == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize("zero_method", ["wilcox", "pratt", "zsplit"])
@pytest.mark.parametrize("d", [[1, 1, 2, 0, -1, 3], [2, -2, 2, 1, 0, 0, 4], [1, 2, 3, -1, -2, 5, 5]])
def test_permutation_enumeration_equals_scipy_permutation_method(d, zero_method):
    d = np.array(d, dtype=float)
    r = wilcoxon_greater(d, np.zeros_like(d), zero_method=zero_method)
    assert r.method_used == "permutation"
    ref = sps.wilcoxon(d, zero_method=zero_method, alternative="greater", method=sps.PermutationMethod()).pvalue
    assert r.p == pytest.approx(ref, rel=1e-12)


diffs = st.lists(st.integers(-4, 4).map(float), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(diffs, min_size=1, max_size=4), zero_method=st.sampled_from(["wilcox", "pratt", "zsplit"]),
       method=st.sampled_from(["auto", "exact", "asymptotic"]))
def test_rows_of_one_batch_equal_the_scipy_path_test_by_test(rows, zero_method, method):
    """The bootstrap's tests are rows of one batch, of different lengths (ok masks the padding): each p is
    the one the former per-test path (scipy's exact null, scipy-checked enumeration and normal tail) gives."""
    width = max(map(len, rows))
    d = np.zeros((len(rows), width))
    ok = np.zeros(d.shape, bool)
    for i, r in enumerate(rows):
        d[i, : len(r)], ok[i, : len(r)] = r, True
    d[~ok] = 7.0  # padding that would change every rank if it were read
    got = wilcoxon_greater_many(d, ok, zero_method, method)
    for i, r in enumerate(rows):
        slow = ref.wilcoxon_greater(np.array(r), np.zeros(len(r)), zero_method=zero_method, method=method)
        assert got.p[i] == slow.p and got.method_used[i] == slow.method_used and list(got.flags[i]) == slow.flags


# ---------------------------------------------------------------- combination and D
def test_harmonic_mean_by_hand():
    assert combine_p([0.01, 0.04]) == pytest.approx(1 / (100 + 25))  # paper: 0.008
    assert combine_p([0.01, 0.04], combine="wilson") == pytest.approx(2 / 125)  # M times larger
    assert combine_p([0.01, 0.04], [0.5, 0.5]) == pytest.approx(1 / (50 + 12.5))
    assert combine_p([0.01, 0.04], [0.2, 0.8]) == pytest.approx(1 / (20 + 20))


def test_nan_metric_is_left_out_and_weights_renormalised():
    assert combine_p([0.02, np.nan]) == pytest.approx(0.02)
    assert combine_p([0.02, np.nan, 0.5], [0.5, 0.25, 0.25]) == pytest.approx(1 / (0.5 / 0.75 / 0.02 + 0.25 / 0.75 / 0.5))
    assert math.isnan(combine_p([np.nan, np.nan]))


def test_discernment_score_by_hand():
    assert discernment_score(0.05) == pytest.approx(1.0)
    assert discernment_score(0.0025) == pytest.approx(2.0)
    assert discernment_score(1.0) == 0.0
    assert np.isfinite(discernment_score(0.0)) and discernment_score(0.0) > 200


probs = st.floats(min_value=1e-300, max_value=1.0, allow_nan=False)


@given(a=probs, b=probs)
def test_d_is_decreasing_in_p(a, b):
    lo, hi = min(a, b), max(a, b)
    assert discernment_score(lo) >= discernment_score(hi)


@given(p=probs, combine=st.sampled_from(["paper", "wilson"]))
def test_one_metric_combines_to_its_own_p(p, combine):
    assert combine_p([p], combine=combine) == pytest.approx(p, rel=1e-12)


@given(ps=st.lists(probs, min_size=2, max_size=5), data=st.data())
def test_all_weight_on_one_metric_returns_its_p(ps, data):
    k = data.draw(st.integers(0, len(ps) - 1))
    w = np.zeros(len(ps))
    w[k] = 1.0
    assert combine_p(ps, w, "paper") == pytest.approx(ps[k], rel=1e-12)


@given(ps=st.lists(probs, min_size=1, max_size=5))
def test_wilson_unweighted_is_m_times_paper(ps):
    assert combine_p(ps, combine="wilson") == pytest.approx(min(1.0, len(ps) * combine_p(ps)), rel=1e-9)


# ---------------------------------------------------------------- level-balanced average
def test_level_balanced_average_by_hand():
    d = [3, 1, 2, 0.5, 1.5, 1.0]
    lv = ["character", "character", "word", "sentence", "sentence", "sentence"]
    # (mean(3,1) + 2 + mean(0.5,1.5,1.0)) / 3 = (2 + 2 + 1) / 3
    assert level_balanced_mean(d, lv) == pytest.approx(5 / 3)
    assert level_weights(lv).sum() == pytest.approx(1.0)


def test_task_without_sentence_level_averages_levels_present():
    assert level_balanced_mean([3, 1, 2, 4], ["character", "character", "word", "word"]) == pytest.approx(2.5)


# ---------------------------------------------------------------- the tables
def test_discernment_table_rows_and_control_excluded_from_summary():
    s = synth_scores(n=20, seed=1)
    d = discernment(s).table
    assert "original" not in set(d["perturbation"])
    assert len(d) == 6  # 5 perturbations + the negative control
    ctrl = d[d["perturbation"] == "control"].iloc[0]
    assert ctrl["role"] == "negative_control"
    # The control's scores carry symmetric noise, so its D is a measured quantity, not a constant.
    assert "all_zero" not in ctrl["flags"] and ctrl["n_nonzero_min"] > 0
    real = d[d["perturbation"] != "control"].set_index(["perturbation", "severity"])["D"]
    expected = (
        (real[("char_typo", "minor")] + real[("char_typo", "major")] + real[("char_deletion", "minor")]) / 3
        + real[("fictional_entities", "minor")]
        + real[("sentence_reorder", "minor")]
    ) / 3
    sm = summarize(d).iloc[0]
    assert sm["D_avg"] == pytest.approx(expected)
    assert sm["D_min"] == pytest.approx(real.min())
    assert sm["control_D"] == pytest.approx(ctrl["D"]) and sm["control_D_EW"] == pytest.approx(ctrl["D_EW"])
    assert sm["n_perturbations"] == 5
    assert math.isnan(sm["null_fpr_paper"])  # no null table given


def test_a_judge_that_reacts_to_formatting_fails_the_control():
    """The control can fail: a judge that scores the reformatted copy lower gets control_D > 1."""
    s = synth_scores(n=20, seed=3)
    ctrl = s["perturbation"] == "control"
    orig = s[s["perturbation"] == "original"].set_index(["item_id", "metric"])["score"]
    s.loc[ctrl, "score"] = [orig[(i, m)] - 1 for i, m in zip(s.loc[ctrl, "item_id"], s.loc[ctrl, "metric"])]
    assert summarize(discernment(s)).iloc[0]["control_D"] > 1


def _slow_null(scores, n_null, seed):
    """The sign-flip null the slow way: flip, rebuild the table, run discernment (scipy per test)."""
    from dhp.analysis.discernment import GROUP, group_seed

    key = tuple(scores[c].iloc[0] for c in GROUP)
    items = sorted(scores["item_id"].unique())
    keeps = np.random.default_rng(group_seed(seed, key)).integers(0, 2, size=(n_null, len(items))).astype(bool)
    orig = scores[scores["perturbation"] == "original"].set_index(["item_id", "metric"])["score"]
    out = {c: [] for c in ("paper", "wilson")}
    for b in range(n_null):
        flip = dict(zip(items, keeps[b]))
        t = scores.copy()
        pert = t["perturbation"] != "original"
        o = np.array([orig[(i, m)] for i, m in zip(t.loc[pert, "item_id"], t.loc[pert, "metric"])])
        keep = np.array([flip[i] for i in t.loc[pert, "item_id"]])
        t.loc[pert, "score"] = np.where(keep, t.loc[pert, "score"], 2 * o - t.loc[pert, "score"])
        for c in out:
            d = discernment(t, combine=c).table
            out[c].append(d.loc[d["perturbation"] != "control", "D"].to_numpy())
    return {c: np.array(v) for c, v in out.items()}


@pytest.mark.parametrize("n,seed", [(9, 0), (30, 1), (60, 2)])  # permutation, exact/permutation, normal
def test_null_calibration_matches_the_slow_path(n, seed):
    s = synth_scores(n=n, seed=seed)
    fast = null_calibration(s, n_null=40, seed=seed).iloc[0]
    slow = _slow_null(s, 40, seed)
    for c in ("paper", "wilson"):
        assert fast[f"null_fpr_{c}"] == pytest.approx(float((slow[c] > 1).mean()))
    assert fast["n_null"] == 40


def test_null_calibration_shows_the_paper_rule_is_anticonservative():
    """Four metrics and no effect at all: the paper's 1/sum(1/p) calls far more than 5% discerning."""
    rng = np.random.default_rng(5)
    s = synth_scores(n=40, seed=5)
    real = ~s["perturbation"].isin(["original"])
    s.loc[real, "score"] = rng.integers(1, 6, int(real.sum())).astype(float)
    s.loc[~real, "score"] = rng.integers(1, 6, int((~real).sum())).astype(float)
    row = null_calibration(s, n_null=300).iloc[0]
    assert row["null_fpr_paper"] > 0.15 > row["null_fpr_wilson"]
    sm = summarize(discernment(s), null=null_calibration(s, n_null=300)).iloc[0]
    assert sm["null_fpr_paper"] == row["null_fpr_paper"] and sm["n_null"] == 300


def test_resampling_seeds_do_not_depend_on_other_judges_in_the_table():
    """Issue 9: the bootstrap seed was the group's position, so adding a judge changed others' CIs."""
    a = synth_scores(n=15, seed=4, judge="j2")
    other = synth_scores(n=15, seed=6, judge="j1")  # sorts before j2
    alone = discernment(a, n_boot=50, seed=0).table
    both = discernment(pd.concat([other, a], ignore_index=True), n_boot=50, seed=0).table
    both = both[both["judge"] == "j2"].reset_index(drop=True)
    pd.testing.assert_series_equal(alone["D_lo"], both["D_lo"])
    pd.testing.assert_series_equal(alone["D_hi"], both["D_hi"])
    na = null_calibration(a, n_null=50)
    nb = null_calibration(pd.concat([other, a], ignore_index=True), n_null=50)
    assert na.iloc[0]["null_fpr_paper"] == nb[nb["judge"] == "j2"].iloc[0]["null_fpr_paper"]


def test_expert_weights_follow_the_rows_task_not_the_dataset_name():
    """Issue 9: a bring-your-own dataset is named after its file; its weights are its task's."""
    s = synth_scores(n=12, seed=7)
    mine = s.assign(dataset="my_items.jsonl")
    d_mine, d_ref = discernment(mine).table, discernment(s).table
    assert np.allclose(d_mine["D_EW"], d_ref["D_EW"])
    with pytest.raises(DHPError, match="no task"):
        discernment(mine.assign(task=None))


def test_paper_and_per_metric_p_values_agree_with_scipy_in_table():
    s = synth_scores(n=15, seed=2)
    d = discernment(s).table.set_index(["perturbation", "severity"])
    row = d.loc[("char_typo", "minor")]
    sub = s[s["perturbation"].isin(["original", "char_typo"]) & s["severity"].isin(["none", "minor"])]
    ps = []
    for m in ("coherence", "consistency", "fluency", "relevance"):
        w = sub[sub["metric"] == m].pivot(index="item_id", columns="perturbation", values="score")
        ps.append(sps.wilcoxon(w["original"], w["char_typo"], alternative="greater").pvalue)
    assert row["p"] == pytest.approx(1 / sum(1 / p for p in ps))
    assert row["D"] == pytest.approx(math.log(row["p"]) / math.log(0.05))
    ew = np.array([0.1, 0.0, 0.9, 0.0])  # project default for summarization char_typo
    assert row["p_EW"] == pytest.approx(1 / sum(w / p for w, p in zip(ew, ps)))


def test_likelihood_mode_is_single_metric_so_d_equals_d_ew():
    d = discernment(synth_scores(n=12, mode="likelihood")).table
    assert (d["n_metrics"] == 1).all()
    assert np.allclose(d["D"], d["D_EW"])


def test_wilson_combine_changes_only_unweighted_p():
    s = synth_scores(n=15, seed=3)
    a = discernment(s, combine="paper").table
    b = discernment(s, combine="wilson").table
    assert np.allclose(b["p_EW"], a["p_EW"])
    real = a["perturbation"] != "control"
    assert np.allclose(b.loc[real, "p"], np.minimum(1, 4 * a.loc[real, "p"]))


def test_nan_scores_are_counted_in_table():
    s = synth_scores(n=12, seed=4)
    hit = (s["perturbation"] == "char_typo") & (s["severity"] == "minor") & (s["item_id"].isin(["i0", "i1"]))
    s.loc[hit & (s["metric"] == "fluency"), "score"] = np.nan
    row = discernment(s).table.set_index(["perturbation", "severity"]).loc[("char_typo", "minor")]
    assert row["n_dropped_nan"] == 2 and row["n_pairs_min"] == 10 and "nan_dropped" in row["flags"]


def test_bootstrap_is_seeded_and_gives_intervals():
    s = synth_scores(n=15, seed=5)
    a = discernment(s, n_boot=50, seed=7)
    b = discernment(s, n_boot=50, seed=7)
    pd.testing.assert_frame_equal(a.table, b.table)
    pd.testing.assert_frame_equal(a.bootstrap, b.bootstrap)
    real = a.table[a.table["perturbation"] != "control"]
    assert (real["D_lo"] <= real["D_hi"]).all()
    assert real["share_D_gt_1"].between(0, 1).all()
    sm = summarize(a).iloc[0]
    assert sm["D_avg_lo"] <= sm["D_avg_hi"] and 0 <= sm["share_D_avg_gt_1"] <= 1
    assert discernment(s, n_boot=0).table["D_lo"].isna().all()


def test_groups_are_kept_apart():
    s = pd.concat([synth_scores(n=10, judge="a"), synth_scores(n=10, judge="b", seed=9)])
    sm = summarize(discernment(s))
    assert list(sm["judge"]) == ["a", "b"]


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda s: s.drop(columns=["level"]), "lacks columns"),
        (lambda s: pd.concat([s, s.iloc[:1]]), "duplicate"),
        (lambda s: s[s["perturbation"] != "original"], "No 'original'"),
    ],
)
def test_bad_scores_tables_raise_clear_errors(mutate, match):
    with pytest.raises(DHPError, match=match):
        discernment(mutate(synth_scores(n=5)))


def test_bad_options_raise():
    s = synth_scores(n=5)
    with pytest.raises(DHPError, match="combine"):
        discernment(s, combine="fisher")
    with pytest.raises(DHPError, match="zero_method"):
        discernment(s, zero_method="drop")


def test_a_judge_without_any_usable_score_gives_nan_rows_not_an_error():
    """Found by the demo: a small judge that never writes a parsable score on a dataset (all NaN)."""
    s = synth_scores(n=10, seed=8)
    s["score"] = np.nan
    d = discernment(s, n_boot=20)
    assert d.table["D"].isna().all()
    sm = summarize(d, null=null_calibration(s, n_null=20)).iloc[0]
    for col in ("D_avg", "D_min", "D_avg_lo", "null_fpr_paper", "null_fpr_avg_paper", "control_D"):
        assert math.isnan(sm[col]), col


@pytest.mark.parametrize("zero_method", ["wilcox", "pratt", "zsplit"])
@pytest.mark.parametrize("correction", [False, True])
def test_normal_approximation_matches_scipy_with_ties_zeros_and_correction(zero_method, correction):
    rng = np.random.default_rng(7)
    for n in (30, 60, 120):
        o = rng.integers(1, 6, n).astype(float)
        q = np.clip(o - rng.integers(-1, 3, n), 1, 5)  # ties and zeros on purpose
        r = wilcoxon_greater(o, q, zero_method, "asymptotic", correction)
        ref = sps.wilcoxon(o - q, zero_method=zero_method, correction=correction, alternative="greater",
                           method=SCIPY_ASYMPTOTIC).pvalue
        assert r.method_used == "asymptotic" and r.p == pytest.approx(ref, rel=1e-9, abs=1e-15)


# ---------------------------------------------------------------- no interval from too few items
def _two_levels(n, seed=0):
    """Two perturbations on `n` items, one metric, every item damaged (so D is finite)."""
    return synth_scores(n=n, seed=seed, mode="likelihood", perturbations=[("char_typo", "minor", "character", 2.0),
                                                                          ("fictional_entities", "minor", "word", 2.0)])


def test_two_items_gave_a_zero_width_interval_and_now_give_none():
    """The former bootstrap (stats_reference: one resample at a time) gives D_lo = D_hi from 2 items: every
    resample of two positive differences has the same p. The interval is NaN now, and says why."""
    s = _two_levels(2)
    s.loc[s["perturbation"] != "original", "score"] -= 3  # both items clearly damaged
    g = s.assign(**{c: s[c].astype(str) for c in ("item_id", "level")})
    u = _units(g, ["i0", "i1"], None)[0]
    idx = np.random.default_rng(group_seed(0, ("summeval", "j1", "likelihood"))).integers(0, 2, size=(50, 2))
    old_d, _ = ref.boot_d(u, idx, "wilcox", "auto", False, "paper")
    assert np.nanpercentile(old_d, 2.5) == np.nanpercentile(old_d, 97.5)  # zero width: what the rule removes
    res = discernment(s, n_boot=50)
    d = res.table
    assert d[["D_lo", "D_hi", "D_EW_lo", "D_EW_hi", "share_D_gt_1", "share_D_EW_gt_1"]].isna().all().all()
    assert d["flags"].str.contains("few_items_for_interval:2").all() and d["D"].notna().all()
    assert len(res.bootstrap) == 2 * 50  # the draws are kept
    sm = summarize(res).iloc[0]
    assert math.isnan(sm["D_avg_lo"]) and math.isnan(sm["D_min_hi"]) and math.isnan(sm["share_D_avg_gt_1"])
    assert "fewer than 5 items" in sm["interval_note"] and "char_typo/minor" in sm["interval_note"]
    assert sm["D_avg"] == pytest.approx(d["D"].mean())  # the point statistics stay


@pytest.mark.parametrize("n,has_interval", [(4, False), (5, True)])
def test_the_minimum_is_five_items(n, has_interval):
    # a small effect under the noise: D differs between resamples (5 items all damaged give the same exact p on
    # every resample: an interval of no width, NaN since STATS_VERSION 5)
    res = discernment(synth_scores(n=n, seed=n, mode="likelihood",
                                   perturbations=[("char_typo", "minor", "character", 0.4),
                                                  ("fictional_entities", "minor", "word", 0.4)]), n_boot=40)
    d = res.table
    assert d["D_lo"].notna().all() == has_interval and d["D_lo"].isna().all() != has_interval
    assert d["flags"].str.contains("few_items_for_interval").all() != has_interval
    assert (summarize(res).iloc[0]["interval_note"] == "") == has_interval


def test_items_without_a_usable_pair_do_not_count():
    """Six items, but two have no usable score for this perturbation: 4 resampling units, no interval;
    the other perturbation keeps its interval, the summary's are withheld (D_min could be the thin one)."""
    s = _two_levels(6, seed=2)
    # a damage that varies from item to item (all damaged alike give one exact p on every resample: no width)
    s.loc[s["perturbation"] == "fictional_entities", "score"] += np.tile([0.0, 3.0], len(s) // 2)[
        : int((s["perturbation"] == "fictional_entities").sum())]
    thin = (s["perturbation"] == "char_typo") & s["item_id"].isin(["i0", "i1"])
    s.loc[thin, "score"] = np.nan
    res = discernment(s, n_boot=40)
    d = res.table.set_index("perturbation")
    assert math.isnan(d.loc["char_typo", "D_lo"]) and "few_items_for_interval:4" in d.loc["char_typo", "flags"]
    assert "nan_dropped" in d.loc["char_typo", "flags"]  # the former flags are kept before it
    assert np.isfinite(d.loc["fictional_entities", "D_lo"])
    sm = summarize(d.reset_index(), bootstrap=res.bootstrap).iloc[0]
    assert math.isnan(sm["D_min_lo"]) and "1 of 2 perturbations" in sm["interval_note"]


def test_without_bootstrap_nothing_is_flagged():
    d = discernment(_two_levels(2), n_boot=0).table
    assert not d["flags"].str.contains("few_items").any() and (summarize(d)["interval_note"] == "").all()


def test_bootstrap_tested_in_chunks_gives_the_same_draws(monkeypatch):
    """The bootstrap tests its resamples a bounded number of cells at a time: chunking changes no draw."""
    s = synth_scores(n=15, seed=6)
    whole = discernment(s, n_boot=30, seed=1)
    monkeypatch.setattr(dm, "_BOOT_CELLS", 100)  # a few resamples per batch
    chunked = discernment(s, n_boot=30, seed=1)
    pd.testing.assert_frame_equal(whole.bootstrap, chunked.bootstrap, check_exact=True)
    pd.testing.assert_frame_equal(whole.table, chunked.table, check_exact=True)


def test_a_judge_whose_scores_never_move_gets_d_zero_and_no_interval():
    # every score equal (control:first on DHP): p = 1, D = 0 on the data and on every bootstrap draw; an interval of
    # no width would claim a precision the resamples cannot show: NaN, for each perturbation and for D_avg/D_min
    s = synth_scores(n=20, seed=3, mode="likelihood").assign(score=3.0)  # one metric: p = 1 exactly
    d = discernment(s, n_boot=200).table
    assert (d["D"] == 0).all() and d["flags"].str.contains("all_zero").all()
    assert d[["D_lo", "D_hi", "D_EW_lo", "D_EW_hi"]].isna().all().all()
    sm = summarize(d).iloc[0]
    assert sm["D_avg"] == 0 and math.isnan(sm["D_avg_lo"]) and math.isnan(sm["D_min_hi"])
    moving = discernment(synth_scores(n=20, seed=3, mode="likelihood"), n_boot=200).table
    assert (moving["D_lo"] < moving["D_hi"]).all()  # the control: real scores keep their intervals
