"""The openai backend's HTTP path (issue 50: the openai SDK's AsyncOpenAI over one pooled httpx client per batch, the
SDK's retries off): the bodies and headers it sends, which errors it retries and how often, the backoff between
tries, how each error reads as a call's reason in the SDK's wording with the server's structured code (the protocols'
refusal rules read that text), one pool of keep-alive connections per batch, and the key never in a reason. The
network is a scripted httpx transport, or a loopback server."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from dhp.backends import ChatRequest
from dhp.backends.openai_server import OpenAIBackend
from dhp.backends.runner import Runner
from dhp.errors import DHPError

from servers import ScriptedOpenAI, chat_completion

URL = "http://10.20.30.40:8000/v1"  # never contacted: every request goes to the scripted transport
KEY = "sk-test-not-a-real-key-4711"
TOO_LONG = ("This model's maximum context length is 8192 tokens. However, you requested 8230 tokens (8180 in the "
            "messages, 50 in the completion). Please reduce the length of the messages or completion.")


def _ok(text="Output (a)"):
    return httpx.Response(200, json={
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}})


def _transport(chat, seen=None, models=None):
    """``chat(request, k)`` answers the k-th try (0-based) of each distinct body: an httpx.Response, or an exception
    to raise (a timeout, a dropped connection)."""
    tries: dict[bytes, int] = {}

    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        if request.url.path.endswith("/models"):
            if models is not None:
                return models(request)
            return httpx.Response(200, json={"object": "list", "data": [{"id": "m", "object": "model"}]})
        k = tries.get(request.content, 0)
        tries[request.content] = k + 1
        out = chat(request, k)
        if isinstance(out, Exception):
            raise out
        return out
    return httpx.MockTransport(handle)


def _req(text="hi", **kw):
    return ChatRequest.make([{"role": "user", "content": text}], kw.pop("max_tokens", 8), **kw)


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    yield


def test_each_chat_request_sends_the_exported_body_to_chat_completions_with_the_key_as_bearer():
    seen: list[httpx.Request] = []
    b = OpenAIBackend("m", URL, transport=_transport(lambda r, k: _ok(), seen), allow_insecure_key=True)
    reqs = [_req("a"), _req("b", temperature=0.7, seed=3), _req("c", logprobs=5), _req("d", max_tokens=None)]
    out = b.chat_many(reqs)
    assert [o.text for o in out] == ["Output (a)"] * 4
    assert (seen[0].method, str(seen[0].url)) == ("GET", f"{URL}/models")  # the model list first, once
    posts = seen[1:]
    assert [(r.method, str(r.url)) for r in posts] == [("POST", f"{URL}/chat/completions")] * 4
    # the body is chat_body's, the one dhp.batch exports (batch and live answers share cache keys)
    assert sorted((json.loads(r.content) for r in posts), key=lambda d: d["messages"][0]["content"]) == \
        [b.chat_body(r) for r in reqs]
    assert all(r.headers["content-type"] == "application/json" for r in posts)
    assert {r.headers["authorization"] for r in seen} == {f"Bearer {KEY}"}


@pytest.mark.parametrize("status,body,reason", [
    # a context overflow reads as one (LLMBar's "too long, ask shorter" rule), in the openai SDK's wording, with the
    # server's structured code where it sent one
    (400, {"error": {"message": TOO_LONG, "type": "invalid_request_error"}},
     f"context overflow: HTTP 400: Error code: 400 - {TOO_LONG}"),
    (400, {"error": {"message": TOO_LONG, "type": "invalid_request_error", "code": "context_length_exceeded"}},
     f"context overflow: HTTP 400 [code: context_length_exceeded]: Error code: 400 - {TOO_LONG}"),
    # llama.cpp's server: its error type says so, whatever the wording
    (400, {"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it",
                     "type": "exceed_context_size_error"}},
     "context overflow: HTTP 400: Error code: 400 - the request exceeds the available context size, try increasing it"),
    # an unrelated 400 that mentions a maximum is not a context overflow (issue 50: it was asked again shorter)
    (400, {"error": {"message": "Invalid 'max_tokens': integer above maximum value. Expected a value <= 4096.",
                     "type": "invalid_request_error", "code": "integer_above_max_value"}},
     "HTTP 400 [code: integer_above_max_value]: Error code: 400 - Invalid 'max_tokens': integer above maximum value. "
     "Expected a value <= 4096."),
    (400, {"error": {"message": "temperature must be <= 2"}}, "HTTP 400: Error code: 400 - temperature must be <= 2"),
    (422, {"message": "unknown field 'foo'"}, "HTTP 422: Error code: 422 - unknown field 'foo'"),  # top-level message
    (400, "not json", "HTTP 400: Error code: 400"),
    (500, {"error": {"message": "boom"}}, "HTTP 500: Error code: 500 - boom"),  # after its retries
    (503, {}, "HTTP 503: Error code: 503"),
    (429, {"error": {"message": "slow down"}}, "HTTP 429: Error code: 429 - slow down"),
])
def test_an_error_status_reads_as_the_calls_reason(status, body, reason):
    def chat(r, k):
        return httpx.Response(status, text=body) if isinstance(body, str) else httpx.Response(status, json=body)

    b = OpenAIBackend("m", URL, transport=_transport(chat), allow_insecure_key=True, max_retries=1,
                      backoff_initial=0.0)
    out = b.chat_many([_req()])
    assert isinstance(out[0], RuntimeError) and str(out[0]) == reason


@pytest.mark.parametrize("fault,reason", [
    (lambda r: httpx.Response(429, json={"error": {"message": "rate"}}), "HTTP 429: Error code: 429 - rate"),
    (lambda r: httpx.Response(500, json={"error": {"message": "x"}}), "HTTP 500: Error code: 500 - x"),
    (lambda r: httpx.Response(502, text="bad gateway"), "HTTP 502: Error code: 502"),
    (lambda r: httpx.ReadTimeout("read timed out", request=r), "timeout"),
    (lambda r: httpx.ConnectTimeout("connect timed out", request=r), "timeout"),
    (lambda r: httpx.Response(200, text='{"choices": [{"message": {"content": "4"'), "malformed response"),
    (lambda r: httpx.Response(200, json={"choices": []}), "malformed response"),
    # the server answered the model list, so a dropped connection is a blip, not a wrong URL
    (lambda r: httpx.RemoteProtocolError("Server disconnected without sending a response.", request=r),
     "connection error (RemoteProtocolError)"),
])
@pytest.mark.parametrize("faults", [2, 3])
def test_transient_errors_are_retried_max_retries_times(fault, reason, faults):
    b = OpenAIBackend("m", URL, transport=_transport(lambda r, k: fault(r) if k < faults else _ok()),
                      allow_insecure_key=True, max_retries=2, backoff_initial=0.0)
    out = b.chat_many([_req("a"), _req("b")])
    assert b.attempts == 2 * 3  # 3 tries per call (1 + max_retries); the model list is no call (issue 50)
    if faults == 2:  # the third try answers
        assert [o.text for o in out] == ["Output (a)"] * 2
    else:  # every try failed: the last error is the call's reason
        assert all(isinstance(o, Exception) and reason in str(o) for o in out), out


@pytest.mark.parametrize("status", [400, 409, 413, 422])
def test_a_refusal_is_not_retried(status):
    b = OpenAIBackend("m", URL, transport=_transport(lambda r, k: httpx.Response(status, json={})),
                      allow_insecure_key=True, max_retries=3, backoff_initial=0.0)
    out = b.chat_many([_req()])
    assert isinstance(out[0], RuntimeError) and str(out[0]).startswith(f"HTTP {status}")
    assert b.attempts == 1  # one try (the model list is no call)


@pytest.mark.parametrize("status,match", [(401, "rejected the API key"), (403, "refused access"),
                                          (404, "not found")])
def test_a_wrong_key_model_or_url_stops_the_run_without_retries(status, match):
    b = OpenAIBackend("m", URL, transport=_transport(lambda r, k: httpx.Response(status, json={})),
                      allow_insecure_key=True, max_retries=3, backoff_initial=0.0)
    with pytest.raises(DHPError, match=match):
        b.chat_many([_req()])
    assert b.attempts == 1


def test_the_model_list_decides_reachability_and_model_before_any_call():
    seen: list[httpx.Request] = []

    def refused(r):
        raise httpx.ConnectError("[Errno 111] Connection refused", request=r)

    b = OpenAIBackend("m", URL, transport=_transport(lambda r, k: _ok(), seen, models=refused),
                      allow_insecure_key=True, max_retries=3, backoff_initial=0.0)
    with pytest.raises(DHPError, match="Cannot reach the judge server"):
        b.chat_many([_req()])
    assert len(seen) == 1 and b.attempts == 0  # a wrong URL/port fails fast: no retries, no chat request
    # no /models route (some servers): the calls themselves go ahead
    b = OpenAIBackend("m", URL, transport=_transport(lambda r, k: _ok(), models=lambda r: httpx.Response(404)),
                      allow_insecure_key=True)
    assert b.chat_many([_req()])[0].text == "Output (a)"
    # a listed model other than the one asked for
    b = OpenAIBackend("other", URL, transport=_transport(lambda r, k: _ok()), allow_insecure_key=True)
    with pytest.raises(DHPError, match=r"'other' is not served .* lists \['m'\]"):
        b.chat_many([_req()])
    # a model list that is not one: the run stops with what it got
    b = OpenAIBackend("m", URL, allow_insecure_key=True, max_retries=3,
                      transport=_transport(lambda r, k: _ok(), models=lambda r: httpx.Response(200, text="<html>")))
    with pytest.raises(DHPError, match="did not answer the model list"):
        b.chat_many([_req()])


def test_n_replies_refused_at_temperature_0_are_asked_one_by_one():
    seen: list[dict] = []

    def chat(r, k):
        body = json.loads(r.content)
        seen.append(body)
        if body.get("n", 1) > 1:
            return httpx.Response(400, json={"error": {"message": "n must be 1 when using greedy sampling"}})
        return _ok(f"reply {body.get('seed')}")

    b = OpenAIBackend("m", URL, transport=_transport(chat), allow_insecure_key=True, max_retries=0)
    out = b.chat_many([_req(n=3, seed=10)])
    assert out[0].texts == ["reply 10", "reply 11", "reply 12"]
    assert [d.get("n", 1) for d in seen] == [3, 1, 1, 1]


def test_the_backoff_doubles_from_its_start_up_to_its_cap_plus_jitter(monkeypatch):
    import dhp.backends.runner as runner_mod

    r = Runner(lambda e: isinstance(e, TimeoutError), lambda e: None, lambda e: e, max_retries=6,
               backoff_initial=0.5, backoff_max=3.0)
    monkeypatch.setattr(runner_mod.random, "uniform", lambda lo, hi: hi)  # the jitter at its top
    assert [r.backoff(k) for k in range(1, 7)] == [1.0, 1.5, 2.5, 3.5, 3.5, 3.5]
    monkeypatch.setattr(runner_mod.random, "uniform", lambda lo, hi: lo)
    assert [r.backoff(k) for k in range(1, 7)] == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]

    slept: list[float] = []

    async def sleep(s):
        slept.append(s)

    monkeypatch.setattr(runner_mod.asyncio, "sleep", sleep)
    tries = []

    async def flaky():
        tries.append(1)
        if len(tries) < 4:
            raise TimeoutError("slow")
        return "ok"

    assert asyncio.run(r.with_retries(flaky)) == "ok"
    assert slept == [0.5, 1.0, 2.0] and r.attempts == 4  # a wait after each failed try, none after the answer

    async def wrong():
        tries.append(1)
        raise ValueError("not transient")

    slept.clear()
    tries.clear()
    with pytest.raises(ValueError, match="not transient"):
        asyncio.run(r.with_retries(wrong))
    assert tries == [1] and slept == []  # raised at once

    async def always():
        tries.append(1)
        raise TimeoutError(f"try {len(tries)}")

    tries.clear()
    with pytest.raises(TimeoutError, match="try 7"):  # the last try's error, after 1 + max_retries tries
        asyncio.run(r.with_retries(always))
    assert len(tries) == 7 and len(slept) == 6


def test_no_reason_or_repr_shows_the_key():
    def chat(r, k):
        return [httpx.Response(400, json={"error": {"message": "bad"}}), httpx.ReadTimeout("t", request=r),
                httpx.RemoteProtocolError("dropped", request=r)][json.loads(r.content)["seed"]]

    b = OpenAIBackend("m", URL, transport=_transport(chat), allow_insecure_key=True, max_retries=0)
    out = b.chat_many([_req("a", seed=0), _req("a", seed=1), _req("a", seed=2)])
    texts = [str(o) for o in out] + [repr(o) for o in out] + [repr(b)]
    assert [type(o).__name__ for o in out] == ["CallError"] * 3  # the SDK's 400, timeout, dropped connection
    assert not any(KEY in t for t in texts)


def test_a_batch_of_calls_shares_one_pool_of_kept_alive_connections():
    with ScriptedOpenAI(lambda path, body: chat_completion("Output (a)", model="m"), model="m") as srv:
        b = OpenAIBackend("m", srv.base_url, concurrency=4)
        out = b.chat_many([_req(f"q{i}") for i in range(60)])
    assert [o.text for o in out] == ["Output (a)"] * 60 and len(srv.requests) == 60
    # one connection per request in flight, not one per request (plus the model list's, asked once before the batch)
    assert len(srv.connections) <= 4 + 1, len(srv.connections)


def test_a_redirect_off_the_https_host_does_not_carry_the_key():
    # the key may go to an https host, or over plain http to a loopback one; a redirect from there to a plain-http
    # host elsewhere must not take it along (httpx drops Authorization when the origin changes)
    seen: list[httpx.Request] = []

    def chat(r, k):
        if r.url.host == "judge.example.org":
            return httpx.Response(307, headers={"Location": "http://10.20.30.40:8000/v1/chat/completions"})
        return _ok()

    b = OpenAIBackend("m", "https://judge.example.org/v1", transport=_transport(chat, seen), max_retries=0)
    assert b.chat_many([_req()])[0].text == "Output (a)"
    assert [(r.url.scheme, r.url.host) for r in seen] == [("https", "judge.example.org")] * 2 + [
        ("http", "10.20.30.40")]
    assert [r.headers.get("authorization") for r in seen] == [f"Bearer {KEY}"] * 2 + [None]
