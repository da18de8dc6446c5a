"""Criteria-confusion method (Hu et al. 2024): expectation data, criteria loader and statistics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dhp.analysis.confusion import (
    adjust, aspect_correlations, confusion_cells, confusion_summary, directional_test, equivalence_test,
    mean_drop_table, paired_drops,
)
from dhp.datasets.criteria_hu2024 import (
    ASPECT_TREE, ASPECTS, aspect_tree, default_criteria_path, description, load_criteria, load_expectations,
)
from dhp.errors import DHPError

# Sizes implied by Table 19 of the paper: 57 cells where humans and the tree both expect a drop,
# 130 where both expect none. Their sum 187/198 = 0.9444 equals the "Detailed, Vote_all" match rate
# reported in Table 20, which pins the transcription down.
N_ST, N_SF = 57, 130


# ---------------------------------------------------------------- expectation table

def test_expectations_shape_and_sets():
    exp = load_expectations()
    assert len(exp) == 198
    assert exp["attack"].nunique() == 18
    assert set(exp["aspect"]) == set(ASPECTS) and exp["aspect"].nunique() == 11
    assert not exp.duplicated(["attack", "aspect"]).any()
    counts = exp["set"].value_counts()
    assert counts["S_T"] == N_ST
    assert counts["S_F"] == N_SF
    assert counts["excluded"] == 198 - N_ST - N_SF
    assert round((N_ST + N_SF) / 198, 4) == 0.9444


def test_expectations_follow_the_tree():
    exp = load_expectations()
    tree = aspect_tree()
    assert tree == ASPECT_TREE and tree["overall_quality"] == ""
    # every attack's target aspect and each of its ancestors are expected to drop by the system
    for attack, grp in exp.groupby("attack"):
        sysd = dict(zip(grp["aspect"], grp["system"]))
        node = grp["target_aspect"].iloc[0]
        while node:
            assert sysd[node], (attack, node)
            node = tree[node]
    row = exp.set_index(["attack", "aspect"])
    assert row.loc[("repetition", "fluency"), "set"] == "excluded"  # humans disagreed
    assert row.loc[("negation", "non_hallucination"), "human"] and not row.loc[("negation", "non_hallucination"), "system"]
    assert row.loc[("hypernym", "informativeness"), "set"] == "S_T"
    assert row.loc[("hypernym", "fluency"), "set"] == "S_F"


# ---------------------------------------------------------------- criteria loader

def test_load_criteria_real_file():
    path = default_criteria_path()  # the data root's copy (conftest fetched it)
    table = load_criteria(path)
    assert list(table.columns) == ["aspect", "parent", "description_type", "description"]
    assert set(table["aspect"]) == set(ASPECTS)
    assert table["description_type"].nunique() >= 5
    assert {"gold", "detailed", "simplified", "term", "list"} <= set(table["description_type"])
    assert (table.loc[table["aspect"] == "overall_quality", "parent"] == "").all()
    assert (table.loc[table["aspect"] == "grammaticality", "parent"] == "fluency").all()
    assert not table.duplicated(["aspect", "description_type"]).any()
    assert description("Fluency", "Term", table).startswith("Fluency")
    with pytest.raises(DHPError):
        description("fluency", "no_such_type", table)


def test_load_criteria_errors(tmp_path):
    with pytest.raises(DHPError) as err:
        load_criteria(tmp_path / "missing.json")
    assert "Fix:" in str(err.value)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DHPError, match="Fix:"):
        load_criteria(bad)
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"Fluency": {"Gold": "x"}}')
    with pytest.raises(DHPError, match="lacks aspects"):
        load_criteria(wrong)


# ---------------------------------------------------------------- synthetic scores

def _scores(drop_fn, n_items=30, attacks=("hypernym", "repetition"), aspects=("informativeness", "fluency"),
            dtype="detailed", seed=0, noise=0.05):
    """Original score 4 per (item, aspect) plus noise; perturbed = original - drop_fn(attack, aspect) + noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for item in range(n_items):
        for attack in attacks:
            for aspect in aspects:
                orig = 4.0 + rng.normal(0, noise)
                rows.append((item, attack, aspect, dtype, "original", orig))
                rows.append((item, attack, aspect, dtype, "perturbed",
                             orig - drop_fn(attack, aspect) + rng.normal(0, noise)))
    return pd.DataFrame(rows, columns=["item_id", "attack", "aspect", "description_type", "variant", "score"])


