"""One declaration per parameter (dhp.config): the notebooks' parameters cells, the command line and the grid all
derive from each method's parameter model, so a default cannot drift and a bad value gets one clear message."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import nbformat
import pytest

from dhp import config as cfg
from dhp import methods
from dhp.cli import method_parser
from dhp.errors import DHPError

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _parameters(name: str) -> dict:
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    out = {}
    for node in ast.parse(cell.source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = ast.literal_eval(node.value)
    return out


def _method_notebooks():
    return [(m.name, nb) for m in methods.all_methods() for nb in (*m.notebooks, *m.result_notebooks)]


@pytest.mark.parametrize("method, notebook", _method_notebooks())
def test_notebook_parameters_equal_the_method_defaults(method, notebook):
    """Papermill needs literal parameters cells, so they are written by hand: each value must equal the default
    declared in the method's parameter model (the CLI's and the grid's default too)."""
    m = methods.get(method)
    defaults = cfg.notebook_defaults(m.Params)
    params = _parameters(notebook)
    shared = [k for k in params if k in defaults]
    assert shared, f"{notebook} declares none of {method}'s parameters"
    drift = {k: (params[k], defaults[k]) for k in shared if params[k] != defaults[k]}
    assert not drift, f"{notebook}: parameters cell differs from {m.Params.__name__} (cell, model): {drift}"


def test_the_check_catches_a_drifted_default(tmp_path, monkeypatch):
    """The control of the test above: a cell with a different value is reported."""
    nb = nbformat.read(NOTEBOOKS / "03_discernment.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    cell.source = cell.source.replace("n_boot = 200", "n_boot = 0")
    nbformat.write(nb, tmp_path / "03_discernment.ipynb")
    monkeypatch.setattr(__import__(__name__), "NOTEBOOKS", tmp_path)
    with pytest.raises(AssertionError, match="n_boot"):
        test_notebook_parameters_equal_the_method_defaults("dhp", "03_discernment")


@pytest.mark.parametrize("name", methods.names())
def test_cli_options_are_the_parameter_model(name):
    m = methods.get(name)
    ap = method_parser(name, "test")
    options = {a.dest for a in ap._actions if a.option_strings} - {"help", "method"}
    assert options == set(m.Params.model_fields)
    # no option given: the model's defaults, exactly
    got = cfg.from_arguments(m.Params, ap.parse_args([]))
    assert got == m.Params()


def test_cli_parses_lists_bools_and_none():
    ap = method_parser("dhp", "test")
    got = cfg.from_arguments(methods.get("dhp").Params, ap.parse_args(
        ["--perturbations", "char_typo, control", "--progress", "--n-ctx", "none", "--n-items", "4"]))
    assert got.perturbations == ["char_typo", "control"] and got.progress is True and got.n_ctx is None
    assert got.n_items == 4
    with pytest.raises(SystemExit):
        ap.parse_args(["--mode", "telepathy"])  # choices come from the model's Literal


def test_a_list_given_as_a_string_says_to_use_papermill_y():
    m = methods.get("dhp")
    with pytest.raises(DHPError) as e:
        m.config(perturbations='["char_typo", "control"]')
    assert "-y" in str(e.value) and "not -p" in str(e.value) and "perturbations" in e.value.problem


@pytest.mark.parametrize("values, match", [
    ({"n_items": 0}, "n_items = 0 is invalid"),
    ({"n_items": True}, "n_items = True is invalid"),
    ({"mode": "telepathy"}, "mode = 'telepathy' is invalid"),
    ({"n_itmes": 3}, "unknown parameter 'n_itmes'"),
    ({"dataset": "imdb"}, "dataset = 'imdb' is invalid"),
])
def test_bad_values_get_one_message_naming_the_parameter(values, match):
    with pytest.raises(DHPError, match=match) as e:
        methods.get("dhp").config(values)
    assert e.value.fix.strip()


def test_every_parameter_has_help_text():
    for m in methods.all_methods():
        missing = [n for n, f in m.Params.model_fields.items() if not (f.description or "").strip()]
        assert not missing, f"{m.name}: parameters without help text: {missing}"


def test_describe_lists_every_parameter():
    rows = cfg.describe(methods.get("dhp").Params)
    assert {r[0] for r in rows} == set(methods.get("dhp").Params.model_fields)
    assert all(isinstance(r[3], str) for r in rows)


def test_add_arguments_keeps_model_defaults_out_of_argparse():
    """An option not given must not reach the model (so the model's default applies, declared once)."""
    ap = argparse.ArgumentParser()
    cfg.add_arguments(ap, methods.get("dhp").Params)
    assert vars(ap.parse_args([])) == {}


def test_confusion_paper_setting_is_one_parameter_away():
    """Notebook 07's defaults are a quick look; paper_setting=True gives the paper's judging setting whatever the
    other parameters say (the notebook applies the same dict to its globals)."""
    from dhp.methods.criteria_confusion import PAPER_SETTING

    m = methods.get("criteria_confusion")
    quick, paper = m.config(), m.config(paper_setting=True, mode="logprobs", max_tokens=8)
    assert (quick.mode, quick.max_tokens) == ("logprobs", 8)
    assert {k: getattr(paper, k) for k in PAPER_SETTING} == PAPER_SETTING
    assert PAPER_SETTING["mode"] == "sample" and PAPER_SETTING["n_samples"] == 10 and PAPER_SETTING["max_tokens"] == 256
