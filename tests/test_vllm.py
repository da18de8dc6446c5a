"""The judge through a real vLLM engine, three routes (``make test-vllm``; skipped where vLLM is not installed):

(a) ``openai:<model>@http://127.0.0.1:PORT/v1`` against ``vllm serve`` with prefix caching on,
(b) ``vllm:<local model dir>`` (offline ``vllm.LLM``),
(c) ``python -m dhp batch``-style export → ``vllm run-batch`` (its module entry point) → import → rerun with the
    server stopped (0 live calls), for the ``openai:`` judge of (a) and for the ``vllm:`` judge of (b) — whose rerun
    never starts an engine.

The model is the embedded SmolLM2-135M GGUF converted to float32 (scripts/vllm_model.py). The three routes run the
same greedy model on the same engine version, so their scores agree up to the order of floating-point sums, which
depends on how requests are batched (offline: all prompts at once; server: one at a time): |Δ| ≤ 0.02 on the
expected 1–5 score, and a reply that parses on one route parses on the others. The llama.cpp judge computes the
same model with Q4_1 kernels, so its scores differ more (reported, not asserted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make test-vllm sets it up")
from servers import free_port  # noqa: E402

from backend_contract import check_backend  # noqa: E402

from dhp import batch  # noqa: E402
from dhp.backends import OpenAIBackend  # noqa: E402
from dhp.cache import Cache  # noqa: E402
from dhp.pipeline import run_pipeline  # noqa: E402

MODEL = Path(os.environ.get("DHP_VLLM_MODEL") or Path.home() / ".cache" / "dhp" / "vllm" / "smollm2-135m")
NAME = "smollm2-135m"
ENGINE = ["--dtype", "float32", "--max-model-len", "2048", "--enforce-eager", "--seed", "0"]
TOL = 0.02
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (MODEL / "config.json").is_file(),
                                 reason=f"no converted model at {MODEL}: run scripts/vllm_model.py")]
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache per engine (the default takes 4)


def _run(tmp: Path, name: str, judge) -> tuple[Path, callable]:
    run_dir = tmp / name
    kwargs = dict(dataset="summeval", n_items=1, seed=0, judge=judge, mode="logprobs", run_dir=run_dir,
                  perturbations=["char_typo"], n_boot=0, n_null=50)
    return run_dir, (lambda: run_pipeline(**kwargs))


def _scores(run_dir: Path) -> pd.DataFrame:
    s = pd.read_parquet(run_dir / "scores.parquet")
    return s.set_index(["item_id", "perturbation", "severity", "metric"])["score"].sort_index()


def _agree(a: pd.Series, b: pd.Series) -> float:
    assert list(a.index) == list(b.index)
    assert (a.isna() == b.isna()).all(), pd.concat([a, b], axis=1)
    both = a.notna() & b.notna()
    assert both.any(), "no reply held a score on any route"
    diff = float(np.abs(a[both] - b[both]).max())
    assert diff <= TOL, pd.concat([a, b], axis=1)
    return diff


class Server:
    def __init__(self, port: int, log: Path):
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL),
               "--served-model-name", NAME, "--host", "127.0.0.1", "--port", str(port), "--enable-prefix-caching",
               *ENGINE]
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.time() + 600
        while time.time() < deadline:
            assert self.proc.poll() is None, log.read_text()[-3000:]
            try:
                urllib.request.urlopen(self.url + "/v1/models", timeout=2).read()
                return
            except OSError:
                time.sleep(2)
        self.stop()
        raise AssertionError("vllm serve did not come up in 600 s")

    def metric(self, name: str) -> float:
        """A Prometheus counter of the server (``<name>_total``, summed over its labels)."""
        text = urllib.request.urlopen(self.url + "/metrics", timeout=10).read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.split("{")[0].split(" ")[0] == f"{name}_total")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def test_three_routes_through_vllm_agree(tmp_path, capsys):
    from dhp.backends import VLLMBackend

    report = {}
    # (b) offline vllm.LLM
    t0 = time.perf_counter()
    offline = VLLMBackend(str(MODEL), n_ctx=2048, dtype="float32", enforce_eager=True)
    b_dir, run_b = _run(tmp_path, "offline", offline)
    run_b()
    report["offline_s"] = time.perf_counter() - t0
    b = _scores(b_dir)
    assert json.loads((b_dir / "judge_stats.json").read_text())["calls"] > 0
    report["contract_offline"] = len(check_backend(offline))  # the contract every backend keeps
    offline_tokens = offline.count_tokens("The cat sat on the mat.")
    del offline  # its engine's memory back before the server starts
    import gc

    gc.collect()

    # (a) vllm serve + the OpenAI-compatible backend
    port = free_port()
    server = Server(port, tmp_path / "serve.log")
    spec = f"openai:{NAME}@{server.url}/v1"
    try:
        t0 = time.perf_counter()
        a_dir, run_a = _run(tmp_path, "serve", spec)
        run_a()
        report["serve_s"] = time.perf_counter() - t0
        served = OpenAIBackend(NAME, f"{server.url}/v1", max_retries=1)
        assert served.n_ctx == 2048  # max_model_len, read from the server
        assert served.count_tokens("The cat sat on the mat.") == offline_tokens  # /tokenize, the same tokenizer
        report["contract_serve"] = len(check_backend(served))
        hits, queries = server.metric("vllm:prefix_cache_hits"), server.metric("vllm:prefix_cache_queries")
        report["prefix_cache_hit_rate"] = hits / queries if queries else float("nan")
        stats = json.loads((a_dir / "judge_stats.json").read_text())
        report["prompt_tokens_per_s"] = stats["prompt_tokens_submitted"] / report["serve_s"]
        report["calls"] = stats["calls"]
        # (c) export the same run's calls while the server can still describe its model ...
        c_dir, run_c = _run(tmp_path, "batch", spec)
        calls = tmp_path / "calls.jsonl"
        n = batch.export_calls(run_c, calls)
        assert n == stats["calls"]
    finally:
        server.stop()
    a = _scores(a_dir)
    report["max_diff_serve_vs_offline"] = _agree(a, b)

    # ... then answer them with vllm run-batch, with no server anywhere
    out = tmp_path / "answers.jsonl"
    r = subprocess.run([sys.executable, "-m", "vllm.entrypoints.openai.run_batch", "-i", str(calls), "-o", str(out),
                        "--model", str(MODEL), "--served-model-name", NAME, *ENGINE],
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    rep = batch.import_results(run_c, out, c_dir / "cache.sqlite")
    assert rep.stored == n and not rep.error_lines
    _, rerun = _run(tmp_path, "batch", spec)  # a new backend: the cache's record names the model, no connection
    rerun()
    assert json.loads((c_dir / "judge_stats.json").read_text())["calls"] == 0
    report["max_diff_batch_vs_serve"] = _agree(_scores(c_dir), a)
    with Cache(c_dir / "cache.sqlite") as cache:
        assert len(cache) == n
    # (d) a vllm: judge's own calls, exported and answered by vllm run-batch: the rerun never starts an engine
    d_dir, run_d = _run(tmp_path, "vllm_batch", VLLMBackend(str(MODEL), n_ctx=2048, dtype="float32",
                                                             enforce_eager=True))
    calls_d, out_d = tmp_path / "calls_vllm.jsonl", tmp_path / "answers_vllm.jsonl"
    n_d = batch.export_calls(run_d, calls_d)
    assert n_d == n
    r = subprocess.run([sys.executable, "-m", "vllm.entrypoints.openai.run_batch", "-i", str(calls_d), "-o",
                        str(out_d), "--model", str(MODEL), *ENGINE], capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    rep = batch.import_results(run_d, out_d, d_dir / "cache.sqlite")
    assert rep.stored == n_d and not rep.error_lines
    fresh = VLLMBackend(str(MODEL), n_ctx=2048, dtype="float32", enforce_eager=True)
    _, rerun_d = _run(tmp_path, "vllm_batch", fresh)
    rerun_d()
    assert json.loads((d_dir / "judge_stats.json").read_text())["calls"] == 0 and fresh._llm is None
    report["max_diff_vllm_batch_vs_offline"] = _agree(_scores(d_dir), b)

    # the llama.cpp judge: the same weights in Q4_1 kernels instead of float32 — reported, not asserted
    e_dir, run_e = _run(tmp_path, "embedded", "embedded")
    run_e()
    e = _scores(e_dir)
    both = e.notna() & a.notna()
    report["llama_cpp_rows_parsed_same"] = float((e.isna() == a.isna()).mean())
    report["max_diff_llama_cpp_vs_serve"] = float(np.abs(e[both] - a[both]).max()) if both.any() else float("nan")
    with capsys.disabled():
        print("\n[vllm]", json.dumps({k: round(v, 4) for k, v in report.items()}))