def test_targeted_drop_is_directional_and_other_cell_invariant():
    scores = _scores(lambda a, s: 1.5 if (a, s) == ("hypernym", "informativeness") else 0.0)
    cells = confusion_cells(scores, load_expectations()).set_index(["attack", "aspect"])
    hit = cells.loc[("hypernym", "informativeness")]
    assert hit["set"] == "S_T"
    assert hit["D"] > 1 and hit["significant_drop"]
    assert hit["mean_drop"] == pytest.approx(1.5, abs=0.1)
    assert not hit["invariant"]
    calm = cells.loc[("hypernym", "fluency")]
    assert calm["set"] == "S_F"
    assert calm["invariant"] and not calm["significant_drop"]
    assert calm["D"] < 1
    summary = confusion_summary(cells.reset_index()).iloc[0]
    assert summary["confusion_index"] == 0.0


def test_judge_dropping_everything_is_confused():
    exp = load_expectations()
    scores = _scores(lambda a, s: 1.5, attacks=tuple(exp["attack"].unique()), aspects=ASPECTS, n_items=20)
    cells = confusion_cells(scores, exp)
    summary = confusion_summary(cells).iloc[0]
    assert summary["n_S_T"] == N_ST and summary["n_S_F"] == N_SF
    assert summary["share_SF_invariant"] == 0.0
    assert summary["share_SF_dropped"] == 1.0
    assert summary["share_ST_D_gt_1"] == 1.0
    assert summary["confusion_index"] == pytest.approx(N_SF / (N_ST + N_SF))
    assert summary["confusion_index"] > 0.65
    table = mean_drop_table(cells, "detailed")
    assert table.shape == (18, 11)
    assert list(table.columns) == list(ASPECTS) and table.index[0] == "repetition"


def test_nan_scores_are_dropped_from_pairs():
    scores = _scores(lambda a, s: 1.0, n_items=10, attacks=("hypernym",), aspects=("fluency",))
    scores.loc[(scores["item_id"] == 0) & (scores["variant"] == "original"), "score"] = np.nan
    scores.loc[(scores["item_id"] == 1) & (scores["variant"] == "perturbed"), "score"] = np.nan
    drops = paired_drops(scores)
    assert len(drops) == 8 and not drops["drop"].isna().any()
    assert set(drops["item_id"]) == set(range(2, 10))
    cells = confusion_cells(scores, load_expectations())
    assert cells["n_pairs"].tolist() == [8]


def test_shared_original_rows_pair_with_every_attack():
    rows = [(i, None, "fluency", "term", "original", 4.0) for i in range(3)]
    rows += [(i, a, "fluency", "term", "perturbed", 3.0 if a == "inversion" else 4.0)
             for i in range(3) for a in ("inversion", "hypernym")]
    scores = pd.DataFrame(rows, columns=["item_id", "attack", "aspect", "description_type", "variant", "score"])
    drops = paired_drops(scores).set_index(["item_id", "attack"])["drop"]
    assert len(drops) == 6
    assert drops.loc[(0, "inversion")] == 1.0 and drops.loc[(0, "hypernym")] == 0.0


