"""A bring-your-own summarisation file through the whole pipeline, as a new user runs it (issue 9: the
README's own example used to die at the statistics step, after every judge call was paid, because expert
weights were looked up by the file's name instead of the items' task)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import child_env, run_cli, run_clis_together

from dhp.cache import Cache
from dhp.io import project_root

pytestmark = pytest.mark.slow

ITEMS = [
    {"item_id": "a1", "task": "summarization",
     "source": "The town council met on Tuesday to discuss the new park. Residents asked for more trees and a "
               "playground. The council agreed to plant fifty trees next spring and to build a playground.",
     "reference": "The council agreed to plant fifty trees and build a playground. Residents had asked for both."},
    {"item_id": "a2", "task": "summarization",
     "source": "A local bakery won a national prize for its rye bread. The owner opened the shop ten years ago "
               "and said the recipe came from her grandmother. Sales have doubled since the announcement.",
     "reference": "A bakery won a national prize for its rye bread. Its sales doubled after the news."},
    {"item_id": "a3", "task": "summarization",
     "source": "Heavy rain closed two roads in the valley on Sunday. Workers cleared the mud by the evening, "
               "and the roads opened again on Monday morning. No one was hurt.",
     "reference": "Rain closed two valley roads on Sunday. They reopened on Monday, and no one was hurt."},
]


@pytest.fixture(scope="module")
def byo_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("byo") / "my_items.jsonl"  # named after the file, not a task
    path.write_text("".join(json.dumps(r) + "\n" for r in ITEMS), encoding="utf-8")
    return path


MODES = ("logprobs", "sample", "likelihood")


@pytest.fixture(scope="module")
def byo_runs(byo_file, tmp_path_factory):
    """The file through `python -m dhp run` in each mode: three processes at once (one llama.cpp thread each)."""
    runs = {mode: tmp_path_factory.mktemp(f"byo_{mode}") / "run" for mode in MODES}
    done = run_clis_together([{"args": ["--dataset", str(byo_file), "--n-items", "2", "--perturbations",
                                        "char_typo,control", "--mode", mode, "--n-samples", "2", "--n-null", "200",
                                        "--run-dir", str(runs[mode])], "prefix": ["-m", "dhp", "run"]}
                              for mode in MODES])
    return {mode: (runs[mode], out) for mode, out in zip(MODES, done)}


@pytest.mark.parametrize("mode", MODES)
def test_own_file_runs_through_every_stage(byo_file, byo_runs, mode):
    run, out = byo_runs[mode]
    assert out.returncode == 0, out.stderr
    summary = pd.read_csv(run / "summary.csv")
    assert len(summary) == 1 and summary["dataset"].iloc[0] == "my_items"
    row = summary.iloc[0]
    assert row["mode"] == mode and row["n_null"] == 200
    for col in ("control_D", "null_fpr_paper", "null_fpr_wilson"):
        assert col in summary.columns
    scores = pd.read_parquet(run / "scores.parquet")
    assert (scores["task"] == "summarization").all()
    disc = pd.read_csv(run / "discernment.csv")
    assert set(disc["perturbation"]) <= {"char_typo", "control"} and "control" in set(disc["perturbation"])
    if mode == "likelihood":
        assert scores["score"].notna().all()  # no number is parsed in likelihood mode
    failures = pd.read_csv(run / "failures.csv")
    assert len(failures) == int((scores["n_failed"] > 0).sum())
    manifest = json.loads((run / "manifest.json").read_text())
    assert str(byo_file) in manifest["stages"]["dhp"]["inputs"]  # the method that ran: dhp


def test_missing_expert_weights_fail_before_any_judge_call(byo_file, tmp_path):
    ew = pd.read_csv(project_root() / "dhp/resources/expert_weights.csv", comment="#")
    bad = tmp_path / "ew.csv"
    ew[ew["task"] != "summarization"].to_csv(bad, index=False)
    run = tmp_path / "run"
    out = run_cli(["--dataset", str(byo_file), "--n-items", "3", "--perturbations", "char_typo",
                   "--expert-weights", str(bad), "--run-dir", str(run)], env=child_env(), prefix=["-m", "dhp", "run"])
    assert out.returncode == 2
    assert "expert weights have no rows for task 'summarization'" in out.stderr
    cache = run / "cache.sqlite"
    assert not cache.exists() or len(Cache(cache)) == 0  # nothing was paid for
    assert not (run / "scores.parquet").exists()
