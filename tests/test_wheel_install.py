"""A non-editable install (`pip install .`, here through uv as make setup installs) into a fresh virtual environment
carries everything the package reads at run time — prompts, expert weights, checksums, selections, prices — and runs
the CLI on a dataset from outside the repository. (Dependencies come from the installer's cache after set-up.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import DATA

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_pip_install_non_editable_runs_the_cli(tmp_path):
    src = tmp_path / "src"  # build from a copy: the build leaves build/ and *.egg-info behind
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", "runs", "__pycache__", "figures",
                                                             "results", "notebooks", "tests", "*.egg-info", "build"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    # make test exports the Makefile's portable llama.cpp flags; run alone, the test uses the same ones
    env = {"CMAKE_ARGS": "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF",
           **os.environ, "DHP_N_THREADS": "2"}
    env.pop("PYTHONPATH", None)
    # the locked versions, and the llama-cpp-python wheel `make setup` built when it is there (no second compile).
    # The installer make setup uses (uv: it builds the same non-editable wheel from src through setuptools, and
    # installs the ~150 dependencies from its cache in seconds); pip where uv is missing. --no-compile (pip): no .pyc
    # files for them (the run below compiles only the modules it imports); uv compiles none by default.
    wheels = ["--find-links", str(ROOT / ".venv" / "wheels")] if (ROOT / ".venv" / "wheels").is_dir() else []
    uv = ROOT / ".venv" / "bin" / "uv"
    install = ([str(uv), "pip", "install", "--quiet", "--python", python] if uv.is_file()
               else [python, "-m", "pip", "install", "--quiet", "--no-compile"])
    got = subprocess.run([*install, "-c", str(ROOT / "requirements.lock"), *wheels, str(src)], env=env,
                         capture_output=True, text=True, timeout=1800)
    assert got.returncode == 0, got.stderr[-2000:]
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    pkg = site / "dhp"
    for rel in ("resources/expert_weights.csv", "resources/data_registry.json", "resources/judge_prices.yaml",
                "resources/selections/summeval.json", "prompts/judge/summarization_coherence.txt",
                "prompts/perturb/rewrite_insert_minor.txt", "prompts/dna/aspects.txt"):
        assert (pkg / rel).is_file(), f"{rel} is not in the installed package"
    shutil.rmtree(src)  # nothing may read the source tree any more

    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run([python, "-c", "import dhp; print(dhp.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(site)), where  # the installed copy, not a checkout
    # the console command of [project.scripts] (issue 41): `dhp ...` as the README's recipes spell it
    cmd = subprocess.run([str(venv / "bin" / "dhp"), "--help"], cwd=work, env=env, capture_output=True, text=True)
    assert cmd.returncode == 0 and "dhp evaluate JUDGE" in cmd.stdout, cmd.stderr[-2000:]
    run = work / "run"
    out = subprocess.run([python, "-m", "dhp", "run", "--dataset", "summeval", "--n-items", "2",
                          "--perturbations", "char_typo,control", "--mode", "likelihood", "--n-boot", "0",
                          "--data-dir", str(DATA), "--run-dir", str(run)],
                         cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    scores = pd.read_parquet(run / "scores.parquet")
    assert set(scores["perturbation"]) == {"original", "char_typo", "control"}
    assert (run / "manifest.json").is_file() and (run / "summary.csv").is_file()
