"""Decompose-and-aggregate (issues 12, 19): parsing of weights and aspect scores, the aggregation and tie rules,
both-orders combination, agreement table, pairwise discernment, LLMBar loaders — with a scripted judge
where a model is not the point."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

from dhp.analysis.decomposition import (BRIDGE_COLUMNS, COMPARISON_COLUMNS, PAIRWISE_D_COLUMNS, agreement_table,
                                        bridge_table, combine_orders, dna_scores, equal_weights,
                                        pairwise_discernment, task_weights)
from dhp.analysis.discernment import discernment
from dhp.backends import Backend, Completion
from dhp.datasets.llmbar import load_llmbar, load_pairwise
from dhp.errors import DHPError
from dhp.judging.strategies import (VERDICT_COLUMNS, parse_aspects, parse_choice, parse_pair, parse_weights,
                                    run_strategies, verdict_from)


@pytest.mark.parametrize("text,expected,note", [
    ("50% 30% 20%", [0.5, 0.3, 0.2], ""),
    ("50 30 20", [0.5, 0.3, 0.2], ""),  # percent signs optional
    ("1. 50% 2. 30% 3. 20%", [0.5, 0.3, 0.2], ""),  # list indices are not weights
    ("1. 50\n2. 30\n3. 20", [0.5, 0.3, 0.2], ""),
    ("Weights: 60%, 30%, 12%", [60 / 102, 30 / 102, 12 / 102], "renormalised: sum was 102"),  # used, flagged
    ("50% 30% 20% (total: 100%)", [0.5, 0.3, 0.2], ""),  # a trailing total is not a fourth weight
])
def test_parse_weights(text, expected, note):
    w, got_note = parse_weights(text, 3)
    assert w == pytest.approx(expected) and got_note == note and sum(w) == pytest.approx(1.0)


@pytest.mark.parametrize("text,why", [
    ("50% 50%", "2 percentages for 3 aspects"),
    ("40% 40% 40%", "weights sum to 120, not 100"),  # too far off 100 to be renormalised silently
    ("0 0 0", "weights sum to 0"),
    ("Question 1: 50, Question 2: 30, Question 3: 20", "6 numbers for 3 aspects"),  # which are weights? ambiguous
    ("50% 30% 20% 10%", "4 percentages for 3 aspects"),
    ("60% 60% -20%", "negative weight"),
    (None, "0 numbers for 3 aspects"),
])
def test_weights_that_cannot_be_read_unambiguously_are_none_with_the_reason(text, why):
    w, got = parse_weights(text, 3)
    assert w is None and why in got


def test_parse_pair_choice_and_aspects():
    assert parse_pair("Output (a): 4\nOutput (b): 2") == (4.0, 2.0, "")
    assert parse_pair("output a: 3.5, output b = 5")[:2] == (3.5, 5.0)
    a, b, why = parse_pair("Output (a): 7\nOutput (b): 2")
    assert math.isnan(a) and "out of scale" in why
    assert "no 'Output (a)" in parse_pair("Both are fine.")[2]
    cot = "At first glance Output (a): 1 and Output (b): 1, but (a) answers.\nOutput (a): 5\nOutput (b): 2"
    assert parse_pair(cot, last=True)[:2] == (5.0, 2.0) and parse_pair(cot)[:2] == (1.0, 1.0)
    assert parse_aspects(" Is it correct?\n2. Is it complete?\n3) Is it concise?\n4. extra") == [
        "Is it correct?", "Is it complete?", "Is it concise?"]


@pytest.mark.parametrize("reply,want", [
    ("Output (a)", "a"), ("Output (b)", "b"), (" output (B).", "b"), ("**Output (a)** is better", "a"),
    ("Output a", "a"), ("(b)", "b"), ("Sure.\nOutput (b)", "b"),
    ("Output (a)\nOutput (b)", None),  # names both: ambiguous (LLMBar's parser would take (a))
    ("I prefer Output (a)", None),  # LLMBar reads the label at a line start only
    ("a good answer", None), ("", None), (None, None),
])
def test_parse_choice_reads_llmbars_answer_format(reply, want):
    got, why = parse_choice(reply)
    assert got == want and (why == "") == (want is not None)


def test_aggregation_and_tie_rules():
    assert verdict_from(3.2, 3.1) == "1" and verdict_from(2.0, 4.0) == "2" and verdict_from(3.0, 3.0) == "tie"
    assert verdict_from(math.nan, 3.0) is None


class Scripted(Backend):
    """Answers by prompt kind and prefers the response holding GOOD — or, with bias_first, always the one shown
    first (position bias). ``aspects``: its aspect list; ``unscorable``: an aspect it gives no score for."""

    identity = "scripted:dna"
    model = "scripted"

    def __init__(self, weights="50% 30% 20%", bias_first=False,
                 aspects=" Is it correct?\n2. Is it complete?\n3. Is it polite?", unscorable=None):
        self.weights, self.bias_first, self.aspects, self.unscorable = weights, bias_first, aspects, unscorable
        self.prompts = []

    def reply(self, prompt: str) -> str:
        if "three short questions" in prompt:
            return self.aspects
        if "How much should each question count" in prompt:
            return self.weights
        if "Scores per question" in prompt:
            return "Output (a): 4\nOutput (b): 4"
        if "Output (a):" in prompt:  # every prompt showing both responses
            a = re.search(r"Output \(a\):\n\n(.*?)\n\nOutput \(b\)", prompt, re.S).group(1)
            first = self.bias_first or "GOOD" in a
            if "Score both responses on" in prompt:
                if self.unscorable and self.unscorable in prompt:
                    return "I cannot say."
                return "Output (a): 5\nOutput (b): 1" if self.bias_first else (
                    "Output (a): 5\nOutput (b): 2" if first else "Output (a): 2\nOutput (b): 5")
            if "Which output is better" in prompt:
                return "Output (a)" if first else "Output (b)"
            scores = "Output (a): 5\nOutput (b): 2" if first else "Output (a): 2\nOutput (b): 5"
            if "First explain" in prompt:  # an explanation quoting other numbers before the scores
                return "Output (a): 3 at a glance, Output (b): 3 too; on reflection one follows it.\n" + scores
            return scores
        return "4" if "GOOD" in prompt else "2"  # one response alone (direct_pointwise)

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            self.prompts.append(r.messages[-1][1])
            text = self.reply(r.messages[-1][1])
            res = Completion(text, [{text[:1]: -0.01}] if r.logprobs else None, 20, 2)
            out.append(res)
            if on_result:
                on_result(i, res)
        return out


def items():
    return pd.DataFrame({"dataset": "llmbar", "subset": "Natural", "item_id": ["x1", "x2"],
                         "instruction": ["Say hello.", "Count to three."],
                         "output_1": ["GOOD answer", "bad answer"], "output_2": ["bad answer", "GOOD answer"],
                         "label": ["1", "2"]})


ALL = ["dhp_vanilla", "direct", "cot", "direct_pointwise", "dna", "chain_of_aspects"]


def test_every_strategy_end_to_end_with_a_scripted_judge():
    judge = Scripted()
    v, costs = run_strategies(items(), ALL, judge=judge, progress=False)
    assert list(v.columns) == VERDICT_COLUMNS and len(v) == 2 * len(ALL) * 2
    assert v[["item_id", "order"]].head(4).values.tolist() == [["x1", "12"], ["x1", "21"], ["x2", "12"], ["x2", "21"]]
    d = v[v["strategy"] == "dna"].set_index(["item_id", "order"])
    # weights 0.5/0.3/0.2 over scores (5,5,5) vs (2,2,2): f = 5 and 2 whatever the order
    assert d.loc[("x1", "12"), "f1"] == pytest.approx(5.0) and d.loc[("x1", "21"), "f2"] == pytest.approx(2.0)
    assert d.loc[("x2", "21"), "verdict"] == "2" and d.loc[("x1", "21"), "verdict"] == "1"
    assert d.loc[("x1", "12"), "weights"] == "0.500;0.300;0.200"
    coa = v[v["strategy"] == "chain_of_aspects"]
    assert (coa["verdict"] == "tie").all() and (coa["failure"] == "").all()  # the scripted aggregator says 4 vs 4
    table = agreement_table(v, costs, judge="scripted", mode="logprobs").set_index("strategy")
    for s in ("dhp_vanilla", "direct", "cot", "direct_pointwise", "dna"):
        assert table.loc[s, "agreement"] == 1.0 and table.loc[s, "position_consistency"] == 1.0, s
    assert table.loc["chain_of_aspects", "agreement"] == 0.0 and table.loc["chain_of_aspects", "ties"] == 4
    calls = costs.set_index("strategy")["calls"]
    # one call per item and order for the pair prompts; two per item for direct_pointwise; dna: aspects,
    # 3 aspects x 2 orders of scoring, weights
    assert calls[["dhp_vanilla", "direct", "cot", "direct_pointwise"]].tolist() == [4, 4, 4, 4]
    assert calls["dna"] == 2 + 2 * 3 * 2 + 2 and calls["chain_of_aspects"] == 2 + 2 * 3 * 2 + 4
    assert table.loc["dna", "calls"] == calls["dna"]


def test_direct_and_cot_show_both_responses_in_one_prompt_per_order():
    judge = Scripted()
    run_strategies(items().head(1), ["direct", "cot", "dhp_vanilla"], judge=judge, progress=False)
    assert len(judge.prompts) == 6
    for p in judge.prompts:  # both responses in each prompt, the first-shown one alternating with the order
        assert "GOOD answer" in p and "bad answer" in p
    firsts = [re.search(r"Output \(a\):\n\n(.*?)\n", p).group(1) for p in judge.prompts]
    assert firsts == ["GOOD answer", "bad answer"] * 3


def test_position_bias_shows_for_every_pairwise_strategy_but_not_pointwise():
    """A judge that always prefers the response shown first: the pairwise strategies' orders disagree on every
    item; direct_pointwise never shows two responses, so it cannot show position bias (its consistency is 1 by
    construction — why it is not DnA-Eval's direct baseline)."""
    v, _ = run_strategies(items(), ["dhp_vanilla", "direct", "cot", "dna", "direct_pointwise"],
                          judge=Scripted(bias_first=True), progress=False)
    t = agreement_table(v).set_index("strategy")
    for s in ("dhp_vanilla", "direct", "cot", "dna"):
        assert (combine_orders(v[v["strategy"] == s])["combined"] == "inconsistent").all(), s
        assert t.loc[s, "position_consistency"] == 0.0 and t.loc[s, "agreement_both"] == 0.0, s
        # right in one order of each item: LLMBar's average accuracy is 0.5, not 0
        assert t.loc[s, ["agreement_order_12", "agreement_order_21", "agreement"]].tolist() == [0.5, 0.5, 0.5]
    assert t.loc["direct_pointwise", "position_consistency"] == 1.0


def test_unparsable_weights_give_nan_verdicts_with_the_reason():
    v, _ = run_strategies(items(), ["dna"], judge=Scripted(weights="all equally"), progress=False)
    assert v["verdict"].isna().all() and v["failure"].str.contains("weights: 0 numbers for 3 aspects").all()
    t = agreement_table(v).iloc[0]
    assert t["no_verdict"] == 4 and t["agreement"] == 0.0  # counted, and a missing verdict is a miss


def test_numbered_weights_are_read_as_percentages_not_list_indices():
    v, _ = run_strategies(items(), ["dna"], judge=Scripted(weights="1. 50% 2. 30% 3. 20%"), progress=False)
    assert (v["weights"] == "0.500;0.300;0.200").all() and (v["failure"] == "").all()


@pytest.mark.parametrize("judge_kw,why", [
    ({"unscorable": "polite"}, "no score on aspect(s) [3]"),
    ({"aspects": " Is it correct?\n2. Is it complete?"}, "2 aspects proposed, 3 needed"),
])
def test_chain_of_aspects_refuses_what_dna_refuses_without_a_call(judge_kw, why):
    judge = Scripted(**judge_kw)
    v, costs = run_strategies(items(), ["dna", "chain_of_aspects"], judge=judge, progress=False)
    assert v["verdict"].isna().all() and v["failure"].str.contains(why, regex=False).all()
    assert not any("Scores per question" in p for p in judge.prompts)  # no aggregation call with "nan" in it
    assert not any(": nan" in p for p in judge.prompts)
    if "aspects" in judge_kw:  # too few aspects: no scoring or weighting calls either
        assert costs.set_index("strategy")["calls"].tolist() == [2, 2]


def test_agreement_table_reproduces_llmbars_statistics_on_a_hand_example():
    """Five items; the expected values are counted by hand with LLMBar's evaluate.py rules (correct_False,
    correct_True, correct_average, correct_both, equal — where None == None counts as equal)."""
    verdict_12 = ["1", "1", "1", None, "2"]
    verdict_21 = ["1", "2", "1", None, None]
    label = ["1", "1", "2", "2", "2"]
    rows = [{"item_id": f"i{i}", "subset": "Natural", "strategy": "dhp_vanilla", "order": o, "verdict": v, "label": lab}
            for i, (a, b, lab) in enumerate(zip(verdict_12, verdict_21, label)) for o, v in (("12", a), ("21", b))]
    t = agreement_table(pd.DataFrame(rows)).iloc[0]
    assert t["agreement_order_12"] == pytest.approx(3 / 5)   # i0, i1, i4
    assert t["agreement_order_21"] == pytest.approx(1 / 5)   # i0
    assert t["agreement"] == pytest.approx((3 + 1) / 10)     # correct_average
    assert t["agreement_both"] == pytest.approx(1 / 5)       # i0
    assert t["equal_llmbar"] == pytest.approx(3 / 5)         # i0, i2, and i3 (None == None)
    assert t["position_consistency"] == pytest.approx(2 / 5)  # i0, i2: two missing verdicts are no agreement
    assert (t["n"], t["no_verdict"], t["ties"]) == (5, 3, 0)
    # a missing row for an order counts like a missing verdict
    t2 = agreement_table(pd.DataFrame(rows).drop(index=9)).iloc[0]
    assert t2[["agreement", "equal_llmbar", "no_verdict"]].tolist() == [t["agreement"], t["equal_llmbar"], 3]


def test_agreement_table_groups_by_judge_and_source_when_present_and_rejects_duplicates():
    rows = [{"item_id": "i0", "subset": "Natural", "strategy": "Vanilla", "order": o, "verdict": v, "label": "1",
             "judge": j, "mode": "recorded", "source": "llmbar"}
            for j, vs in (("GPT-4", ("1", "1")), ("PaLM2", ("2", "1"))) for o, v in zip(("12", "21"), vs)]
    t = agreement_table(pd.DataFrame(rows)).set_index("judge")
    assert list(t.reset_index().columns[:3]) == ["judge", "mode", "source"]
    assert t.loc["GPT-4", "agreement"] == 1.0 and t.loc["PaLM2", "agreement"] == 0.5
    assert (t["mode"] == "recorded").all()
    with pytest.raises(DHPError, match="duplicate"):
        agreement_table(pd.DataFrame(rows).drop(columns="judge"))
    with pytest.raises(DHPError, match="lacks column"):
        agreement_table(pd.DataFrame(rows).drop(columns="label"))


def test_agreement_table_reproduces_a_published_llmbar_statistics_file():
    """PaLM2 / Vanilla_NoRules on LLMBar Natural, the recorded verdicts (6 of 200 missing). Expected values:
    LLMBar's own statistics.json for this run (github.com/princeton-nlp/LLMBar @ 900616b,
    Dataset/LLMBar/Natural/evaluators/PaLM2/Vanilla_NoRules/statistics.json): correct_False 77/100,
    correct_True 87/100, correct_average 82.0%, correct_both 74/100, equal 84/100."""
    import json

    from conftest import DATA

    f = DATA / "llmbar_judgments/LLMBar/Natural/evaluators/PaLM2/Vanilla_NoRules/result.json"
    rows = [{"item_id": i, "subset": "Natural", "strategy": "Vanilla_NoRules", "order": o, "label": str(x["label"]),
             "verdict": x["results"][-1][f"swap = {swap}"]["winner"]}
            for i, x in enumerate(json.loads(f.read_text())) for o, swap in (("12", False), ("21", True))]
    t = agreement_table(pd.DataFrame(rows)).iloc[0]
    assert t[["agreement_order_12", "agreement_order_21", "agreement", "agreement_both", "equal_llmbar"]].tolist() == \
        pytest.approx([0.77, 0.87, 0.82, 0.74, 0.84])
    assert t["no_verdict"] == 6 and t["position_consistency"] == pytest.approx(0.81)


def _comparisons(winners_op, winners_po, judge="j", mode="logprobs"):
    n = len(winners_op)
    return pd.DataFrame({"dataset": "d", "judge": judge, "mode": mode, "item_id": [f"i{k}" for k in range(n)] * 2,
                         "perturbation": "char_typo", "severity": "minor", "level": "character",
                         "order": ["op"] * n + ["po"] * n, "winner": list(winners_op) + list(winners_po),
                         "p_1": math.nan, "failure": ""})[COMPARISON_COLUMNS]


def test_pairwise_discernment_counts_one_outcome_per_item():
    out = pairwise_discernment(_comparisons(["original"] * 5, ["original"] * 5)).iloc[0]
    # 5 items won in both orders are 5 trials, not 10: p = 0.5^5, D = log_0.05(0.03125) = 1.157 (not 2.31)
    assert out["D"] == pytest.approx(1.157, abs=1e-3)
    assert out["p"] == pytest.approx(0.5 ** 5) and out["D"] == pytest.approx(math.log(0.5 ** 5) / math.log(0.05))
    assert (out["n_items"], out["original_wins"]) == (5, 5)


def test_pairwise_discernment_is_a_one_sided_sign_test_on_consistent_items():
    op = ["original"] * 7 + ["perturbed", "tie", "original", None]
    po = ["original"] * 7 + ["perturbed", "tie", "perturbed", "original"]
    out = pairwise_discernment(_comparisons(op, po)).iloc[0]
    p = binomtest(7, 8, 0.5, alternative="greater").pvalue
    counts = ["original_wins", "perturbed_wins", "ties", "inconsistent", "unparsed"]
    assert out[counts].tolist() == [7, 1, 1, 1, 1]
    assert out["p"] == pytest.approx(p) and out["D"] == pytest.approx(math.log(p) / math.log(0.05))
    assert out["share_original"] == pytest.approx(7 / 11)
    with pytest.raises(DHPError, match="duplicate"):
        pairwise_discernment(pd.concat([_comparisons(op, po), _comparisons(op, po)]))
    with pytest.raises(DHPError, match=r"lacks column\(s\) \['mode'\]"):
        pairwise_discernment(_comparisons(op, po).drop(columns="mode"))


def test_pairwise_discernment_keeps_judges_and_modes_apart():
    """Two judges (or one judge in two modes) in one comparisons table: one row each, each its own sign test."""
    both = pd.concat([_comparisons(["original"] * 5, ["original"] * 5, judge="a"),
                      _comparisons(["perturbed"] * 5, ["perturbed"] * 5, judge="b"),
                      _comparisons(["original"] * 3 + ["tie"] * 2, ["original"] * 3 + ["tie"] * 2, judge="a",
                                   mode="sample")])
    table = pairwise_discernment(both)
    assert list(table.columns) == PAIRWISE_D_COLUMNS and len(table) == 3
    out = table.set_index(["judge", "mode"])
    assert out.loc[("a", "logprobs"), "p"] == pytest.approx(0.5 ** 5)
    assert out.loc[("b", "logprobs"), "p"] == pytest.approx(1.0) and out.loc[("b", "logprobs"), "D"] == 0.0
    assert out.loc[("a", "sample"), ["original_wins", "ties"]].tolist() == [3, 2]
    assert out.loc[("a", "sample"), "p"] == pytest.approx(0.5 ** 3)
    assert pairwise_discernment(_comparisons([], [])).empty  # no comparison: no row, not a 0


def test_dna_scores_is_a_weighted_sum_of_metric_scores_and_nan_when_one_is_missing():
    from test_stats_fixtures import synth_scores

    s = synth_scores(n=3, seed=1)
    w = pd.DataFrame({"task": "summarization", "metric": ["coherence", "consistency", "fluency", "relevance"],
                      "weight": [4, 3, 2, 1]})
    out = dna_scores(s, w)
    assert (out["metric"] == "dna").all() and len(out) == len(s) // 4
    one = s[(s["item_id"] == "i0") & (s["perturbation"] == "original")].set_index("metric")["score"]
    want = (0.4 * one["coherence"] + 0.3 * one["consistency"] + 0.2 * one["fluency"] + 0.1 * one["relevance"])
    got = out[(out["item_id"] == "i0") & (out["perturbation"] == "original")]["score"].iloc[0]
    assert got == pytest.approx(want)
    s.loc[s.index[0], "score"] = np.nan
    assert dna_scores(s, w)["score"].isna().sum() == 1
    from dhp.weights import load_expert_weights

    ew = load_expert_weights()
    assert discernment(dna_scores(s, task_weights(ew)), expert_weights=ew).table["D"].notna().all()  # DHP reads it
    with pytest.raises(DHPError, match=r"No DnA weight for metric\(s\) \['relevance'\]"):
        dna_scores(s, w[w["metric"] != "relevance"])


def test_dna_weights_expert_average_over_perturbations_and_equal():
    ew = pd.DataFrame({"task": "summarization", "perturbation": ["a", "a", "b", "b"],
                       "metric": ["coherence", "fluency"] * 2, "votes": 1, "weight": [0.8, 0.2, 0.4, 0.6]})
    w = task_weights(ew).set_index("metric")["weight"]
    assert w.to_dict() == pytest.approx({"coherence": 0.6, "fluency": 0.4})
    from test_stats_fixtures import synth_scores

    s = synth_scores(n=2, seed=0)
    eq = equal_weights(s)
    assert set(eq["metric"]) == set(s["metric"]) and (eq["weight"] == 1.0).all()
    out = dna_scores(s, eq)  # equal weights: the mean of the metric scores
    mean = s.groupby(["item_id", "perturbation", "severity"])["score"].mean()
    assert np.allclose(out.set_index(["item_id", "perturbation", "severity"])["score"].reindex(mean.index), mean)


def test_bridge_table_stacks_the_three_d_with_their_kind():
    from test_stats_fixtures import synth_scores

    s = synth_scores(n=6, seed=2)
    direct = discernment(s).table
    pairwise = pairwise_discernment(_comparisons(["original"] * 5, ["original"] * 5))
    out = bridge_table(direct, pd.DataFrame(), pairwise)
    assert list(out.columns) == BRIDGE_COLUMNS
    assert (out["kind"].value_counts().to_dict() == {"direct": len(direct), "pairwise": 1})
    got = out[out["kind"] == "direct"].set_index(["perturbation", "severity"])["D"]
    assert np.allclose(got, direct.set_index(["perturbation", "severity"])["D"].reindex(got.index))
    assert bridge_table(None, None, pd.DataFrame()).columns.tolist() == BRIDGE_COLUMNS


def test_agreement_table_of_no_verdicts_is_empty_not_zero():
    empty = pd.DataFrame(columns=["judge", "mode", *VERDICT_COLUMNS, "source"])
    t = agreement_table(empty)
    assert t.empty and list(t.columns[:3]) == ["judge", "mode", "source"]


def test_llmbar_loader_counts_and_checksums(tmp_path):
    t = load_llmbar(["Natural", "Adversarial"])
    assert t.groupby("subset").size().to_dict() == {"Adversarial_GPTInst": 92, "Adversarial_GPTOut": 47,
                                                   "Adversarial_Manual": 46, "Adversarial_Neighbor": 134,
                                                   "Natural": 100}
    assert set(t["label"]) == {"1", "2"} and t["item_id"].is_unique
    (tmp_path / "llmbar").mkdir()
    (tmp_path / "llmbar" / "Natural.json").write_text('[{"input": "x", "output_1": "a", "output_2": "b", "label": 1}]')
    with pytest.raises(DHPError, match="sha256"):
        load_llmbar("Natural", data_dir=tmp_path)
    with pytest.raises(DHPError, match="Unknown LLMBar subset"):
        load_llmbar("Nope")


@pytest.mark.parametrize("content,match", [
    ("item_id,instruction,output_1,label\n1,a,b,1\n", "lacks column"),
    ("item_id,instruction,output_1,output_2,label\n1,a,b,c,1\n1,a,b,c,2\n", "row 2: duplicate item_id"),
    ("item_id,instruction,output_1,output_2,label\n1,a,,c,1\n", "row 1: empty output_1"),
    ("item_id,instruction,output_1,output_2,label\n1,a,b,c,first\n", "row 1: label 'first'"),
])
def test_bring_your_own_pairwise_file_bad_inputs(tmp_path, content, match):
    f = tmp_path / "pairs.csv"
    f.write_text(content)
    with pytest.raises(DHPError, match=match):
        load_pairwise(f)


def test_bring_your_own_pairwise_file_with_ties(tmp_path):
    f = tmp_path / "pairs.jsonl"
    f.write_text('{"item_id": "p1", "instruction": "i", "output_1": "a", "output_2": "b", "label": "Tie"}\n')
    t = load_pairwise(f)
    assert t["label"].tolist() == ["tie"] and t["subset"].tolist() == ["mine"]
