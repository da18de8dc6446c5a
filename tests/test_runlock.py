"""Runs that cannot collide or destroy (dhp.runlock; issue 50 item 7, and items 4 and 9's run-folder parts).

- Two real ``dhp run`` processes on one run folder against a loopback server that counts requests: the second is
  refused before any call, naming the first's pid, and no request is sent twice. The server holds every reply until
  the second process has ended (refused) or has sent a request the first one sent (what happens without the lock:
  every request sent twice), so the two runs overlap whatever the machine's speed — no timing.
- The lock is released however its holder ends (SIGKILL leaves none stale), it is re-entrant within a process
  (run → run_stage), and ``wait=True`` waits for the holder instead of refusing.
- ``--run-dir`` results, figures/x, '', the repository root, a symlink to results/, an existing file, a path under a
  file, a read-only parent: one clear error each, before any call, nothing written (run, evaluate, batch, grid).
- ``evaluate --profile standard --dry-run`` creates nothing in the run folder (it created cache.sqlite);
  ``--views-cache ''`` is '' (compute every view), as its help says, not None (the per-user cache).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from dhp import runlock
from dhp.cli import main as cli_main
from dhp.errors import DHPError
from dhp.io import project_root

ROOT = project_root()
TESTS = Path(__file__).resolve().parent
#: a hang guard only (the test fails with a message instead of hanging); nothing asserts how long anything took
PATIENCE = 600


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS), os.environ.get("PYTHONPATH", "")])}


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)


def _published() -> dict:
    """Every file of results/ and figures/ with its mtime and size (what a run into them would change)."""
    return {str(p.relative_to(ROOT)): (p.stat().st_mtime_ns, p.stat().st_size)
            for d in ("results", "figures") for p in (ROOT / d).rglob("*") if p.is_file()}


# ------------------------------------------------------------------------------------------ two real runs

@pytest.mark.slow
def test_a_second_dhp_run_on_the_same_folder_is_refused_and_no_request_is_sent_twice(tmp_path):
    from servers import ScriptedOpenAI, chat_completion

    gate = threading.Event()

    def reply(path, body):
        if not path.endswith("/chat/completions"):
            return 404, {"error": {"message": "not found"}}
        gate.wait(PATIENCE)  # every reply waits until the second run has shown what it does
        return chat_completion("3")

    run_dir = tmp_path / "run"
    with ScriptedOpenAI(reply) as srv:
        cmd = [sys.executable, "-m", "dhp", "run", "--method", "dhp", "--n-items", "1", "--perturbations",
               "char_typo", "--metrics", "coherence", "--mode", "sample", "--n-samples", "1", "--stage", "collect",
               "--judge", f"openai:stub@{srv.base_url}", "--run-dir", str(run_dir)]
        bodies = lambda: Counter(json.dumps(b, sort_keys=True) for p, b in list(srv.requests)  # noqa: E731
                                 if p.endswith("/chat/completions"))
        first = subprocess.Popen(cmd, env=_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _until(lambda: bodies() or first.poll() is not None, "the first run's first request")
            assert first.poll() is None, first.communicate()
            second = subprocess.Popen(cmd, env=_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
            try:
                # refused (it ends), or (no lock) it asks what the first run is asking: a request sent twice
                _until(lambda: second.poll() is not None or max(bodies().values()) > 1, "the second run")
            finally:
                gate.set()
                out2, err2 = second.communicate(timeout=PATIENCE)
            out1, err1 = first.communicate(timeout=PATIENCE)
        finally:
            gate.set()
            for p in (first, locals().get("second")):
                if p is not None and p.poll() is None:
                    p.kill()
        sent = bodies()
    assert first.returncode == 0, err1
    assert sent and max(sent.values()) == 1, f"requests sent more than once: {[n for n in sent.values() if n > 1]}"
    assert len(sent) == 3  # one item x (original + char_typo perturbations) x coherence: the first run's calls
    assert second.returncode == 2, (out2, err2)
    assert f"pid {first.pid}" in err2 and "in use by another run" in err2 and "another --run-dir" in err2
    assert "Traceback" not in err2 and err2.count("error:") == 1


# ------------------------------------------------------------------------------------------ the lock itself

_HOLDER = """
import sys
from dhp import runlock
with runlock.hold(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.readline()
"""


def _holder(folder: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", _HOLDER, str(folder)], env=_env(), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_another_process_is_refused_with_its_pid_and_a_killed_holder_leaves_no_stale_lock(tmp_path):
    folder = tmp_path / "run"
    p = _holder(folder)
    try:
        assert f"pid {p.pid}" in runlock.holder(folder)
        with pytest.raises(DHPError, match=rf"in use by another run: pid {p.pid} .*another --run-dir"):
            with runlock.hold(folder):
                pass
    finally:
        p.kill()  # SIGKILL: no exit handler runs
        p.wait()
    assert runlock.holder(folder) is None  # the kernel dropped the lock with the process
    with runlock.hold(folder):
        assert json.loads((folder / runlock.LOCK_NAME).read_text())["pid"] == os.getpid()


def test_wait_waits_for_the_holder_instead_of_refusing(tmp_path):
    folder = tmp_path / "run"
    p = _holder(folder)
    got, said = threading.Event(), []

    class Out:
        def write(self, s):
            said.append(s)

        def flush(self):
            pass

    def waiter():
        with runlock.hold(folder, wait=True, out=Out()):
            got.set()

    t = threading.Thread(target=waiter)
    t.start()
    try:
        _until(lambda: said, "the waiting message")
        assert not got.is_set() and f"pid {p.pid}" in "".join(said)
    finally:
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait()
        t.join(PATIENCE)
    assert got.is_set()


def test_the_lock_is_reentrant_in_a_process_and_released_after_the_outermost(tmp_path):
    folder = tmp_path / "run"
    with runlock.hold(folder):
        with runlock.hold(folder):  # run() holds it and each stage takes it again: no self-deadlock
            pass
        assert runlock.holder(folder) is not None  # still held by the outer block
    # a run leaves no lock file, and a folder it made and left empty (it failed before writing) goes too
    assert runlock.holder(folder) is None and not folder.exists()
    folder.mkdir()
    with runlock.hold(folder):
        (folder / "table.csv").write_text("a\n")
    assert [p.name for p in folder.iterdir()] == ["table.csv"]


def test_the_lock_file_never_holds_a_urls_credentials(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["dhp", "run", "--judge", "openai:m@http://user:pw@127.0.0.1:9/v1"])
    with runlock.hold(tmp_path / "run"):
        text = (tmp_path / "run" / runlock.LOCK_NAME).read_text()
    assert "user:pw" not in text and "http://***@127.0.0.1:9/v1" in text


_CACHE_HOLDER = """
import sys
from dhp import runlock
with runlock.hold(sys.argv[2]), runlock.hold_cache(sys.argv[1], sys.argv[2]):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_cache_path_shared_by_two_run_folders_has_one_writer(tmp_path, capsys):
    """``--cache-path`` outside the run folder: a second run in ANOTHER folder on the same cache is refused with the
    holder's pid before any call (it would ask what the first asks); the run folder's own cache needs no second
    lock, and the lock goes with its run."""
    cache = tmp_path / "shared" / "judge.sqlite"
    p = subprocess.Popen([sys.executable, "-c", _CACHE_HOLDER, str(cache), str(tmp_path / "first")], env=_env(),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        rc = cli_main(["run", "--method", "dhp", "--judge", "control:chance", "--n-items", "1", "--perturbations",
                       "char_typo", "--metrics", "coherence", "--stage", "collect",
                       "--run-dir", str(tmp_path / "second"), "--cache-path", str(cache)])
        err = capsys.readouterr().err
        assert rc == 2, err
        assert f"The cache {cache} is in use by another run: pid {p.pid}" in err and "--cache-path" in err
        assert not (tmp_path / "second").exists()  # refused before anything was written
        with runlock.hold_cache(tmp_path / "second" / "cache.sqlite", tmp_path / "second"):
            pass  # inside its own run folder: the folder's lock covers it, nothing else to take
    finally:
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait()
    (tmp_path / "a_file").write_text("x")  # a cache under a file: its own clear error, not the run folder's
    with pytest.raises(DHPError, match=r"Cannot write beside the cache .*pass a --cache-path"):
        with runlock.hold_cache(tmp_path / "a_file" / "c.sqlite", tmp_path / "fourth"):
            pass
    with runlock.hold_cache(cache, tmp_path / "third"):  # released with its holder
        assert (cache.parent / f".{cache.name}.dhp-lock").exists()
    assert not (cache.parent / f".{cache.name}.dhp-lock").exists()


def test_a_grid_holds_its_shared_cache_and_its_points_go_in_while_another_run_is_refused(tmp_path):
    """make demo's points share one cache: the grid holds it (runlock.hold_caches) and its notebook kernels, its
    children, find it in DHP_HELD_CACHES; a process that is not its child is refused as before."""
    cache = tmp_path / "demo" / "cache.sqlite"
    code = "import sys\nfrom dhp import runlock\nwith runlock.hold_cache(sys.argv[1], sys.argv[2]):\n    print('in')"
    cmd = [sys.executable, "-c", code, str(cache), str(tmp_path / "point")]
    with runlock.hold_caches([cache, cache]):
        child = subprocess.run(cmd, env=_env(), capture_output=True, text=True)
        stranger = subprocess.run(cmd, env={k: v for k, v in _env().items() if k != runlock.HELD_ENV},
                                  capture_output=True, text=True)
    assert child.returncode == 0 and child.stdout.strip() == "in", child.stderr
    assert stranger.returncode != 0 and f"pid {os.getpid()}" in stranger.stderr, stranger.stderr
    assert runlock.HELD_ENV not in os.environ and not (cache.parent / f".{cache.name}.dhp-lock").exists()


# ------------------------------------------------------------------------------------------ forbidden folders

def _bad_run_dirs(tmp_path: Path) -> dict:
    (tmp_path / "to_results").symlink_to(ROOT / "results")
    (tmp_path / "a_file").write_text("x")
    out = {"results": ("results", "inside the demo's results/"),
           "figures/x": ("figures/x", "inside the demo's figures/"),
           "empty": ("", "is empty"),
           "root": (str(ROOT), "repository root"),
           "dotdot": (str(ROOT / "runs" / ".." / "results"), "inside the demo's results/"),
           "symlink": (str(tmp_path / "to_results"), "inside the demo's results/"),
           "symlink_sub": (str(tmp_path / "to_results" / "mine"), "inside the demo's results/"),
           "file": (str(tmp_path / "a_file"), "is an existing file"),
           "under_file": (str(tmp_path / "a_file" / "run"), "which is a file")}
    return out


def _read_only_parent(tmp_path: Path) -> Path:
    """A folder this process cannot create anything in: a chmod 555 folder, or as root (whom modes do not stop)
    sysfs, which refuses new entries to everyone."""
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        return ro / "run"
    probe = Path("/sys/dhp-test-probe")
    try:
        probe.mkdir()
    except OSError:
        return probe / "run"
    probe.rmdir()
    pytest.skip("no read-only folder to test with")


@pytest.mark.parametrize("case", ["results", "figures/x", "empty", "root", "dotdot", "symlink", "symlink_sub", "file",
                                  "under_file", "read_only"])
def test_dhp_run_refuses_a_bad_run_dir_before_any_call(case, tmp_path, capsys):
    from servers import ScriptedOpenAI, chat_completion

    if case == "read_only":
        run_dir, words = str(_read_only_parent(tmp_path)), "Cannot write the run folder"
    else:
        run_dir, words = _bad_run_dirs(tmp_path)[case]
    before = _published()
    with ScriptedOpenAI(lambda path, body: chat_completion("3")) as srv:
        rc = cli_main(["run", "--method", "dhp", "--n-items", "1", "--perturbations", "char_typo", "--metrics",
                       "coherence", "--mode", "sample", "--judge", f"openai:stub@{srv.base_url}", "--run-dir",
                       run_dir])
        posts = [p for p, _ in srv.requests]
    err = capsys.readouterr().err
    assert rc == 2 and posts == []
    assert err.count("error:") == 1 and words in err and "Fix:" in err and "Traceback" not in err
    assert _published() == before
    assert not (ROOT / "dataset.parquet").exists() and not (ROOT / runlock.LOCK_NAME).exists()


@pytest.mark.parametrize("case", ["results", "empty", "symlink", "file", "under_file"])
def test_evaluate_batch_and_the_dry_run_refuse_a_bad_run_dir(case, tmp_path, capsys):
    run_dir, words = _bad_run_dirs(tmp_path)[case]
    judge = "openai:m@http://127.0.0.1:9/v1"  # nothing listens: a call would fail, not pass
    for argv in (["evaluate", judge, "--run-dir", run_dir, "--yes"],
                 ["evaluate", judge, "--run-dir", run_dir, "--dry-run"],
                 ["run", "--method", "dhp", "--judge", judge, "--run-dir", run_dir, "--dry-run"],
                 ["batch", "export", "--method", "dhp", "--judge", judge, "--run-dir", run_dir,
                  "--out", str(tmp_path / "calls.jsonl")]):
        assert cli_main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("error:") == 1 and words in err, (argv, err)
    assert not (tmp_path / "calls.jsonl").exists()


def test_the_grid_refuses_runs_inside_the_published_folders_before_any_run(monkeypatch):
    from dhp import grid

    g = grid.load_params(ROOT / "params" / "demo.yaml").model_copy(update={"runs_dir": "results"})
    monkeypatch.setattr(grid, "_stage", lambda *a: pytest.fail("the grid started"))
    with pytest.raises(DHPError, match="inside the demo's results/"):
        grid.run_grid(g)


def test_the_grid_still_publishes_into_results_and_figures(tmp_path):
    """results/ and figures/ are the grid's publishing targets (not run folders): its publish step writes them."""
    from dhp import grid

    staged_r, staged_f, res, fig = (tmp_path / n for n in ("sr", "sf", "results", "figures"))
    for d in (staged_r, staged_f):
        d.mkdir()
    (staged_r / "summary.csv").write_text("a\n1\n")
    (staged_f / "f.png").write_bytes(b"png")
    changed = grid.publish(staged_r, staged_f, res, fig)
    assert (res / "summary.csv").read_text() == "a\n1\n" and (fig / "f.png").read_bytes() == b"png"
    assert len(changed) == 2


# ------------------------------------------------------------------------------------------ dry run, views cache

@pytest.mark.slow
def test_evaluate_standard_dry_run_creates_nothing(tmp_path, capsys):
    run_dir = tmp_path / "r"
    assert cli_main(["evaluate", "openai:m@http://127.0.0.1:9/v1", "--profile", "standard", "--dry-run",
                     "--run-dir", str(run_dir)]) == 0
    assert "Plan: evaluate" in capsys.readouterr().out
    assert not run_dir.exists(), sorted(str(p) for p in run_dir.rglob("*"))


def test_views_cache_empty_on_the_command_line_means_compute_every_view(monkeypatch, tmp_path):
    from dhp import cli

    seen = {}
    monkeypatch.setattr(cli, "run_leaderboard", lambda config: seen.setdefault("config", config) and {})
    assert cli.main(["leaderboard", "--run-dir", str(tmp_path / "r"), "--views-cache", "", "--recorded-cache", ""]) == 0
    assert seen["config"].views_cache == "" and seen["config"].recorded_cache == ""
    seen.clear()
    assert cli.main(["leaderboard", "--run-dir", str(tmp_path / "r"), "--views-cache=", "--figures-dir", ""]) == 0
    assert seen["config"].views_cache == "" and seen["config"].figures_dir is None  # elsewhere '' is still None


def test_every_parameter_whose_help_gives_empty_a_meaning_keeps_it():
    """A help text that says what '' means (``'': ...``) is a promise the command line must keep (EMPTY_KEPT)."""
    from dhp import methods
    from dhp.config import _scalar
    from dhp.leaderboard import LeaderboardParams

    for model in [LeaderboardParams, *(m.Params for m in methods.all_methods())]:
        for name, f in model.model_fields.items():
            optional_text = _scalar(f.annotation)[1] and not _scalar(f.annotation)[2]
            if optional_text and "'':" in (f.description or ""):
                assert (f.json_schema_extra or {}).get("empty_kept"), f"{model.__name__}.{name}"
