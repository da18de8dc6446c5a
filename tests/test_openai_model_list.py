"""The model list waits for a busy server (issue 50): a server still answering a killed client's requests, or loading
its model (503), is asked again with backoff within a stated budget (``models_wait``, DHP_MODELS_WAIT; 60 s by
default), not given one flat 10 s; when the budget runs out, one error names it. Asked once for the identity and the
run's check together; not counted as a call."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler

import httpx
import pytest

from dhp.backends import ChatRequest, OpenAIBackend
from dhp.backends.openai_server import MODELS_WAIT_S
from dhp.errors import DHPError
from servers import _Base, chat_completion

URL = "http://10.20.30.40:8000/v1"  # never contacted: the transport answers
LISTING = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "me", "root": "m"}]}
LOADING = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}


def _busy_then_ready(script, seen):
    """/models answers the k-th GET with script[k] (an exception to raise, or a status with its body), then 200."""
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            k = sum(1 for r in seen if r.url.path.endswith("/models"))
            seen.append(request)
            if k < len(script):
                out = script[k](request)
                if isinstance(out, Exception):
                    raise out
                return out
            return httpx.Response(200, json=LISTING)
        seen.append(request)
        return httpx.Response(200, json=chat_completion("Output (a)", model="m"))
    return httpx.MockTransport(handle)


def _req():
    return ChatRequest.make([{"role": "user", "content": "hi"}], 8)


def test_a_busy_server_is_waited_for_within_the_budget(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    timeout = lambda r: httpx.ReadTimeout("busy", request=r)  # noqa: E731 - a try that got no answer in time
    loading = lambda r: httpx.Response(503, json=LOADING)  # noqa: E731 - llama.cpp while it loads its model
    seen: list[httpx.Request] = []
    b = OpenAIBackend("m", URL, transport=_busy_then_ready([timeout] * 3 + [loading] * 3, seen), max_retries=0,
                      backoff_initial=0.0)
    # the identity names the model as the server reports it (before: {} after one 10 s try, other cache keys)
    assert json.loads(b.fingerprint) == {"id": "m", "owned_by": "me", "root": "m"}
    out = b.chat_many([_req(), ChatRequest.make([{"role": "user", "content": "ho"}], 8)])
    assert [o.text for o in out] == ["Output (a)"] * 2
    paths = [r.url.path for r in seen]
    assert paths.count("/v1/models") == 7 and paths[7:] == ["/v1/chat/completions"] * 2  # asked once until it answered
    assert b.attempts == 2  # two calls; the model list's tries are none


def test_the_budget_running_out_is_one_error_naming_it(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    seen: list[httpx.Request] = []
    hung = [lambda r: httpx.ReadTimeout("busy", request=r)] * 10_000
    b = OpenAIBackend("m", URL, transport=_busy_then_ready(hung, seen), models_wait=0.3, backoff_initial=0.01,
                      backoff_max=0.05)
    with pytest.raises(DHPError) as e:
        b.chat_many([_req()])
    assert "within the 0.3 s budget" in e.value.problem and "timeout" in e.value.problem
    assert "DHP_MODELS_WAIT" in e.value.fix
    assert len(seen) >= 2 and all(r.url.path == "/v1/models" for r in seen)  # retried, no call sent
    assert b.attempts == 0


def test_the_budget_is_stated_and_settable(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("DHP_MODELS_WAIT", raising=False)
    assert OpenAIBackend("m", URL).models_wait == MODELS_WAIT_S == 60.0
    assert OpenAIBackend("m", URL, models_wait=5).models_wait == 5.0
    monkeypatch.setenv("DHP_MODELS_WAIT", "120")
    assert OpenAIBackend("m", URL).models_wait == 120.0
    monkeypatch.setenv("DHP_MODELS_WAIT", "soon")
    with pytest.raises(DHPError, match="DHP_MODELS_WAIT='soon' is not a number"):
        OpenAIBackend("m", URL)


def test_a_wrong_port_still_fails_at_once(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    seen: list[httpx.Request] = []
    refused = [lambda r: httpx.ConnectError("[Errno 111] Connection refused", request=r)] * 100
    b = OpenAIBackend("m", URL, transport=_busy_then_ready(refused, seen))
    with pytest.raises(DHPError, match="Cannot reach the judge server"):
        b.chat_many([_req()])
    assert len(seen) == 1


class _SlowModels(_Base):
    """A loopback server whose /models answers 503 to its first ``busy`` GETs (a server still busy), then lists "m";
    POST answers a chat reply."""

    def __init__(self, busy: int):
        super().__init__(120.0)
        self.busy, self.gets, self.posts = busy, 0, 0
        self._lock = threading.Lock()

    def _handler(self):
        srv = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status, obj):
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                with srv._lock:
                    srv.gets += 1
                    busy = srv.gets <= srv.busy
                self._send(503, LOADING) if busy else self._send(200, LISTING)

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with srv._lock:
                    srv.posts += 1
                self._send(200, chat_completion("Output (a)", model="m"))

        return H


def test_a_loopback_server_busy_for_its_first_model_lists_is_waited_for(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with _SlowModels(busy=5) as srv:
        b = OpenAIBackend("m", srv.base_url, backoff_initial=0.01, backoff_max=0.05)
        assert b.record() == {"id": "m", "owned_by": "me", "root": "m"}
        assert b.chat_many([_req()])[0].text == "Output (a)"
        assert (srv.gets, srv.posts, b.attempts) == (6, 1, 1)
