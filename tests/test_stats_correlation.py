"""dhp.stats.correlation: each resampled statistic equals the statistic of the data with every unit repeated as
often as it was drawn (scipy on the materialised copies); the partial correlation and Williams' test by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dhp.stats import correlation as c


@pytest.fixture
def data():
    rng = np.random.default_rng(3)
    n = 60
    return {"cont": rng.normal(size=n), "five": rng.integers(1, 6, n).astype(float),
            "thirds": rng.integers(3, 16, n) / 3, "groups": rng.integers(0, 4, n),
            "idx": rng.integers(0, n, size=(6, n))}


@pytest.mark.parametrize("xs,ys", [("cont", "thirds"), ("five", "thirds"), ("cont", "cont"), ("five", "five")])
def test_resampled_correlations_are_the_statistics_of_the_copies(data, xs, ys):
    x, y, idx = data[xs], data[ys], data["idx"]
    w = c.counts_of(idx, len(x))
    k, s, p = c.weighted_kendall(x, y, w), c.weighted_spearman(x, y, w), c.weighted_pearson(x, y, w)
    for d in range(len(idx)):
        a, b = x[idx[d]], y[idx[d]]
        assert k[d] == pytest.approx(stats.kendalltau(a, b)[0], abs=1e-12)
        assert s[d] == pytest.approx(stats.spearmanr(a, b)[0], abs=1e-12)
        assert p[d] == pytest.approx(stats.pearsonr(a, b)[0], abs=1e-12)


def test_kendall_paths_agree(data):
    """The running-sum walk (few levels) and the sign-matrix product give the same τ_b."""
    x, y = data["cont"], data["thirds"]
    w = c.counts_of(data["idx"], len(x))
    old = c.MAX_LEVELS
    try:
        fast = c.weighted_kendall(x, y, w)
        c.MAX_LEVELS = 0
        slow = c.weighted_kendall(x, y, w)
    finally:
        c.MAX_LEVELS = old
    assert np.allclose(fast, slow, atol=1e-12)


def test_resampled_partial_correlation_is_that_of_the_copies(data):
    x, y, g, idx = data["cont"], data["thirds"], data["groups"], data["idx"]
    w = c.counts_of(idx, len(x))
    for method in ("pearson", "spearman"):
        got = c.resampled_partial(x, y, g, w, method)
        for d in range(len(idx)):
            assert got[d] == pytest.approx(c.partial_correlation(x[idx[d]], y[idx[d]], g[idx[d]], method), abs=1e-12)


def test_partial_correlation_controls_for_the_group():
    """x and y both follow the group but are unrelated within it: raw r is high, partial r near 0."""
    rng = np.random.default_rng(0)
    g = np.repeat(np.arange(5), 200)
    x, y = g + rng.normal(size=1000) * 0.1, g + rng.normal(size=1000) * 0.1
    assert c.correlation(x, y, "pearson") > 0.9
    assert abs(c.partial_correlation(x, y, g)) < 0.1
    res = x - np.array([x[g == k].mean() for k in g])
    assert c.partial_residuals(x, g) == pytest.approx(res)


def test_williams_test_by_hand():
    r12, r13, r23, n = 0.5, 0.3, 0.4, 100
    k = 1 - r12 ** 2 - r13 ** 2 - r23 ** 2 + 2 * r12 * r13 * r23
    t = (r12 - r13) * math.sqrt((n - 1) * (1 + r23)) / math.sqrt(2 * k * (n - 1) / (n - 3) + (r12 + r13) ** 2 / 4
                                                                 * (1 - r23) ** 3)
    got = c.williams_test(r12, r13, r23, n)
    assert got[0] == pytest.approx(t) and got[1] == pytest.approx(1 - stats.t.cdf(t, n - 3))
    assert math.isnan(c.williams_test(r12, r13, r23, 3)[1])
    assert math.isnan(c.correlation([1, 1, 1, 1], [1, 2, 3, 4], "kendall"))  # constant: undefined, not 0


def test_system_level_columns():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(10, 4)), rng.normal(size=(10, 4))
    for method in ("pearson", "spearman", "kendall"):
        got = c.columnwise_correlation(a, b, method)
        for j in range(4):
            assert got[j] == pytest.approx(c.correlation(a[:, j], b[:, j], method), abs=1e-12)