def test_directional_p_of_every_cell_is_scipys():
    """Every cell is one row of dhp.stats.wilcoxon's batch: cells of 1 to 80 pairs, with and without ties,
    take scipy's exact, permutation or normal p (scipy's auto rule, zero_method="wilcox")."""
    rng = np.random.default_rng(4)
    cells = {f"c{n}{kind}": (rng.normal(0.3, 1, n) if kind == "cont" else rng.integers(-1, 3, n).astype(float))
             for n in (1, 2, 6, 13, 14, 40, 80) for kind in ("cont", "int")}
    drops = pd.DataFrame([(a, "fluency", "term", x) for a, d in cells.items() for x in d],
                         columns=["attack", "aspect", "description_type", "drop"])
    got = directional_test(drops).set_index("attack")
    for a, d in cells.items():
        ref = stats.wilcoxon(d, alternative="greater").pvalue if np.any(d != 0) else 1.0
        assert got.loc[a, "p_directional"] == pytest.approx(ref, rel=1e-12, abs=0), a
        assert got.loc[a, "n_pairs"] == len(d)


def test_directional_and_equivalence_edge_cases():
    drops = pd.DataFrame({
        "attack": ["a"] * 4 + ["b"] * 3 + ["c"],
        "aspect": ["fluency"] * 8, "description_type": ["term"] * 8,
        "drop": [0, 0, 0, 0, 0.5, 0.5, 0.5, 1.0],
    })
    d = directional_test(drops).set_index("attack")
    assert d.loc["a", "p_directional"] == 1.0 and d.loc["a", "D"] == 0.0
    assert d.loc["b", "D"] == pytest.approx(np.log(d.loc["b", "p_directional"]) / np.log(0.05))
    e = equivalence_test(drops, delta=0.2).set_index("attack")
    for cell, n in (("a", 4), ("b", 3), ("c", 1)):  # fewer than 5 pairs: no test, and the note says why
        assert np.isnan(e.loc[cell, "p_equivalence"]) and not e.loc[cell, "invariant"]
        note = e.loc[cell, "equivalence_note"]
        assert note.startswith(f"{n} pair(s)") and "at least 5" in note


def test_two_equal_drops_are_not_shown_invariant():
    # Before: p_equivalence = 0.0 ("invariant") from two identical numbers.
    drops = pd.DataFrame({"attack": "a", "aspect": "fluency", "description_type": "term", "drop": [0.0, 0.0]})
    e = equivalence_test(drops).iloc[0]
    assert np.isnan(e["p_equivalence"]) and not e["invariant"] and e["equivalence_note"]


@pytest.mark.parametrize("n", [5, 6, 9])
def test_equal_drops_get_the_exact_sign_test_not_zero(n):
    """n equal drops inside the margin: the t test is 0/0; the exact sign test of "median outside the margin"
    (n of n pairs inside, each at most 1/2 likely under that null) gives scipy's binomial p = 0.5**n."""
    inside = pd.DataFrame({"attack": "a", "aspect": "fluency", "description_type": "term", "drop": [0.0] * n})
    outside = inside.assign(attack="b", drop=0.5)
    e = equivalence_test(pd.concat([inside, outside]), delta=0.2).set_index("attack")
    assert e.loc["a", "p_equivalence"] == pytest.approx(stats.binomtest(n, n, 0.5, alternative="greater").pvalue)
    assert e.loc["a", "p_equivalence"] > 0 and e.loc["a", "equivalence_method"] == "sign (equal drops)"
    assert e.loc["a", "invariant"]  # 1/32 at n = 5 is below 0.05 before any adjustment
    assert e.loc["b", "p_equivalence"] == 1.0 and not e.loc["b", "invariant"]


