"""The two README commands timed cold, as a new user meets them (issue 39, item 6): one command, anyone can rerun it.

    python benchmarks/cold_start.py                 # make setup, then make demo
    python benchmarks/cold_start.py --setup-only    # make setup alone (a few minutes)

It clones the current commit of this repository (``git clone`` of HEAD, so uncommitted edits are not measured) into a
temporary folder, runs ``make setup`` and then ``make demo`` there with an empty ``HOME`` (so no pip, uv, Hugging
Face or dataset cache and no ``DHP_DATA_DIR``), and prints each command's wall time and the CPU time of its processes,
with the machine's facts: CPU model, cores, load average before and after each command, date. Inputs come from
``DHP_DATA_MIRROR`` when it is set (a mirror of the upstream data, for machines without the network), else from the
upstream sources. The temporary folder is removed unless ``--keep``.

Last lines, in this form (quote them with their date and load):

    cold_start setup <wall> s (CPU <cpu> s) demo <wall> s (CPU <cpu> s)
    machine <cpu model>, <cores> cores; load before <1/5/15 min> after <1/5/15 min>; <date>; bytecode writing on|off

Not a test: the numbers depend on the machine, its load and its network; a run on a busy machine says so in its load.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Variables of this shell that would let the cold run use something warm (or another checkout's code).
DROP = ("PYTHONPATH", "DHP_DATA_DIR", "DHP_PAPERS_DIR", "DHP_OFFLINE", "VIRTUAL_ENV", "PIP_CACHE_DIR", "UV_CACHE_DIR",
        "HF_HOME", "HF_HUB_CACHE", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "CONDA_PREFIX")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str], cwd: Path, env: dict, log: Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds of the command and its descendants (those waited for), exit status."""
    cpu0, t0 = children_cpu(), time.perf_counter()
    with open(log, "wb") as fh:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT).returncode
    return time.perf_counter() - t0, children_cpu() - cpu0, rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setup-only", action="store_true", help="time make setup alone")
    ap.add_argument("--repo", default=str(ROOT), help="repository to clone (default: this one, its HEAD)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (its path is printed)")
    args = ap.parse_args()

    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    tmp = Path(tempfile.mkdtemp(prefix="dhp-cold-"))
    home, clone = tmp / "home", tmp / "dhp"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in DROP}
    env.update(HOME=str(home), MPLBACKEND="Agg")
    if os.environ.get("DHP_DATA_MIRROR"):
        host = "127.0.0.1,localhost"
        env["no_proxy"] = env["NO_PROXY"] = ",".join(x for x in (host, os.environ.get("no_proxy", "")) if x)
    print(f"cold start of {args.repo} in {tmp} (HOME={home}); inputs: "
          f"{os.environ.get('DHP_DATA_MIRROR') or 'the upstream sources'}", flush=True)
    results: list[tuple[str, float, float]] = []
    loads = [load()]
    try:
        r = subprocess.run(["git", "clone", "--quiet", args.repo, str(clone)], env=env, capture_output=True, text=True)
        if r.returncode:
            print(r.stderr, file=sys.stderr)
            return r.returncode
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True,
                                text=True).stdout.strip()
        print(f"commit {commit}", flush=True)
        for target in ["setup"] + ([] if args.setup_only else ["demo"]):
            log = tmp / f"make-{target}.log"
            print(f"make {target} (log: {log}) ... load {load()}", flush=True)
            wall, cpu, rc = timed(["make", target], clone, env, log)
            loads.append(load())
            print(f"make {target}: {wall:.0f} s wall, {cpu:.0f} s CPU, exit {rc}; load {loads[-1]}", flush=True)
            if rc:
                print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
                args.keep = True
                return rc
            results.append((target, wall, cpu))
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("cold_start " + " ".join(f"{t} {w:.0f} s (CPU {c:.0f} s)" for t, w, c in results))
    # PYTHONDONTWRITEBYTECODE (some CI machines set it) stops Python caching what it compiles: the Makefile unexports
    # it for its own commands, so it changes little now, but it is a fact of the shell the run came from
    writes = "off" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "on"
    print(f"machine {cpu_model()}, {cores()} cores; load before {loads[0]} after {loads[-1]}; {date}; "
          f"bytecode writing {writes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
