"""Mutation check of the GEMBA request test (issue 50): each bug that once passed the project's GEMBA tests is planted
in a copy of the package, and tests/test_gemba_requests.py (its comparison with GEMBA's GptApi.request, and its
refusal test) must fail on it with an assertion (not an import error). Slow (a minute per bug on 2 cores): run with
``-m slow``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the comparison with GEMBA's own function, and the refusal test: a call that fails for good is no answer without a
#: higher temperature, which GEMBA cannot show (its GptApi asks a failing call again forever)
TARGETS = ["tests/test_gemba_requests.py::test_evaluate_sends_gembas_requests_in_gembas_sequence_and_scores_as_gemba",
           "tests/test_gemba_requests.py::test_a_filtered_request_is_no_answer_cached_as_such_and_any_other_400_stays_"
           "a_failure"]

#: name -> (file, the line as it is, the line with the bug)
BUGS = {
    "http errors retried at a raised temperature": (
        "dhp/judging/gemba.py",
        "                    why[i] = f\"call failed: {getattr(o, 'reason', 'no reply')}\"\n",
        "                    why[i] = f\"call failed: {getattr(o, 'reason', 'no reply')}\"\n"
        "                    climb.append((i, 0))\n"),
    "evaluate sends max_tokens 64": (
        "dhp/methods/human_alignment.py",
        "max_tokens=config.gemba_max_tokens,",
        "max_tokens=config.gemba_max_tokens or 64,"),
    "another seed": (
        "dhp/judging/gemba.py",
        "return ChatRequest.make(messages, max_tokens, attempt / protocol.temperature_divisor)",
        "return ChatRequest.make(messages, max_tokens, attempt / protocol.temperature_divisor, seed=1)"),
}


def _copy(dst: Path) -> None:
    for part in ("dhp", "tests"):
        shutil.copytree(ROOT / part, dst / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for f in ("pyproject.toml",):
        shutil.copy(ROOT / f, dst / f)


def _run(where: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(where), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *TARGETS],
                          cwd=where, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
@pytest.mark.parametrize("bug", list(BUGS))
def test_the_request_test_fails_on_a_planted_bug(tmp_path, bug):
    path, good, bad = BUGS[bug]
    _copy(tmp_path)
    text = (tmp_path / path).read_text(encoding="utf-8")
    assert text.count(good) == 1, f"the line to mutate is gone from {path}: update BUGS"
    (tmp_path / path).write_text(text.replace(good, bad), encoding="utf-8")
    out = _run(tmp_path)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]
    assert "AssertionError" in out.stdout and "1 failed" in out.stdout, out.stdout[-3000:]


@pytest.mark.slow
def test_control_the_unmutated_copy_passes(tmp_path):
    _copy(tmp_path)
    out = _run(tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
