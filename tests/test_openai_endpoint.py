"""Endpoints as people run them (issue 27): a keyless self-hosted server at a non-loopback URL, the model name read
from /v1/models, and the key-over-http refusal — with the HTTP transport replaced, so nothing leaves this process."""

from __future__ import annotations

import httpx
import pytest

from dhp.backends import ChatRequest, get_backend
from dhp.backends.openai_server import PLACEHOLDER_KEY, OpenAIBackend
from dhp.errors import DHPError

URL = "http://10.20.30.40:8000/v1"  # never contacted: every request goes to the mock transport


def _server(models=("served-model",), seen=None):
    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [{"id": m, "object": "model"} for m in models]})
        if request.url.path.endswith("/chat/completions"):
            return httpx.Response(200, json={
                "id": "x", "object": "chat.completion", "created": 0, "model": models[0],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "Output (a)"}}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}})
        return httpx.Response(404, json={"error": "no route"})
    return httpx.MockTransport(handle)


def test_keyless_server_at_a_remote_url_needs_no_key_and_gets_the_placeholder(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    seen: list[httpx.Request] = []
    b = OpenAIBackend("served-model", URL, transport=_server(seen=seen), max_retries=0)
    out = b.chat_many([ChatRequest.make([{"role": "user", "content": "hi"}], 8)])
    assert out[0].text == "Output (a)"
    assert seen and all(r.url.host == "10.20.30.40" for r in seen)
    assert {r.headers.get("authorization") for r in seen} == {f"Bearer {PLACEHOLDER_KEY}"}


def test_model_name_omitted_uses_the_one_model_the_server_lists(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    b = OpenAIBackend("", URL, transport=_server(models=("Qwen/Qwen2.5-7B-Instruct",)))
    assert b.model == "Qwen/Qwen2.5-7B-Instruct"
    assert b.identity == f"openai:Qwen/Qwen2.5-7B-Instruct@{URL}"
    with pytest.raises(DHPError, match=r"lists \['a', 'b'\]"):
        OpenAIBackend("", URL, transport=_server(models=("a", "b")))


def test_spec_without_model_parses(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    b = get_backend(f"openai:@{URL}", transport=_server())
    assert b.model == "served-model"


def test_a_real_key_is_still_refused_over_plain_http_to_a_remote_host(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-secret")
    seen: list[httpx.Request] = []
    with pytest.raises(DHPError, match="Refusing to send OPENAI_API_KEY over plain http"):
        OpenAIBackend("served-model", URL, transport=_server(seen=seen))
    assert seen == []  # refused before any request
    # allowed explicitly: the key is what is sent
    b = OpenAIBackend("served-model", URL, transport=_server(seen=seen), allow_insecure_key=True, max_retries=0)
    b.chat_many([ChatRequest.make([{"role": "user", "content": "hi"}], 8)])
    assert {r.headers.get("authorization") for r in seen} == {"Bearer sk-real-secret"}


def test_openai_itself_still_needs_a_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(DHPError, match="OPENAI_API_KEY is not set"):
        OpenAIBackend("gpt-4o-mini", transport=_server())


def _null_server(seen):
    """A server whose reply has ``content: null`` (a refusal), cut off when asked for fewer than 5 tokens."""
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [{"id": "m", "object": "model"}]})
        import json

        body = json.loads(request.content)
        seen.append(body)
        cut = body.get("max_tokens") is not None and body["max_tokens"] < 5
        message = {"role": "assistant", "content": "Sco" if cut else None}
        if body["messages"][-1]["content"] == "absent":
            message.pop("content")
        return httpx.Response(200, json={"choices": [{"index": 0, "finish_reason": "length" if cut else "stop",
                                                      "message": message}], "usage": {"completion_tokens": 0}})
    return httpx.MockTransport(handle)


def test_a_null_content_is_an_empty_text_flagged_null_and_kept_so_through_the_cache(monkeypatch, tmp_path):
    """The reply's text stays a str ("" for readers of the text, as LLMBar's evaluator reads it), content_null says
    it was null (GEMBA: no answer); an absent content too; a cut-off reply says finish_reason "length"; a request
    without max_tokens sends none; the cache row keeps null / length (dhp.backends.base.reply_status)."""
    from dhp import calls
    from dhp.backends.base import reply_status

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    seen: list[dict] = []
    b = OpenAIBackend("m", URL, transport=_null_server(seen), max_retries=0)
    reqs = [ChatRequest.make([{"role": "user", "content": "hi"}], None),
            ChatRequest.make([{"role": "user", "content": "absent"}], None),
            ChatRequest.make([{"role": "user", "content": "hi"}], 3)]
    out = b.chat_many(reqs)
    assert [(o.text, o.content_null, o.finish_reason) for o in out] == [
        ("", True, "stop"), ("", True, "stop"), ("Sco", False, "length")]
    assert "max_tokens" not in seen[0] and seen[2]["max_tokens"] == 3
    got = calls.chat(b, reqs, tmp_path / "c.sqlite", progress=False)
    assert [(g.text, reply_status(g)) for g in got] == [("", "null"), ("", "null"), ("Sco", "length")]
