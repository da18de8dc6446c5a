"""Shared fixtures for the acceptance suite (tests/test_acceptance_*.py).

The acceptance runs are kept tiny (3 Story Cloze items, one perturbation) so the whole suite stays
within CI's time on 2 cores. Story Cloze is read at run time from ../shared/datasets (never copied).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dhp.io import project_root

ROOT = project_root()
STORYCLOZE = ROOT.parent / "shared" / "datasets" / "storycloze" / "cloze_test_val__spring2016.csv"

# The tiny run every end-to-end acceptance test uses: 3 items x (original + char_typo) x 3 metrics.
TINY = {"dataset": "storycloze", "n_items": 3, "seed": 0, "perturbations": ["char_typo"]}
TABLES = ("perturbed.parquet", "scores.parquet", "discernment.csv", "summary.csv")


def tiny_cli_args(run_dir: Path, cache: Path, **extra) -> list[str]:
    """`python -m dhp.pipeline` arguments for the tiny run (extra: --key value overrides)."""
    args = ["--dataset", TINY["dataset"], "--path", str(STORYCLOZE), "--n-items", str(TINY["n_items"]),
            "--seed", str(TINY["seed"]), "--perturbations", ",".join(TINY["perturbations"]),
            "--run-dir", str(run_dir), "--cache-path", str(cache)]
    for k, v in extra.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    return args


def child_env(**overrides) -> dict[str, str]:
    """Environment for pipeline subprocesses. One llama.cpp thread: on a shared 2-core machine more
    threads than free cores make the spinning worker threads slow everything down many times."""
    env = {k: v for k, v in os.environ.items() if k not in ("DHP_STORYCLOZE_PATH", "DHP_DATA_DIR")}
    env.setdefault("DHP_N_THREADS", "1")
    env["MPLBACKEND"] = "Agg"
    env.update(overrides)
    return env


def run_cli(args: list[str], env: dict | None = None, timeout: float = 600,
            prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, *(prefix or ["-m", "dhp.pipeline"]), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env or child_env(), capture_output=True, text=True,
                          timeout=timeout)


def run_clis_together(jobs: list[dict], timeout: float = 600) -> list[subprocess.CompletedProcess]:
    """Several `run_cli` calls (each a dict of its keyword arguments: args, env, prefix) as processes started at the
    same time; their results in the same order. With one llama.cpp thread each (child_env), two runs on two cores
    take the time of one. Output goes to temporary files (a pipe read only after another process ends could fill up
    and stall its writer); no process outlives the call."""
    with tempfile.TemporaryDirectory(prefix="dhp-clis-") as tmp:
        procs, logs = [], []
        try:
            for i, job in enumerate(jobs):
                cmd = [sys.executable, *(job.get("prefix") or ["-m", "dhp.pipeline"]), *job["args"]]
                out, err = Path(tmp, f"{i}.out"), Path(tmp, f"{i}.err")
                with open(out, "w") as o, open(err, "w") as e:
                    procs.append(subprocess.Popen(cmd, cwd=ROOT, env=job.get("env") or child_env(), stdout=o,
                                                  stderr=e, text=True))
                logs.append((cmd, out, err))
            done = []
            for proc, (cmd, out, err) in zip(procs, logs):
                proc.wait(timeout=timeout)
                done.append(subprocess.CompletedProcess(cmd, proc.returncode, out.read_text(), err.read_text()))
            return done
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


def tables_in(folder: Path) -> list[Path]:
    """Every table file (parquet/CSV) anywhere under `folder`."""
    return sorted(p for p in Path(folder).rglob("*") if p.suffix in (".parquet", ".csv"))


@pytest.fixture(scope="session")
def storycloze_path() -> Path:
    # CI provides ../shared/datasets; without it the end-to-end checks cannot run: fail loudly.
    assert STORYCLOZE.is_file(), f"{STORYCLOZE} is missing: the acceptance suite needs the shared datasets"
    return STORYCLOZE


@pytest.fixture(scope="session")
def llama_server():
    """A real llama_cpp.server with the embedded GGUF on loopback, shared by the server tests."""
    from servers import start_llama_server

    server = start_llama_server(model_alias="smollm2-135m", n_threads=1, timeout=180)
    try:
        yield server
    finally:
        server.stop()
