"""Controls of known quality (dhp.controls) and the leaderboard's two-sided p (dhp.analysis.leaderboard.two_sided)."""

import math

import numpy as np
import pandas as pd
import pytest

from dhp.analysis.leaderboard import View, leaderboard, pair_p_consistent
from dhp.backends import get_backend
from dhp.backends.control import prefer_rows
from dhp.controls import judge_kind
from dhp.errors import DHPError
from dhp.judging.pointwise import score_prompts


def _pairs(n, gold="1"):
    return pd.DataFrame({"k": range(n), "gold": gold, "first": ["a b c"] * n, "second": ["a"] * n})


def test_each_control_answers_by_its_rule():
    n = 400
    said = {c: prefer_rows(get_backend(f"control:{c}"), _pairs(n, "2"), ["k"])
            for c in ("oracle@0", "oracle@0.4", "chance", "first", "longer", "constant")}
    right = {c: np.mean([v == "2" for v in s]) for c, s in said.items()}
    assert right["oracle@0"] == 1.0
    assert abs(right["oracle@0.4"] - 0.8) < 0.06  # errs on 40%, half of which land on the gold by chance
    assert abs(right["chance"] - 0.5) < 0.08
    assert set(said["first"]) == {"1"} and set(said["longer"]) == {"1"} and set(said["constant"]) == {"tie"}


def test_a_units_answer_does_not_depend_on_the_other_units():
    b = get_backend("control:oracle@0.5")
    full = prefer_rows(b, _pairs(50), ["k"])
    part = prefer_rows(b, _pairs(50).iloc[::-1].iloc[:20], ["k"])
    assert part == full[::-1][:20]


def test_score_prompts_reads_the_gold_and_makes_no_call():
    rows = pd.DataFrame({"unit": ["a", "b", "c"], "prompt": ["x"] * 3, "gold": [1.0, 0.0, math.nan],
                         "candidate": ["t"] * 3})
    out, stats = score_prompts(rows, judge="control:oracle@0", mode="metric", cache=None, progress=False)
    assert out["score"].iloc[:2].tolist() == [5.0, 1.0]
    assert math.isnan(out["score"].iloc[2]) and out["failure"].iloc[2]
    assert stats["calls"] == 0 and "gold" not in out.columns


def test_controls_are_named_as_controls():
    assert judge_kind("control:chance") == "control"
    assert judge_kind("baseline:chrf_src") == "baseline"
    assert judge_kind("PaLM2", "recorded") == "recorded"
    assert judge_kind("embedded:smollm2-135m", "logprobs") == "model"
    with pytest.raises(DHPError):
        get_backend("control:oracle@1.5")
    with pytest.raises(DHPError):
        get_backend("control:nosuch")


def test_p_and_p_better_of_one_pair_agree_on_a_skewed_statistic():
    # leaderboard_pairs.csv had p 0.502 beside p_better 0.007 for a DHP pair: the bootstrap's two-sided p counted
    # both tails of a skewed distribution. A judge with a heavy-tailed statistic reproduces it.
    rng = np.random.default_rng(3)
    units = [f"u{i}" for i in range(10)]
    a = np.full(10, 0.2) + rng.normal(0, 0.01, 10)
    b = np.r_[np.full(8, 0.05), 1.5, 2.0]  # mean 0.44 but median 0.05: a skewed bootstrap
    data = pd.DataFrame({"judge": ["A"] * 10 + ["B"] * 10, "mode": "m", "unit": units * 2, "x": np.r_[a, b]})
    v = View("t", "s", "med", "statistic", data, statistic=lambda d: float(np.median(d["x"])))
    pairs = leaderboard([v], n_resamples=999, seed=0)["leaderboard_pairs.csv"]
    assert len(pairs) == 1
    assert pair_p_consistent(pairs, 999).all(), pairs[["p", "p_better"]]
    assert pairs["p"].iloc[0] <= 2 * pairs["p_better"].iloc[0] + 1e-12


