"""The one stage runner (dhp.methods.run_stage): a method's declared stages run one by one write what they declare,
record themselves in manifest.json (code version, input checksums, times), equal the end-to-end run, and fail with
the fix when a stage's input is missing or a stage returns what it does not declare. A toy method, no model."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from pydantic import Field

from dhp import methods
from dhp.backends import Backend
from dhp.config import RunParams
from dhp.errors import DHPError
from dhp.io import file_sha256
from dhp.methods import Method, Stage, Table


class Counter(Backend):
    identity, model = "scripted:counter", "counter"


class ToyParams(RunParams):
    n_things: int = Field(3, ge=1, description="how many things")


ITEMS = Table("toy_things.csv", ("thing",), "one row per thing", partition=())
SCORES = Table("toy_scores.csv", ("judge", "mode", "thing", "score"), "one row per judged thing")


class Toy(Method):
    name = "toy_stages"
    modes = ("logprobs",)
    Params = ToyParams
    collects = (ITEMS, SCORES)
    produces = (Table("toy_mean.csv", ("judge", "mode", "mean"), "one row per judge"),)
    extra_stages = (
        Stage("things", (), (), (ITEMS.name,), "the things", lambda m, c, t, j: m.things(c)),
        Stage("judge", (ITEMS.name,), ("judge",), (SCORES.name,), "every thing judged",
              lambda m, c, t, j: m.judge(c, t[ITEMS.name], j)),
    )

    def things(self, config):
        return {ITEMS.name: pd.DataFrame({"thing": range(config.n_things)})}

    def judge(self, config, things, backend):
        scores = things.assign(judge=backend.identity, mode=config.mode, score=things["thing"] * 0.5)
        # the run statistics beside the table, as a stage that calls the engine returns them
        return methods.StageResult({SCORES.name: scores[list(SCORES.columns)]},
                                   stats={SCORES.name: {"calls": len(things)}})

    def collect(self, config, judge=None):
        first = self.things(config)
        judged = self.judge(config, first[ITEMS.name], self.backend(config, judge))
        return methods.StageResult({**first, **judged}, stats=judged.stats)

    def analyze(self, tables, config):
        s = tables[SCORES.name]
        return {"toy_mean.csv": s.groupby(["judge", "mode"], as_index=False).agg(mean=("score", "mean"))}


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(methods._REGISTRY, Toy.name, Toy())
    return methods.get(Toy.name)


def test_stages_one_by_one_write_record_and_equal_the_run(tmp_path, toy):
    run = tmp_path / "stages"
    assert list(toy.stages()) == ["things", "judge", "reference", "collect", "analyze", "figures"]
    config = toy.config(run_dir=str(run), n_things=4)
    first = methods.run_stage(toy, "things", config)
    assert set(first.paths) == {"toy_things.csv"} and len(first["toy_things.csv"]) == 4
    judged = methods.run_stage(toy, "judge", config, judge=Counter())
    assert judged.stats == {"toy_scores.csv": {"calls": 4}}  # returned, and written:
    assert json.loads((run / "judge_stats.json").read_text()) == {"calls": 4}
    results = methods.run_stage(toy, "analyze", config)
    assert results["toy_mean.csv"]["mean"].tolist() == [0.75]

    stages = json.loads((run / "manifest.json").read_text())["stages"]
    assert set(stages) == {"toy_stages.things", "toy_stages.judge", "toy_stages.analyze"}
    judge = stages["toy_stages.judge"]
    assert judge["parameters"]["n_things"] == 4 and judge["backends"][0]["backend"] == "scripted:counter"
    assert judge["inputs"] == {str(run / "toy_things.csv"): file_sha256(run / "toy_things.csv")}  # what it read
    assert judge["code"].startswith("dhp ") and judge["started"] <= judge["finished"]
    assert judge["wrote"] == ["judge_stats.json", "toy_scores.csv"]

    whole = tmp_path / "whole"
    methods.run(Toy.name, run_dir=str(whole), n_things=4, judge=Counter(), figures=False)
    for name in ("toy_things.csv", "toy_scores.csv", "toy_mean.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(run / name), pd.read_csv(whole / name), check_exact=True)
    assert {"toy_stages", "toy_stages.collect", "toy_stages.analyze"} <= set(
        json.loads((whole / "manifest.json").read_text())["stages"])


def test_a_stage_without_its_input_names_the_stage_to_run_first(tmp_path, toy):
    config = toy.config(run_dir=str(tmp_path))
    with pytest.raises(DHPError, match=r"reads \['toy_things.csv'\].*run stage things first"):
        methods.run_stage(toy, "judge", config, judge=Counter())
    with pytest.raises(DHPError, match="holds no judgments"):
        methods.run_stage(toy, "analyze", config)
    with pytest.raises(DHPError, match=r"no stage 'perturb'.*use one of \['things', 'judge'"):
        methods.run_stage(toy, "perturb", config)
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_in_memory_tables_and_write_false_leave_the_folder_alone(tmp_path, toy):
    config = toy.config(run_dir=str(tmp_path / "r"))
    scores = pd.DataFrame({"judge": ["a", "a"], "mode": ["logprobs"] * 2, "thing": [0, 1], "score": [1.0, 2.0]})
    out = methods.run_stage(toy, "analyze", config, tables={"toy_scores.csv": scores}, write=False)
    assert out["toy_mean.csv"]["mean"].tolist() == [1.5] and out.paths == {}
    assert not (tmp_path / "r").exists()


def test_a_stage_returning_a_table_it_does_not_declare_fails_before_writing(tmp_path, toy, monkeypatch):
    wrong = Stage("things", (), (), (ITEMS.name,), "also returns scores",
                  lambda m, c, t, j: {**m.things(c), SCORES.name: pd.DataFrame(columns=list(SCORES.columns))})
    monkeypatch.setattr(Toy, "extra_stages", (wrong, Toy.extra_stages[1]))
    with pytest.raises(DHPError, match=r"returned \['toy_scores.csv'\], which it does not declare"):
        methods.run_stage(toy, "things", toy.config(run_dir=str(tmp_path)))
    assert not any(tmp_path.iterdir())
