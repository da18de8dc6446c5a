"""Shared fixtures: the data the tests read, and the tiny runs of the acceptance suite (tests/test_acceptance_*.py).

Data comes only through the data layer, as in a user's run: the session's data root (``DHP_DATA_DIR``, else the
per-user cache) is filled at start by dhp's own fetch code from the configured source (upstream, or the mirror of
``DHP_DATA_MIRROR``: ``.ci/run`` serves the development copy on loopback); when it cannot be filled, the session
stops with the fetch command. Story Cloze is not openly licensed, so no test reads the real file: the tests that
need stories get small synthetic files written here (one in Story Cloze's upstream CSV format, for its loader; one
in the bring-your-own format for the tiny runs, which a checked loader would refuse).

The acceptance runs are kept tiny (3 stories, one perturbation) so the whole suite stays within CI's time on 2
cores.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from dhp.datasets import declared_files
from dhp.errors import DHPError
from dhp.io import project_root

ROOT = project_root()
#: The session's data root: where every test reads declared files (the caller's DHP_DATA_DIR, else the per-user
#: cache under HOME), filled at session start by pytest_sessionstart below.
DATA = declared_files.data_root()
#: What the tests read: every openly licensed set that is not optional (the optional ones are large upstream files
#: no test needs: their loaders are tested on small files in the upstream formats).
TEST_SETS = [n for n, s in declared_files.sets().items() if s.fetch == "open" and not s.optional]

# Synthetic inputs, written at session start into a folder of this process and removed at its end.
INPUTS = Path(tempfile.gettempdir()) / f"dhp-test-inputs-{os.getpid()}"
#: A synthetic Story Cloze file in the upstream CSV layout (its loader's real code path; not the official bytes,
#: so a checked load refuses it and `verify=False` takes it with a warning).
STORYCLOZE = INPUTS / "storycloze" / "cloze_test_val__spring2016.csv"
#: The same kind of stories as a bring-your-own file (task story_completion): the route a user's own copy takes
#: through every CLI and notebook.
TINY_STORIES = INPUTS / "tiny_stories.csv"
N_STORIES = 120  # more than the 100 of a paper-size selection

# The tiny run every end-to-end acceptance test uses: 2 items x (original + char_typo) x 3 metrics (each item is
# a dozen real judge calls through a llama.cpp server in the tests that use it: two show what three did).
TINY = {"dataset": str(TINY_STORIES), "n_items": 2, "seed": 0, "perturbations": ["char_typo"]}
TABLES = ("perturbed.parquet", "scores.parquet", "discernment.csv", "summary.csv")

_NAMES = ["Ann", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jade", "Kai", "Lena"]
_PLACES = ["the market", "the lake", "the library", "the station", "the park", "the garden", "the bakery",
           "the museum", "the beach", "the school"]
_THINGS = ["a red kite", "a new bike", "an old map", "a warm coat", "a small puppy", "a blue vase",
           "a heavy box", "a paper lantern", "a chess set", "a tin drum"]


def synthetic_stories(n: int = N_STORIES) -> list[dict]:
    """``n`` made-up four-sentence stories, each with a fitting and an unfitting fifth sentence (deterministic)."""
    out = []
    for i in range(n):
        who, where, what = _NAMES[i % len(_NAMES)], _PLACES[(i // 2) % len(_PLACES)], _THINGS[(i * 7) % len(_THINGS)]
        out.append({
            "id": f"syn-{i:04d}",
            "sentences": [f"{who} walked to {where} on a quiet morning.", f"There {who} saw {what} for sale.",
                          f"{who} had wanted {what} for {i % 9 + 2} years.", f"{who} counted the coins twice."],
            "right": f"{who} bought {what} and went home happy.",
            "wrong": f"{who} decided that {where} was made of cheese.",
        })
    return out


def write_storycloze_csv(path: Path, stories: list[dict]) -> Path:
    """The stories in Story Cloze's upstream CSV columns; the right ending alternates between the two quiz slots."""
    rows = []
    for i, s in enumerate(stories):
        right = "1" if i % 2 == 0 else "2"
        quiz = (s["right"], s["wrong"]) if right == "1" else (s["wrong"], s["right"])
        rows.append({"InputStoryid": s["id"], **{f"InputSentence{k + 1}": t for k, t in enumerate(s["sentences"])},
                     "RandomFifthSentenceQuiz1": quiz[0], "RandomFifthSentenceQuiz2": quiz[1],
                     "AnswerRightEnding": right})
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def write_own_stories(path: Path, stories: list[dict]) -> Path:
    """The stories as a bring-your-own file (dhp.datasets.load_custom's columns)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{"item_id": s["id"], "source": " ".join(s["sentences"]), "reference": s["right"],
                   "wrong_ending": s["wrong"], "task": "story_completion"} for s in stories]).to_csv(path, index=False)
    return path


def pytest_sessionstart(session):
    # Fill the data root the way a user's first run does: dhp's fetch code, from upstream or DHP_DATA_MIRROR.
    try:
        declared_files.ensure(TEST_SETS)
    except DHPError as e:
        raise pytest.UsageError(
            f"The tests read their data from the data root {DATA}, and it could not be filled (a mirror of the "
            f"upstream files can stand in for the network: DHP_DATA_MIRROR, as .ci/run sets it):\n{e}") from None
    # The stored results of recorded-only leaderboard views go to this session's folder, not the user's cache: a test
    # never reads a result another run (or another version of the code under test) stored.
    os.environ.setdefault("DHP_VIEWS_CACHE", str(INPUTS / "views"))
    os.environ.setdefault("DHP_RECORDED_CACHE", str(INPUTS / "recorded"))  # the parsed recorded rows, likewise
    stories = synthetic_stories()
    write_storycloze_csv(STORYCLOZE, stories)
    write_own_stories(TINY_STORIES, stories)


@pytest.fixture(autouse=True)
def _working_directory_kept():
    """Every test leaves the process's working directory where it found it (the tests share a worker process: one
    left elsewhere breaks a later test that reads a path relative to the project, as a grid's two notebooks run side
    by side once did through papermill's cwd=)."""
    before = os.getcwd()
    yield
    after = os.getcwd()
    if after != before:
        os.chdir(before)
        pytest.fail(f"the test left the working directory at {after} (it was {before})")


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(INPUTS, ignore_errors=True)


def tiny_cli_args(run_dir: Path, cache: Path, **extra) -> list[str]:
    """`python -m dhp.pipeline` arguments for the tiny run (extra: --key value overrides)."""
    args = ["--dataset", TINY["dataset"], "--n-items", str(TINY["n_items"]),
            "--seed", str(TINY["seed"]), "--perturbations", ",".join(TINY["perturbations"]),
            "--run-dir", str(run_dir), "--cache-path", str(cache)]
    for k, v in extra.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    return args


def child_env(**overrides) -> dict[str, str]:
    """Environment for pipeline subprocesses: the caller's (HOME, DHP_DATA_DIR, DHP_DATA_MIRROR, DHP_OFFLINE: the
    child reads the same data root and fetches from the same source), without a Story Cloze path of the caller's.
    One llama.cpp thread: on a shared 2-core machine more threads than free cores make the spinning worker
    threads slow everything down many times."""
    env = {k: v for k, v in os.environ.items() if k != "DHP_STORYCLOZE_PATH"}
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
def llama_server():
    """A real llama_cpp.server with the embedded GGUF on loopback, shared by the server tests."""
    from servers import start_llama_server

    server = start_llama_server(model_alias="smollm2-135m", n_threads=1, timeout=180)
    try:
        yield server
    finally:
        server.stop()