def test_criteria_confusion_control_lowers_the_damaged_criteria_only():
    # a good control on criteria confusion drops the aspects the attack damages (its target aspect, Table 2, and
    # those annotators expect to drop, Table 19) and leaves every other aspect and the original alone
    from dhp.datasets.criteria_hu2024 import load_expectations
    from dhp.methods import get
    m = get("criteria_confusion")
    e = load_expectations()
    attack = "passive_voice"
    damaged = set(e.loc[(e["attack"] == attack) & (e["human"] | (e["aspect"] == e["target_aspect"])), "aspect"])
    assert damaged and damaged != set(e["aspect"])
    aspects = sorted(set(e["aspect"]))
    prompts = pd.DataFrame([{"dataset": "summeval", "item_id": "i1", "attack": a, "variant": v, "method": "rule",
                             "aspect": asp, "description_type": "detailed", "instruction": "paper",
                             "prompt": "text " * 10} for a, v in (("", "original"), (attack, "perturbed"))
                            for asp in aspects])
    cfg = m.Params(judge="control:oracle@0", mode="metric", run_dir="/tmp/unused")
    out = m.collect_scores(cfg, prompts, "control:oracle@0")["confusion_scores.parquet"]
    got = dict(zip(zip(out["attack"], out["aspect"]), out["score"]))
    assert all(got[("", a)] == 5.0 for a in aspects)
    assert all(got[(attack, a)] == (3.0 if a in damaged else 5.0) for a in aspects)
    assert out["n_valid"].eq(1).all() and (out["judge"] == "control:oracle@0").all()
    # a baseline runs there too (tests/test_baselines_everywhere.py), on the texts: without them, one clear error
    assert not m.refuses("baseline:chrf_src", "metric") and not m.refuses("control:chance", "metric")
    with pytest.raises(DHPError, match="source"):
        m.collect_scores(m.Params(judge="baseline:chrf_src", mode="metric", run_dir="/tmp/unused"), prompts)


def test_a_control_reports_the_call_statistics_a_model_does():
    # the lessons print a model's run statistics (requests, calls, cache hits, tokens, truncated rows) and read
    # failures from the scores: a control's tables and statistics have the same shape, with 0 calls
    from dhp.calls import run_stats
    from dhp.judging.pointwise import score_perturbed
    from dhp.methods import get

    perturbed = pd.DataFrame({"dataset": "summeval", "item_id": ["i1", "i1", "i2", "i2"],
                              "perturbation": ["original", "char_typo"] * 2, "severity": [0, 1] * 2,
                              "level": ["", "char"] * 2, "status": "ok", "text": ["a b c", "a b d"] * 2})
    items = pd.DataFrame({"dataset": "summeval", "item_id": ["i1", "i2"], "source": "s", "reference": "r"})
    scores, stats = score_perturbed(perturbed, items, judge="control:oracle@0", mode="metric")
    assert set(run_stats("x", 0)) <= set(stats) and stats["requests"] == len(scores) == 4 and stats["calls"] == 0
    assert stats["truncated_rows"] == 0 and scores["failure"].eq("").all()
    m = get("criteria_confusion")
    prompts = pd.DataFrame([{"dataset": "summeval", "item_id": "i1", "attack": "", "variant": "original",
                             "method": "rule", "aspect": "fluency", "description_type": "detailed",
                             "instruction": "paper", "prompt": "text"}])
    got = m.collect_scores(m.Params(judge="control:chance", mode="metric", run_dir="/tmp/unused"), prompts,
                           "control:chance")
    assert "failure" in got["confusion_scores.parquet"].columns
    assert got.stats["confusion_scores.parquet"]["requests"] == 1


def test_pairwise_strategies_and_the_bias_method_run_a_control():
    # run_strategies answers a control from the pairs' labels (DnA and the bias method both call it): control:first
    # names the first-shown output in both orders, a position bias of known size; no call, no token
    from dhp.judging.strategies import run_strategies
    from dhp.methods import get

    items = pd.DataFrame({"item_id": ["p1", "p2", "p3"], "subset": "Natural", "label": ["1", "2", "1"],
                          "input": "q", "output_1": ["a b c d", "a", "a b"], "output_2": ["a", "a b c", "a b c d"]})
    v, costs = run_strategies(items, ["dhp_vanilla", "direct"], judge="control:first")
    assert len(v) == 3 * 2 * 2 and (costs["calls"] == 0).all() and (costs["prompt_tokens"] == 0).all()
    assert (v.loc[v["order"] == "12", "verdict"] == "1").all() and (v.loc[v["order"] == "21", "verdict"] == "2").all()
    longer, _ = run_strategies(items, ["dhp_vanilla"], judge="control:longer")
    assert list(longer["verdict"]) == ["1", "1", "2", "2", "2", "2"]  # the longer output whichever order
    bias = get("bias")
    assert "metric" in bias.modes and not bias.refuses("control:first", "metric")
    assert not bias.refuses("baseline:chrf_src", "metric")  # a baseline: the higher score wins
    assert "baseline" in get("dual_perspective").refuses("baseline:chrf_src", "metric")


