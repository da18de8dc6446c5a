"""Credentials in a judge URL (``http://user:pw@host/v1``, issue 50) are sent with the requests and appear nowhere else:
not in the judge's identity, cache identity or keys, messages, reasons, manifests, leaderboard rows, nor in any file
of a run folder or its console output. Cache keys of a URL without credentials are the ones they always were."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from conftest import ROOT, child_env, tiny_cli_args
from dhp.backends import ChatRequest, OpenAIBackend
from dhp.calls import plan_chat
from dhp.errors import DHPError
from servers import ScriptedOpenAI, chat_completion

USER, PASSWORD = "dhpuser", "pw-7c1e9a"
SECRETS = (PASSWORD, f"{USER}:")


def _transport(seen, chat=None, models=("m",)):
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [{"id": m, "object": "model"} for m in models]})
        return chat(request) if chat else httpx.Response(200, json=chat_completion("Output (a)", model="m"))
    return httpx.MockTransport(handle)


def _clean(*texts):
    return not any(s in t for t in texts for s in SECRETS)


def test_the_credentials_authenticate_the_requests_and_are_shown_nowhere(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    seen: list[httpx.Request] = []
    url = f"https://{USER}:{PASSWORD}@judge.example.org:8443/v1"
    b = OpenAIBackend("m", url, transport=_transport(seen), max_retries=0)
    assert b.identity == "openai:m@https://judge.example.org:8443/v1" and b.base_url == "https://judge.example.org:8443/v1"
    out = b.chat_many([ChatRequest.make([{"role": "user", "content": "hi"}], 8)])
    assert out[0].text == "Output (a)"
    basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert {(r.url.host, r.headers["authorization"]) for r in seen} == {("judge.example.org", basic)}
    assert _clean(b.identity, repr(b), str(b.cache_identity()), b.fingerprint, str(b.record()))

    # messages and reasons name the server without them
    failing = OpenAIBackend("m", url, max_retries=0, transport=_transport(
        [], chat=lambda r: httpx.Response(400, json={"error": {"message": "bad request"}})))
    reason = failing.chat_many([ChatRequest.make([{"role": "user", "content": "hi"}], 8)])[0]
    with pytest.raises(DHPError) as unknown:
        OpenAIBackend("other", url, transport=_transport([])).chat_many([ChatRequest.make(
            [{"role": "user", "content": "hi"}], 8)])

    def refused(request):
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(DHPError) as unreachable:
        OpenAIBackend("m", url, transport=httpx.MockTransport(refused)).chat_many(
            [ChatRequest.make([{"role": "user", "content": "hi"}], 8)])
    assert "judge.example.org" in str(unreachable.value) and "judge.example.org" in str(unknown.value)
    assert _clean(str(reason), str(unknown.value), str(unreachable.value))


def test_cache_keys_are_the_same_with_or_without_credentials_and_as_before():
    req = ChatRequest.make([{"role": "user", "content": "Which is better?"}], 8)
    # the keys the backend gave before issue 50 (commit 83ae7c1) for these URLs: a rerun finds its cached answers
    before = {"http://127.0.0.1:8000/v1": "d740dff22b18457fcf5e34364ae30c1795aad0df35992ad61ae26bd8b21ee013",
              "https://judge.example.org/v1": "74831acbfea08630a6423c06970fb44d6e46ef4d3d796899ec45354392bafc21"}
    for url, key in before.items():
        keys = set()
        for u in (url, url.replace("://", f"://{USER}:{PASSWORD}@")):
            b = OpenAIBackend("m", u)
            b._server_info = {"id": "m", "owned_by": "me"}
            keys |= set(plan_chat(b, req).keys)
        assert keys == {key}


def _grep_run(run: Path, *outputs: str) -> list[str]:
    found = [f"{p}: {s}" for p in sorted(run.rglob("*")) if p.is_file() for s in SECRETS if s.encode() in p.read_bytes()]
    return found + [f"output: {s}" for o in outputs for s in SECRETS if s in o]


def _reply(path, body):
    if not path.endswith("/chat/completions"):  # no tokenizer routes
        return 404, {"error": {"message": "not found"}}
    return chat_completion("Output (a)" if "Output (b)" in str(body) else "4", model="m")


@pytest.mark.slow
def test_no_file_of_a_run_and_no_output_holds_the_credentials(tmp_path):
    """A tiny evaluate (LLMBar Vanilla, 12 calls) and a tiny `dhp.pipeline` run against a loopback stub reached as
    http://dhpuser:pw-7c1e9a@127.0.0.1:<port>/v1: every byte of both run folders (cache.sqlite, manifest.json,
    leaderboard.csv, ...) and the console output is searched (before issue 50: 11 files of the evaluate run and its
    output; the pipeline's manifest.json)."""
    with ScriptedOpenAI(_reply, model="m") as srv:
        url = srv.base_url.replace("http://", f"http://{USER}:{PASSWORD}@")
        ev = subprocess.run([sys.executable, "-m", "dhp", "evaluate", f"openai:m@{url}", "--protocol",
                             "llmbar:Vanilla", "--profile", "quick", "--yes", "--run-dir", str(tmp_path / "ev")],
                            capture_output=True, text=True, cwd=ROOT, env=child_env(), timeout=600)
        pipe = subprocess.run([sys.executable, "-m", "dhp.pipeline",
                               *tiny_cli_args(tmp_path / "pipe", tmp_path / "pipe" / "cache.sqlite"),
                               "--judge", f"openai:m@{url}", "--mode", "sample"],
                              capture_output=True, text=True, cwd=ROOT, env=child_env(), timeout=600)
        posts = len(srv.requests)
    assert ev.returncode == 0, ev.stderr[-2000:]
    assert pipe.returncode == 0, pipe.stderr[-2000:]
    assert posts >= 12 and "calls made: 12" in ev.stdout  # the stub answered both runs
    assert (tmp_path / "ev" / "cache.sqlite").is_file() and (tmp_path / "pipe" / "manifest.json").is_file()
    assert _grep_run(tmp_path / "ev", ev.stdout, ev.stderr) == []
    assert _grep_run(tmp_path / "pipe", pipe.stdout, pipe.stderr) == []
