"""No zero-width interval (house rule): a judge right (or wrong) on every unit of a binary view — a cue view where
nothing moved it, an always-right control — gets the Wilson interval of its proportion, not the bootstrap's
[1, 1]; a view with spread keeps its bootstrap interval."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dhp.analysis.leaderboard import View, leaderboard
from dhp.stats.paired import wilson_interval


def _view(values: dict[str, list[float]]) -> View:
    rows = [{"judge": j, "mode": "m", "unit": f"u{i}", "value": v} for j, vs in values.items() for i, v in enumerate(vs)]
    return View("toy", "scope", "robustness", "mean", pd.DataFrame(rows), strategy="s")


def test_a_judge_alike_on_every_unit_gets_a_wilson_interval_with_width():
    n = 10
    rng = np.random.default_rng(0)
    board = leaderboard([_view({"always": [1.0] * n, "never": [0.0] * n,
                                "mixed": rng.integers(0, 2, n).astype(float).tolist()})], n_resamples=200)["leaderboard.csv"]
    rows = board.set_index("judge")
    for judge, k in (("always", n), ("never", 0)):
        lo, hi = rows.loc[judge, ["lo", "hi"]]
        assert hi > lo, f"{judge}: zero-width interval {lo}-{hi}"
        assert (lo, hi) == pytest.approx(wilson_interval(k, n))
    lo, hi = rows.loc["mixed", ["lo", "hi"]]
    assert lo < rows.loc["mixed", "value"] < hi  # the bootstrap's interval, as before


def test_wilson_interval_is_the_textbook_one():
    # Wilson (1927) / Newcombe (1998) method 3: 0 of 10 -> (0, 0.2775); 10 of 10 -> (0.7225, 1); 81 of 263
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.27753), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((0.72247, 1.0), abs=1e-4)
    assert wilson_interval(81, 263) == pytest.approx((0.2553, 0.3662), abs=1e-4)
    assert all(np.isnan(wilson_interval(0, 0)))
    # exact ends, no rounding noise (0 of 6 gave a lower bound of 2.8e-17 in a table)
    assert wilson_interval(0, 6)[0] == 0.0 and wilson_interval(6, 6)[1] == 1.0


def test_a_judge_whose_statistic_never_moves_gets_no_interval_instead_of_a_zero_width_one():
    # a constant judge (control:first on DHP: D = 0 on every bootstrap draw) or a constant continuous mean: the
    # resamples have no spread, which says nothing about precision: NaN, not (0, 0)
    rng = np.random.default_rng(1)
    rows = [{"judge": j, "mode": "m", "unit": f"u{i}", "value": v}
            for j, vs in {"flat": [0.3] * 12, "moving": rng.normal(0.5, 0.2, 12).tolist()}.items()
            for i, v in enumerate(vs)]
    views = [View("toy", "scope", "mean_score", "mean", pd.DataFrame(rows), strategy="s"),
             View("toy", "scope", "stat", "statistic", pd.DataFrame(rows), strategy="s",
                  statistic=lambda r: float(r["value"].max() - r["value"].min()))]
    board = leaderboard(views, n_resamples=200)["leaderboard.csv"].set_index(["measure", "judge"])
    for measure in ("mean_score", "stat"):
        assert board.loc[(measure, "flat"), ["lo", "hi"]].isna().all(), measure
        lo, hi = board.loc[(measure, "moving"), ["lo", "hi"]]
        assert lo < hi, measure
