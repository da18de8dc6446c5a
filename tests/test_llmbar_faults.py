"""LLMBar's evaluators under real faults (issue 40), as LLMBar's evaluate.py handles them: a call refused as too long
is asked again at 80 % max_tokens, a content-filter refusal is an empty reply, a reply without content reads as "" —
answers of the protocol, which the circuit breaker does not count; each strategy and pair asks its own calls (sharing
identical requests is an explicit option, named on the protocol); the plan counts the calls a run makes; a dry run
writes nothing. The HTTP judge is the real OpenAI backend over a scripted transport (nothing leaves the process), or an
in-process scripted backend. The templates are read from the data root."""

from __future__ import annotations

import json

import httpx
import pandas as pd
import pytest

from dhp import calls, methods
from dhp.backends import Backend, Completion
from dhp.backends.openai_server import OpenAIBackend
from dhp.cache import Cache
from dhp.datasets.llmbar import load_llmbar
from dhp.errors import DHPError
from dhp.evaluate import evaluate
from dhp.judging import strategies
from dhp.judging.strategies import (LLMBAR_SHARED, LLMBAR_STRATEGIES, LLMBAR_SWAP, llmbar_protocol,
                                    llmbar_rating_verdicts, llmbar_requests, run_strategies)

URL = "http://10.20.30.40:8000/v1"  # never contacted: every request goes to the scripted transport
TOO_LONG = ("This model's maximum context length is 8192 tokens. However, you requested 8230 tokens (8180 in the "
            "messages, 50 in the completion). Please reduce the length of the messages or completion.")
FILTERED = ("The response was filtered due to the prompt triggering Azure OpenAI's content management policy. "
            "Please modify your prompt and retry.")


def _server(reply, seen: list):
    """An OpenAI-compatible server: ``reply(body)`` gives the reply text, or (status, message) for an error."""
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [{"id": "m", "object": "model"}]})
        body = json.loads(request.content)
        seen.append(body)
        out = reply(body)
        if isinstance(out, tuple):
            return httpx.Response(out[0], json={"error": {"message": out[1], "type": "invalid_request_error"}})
        return httpx.Response(200, json={
            "id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": out}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}})
    return httpx.MockTransport(handle)


def _judge(reply, seen, concurrency=8):
    return OpenAIBackend("m", URL, transport=_server(reply, seen), concurrency=concurrency, max_retries=0)


@pytest.mark.parametrize("concurrency", [1, 8])
def test_25_pairs_too_long_at_50_tokens_complete_as_upstream(concurrency):
    pairs = load_llmbar(["Natural"], n_items=25, seed=0)
    seen: list = []
    judge = _judge(lambda b: (400, TOO_LONG) if b["max_tokens"] > 40 else "Output (a)", seen, concurrency)
    verdicts, costs = run_strategies(pairs, ["llmbar:Vanilla"], judge=judge, cache=Cache(None))
    # evaluate.py: 50 calls refused at max_tokens 50, the same 50 asked at int(50 x 0.8) = 40: 100 calls, every verdict
    assert sorted(b["max_tokens"] for b in seen) == [40] * 50 + [50] * 50
    assert verdicts["verdict"].notna().all() and (verdicts["failure"] == "").all() and len(verdicts) == 50
    assert int(costs["calls"].iloc[0]) == 100


def test_without_the_protocols_refusal_rule_the_breaker_would_stop_that_run(monkeypatch):
    # control: the same refusals counted as failures stop the run after 20 in a row (what the issue saw)
    monkeypatch.setattr(strategies, "llmbar_handled", lambda reason: False)
    pairs = load_llmbar(["Natural"], n_items=25, seed=0)
    judge = _judge(lambda b: (400, TOO_LONG) if b["max_tokens"] > 40 else "Output (a)", [], 1)
    with pytest.raises(DHPError, match="20 calls .* failed in a row"):
        run_strategies(pairs, ["llmbar:Vanilla"], judge=judge, cache=Cache(None))


