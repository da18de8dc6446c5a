"""The leaderboard's permutation tests against the code before its sequential stop, kept here as the slow reference
(one draw at a time, mt-metrics-eval's early stop only): the same values and deltas, p-values within their Monte Carlo
error, the same decisions and the same clusters, with fewer draws."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dhp.analysis.leaderboard import View, leaderboard
from dhp.stats.permutation import (LEADERBOARD_EARLY_STOP, WMT_EARLY_STOP, _evaluator, _run, _zscore,
                                   permutation_draws)
from dhp.stats.segment import SegmentPairs

_TOL = 1e-12


def reference_run(evaluate, draws, early_stop):
    """dhp.stats.permutation._run as it was (draw by draw, WMT early stop at block ends)."""
    value_a, value_b = evaluate(np.ones(draws.shape[1], dtype=bool))
    delta = value_a - value_b
    k = len(draws)
    block = early_stop.block_size if early_stop else k
    ge = ab = used = 0
    for t in range(k):
        s1, s2 = evaluate(draws[t])
        d = s1 - s2
        ge += d >= delta - _TOL
        ab += abs(d) >= abs(delta) - _TOL
        used = t + 1
        if early_stop and used % block == 0 and used < k:
            p = ge / used
            if p < early_stop.early_min or p > early_stop.early_max:
                break
    return {"value_a": value_a, "value_b": value_b, "delta": delta, "p_a_better": (1 + ge) / (1 + used),
            "p_two_sided": (1 + ab) / (1 + used), "k": used}


def _data(seed: int, n_items: int = 50, n_sys: int = 5, noises=(0.5, 0.55, 0.6, 0.7, 0.8, 1.0, 1.3, 2.0)):
    rng = np.random.default_rng(seed)
    h = np.round(rng.normal(size=(n_items, n_sys)) * 2) / 2  # MQM-like ties
    x = np.stack([(h + rng.normal(scale=s, size=h.shape)).ravel() for s in noises])
    return h.ravel(), x, np.repeat(np.arange(n_items), n_sys)


def _within_mc_error(p_new, k_new, p_ref):
    """|p - p_ref| within 4 standard errors of the estimate from k_new draws (plus the +1 of both estimates)."""
    q = min(max(p_ref, 1 / k_new), 1 - 1 / k_new)
    return abs(p_new - p_ref) <= 4 * math.sqrt(q * (1 - q) / k_new) + 2 / k_new


@pytest.mark.parametrize("statistic", ["acc_eq_calibrated", "tau_b"])
def test_every_pair_equals_the_reference_within_monte_carlo_error(statistic):
    h, x, g = _data(0)
    pairs = SegmentPairs.from_groups(g) if statistic != "tau_b" else None
    draws = permutation_draws(len(h), 1000, seed=3)
    saved = settled = 0
    for a in range(len(x)):
        for b in range(a + 1, len(x)):
            ev = _evaluator(statistic, h, _zscore(x[a]), _zscore(x[b]), pairs)
            ref = reference_run(ev, draws, WMT_EARLY_STOP)
            assert _run(ev, draws, WMT_EARLY_STOP) == ref  # mt-metrics-eval's stop alone: the same numbers
            got = _run(ev, draws, LEADERBOARD_EARLY_STOP)
            for key in ("value_a", "value_b", "delta"):
                assert got[key] == pytest.approx(ref[key], abs=1e-9)
            assert got["k"] <= ref["k"]
            assert (got["p_a_better"] <= 0.05) == (ref["p_a_better"] <= 0.05)  # the clusters' decision
            for p in ("p_a_better", "p_two_sided"):
                assert _within_mc_error(got[p], got["k"], ref[p]), (a, b, p, got, ref)
            saved += ref["k"] - got["k"]
            settled += got["k"] < ref["k"]
    assert settled >= 3 and saved >= 2000  # the stop does stop some tests (not the control of a no-op)


def test_a_walked_view_gets_the_same_values_ranks_and_clusters():
    h, x, g = _data(1, n_items=40, noises=(0.2, 0.25, 0.5, 0.55, 1.0, 1.1, 2.0, 2.2, 4.0, 4.5, 8.0, 9.0))
    rows = pd.DataFrame({"judge": np.repeat([f"j{i:02d}" for i in range(len(x))], len(h)), "mode": "recorded",
                         "unit": np.tile(g, len(x)), "system": np.tile(np.arange(len(h)) % 5, len(x)),
                         "score": x.ravel(), "human": np.tile(h, len(x))})
    for measure in ("acc_eq_calibrated", "tau_b"):
        v = View("segment", "toy", measure, "segment", rows)
        ref = leaderboard([v], n_resamples=1000, early_stop=WMT_EARLY_STOP)
        got = leaderboard([v], n_resamples=1000, early_stop=LEADERBOARD_EARLY_STOP)
        a, b = (o["leaderboard.csv"].set_index("judge") for o in (ref, got))
        assert np.allclose(a["value"], b.loc[a.index, "value"], rtol=0, atol=1e-9)
        assert a["rank"].to_dict() == b["rank"].to_dict() and a["cluster"].to_dict() == b["cluster"].to_dict()
        assert a["cluster"].nunique() >= 3


@pytest.mark.parametrize("statistic", ["acc_eq_calibrated", "acc_eq", "tau_b"])
@pytest.mark.parametrize("uneven", [False, True])
def test_a_chunk_of_draws_gives_the_numbers_of_one_draw_at_a_time(statistic, uneven):
    h, x, g = _data(2, n_items=12, n_sys=5)
    if uneven:  # items with 3 to 5 systems: weighted pairs
        keep = np.tile(np.arange(5), 12) < np.repeat(np.arange(12) % 3 + 3, 5)
        h, x, g = h[keep], x[:, keep], g[keep]
    pairs = SegmentPairs.from_groups(g) if statistic != "tau_b" else None
    draws = permutation_draws(len(h), 300, seed=4)
    ev = _evaluator(statistic, h, _zscore(x[0]), _zscore(x[3]), pairs)
    one = np.array([ev(w) for w in draws])
    s1, s2 = ev.many(draws)
    assert np.allclose(s1, one[:, 0], rtol=0, atol=1e-12) and np.allclose(s2, one[:, 1], rtol=0, atol=1e-12)
    if not uneven:
        assert np.array_equal(s1, one[:, 0]) and np.array_equal(s2, one[:, 1])
