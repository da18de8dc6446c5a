"""LLMBar's Rating and Swap evaluators live (issue 35 item 3), as LLMBar's evaluate.py runs them: Rating scores
each output alone and derives both orders' verdicts from the two integers (a tie is "2" in order 12 and "1" in
order 21; a reply that is not an integer gives no verdict here, where evaluate.py made one up); Swap asks a second
round, with both first-round explanations, only when the orders disagree, and the last round is the verdict.
Replies are scripted (calls.chat replaced); the templates are read from the data root."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dhp import calls
from dhp.analysis.decomposition import LLMBAR_TEMPLATE_SHA, llmbar_identity, view_strategy
from dhp.backends import ChatRequest
from dhp.backends.openai_server import OpenAIBackend
from dhp.datasets.llmbar import load_llmbar
from dhp.evaluate import plan
from dhp.judging.strategies import (LLMBAR_RATING, LLMBAR_STRATEGIES, LLMBAR_SWAP, llmbar_plan_requests,
                                    llmbar_protocol, llmbar_rating_verdicts, llmbar_requests, reverse_output_ab,
                                    run_strategies)


def _reply(text):
    return type("R", (), {"text": text, "reason": "refused", "prompt_tokens": 1})()


def _upstream_rating(r1, r2):
    """evaluate.py's Rating rule (annotate, the Rating branch), written out: int() of each reply, else 1 / 2."""
    try:
        s1, s2 = int(r1), int(r2)
        return ("1" if s1 > s2 else "2"), ("2" if s2 > s1 else "1")
    except Exception:
        return "1", "2"


@pytest.mark.parametrize("r1,r2", [("7", "3"), ("3", "7"), ("5", "5"), (" 8\n", "10"), ("+4", "-1"), ("1", "1")])
def test_rating_verdicts_equal_evaluate_py_on_integer_replies(r1, r2):
    s1, s2, v12, v21, failure = llmbar_rating_verdicts(r1, r2)
    assert (v12, v21) == _upstream_rating(r1, r2) and failure == ""
    assert (s1, s2) == (int(r1), int(r2))


@pytest.mark.parametrize("r1,r2", [("", "5"), ("8/10", "5"), ("Score: 7", "7"), ("7.5", "7"), ("5", None)])
def test_rating_without_an_integer_is_no_verdict_with_the_reason(r1, r2):
    s1, s2, v12, v21, failure = llmbar_rating_verdicts(r1, r2)
    # evaluate.py would say "1" then "2" here: a made-up verdict, deliberately not kept
    assert _upstream_rating(r1, r2 or "") == ("1", "2")
    assert v12 is None and v21 is None and "not an integer" in failure
    assert math.isnan(s1) or math.isnan(s2)


def test_reverse_output_ab_exchanges_both_spellings():
    text = "Output (a) is concise; output (b) rambles. So Output (a) is better than Output (b)."
    assert reverse_output_ab(text) == "Output (b) is concise; output (a) rambles. So Output (b) is better than Output (a)."
    assert reverse_output_ab(reverse_output_ab(text)) == text


