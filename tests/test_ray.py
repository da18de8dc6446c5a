"""--engine ray (dhp.backends.ray_engine): Ray Data's LLM batch inference answering the calls, checked against the
live engine. Opt-in (`make test-ray`, its own environment with the `ray` extra); skipped where Ray is not installed.

The first tests need no cluster (the vLLM processor's configuration and log-probability mapping, the error rows'
reasons). The rest start a two-node Ray cluster on loopback (`ray start --head`, then `ray start --address` as a
second node, one CPU each, a 500 MB object store each) and a `llama_cpp.server` with the embedded SmolLM2 behind a
counting proxy, and compare `dhp evaluate --profile quick --engine ray` with the live run.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (make test-ray builds its environment)")
pytest.importorskip("ray.data.llm", reason="Ray Data's LLM package is not importable")
pytest.importorskip("aiohttp", reason="the ray extra's aiohttp is not installed")

from conftest import ROOT, child_env  # noqa: E402
from servers import ScriptedOpenAI, free_port  # noqa: E402

from dhp import calls  # noqa: E402
from dhp.backends import ChatRequest, get_backend  # noqa: E402
from dhp.backends import ray_engine as re_  # noqa: E402
from dhp.config import EngineParams  # noqa: E402

REFUSE = "REFUSE-ME"
#: an OpenAI-style refusal of a prompt over the context (the live path reads it as a context overflow)
REFUSAL = "This model's maximum context length is 2048 tokens. However, you requested 4100 tokens."


# ---------------------------------------------------------------------------------------------- no cluster

def test_vllm_logprobs_map_to_the_live_backends_top_logprobs():
    """vLLM's per-token dicts (token id -> logprob, rank, decoded token; the sampled token first) become what `vllm
    serve` sends for top_logprobs=k read by the live parser: the first k entries, by decoded text, first one wins."""
    per_token = [{"7": {"logprob": -0.1, "rank": 1, "decoded_token": "4"},
                  "9": {"logprob": -2.5, "rank": 2, "decoded_token": "5"},
                  "3": {"logprob": -4.0, "rank": 3, "decoded_token": "3"}},
                 {"5": {"logprob": -20000.0, "rank": 4, "decoded_token": "x"},  # sampled, far down: floored
                  "8": {"logprob": -0.01, "rank": 1, "decoded_token": "y"},
                  "2": {"logprob": -3.0, "rank": 2, "decoded_token": "y"}}]  # same text: the first one kept
    assert re_.vllm_top_logprobs(per_token, 2) == [{"4": -0.1, "5": -2.5}, {"x": -9999.0, "y": -0.01}]
    # the same reply through the live parser (the OpenAI body vllm serve builds) gives the same Completion
    body = {"choices": [{"message": {"content": "4x"}, "finish_reason": "stop", "logprobs": {"content": [
        {"token": "4", "logprob": -0.1, "top_logprobs": [{"token": "4", "logprob": -0.1},
                                                           {"token": "5", "logprob": -2.5}]},
        {"token": "x", "logprob": -9999.0, "top_logprobs": [{"token": "x", "logprob": -9999.0},
                                                              {"token": "y", "logprob": -0.01}]}]}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 2}}
    live = get_backend("openai:m@http://127.0.0.1:9/v1").parse_chat(body)
    row = {"generated_text": "4x", "num_input_tokens": 12, "num_generated_tokens": 2,
           "logprobs": json.dumps(per_token), "__inference_error__": ""}
    got = re_._vllm_result(row, 2)
    assert (got.text, got.top_logprobs, got.prompt_tokens, got.completion_tokens) == \
        (live.text, live.top_logprobs, live.prompt_tokens, live.completion_tokens)
    assert re_.vllm_top_logprobs(per_token, None) is None  # no logprobs asked for: none, as live
    err = re_._vllm_result({"__inference_error__": "ValueError: prompt too long"}, 2)
    assert isinstance(err, Exception) and "prompt too long" in str(err)


def test_vllm_processor_config_and_sampling():
    backend = get_backend("ray-vllm:/models/SmolLM2.gguf", n_ctx=4096)
    params = EngineParams(engine="ray", ray_replicas=3, ray_tensor_parallel=2, ray_batch_size=32)
    cfg = re_.vllm_processor_config(backend, params)
    assert (cfg.model_source, cfg.concurrency, cfg.batch_size, cfg.should_continue_on_error) == \
        ("/models/SmolLM2.gguf", 3, 32, True)
    assert cfg.engine_kwargs["tensor_parallel_size"] == 2 and cfg.engine_kwargs["max_model_len"] == 4096
    req = ChatRequest(messages=(("user", "rate it"),), max_tokens=3, temperature=0.0, seed=7, logprobs=5)
    assert re_.vllm_sampling_params(req) == {"temperature": 0.0, "max_tokens": 3, "seed": 7, "logprobs": 5, "n": 1}
    from dhp.backends import _ray_worker as w

    row = w.vllm_row({"dhp_index": 4, "dhp_messages": json.dumps(req.message_dicts()),
                      "dhp_sampling": json.dumps({**re_.vllm_sampling_params(req), "seed": None})})
    assert row["sampling_params"] == {"temperature": 0.0, "max_tokens": 3, "logprobs": 5, "n": 1}  # None: left out
    assert backend.identity == "ray-vllm:/models/SmolLM2.gguf"


def test_an_error_row_carries_the_live_reason():
    """A refused request answered live and through the engine's row mapping gives the same recorded reason."""
    refuse = lambda path, body: (400, {"error": {"message": REFUSAL, "type": "invalid_request_error"}})  # noqa: E731
    with ScriptedOpenAI(refuse) as srv:
        req = ChatRequest(messages=(("user", "x"),), max_tokens=2, temperature=0.0)
        live = calls.chat(f"openai:stub@{srv.base_url}", [req], progress=False)[0]
        backend = get_backend(f"openai:stub@{srv.base_url}")
        body = json.dumps({"error": {"message": REFUSAL, "type": "invalid_request_error"}})
        assert calls._reason(re_.live_result(backend, 400, body)) == live.reason
        assert "context overflow" in live.reason
        # a status that stops a live run stops this one too
        with pytest.raises(Exception, match="401"):
            re_.live_result(backend, 401, json.dumps({"error": {"message": "bad key"}}))
        assert "timeout" in calls._reason(re_.live_result(backend, 0, "", "timeout"))


# ---------------------------------------------------------------------------------------------- the cluster

def _ray_env(address: str | None = None) -> dict:
    # a loopback-only test cluster: no token (a real cluster keeps Ray's token auth, docs/cluster.md)
    env = child_env(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(ROOT))
    if address:
        env["RAY_ADDRESS"] = address
    return env


def _ray_start(args: list[str], env: dict) -> None:
    """`ray start`, up to three tries: on a loaded machine the node agent may miss the raylet's 15 s window."""
    ray_cli = str(Path(sys.executable).with_name("ray"))
    for attempt in range(3):
        p = subprocess.run([ray_cli, "start", *args], env=env, capture_output=True, text=True, timeout=300)
        if p.returncode == 0:
            return
    pytest.fail(f"ray start {' '.join(args)} failed 3 times: {p.stdout[-1500:]}{p.stderr[-1500:]}")


def _stop_cluster(temp_dir: str) -> None:
    """End the processes of this test's cluster only: those whose command line names its own temp dir."""
    import psutil

    for proc in psutil.process_iter(["pid", "cmdline"]):
        if any(temp_dir in part for part in proc.info["cmdline"] or ()):
            try:
                proc.terminate()
            except psutil.Error:
                pass
    time.sleep(3)
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if any(temp_dir in part for part in proc.info["cmdline"] or ()):
            try:
                proc.kill()
            except psutil.Error:
                pass


@pytest.fixture(scope="module")
def cluster():
    temp_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths have a length limit
    port = free_port()
    env = _ray_env()
    common = ["--num-cpus", "1", "--object-store-memory", "500000000", "--node-ip-address", "127.0.0.1",
              "--disable-usage-stats"]
    try:
        _ray_start(["--head", "--port", str(port), "--temp-dir", temp_dir, "--include-dashboard=false", *common], env)
        _ray_start(["--address", f"127.0.0.1:{port}", *common], env)
        yield f"127.0.0.1:{port}"
    finally:
        _stop_cluster(temp_dir)


class CountingProxy(ScriptedOpenAI):
    """Forwards every chat request to the llama server, counting each (time, body hash); a body containing REFUSE
    is answered 400 with the server's context-overflow message, as llama_cpp.server refuses a prompt too long."""

    def __init__(self, upstream: str, model: str):
        super().__init__(self._forward, model=model, max_lifetime=3600)
        self.upstream = upstream
        self.log: list[tuple[float, str]] = []

    def _forward(self, path: str, body: dict):
        if path.endswith("/chat/completions"):  # (the live backend also asks the server's tokenizer: not counted)
            self.log.append((time.time(), hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()))
        if REFUSE in json.dumps(body):
            return 400, {"error": {"message": REFUSAL, "type": "invalid_request_error"}}
        req = urllib.request.Request(self.upstream + path.removeprefix("/v1"), data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")


@pytest.fixture(scope="module")
def proxy(llama_server):
    with CountingProxy(llama_server.base_url, llama_server.model_alias) as p:
        yield p


def _evaluate(judge: str, run_dir: Path, *extra: str, env: dict | None = None, wait: bool = True):
    cmd = [sys.executable, "-m", "dhp", "evaluate", judge, "--profile", "quick", "--yes", "--run-dir", str(run_dir),
           *extra]
    log = open(run_dir.parent / f"{run_dir.name}.log", "a")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env or _ray_env(), stdout=log, stderr=subprocess.STDOUT, text=True)
    if wait:
        proc.wait(timeout=1800)
        log.close()
        out = (run_dir.parent / f"{run_dir.name}.log").read_text()
        assert proc.returncode == 0, out[-3000:]
        return out
    return proc


def _keys(cache: Path) -> set[str]:
    try:
        with sqlite3.connect(cache) as con:
            return {r[0] for r in con.execute("SELECT key FROM calls")}
    except sqlite3.OperationalError:  # the file is there, its table not yet (a run just starting)
        return set()


def _board(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(run_dir / "leaderboard.csv")


def test_evaluate_quick_through_ray_equals_live_then_resumes_after_sigkill(cluster, proxy, tmp_path):
    judge = f"openai:{proxy.model}@{proxy.base_url}"
    ray_args = ["--engine", "ray", "--ray-address", cluster, "--ray-batch-size", "2", "--ray-cpus", "0.9"]
    live_dir, ray_dir, kill_dir = tmp_path / "live", tmp_path / "ray", tmp_path / "killed"
    for d in (live_dir, ray_dir, kill_dir):
        d.mkdir()

    _evaluate(judge, live_dir)
    n_live = len(proxy.log)
    out = _evaluate(judge, ray_dir, *ray_args)
    assert "Engine: ray" in out and "rows per block" in out  # the plan names the engine
    assert "from 2 node(s)" in out  # the blocks ran on both nodes
    assert len(proxy.log) - n_live == n_live  # every call asked once, through Ray
    assert _keys(ray_dir / "cache.sqlite") == _keys(live_dir / "cache.sqlite")  # the same cache keys
    live_board, ray_board = _board(live_dir), _board(ray_dir)
    pd.testing.assert_frame_equal(live_board, ray_board, check_exact=False, rtol=0, atol=1e-12)
    evaluated = json.loads((ray_dir / "evaluate.json").read_text())
    assert sum(evaluated["calls_made"].values()) == n_live

    before = len(proxy.log)
    _evaluate(judge, ray_dir, *ray_args)  # a rerun: everything cached
    assert len(proxy.log) == before

    # the driver SIGKILLed three times, each once some answers were committed, then resumed
    cache = kill_dir / "cache.sqlite"
    kills, runs = [], []
    for _ in range(3):
        start = time.time()
        have = len(_keys(cache)) if cache.exists() else 0
        # one call a block: each answer committed alone, so three kills at the first new commit leave calls to ask
        proc = _evaluate(judge, kill_dir, *ray_args, "--ray-batch-size", "1", wait=False)
        try:
            deadline = time.time() + 900
            while proc.poll() is None and time.time() < deadline:
                if cache.exists() and len(_keys(cache)) > have:
                    break
                time.sleep(0.2)
            log = (kill_dir.parent / f"{kill_dir.name}.log").read_text()
            assert proc.poll() is None, f"the run ended before it could be killed: {log[-2000:]}"
        finally:  # no driver outlives the test
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        kills.append(len(_keys(cache)))
        runs.append((start, time.time()))
    start = time.time()
    _evaluate(judge, kill_dir, *ray_args)
    runs.append((start, time.time()))
    asked = [[h for t, h in proxy.log if a <= t <= b] for a, b in runs]
    # each run asks only what was not cached when it started: a resumed run never asks a committed answer again
    for i, n_cached in enumerate([0, *kills]):
        assert len(asked[i]) <= n_live - n_cached, (i, len(asked[i]), n_cached)
    assert len(asked[-1]) == n_live - kills[-1]  # the last run asks exactly the rest
    assert kills[0] < kills[-1] <= n_live and all(a <= b for a, b in zip(kills, kills[1:]))
    assert _keys(cache) == _keys(live_dir / "cache.sqlite")
    pd.testing.assert_frame_equal(live_board, _board(kill_dir), check_exact=False, rtol=0, atol=1e-12)


def test_refused_rows_do_not_fail_the_job_and_carry_the_live_reasons(cluster, proxy, tmp_path):
    """30 prompts the server refuses among 10 it answers: through Ray the job finishes, the 10 are answered as live,
    and the 30 carry the reason the live path records (an uncached failure each, asked again by a rerun)."""
    judge = f"openai:{proxy.model}@{proxy.base_url}"
    reqs = [ChatRequest(messages=(("user", f"{REFUSE} {i}" if i % 4 else f"Say {i}."),), max_tokens=3,
                        temperature=0.0) for i in range(40)]
    live = calls.chat(judge, reqs, tmp_path / "live.sqlite", progress=False, max_consecutive_failures=100)
    engine = re_.RayEngine(EngineParams(engine="ray", ray_address=cluster, ray_batch_size=8))
    os.environ["RAY_AUTH_MODE"] = "disabled"
    with calls.using_engine(engine):
        got = calls.chat(judge, reqs, tmp_path / "ray.sqlite", progress=False, max_consecutive_failures=100)
    assert engine.last["rows"] == 40
    refused = [i for i in range(40) if i % 4]
    assert len(refused) == 30
    for i in range(40):
        if i in refused:
            assert isinstance(got[i], calls.CallFailure) and got[i].reason == live[i].reason, (i, got[i], live[i])
            assert "context overflow" in got[i].reason
        else:
            assert got[i].text == live[i].text and got[i].top_logprobs == live[i].top_logprobs
    with sqlite3.connect(tmp_path / "ray.sqlite") as con:  # remembered as failed, as live: a rerun asks them last
        assert con.execute("SELECT COUNT(*) FROM failures").fetchone()[0] == 30
        assert con.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 10
