"""``evaluate --protocol gemba:<name>``: the plan for every GEMBA protocol (quick and paper), and a full run through a
scripted judge that puts it beside GEMBA-GPT4-DA-refA in the WMT22 segment view on the same outputs, with a paired
test. (A real model is exercised by tests/test_gemba_protocol.py's comparison with GEMBA's code; SmolLM2 answers
GEMBA's prompts with a number and prose, which GEMBA's rule rejects, so a live quick run asks up to 11 times per
output.) Skipped without GEMBA's files."""

from __future__ import annotations

import hashlib
import re

import pandas as pd
import pytest

from dhp.backends import BACKENDS, Backend, Completion, register_backend
from dhp.datasets import declared_files
from dhp.errors import DHPError
from dhp.evaluate import evaluate, plan
from dhp.judging.gemba import GEMBA_PROTOCOLS

DATA = declared_files.data_root()


# Every protocol at the quick size; at the paper's size (28,125 prompts each: ~7 s a plan) one that reads the source
# only and one that also reads the reference, in both answer formats: the counting code is the protocols' one path.
@pytest.mark.parametrize("profile,segments,names", [("quick", 6, list(GEMBA_PROTOCOLS)),
                                                    ("paper", 1875, ["DA", "classes_ref"])])
def test_plan_of_every_gemba_protocol(tmp_path, profile, segments, names):
    for name in names:
        steps = plan("openai:m@http://127.0.0.1:9/v1", profile, run_dir=str(tmp_path / name),
                     protocols=[f"gemba:{name}"])
        assert [s.method for s in steps] == ["human_alignment"]
        (step,) = steps
        assert step.config.segment_protocol == f"gemba:{name}" and step.config.n_docs == 0
        assert f"{segments} of 1875 MQM segments x 15 systems" in step.units[0]
        assert f"GEMBA-{name}@a7a7eff8" in step.note and step.config.mode == "sample"
        # the calls counted as sent: one per distinct prompt (two systems' equal outputs are one call), at most 11
        distinct = step.calls + step.cached
        assert 0 < distinct <= segments * 15 and (segments == 6 or distinct < segments * 15)
        assert f"GEMBA calls: {step.calls} expected" in step.note and f"at most {11 * step.calls} " in step.note
    assert not any(tmp_path.rglob("*.sqlite"))  # a plan writes no cache


@pytest.mark.parametrize("name", GEMBA_PROTOCOLS)
def test_a_gemba_plan_prices_a_priced_model_at_both_bounds_and_a_dry_run_writes_nothing(tmp_path, name):
    judge = "openai:gpt-4o@https://api.example.com/v1"  # priced in dhp/resources/judge_prices.yaml; never called
    got = evaluate(judge, "quick", run_dir=str(tmp_path / "r"), dry_run=True, protocols=[f"gemba:{name}"],
                   out=open(tmp_path / "plan.txt", "w"))
    (step,) = got["plan"]
    assert step.cost_usd is not None and step.cost_usd > 0 and got["calls_made"] == 0
    # no max_tokens is sent (a7a7eff8): a reply's length is the server's, so no price or token count is a bound
    # (issue 50: "at most $X" and "<= N completion tokens" assumed 20-token replies)
    low = float(re.findall(r"\$([0-9.]+) expected, no upper bound \(no max_tokens is sent", step.note)[0])
    assert low == pytest.approx(step.cost_usd, abs=1e-4) and "at most $" not in step.note
    assert "no max_tokens" in step.note and f"at most {11 * step.calls} " in step.note
    printed = (tmp_path / "plan.txt").read_text()
    assert "completion tokens assumed (no bound" in printed and "<= " not in printed and "no upper bound" in printed
    assert not (tmp_path / "r").exists()  # --dry-run: no run folder, no cache


def test_protocol_errors_name_the_fix(tmp_path):
    with pytest.raises(DHPError, match="Unknown judge protocol"):
        plan("openai:m@http://127.0.0.1:9/v1", "quick", run_dir=str(tmp_path), protocols=["gemba-DA"])
    with pytest.raises(DHPError, match="its own --run-dir"):
        plan("openai:m@http://127.0.0.1:9/v1", "quick", run_dir=str(tmp_path), protocols=["gemba:DA", "gemba:SQM"])


class Digits(Backend):
    """A judge that answers every GEMBA prompt with a number from the message's hash (deterministic)."""

    identity = "scripted:gemba-digits"
    model = "digits"
    n_ctx = None

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            h = int(hashlib.sha256(r.messages[-1][1].encode()).hexdigest(), 16)
            res = Completion(str(h % 101), None, 100, 2, None, None)
            out.append(res)
            if on_result:
                on_result(i, res)
        return out


@pytest.mark.slow  # about 5 min on 2 cores: the leaderboard compares ~80 recorded judges on the segment views
def test_quick_run_puts_the_judge_beside_gemba_gpt4_on_the_same_segments(tmp_path):
    register_backend("scripted", example="scripted:<x>")(lambda rest, **o: Digits())
    try:
        run = tmp_path / "run"
        got = evaluate("scripted:x", "quick", run_dir=str(run), yes=True, protocols=["gemba:DA_ref"],
                       out=open(tmp_path / "out.txt", "w"))
    finally:
        BACKENDS.pop("scripted")
    assert 0 < got["calls_made"] <= 90  # outputs two systems share are one call (one cache key)
    seg = pd.read_parquet(run / "segment_scores.parquet")
    mine = seg[seg["judge"] == "scripted:gemba-digits"]
    assert len(mine) == 90 and set(mine["reference"]) == {"refA"} and mine["score"].notna().all()
    board = pd.read_csv(run / "leaderboard.csv")
    view = board[(board["view"] == "segment") & (board["scope"] == "WMT22 zh-en vs MQM")
                 & (board["measure"] == "acc_eq_calibrated")]
    me, gpt4 = view[view["judge"] == "scripted:gemba-digits"], view[view["judge"] == "GEMBA-GPT4-DA-refA"]
    assert len(me) == len(gpt4) == 1 and int(me["n"].iloc[0]) == int(gpt4["n"].iloc[0]) == 6  # the same six segments
    # six segments are a quick look, not a ranking: every row of the view says so (value and rank still shown)
    assert view[view["value"].notna()]["status"].str.startswith("too few units for a ranking: 6 items (< 30)").all()
    system = board[board["view"] == "system"]
    assert system[system["value"].notna()]["status"].str.startswith("too few units for a ranking: 6 segments").all()
    pairs = pd.read_csv(run / "leaderboard_pairs.csv")
    duel = pairs[(pairs["measure"] == "acc_eq_calibrated")
                 & pairs[["judge_a", "judge_b"]].isin(["scripted:gemba-digits", "GEMBA-GPT4-DA-refA"]).all(axis=1)]
    assert len(duel) == 1 and duel["p"].notna().all()