def test_controls_scale_puts_a_good_control_above_chance_with_intervals_and_chance_twice_does_not(tmp_path):
    """The scale a lesson shows beside its model (methods.controls_scale): LLMBar agreement at the method's control
    size, a good control's interval above chance's in every view; two chance controls (the failing control of this
    check) do not separate."""
    from dhp import methods

    m = methods.get("decompose_aggregate")
    config = m.config({"run_dir": str(tmp_path / "run"), "strategies": ["direct"]})
    scale = methods.controls_scale(m, config)
    assert set(scale["judge"]) == set(methods.LESSON_CONTROLS) and (scale["n"] == m.control_params["n_pairs"]).all()
    assert (tmp_path / "run" / "controls" / m.name / "pairwise_verdicts.parquet").is_file()
    for _, view in scale.groupby(["scope", "strategy"]):
        good, useless = (view[view["judge"] == j].iloc[0] for j in methods.LESSON_CONTROLS)
        assert good["lo"] > useless["hi"] and good["hi"] > good["lo"]
    twice = methods.controls_scale(m, m.config({"run_dir": str(tmp_path / "chance")}),
                                   controls=("control:chance", "control:oracle@0.5"), n_pairs=20)
    for _, view in twice.groupby(["scope", "strategy"]):
        a, b = (view[view["judge"] == j].iloc[0] for j in ("control:chance", "control:oracle@0.5"))
        assert not (a["lo"] > b["hi"] or b["lo"] > a["hi"])  # a weak judge on 20 pairs: not told from chance


def test_controls_apart_sets_the_good_and_useless_control_side_by_side_and_marks_bias_measures():
    """What lessons 10 and 11 assert on (methods.controls_apart / lesson_scale): intervals that do not overlap are
    apart, touching or overlapping ones are not; a bias measure is marked leaning; a view only one control has is
    left out."""
    from dhp.methods import controls_apart, lesson_scale

    row = lambda j, view, measure, v, lo, hi, strategy=None: {  # noqa: E731
        "view": view, "scope": "s", "measure": measure, "strategy": strategy, "judge": j, "mode": "metric",
        "value": v, "lo": lo, "hi": hi, "n": 50, "status": "ok"}
    good, bad = "control:oracle@0.2", "control:chance"
    board = pd.DataFrame([row(good, "a", "agreement", 0.9, 0.8, 0.95), row(bad, "a", "agreement", 0.5, 0.4, 0.6),
                          row(good, "b", "kappa", 0.3, 0.1, 0.5), row(bad, "b", "kappa", 0.0, -0.1, 0.1),
                          row(good, "c", "position_balance", 0.9, 0.8, 1.0), row(bad, "c", "position_balance", 0.95,
                                                                                   0.9, 1.0),
                          row(good, "d", "agreement", 0.9, 0.8, 1.0),
                          row("embedded:x", "a", "agreement", 0.6, 0.5, 0.7),
                          {**row(bad, "e", "agreement", 0.5, 0.4, 0.6), "status": "too few units"}])
    scale = lesson_scale(board, "/nonexistent")
    assert set(scale["judge"]) == {good, bad} and (scale["status"] == "ok").all()
    apart = controls_apart(scale).set_index("view")
    assert list(apart.index) == ["a", "b", "c"]  # d: the good control alone; e: no number
    assert apart.loc["a", "apart"] and not apart.loc["b", "apart"] and not apart.loc["c", "apart"]  # b: 0.1 touches
    assert apart.loc["c", "leaning"] and not apart.loc["a", "leaning"]
    # the control of the check: chance against itself is never apart
    assert not controls_apart(scale, (bad, bad))["apart"].any()
