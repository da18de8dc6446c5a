"""A pairwise strategy is run by its registered name wherever a published one is (``evaluate --protocol``, the
grid's ``protocols``, notebook 12 through evaluate): a ``source:`` prefix is a naming habit, not a gate; a name no
method can run is refused with the real reason (unknown / no method runs it / not in this mode)."""

from __future__ import annotations

import pytest

from dhp import grid
from dhp.errors import DHPError
from dhp.evaluate import plan
from dhp.judging import PROTOCOLS, protocol
from dhp.judging.strategies import STRATEGIES, strategy

JUDGE = "openai:m@http://127.0.0.1:9/v1"  # never called: plans only


@pytest.fixture
def checklist():
    for name in ("checklist_test", "h4:checklist_test"):
        strategy(name)(lambda items, ctx: [])
    protocol("plain_test")(lambda table, judge: table)  # a protocol no method's protocol_params names
    yield
    for name in ("checklist_test", "h4:checklist_test"):
        STRATEGIES.remove(name)
    PROTOCOLS.remove("plain_test")


def test_evaluate_plans_a_strategy_of_your_own_by_its_name(checklist, tmp_path):
    for name in ("checklist_test", "h4:checklist_test"):
        steps = plan(JUDGE, "quick", "logprobs", str(tmp_path / "r"), protocols=[name])
        assert [s.method for s in steps] == ["decompose_aggregate"]
        assert steps[0].config.strategies == [name] and "LLMBar" in " ".join(steps[0].units)


def test_the_grid_runs_a_strategy_of_your_own_by_its_name(checklist):
    g = grid.validate_params({"judges": [JUDGE], "modes": ["logprobs"], "methods": ["decompose_aggregate"],
                              "protocols": ["checklist_test"], "leaderboard": None})
    pts, _ = grid.points(g)
    assert [p.config.strategies for p in pts] == [["checklist_test"]]


def test_a_protocol_no_method_runs_is_refused_with_the_real_reason(checklist, tmp_path):
    with pytest.raises(DHPError, match=r"Unknown judge protocol\(s\) \['nope_test'\]; registered: .*checklist_test"):
        plan(JUDGE, "quick", "logprobs", str(tmp_path / "r"), protocols=["nope_test"])
    with pytest.raises(DHPError, match=r"No method runs the judge protocol 'plain_test' \(test_protocols_by_name"):
        plan(JUDGE, "quick", "logprobs", str(tmp_path / "r"), protocols=["plain_test"])
    with pytest.raises(DHPError, match=r"decompose_aggregate runs the judge protocol 'checklist_test' in mode\(s\) "
                                       r"logprobs, sample, not 'metric'\. Fix: use --mode logprobs"):
        plan(JUDGE, "quick", "metric", str(tmp_path / "r"), protocols=["checklist_test"])
    g = {"judges": [JUDGE], "modes": ["logprobs"], "methods": ["dhp"], "protocols": ["checklist_test"],
         "leaderboard": None}
    with pytest.raises(DHPError, match=r"grid protocols: no method of \['dhp'\] runs 'checklist_test'; "
                                       r"decompose_aggregate does\. Fix: add decompose_aggregate to methods"):
        grid.points(grid.validate_params(g))
