"""Acceptance (issue 6, check 4): a catalogue of malformed inputs, one test id each.

Every case must end in ONE clear message that names the problem and says "Fix: ...", raised as
dhp.errors.DHPError (or, through the CLI / papermill, reported as that message), and the run
folder must hold no table afterwards (nothing half-written). Inputs are synthetic files written
into tmp_path; the Story Cloze cases use conftest's synthetic file in the upstream layout (the real one is not
openly licensed), the other cases conftest's tiny bring-your-own story file.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pandas as pd
import pytest

from conftest import DATA, ROOT, STORYCLOZE, TINY_STORIES, run_cli, tables_in
from dhp import grid
from dhp.errors import DHPError
from dhp.pipeline import run_pipeline

# A small valid run; each case changes one thing. Never the repo's runs/: run_dir is in tmp_path.
BASE = {"dataset": str(TINY_STORIES), "n_items": 2, "seed": 0, "perturbations": ["char_typo"]}
STORY_CLOZE = {"dataset": "storycloze", "path": str(STORYCLOZE)}  # the user-supplied Story Cloze route


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for var in ("DHP_STORYCLOZE_PATH", "DHP_AE_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DHP_DATA_DIR", str(DATA))  # the session's data root, however the caller named it


def _pipeline(t: Path, **change):
    kw = {**BASE, "run_dir": t / "run", "cache_path": t / "run" / "cache.sqlite", **change}
    return run_pipeline(**kw)


def _write(t: Path, name: str, content: str | bytes) -> Path:
    p = t / "inputs" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return p


# ------------------------------------------------------------------------------ dataset files
GOOD_ROWS = ("item_id,source,reference,task\n"
             "a1,The cat sat on the warm mat all day long.,A cat rested on a mat.,summarization\n"
             "a2,Rain fell over the quiet town until dusk.,It rained in town.,summarization\n")


def csv_missing_column(t):
    _pipeline(t, dataset=str(_write(t, "mine.csv", "item_id,source,task\na1,Some text.,summarization\n")))


def csv_duplicate_id(t):
    _pipeline(t, dataset=str(_write(t, "mine.csv", GOOD_ROWS + "a1,Another text here.,Another.,summarization\n")))


def csv_empty_reference(t):
    _pipeline(t, dataset=str(_write(t, "mine.csv", GOOD_ROWS + "a3,Some source text.,,summarization\n")))


def csv_not_utf8(t):
    _pipeline(t, dataset=str(_write(t, "mine.csv", GOOD_ROWS.encode() + b"a3,Caf\xe9 au lait.,Coffee.,summarization\n")))


def jsonl_broken_line(t):
    _pipeline(t, dataset=str(_write(t, "mine.jsonl", '{"item_id": "1", "source": "x", "reference": "y"\n')))


def jsonl_unknown_task(t):
    rec = '{"item_id": "1", "source": "Some text.", "reference": "Short.", "task": "poetry"}\n'
    _pipeline(t, dataset=str(_write(t, "mine.jsonl", rec)))


def storycloze_wrong_checksum(t):
    # Right columns, synthetic content: not the file the committed selection was made on.
    _pipeline(t, **STORY_CLOZE)


def storycloze_no_path(t):
    _pipeline(t, **{**STORY_CLOZE, "path": None})


def storycloze_missing_file(t):
    _pipeline(t, **{**STORY_CLOZE, "path": str(t / "inputs" / "nowhere" / "cloze.csv")})


def data_dir_missing(t, monkeypatch):
    monkeypatch.setenv("DHP_OFFLINE", "1")  # else the data layer would fetch the files into the new root
    _pipeline(t, dataset="summeval", perturbations=["char_typo"], data_dir=str(t / "no_such_root"))


# ------------------------------------------------------------------------------ run / notebook parameters
def unknown_dataset(t):
    _pipeline(t, dataset="imdb")


def n_items_zero(t):
    _pipeline(t, n_items=0)


def n_items_negative(t):
    _pipeline(t, n_items=-3)


def n_items_too_many(t):
    _pipeline(t, n_items=10**6)


def unknown_perturber(t):
    _pipeline(t, perturber="magic")


def unknown_perturbation(t):
    _pipeline(t, perturbations=["char_swap"])


def unknown_mode(t):
    _pipeline(t, mode="telepathy")


def n_samples_zero(t):
    _pipeline(t, mode="sample", n_samples=0)


def unknown_combine(t):
    _pipeline(t, combine="fisher")


def n_boot_negative(t):
    _pipeline(t, n_boot=-1)


# ------------------------------------------------------------------------------ params YAML (grid)
YAML_OK = "judges: [embedded]\nmodes: [logprobs]\ndatasets: [summeval]\nmethod_params: {dhp: {n_items: 3}}\n"


def yaml_unknown_key(t):
    grid.load_params(_write(t, "p.yaml", YAML_OK + "n_itmes: 5\n"))


def yaml_unknown_dataset(t):
    grid.load_params(_write(t, "p.yaml", YAML_OK.replace("[summeval]", "[imdb]")))


def yaml_bad_type(t):
    grid.load_params(_write(t, "p.yaml", YAML_OK.replace("n_items: 3", "n_items: ten")))


def yaml_syntax_error(t):
    grid.load_params(_write(t, "p.yaml", YAML_OK + "modes: [logprobs\n"))


# ------------------------------------------------------------------------------ expert-weight CSV
def _weights(t: Path, change) -> Path:
    ew = pd.read_csv(ROOT / "dhp" / "resources" / "expert_weights.csv", comment="#")
    ew = change(ew)
    p = t / "inputs" / "weights.csv"
    p.parent.mkdir(parents=True, exist_ok=True)
    ew.to_csv(p, index=False)
    return p


def _first_nonzero(ew):
    return ew.index[(ew["task"] == "story_completion") & (ew["weight"] > 0)][0]


def weights_not_summing_to_1(t):
    def change(ew):
        ew.loc[_first_nonzero(ew), "weight"] += 0.5
        return ew
    _pipeline(t, expert_weights=str(_weights(t, change)))


def weights_unknown_metric(t):
    def change(ew):
        ew.loc[_first_nonzero(ew), "metric"] = "humour"
        return ew
    _pipeline(t, expert_weights=str(_weights(t, change)))


def weights_missing_column(t):
    _pipeline(t, expert_weights=str(_weights(t, lambda ew: ew.drop(columns=["weight"]))))


def weights_negative(t):
    def change(ew):
        ew.loc[_first_nonzero(ew), "weight"] = -0.2
        return ew
    _pipeline(t, expert_weights=str(_weights(t, change)))


def weights_file_missing(t):
    _pipeline(t, expert_weights=str(t / "inputs" / "no_weights.csv"))


# ------------------------------------------------------------------------------ judge specs
def judge_unknown_backend(t):
    _pipeline(t, judge="gpt4:turbo")


def judge_unknown_embedded_model(t):
    _pipeline(t, judge="embedded:tiny-llama-9000")


def judge_openai_no_key(t, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    _pipeline(t, judge="openai:gpt-4o-mini")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is


def judge_unreachable_url(t):
    _pipeline(t, judge=f"openai:smollm2-135m@http://127.0.0.1:{_closed_port()}/v1")


def judge_401(t):
    from servers import StatusServer

    with StatusServer(401) as srv:
        _pipeline(t, judge=f"openai:smollm2-135m@{srv.base_url}")


# case id -> (trigger, regex the message must match: it names the problem)
CASES = {
    "csv-missing-column": (csv_missing_column, r"lacks required columns \['reference'\]"),
    "csv-duplicate-id": (csv_duplicate_id, r"item_id 'a1' duplicates"),
    "csv-empty-reference": (csv_empty_reference, r"reference is empty"),
    "csv-not-utf8": (csv_not_utf8, r"not UTF-8"),
    "jsonl-broken-line": (jsonl_broken_line, r"line 1 is not valid JSON"),
    "jsonl-unknown-task": (jsonl_unknown_task, r"unknown task 'poetry'"),
    "storycloze-wrong-checksum": (storycloze_wrong_checksum, r"sha256"),
    "storycloze-no-path": (storycloze_no_path, r"Story Cloze"),
    "storycloze-missing-file": (storycloze_missing_file, r"not found"),
    "data-dir-missing": (data_dir_missing, r"no_such_root"),
    "param-unknown-dataset": (unknown_dataset, r"dataset = 'imdb' is invalid: unknown dataset"),
    "param-n_items-zero": (n_items_zero, r"n_items = 0 is invalid: .*greater than or equal to 1"),
    "param-n_items-negative": (n_items_negative, r"n_items = -3 is invalid"),
    "param-n_items-too-many": (n_items_too_many, r"n_items=1000000"),
    "param-unknown-perturber": (unknown_perturber, r"(?i)perturber.*'magic'|'magic'.*perturber"),
    "param-unknown-perturbation": (unknown_perturbation, r"Unknown perturbation 'char_swap'"),
    "param-unknown-mode": (unknown_mode, r"mode = 'telepathy' is invalid: .*'logprobs'"),
    "param-n_samples-zero": (n_samples_zero, r"n_samples = 0 is invalid"),
    "param-unknown-combine": (unknown_combine, r"combine = 'fisher' is invalid: use one of \['paper', 'wilson'\]"),
    "param-n_boot-negative": (n_boot_negative, r"n_boot = -1 is invalid"),
    "yaml-unknown-key": (yaml_unknown_key, r"unknown parameter 'n_itmes'"),
    "yaml-unknown-dataset": (yaml_unknown_dataset, r"dataset = 'imdb' is invalid: unknown dataset"),
    "yaml-bad-type": (yaml_bad_type, r"n_items = 'ten' is invalid: .*integer"),
    "yaml-syntax-error": (yaml_syntax_error, r"not valid YAML"),
    "weights-not-summing-to-1": (weights_not_summing_to_1, r"sum to 1\.5, not 1"),
    "weights-unknown-metric": (weights_unknown_metric, r"\['humour'\] are not metrics"),
    "weights-missing-column": (weights_missing_column, r"missing columns \['weight'\]"),
    "weights-negative": (weights_negative, r"negative weight"),
    "weights-file-missing": (weights_file_missing, r"not found"),
    "judge-unknown-backend": (judge_unknown_backend, r"Unknown judge backend 'gpt4'"),
    "judge-unknown-embedded-model": (judge_unknown_embedded_model, r"Unknown embedded model 'tiny-llama-9000'"),
    "judge-openai-no-key": (judge_openai_no_key, r"OPENAI_API_KEY is not set"),
    "judge-unreachable-url": (judge_unreachable_url, r"Cannot reach the judge server at http://127\.0\.0\.1"),
    "judge-401": (judge_401, r"rejected the API key \(401\)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_gives_one_clear_error_and_no_table(case, tmp_path, monkeypatch):
    trigger, problem = CASES[case]
    kwargs = {"monkeypatch": monkeypatch} if "monkeypatch" in trigger.__code__.co_varnames else {}
    with pytest.raises(DHPError) as info:
        trigger(tmp_path, **kwargs)
    msg = str(info.value)
    assert "Fix:" in msg and info.value.fix.strip(), msg
    assert re.search(problem, info.value.problem), msg
    # nothing half-written: no table outside the case's own input files
    assert [p for p in tables_in(tmp_path) if "inputs" not in p.parts] == []


def test_valid_custom_file_is_accepted(tmp_path):
    # The control for the csv-* cases: the same file without the defect loads and perturbs.
    from dhp.datasets import load_items
    from dhp.perturb import perturb

    table = load_items(str(_write(tmp_path, "mine.csv", GOOD_ROWS)), 2, 0)
    assert sorted(table["item_id"]) == ["a1", "a2"]
    out = perturb(table, seed=0, perturbations=["char_typo"])
    assert (out["status"] == "ok").any()


# ------------------------------------------------------------------------------ CLI and papermill
def test_cli_reports_one_message_and_exit_2(tmp_path):
    r = run_cli(["--dataset", str(TINY_STORIES), "--n-items", "0", "--run-dir", str(tmp_path / "run")])
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "n_items = 0 is invalid" in lines[0] and "Fix:" in lines[0]
    assert tables_in(tmp_path) == []


def test_grid_cli_reports_bad_yaml(tmp_path):
    p = _write(tmp_path, "p.yaml", YAML_OK + "n_itmes: 5\n")
    r = run_cli([str(p)], prefix=["-m", "dhp.grid"])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "unknown parameter 'n_itmes'" in r.stderr and "Fix:" in r.stderr


NOTEBOOK_CASES = {
    "nb01-n_items-zero": ("01_perturb", {"n_items": 0}, r"n_items = 0 is invalid"),
    "nb01-unknown-dataset": ("01_perturb", {"dataset": "imdb"}, r"dataset = 'imdb' is invalid"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(NOTEBOOK_CASES))
def test_notebook_bad_parameter(case, tmp_path):
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    name, params, problem = NOTEBOOK_CASES[case]
    run_dir = tmp_path / "run"
    with pytest.raises(PapermillExecutionError) as info:
        pm.execute_notebook(str(ROOT / "notebooks" / f"{name}.ipynb"), str(tmp_path / "out.ipynb"),
                            parameters={**params, "run_dir": str(run_dir)}, cwd=str(ROOT / "notebooks"),
                            progress_bar=False, kernel_name="python3")
    e = info.value
    assert e.ename == "DHPError", (e.ename, e.evalue)
    assert "Fix:" in e.evalue and re.search(problem, e.evalue), e.evalue
    assert tables_in(tmp_path) == []
