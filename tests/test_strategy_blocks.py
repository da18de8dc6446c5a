"""The public building blocks of a pairwise strategy (dhp.judging.blocks): the docs' own strategy, built from them,
runs through the call engine on the docs' own echo backend and passes the rows contract (check_rows); a strategy
that breaks the contract is named."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from dhp.backends import BACKENDS
from dhp.errors import DHPError
from dhp.judging.blocks import ORDERS, check_rows, verdict_row
from dhp.judging.strategies import STRATEGIES, run_strategies

PAGE = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text(encoding="utf-8")
PAIRS = pd.DataFrame({"item_id": ["p1", "p2"], "subset": "mine", "instruction": ["Say hello.", "Name a colour."],
                      "output_1": ["Hello there, friend.", "Blue."], "output_2": ["Hi.", "Red is a colour I like."],
                      "label": ["1", "2"]})


def _load(rel: str) -> None:
    code = re.search(rf"<!-- file: {re.escape(rel)} -->\n```python\n(.*?)\n```", PAGE, re.S).group(1)
    exec(compile(code, f"docs/extending.md:{rel}", "exec"), {"__name__": f"docs_{Path(rel).stem}_test"})


@pytest.fixture
def docs_examples():
    _load("dhp/backends/echo.py")
    _load("dhp/judging/echo_compare.py")
    yield
    BACKENDS.pop("echo")
    STRATEGIES.pop("echo_compare")


def test_the_docs_strategy_runs_through_the_call_engine_and_keeps_the_rows_contract(docs_examples, tmp_path):
    verdicts, costs = run_strategies(PAIRS, ["echo_compare"], judge="echo:1", mode="sample",
                                     cache=str(tmp_path / "cache.sqlite"))
    rows = verdicts.to_dict("records")
    check_rows(rows, PAIRS, "echo_compare")
    assert verdicts["verdict"].tolist() == ["1", "1", "2", "2"]  # the longer response wins, in either order
    assert costs.set_index("strategy").at["echo_compare", "calls"] == 8  # two calls per item and order
    again, _ = run_strategies(PAIRS, ["echo_compare"], judge="echo:1", mode="sample",
                              cache=str(tmp_path / "cache.sqlite"))
    pd.testing.assert_frame_equal(again, verdicts)  # the cache of the call engine serves the rerun


def test_check_rows_names_a_strategy_that_breaks_the_contract():
    it = next(PAIRS.itertuples())
    good = [verdict_row(i, "s", o, verdict="1") for i in PAIRS.itertuples() for o in ORDERS]
    check_rows(good, PAIRS, "s")
    broken = {
        "columns": [dict(good[0], extra=1), *good[1:]],
        "one row per item": good[:-1],
        "no verdict and no reason": [verdict_row(it, "s", "12", verdict=None), *good[1:]],
        "verdict": [verdict_row(it, "s", "12", verdict="A"), *good[1:]],
    }
    for what, rows in broken.items():
        with pytest.raises(DHPError, match=r"Strategy 's'"):
            check_rows(rows, PAIRS, "s")
    with pytest.raises(DHPError, match="does not have"):
        verdict_row(it, "s", "12", score=3)
    assert math.isnan(good[0]["f1"]) and set(good[0]) == set(verdict_row(it, "s", "21"))