def test_rating_live_asks_one_call_per_output_and_keeps_both_scores(monkeypatch):
    pairs = load_llmbar(["Natural"], n_items=3, seed=0)
    scripted = iter(["9", "4", "6", "6", "eight", "2"])  # pair 0: 1 wins; pair 1: tie; pair 2: no integer
    sent = []

    def fake_chat(judge, requests, cache=None, **kw):
        sent.extend(requests)
        return [_reply(next(scripted)) for _ in requests]

    monkeypatch.setattr(calls, "chat", fake_chat)
    verdicts, costs = run_strategies(pairs, ["llmbar:Rating"], judge="embedded", progress=False)
    assert len(sent) == 6 and int(costs["calls"].iloc[0]) == 6
    protocol = llmbar_protocol("Rating")
    assert sent == llmbar_requests(pairs, protocol)
    # the first call scores output_1 alone, the second output_2 alone, with Rating's decoding
    users = [dict(r.messages)["user"] for r in sent[:2]]
    it = pairs.iloc[0]
    assert it["output_1"] in users[0] and it["output_2"] not in users[0] and it["output_2"] in users[1]
    assert {r.max_tokens for r in sent} == {protocol.modules[-1].max_tokens} and {r.temperature for r in sent} == {0.0}
    v = verdicts.set_index(["item_id", "order"])
    ids = list(pairs["item_id"])
    assert (v.loc[(ids[0], "12"), "verdict"], v.loc[(ids[0], "21"), "verdict"]) == ("1", "1")
    assert (v.loc[(ids[1], "12"), "verdict"], v.loc[(ids[1], "21"), "verdict"]) == ("2", "1")  # a tie, as recorded
    assert pd.isna(v.loc[(ids[2], "12"), "verdict"]) and "not an integer" in v.loc[(ids[2], "12"), "failure"]
    assert v.loc[(ids[0], "12"), "f1"] == 9 and v.loc[(ids[0], "21"), "f2"] == 4
    assert costs["protocol"].iloc[0] == llmbar_identity("Rating", LLMBAR_TEMPLATE_SHA["Rating"])


def test_swap_asks_a_second_round_only_when_the_orders_disagree(monkeypatch):
    pairs = load_llmbar(["Natural"], n_items=2, seed=0)
    ids = list(pairs["item_id"])
    # round one: pair 0 disagrees (Output (a) wins in both orders: output_1, then output_2); pair 1 agrees on output_2
    first = ["X says Output (a) is better.", "Y says Output (a) is better.",
             "Output (b) is better.", "Output (a) is better."]
    batches = []

    def fake_chat(judge, requests, cache=None, **kw):
        batches.append(requests)
        texts = first if len(batches) == 1 else ["Output (b)", "Output (b)"]
        return [_reply(t) for t in texts]

    monkeypatch.setattr(calls, "chat", fake_chat)
    verdicts, costs = run_strategies(pairs, ["llmbar:Swap"], judge="embedded", progress=False)
    assert [len(b) for b in batches] == [4, 2] and int(costs["calls"].iloc[0]) == 6
    protocol = llmbar_protocol("Swap")
    r12, r21 = (dict(r.messages)["user"] for r in batches[1])
    # order 12: explanation_1 argues for output_1 (written in order 12, as is), explanation_2 for output_2 (written
    # in order 21: its Output (a) is output_2, shown here as Output (b))
    assert r12.index("X says Output (a) is better.") < r12.index("Y says Output (b) is better.")
    assert r21.index("Y says Output (a) is better.") < r21.index("X says Output (b) is better.")
    assert {r.max_tokens for r in batches[1]} == {protocol.modules[1].max_tokens}
    v = verdicts.set_index(["item_id", "order"])["verdict"]
    # the last round is the verdict: "Output (b)" is output_2 in order 12 and output_1 in order 21
    assert (v[(ids[0], "12")], v[(ids[0], "21")]) == ("2", "1")
    assert (v[(ids[1], "12")], v[(ids[1], "21")]) == ("2", "2")  # round one agreed: its verdict


def test_plan_prices_rating_and_swap(tmp_path):
    steps = plan("openai:m@http://127.0.0.1:9/v1", "quick", run_dir=str(tmp_path),
                 protocols=["llmbar:Rating", "llmbar:Rating_Metrics_Reference", "llmbar:Swap", "llmbar:Swap_CoT"])
    (step,) = steps
    assert "not estimated" not in step.note
    # 6 pairs: Rating 2 scores; Rating_Metrics_Reference 2 auxiliary + 2 scores; each Swap 2 + at most 2 more
    assert step.calls == 6 * 2 + 6 * 4 + 6 * 4 + 6 * 4


def test_every_llmbar_strategy_builds_its_requests():
    pairs = load_llmbar(["Natural"], n_items=2, seed=0)
    for s in LLMBAR_STRATEGIES:
        p = llmbar_protocol(s)
        n_aux = len(p.modules) - 1 if s not in LLMBAR_SWAP else 0
        per_pair = n_aux + 2 + (2 if s in LLMBAR_SWAP else 0)
        assert len(llmbar_plan_requests(pairs, p)) == 2 * per_pair, s


