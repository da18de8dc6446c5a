"""Adding a method is one new file (plus its notebook): it then appears in `python -m dhp methods`, in
`python -m dhp run --method`, in the grid, in the report card and in notebook 10 — with no other file edited.

The test does exactly that on a copy of the package: it writes dhp/methods/toy_length.py and notebooks/12_toy.ipynb
into the copy, and runs the CLI, the grid and notebook 10 from there (PYTHONPATH points at the copy, so the copy's
dhp is the one imported)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat as nbf
import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

TOY = textwrap.dedent('''
    """A toy meta-evaluation method: the length of each item's text, per judge (no model call)."""

    import pandas as pd
    from pydantic import Field

    from dhp.analysis.report_card import card_row
    from dhp.config import RunParams
    from dhp.methods import Method, Table, register


    class ToyParams(RunParams):
        n_things: int = Field(3, ge=1, description="how many texts to measure")


    @register
    class ToyLength(Method):
        name = "toy_length"
        title = "Toy length"
        paper = "none"
        notebooks = ("12_toy",)
        modes = ("logprobs",)
        headline = "mean_length"
        Params = ToyParams
        collects = (Table("toy_items.csv", ("judge", "mode", "item", "length"), "one row per item"),)
        produces = (Table("toy_summary.csv", ("judge", "mode", "mean_length", "n"), "one row per judge"),)

        def collect(self, config, judge=None):
            backend = self.backend(config, judge)
            rows = [{"judge": backend.identity, "mode": config.mode, "item": i, "length": 10 * (i + 1)}
                    for i in range(config.n_things)]
            return {"toy_items.csv": pd.DataFrame(rows)}

        def analyze(self, tables, config):
            t = tables["toy_items.csv"]
            out = t.groupby(["judge", "mode"], as_index=False).agg(mean_length=("length", "mean"), n=("item", "size"))
            return {"toy_summary.csv": out}

        def card(self, tables):
            return pd.DataFrame([card_row(r["judge"], r["mode"], "toy_length", "mean_length", "", r["mean_length"],
                                          n=r["n"]) for r in tables["toy_summary.csv"].to_dict("records")])
''')

NOTEBOOK_PARAMS = 'judge = "embedded"\nmode = "logprobs"\nseed = 0\nn_things = 3\nrun_dir = "runs/default"\ncache_path = None'
NOTEBOOK_BODY = textwrap.dedent('''
    from dhp import methods
    m = methods.get("toy_length")
    config = m.config_from(globals())
    methods.write_tables(m, m.collect(config), config.run_dir)
    results = m.analyze(methods.read_tables(m, config.run_dir, m.collects), config)
    methods.write_tables(m, results, config.run_dir)
    assert results["toy_summary.csv"]["n"].tolist() == [n_things]
''')


def _copy_with_toy(tmp: Path) -> Path:
    repo = tmp / "repo"
    shutil.copytree(ROOT / "dhp", repo / "dhp", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "notebooks", repo / "notebooks")
    shutil.copy2(ROOT / "pyproject.toml", repo / "pyproject.toml")
    (repo / "dhp" / "methods" / "toy_length.py").write_text(TOY)  # the one new file
    nb = nbf.v4.new_notebook()
    p = nbf.v4.new_code_cell(NOTEBOOK_PARAMS)
    p.metadata["tags"] = ["parameters"]
    nb.cells = [nbf.v4.new_markdown_cell("# 12 · Toy length"), p, nbf.v4.new_code_cell(NOTEBOOK_BODY)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbf.write(nb, repo / "notebooks" / "12_toy.ipynb")  # and its notebook
    return repo


def _run(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(repo), "DHP_N_THREADS": "1"}
    return subprocess.run([sys.executable, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_a_new_method_file_appears_everywhere(tmp_path):
    repo = _copy_with_toy(tmp_path)
    changed = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "toy_length" not in changed  # the repository itself is untouched

    listed = _run(repo, "-m", "dhp", "methods")
    assert listed.returncode == 0 and "toy_length" in listed.stdout, listed.stderr

    cli = _run(repo, "-m", "dhp", "run", "--method", "toy_length", "--n-things", "4", "--run-dir", str(tmp_path / "r"))
    assert cli.returncode == 0, cli.stderr
    assert pd.read_csv(tmp_path / "r" / "toy_summary.csv")["mean_length"].tolist() == [25.0]
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["stages"]["toy_length"]["parameters"]["n_things"] == 4

    grid = {"run_id": "toy", "judges": ["embedded"], "modes": ["logprobs", "likelihood"], "methods": ["toy_length"],
            "method_params": {"toy_length": {"n_things": 2}}, "runs_dir": str(tmp_path / "runs"),
            "results_dir": str(tmp_path / "results"), "figures_dir": str(tmp_path / "figures")}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grid))
    g = _run(repo, "-m", "dhp.grid", str(tmp_path / "grid.yaml"))
    assert g.returncode == 0, g.stdout[-3000:] + g.stderr[-3000:]
    assert "not run: toy_length for embedded in likelihood mode" in g.stdout
    assert pd.read_csv(tmp_path / "results" / "toy_summary.csv")["mean_length"].tolist() == [15.0]

    card = pd.read_csv(tmp_path / "results" / "report_card.csv")  # written by notebook 10 in the grid
    toy = card[card["method"] == "toy_length"]
    assert toy["value"].tolist() == [15.0] and toy["status"].tolist() == ["ok"]
    assert (tmp_path / "figures" / "report_card_comparison.png").exists()
