"""CPU seconds and peak memory of ``evaluate`` around its calls: ``python -m dhp evaluate openai:stub@<loopback>/v1
--protocol gemba:DA_ref --profile quick --yes`` against benchmarks/instant_server.py (answers at once), run twice into
fresh run folders with fresh stores (DHP_VIEWS_CACHE, DHP_RECORDED_CACHE in a temporary folder): the first run of a
data version parses the recorded files and computes the recorded-only views, a later run reuses both. Prints each
run's CPU seconds (user + system, the process and its workers) and peak resident memory, and the later/first ratios
measured in this one run; ``--compare-with DIR`` runs the same two runs with another checkout's code (e.g. a git
worktree of an older commit) first and prints the ratios to it (issue 39 item 1's goal: a later run <= 20 CPU-s and
<= 1 GB).

    python benchmarks/evaluate_cost.py [--compare-with ../old] [--protocol gemba:DA_ref] [--profile quick]

The data root must hold the inputs (`dhp data fetch`; DHP_DATA_DIR names another root). Wall times depend on the
machine's load (printed with them); CPU seconds and memory much less.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(port: int, proc) -> None:
    for _ in range(200):
        if proc.poll() is not None:
            raise SystemExit("the instant server did not start")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("the instant server did not answer")


def run_once(code: Path, run_dir: Path, store: Path, port: int, protocol: str, profile: str) -> dict:
    """One evaluate in a child process: its CPU seconds and peak RSS (os.wait4: the child and the workers it
    waited for)."""
    env = {**os.environ, "PYTHONPATH": str(code), "DHP_VIEWS_CACHE": str(store / "views"),
           "DHP_RECORDED_CACHE": str(store / "recorded"), "no_proxy": "127.0.0.1,localhost"}
    cmd = [sys.executable, "-m", "dhp", "evaluate", f"openai:stub@http://127.0.0.1:{port}/v1", "--protocol", protocol,
           "--profile", profile, "--yes", "--run-dir", str(run_dir)]
    start = time.perf_counter()
    with open(run_dir.with_suffix(".log"), "w") as log:
        proc = subprocess.Popen(cmd, cwd=code, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"evaluate failed ({proc.returncode}); see {run_dir.with_suffix('.log')}")
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "peak_gb": usage.ru_maxrss * 1024 / 1e9,
            "wall_s": time.perf_counter() - start, "load": os.getloadavg()[0]}


def mine(run_dir: Path) -> pd.DataFrame:
    """The leaderboard rows of the evaluated judge (the rows that must not change)."""
    board = pd.read_csv(run_dir / "leaderboard.csv")
    judge = [j for j in board["judge"].dropna().unique() if str(j).startswith("openai:stub")]
    cols = ["view", "scope", "measure", "judge", "value", "lo", "hi", "n", "rank", "cluster", "status"]
    return board[board["judge"].isin(judge)][cols].sort_values(cols[:3]).reset_index(drop=True)


def pair(code: Path, work: Path, tag: str, args, port: int) -> list[dict]:
    store = work / f"{tag}-store"
    out = []
    for i, which in enumerate(("first", "later")):
        r = run_once(code, work / f"{tag}-{which}", store, port, args.protocol, args.profile)
        out.append(r | {"code": tag, "run": which, "dir": work / f"{tag}-{which}"})
        print(f"{tag:>8} {which:>5} run: {r['cpu_s']:7.1f} CPU-s  peak {r['peak_gb']:.2f} GB  wall {r['wall_s']:6.1f} s "
              f"(load {r['load']:.1f})", flush=True)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocol", default="gemba:DA_ref")
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--compare-with", type=Path, help="another checkout's root: its two runs first, then ratios")
    args = ap.parse_args(argv)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()}", flush=True)
    port = _free_port()
    server = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "instant_server.py"), "--port", str(port)])
    try:
        _wait(port, server)
        with tempfile.TemporaryDirectory(prefix="dhp-evaluate-cost-") as tmp:
            work = Path(tmp)
            old = pair(args.compare_with.resolve(), work, "other", args, port) if args.compare_with else []
            new = pair(ROOT, work, "this", args, port)
            first, later = new
            print(f"this code, later/first: CPU {later['cpu_s'] / first['cpu_s']:.2f}x, "
                  f"peak {later['peak_gb'] / first['peak_gb']:.2f}x; goal for a later run: <= 20 CPU-s, <= 1 GB: "
                  f"{'met' if later['cpu_s'] <= 20 and later['peak_gb'] <= 1 else 'NOT met'}")
            for o, n in zip(old, new):
                print(f"{n['run']} run, this/other: CPU {n['cpu_s'] / o['cpu_s']:.2f}x, "
                      f"peak {n['peak_gb'] / o['peak_gb']:.2f}x")
            rows = [mine(r["dir"]) for r in old + new]
            same = all(r.drop(columns="status").equals(rows[0].drop(columns="status")) for r in rows[1:])
            print(f"the evaluated judge's leaderboard rows (value, lo, hi, n, rank, cluster) equal in every run: "
                  f"{same}; status equal: {all(r['status'].equals(rows[0]['status']) for r in rows[1:])}")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
