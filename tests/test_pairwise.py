"""The pairwise protocol (dhp.judging.pairwise): both orders, verdicts mapped back to the pair's labels,
position consistency, label probabilities — with scripted judges, the embedded model and a real
llama_cpp.server on SummEval references."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from dhp.backends import Backend, Completion
from dhp.errors import DHPError
from dhp.judging.pairwise import COMBINED_COLUMNS, COMPARE_COLUMNS, combine_pair_orders, compare_pairs, \
    label_probability, parse_preference


class Scripted(Backend):
    """Prefers the candidate holding GOOD, or always the first shown (position bias)."""

    identity = "scripted:pairwise"
    model = "scripted"
    deterministic = True

    def __init__(self, first_always=False, p_first=0.8):
        self.first_always, self.p_first, self.prompts = first_always, p_first, []

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            prompt = r.messages[0][1]
            self.prompts.append(prompt)
            first = re.search(r"Candidate 1:\n\n(.*?)\n\nCandidate 2", prompt, re.S).group(1)
            label = "1" if self.first_always or "GOOD" in first else "2"
            p = self.p_first if label == "1" else 1 - self.p_first
            top = [{"1": math.log(p), "2": math.log(1 - p), "tie": math.log(0.001)}] if r.logprobs else None
            c = Completion(text=label, top_logprobs=top, prompt_tokens=10, completion_tokens=1)
            out.append(c)
            if on_result:
                on_result(i, c)
        return out


def _pairs(n=3):
    return pd.DataFrame({"pair_id": [f"p{i}" for i in range(n)], "source": ["An article."] * n,
                         "candidate_1": [f"GOOD summary {i}" if i % 2 == 0 else f"weak summary {i}" for i in range(n)],
                         "candidate_2": [f"weak summary {i}" if i % 2 == 0 else f"GOOD summary {i}" for i in range(n)],
                         "unit": "summary"})


@pytest.mark.parametrize("reply,want", [
    ("1", "1"), (" 2.", "2"), ("Tie", "tie"), ("Candidate 2 is better", "2"), ('"1"', "1"),
    ("Both are fine but 2", None), ("", None), ("12", None), ("3", None),
])
def test_parse_preference_takes_a_leading_label_only(reply, want):
    got, why = parse_preference(reply)
    assert got == want
    assert (why == "") == (want is not None)


def test_label_probability_renormalises_over_the_two_labels():
    assert label_probability([{"1": math.log(0.3), " 2": math.log(0.1), "x": math.log(0.6)}]) == pytest.approx(0.75)
    assert math.isnan(label_probability([{"x": 0.0}])) and math.isnan(label_probability(None))


def test_both_orders_are_asked_and_mapped_back(tmp_path):
    judge = Scripted()
    v = compare_pairs(_pairs(), judge, mode="logprobs", cache=tmp_path / "c.sqlite")
    assert list(v.columns) == COMPARE_COLUMNS and len(v) == 6
    assert sorted(set(v["order"])) == ["12", "21"]
    # Each order shows the other candidate first.
    firsts = [re.search(r"Candidate 1:\n\n(.*?)\n", p).group(1) for p in judge.prompts]
    assert firsts[0] != firsts[1] and len(set(firsts)) == 6
    good = {"p0": "1", "p1": "2", "p2": "1"}
    assert all(v["verdict"] == v["pair_id"].map(good))  # the content-following judge, in the pair's labels
    # p_1 is about candidate 1 whatever the order: high when candidate 1 is the good one.
    assert v.loc[v.pair_id == "p0", "p_1"].tolist() == pytest.approx([0.8, 0.8], abs=1e-3)
    assert v.loc[v.pair_id == "p1", "p_1"].tolist() == pytest.approx([0.2, 0.2], abs=1e-3)
    c = combine_pair_orders(v)
    assert list(c.columns) == COMBINED_COLUMNS
    assert c["position_consistent"].all() and (c["combined"] == c["pair_id"].map(good)).all()


def test_a_position_biased_judge_is_inconsistent():
    v = compare_pairs(_pairs(), Scripted(first_always=True), mode="sample")
    c = combine_pair_orders(v)
    assert (c["verdict_12"] == "1").all() and (c["verdict_21"] == "2").all()
    assert (c["combined"] == "inconsistent").all() and not c["position_consistent"].any()
    assert v["p_1"].isna().all()  # sample mode reads no probabilities


def test_bad_inputs_name_the_fix():
    with pytest.raises(DHPError, match="candidate_2"):
        compare_pairs(_pairs().drop(columns="candidate_2"), Scripted())
    with pytest.raises(DHPError, match="duplicate"):
        compare_pairs(pd.concat([_pairs(), _pairs()]), Scripted())
    with pytest.raises(DHPError, match="mode"):
        compare_pairs(_pairs(), Scripted(), mode="likelihood")


def _summeval_pairs(n=2):
    from dhp.datasets import load_dataset
    from dhp.perturb import perturb

    ds = load_dataset("summeval", n_items=n, seed=0)
    p = perturb(ds, seed=0, perturbations=["sentence_reorder"])
    ok = p[(p.status == "ok") & (p.severity == "major")].set_index("item_id")["text"]
    ds = ds[ds.item_id.isin(ok.index)]
    return pd.DataFrame({"pair_id": ds.item_id, "source": ds.source, "candidate_1": ds.reference,
                         "candidate_2": ds.item_id.map(ok), "unit": "summary"})


@pytest.mark.slow
def test_real_data_embedded_and_server_agree(tmp_path, llama_server):
    """The same SummEval pairs through the embedded model and llama_cpp.server on loopback: every row has a
    verdict or a reason, and both backends read the same model the same way at temperature 0."""
    from dhp.backends import OpenAIBackend

    pairs = _summeval_pairs(1)  # one pair in both orders: each call reads a whole SummEval article, twice
    assert len(pairs) == 1
    emb = compare_pairs(pairs, "embedded", mode="logprobs", cache=tmp_path / "e.sqlite")
    srv = compare_pairs(pairs, OpenAIBackend("smollm2-135m", llama_server.base_url, concurrency=1),
                        mode="logprobs", cache=tmp_path / "s.sqlite")
    for v in (emb, srv):
        assert len(v) == 2 and set(v["order"]) == {"12", "21"}
        assert (v["verdict"].notna() | (v["failure"] != "")).all()
        assert v["reply"].notna().all()
        assert combine_pair_orders(v)["position_consistent"].dtype == bool
    assert emb["reply"].str.strip().tolist() == srv["reply"].str.strip().tolist()