def test_25_content_filter_refusals_on_auxiliary_calls_go_on_with_an_empty_text():
    pairs = load_llmbar(["Natural"], n_items=25, seed=0)
    protocol = llmbar_protocol("Reference")
    aux_tokens = protocol.auxiliary[0].max_tokens
    seen: list = []
    judge = _judge(lambda b: (400, FILTERED) if b["max_tokens"] == aux_tokens else "Output (b)", seen)
    verdicts, costs = run_strategies(pairs, ["llmbar:Reference"], judge=judge, cache=Cache(None))
    assert len(seen) == 25 + 50 and verdicts["verdict"].notna().all()
    # the verdict step was asked with an empty auxiliary text, as evaluate.py goes on
    expected = llmbar_requests(pairs, protocol, {i: [""] for i in pairs["item_id"]})
    # (the same requests; the engine may send them in another order than the plan lists them)
    canon = lambda msgs: json.dumps(msgs, sort_keys=True)  # noqa: E731
    assert sorted(canon(b["messages"]) for b in seen[25:]) == sorted(canon(r.message_dicts()) for r in expected)


class Replies(Backend):
    """An in-process judge: ``reply(request)`` gives the text (None: a reply without content) or raises."""

    identity = "scripted:llmbar"
    model = "scripted"
    deterministic = True

    def __init__(self, reply):
        self.reply, self.seen = reply, []

    def cache_identity(self) -> dict:
        return {"backend": self.identity}

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            self.seen.append(r)
            try:
                res = Completion(self.reply(r), None, 3, 1, 3)
            except RuntimeError as e:
                res = e
            out.append(res)
            if on_result is not None:
                on_result(i, res)
        return out


def test_a_reply_without_content_reads_as_empty():
    pairs = load_llmbar(["Natural"], n_items=2, seed=0)
    judge = Replies(lambda r: None)  # e.g. finish_reason content_filter, no content
    verdicts, costs = run_strategies(pairs, ["llmbar:Reference", "llmbar:Rating", "llmbar:Swap"], judge=judge,
                                     cache=Cache(None))
    # read as "": no verdict, no retry, no second Swap round (evaluate.py reads "" and parses it)
    assert len(judge.seen) == 2 * (1 + 2) + 2 * 2 + 2 * 2
    assert verdicts["verdict"].isna().all()
    assert not verdicts["failure"].str.contains("call failed").any()


def _pairs_sharing_an_instruction() -> pd.DataFrame:
    pairs = load_llmbar(["Natural"], n_items=2, seed=0)
    twin = pairs.iloc[[0]].assign(item_id="twin-of-0")  # like Adversarial_Neighbor-94 and GPTInst-78
    return pd.concat([pairs, twin], ignore_index=True)


def test_each_strategy_and_pair_asks_its_own_calls_unless_sharing_is_named():
    pairs = _pairs_sharing_an_instruction()
    names = ["llmbar:CoT", "llmbar:Swap", "llmbar:Metrics", "llmbar:Rating_Metrics"]
    # position-biased: Swap's orders disagree, a second round for every pair
    own = Replies(lambda r: "Output (a) is better.")
    verdicts, costs = run_strategies(pairs, names, judge=own, cache=Cache(None))
    # CoT 2 per pair; Swap 2 + 2; Metrics 1 + 2; Rating_Metrics 1 + 2 — every pair, the twin included
    assert len(own.seen) == 3 * (2 + 4 + 3 + 3) == int(costs["calls"].sum())
    assert not any(LLMBAR_SHARED in p for p in costs["protocol"])
    shared = Replies(lambda r: "Output (a) is better.")
    v2, c2 = run_strategies(pairs, names, judge=shared, cache=Cache(None), share_requests=True)
    # shared: Swap's first round is CoT's, the Metrics questions are asked once per instruction, the twin gets
    # nothing of its own but Rating's scores (the same requests): fewer calls, and the protocol says so
    assert len(shared.seen) < len(own.seen)
    assert len({(r.messages, r.max_tokens) for r in shared.seen}) == len(shared.seen)
    assert all(p.endswith(f"[shared: {LLMBAR_SHARED}]") for p in c2["protocol"])
    assert (v2["verdict"].fillna("-").values == verdicts["verdict"].fillna("-").values).all()


def _config(tmp_path, n_pairs=3, strategies_=tuple(f"llmbar:{s}" for s in LLMBAR_STRATEGIES), **kw):
    m = methods.get("decompose_aggregate")
    return m, m.config({"subsets": ["Natural"], "n_pairs": n_pairs, "strategies": list(strategies_),
                        "dhp_items": 0, "judge": "embedded"}, run_dir=str(tmp_path / "run"), **kw)


