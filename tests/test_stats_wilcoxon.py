"""dhp.stats.wilcoxon: the one Wilcoxon implementation, against scipy (the reference: scipy.stats.wilcoxon,
its exact null and its PermutationMethod) and against itself row by row (a test must not depend on the
other rows of its batch, nor on the padding)."""

import math

import numpy as np
import pytest
import scipy.stats as sps
from hypothesis import given, settings
from hypothesis import strategies as st

from dhp.stats.wilcoxon import SCIPY_ASYMPTOTIC, resolve, wilcoxon_greater, wilcoxon_greater_many

ZERO_METHODS = ["wilcox", "pratt", "zsplit"]


def _scipy_p(d, zero_method, method_used, correction=False):
    """scipy's one-sided p for the null our test says it used."""
    if method_used == "none":
        return 1.0
    m = {"exact": "exact", "asymptotic": SCIPY_ASYMPTOTIC, "permutation": sps.PermutationMethod()}[method_used]
    return sps.wilcoxon(d, zero_method=zero_method, correction=correction, alternative="greater", method=m).pvalue


def _matrix(rows, fill=99.0):
    """Rows of different lengths as one (tests × pairs) matrix and its ok mask; the padding is a value that
    would change every rank if it were read."""
    width = max(map(len, rows))
    d, ok = np.full((len(rows), width), fill), np.zeros((len(rows), width), bool)
    for i, r in enumerate(rows):
        d[i, : len(r)], ok[i, : len(r)] = r, True
    return d, ok


# ---------------------------------------------------------------- the three nulls, against scipy
@pytest.mark.parametrize("zero_method", ZERO_METHODS)
@pytest.mark.parametrize("correction", [False, True])
def test_every_row_of_a_mixed_batch_gives_scipys_p(zero_method, correction):
    """One batch with exact (no ties, n <= 50), permutation (ties, n <= 13) and normal rows (ties, n > 13,
    or n > 50): each p is scipy's for that row, with the null scipy's auto rule picks."""
    rng = np.random.default_rng(3)
    rows = [rng.normal(0.4, 1, n) for n in (1, 2, 5, 12, 30, 50)]  # continuous: exact
    rows += [rng.integers(-2, 4, n).astype(float) for n in (3, 8, 13)]  # ties and zeros: permutation
    rows += [rng.integers(-2, 4, n).astype(float) for n in (14, 40, 120)]  # ties: normal
    rows += [rng.normal(0.2, 1, 80)]  # n > 50: normal
    d, ok = _matrix(rows)
    got = wilcoxon_greater_many(d, ok, zero_method, "auto", correction)
    expected_used = ["exact"] * 6 + ["permutation"] * 3 + ["asymptotic"] * 4
    assert list(got.method_used) == expected_used
    for i, r in enumerate(rows):
        ref = _scipy_p(r, zero_method, got.method_used[i], correction)
        if got.method_used[i] == "exact":
            assert got.p[i] == ref  # scipy's own exact null, asked once per (n, T+)
        else:
            assert got.p[i] == pytest.approx(ref, rel=1e-12, abs=0)


@settings(max_examples=200, deadline=None)
@given(d=st.lists(st.integers(1, 400), min_size=1, max_size=50, unique=True), signs=st.data())
def test_exact_p_equals_scipy_on_the_actual_differences(d, signs):
    """The exact p is taken from scipy on a canonical row with the same n and T+: bit-identical to scipy on
    the real differences (no ties, no zeros)."""
    s = signs.draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=len(d), max_size=len(d)))
    x = np.array(d, dtype=float) * np.array(s) / 7.0
    got = wilcoxon_greater_many(x[None, :])
    assert got.method_used[0] == "exact"
    assert got.p[0] == sps.wilcoxon(x, alternative="greater", method="exact").pvalue


@pytest.mark.parametrize("zero_method", ZERO_METHODS)
def test_permutation_rows_of_every_size_match_scipy_enumeration(zero_method):
    rng = np.random.default_rng(11)
    # ties (mostly), 2 to 13 pairs (scipy's permutation test needs 2)
    rows = [np.r_[rng.integers(-3, 4, k - 1).astype(float), 1.0] for k in range(2, 14)]
    d, ok = _matrix(rows)
    got = wilcoxon_greater_many(d, ok, zero_method, "permutation")
    for i, r in enumerate(rows):
        if got.method_used[i] == "permutation":
            ref = sps.wilcoxon(r, zero_method=zero_method, alternative="greater", method=sps.PermutationMethod())
            assert got.p[i] == pytest.approx(ref.pvalue, rel=1e-12)


# ---------------------------------------------------------------- one batch = the tests one by one
@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.lists(st.integers(-3, 3).map(float), min_size=0, max_size=30), min_size=1, max_size=5),
       zero_method=st.sampled_from(ZERO_METHODS),
       method=st.sampled_from(["auto", "exact", "asymptotic", "permutation"]), correction=st.booleans())
