"""The CLI (`python -m dhp run`) and the notebooks run the same stages with the same defaults: a notebook's
`parameters` cell may not drift from run_pipeline's signature or the CLI's argparse defaults."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import nbformat
import pytest

from dhp.pipeline import _parser, run_pipeline

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
SHARED = ("seed", "judge", "mode", "n_samples", "run_dir", "perturber", "expert_weights", "combine", "n_boot",
          "n_null", "n_ctx", "cache_path", "data_dir")


def _parameters(name: str) -> dict:
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    out = {}
    for node in ast.parse(cell.source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = ast.literal_eval(node.value)
    return out


@pytest.mark.parametrize("name", ["01_perturb", "02_judge", "03_discernment"])
def test_notebook_defaults_equal_the_pipeline_defaults(name):
    signature = {k: v.default for k, v in inspect.signature(run_pipeline).parameters.items()}
    cli = vars(_parser().parse_args(["--dataset", "summeval", "--n-items", "3"]))
    params = _parameters(name)
    shared = [k for k in SHARED if k in params]
    assert shared, f"{name} declares none of the pipeline's parameters"
    for k in shared:
        assert params[k] == signature[k], f"{name}: {k} = {params[k]!r}, run_pipeline default {signature[k]!r}"
        assert cli[k] == signature[k], f"CLI default of --{k.replace('_', '-')} differs from run_pipeline"
