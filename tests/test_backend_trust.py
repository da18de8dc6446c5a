"""Backends that can be trusted: token estimates that do not under-count Chinese, no API key over plain
http to a remote host, per-row HTTP 400s, a circuit breaker when a server dies mid-run, server identity
in cache keys without the port."""

from __future__ import annotations

import math

import pytest

from dhp import calls
from dhp.backends import ChatRequest, OpenAIBackend, estimate_tokens, truncate_estimated
from dhp.cache import Cache
from dhp.errors import DHPError

ZH = "世界卫生组织周二表示，全球疫苗接种率在过去一年中有所提高，但仍有数百万儿童没有接种基本疫苗。" * 4


def test_chinese_is_not_under_counted():
    """The old rule (4 characters a token) counted this text as ~47 tokens; Chinese BPE tokenizers need
    one to two tokens per character, so a source cut by the old count still overflowed the context."""
    old_rule = math.ceil(len(ZH) / 4)
    assert estimate_tokens(ZH) >= len(ZH) - ZH.count("，") > 3 * old_rule
    cut = truncate_estimated(ZH, 50)
    assert estimate_tokens(cut) <= 50 and ZH.startswith(cut) and len(cut) >= 23
    english = "The quick brown fox jumps over the lazy dog. " * 10
    assert len(english) / 4 <= estimate_tokens(english) <= len(english) / 2  # conservative, not absurd


def test_the_estimate_is_exact_arithmetic_and_truncation_its_inverse():
    """A third of a token per ASCII character, two per wide one, summed exactly: a float sum of thirds drifted above
    the integer (33 characters read as 12 tokens, not 11; 580 of the lengths 1..2999)."""
    for n in range(1, 3000):
        assert estimate_tokens("a" * n) == -(-n // 3), n
    mixed = "ab世c" * 50  # 3 one-third characters and one wide per repeat: 1 + 2 = 3 tokens a repeat
    assert estimate_tokens(mixed) == 150
    for k in range(0, 160, 7):
        cut = truncate_estimated(mixed, k)
        assert estimate_tokens(cut) <= max(k, 1) and (cut == mixed or estimate_tokens(mixed[:len(cut) + 1]) > k)
        assert truncate_estimated("a" * 500, k) == "a" * min(500, 3 * k)


def test_embedded_tokenizer_agrees_the_estimate_is_conservative_for_chinese():
    from dhp.backends import get_backend

    exact = get_backend("embedded").count_tokens(ZH)
    assert estimate_tokens(ZH) >= exact and math.ceil(len(ZH) / 4) < 0.5 * exact


def test_key_is_never_sent_over_plain_http_to_a_remote_host(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-test-key")
    with pytest.raises(DHPError, match="--allow-insecure-key") as e:
        OpenAIBackend("m", "http://192.0.2.1/v1")  # documentation address: refused before any connection
    assert "sk-secret-test-key" not in str(e.value)
    assert OpenAIBackend("m", "http://192.0.2.1/v1", allow_insecure_key=True).is_paid  # explicit opt-in
    OpenAIBackend("m", "https://api.example.org/v1")  # https is fine
    OpenAIBackend("m", "http://127.0.0.5:9/v1")  # loopback is fine
    b = OpenAIBackend("m", "http://localhost:9/v1")
    assert "sk-secret" not in repr(b) and "sk-secret" not in str(b.__dict__.get("identity"))


def test_loopback_identity_leaves_out_the_port():
    a, b = OpenAIBackend("m", "http://127.0.0.1:1/v1"), OpenAIBackend("m", "http://127.0.0.1:2/v1")
    a._server_info = b._server_info = {"id": "m", "owned_by": "me"}
    assert a.cache_identity() == b.cache_identity()
    c = OpenAIBackend("m", "http://127.0.0.1:2/v1")
    c._server_info = {"id": "m", "owned_by": "someone else"}
    assert c.cache_identity() != a.cache_identity()


@pytest.mark.slow
def test_server_features_per_row_400_and_tokenizer(llama_server):
    """Against a real llama_cpp.server: its tokenizer endpoint gives exact counts; a prompt longer than
    its context fails that row with the server's reason while the other rows are answered; `n` replies
    come back whether or not the server honours `n`."""
    from dhp.backends import get_backend

    b = get_backend(f"openai:smollm2-135m@{llama_server.base_url}")
    emb = get_backend("embedded")
    text = "Judges read summaries carefully. " * 5
    assert b.count_tokens(text) == len(emb.tokenize(text, special=True))
    assert b._tokenize_route == "llama_cpp"
    ok = ChatRequest.make([{"role": "user", "content": "Reply with the digit 4."}], 3)
    huge = ChatRequest.make([{"role": "user", "content": "word " * 5000}], 3)
    three = ChatRequest.make([{"role": "user", "content": "Say hi."}], 3, temperature=0.8, n=3)
    store = Cache(None)
    planned = [calls.plan_chat(b, r) for r in (ok, huge, three)]
    report = calls.run(b, planned, store, progress=False)
    assert store.get(planned[0].keys[0]) is not None
    assert store.get(planned[1].keys[0]) is None
    assert "HTTP 400" in report.errors[planned[1].keys[0]] or "context" in report.errors[planned[1].keys[0]]
    assert all(store.get(k) is not None for k in planned[2].keys)
    # llama-cpp-python's server ignores `n`: the backend asks for the missing replies one by one.
    assert report.stats["calls"] >= 1 + 1 and report.stats["replies_made"] == 1 + 1 + 3


@pytest.mark.slow
def test_a_server_that_dies_mid_run_stops_the_run_with_finished_calls_kept(tmp_path):
    """Once the model list answered, a dead server used to yield a 'completed' run of NaN rows; now the
    circuit breaker stops it, and what was answered stays in the cache for the rerun."""
    from servers import start_llama_server

    server = start_llama_server(model_alias="smollm2-135m", n_threads=1, timeout=180)
    try:
        # long timeout: the first two calls must be answered however loaded the machine; once the server is gone, calls
        # fail at once (connection refused), not by timing out
        b = OpenAIBackend("smollm2-135m", server.base_url, max_retries=1, backoff_initial=0.05, timeout=600)
        store = Cache(tmp_path / "c.sqlite")
        first = [ChatRequest.make([{"role": "user", "content": f"Say {i}."}], 2) for i in range(2)]
        calls.run(b, [calls.plan_chat(b, r) for r in first], store, progress=False)
    finally:
        server.stop()
    later = [ChatRequest.make([{"role": "user", "content": f"Count to {i}."}], 2) for i in range(30)]
    with pytest.raises(DHPError, match="failed in a row"):
        calls.run(b, [calls.plan_chat(b, r) for r in first + later], store, progress=False,
                  max_consecutive_failures=5)
    assert len(store) == 2
