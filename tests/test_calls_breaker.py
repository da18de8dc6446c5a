"""The circuit breaker under a protocol's own error paths (issue 40): a refusal the caller's protocol handles as an
answer (``handled``) neither counts towards the breaker nor is remembered as a failure, and a rerun after a stop asks
the calls that failed before AFTER the fresh ones, so it resumes where the stopped run was. A dry run creates no
cache file. An in-process backend scripts every reply."""

from __future__ import annotations

import pytest

from dhp import calls
from dhp.backends import Backend, ChatRequest, Completion
from dhp.cache import Cache
from dhp.errors import DHPError


class Scripted(Backend):
    """Fails prompts containing "FAIL" (HTTP 500) and refuses those containing "LONG" as too long; echoes the rest."""

    identity = "scripted"
    model = "scripted-1"
    deterministic = True

    def __init__(self):
        self.seen: list[str] = []

    def cache_identity(self) -> dict:
        return {"backend": self.identity, "model": self.model}

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            prompt = r.messages[-1][1]
            self.seen.append(prompt)
            res = (RuntimeError("HTTP 500: boom") if "FAIL" in prompt else
                   RuntimeError("context overflow: HTTP 400: Please reduce the length") if "LONG" in prompt else
                   Completion(prompt[::-1], None, 1, 1, 1))
            out.append(res)
            if on_result is not None:
                on_result(i, res)
        return out


def req(text: str) -> ChatRequest:
    return ChatRequest.make([{"role": "user", "content": text}], max_tokens=4)


def _too_long(reason: str) -> bool:
    return "context overflow" in reason


def test_handled_refusals_do_not_trip_the_breaker_and_are_reported():
    b, store = Scripted(), Cache(None)
    reqs = [req(f"LONG {i}") for i in range(25)] + [req("ok")]
    out = calls.chat(b, reqs, store, progress=False, max_consecutive_failures=20, handled=_too_long)
    assert len(b.seen) == 26 and out[-1].text == "ko"
    assert all(isinstance(o, calls.CallFailure) and "context overflow" in o.reason for o in out[:25])
    assert store.failed(calls.plan_chat(b, r).keys[0] for r in reqs) == set()  # an answer, not a failed key
    # control: the same refusals unhandled are failures, and the breaker stops the run
    with pytest.raises(DHPError, match="20 calls .* failed in a row"):
        calls.chat(Scripted(), reqs, Cache(None), progress=False, max_consecutive_failures=20)


def test_a_handled_refusal_ends_a_streak_but_transport_failures_still_stop_the_run():
    b = Scripted()
    reqs = [req("FAIL a"), req("FAIL b"), req("LONG c"), req("FAIL d"), req("FAIL e")]
    calls.chat(b, reqs, Cache(None), progress=False, max_consecutive_failures=3, handled=_too_long)
    assert len(b.seen) == 5  # the server answered the refusal: the streak starts again
    with pytest.raises(DHPError, match="3 calls .* failed in a row"):
        calls.chat(Scripted(), [req(f"FAIL {i}") for i in range(5)], Cache(None), progress=False,
                   max_consecutive_failures=3, handled=_too_long)


def test_a_rerun_after_a_stop_asks_the_fresh_calls_before_the_failed_ones():
    store = Cache(None)
    reqs = [req(f"FAIL {i}") for i in range(3)] + [req(f"fresh {i}") for i in range(5)]
    with pytest.raises(DHPError, match="failed in a row"):
        calls.chat(Scripted(), reqs, store, progress=False, max_consecutive_failures=3)
    assert len(store) == 0  # stopped before any fresh call
    rerun = Scripted()
    with pytest.raises(DHPError, match="failed in a row"):  # the failing calls still fail ...
        calls.chat(rerun, reqs, store, progress=False, max_consecutive_failures=3)
    # ... but only after every fresh call was made and cached: the rerun resumed where the run stopped
    assert rerun.seen == [f"fresh {i}" for i in range(5)] + [f"FAIL {i}" for i in range(3)]
    assert len(store) == 5


def test_the_order_of_calls_that_never_failed_is_kept():
    b, store = Scripted(), Cache(None)
    planned = [calls.plan_chat(b, req(t)) for t in ("c", "a", "b")]
    assert calls.pending(planned, store) == planned


def test_a_dry_run_creates_no_cache_file(tmp_path):
    path = tmp_path / "run" / "cache.sqlite"
    est = calls.chat(Scripted(), [req("a"), req("b")], str(path), dry_run=True)
    assert est.calls == 2 and not path.exists() and not (tmp_path / "run").exists()
    calls.chat(Scripted(), [req("a")], str(path), progress=False)  # a real run makes it; a dry run then reads it
    assert calls.chat(Scripted(), [req("a"), req("b")], str(path), dry_run=True).cached_calls == 1


def test_scopes_keep_identical_requests_apart_and_none_shares_them():
    b, store = Scripted(), Cache(None)
    calls.chat(b, [req("x"), req("x")], store, progress=False, scopes=["s1", "s2"])
    assert b.seen == ["x", "x"]
    calls.chat(b, [req("x"), req("x")], store, progress=False)  # unscoped: one key, asked once
    assert b.seen == ["x", "x", "x"]
    assert calls.plan_chat(b, req("x")).keys == calls.plan_chat(b, req("x"), None).keys