@pytest.mark.parametrize("name", LLMBAR_RATING + LLMBAR_SWAP)
def test_live_rating_and_swap_stand_in_the_recorded_judges_view(name):
    identity = llmbar_protocol(name).identity
    assert view_strategy(f"llmbar:{name}", identity) == name
    assert view_strategy(f"llmbar:{name}", identity + "x") == f"llmbar:{name}"


def test_llmbar_requests_send_no_seed_and_other_calls_keep_theirs():
    pairs = load_llmbar(["Natural"], n_items=1, seed=0)
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1")
    for s in ("Vanilla", "Rating", "Swap"):
        for req in llmbar_plan_requests(pairs, llmbar_protocol(s)):
            assert req.seed is None and "seed" not in backend.chat_body(req)
    # every other judge call still carries its seed (GEMBA's, DnA's own wordings)
    assert backend.chat_body(ChatRequest.make([{"role": "user", "content": "x"}], 4, 0.0, 0))["seed"] == 0


def test_a_too_long_call_is_retried_at_80_percent_max_tokens(monkeypatch):
    pairs = load_llmbar(["Natural"], n_items=1, seed=0)
    asked = []

    def fake_chat(judge, requests, cache=None, **kw):
        asked.append([r.max_tokens for r in requests])
        return [_reply("Output (a)") if r.max_tokens <= 30 else calls.CallFailure(
            "RuntimeError: context overflow: HTTP 400: ... Please reduce the length of the messages or completion.")
            for r in requests]

    monkeypatch.setattr(calls, "chat", fake_chat)
    verdicts, costs = run_strategies(pairs, ["llmbar:Vanilla"], judge="embedded", progress=False)
    assert asked == [[50, 50], [40, 40], [32, 32], [25, 25]]  # int(x * 0.8) each time, as evaluate.py
    assert list(verdicts["verdict"]) == ["1", "2"] and int(costs["calls"].iloc[0]) == 8


def test_a_call_too_long_even_at_one_token_is_the_empty_reply(monkeypatch):
    pairs = load_llmbar(["Natural"], n_items=1, seed=0)
    monkeypatch.setattr(calls, "chat", lambda judge, requests, cache=None, **kw: [calls.CallFailure(
        "RuntimeError: HTTP 400: too long. Please reduce the length of the messages or completion.") for _ in requests])
    verdicts, costs = run_strategies(pairs, ["llmbar:Vanilla"], judge="embedded", progress=False)
    # evaluate.py: the call at max_tokens 0 is refused ("0 is less than the minimum") and read as "": no verdict
    assert verdicts["verdict"].isna().all() and verdicts["failure"].str.startswith("no verdict").all()
    assert verdicts["failure"].str.contains("too long even at max_tokens 1").all()
    assert int(costs["calls"].iloc[0]) == 2 * 14  # 50, 40, 32, 25, 20, 16, 12, 9, 7, 5, 4, 3, 2, 1
    assert any("80 %" in d for d in llmbar_protocol("Vanilla").differences)


@pytest.mark.slow  # about 8 s: every request of 15 evaluators on the 419 pairs
def test_paper_dry_run_plans_every_llmbar_strategy(tmp_path):
    (step,) = plan("openai:m@http://127.0.0.1:9/v1", "paper", run_dir=str(tmp_path),
                   protocols=[f"llmbar:{s}" for s in LLMBAR_STRATEGIES])
    # per pair: 8 comparisons x 2 orders + 4 auxiliary steps; 5 Ratings x 2 outputs + 4 auxiliary steps; 2 Swaps x 4
    # (one instruction is in two pairs: evaluate.py asks its auxiliary steps for each pair, and so does a run)
    assert step.calls == 419 * 42
    assert all(llmbar_protocol(s).identity in step.note for s in LLMBAR_STRATEGIES)
