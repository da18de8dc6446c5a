"""Every recipe runs as written (issue 41 items 4 and 6): the ``dhp`` console command that ``make setup`` installs,
and the command blocks of the documentation pages run on a scratch folder."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra) -> dict:
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def test_the_dhp_entry_point_resolves_and_prints_its_help(capsys):
    """pyproject's [project.scripts] names dhp.cli:main, which exists and answers --help with the commands."""
    import pkgutil

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"dhp": "dhp.cli:main"}
    main = pkgutil.resolve_name(scripts["dhp"].replace(":", ".", 0))
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "dhp evaluate JUDGE" in out and "python -m dhp" in out  # both spellings documented
    assert "python -m dhp run" not in out  # the recipes use the command


def test_python_dash_m_dhp_still_works():
    r = subprocess.run([sys.executable, "-m", "dhp", "--help"], capture_output=True, text=True, env=_env(),
                       timeout=120)
    assert r.returncode == 0 and "dhp leaderboard --run-dir R" in r.stdout, r.stderr[-1000:]
