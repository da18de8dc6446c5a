"""dhp.stats.combine and dhp.stats.resample: by hand, against the former 1-D combination (stats_reference),
and the layout independence the vectorised rows rely on."""

import math

import numpy as np
import pytest
import stats_reference as ref
from hypothesis import given, settings
from hypothesis import strategies as st

from dhp.errors import DHPError
from dhp.stats.combine import P_FLOOR, combine_p, combine_rows, discernment_score
from dhp.stats.resample import group_seed, resample_items

p_or_nan = st.one_of(st.just(math.nan), st.just(0.0), st.floats(1e-320, 1.0))


def test_the_three_forms_by_hand():
    p = np.array([[0.01, 0.04], [0.01, np.nan]])
    np.testing.assert_allclose(combine_rows(p, None, "paper"), [1 / 125, 0.01])  # paper: 1/Σ(1/p)
    np.testing.assert_allclose(combine_rows(p, None, "wilson"), [2 / 125, 0.01])  # M/Σ(1/p)
    w = np.array([[0.2, 0.8], [0.5, 0.5]])
    np.testing.assert_allclose(combine_rows(p, w, "paper"), [1 / (20 + 20), 0.01])  # Σw/Σ(w/p); NaN's weight dropped
    assert math.isnan(combine_rows(np.array([[np.nan, np.nan]]))[0])
    assert math.isnan(combine_rows(p[:1], np.zeros((1, 2)))[0])  # no positive weight: no combination
    assert combine_rows(np.array([[0.0, 0.5]]))[0] == pytest.approx(P_FLOOR)  # p = 0 is floored, D finite


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the former code's Σ 1/p = inf
@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.lists(st.tuples(p_or_nan, st.floats(0.0, 1.0)), min_size=1, max_size=12), min_size=1,
                     max_size=5).map(lambda rs: [r + [(math.nan, 0.0)] * (max(map(len, rs)) - len(r)) for r in rs]),
       combine=st.sampled_from(["paper", "wilson"]))
def test_rows_equal_the_former_one_dimensional_combination(rows, combine):
    """Bit for bit, with NaN anywhere in a row and rows of 8 or more p-values (pairwise summation)."""
    p = np.array([[x for x, _ in r] for r in rows])
    w = np.array([[x for _, x in r] for r in rows])
    got, got_w = combine_rows(p, None, combine), combine_rows(p, w, combine)
    for i in range(len(rows)):
        np.testing.assert_array_equal([got[i], got_w[i]], [ref.combine_p(p[i], None, combine),
                                                           ref.combine_p(p[i], w[i], combine)])
        np.testing.assert_array_equal(combine_p(p[i], w[i], combine), got_w[i])


def test_a_transposed_view_combines_like_its_copy():
    rng = np.random.default_rng(0)
    for m in (3, 7, 9):
        pm = 10 ** rng.uniform(-20, 0, (m, 400))
        np.testing.assert_array_equal(combine_rows(pm.T), combine_rows(np.ascontiguousarray(pm.T)))


def test_unknown_combination_and_bad_shapes_raise():
    with pytest.raises(DHPError, match="combine"):
        combine_rows(np.ones((1, 2)), None, "fisher")
    with pytest.raises(ValueError):
        combine_rows(np.ones(3))
    with pytest.raises(ValueError):
        combine_rows(np.ones((2, 3)), np.ones((2, 2)))


def test_d_is_log_base_005_and_finite():
    np.testing.assert_allclose(discernment_score(np.array([0.05, 0.0025, 1.0])), [1.0, 2.0, 0.0])
    assert str(discernment_score(1.0)) == "0.0"  # not -0.0
    assert math.isfinite(discernment_score(0.0)) and math.isnan(discernment_score(math.nan))


# ---------------------------------------------------------------- the resampler
def test_group_seed_is_a_stable_hash_of_the_key():
    """Frozen: a change here would change every published interval and null rate."""
    assert group_seed(0, ("summeval", "j1", "logprobs")) == [0, 17496933376030634383]
    assert group_seed(3, ("a", "b")) != group_seed(3, ("a", "c")) and group_seed(3, ("a",))[0] == 3


def test_resample_items_draws_from_the_seed():
    idx = resample_items(5, 4, [0, 1], "bootstrap")
    np.testing.assert_array_equal(idx, np.random.default_rng([0, 1]).integers(0, 5, size=(4, 5)))
    assert idx.min() >= 0 and idx.max() < 5
    flips = resample_items(5, 4, [0, 1], "sign_flip")
    assert flips.dtype == bool and flips.shape == (4, 5)
    np.testing.assert_array_equal(resample_items(5, 4, [0, 1], "sign_flip"), flips)
    with pytest.raises(ValueError):
        resample_items(5, 4, 0, "jackknife")