@pytest.mark.parametrize("share", [False, True])
def test_the_plan_counts_the_calls_a_run_makes(tmp_path, share):
    m, config = _config(tmp_path, llmbar_share_requests=share)
    judge = Replies(lambda r: "Output (a) is better.")  # Swap's orders disagree: a second round everywhere
    (est,) = m.evaluate_plan(config, judge).estimates
    assert not (tmp_path / "run").exists()  # the plan wrote nothing
    m.collect_verdicts(config, m.load_pairs(config), judge)
    assert est.calls == len(judge.seen) and est.cached_calls == 0
    if not share:
        assert est.calls == 3 * (8 * 2 + 4 + 5 * 2 + 4 + 2 * 4)  # 42 per pair: no two calls share a reply
    # orders that agree: Swap's second round is not asked, the plan's stated bound (2 per Swap strategy and pair)
    m2, config2 = _config(tmp_path / "b", llmbar_share_requests=share)
    agree = Replies(_prefers_output_1(m2.load_pairs(config2)))
    (est2,) = m2.evaluate_plan(config2, agree).estimates
    v = m2.collect_verdicts(config2, m2.load_pairs(config2), agree)["pairwise_verdicts.parquet"]
    assert (v.loc[v["strategy"].isin([f"llmbar:{s}" for s in LLMBAR_SWAP]), "verdict"] == "1").all()
    assert est2.calls - len(agree.seen) == 3 * 2 * len(LLMBAR_SWAP)
    assert "counted for every pair" in m.evaluate_plan(config, judge).note


def _prefers_output_1(pairs):
    """A judge that always picks output_1, whichever position it is shown in (a Rating gets 5)."""
    def reply(r):
        text = r.messages[-1][1]
        for o1, o2 in zip(pairs["output_1"], pairs["output_2"]):
            if o1 in text and o2 in text:
                return "Output (a) is better." if text.index(o1) < text.index(o2) else "Output (b) is better."
        return "5"
    return reply


def test_swaps_second_round_is_priced_with_full_length_explanations(tmp_path):
    m, config = _config(tmp_path, strategies_=("llmbar:Swap",))
    pairs = m.load_pairs(config)
    (est,) = m.evaluate_plan(config, Replies(lambda r: "")).estimates
    protocol = llmbar_protocol("Swap")
    bare = strategies._second_jobs(protocol, [(it, strategies.llmbar_swap_fields(
        it, {"12": ("1", ""), "21": ("2", "")})) for it in pairs.itertuples()])
    judge = Replies(lambda r: "")
    bare_tokens = sum(judge.count_tokens("".join(c for _, c in r.messages)) + calls.TEMPLATE_MARGIN for _, r in bare)
    first = sum(judge.count_tokens("".join(c for _, c in r.messages)) + calls.TEMPLATE_MARGIN
                for r in llmbar_requests(pairs, protocol))
    # two explanations per second-round request, each up to the first round's max_tokens
    # (up to one token of rounding per request)
    assert est.prompt_tokens - first - bare_tokens >= 2 * len(bare) * protocol.modules[0].max_tokens - len(bare)


def test_a_dry_run_leaves_no_file(tmp_path):
    run_dir = tmp_path / "runs" / "evaluate" / "judge"
    out = evaluate("openai:m@http://127.0.0.1:9/v1", "quick", run_dir=str(run_dir), dry_run=True,
                   protocols=["llmbar:Vanilla", "llmbar:Swap"], out=open("/dev/null", "w"))
    assert out["calls_made"] == 0 and out["plan"][0].calls == 6 * 2 + 6 * 4
    assert not any(tmp_path.rglob("*"))  # no run folder, no cache.sqlite


def test_rating_compares_large_integers_as_integers():
    big = "100000000000000001"
    assert float(big) == float("100000000000000000")  # as floats they are equal: a tie ("2", "1")
    s1, s2, v12, v21, failure = llmbar_rating_verdicts(big, "100000000000000000")
    assert (v12, v21) == ("1", "1") and failure == ""  # evaluate.py's int comparison: output_1 wins in both orders