def test_a_row_does_not_depend_on_its_batch(rows, zero_method, method, correction):
    rows = [r for r in rows] + [[1.0]]  # at least one non-empty row: a matrix with a column
    d, ok = _matrix(rows)
    together = wilcoxon_greater_many(d, ok, zero_method, method, correction)
    for i, r in enumerate(rows):
        alone = wilcoxon_greater_many(np.array([r or [0.0]]), np.array([[True] * len(r) or [False]]), zero_method,
                                      method, correction)
        assert (together.p[i] == alone.p[0]) or (math.isnan(together.p[i]) and math.isnan(alone.p[0]))
        assert together.method_used[i] == alone.method_used[0] and together.flags[i] == alone.flags[0]
        assert together.n_pairs[i] == len(r) and together.n_nonzero[i] == sum(x != 0 for x in r)


def test_one_test_is_one_row_of_the_batch():
    o = np.array([5, np.nan, 3, 4, 6, 2, 2, 5.0])
    q = np.array([1, 1, np.nan, 2, 2, 2, 3, 1.0])
    one = wilcoxon_greater(o, q)
    ok = np.isfinite(o) & np.isfinite(q)
    batch = wilcoxon_greater_many((o - q)[None, :], ok[None, :])
    assert one.p == batch.p[0] and one.method_used == batch.method_used[0]
    assert (one.n_pairs, one.n_dropped_nan) == (6, 2)


# ---------------------------------------------------------------- sign flips (the null calibration)
@pytest.mark.parametrize("zero_method", ZERO_METHODS)
@pytest.mark.parametrize("n,method", [(9, "auto"), (25, "auto"), (30, "exact"), (70, "auto"), (12, "permutation")])
def test_sign_flip_patterns_equal_the_tests_of_the_flipped_differences(n, method, zero_method):
    """A pattern's p is the p of the differences with those signs flipped (the same ranks, one product)."""
    rng = np.random.default_rng(n)
    d = np.vstack([rng.integers(-2, 4, n).astype(float), rng.normal(0.3, 1, n)])
    ok = rng.random(d.shape) > 0.1
    flips = rng.integers(0, 2, size=(40, n)).astype(bool)
    got = wilcoxon_greater_many(d, ok, zero_method, method, flips=flips)
    assert got.p.shape == (2, 40)
    for t in range(2):
        flipped = np.where(flips, d[t], -d[t])
        ref = wilcoxon_greater_many(flipped, np.broadcast_to(ok[t], flipped.shape), zero_method, method)
        np.testing.assert_array_equal(got.p[t], ref.p)
        for b in (0, 17):  # and two of them against scipy
            x = flipped[b][ok[t]]
            assert got.p[t, b] == pytest.approx(_scipy_p(x, zero_method, ref.method_used[b]), rel=1e-12)


# ---------------------------------------------------------------- edge cases, flags, the method rule
def test_no_pair_is_nan_and_all_zero_is_one_with_their_flags():
    d, ok = _matrix([[0.0, 0.0, 0.0], [2.0]])
    ok[1] = False
    got = wilcoxon_greater_many(d, ok)
    assert got.p[0] == 1.0 and got.flags[0] == ("all_zero",) and got.method_used[0] == "none"
    assert math.isnan(got.p[1]) and got.flags[1] == ("no_pairs",) and got.n_pairs[1] == 0


def test_method_choices_are_recorded():
    ties = np.array([1.0, 1.0, 2.0, 3.0, -1.0] * 4)  # 20 pairs with ties
    got = wilcoxon_greater_many(np.vstack([ties[:10], ties[:10]]), None, "wilcox", "exact")
    assert list(got.method_used) == ["permutation"] * 2 and got.flags[0] == ("exact_fallback",)
    got = wilcoxon_greater_many(ties[None, :], None, "wilcox", "permutation")
    assert got.method_used[0] == "asymptotic" and got.flags[0] == ("permutation_too_large",)
    assert resolve(51, False, "auto") == ("asymptotic", []) and resolve(50, False, "auto") == ("exact", [])
    assert resolve(13, True, "auto") == ("permutation", []) and resolve(14, True, "auto") == ("asymptotic", [])


def test_an_infinite_difference_ranks_last():
    """A difference that overflowed to inf is the largest, not a gap (cells not ranked are NaN inside)."""
    d = np.array([[np.inf, 1.0, 2.0, -0.5, 3.0, 4.0, -6.0]])
    big = np.where(np.isinf(d), 1e9, d)
    assert wilcoxon_greater_many(d).p[0] == wilcoxon_greater_many(big).p[0]


def test_bad_shapes_raise():
    with pytest.raises(ValueError):
        wilcoxon_greater_many(np.zeros(3))
    with pytest.raises(ValueError):
        wilcoxon_greater_many(np.zeros((2, 3)), np.ones((2, 4), bool))
    with pytest.raises(ValueError):
        wilcoxon_greater_many(np.zeros((2, 3)), flips=np.ones((5, 4), bool))