def test_s_t_hits_and_s_f_drops_use_the_same_adjusted_p():
    """An S_T cell and an S_F cell with the same six drops must get the same decision. Before: the S_T cell
    counted as a hit on raw p (1/64, D = 1.39) while the S_F cell was judged on Holm-adjusted p (4/64)."""
    exp = load_expectations().set_index(["attack", "aspect"])["set"]
    assert exp[("hypernym", "informativeness")] == "S_T" and exp[("hypernym", "fluency")] == "S_F"
    rows = []
    for item in range(6):
        for attack in ("hypernym", "repetition"):
            for aspect in ("informativeness", "fluency"):
                drop = 0.5 + 0.1 * item if attack == "hypernym" else 0.0
                rows += [(item, attack, aspect, "detailed", "original", 4.0),
                         (item, attack, aspect, "detailed", "perturbed", 4.0 - drop)]
    scores = pd.DataFrame(rows, columns=["item_id", "attack", "aspect", "description_type", "variant", "score"])
    cells = confusion_cells(scores, load_expectations()).set_index(["attack", "aspect"])
    hit, miss = cells.loc[("hypernym", "informativeness")], cells.loc[("hypernym", "fluency")]
    assert hit["p_directional"] == pytest.approx(1 / 64) and hit["p_directional_adj"] == pytest.approx(4 / 64)
    assert not hit["significant_drop"] and hit["D"] < 1 and not miss["significant_drop"]
    summary = confusion_summary(cells.reset_index()).iloc[0]
    assert summary["share_ST_D_gt_1"] == 0 and summary["share_ST_dropped"] == 0 and summary["share_SF_dropped"] == 0
    # every decision reads the adjusted p, with D > 1 exactly when that p < 0.05
    assert ((cells["D"] > 1) == cells["significant_drop"]).all()
    assert cells["D"].to_numpy() == pytest.approx(np.log(cells["p_directional_adj"].to_numpy()) / np.log(0.05))


def test_invariance_is_decided_on_the_adjusted_equivalence_p():
    # Three cells of 8 pairs: drops tightly around 0 (clearly equivalent), around 0.1 with a wide spread
    # (raw TOST p = 0.032), and around 0.5 (not equivalent). Holm over this family of three puts the middle
    # one at 2 x 0.032 > 0.05: not shown invariant, although its raw p is below 0.05.
    d1 = 0.01 * np.array([-1, 1, -2, 2, -1, 1, 0.5, -0.5])
    d2 = 0.1 + 0.12 * np.array([-1, 1, -1, 1, -1, 1, -1, 1])
    d3 = 0.5 + d1
    rows = []
    for k in range(8):
        for attack, d in (("hypernym", d1[k]), ("abbreviation", d2[k]), ("sentence_deletion", d3[k])):
            rows += [(k, attack, "fluency", "gold", "original", 4.0),
                     (k, attack, "fluency", "gold", "perturbed", 4.0 - d)]
    scores = pd.DataFrame(rows, columns=["item_id", "attack", "aspect", "description_type", "variant", "score"])
    cells = confusion_cells(scores, load_expectations()).set_index("attack")
    raw = cells.loc["abbreviation", "p_equivalence"]
    assert raw == pytest.approx(stats.ttest_1samp(d2, 0.2, alternative="less").pvalue) and 0.025 < raw < 0.05
    assert cells["p_equivalence_adj"].to_numpy() == pytest.approx(adjust(cells["p_equivalence"].to_numpy(), "holm"))
    assert not cells.loc["abbreviation", "invariant"] and cells.loc["abbreviation", "p_equivalence_adj"] > 0.05
    assert cells.loc["hypernym", "invariant"] and not cells.loc["sentence_deletion", "invariant"]


def test_tost_matches_manual_t_tests():
    rng = np.random.default_rng(3)
    d = rng.normal(0.05, 0.1, size=15)
    drops = pd.DataFrame({"attack": "a", "aspect": "fluency", "description_type": "gold", "drop": d})
    p = equivalence_test(drops, delta=0.2)["p_equivalence"].iloc[0]
    lo = stats.ttest_1samp(d, -0.2, alternative="greater").pvalue
    hi = stats.ttest_1samp(d, 0.2, alternative="less").pvalue
    assert p == pytest.approx(max(lo, hi))


# ---------------------------------------------------------------- multiple testing

def test_holm_hand_example():
    # sorted p: 0.01, 0.02, 0.03, 0.04 with m=4 -> 0.04, 0.06, 0.06 (monotone), 0.06
    p = [0.03, 0.01, 0.04, 0.02]
    assert adjust(p, "holm") == pytest.approx([0.06, 0.04, 0.06, 0.06])
    # capping at 1 and NaN passthrough (NaN does not count as a test: m=2)
    out = adjust([0.6, np.nan, 0.2], "holm")
    assert out[0] == pytest.approx(0.6) and np.isnan(out[1]) and out[2] == pytest.approx(0.4)
    assert adjust([0.7, 0.9], "holm") == pytest.approx([1.0, 1.0])


