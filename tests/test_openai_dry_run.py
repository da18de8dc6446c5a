"""A dry run sends nothing (issue 50): ``dhp evaluate openai:gpt-4o --profile quick --dry-run`` with a key set and no
network opens no connection — no GET /v1/models, no tokenizer probe — and its plan says the model list was not
checked; "calls made" counts calls, not the model list."""

from __future__ import annotations

import io
import socket

import pytest

from dhp.evaluate import evaluate
from servers import ScriptedOpenAI, chat_completion


@pytest.fixture
def no_network(monkeypatch):
    """Every name lookup and connection of this process is recorded and refused (as on a machine without network)."""
    tried: list = []

    def lookup(host, *a, **k):
        tried.append(("getaddrinfo", host))
        raise socket.gaierror(socket.EAI_NONAME, "no network in this test")

    def connect(self, address):
        tried.append(("connect", address))
        raise ConnectionRefusedError("no network in this test")

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    return tried


def test_a_dry_run_of_a_hosted_judge_opens_no_connection(no_network, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-dry-run-no-network-5d21")
    out = io.StringIO()
    got = evaluate("openai:gpt-4o", profile="quick", dry_run=True, run_dir=str(tmp_path / "run"), out=out)
    text = out.getvalue()
    assert no_network == []  # not one lookup or connection (the old plan asked api.openai.com for its model list)
    assert got["calls_made"] == 0 and "calls: 12 to make (0 cached)" in text
    assert "model list not checked" in text and "token counts are local estimates" in text
    assert "sk-dry-run-no-network-5d21" not in text
    assert not (tmp_path / "run").exists()  # and nothing written


def test_a_dry_run_of_a_local_server_sends_it_nothing(monkeypatch, tmp_path):
    # a loopback server is asked for its tokenizer when planning live; a dry run asks it nothing at all
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedOpenAI(lambda path, body: chat_completion("Output (a)", model="m"), model="m") as srv:
        out = io.StringIO()
        evaluate(f"openai:m@{srv.base_url}", profile="quick", dry_run=True, run_dir=str(tmp_path / "run"), out=out)
        assert srv.requests == [] and srv.connections == set()
    assert "model list not checked" in out.getvalue()


def test_calls_made_counts_calls_not_the_model_list():
    import httpx

    from dhp.backends import ChatRequest, OpenAIBackend

    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [{"id": "m", "object": "model"}]})
        return httpx.Response(200, json=chat_completion("Output (a)", model="m"))

    b = OpenAIBackend("m", "http://127.0.0.1:9/v1", transport=httpx.MockTransport(handle))
    b.chat_many([ChatRequest.make([{"role": "user", "content": f"q{i}"}], 8) for i in range(3)])
    assert seen.count("/v1/models") == 1 and b.attempts == 3  # 3 calls made (the old count said 4)


def test_dhp_run_dry_run_of_a_hosted_judge_opens_no_connection(no_network, monkeypatch, tmp_path, capsys):
    """``dhp run --dry-run`` (one method, the pipeline's entry) plans offline as ``evaluate --dry-run`` does."""
    from dhp.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "sk-run-dry-no-network-77aa")
    rc = main(["run", "--dataset", "summeval", "--n-items", "1", "--judge", "openai:gpt-4o-mini", "--mode", "sample",
               "--n-samples", "2", "--run-dir", str(tmp_path / "run"), "--dry-run"])
    text = capsys.readouterr().out
    assert rc == 0 and no_network == [], no_network
    assert "to make" in text and "model list not checked" in text and "sk-run-dry-no-network-77aa" not in text
    assert not (tmp_path / "run").exists()
