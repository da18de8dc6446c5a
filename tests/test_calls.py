"""The call engine (dhp.calls): dedupe, cache, resume, one key per reply, circuit breaker, estimate,
collect_pending. A small in-process backend stands in for a model so each rule can be checked exactly."""

from __future__ import annotations

import pytest

from dhp import calls
from dhp.backends import Backend, ChatRequest, Completion
from dhp.cache import Cache
from dhp.errors import DHPError


class Echo(Backend):
    """Answers each chat request with its prompt reversed; fails prompts containing "FAIL"."""

    identity = "echo"
    model = "echo-1"
    deterministic = True

    def __init__(self, version: str = "v1"):
        self.version = version
        self.seen: list[str] = []

    def cache_identity(self) -> dict:
        return {"backend": self.identity, "model": self.model, "content": self.version}

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            prompt = r.messages[-1][1]
            self.seen.append(prompt)
            if "FAIL" in prompt:
                res = RuntimeError("HTTP 500: boom")
            else:
                n = getattr(r, "n", 1)
                res = Completion(prompt[::-1], None, len(prompt), 1, len(prompt))
                if n > 1:
                    res.texts = [f"{prompt[::-1]}#{j}" for j in range(n)]
                    res.text = res.texts[0]
            out.append(res)
            if on_result is not None:
                on_result(i, res)
        return out


def req(text: str, **kw) -> ChatRequest:
    return ChatRequest.make([{"role": "user", "content": text}], max_tokens=4, **kw)


def test_duplicates_are_called_once_and_reruns_make_no_call():
    b, store = Echo(), Cache(None)
    out = calls.chat(b, [req("ab"), req("cd"), req("ab")], store, progress=False)
    assert [o.text for o in out] == ["ba", "dc", "ba"]
    assert b.seen == ["ab", "cd"]
    calls.chat(b, [req("ab"), req("cd")], store, progress=False)
    assert b.seen == ["ab", "cd"]  # all cached


def test_sampling_parameters_and_model_content_are_part_of_the_key():
    b, store = Echo(), Cache(None)
    calls.chat(b, [req("ab"), req("ab", seed=1), req("ab", temperature=0.5)], store, progress=False)
    assert len(b.seen) == 3
    upgraded = Echo("v2")  # same name, other content: old answers must not be reused
    calls.chat(upgraded, [req("ab")], store, progress=False)
    assert upgraded.seen == ["ab"]


def test_failures_are_reported_not_cached_and_retried_on_rerun():
    b, store = Echo(), Cache(None)
    out = calls.chat(b, [req("FAIL one"), req("ok")], store, progress=False)
    assert isinstance(out[0], calls.CallFailure) and "HTTP 500" in out[0].reason
    assert out[1].text == "ko"
    calls.chat(b, [req("FAIL one"), req("ok")], store, progress=False)
    assert b.seen.count("FAIL one") == 2 and b.seen.count("ok") == 1


def test_circuit_breaker_stops_after_consecutive_failures_and_keeps_finished_calls():
    b, store = Echo(), Cache(None)
    reqs = [req("fine")] + [req(f"FAIL {i}") for i in range(10)] + [req("never reached")]
    with pytest.raises(DHPError, match="3 calls .* failed in a row"):
        calls.chat(b, reqs, store, progress=False, max_consecutive_failures=3)
    assert "never reached" not in b.seen and len(b.seen) == 4
    assert len(store) == 1  # the finished call is kept for the rerun


def test_a_success_resets_the_failure_streak():
    b = Echo()
    reqs = [req("FAIL a"), req("FAIL b"), req("ok"), req("FAIL c"), req("FAIL d")]
    out = calls.chat(b, reqs, Cache(None), progress=False, max_consecutive_failures=3)
    assert sum(isinstance(o, calls.CallFailure) for o in out) == 4


def test_n_replies_get_one_key_each():
    b, store = Echo(), Cache(None)
    call = calls.plan_chat(b, req("xy", n=3))
    assert len(set(call.keys)) == 3
    report = calls.run(b, [call], store, progress=False)
    assert [store.get(k).text for k in call.keys] == ["yx#0", "yx#1", "yx#2"]
    assert report.stats["calls"] == 1 and report.stats["replies_made"] == 3


def test_estimate_counts_without_calling():
    b, store = Echo(), Cache(None)
    calls.chat(b, [req("ab")], store, progress=False)
    est = calls.chat(b, [req("ab"), req("cd"), req("ef")], store, dry_run=True)
    assert (est.calls, est.cached_calls) == (2, 1)
    assert est.completion_tokens == 8 and est.cost_usd == 0.0
    assert b.seen == ["ab"]


def test_estimate_of_a_request_without_max_tokens_counts_an_assumed_reply_and_says_so():
    """GEMBA a7a7eff8 sends no max_tokens: an estimate neither crashes on it nor calls it bounded. Control: a request
    with a limit is counted at its limit and the text names no assumption."""
    b, store = Echo(), Cache(None)
    open_req = ChatRequest.make([{"role": "user", "content": "gh"}], max_tokens=None)
    est = calls.chat(b, [req("ab"), open_req], store, dry_run=True)
    assert est.completion_tokens == 4 + calls.UNLIMITED_REPLY_TOKENS and est.unlimited_calls == 1
    assert "1 calls without max_tokens" in est.describe()
    bounded = calls.chat(b, [req("ab")], store, dry_run=True)
    assert bounded.unlimited_calls == 0 and "without max_tokens" not in bounded.describe()


def test_collect_pending_raises_with_the_uncached_calls_instead_of_calling():
    b, store = Echo(), Cache(None)
    calls.chat(b, [req("ab")], store, progress=False)
    planned = [calls.plan_chat(b, req("ab")), calls.plan_chat(b, req("cd"))]
    with calls.collect_pending():
        with pytest.raises(calls.PendingCalls) as info:
            calls.run(b, planned, store, progress=False)
    assert [c.request.messages[-1][1] for c in info.value.calls] == ["cd"]
    assert b.seen == ["ab"]
    calls.run(b, planned, store, progress=False)  # outside the block it calls again
    assert b.seen == ["ab", "cd"]


def test_progress_file_counts_calls_for_a_watcher_and_holds_no_prompt(tmp_path):
    import json

    path = tmp_path / "progress.json"
    b, store = Echo(), Cache(None)
    calls.chat(b, [req("secret prompt one"), req("secret prompt two"), req("FAIL three")], store,
               progress=str(path), desc="judge x")
    state = json.loads(path.read_text())
    # failed calls count as done too: the watcher shows work finished, not work that succeeded
    assert (state["desc"], state["done"], state["total"]) == ("judge x", 3, 3)
    assert "secret" not in path.read_text()
    path.unlink()
    calls.chat(b, [req("secret prompt one")], store, progress=str(path))  # all cached: nothing to report
    assert not path.exists()