def test_bh_matches_scipy_and_rejects_unknown():
    p = np.array([0.001, 0.2, 0.04, 0.03, 0.5, 0.012])
    assert adjust(p, "bh") == pytest.approx(stats.false_discovery_control(p, method="bh"))
    out = adjust(np.append(p, np.nan), "bh")
    assert np.isnan(out[-1]) and out[:-1] == pytest.approx(stats.false_discovery_control(p, method="bh"))
    with pytest.raises(DHPError):
        adjust(p, "bonferroni")


def test_adjustment_runs_per_description_type():
    a = _scores(lambda at, s: 0.0, dtype="term", n_items=8)
    b = _scores(lambda at, s: 0.0, dtype="gold", n_items=8, aspects=("fluency",))
    cells = confusion_cells(pd.concat([a, b]), load_expectations())
    gold = cells[cells["description_type"] == "gold"]
    assert gold["p_directional_adj"].to_numpy() == pytest.approx(adjust(gold["p_directional"].to_numpy(), "holm"))


# ---------------------------------------------------------------- correlations

def test_aspect_correlations():
    scores = _scores(lambda a, s: 1.0 if s == "fluency" else 0.5, noise=0.3, aspects=("fluency", "coherence", "informativeness"))
    corr = aspect_correlations(scores, "detailed")
    assert list(corr.columns) == ["fluency", "coherence", "informativeness"]
    assert np.allclose(np.diag(corr), 1.0)
    assert np.allclose(corr.to_numpy(), corr.to_numpy().T)
    with pytest.raises(DHPError):
        aspect_correlations(scores, "term")


def test_a_judge_without_usable_pairs_gets_nan_shares_not_zero():
    # Every perturbed score unparsable (NaN): nothing can be tested, so no share may read as 0.
    scores = _scores(lambda a, s: 0.0, n_items=4)
    scores.loc[scores["variant"] == "perturbed", "score"] = np.nan
    cells = confusion_cells(scores, load_expectations())
    assert cells.empty and "significant_drop" in cells.columns
    summary = confusion_summary(cells, description_types=["detailed"])
    row = summary.set_index("description_type").loc["detailed"]
    assert row["n_S_T"] == 0 and row["n_S_F"] == 0
    assert np.isnan(row[["share_ST_D_gt_1", "share_SF_invariant", "share_SF_dropped", "confusion_index"]].astype(float)).all()


def test_scores_of_two_instructions_are_not_pooled():
    scores = _scores(lambda a, s: 0.0, n_items=5)
    both = pd.concat([scores.assign(instruction="paper"), scores.assign(instruction="mitigated")])
    with pytest.raises(DHPError, match="instruction"):
        paired_drops(both)
    assert len(paired_drops(scores.assign(instruction="paper"))) == len(paired_drops(scores))


def test_share_invariant_is_nan_when_no_s_f_cell_could_be_tested():
    # 2 items: every cell has 2 pairs, too few for the equivalence test. Before: share_SF_invariant = 0.0,
    # which reads as "the judge is never invariant".
    scores = _scores(lambda a, s: 0.0, n_items=2)
    summary = confusion_summary(confusion_cells(scores, load_expectations())).iloc[0]
    assert summary["n_S_F"] > 0 and summary["n_SF_tested"] == 0 and np.isnan(summary["share_SF_invariant"])
    # with 8 items every cell is tested and the share counts the tested cells
    summary = confusion_summary(confusion_cells(_scores(lambda a, s: 0.0, n_items=8), load_expectations())).iloc[0]
    assert summary["n_SF_tested"] == summary["n_S_F"] and summary["share_SF_invariant"] == 1.0
