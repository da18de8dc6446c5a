"""The llama.cpp compile of `make setup`, with libllama at upstream's -O3 and at scripts/llama_build.cmake's -O1
(issue 39, item 4: set-up near its floor). One command, anyone can rerun it:

    python benchmarks/llama_build.py                     # both variants, one after the other
    python benchmarks/llama_build.py --variant o1        # the Makefile's build alone

It downloads the sdist of the lock's llama-cpp-python from PyPI, configures it with the Makefile's CMAKE_ARGS (cmake,
ninja when installed), once with a hook that only turns llama.cpp's "common" utilities off (libllama at -O3, as
upstream builds it) and once with scripts/llama_build.cmake (libllama at -O1, standard headers precompiled), times
each build (wall; CPU of the compiler processes), then runs tests/test_install.py's logits check with the built
libraries in place of the installed ones: "logits equal" means SmolLM2's logits on the test's prompt are bit for bit
the ones the committed results were computed with. Last lines, in this form:

    llama_build o3 <wall> s (CPU <cpu> s) logits equal|differ
    llama_build o1 <wall> s (CPU <cpu> s) logits equal|differ
    machine <cpu model>, <cores> cores; load before <1/5/15 min> after <1/5/15 min>; <date>

Not a test: the times depend on the machine and its load (printed with them). Run it in the project's environment
(`.venv/bin/python`), which provides the llama_cpp package whose libraries are swapped.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_start import children_cpu, cores, cpu_model, load  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HOOK = ROOT / "scripts" / "llama_build.cmake"


def makefile_cmake_args() -> list[str]:
    """The Makefile's CMAKE_ARGS (the continuation lines of its `export CMAKE_ARGS :=`), $(CURDIR) resolved."""
    text = (ROOT / "Makefile").read_text()
    m = re.search(r"^export CMAKE_ARGS := ((?:.*\\\n)*.*)$", text, re.M)
    if not m:
        sys.exit("error: no `export CMAKE_ARGS :=` in the Makefile")
    return m.group(1).replace("\\\n", " ").replace("$(CURDIR)", str(ROOT)).split()


def locked_version() -> str:
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line.startswith("llama-cpp-python=="):
            return line.split("==", 1)[1].strip()
    sys.exit("error: requirements.lock pins no llama-cpp-python")


def build(src: Path, work: Path, name: str, hook: Path) -> tuple[float, float, Path]:
    """Configure and build; wall seconds, CPU seconds (configure + compile), the folder with the shared libraries."""
    bdir = work / f"build-{name}"
    args = [a for a in makefile_cmake_args() if not a.startswith("-DCMAKE_PROJECT_llama.cpp_INCLUDE=")]
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    cpu0, t0 = children_cpu(), time.perf_counter()
    for cmd in (["cmake", "-S", str(src), "-B", str(bdir), *gen, "-DCMAKE_BUILD_TYPE=Release", *args,
                 f"-DCMAKE_PROJECT_llama.cpp_INCLUDE={hook}"],
                # ninja's own default parallelism, as in the wheel build; make needs to be told
                ["cmake", "--build", str(bdir)] + ([] if gen else ["--parallel", str(os.cpu_count() or 2)])):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"error: {' '.join(cmd[:3])} failed:\n{(r.stdout + r.stderr)[-3000:]}")
    return time.perf_counter() - t0, children_cpu() - cpu0, bdir / "bin"


def logits_equal(libs: Path, work: Path, name: str) -> bool:
    """tests/test_install.py's logits check, run with the installed llama_cpp package's libraries replaced."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.origin:
        sys.exit("error: llama_cpp is not installed here; run with the project's .venv/bin/python")
    pkg = work / f"pkg-{name}"
    shutil.copytree(Path(spec.origin).parent, pkg / "llama_cpp")
    for f in (pkg / "llama_cpp" / "lib").glob("*.so*"):
        f.unlink()
    for f in libs.glob("*.so*"):
        shutil.copy2(f.resolve(), pkg / "llama_cpp" / "lib" / f.name)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(pkg), str(ROOT),
                                                                     os.environ.get("PYTHONPATH", "")])))
    # the test function itself, without pytest's conftest (which wants the data sets in place)
    code = ("import importlib.util as u, sys\n"
            f"s = u.spec_from_file_location('test_install', {str(ROOT / 'tests' / 'test_install.py')!r})\n"
            "m = u.module_from_spec(s); s.loader.exec_module(m)\n"
            "try:\n    m.test_the_llama_cpp_build_computes_the_committed_logits()\n"
            "except AssertionError as e:\n    print('DIFFER', e); sys.exit(0)\n"
            "print('EQUAL')\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True)
    if r.returncode or not r.stdout.strip():
        sys.exit(f"error: the logits check did not run:\n{(r.stdout + r.stderr)[-3000:]}")
    return r.stdout.strip().splitlines()[-1] == "EQUAL"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", choices=["o3", "o1", "both"], default="both")
    args = ap.parse_args()
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    loads = [load()]
    version = locked_version()
    with tempfile.TemporaryDirectory(prefix="dhp-llama-build-") as tmp:
        work = Path(tmp)
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                            f"llama-cpp-python=={version}", "-d", str(work)], capture_output=True, text=True)
        sdists = list(work.glob("llama_cpp_python-*.tar.gz"))
        if r.returncode or not sdists:
            sys.exit(f"error: could not download llama-cpp-python=={version}'s sdist:\n{r.stderr[-2000:]}")
        with tarfile.open(sdists[0]) as tar:
            tar.extractall(work, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        src = work / f"llama_cpp_python-{version}"
        # upstream's optimisation: the hook's first statement alone (no unused "common" utilities, as in the Makefile)
        o3_hook = work / "common_off.cmake"
        o3_hook.write_text(next(line for line in HOOK.read_text().splitlines() if "LLAMA_BUILD_COMMON" in line
                                and line.startswith("set(")) + "\n")
        hooks = {"o3": o3_hook, "o1": HOOK}
        out = []
        for name in (["o3", "o1"] if args.variant == "both" else [args.variant]):
            print(f"building llama-cpp-python {version}, libllama {name.upper()} ... load {load()}", flush=True)
            wall, cpu, libs = build(src, work, name, hooks[name])
            same = logits_equal(libs, work, name)
            loads.append(load())
            out.append(f"llama_build {name} {wall:.0f} s (CPU {cpu:.0f} s) logits {'equal' if same else 'differ'}")
            print(out[-1], flush=True)
    print("\n".join(out))
    print(f"machine {cpu_model()}, {cores()} cores; load before {loads[0]} after {loads[-1]}; {date}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
