"""Decompose-and-aggregate (issue 12): parsing of weights and aspect scores, the aggregation and tie rules,
both-orders combination, agreement table, pairwise discernment, LLMBar loaders — with a scripted judge
where a model is not the point."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

from dhp.analysis.decomposition import agreement_table, combine_orders, dna_scores, pairwise_discernment
from dhp.backends import Backend, Completion
from dhp.datasets.llmbar import load_llmbar, load_pairwise
from dhp.errors import DHPError
from dhp.judging.strategies import parse_aspects, parse_pair, parse_weights, run_strategies, verdict_from


@pytest.mark.parametrize("text,expected,note", [
    ("50% 30% 20%", [0.5, 0.3, 0.2], ""),
    ("50 30 20", [0.5, 0.3, 0.2], ""),  # percent signs optional
    ("40% 40% 40%", [1 / 3] * 3, "renormalised: sum was 120"),
    ("Weights: 60%, 30%, 12%", [60 / 102, 30 / 102, 12 / 102], ""),  # within 100 ± 5: rescaled, not flagged
])
def test_parse_weights(text, expected, note):
    w, got_note = parse_weights(text, 3)
    assert w == pytest.approx(expected) and got_note == note and sum(w) == pytest.approx(1.0)


def test_parse_weights_missing_or_zero_is_nan_with_reason():
    assert parse_weights("50% 50%", 3)[0] is None and "2 weights for 3 aspects" in parse_weights("50% 50%", 3)[1]
    assert parse_weights("0 0 0", 3) == (None, "weights sum to 0")
    assert parse_weights(None, 3)[0] is None


def test_parse_pair_and_aspects():
    assert parse_pair("Output (a): 4\nOutput (b): 2") == (4.0, 2.0, "")
    assert parse_pair("output a: 3.5, output b = 5")[:2] == (3.5, 5.0)
    a, b, why = parse_pair("Output (a): 7\nOutput (b): 2")
    assert math.isnan(a) and "out of scale" in why
    assert "no 'Output (a)" in parse_pair("Both are fine.")[2]
    assert parse_aspects(" Is it correct?\n2. Is it complete?\n3) Is it concise?\n4. extra") == [
        "Is it correct?", "Is it complete?", "Is it concise?"]


def test_aggregation_and_tie_rules():
    assert verdict_from(3.2, 3.1) == "1" and verdict_from(2.0, 4.0) == "2" and verdict_from(3.0, 3.0) == "tie"
    assert verdict_from(math.nan, 3.0) is None


class Scripted(Backend):
    """Answers by prompt kind; aspect scores depend on which response is shown first (position bias)."""

    identity = "scripted:dna"
    model = "scripted"

    def __init__(self, weights="50% 30% 20%", bias_first=False):
        self.weights, self.bias_first, self.n = weights, bias_first, 0

    def reply(self, prompt: str) -> str:
        if "three short questions" in prompt:
            return " Is it correct?\n2. Is it complete?\n3. Is it polite?"
        if "How much should each question count" in prompt:
            return self.weights
        if "Score both responses on" in prompt:
            a = re.search(r"Output \(a\):\n\n(.*?)\n\nOutput \(b\)", prompt, re.S).group(1)
            good_first = "GOOD" in a
            if self.bias_first:
                return "Output (a): 5\nOutput (b): 1"
            return "Output (a): 5\nOutput (b): 2" if good_first else "Output (a): 2\nOutput (b): 5"
        if "Scores per question" in prompt:
            return "Output (a): 4\nOutput (b): 4"
        return "4" if "GOOD" in prompt else "2"

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            self.n += 1
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


def test_dna_end_to_end_with_a_scripted_judge():
    v, costs = run_strategies(items(), ["direct", "dna", "chain_of_aspects"], judge=Scripted(), progress=False)
    assert set(v["order"]) == {"12", "21"} and len(v) == 2 * 3 * 2
    d = v[v["strategy"] == "dna"].set_index(["item_id", "order"])
    # weights 0.5/0.3/0.2 over scores (5,5,5) vs (2,2,2): f = 5 and 2 whatever the order
    assert d.loc[("x1", "12"), "f1"] == pytest.approx(5.0) and d.loc[("x1", "21"), "f2"] == pytest.approx(2.0)
    assert d.loc[("x2", "21"), "verdict"] == "2" and d.loc[("x1", "21"), "verdict"] == "1"
    assert d.loc[("x1", "12"), "weights"] == "0.500;0.300;0.200"
    coa = v[v["strategy"] == "chain_of_aspects"]
    assert (coa["verdict"] == "tie").all()  # the scripted aggregator says 4 vs 4
    table = agreement_table(v, costs, judge="scripted", mode="logprobs").set_index("strategy")
    assert table.loc["dna", "agreement"] == 1.0 and table.loc["dna", "position_consistency"] == 1.0
    assert table.loc["chain_of_aspects", "agreement"] == 0.0
    calls = costs.set_index("strategy")["calls"]
    assert calls["direct"] == 2 * 2 and calls["dna"] == 2 + 2 * 3 * 2 + 2  # aspects, scores per order, weights


def test_position_bias_shows_as_inconsistent_verdicts():
    v, _ = run_strategies(items(), ["dna"], judge=Scripted(bias_first=True), progress=False)
    c = combine_orders(v)
    assert (c["combined"] == "inconsistent").all()  # first-shown always wins: the orders disagree
    t = agreement_table(v).iloc[0]
    assert t["agreement"] == 0.0 and t["position_consistency"] == 0.0
    assert t["agreement_order_12"] == 0.5 and t["agreement_order_21"] == 0.5


def test_unparsable_weights_give_nan_verdicts_with_the_reason():
    v, _ = run_strategies(items(), ["dna"], judge=Scripted(weights="all equally"), progress=False)
    assert v["verdict"].isna().all() and v["failure"].str.contains("0 weights for 3 aspects").all()
    t = agreement_table(v).iloc[0]
    assert t["no_verdict"] == 4 and t["agreement"] == 0.0  # counted, and a missing verdict is a miss


def test_pairwise_discernment_is_a_one_sided_sign_test():
    rows = [("original",)] * 7 + [("perturbed",)] * 1 + [("tie",)] * 1 + [(None,)] * 1
    c = pd.DataFrame({"dataset": "d", "judge": "j", "perturbation": "char_typo", "severity": "minor",
                      "level": "character", "winner": [r[0] for r in rows]})
    out = pairwise_discernment(c).iloc[0]
    p = binomtest(7, 8, 0.5, alternative="greater").pvalue
    assert (out["original_wins"], out["perturbed_wins"], out["ties"], out["unparsed"]) == (7, 1, 1, 1)
    assert out["p"] == pytest.approx(p) and out["D"] == pytest.approx(math.log(p) / math.log(0.05))
    assert out["share_original"] == pytest.approx(0.7)


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
    from dhp.analysis.discernment import discernment

    assert discernment(dna_scores(s, "expert"))["D"].notna().all()  # the DHP statistics read it


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
