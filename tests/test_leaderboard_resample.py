"""The leaderboard's bootstrap of "statistic" views takes each draw's rows by position (dhp.analysis.leaderboard.
_resampler; measured: the per-unit frames it replaced were ~70 % of the demo leaderboard's time). It must build the very
rows the per-unit construction built, so every interval and p stays what it was."""

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score

from dhp.analysis import dual_perspective as dp
from dhp.analysis.leaderboard import _resampler
from dhp.stats import paired


def _reference(rows: pd.DataFrame, units: list, counts) -> pd.DataFrame:
    # the construction it replaced: each unit's rows, once per time drawn, each copy renamed "<unit>#<copy>"
    blocks = {u: g for u, g in rows.groupby("unit", sort=False)}
    parts = [blocks[u].assign(unit=f"{u}#{c}") for u, n in zip(units, counts) if n for c in range(int(n))]
    return pd.concat(parts, ignore_index=True) if parts else rows.iloc[:0]


def test_each_draw_has_the_rows_the_per_unit_construction_built():
    rng = np.random.default_rng(3)
    units = [f"u{i}" for i in range(12)]
    # units with 1-4 rows each, shuffled so a unit's rows are not adjacent
    rows = pd.DataFrame([{"judge": "j", "mode": "m", "unit": u, "value": float(rng.normal()), "k": i}
                         for u in units for i in range(int(rng.integers(1, 5)))]).sample(frac=1, random_state=1)
    draw = _resampler(rows, units)
    for counts in paired.item_bootstrap_draws(len(units), 20, 0):
        want, got = _reference(rows, units, counts), draw(counts)
        pd.testing.assert_frame_equal(got, want)
    assert draw(np.zeros(len(units), int)).empty
    with pytest.raises(KeyError):  # a unit the judge has no row for is an error, as it was
        _resampler(rows, [*units, "missing"])


def test_linear_kappa_is_global_kappas_number():
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 40):
        human = rng.integers(1, 6, n)
        judge = rng.integers(1, 6, n).astype(float)
        judge[rng.random(n) < 0.2] = np.nan
        ok = ~np.isnan(judge)
        h, j = human[ok], judge[ok].astype(int)
        want = (cohen_kappa_score(h, j, weights="linear", labels=[1, 2, 3, 4, 5])
                if len(h) >= 2 and len(set(h) | set(j)) > 1 else np.nan)
        k, m = dp.linear_kappa(human, judge)
        assert m == ok.sum() and (k == want or (np.isnan(k) and np.isnan(want)))
        table = pd.DataFrame({"aspect": "a", "human_rating": human, "judge_rating": judge})
        assert dp.global_kappa(table).iloc[0]["n"] == m
    # one rating level for everything: NaN, never 0
    assert np.isnan(dp.linear_kappa(np.full(5, 3), np.full(5, 3.0))[0])
