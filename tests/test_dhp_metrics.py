"""DHP's ``metrics`` parameter (issue 39: a demo that fits): a judge asked for some of the task's metrics gets only
their prompts, the expert-weight check covers only them, and the grid hands the parameter to notebook 02."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dhp import grid, methods
from dhp.backends import Backend, Completion
from dhp.errors import DHPError

SOURCE = "A storm closed the coastal road near Pellham on Sunday. Crews cleared fallen trees by the evening."


class Threes(Backend):
    """A judge that answers every prompt "3" and keeps the prompts it was sent."""

    identity = "scripted:threes"
    model = "threes"
    n_ctx = None

    def __init__(self):
        self.prompts: list[str] = []

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            self.prompts.append(r.messages[-1][1])
            res = Completion("3", None, 10, 1, None, None)
            out.append(res)
            if on_result:
                on_result(i, res)
        return out


def tables():
    ds = pd.DataFrame([{"dataset": "summeval", "task": "summarization", "item_id": "k1", "source": SOURCE,
                        "reference": "x", "question": "", "wrong_ending": "", "src_lang": "", "tgt_lang": ""}])
    pt = pd.DataFrame([{"dataset": "summeval", "task": "summarization", "item_id": "k1", "perturbation": p,
                        "level": lvl, "severity": "none", "method": "rule", "text": t, "edits": "", "status": "ok",
                        "reason": ""}
                       for p, lvl, t in [("original", "none", "A storm shut the road; it reopened."),
                                         ("char_typo", "character", "A strm shut the road; it reopned.")]])
    return ds, pt


@pytest.mark.parametrize("metrics, want", [(["coherence"], {"coherence"}),
                                           (None, {"coherence", "consistency", "fluency", "relevance"})])
def test_only_the_metrics_asked_for_are_judged(tmp_path, metrics, want):
    m = methods.get("dhp")
    ds, pt = tables()
    judge = Threes()
    cfg = m.config(None, run_dir=str(tmp_path), metrics=metrics, mode="logprobs", progress=False)
    scores = m.collect_scores(cfg, ds, pt, judge)["scores.parquet"]
    assert set(scores["metric"]) == want and len(scores) == 2 * len(want)
    assert len(judge.prompts) == 2 * len(want)  # no call for a metric not asked for


def test_an_unknown_metric_fails_before_any_call(tmp_path):
    with pytest.raises(DHPError, match="metrics"):
        methods.get("dhp").config(None, run_dir=str(tmp_path), metrics=["coherense"])


def test_the_grid_hands_metrics_to_notebook_02(tmp_path):
    """The grid passes a notebook only the parameters its parameters cell declares: notebook 02 must declare
    ``metrics``, or an override would be dropped without a word and every metric judged."""
    g = grid.validate_params({"judges": ["embedded"], "modes": ["logprobs"], "methods": ["dhp"],
                              "runs_dir": str(tmp_path),
                              "overrides": [{"judges": ["embedded"], "params": {"metrics": ["coherence"]}}]})
    (point,), _ = grid.points(g)
    assert point.config.metrics == ["coherence"]
    nb = Path(grid.__file__).resolve().parents[1] / "notebooks" / "02_judge.ipynb"
    assert "metrics" in grid._declared_parameters(nb)
