"""Offline batch: export a run's pending calls, answer them through a real llama_cpp.server, import,
rerun with zero live calls and get the same scores as a live run; foreign or corrupt lines are
rejected with nothing imported."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dhp import batch
from dhp.backends import OpenAIBackend
from dhp.cache import Cache
from dhp.errors import DHPError
from dhp.pipeline import run_pipeline
from conftest import TINY

pytestmark = pytest.mark.slow


def _run(tmp: Path, name: str, url: str):
    run_dir = tmp / name
    # One request at a time: llama.cpp reuses the previous prompt's KV cache, so the live run and the
    # batch answers must see the same sequence of prompts to give bit-identical logprobs.
    backend = OpenAIBackend("smollm2-135m", url, concurrency=1)
    kwargs = dict(dataset=TINY["dataset"], n_items=1, seed=0, judge=backend, mode="logprobs", run_dir=run_dir,
                  perturbations=["char_typo"], n_boot=0)
    return run_dir, (lambda: run_pipeline(**kwargs))


def test_export_answer_import_rerun_matches_live(tmp_path):
    from servers import free_port, start_llama_server

    port = free_port()  # both servers on one port: the judge's identity (with its URL) is in the scores
    server = start_llama_server(model_alias="smollm2-135m", port=port, n_threads=1, timeout=180)
    try:
        live_dir, live = _run(tmp_path, "live", server.base_url)
        live()
    finally:
        server.stop()
    live_stats = json.loads((live_dir / "judge_stats.json").read_text())
    assert live_stats["calls"] > 0

    server = start_llama_server(model_alias="smollm2-135m", port=port, n_threads=1, timeout=180)
    try:
        run_dir, run = _run(tmp_path, "batch", server.base_url)
        calls_file = tmp_path / "calls.jsonl"
        n = batch.export_calls(run, calls_file)
        lines = batch.read_lines(calls_file)
        assert n == len(lines) == live_stats["calls"]
        assert {ln["url"] for ln in lines} == {batch.CHAT_URL}
        assert not (run_dir / "scores.parquet").exists()  # export calls no model and writes no table

        out = tmp_path / "results.jsonl"
        batch.answer_file(calls_file, out, server.base_url)
        cache = run_dir / "cache.sqlite"

        # A foreign line and a corrupt line: the whole file is rejected, nothing stored.
        good = out.read_text().splitlines()
        bad = tmp_path / "bad.jsonl"
        foreign = json.loads(good[0]) | {"custom_id": "0" * 64}
        bad.write_text("\n".join(good[1:] + [json.dumps(foreign), "{not json"]) + "\n")
        with pytest.raises(DHPError, match="not a pending call|not a batch output record"):
            batch.import_results(run, bad, cache)
        with Cache(cache) as c:
            assert len(c) == 0

        report = batch.import_results(run, out, cache)
        assert report.stored == n and report.unanswered == 0 and not report.error_lines
        again = batch.import_results(run, out, cache)  # idempotent: nothing pending any more
        assert again.stored == 0
        assert batch.export_calls(run, tmp_path / "none.jsonl") == 0
    finally:
        server.stop()
    # the rerun happens where that server does not exist: what it said about its model was recorded in the cache
    # at export time, so the cached answers are found without a connection (issue 23, "offline means offline")
    with Cache(cache) as c:
        assert c.recorded_server("openai:smollm2-135m@" + server.base_url)["id"] == "smollm2-135m"
    _, offline = _run(tmp_path, run_dir.name, server.base_url)  # a new backend, as a new process
    offline()
    stats = json.loads((run_dir / "judge_stats.json").read_text())
    assert stats["calls"] == 0
    assert (run_dir / "scores.parquet").read_bytes() == (live_dir / "scores.parquet").read_bytes()
    # the control: a cache without the record cannot name the model offline, and says so
    with Cache(cache) as c:
        c._con.execute("DELETE FROM servers")
    _, fresh = _run(tmp_path, run_dir.name, server.base_url)  # a new backend: nothing in memory
    with pytest.raises(DHPError, match="Cannot reach the judge server"):
        fresh()
    scores = pd.read_parquet(run_dir / "scores.parquet")
    assert len(scores) == 1 * 2 * 3  # items x (original, char_typo) x metrics
    assert (scores["score"].notna() | (scores["failure"] != "")).all()  # a score or its reason


def test_batch_export_over_evaluate_quick_leaves_no_call(tmp_path, llama_server, capsys):
    """Issue 51: `dhp batch export evaluate JUDGE --profile quick` writes every method's pending calls in one file (one
    custom_id space); answered and imported, `dhp evaluate` then makes 0 calls."""
    from dhp.cli import main

    judge = f"openai:{llama_server.model_alias}@{llama_server.base_url}"
    run_dir, calls_file, out = tmp_path / "ev", tmp_path / "calls.jsonl", tmp_path / "results.jsonl"
    args = [judge, "--profile", "quick", "--run-dir", str(run_dir)]
    assert main(["batch", "export", "evaluate", *args, "--out", str(calls_file)]) == 0
    lines = batch.read_lines(calls_file)
    assert lines and len({ln["custom_id"] for ln in lines}) == len(lines)
    plan = main(["evaluate", *args, "--dry-run"]) == 0 and capsys.readouterr().out
    assert f"Total estimated calls to make: {len(lines)} " in plan  # the file holds every call of the plan
    batch.answer_file(calls_file, out, llama_server.base_url)
    assert main(["batch", "import", "evaluate", *args, str(out)]) == 0
    assert f"imported {len(lines)} answers; 0 calls of this stage still pending" in capsys.readouterr().out
    assert main(["batch", "export", "evaluate", *args, "--out", str(tmp_path / "none.jsonl")]) == 0
    assert "nothing to export" in capsys.readouterr().out
    assert main(["evaluate", *args, "--yes"]) == 0
    assert "calls made: 0;" in capsys.readouterr().out


def test_export_of_several_runs_writes_one_custom_id_space(tmp_path):
    """Issue 51: the pending calls of several runs (evaluate's methods) go to one file, a call two runs share once;
    import matches each line to its run's call."""
    from dhp import calls
    from dhp.backends import ChatRequest, get_backend

    backend = get_backend("openai:m@http://127.0.0.1:9/v1")  # nothing listens: export and import call nothing
    cache = tmp_path / "cache.sqlite"

    def run_of(*texts):
        def run():
            with Cache(cache) as store:
                planned = [calls.plan_chat(backend, ChatRequest(messages=(("user", t),), max_tokens=2)) for t in texts]
                calls.run(backend, planned, store, progress=False)
        return run

    runs = [run_of("a", "shared"), run_of("shared", "b")]
    out = tmp_path / "calls.jsonl"
    assert batch.export_calls(runs, out) == 3
    lines = batch.read_lines(out)
    assert sorted(ln["body"]["messages"][0]["content"] for ln in lines) == ["a", "b", "shared"]
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"custom_id": ln["custom_id"], "response": {"status_code": 200, "body": {
        "choices": [{"message": {"content": "7"}, "finish_reason": "stop"}], "usage": {}}}}) + "\n" for ln in lines))
    report = batch.import_results(runs, answers, cache)
    assert (report.stored, report.unanswered) == (3, 0)
    assert batch.export_calls(runs, tmp_path / "none.jsonl") == 0
