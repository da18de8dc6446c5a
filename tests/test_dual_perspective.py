"""Groundwork of the dual-perspective meta-evaluation (issue 13): the per-annotator SummEval loader with
its agreement filter, linear weighted kappa, the rating mapping and adjacent pairwise accuracy."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score

from dhp.analysis.dual_perspective import adjacent_accuracy, global_kappa, to_rating
from dhp.datasets import summeval_annotators as sa
from dhp.errors import DHPError


@pytest.fixture(scope="module")
def ratings():
    return sa.load_ratings()  # the session's data root (conftest); missing files fail, never skip


def test_loader_reads_every_expert_rating(ratings):
    assert ratings["target_id"].nunique() == 1200 and ratings["system"].nunique() == 12
    assert ratings["doc_id"].nunique() == 100
    assert len(ratings) == 1200 * 4 * 3 and set(ratings["annotator"]) == {0, 1, 2}
    assert ratings["rating"].between(1, 5).all()


def test_agreement_filter_reproduces_the_published_counts(ratings):
    """All three experts agree on coherence 154, consistency 955, fluency 856, relevance 179 of 1,200."""
    counts = sa.agreed_targets(ratings).groupby("aspect").size().to_dict()
    assert counts == {"coherence": 154, "consistency": 955, "fluency": 856, "relevance": 179}


def test_targets_are_detokenised_and_joined_to_their_articles():
    t = sa.load_targets()
    assert len(t) == 1200 and t["target_id"].is_unique
    assert not t["candidate"].str.contains(r" [.,](?: |$)| n't", regex=True).any()  # PTB tokens undone
    assert (t["source"].str.len() > t["candidate"].str.len()).mean() > 0.95


def test_missing_folder_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("DHP_OFFLINE", "1")  # else the data layer fetches the files into the empty folder
    with pytest.raises(DHPError, match="summeval_annotators"):
        sa.load_ratings(tmp_path)


def test_to_rating_rounds_half_up_and_keeps_nan():
    got = to_rating([3.5, 2.5, 1.2, 4.49, 0.4, 5.7, np.nan])
    assert got[:6].tolist() == [4, 3, 1, 4, 1, 5] and math.isnan(got[6])


def _linear_kappa_by_hand(h, j, k=5):
    """Cohen (1968): 1 - sum(w * observed) / sum(w * expected), w_ab = |a - b| / (k - 1)."""
    obs = np.zeros((k, k))
    for a, b in zip(h, j):
        obs[a - 1, b - 1] += 1
    obs /= obs.sum()
    exp = np.outer(obs.sum(axis=1), obs.sum(axis=0))
    w = np.abs(np.subtract.outer(np.arange(k), np.arange(k))) / (k - 1)
    return 1 - (w * obs).sum() / (w * exp).sum()


def test_global_kappa_matches_cohen_1968_and_sklearn():
    h = [1, 2, 3, 4, 5, 3, 2, 4]
    j = [1, 3, 3, 5, 4, 3, 1, np.nan]  # the last target had no usable reply: left out
    t = pd.DataFrame({"aspect": "fluency", "human_rating": h, "judge_rating": j})
    row = global_kappa(t).iloc[0]
    assert row["n"] == 7
    assert row["kappa"] == pytest.approx(_linear_kappa_by_hand(h[:7], [int(x) for x in j[:7]]))
    assert row["kappa"] == pytest.approx(cohen_kappa_score(h[:7], [int(x) for x in j[:7]], weights="linear"))
    perfect = global_kappa(t.assign(judge_rating=h)).iloc[0]
    assert perfect["kappa"] == pytest.approx(1.0) and perfect["n"] == 8
    one_level = global_kappa(pd.DataFrame({"aspect": "x", "human_rating": [3, 3], "judge_rating": [3, 3]}))
    assert math.isnan(one_level.iloc[0]["kappa"])  # undefined, not a made-up 1 or 0


def test_linear_kappa_is_sklearns_float_bit_for_bit():
    """linear_kappa computes sklearn's weighted κ itself for ratings in 1..5 (the leaderboard draws it per resample):
    on 3,000 random rating vectors — from 2 targets, few levels, one side constant, one rating in common — the
    float is sklearn's exactly, NaN where sklearn's is NaN; a rating outside 1..5 goes to sklearn."""
    import warnings

    from dhp.analysis.dual_perspective import LABELS, linear_kappa

    rng = np.random.default_rng(0)
    compared = 0
    for _ in range(3000):
        n, levels = int(rng.integers(2, 40)), rng.choice([1, 2, 3, 5])
        lo = int(rng.integers(1, 6 - levels + 1)) if levels < 5 else 1
        h = rng.integers(lo, lo + levels, n)
        j = np.full(n, h[0]) if rng.random() < 0.1 else rng.integers(1, 6, n)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = cohen_kappa_score(h, j, weights="linear", labels=LABELS)
        got, _ = linear_kappa(h, j.astype(float))
        if len(set(h) | set(j)) > 1:
            compared += 1
            assert (math.isnan(got) and math.isnan(want)) or got == want, (h, j, got, want)
    assert compared > 2500
    assert linear_kappa(np.array([0, 1, 2]), np.array([0.0, 2.0, 2.0]))[0] == pytest.approx(
        cohen_kappa_score([0, 1, 2], [0, 2, 2], weights="linear", labels=LABELS))


def test_adjacent_accuracy_counts_strict_drops_only():
    pairs = pd.DataFrame({
        "source_id": ["s1", "s1", "s2", "s2", "s3"],
        "aspect": ["fluency"] * 4 + ["coherence"],
        "step": [0, 1, 0, 1, 0],
        "score_step": [4.0, 3.0, 3.0, np.nan, 2.0],
        "score_next": [3.0, 3.0, 2.0, 1.0, 4.0],
    })
    out = adjacent_accuracy(pairs).set_index("aspect")
    # fluency: 4>3 right, 3=3 a tie (wrong), 3>2 right, NaN left out -> 2/3
    assert out.loc["fluency", "accuracy"] == pytest.approx(2 / 3) and out.loc["fluency", "n_pairs"] == 3
    assert out.loc["coherence", "accuracy"] == 0.0
    with pytest.raises(DHPError, match="score_next"):
        adjacent_accuracy(pairs.drop(columns="score_next"))


TEXT = ("Maria Lopez opened the new library in Springfield on Monday. About 300 people came to see it. "
        "The mayor thanked the builders for finishing early. Children read books in the garden all day.")


@pytest.mark.parametrize("aspect", ["fluency", "coherence", "consistency", "relevance"])
def test_each_chain_step_adds_exactly_one_error_to_the_previous_step(aspect):
    from dhp.perturb.chains import count_errors, error_chain, is_one_more_error

    chain = error_chain(TEXT, aspect, 3, seed=1)
    assert chain[0] == TEXT and len(chain) == 4
    assert len(set(chain)) == 4  # strictly new text at every step
    assert [count_errors(TEXT, t, aspect) for t in chain] == [0, 1, 2, 3]  # counted against the reference
    for prev, nxt in zip(chain, chain[1:]):
        assert is_one_more_error(TEXT, prev, nxt, aspect), (aspect, prev, nxt)
    assert not is_one_more_error(TEXT, chain[0], chain[2], aspect)  # two steps apart is two errors, not one
    assert not is_one_more_error(TEXT, chain[2], chain[1], aspect)  # going back is not one more
    assert error_chain(TEXT, aspect, 3, seed=1) == chain  # seeded


def test_coherence_chain_adds_one_inversion_per_step_until_the_order_is_reversed():
    """The old chain swapped any two sentences of the previous step: inversions against the reference
    went 0, 1, 2, 3, 2, 1 (a later swap undid an earlier one) and a correct judge was marked wrong."""
    from dhp.perturb.chains import error_chain
    from dhp.perturb.rules import sentence_inversions, sentence_order

    for seed in range(30):
        chain = error_chain(TEXT, "coherence", 10, seed=seed)
        # 4 sentences: at most 6 inversions, reached only by the full reversal; then the chain stops
        assert [sentence_inversions(TEXT, t) for t in chain] == list(range(7)), seed
        assert sentence_order(TEXT, chain[-1]) == [3, 2, 1, 0]


def test_inversions_match_kendall_tau_and_sentence_order_reads_the_reference_sentences():
    from scipy.stats import kendalltau

    from dhp.perturb.rules import inversions, kept_sentences, sentence_order

    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 8):
        for _ in range(20):
            p = rng.permutation(n)
            # no ties: tau = 1 - 4 * discordant / (n (n - 1)), discordant pairs = inversions
            assert inversions(p) == pytest.approx((1 - kendalltau(np.arange(n), p)[0]) * n * (n - 1) / 4)
    assert sentence_order("A b. C d. E f.", "C d. A b. E f.") == [1, 0, 2]
    assert sentence_order("A b. C d. E f.", "C d. A b. E x.") is None  # an edit, not a reordering
    assert sentence_order("Yes. No. Yes.", "No. Yes. Yes.") == [1, 0, 2]  # equal sentences keep their order
    assert kept_sentences("A b. C d. E f.", "A b.  E f.") == [0, 2]  # white space between may differ
    assert kept_sentences("A b. C d. E f.", "A b. E x.") is None
    assert kept_sentences("A b. C d. E f.", "E f. A b.") is None  # reordered, not deleted


def _summeval_references(n_items):
    from dhp.datasets import load_dataset

    return load_dataset("summeval", n_items=n_items, seed=0)


@pytest.mark.parametrize("aspect", ["coherence", "relevance", "fluency", "consistency"])
def test_chains_on_summeval_references_never_get_better(aspect):
    """On real references and many seeds every step adds exactly one error counted against the
    reference, and a chain stops early only where the text can take no more (coherence: reversed
    order; relevance: one sentence left). Today's main failed this for coherence on 47 of 50 chains."""
    from dhp.perturb.chains import count_errors, error_chain, is_one_more_error
    from dhp.perturb.rules import sentence_spans

    length = 5
    for r in _summeval_references(8).itertuples():
        n = len(sentence_spans(r.reference))
        for seed in range(5):
            chain = error_chain(r.reference, aspect, length, seed)
            counts = [count_errors(r.reference, t, aspect) for t in chain]
            assert counts == list(range(len(chain))), (r.item_id, seed, counts)
            assert all(is_one_more_error(r.reference, a, b, aspect) for a, b in zip(chain, chain[1:]))
            most = {"coherence": n * (n - 1) // 2, "relevance": n - 1}.get(aspect, length)
            if aspect == "consistency":
                assert len(chain) >= 3, (r.item_id, seed)  # every reference names several entities
            else:
                assert len(chain) - 1 == min(length, most), (r.item_id, seed, len(chain), n)


def test_a_chain_that_runs_out_of_sentences_stops_instead_of_padding():
    from dhp.perturb.chains import error_chain

    chain = error_chain("One sentence here. And a second one.", "relevance", 5)
    assert len(chain) == 2  # one deletion possible; a second would leave nothing to delete from


def test_local_pairs_link_adjacent_steps_only():
    from dhp.analysis.dual_perspective import local_pairs

    s = pd.DataFrame({"source_id": ["a"] * 3 + ["b"] * 2, "aspect": "fluency", "step": [0, 1, 2, 0, 2],
                      "score": [5.0, 4.0, 4.5, 3.0, 1.0]})
    p = local_pairs(s)
    assert p[["source_id", "step", "score_step", "score_next"]].values.tolist() == [["a", 0, 5.0, 4.0], ["a", 1, 4.0, 4.5]]
    assert adjacent_accuracy(p).iloc[0]["accuracy"] == 0.5


def test_pair_matrix_and_table1_layout():
    from dhp.analysis.dual_perspective import pair_matrix, rank_judges, table1

    s = pd.DataFrame({"source_id": ["a"] * 3 + ["b"] * 3, "aspect": "fluency", "step": [0, 1, 2] * 2,
                      "score": [5.0, 4.0, 4.5, 3.0, 3.0, 1.0]})
    m = pair_matrix(s).set_index(["errors_i", "errors_j"])["accuracy"]
    assert m[(0, 1)] == 0.5 and m[(0, 2)] == 1.0 and m[(1, 2)] == 0.5
    j = {"judge": "j", "mode": "logprobs"}
    gk = pd.DataFrame({"aspect": ["fluency"], "kappa": [0.4], "n": [5]}).assign(**j)
    la = pd.DataFrame({"aspect": ["fluency"], "accuracy": [0.75], "n_pairs": [4]}).assign(**j)
    al = pd.DataFrame({"view": ["system", "system", "summary", "dataset", "dataset"], "aspect": "fluency",
                       "statistic": ["pearson", "spearman", "spearman", "pearson", "spearman"],
                       "value": [0.3, 0.2, 0.9, 0.55, 0.45]}).assign(**j)
    t = table1(gk, la, al).iloc[0]
    assert (t["kappa"], t["accuracy"]) == (0.4, 0.75)
    # the paper's r and rho are dataset level; system level stands beside them under its own name
    assert (t["dataset_pearson"], t["dataset_spearman"]) == (0.55, 0.45)
    assert (t["system_pearson"], t["system_spearman"]) == (0.3, 0.2)
    assert math.isnan(t["dataset_kendall"]) and "pearson" not in t.index  # no unlabelled level
    k = {"judge": "k", "mode": "logprobs"}
    two = table1(pd.concat([gk, gk.assign(kappa=0.6, **k)]), pd.concat([la, la.assign(accuracy=0.5, **k)]),
                 pd.concat([al, al.assign(**k)]))
    r = rank_judges(two).set_index("judge")
    assert (r.loc["j", "rank_kappa"], r.loc["k", "rank_kappa"]) == (2, 1)  # the views disagree:
    assert (r.loc["j", "rank_accuracy"], r.loc["k", "rank_accuracy"]) == (1, 2)  # j leads locally
    assert r.loc["j", "rank_dataset_pearson"] == r.loc["k", "rank_dataset_pearson"] == 1  # a tie shares the rank
    # a judge kappa'd under both rating rules: table1 takes its mode's default rule (logprobs: expected)
    both = pd.concat([gk.assign(rating_rule="mode", kappa=0.9), gk.assign(rating_rule="expected")])
    assert table1(both, la, al)["kappa"].tolist() == [0.4]
    assert math.isnan(table1(gk, la, None).iloc[0]["dataset_pearson"])  # no alignment run: NaN, not 0


def _alignment_input():
    rows = []
    human = {"d1": [1, 2, 3, 4], "d2": [2, 4, 1, 3], "d3": [2, 2, 2, 2]}
    judge = {"d1": [1, 3, 2, 4], "d2": [1, 4, 2, 3], "d3": [1, 2, 3, 4]}
    for d in human:
        for k, name in enumerate("ABCD"):
            rows.append({"doc_id": d, "system": name, "aspect": "coherence", "human": float(human[d][k]),
                         "judge_score": float(judge[d][k])})
    return pd.DataFrame(rows)


def test_dataset_level_pools_every_target_and_matches_scipy():
    """Hu et al. 2025 App. A.3: r and rho over all targets of the aspect pooled, not per system."""
    from scipy import stats as sps

    from dhp.analysis.alignment import alignment_table, dataset_level

    t = _alignment_input()
    out = alignment_table(t, n_boot=200, seed=0)
    d = out[out["view"] == "dataset"].set_index("statistic")
    assert set(d.index) == {"pearson", "spearman", "kendall"} and (d["n"] == 12).all()
    assert d.loc["pearson", "value"] == pytest.approx(sps.pearsonr(t["human"], t["judge_score"])[0])
    assert d.loc["spearman", "value"] == pytest.approx(sps.spearmanr(t["human"], t["judge_score"])[0])
    assert d.loc["kendall", "value"] == pytest.approx(sps.kendalltau(t["human"], t["judge_score"])[0])
    system = out[(out["view"] == "system") & (out["statistic"] == "pearson")]["value"].iloc[0]
    assert system != pytest.approx(d.loc["pearson", "value"])  # a different number, not a relabelling
    assert d[["ci_lo", "ci_hi"]].isna().all().all()  # 3 documents to resample: below MIN_RESAMPLE_UNITS, no interval
    one = dataset_level(t.iloc[:1], "pearson")
    assert math.isnan(one[0]) and one[1] == 1  # below two targets: NaN, not 0
    single_doc = alignment_table(t[t["doc_id"] == "d1"], n_boot=50)
    assert single_doc[single_doc["view"] == "dataset"]["ci_lo"].isna().all()  # one document: no interval


class _SampledJudge:
    """Stand-in judge: sampled reply j of a request is ``replies(candidate)[j]``; records what it was asked."""

    @staticmethod
    def make(replies):
        from dhp.backends import Backend, Completion

        class Judge(Backend):
            identity = "fake:sampled"
            model = "sampled"
            requests = []

            def chat_many(self, requests, on_result=None):
                out = []
                for i, r in enumerate(requests):
                    Judge.requests.append(r)
                    texts = replies(r.messages[-1][1])[:r.n]
                    res = Completion(texts[0], [{texts[0]: -0.1, "3": -2.5}] if r.logprobs else None, 10, 1, None,
                                     texts if r.n > 1 else None)
                    out.append(res)
                    if on_result:
                        on_result(i, res)
                return out

        return Judge()


def _global_inputs():
    targets = pd.DataFrame({"target_id": ["d|A", "d|B"], "source": "An article about a harbour.",
                            "candidate": ["MODAL summary.", "TIED summary."]})
    ratings = pd.DataFrame([{"target_id": t, "aspect": "fluency", "annotator": a, "rating": 2}
                            for t in ("d|A", "d|B") for a in range(3)])
    return targets, ratings


def _global(judge, tmp_path, **values):
    from dhp import methods

    m = methods.get("dual_perspective")
    targets, ratings = _global_inputs()
    config = m.config(aspects=["fluency"], n_targets=2, cache_path=str(tmp_path / "c.sqlite"), **values)
    return m.collect_global(config, judge, targets, ratings)["global_targets.parquet"]


def test_global_rating_rule_mode_is_the_papers_and_expected_is_selectable(tmp_path):
    """Hu et al. 2025 App. A.4: ten samples at temperature 1, their mode is the rating. Target A's ten
    sampled ratings have mode 1 but mean 2.9; target B ties 2 and 4 five times each (the lower wins)."""
    from dhp.analysis import dual_perspective as dp

    samples = {"MODAL": list("1111554443"), "TIED": list("2424242424")}
    judge = _SampledJudge.make(lambda prompt: samples["MODAL" if "MODAL summary" in prompt else "TIED"])
    gt = _global(judge, tmp_path, mode="sample")
    got = gt.set_index("target_id")
    assert (gt["rating_rule"] == "mode").all() and set(gt["judge"]) == {"fake:sampled"}
    assert got.loc["d|A", "judge_score"] == pytest.approx(2.9) and got.loc["d|A", "judge_rating"] == 1
    assert got.loc["d|B", "judge_rating"] == 2  # tie between 2 and 4: the lower
    assert {(r.n, r.temperature) for r in type(judge).requests} == {(10, 1.0)}
    ex = _global(judge, tmp_path, mode="sample", rating_rule="expected").set_index("target_id")
    assert ex.loc["d|A", "judge_rating"] == 3 and ex.loc["d|B", "judge_rating"] == 3  # means 2.9 and 3.0, rounded
    assert (ex["rating_rule"] == "expected").all()
    kappa = dp.global_kappa(gt)
    assert list(kappa.columns) == ["judge", "mode", "aspect", "rating_rule", "kappa", "n"]
    assert kappa["rating_rule"].tolist() == ["mode"]


def test_logprobs_mode_rates_by_the_expected_score_and_refuses_the_mode_rule(tmp_path):
    from dhp import methods

    judge = _SampledJudge.make(lambda prompt: ["4"])
    gt = _global(judge, tmp_path, mode="logprobs")
    p4, p3 = math.exp(-0.1), math.exp(-2.5)
    assert gt["judge_score"].tolist() == pytest.approx([(4 * p4 + 3 * p3) / (p4 + p3)] * 2)
    assert gt["judge_rating"].tolist() == [4, 4] and (gt["rating_rule"] == "expected").all()
    asked = len(type(judge).requests)
    with pytest.raises(DHPError, match="mode='sample'"):
        _global(judge, tmp_path, mode="logprobs", rating_rule="mode")
    with pytest.raises(DHPError, match="rating_rule = 'median' is invalid"):
        methods.get("dual_perspective").config(rating_rule="median")
    assert len(type(judge).requests) == asked  # refused before any call


def test_parse_preference_and_both_orders_accuracy():
    from dhp.analysis.dual_perspective import comparison_accuracy
    from dhp.judging.pairwise import parse_preference

    assert [parse_preference(t)[0] for t in ["1", " 2.", "Tie", "Summary 2 is better", "neither", None]] == \
        ["1", "2", "tie", "2", None, None]
    c = pd.DataFrame({
        "source_id": ["a"] * 4 + ["b"] * 2, "aspect": "fluency", "step": [0, 0, 1, 1, 0, 0],
        "order": ["12", "21"] * 3,
        # a/0: right in both orders; a/1: always picks position 1 (position bias); b/0: no verdict once
        "preferred": ["better", "better", "better", "worse", None, "better"],
    })
    out = comparison_accuracy(c).iloc[0]
    assert out["accuracy"] == pytest.approx(1 / 3) and out["n_pairs"] == 3
    assert out["position_consistency"] == pytest.approx(1 / 3)  # only a/0 gives the same verdict twice
    assert out["parsed"] == pytest.approx(5 / 6)


def test_expert_means_cover_16_systems_and_match_the_per_annotator_means():
    means = sa.load_expert_means()
    assert means["system"].nunique() == 16 and means["doc_id"].nunique() == 100
    assert len(means) == 100 * 16 * 4 and means["human"].between(1, 5).all()
    # the 12 abstractive systems: the mean of the three experts' ratings, whichever copy it comes from
    per = sa.load_ratings().groupby(["doc_id", "system", "aspect"])["rating"].mean()
    joined = means.set_index(["doc_id", "system", "aspect"])["human"].reindex(per.index)
    share_equal = float(np.isclose(joined.to_numpy(), per.to_numpy()).mean())
    assert share_equal == 1.0, share_equal  # the two copies agree exactly
