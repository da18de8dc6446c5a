"""dhp.stats: segment statistics (tau_b, acc_eq, acc*_eq) against brute force and scipy; the paired
permutation test against a slow reference on the same draws; McNemar against scipy's binomial test; Holm
and the WMT cluster rule on hand examples; item bootstraps against explicit resampled data."""

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats as sps

from dhp.errors import DHPError
from dhp.stats.clusters import assign_ranks, significance_ranks
from dhp.stats.paired import (holm, item_bootstrap_draws, mcnemar_exact, paired_bootstrap, percentile_interval,
                              segment_bootstrap)
from dhp.stats.permutation import EarlyStop, paired_permutation_test, permutation_draws, permutation_table
from dhp.stats.segment import (SegmentPairs, judge_scores, kendall_tau_b, pairwise_accuracy,
                               tie_calibrated_accuracy)


def synth(seed, n_items=25, max_sys=6, noise=1.0, nan_share=0.05):
    """Items with varying numbers of systems (some with one), integer human scores (many ties) and a metric
    rounded to 0.5 (ties of its own), a few NaNs."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, max_sys + 1, n_items)
    groups = np.repeat(np.arange(n_items), sizes)
    human = rng.integers(-3, 1, len(groups)).astype(float)
    metric = np.round((human + rng.normal(0, noise, len(groups))) * 2) / 2
    metric[rng.random(len(groups)) < nan_share] = np.nan
    return human, metric, groups


# ---- brute force, straight from the definitions ----

def brute_acc(h, m, g, eps):
    """Mean over items with >= 2 rows of the share of correct pairs; |Δm| <= eps is a metric tie."""
    ok = np.isfinite(h) & np.isfinite(m)
    h, m, g = h[ok], m[ok], g[ok]
    shares = []
    for item in np.unique(g):
        rows = np.flatnonzero(g == item)
        pairs = list(itertools.combinations(rows, 2))
        if not pairs:
            continue
        right = 0
        for i, j in pairs:
            sh = np.sign(h[i] - h[j])
            sm = 0.0 if abs(m[i] - m[j]) <= eps else np.sign(m[i] - m[j])
            right += sh == sm
        shares.append(right / len(pairs))
    return float(np.mean(shares)) if shares else math.nan


def brute_acc_star(h, m, g):
    """Every candidate threshold (0 and every |Δm| of a pair), the smallest reaching the maximum."""
    ok = np.isfinite(h) & np.isfinite(m)
    cands = {0.0}
    for item in np.unique(g[ok]):
        v = m[ok][g[ok] == item]
        cands |= {abs(a - b) for a, b in itertools.combinations(v, 2)}
    vals = {e: brute_acc(h, m, g, e) for e in sorted(cands)}
    best = max(vals.values())
    return best, min(e for e, v in vals.items() if v >= best - 1e-12)


def brute_tau_b(x, y):
    n0 = c = d = tx = ty = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        n0 += 1
        s = np.sign(x[i] - x[j]) * np.sign(y[i] - y[j])
        c += s > 0
        d += s < 0
        tx += x[i] == x[j]
        ty += y[i] == y[j]
    return (c - d) / math.sqrt((n0 - tx) * (n0 - ty))


# ---- segment statistics ----

def test_segment_pairs_are_every_pair_within_each_item():
    g = np.array(["b", "a", "b", "c", "a", "b"])
    p = SegmentPairs.from_groups(g)
    got = {tuple(sorted((int(i), int(j)))) for i, j in zip(p.i, p.j)}
    assert got == {(1, 4), (0, 2), (0, 5), (2, 5)}  # c has one row: no pair
    assert p.n_groups == 2 and not p.uniform
    assert (g[p.i] == g[p.j]).all()
    # mean over items: item a's one pair weighs as much as item b's three together
    assert p.weight[g[p.i] == "a"].sum() == pytest.approx(0.5) and p.weight.sum() == pytest.approx(1.0)


def test_pairwise_accuracy_hand_example():
    # item 1: (A,B) same order, (A,C) same, (B,C) both tie -> 3/3; item 2: (B,C) humans prefer B,
    # metric ties -> wrong: 2/3; mean 5/6. With eps = 1 every |Δm| = 1 pair becomes a tie: only item 1's
    # (B,C), tied by both, stays right -> (1/3 + 0/3) / 2.
    h = np.array([0.0, -1.0, -1.0, -5.0, 0.0, -2.0])
    m = np.array([5.0, 4.0, 4.0, 2.0, 3.0, 3.0])
    g = np.array([1, 1, 1, 2, 2, 2])
    assert pairwise_accuracy(h, m, g) == pytest.approx(5 / 6)
    assert pairwise_accuracy(h, m, g, epsilon=1.0) == pytest.approx(1 / 6)
    assert tie_calibrated_accuracy(h, m, g) == (pytest.approx(5 / 6), 0.0)


@pytest.mark.parametrize("seed", range(12))
def test_acc_eq_matches_brute_force_on_random_data_with_ties(seed):
    h, m, g = synth(seed)
    for eps in (0.0, 0.5, 1.25):
        assert pairwise_accuracy(h, m, g, eps) == pytest.approx(brute_acc(h, m, g, eps), abs=1e-12)
    value, eps = tie_calibrated_accuracy(h, m, g)
    bv, be = brute_acc_star(h, m, g)
    assert value == pytest.approx(bv, abs=1e-12)
    assert eps == be


@pytest.mark.parametrize("seed", range(6))
def test_acc_star_with_equal_items_and_continuous_metric(seed):
    rng = np.random.default_rng(100 + seed)
    g = np.repeat(np.arange(15), 4)  # uniform: exact integer path
    h = rng.integers(-2, 1, len(g)).astype(float)
    m = h + rng.normal(0, 0.8, len(g))
    assert SegmentPairs.from_groups(g).uniform
    value, eps = tie_calibrated_accuracy(h, m, g)
    assert (value, eps) == pytest.approx(brute_acc_star(h, m, g), abs=1e-12)
    assert value >= pairwise_accuracy(h, m, g) - 1e-12


def test_calibration_helps_a_metric_that_never_ties_when_humans_often_do():
    rng = np.random.default_rng(3)
    g = np.repeat(np.arange(40), 5)
    h = np.where(rng.random(len(g)) < 0.7, 0.0, -rng.integers(1, 5, len(g)).astype(float))  # 70% "no error"
    m = h + rng.normal(0, 0.05, len(g))  # right order, never an exact tie
    value, eps = tie_calibrated_accuracy(h, m, g)
    assert eps > 0 and value > pairwise_accuracy(h, m, g) + 0.2


def test_no_pairs_gives_nan_not_zero():
    h, m, g = np.array([1.0, 2.0]), np.array([1.0, 3.0]), np.array([1, 2])
    assert math.isnan(pairwise_accuracy(h, m, g))
    v, e = tie_calibrated_accuracy(h, m, g)
    assert math.isnan(v) and math.isnan(e)
    with pytest.raises(DHPError, match="epsilon"):
        pairwise_accuracy(h, m, g, epsilon=-1)
    with pytest.raises(DHPError, match="length"):
        pairwise_accuracy(h, m[:1], g)


def test_tau_b_matches_scipy_and_the_definition():
    h, m, _ = synth(7, n_items=12)
    ok = np.isfinite(m)
    assert kendall_tau_b(h, m) == pytest.approx(sps.kendalltau(h[ok], m[ok])[0], abs=1e-12)
    assert kendall_tau_b(h, m) == pytest.approx(brute_tau_b(h[ok], m[ok]), abs=1e-12)
    assert math.isnan(kendall_tau_b(h, np.ones_like(h)))  # constant: undefined
    assert math.isnan(kendall_tau_b([1.0], [2.0]))


def test_judge_scores_aligns_judges_on_common_rows():
    rows = []
    for item in (1, 2):
        for sysname, hum in (("s1", 0.0), ("s2", -1.0), ("s3", -2.0)):
            for judge, off in (("J1", 0.0), ("J2", 0.5)):
                rows.append({"seg_id": item, "system": sysname, "judge": judge, "score": hum + off, "human": hum})
    df = pd.DataFrame(rows)
    df.loc[(df["judge"] == "J2") & (df["seg_id"] == 2) & (df["system"] == "s3"), "score"] = np.nan
    js = judge_scores(df)
    assert js.judges == ["J1", "J2"] and js.scores.shape == (2, 5) and js.dropped == 1
    assert list(js.groups) == [1, 1, 1, 2, 2] and np.allclose(js.scores[1] - js.scores[0], 0.5)
    with pytest.raises(DHPError, match="several rows"):
        judge_scores(pd.concat([df, df.iloc[:1]]))
    bad = df.copy()
    bad.loc[0, "human"] = 9.0
    with pytest.raises(DHPError, match="differs between judges"):
        judge_scores(bad)


# ---- permutation test ----

def slow_permutation(h, a, b, g, statistic, draws):
    """Reference PERM-BOTH: explicit hybrids of the z-scored judges, brute-force statistic per draw."""
    ok = np.isfinite(h) & np.isfinite(a) & np.isfinite(b)
    h, g, draws = h[ok], g[ok], draws[:, ok]
    za, zb = sps.zscore(a[ok]), sps.zscore(b[ok])
    stat = {"tau_b": lambda x: sps.kendalltau(h, x)[0], "acc_eq": lambda x: brute_acc(h, x, g, 0.0),
            "acc_eq_calibrated": lambda x: brute_acc_star(h, x, g)[0]}[statistic]
    delta = stat(za) - stat(zb)
    ge = ab = 0
    for w in draws:
        d = stat(np.where(w, za, zb)) - stat(np.where(w, zb, za))
        ge += d >= delta - 1e-12
        ab += abs(d) >= abs(delta) - 1e-12
    k = len(draws)
    return delta, (1 + ge) / (1 + k), (1 + ab) / (1 + k)


@pytest.mark.parametrize("statistic", ["acc_eq_calibrated", "acc_eq", "tau_b"])
def test_permutation_test_equals_slow_reference_on_the_same_draws(statistic):
    h, a, g = synth(11, n_items=10, max_sys=5, noise=0.7)
    b = np.round((h + np.random.default_rng(12).normal(0, 1.5, len(h))) * 2) / 2
    draws = permutation_draws(len(h), 40, seed=5)
    got = paired_permutation_test(h, a, b, g, statistic, draws=draws)
    delta, p1, p2 = slow_permutation(h, a, b, g, statistic, draws)
    assert got["delta"] == pytest.approx(delta, abs=1e-12)
    assert (got["p_a_better"], got["p_two_sided"], got["k"]) == (pytest.approx(p1), pytest.approx(p2), 40)


def test_identical_judges_give_p_one_and_a_clearly_better_judge_a_small_p():
    rng = np.random.default_rng(0)
    g = np.repeat(np.arange(60), 5)
    h = rng.integers(-4, 1, len(g)).astype(float)
    good = h + rng.normal(0, 0.3, len(g))
    noise = rng.normal(0, 1, len(g))
    for statistic in ("acc_eq_calibrated", "tau_b"):
        same = paired_permutation_test(h, good, good.copy(), g, statistic, k=200, seed=1)
        assert same["delta"] == 0 and same["p_two_sided"] == 1.0 and same["p_a_better"] == 1.0
        better = paired_permutation_test(h, good, noise, g, statistic, k=200, seed=1)
        assert better["delta"] > 0.1 and better["p_a_better"] == pytest.approx(1 / 201)
        worse = paired_permutation_test(h, noise, good, g, statistic, k=200, seed=1)
        assert worse["p_a_better"] > 0.99 and worse["p_two_sided"] == pytest.approx(1 / 201)


def test_early_stop_ends_a_settled_test_after_one_block():
    rng = np.random.default_rng(1)
    g = np.repeat(np.arange(40), 4)
    h = rng.integers(-3, 1, len(g)).astype(float)
    res = paired_permutation_test(h, h + rng.normal(0, 0.2, len(g)), rng.normal(0, 1, len(g)), g,
                                  k=500, early_stop=EarlyStop(block_size=50))
    assert res["k"] == 50 and res["p_a_better"] == pytest.approx(1 / 51)


def test_permutation_table_orders_pairs_best_first_and_shares_draws():
    rng = np.random.default_rng(2)
    g = np.repeat(np.arange(30), 4)
    h = rng.integers(-3, 1, len(g)).astype(float)
    scores = np.stack([h + rng.normal(0, s, len(g)) for s in (2.0, 0.3, 1.0)])
    draws = permutation_draws(len(h), 60, seed=9)
    t = permutation_table(h, scores, ["weak", "strong", "mid"], g, "acc_eq_calibrated", draws=draws)
    assert list(zip(t["judge_a"], t["judge_b"])) == [("strong", "mid"), ("strong", "weak"), ("mid", "weak")]
    assert (t["delta"] >= 0).all() and (t["value_a"] - t["value_b"] == t["delta"]).all()
    one = paired_permutation_test(h, scores[2], scores[0], g, draws=draws)
    row = t[(t["judge_a"] == "mid") & (t["judge_b"] == "weak")].iloc[0]
    assert row["p_a_better"] == one["p_a_better"] and row["delta"] == pytest.approx(one["delta"])
    with pytest.raises(DHPError, match="groups"):
        permutation_table(h, scores, ["a", "b", "c"], None, "acc_eq")
    with pytest.raises(DHPError, match="Unknown"):
        permutation_table(h, scores, ["a", "b", "c"], g, "spearman")


# ---- McNemar, Holm, clusters ----

@pytest.mark.parametrize("seed", range(5))
def test_mcnemar_exact_equals_scipy_binomial_test_on_discordant_items(seed):
    rng = np.random.default_rng(seed)
    a = rng.random(80) < 0.7
    b = rng.random(80) < 0.55
    res = mcnemar_exact(a, b)
    n_ab, n_ba = int((a & ~b).sum()), int((~a & b).sum())
    assert (res["n_ab"], res["n_ba"], res["n"]) == (n_ab, n_ba, 80)
    assert res["p_value"] == pytest.approx(sps.binomtest(n_ab, n_ab + n_ba, 0.5).pvalue)


def test_mcnemar_edge_cases():
    assert mcnemar_exact([1, 0, 1], [1, 0, 1])["p_value"] == 1.0  # no discordant item
    # 10 items a right b wrong, none the other way: 2 * 0.5**10
    assert mcnemar_exact([1] * 10, [0] * 10)["p_value"] == pytest.approx(2 * 0.5 ** 10)
    assert mcnemar_exact([1, np.nan, 0], [0, 1, 0])["n"] == 2
    with pytest.raises(DHPError, match="0/1"):
        mcnemar_exact([2, 0], [1, 0])


def test_holm_hand_example():
    # sorted 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 -> max(0.06, 0.04) = 0.06
    got = holm([0.01, 0.04, np.nan, 0.03, 0.005])
    assert np.allclose(got[[0, 1, 3, 4]], [0.03, 0.06, 0.06, 0.02]) and math.isnan(got[2])
    assert holm([0.3, 0.2]).tolist() == pytest.approx([0.4, 0.4])  # 0.2*2; 0.3*1 raised to keep the order
    assert holm([0.6, 0.9]).tolist() == [1.0, 1.0]  # capped at 1
    with pytest.raises(DHPError):
        holm([1.5])


def test_cluster_rule_looks_only_within_the_current_cluster():
    # A > B > C > D. C is beaten by A -> new cluster at C. D: only C (its cluster) counts, not B's p = 0.01.
    p = np.full((4, 4), np.nan)
    p[0, 1], p[0, 2], p[1, 2] = 0.3, 0.01, 0.2
    p[0, 3], p[1, 3], p[2, 3] = 0.001, 0.01, 0.5
    assert assign_ranks(p) == [1, 1, 2, 2]
    p[2, 3] = 0.05  # p <= alpha is significant (as mt-metrics-eval)
    assert assign_ranks(p) == [1, 1, 2, 3]


def test_significance_ranks_from_a_pair_table():
    pairs = pd.DataFrame({"judge_a": ["x", "x", "y"], "judge_b": ["y", "z", "z"], "p_a_better": [0.5, 0.01, 0.04]})
    r = significance_ranks({"y": 0.6, "x": 0.7, "z": 0.2, "w": math.nan}, pairs)
    assert r["judge"].tolist() == ["x", "y", "z", "w"] and r["rank"].tolist()[:3] == [1, 1, 2]
    assert math.isnan(r["rank"].iloc[3])
    with pytest.raises(DHPError, match="No test"):
        significance_ranks({"x": 0.7, "y": 0.6}, pairs.iloc[1:])


# ---- bootstraps ----

def test_segment_bootstrap_equals_explicitly_resampled_items():
    h, m, g = synth(4, n_items=15, max_sys=4, nan_share=0.0)
    m2 = np.round(h + np.random.default_rng(5).normal(0, 1, len(h)))
    counts = item_bootstrap_draws(15, 6, seed=3)
    items = np.unique(g)
    for statistic in ("acc_eq", "acc_eq_calibrated", "tau_b"):
        got = segment_bootstrap(h, np.stack([m, m2]), g, statistic, counts=counts)
        for t, c in enumerate(counts):
            # the resample as data: each drawn copy of an item is a new item
            parts = [(h[g == it], m[g == it], m2[g == it], np.full((g == it).sum(), f"{it}#{r}"))
                     for it, n in zip(items, c) for r in range(n)]
            hh, mm, mm2, gg = (np.concatenate(x) for x in zip(*parts))
            for n, x in enumerate((mm, mm2)):
                want = {"acc_eq": lambda: pairwise_accuracy(hh, x, gg),
                        "acc_eq_calibrated": lambda: tie_calibrated_accuracy(hh, x, gg)[0],
                        "tau_b": lambda: kendall_tau_b(hh, x)}[statistic]()
                assert got[n, t] == pytest.approx(want, abs=1e-12), (statistic, n, t)


def test_paired_bootstrap_of_a_mean():
    rng = np.random.default_rng(0)
    a = rng.normal(1.0, 1, 200)
    res = paired_bootstrap(a, a.copy(), k=300)
    assert res["delta"] == 0 and res["p_two_sided"] == 1.0 and res["delta_lo"] == res["delta_hi"] == 0
    shifted = paired_bootstrap(a, a - 0.5 + rng.normal(0, 0.1, 200), k=300, seed=1)
    assert shifted["delta_lo"] > 0.4 and shifted["p_two_sided"] == pytest.approx(1 / 301)
    assert shifted["a_lo"] < a.mean() < shifted["a_hi"]
    one = paired_bootstrap(a[:1], a[:1], k=20)
    assert math.isnan(one["a_lo"]) and math.isnan(one["p_two_sided"])
    assert all(math.isnan(v) for v in percentile_interval([1.0, 2.0], n_units=1))
    assert all(math.isnan(v) for v in percentile_interval([1.0, 2.0, 3.0], n_units=4, ci=0.5))
    assert percentile_interval([1.0, 2.0, 3.0], n_units=5, ci=0.5) == (1.5, 2.5)


# ---- the segment view of human alignment and the report card ----

def test_segment_table_reports_acc_star_first_with_its_threshold():
    from dhp.analysis.alignment import SEGMENT_COLUMNS, segment_level, segment_table

    h, m, g = synth(21, n_items=30, max_sys=5, nan_share=0.0)
    df = pd.DataFrame({"seg_id": g, "system": 0, "mqm": h, "judge_score": m})
    t = segment_table(df, n_boot=40, seed=1)
    assert list(t.columns) == SEGMENT_COLUMNS and t["statistic"].iloc[0] == "acc_eq_calibrated"
    star = t.iloc[0]
    assert (star["value"], star["epsilon"]) == pytest.approx(tie_calibrated_accuracy(h, m, g))
    assert star["n"] == len(SegmentPairs.from_groups(g)) and star["ci_lo"] <= star["value"] <= star["ci_hi"]
    assert t.loc[t["statistic"] != "acc_eq_calibrated", "epsilon"].isna().all()
    assert segment_level(df, variant="acc_eq_calibrated")[0] == pytest.approx(star["value"])
    with pytest.raises(DHPError, match="variant"):
        segment_level(df, variant="acc")


def test_report_card_puts_acc_star_first_and_uses_it_as_headline_without_a_summary_view():
    from dhp import methods
    from dhp.analysis.report_card import alignment_rows, headline

    al = pd.DataFrame({"judge": "j", "mode": "m", "view": "segment", "aspect": "mqm",
                       "statistic": ["tau_b", "acc_eq", "acc_eq_calibrated"],
                       "value": [0.4, 0.39, 0.53], "ci_lo": np.nan, "ci_hi": np.nan, "n": 10})
    card = alignment_rows(al)
    assert card["measure"].tolist() == ["segment_acc_eq_calibrated", "segment_tau_b", "segment_acc_eq"]
    picks = {"human_alignment": methods.get("human_alignment").headline}
    assert headline(card, picks)["human_alignment"].iloc[0] == 0.53


@pytest.mark.parametrize("seed", range(4))
def test_tau_b_of_merged_hybrids_equals_scipy_with_ties_within_and_across_judges(seed, monkeypatch):
    import dhp.stats.permutation as perm

    rng = np.random.default_rng(seed)
    h = rng.integers(0, 4, 300).astype(float)
    a = np.clip(h + rng.integers(-1, 2, 300), 0, 4).astype(float)  # integer scores: many ties
    b = rng.permutation(a)  # same values: equal z-scores across the judges, ties between them too
    za, zb = perm._zscore(a), perm._zscore(b)
    fast = perm._TauPair(h, za, zb)
    for w in [*permutation_draws(300, 8, seed), np.ones(300, bool)]:
        want = (sps.kendalltau(h, np.where(w, za, zb))[0], sps.kendalltau(h, np.where(w, zb, za))[0])
        assert fast(w) == pytest.approx(want, abs=1e-14)
    monkeypatch.setattr(perm.seg, "_kendall_dis", None)  # the fallback gives the same numbers
    w = permutation_draws(300, 1, seed + 10)[0]
    assert perm._TauPair(h, za, zb)(w) == pytest.approx(fast(w), abs=1e-14)


def test_tau_b_bootstrap_without_scipys_counter_gives_the_same_values(monkeypatch):
    import dhp.stats.segment as segment

    h, m, g = synth(8, n_items=12, max_sys=4, nan_share=0.0)
    counts = item_bootstrap_draws(12, 5, seed=2)
    fast = segment_bootstrap(h, m[None, :], g, "tau_b", counts=counts)
    monkeypatch.setattr(segment, "_kendall_dis", None)
    assert segment_bootstrap(h, m[None, :], g, "tau_b", counts=counts) == pytest.approx(fast, abs=1e-14)


def test_leaderboard_recipe_from_a_long_table():
    # the recipe of dhp.stats' docstring, end to end on a long table of three judges
    rng = np.random.default_rng(6)
    rows = []
    for item in range(40):
        for sysname in "ABCD":
            hum = float(-rng.integers(0, 4))
            for judge, noise in (("good", 0.2), ("fair", 0.8), ("poor", 3.0)):
                rows.append({"seg_id": item, "system": sysname, "judge": judge, "human": hum,
                             "score": hum + rng.normal(0, noise)})
    from dhp.stats.segment import judge_scores as js_of

    js = js_of(pd.DataFrame(rows))
    pairs = permutation_table(js.human, js.scores, js.judges, js.groups, "acc_eq_calibrated", k=200)
    pairs["p_holm"] = holm(pairs["p_two_sided"])
    values = dict(zip(pairs["judge_a"], pairs["value_a"])) | dict(zip(pairs["judge_b"], pairs["value_b"]))
    ranks = significance_ranks(values, pairs)
    assert ranks["judge"].tolist() == ["good", "fair", "poor"] and ranks["rank"].tolist() == [1, 2, 3]
    assert (pairs["p_holm"] >= pairs["p_two_sided"]).all()
    boots = segment_bootstrap(js.human, js.scores, js.groups, "acc_eq_calibrated", k=50)
    assert boots.shape == (3, 50) and np.isfinite(boots).all()
