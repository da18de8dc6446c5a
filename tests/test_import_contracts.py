"""The layers hold (import-linter, contracts in pyproject.toml): dhp.analysis is pure — it imports no backend, call
engine, cache, judge protocol, perturbation, dataset loader, plotting or file I/O — and dhp's packages import each
other without cycles. A violation names the import chain that breaks it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint(config: Path | None = None) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    args = [exe, "--no-cache"] + (["--config", str(config)] if config else [])
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_import_contracts_are_kept():
    r = _lint()
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_the_contract_catches_an_analysis_module_that_plots(tmp_path):
    """The control: the same checker reports a forbidden import (here: analysis -> plots, which dhp does have
    from the plotting side) when the contract is turned around."""
    config = tmp_path / "contracts.toml"
    config.write_text('[tool.importlinter]\nroot_package = "dhp"\n\n[[tool.importlinter.contracts]]\n'
                      'name = "plots may not read analysis tables (deliberately false)"\ntype = "forbidden"\n'
                      'source_modules = ["dhp.plots"]\nforbidden_modules = ["dhp.analysis"]\n')
    r = _lint(config)
    assert r.returncode != 0 and "dhp.plots" in r.stdout and "BROKEN" in r.stdout
