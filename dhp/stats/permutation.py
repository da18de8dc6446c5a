"""Paired permutation tests of two judges scored on the same rows (PERM-BOTH, Deutsch et al. 2021, as in
google-research/mt-metrics-eval ``stats.PermutationSigDiff``).

Null hypothesis: the two judges are exchangeable. Each judge's scores are z-scored over the rows; a draw
W (one fair coin per row) builds two hybrids, H1 taking judge a's score where W = 1 and b's elsewhere,
H2 the complement; Δ* = stat(H1) - stat(H2) against the observed Δ = stat(a) - stat(b):

    p_a_better  = (1 + #{Δ* >= Δ}) / (1 + k)          (one-sided: a beats b; mt-metrics-eval's p-value)
    p_two_sided = (1 + #{|Δ*| >= |Δ|}) / (1 + k)

(the +1 counts the observed assignment, so no p-value is 0 — mt-metrics-eval reports #/k). For acc*_eq the
tie threshold is re-optimised on every hybrid, as mt-metrics-eval does when the statistic is
``KendallWithTiesOpt`` (its ``perm_test="scores"``): the test is of the calibrated statistic itself.

Speed: for acc_eq / acc*_eq a pair of rows (i, j) of one item takes one of four metric differences in a
hybrid (a_i-a_j, a_i-b_j, b_i-a_j, b_i-b_j, by W_i and W_j) and H2 takes the complementary one. All 4P
differences are sorted once per pair of judges; a draw then selects one entry per pair and the ε sweep is a
masked cumulative sum over the presorted entries (O(P) per draw, no sort). tau_b has no grouping: a
hybrid's order is merged in O(n) from the two judges' presorted orders, then its discordant pairs are
counted with scipy's Fenwick tree (O(n log n)), without re-sorting. The draws are one boolean matrix (k × rows) shared by every
pair of judges (``permutation_draws``), so every pair's test sees the same resamples.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dhp.errors import DHPError
from dhp.stats import segment as seg
from dhp.stats.segment import SegmentPairs, sweep_order
from dhp.lazy import lazy_module

sps = lazy_module("scipy.stats")  # imported when first used (dhp.lazy)

__all__ = ["STATISTICS", "EarlyStop", "WMT_EARLY_STOP", "LEADERBOARD_EARLY_STOP", "permutation_draws", "paired_permutation_test",
           "permutation_table", "pair_tester", "PAIR_COLUMNS"]

STATISTICS = ("tau_b", "acc_eq", "acc_eq_calibrated")
PAIR_COLUMNS = ["statistic", "judge_a", "judge_b", "value_a", "value_b", "delta", "p_a_better", "p_two_sided", "k"]
_TOL = 1e-12  # Δ* equal to Δ up to float rounding counts as ">=" (the same assignment computed twice)
_CHUNK = 1 << 18  # entries a small view's chunk of draws holds at once (evaluators' ``many``)


@dataclass(frozen=True)
class EarlyStop:
    """Stop a pair's test after a block of ``block_size`` draws once its one-sided p-value (#/draws, as
    mt-metrics-eval) is below ``early_min`` or above ``early_max``: the decision at 0.05 is then settled.

    ``settle_alpha`` (None: off) adds a sequential stop at the same block ends for the decision "p_a_better <=
    settle_alpha" alone (the WMT clusters' decision): stop once the exact binomial (Clopper-Pearson) bounds of the
    exceedance probability at level ``settle_level`` lie both above or both below settle_alpha, i.e. once the
    remaining draws would flip that decision with probability below ``settle_level`` (a Besag-Clifford style
    sequential test). The draws used are the first ones of the same matrix, so the p-value reported is the
    full-length one's estimate from fewer draws (equal within its Monte Carlo error)."""

    block_size: int = 100
    early_min: float = 0.02
    early_max: float = 0.5
    settle_alpha: float | None = None
    settle_level: float = 1e-3

    def stops(self, ge: int, used: int) -> bool:
        """Whether a test with ``ge`` one-sided exceedances in ``used`` draws stops at this block end."""
        p = ge / used
        if p < self.early_min or p > self.early_max:
            return True
        if self.settle_alpha is None:
            return False
        lo = sps.beta.ppf(self.settle_level, ge, used - ge + 1) if ge > 0 else 0.0
        hi = sps.beta.ppf(1 - self.settle_level, ge + 1, used - ge) if ge < used else 1.0
        return bool(lo > self.settle_alpha or hi < self.settle_alpha)


WMT_EARLY_STOP = EarlyStop()  # mt-metrics-eval's Task defaults (block 100, 0.02, 0.50)
#: the leaderboard's: WMT's stop, and the sequential stop once the cluster decision at 0.05 is settled
LEADERBOARD_EARLY_STOP = EarlyStop(settle_alpha=0.05)


def permutation_draws(n_rows: int, k: int = 1000, seed: int = 0) -> np.ndarray:
    """k × n_rows fair coins (bool): row r of draw t goes to hybrid 1 from judge a when True."""
    if k < 1 or n_rows < 1:
        raise DHPError(f"Permutation draws need k >= 1 and rows >= 1 (got k={k}, rows={n_rows}).",
                       "pass k >= 1 and at least one scored row.")
    return np.random.default_rng(seed).random((k, n_rows)) < 0.5


def _zscore(x: np.ndarray) -> np.ndarray:
    sd = x.std()
    return (x - x.mean()) / sd if sd > 0 else x - x.mean()


class _AccPair:
    """acc_eq (calibrate=False: exact ties) or acc*_eq of the two hybrids of judges a and b per draw."""

    def __init__(self, h: np.ndarray, a: np.ndarray, b: np.ndarray, pairs: SegmentPairs, calibrate: bool):
        i, j = pairs.i, pairs.j
        self.i, self.j, self.calibrate = i, j, calibrate
        self.uniform, self.n = pairs.uniform, len(pairs)
        sh = np.sign(h[i] - h[j])[:, None]
        # variant v = 2 W_i + W_j (W = 1: the hybrid takes a): 0 b_i-b_j, 1 b_i-a_j, 2 a_i-b_j, 3 a_i-a_j
        d = np.stack([b[i] - b[j], b[i] - a[j], a[i] - b[j], a[i] - a[j]], axis=1)
        sd = np.sign(d)
        base = sd == sh  # correct with exact ties
        w = None if pairs.uniform else pairs.weight
        # bit v of code: variant v is correct with exact ties (the flipped hybrid's variant is 3 - v)
        self.code = (base * (1 << np.arange(4, dtype=np.uint8))).sum(axis=1).astype(np.uint8)
        self.w = w
        if not calibrate:
            return
        delta = np.where(sh == 0, (sd != 0).astype(np.int8), -((sd == sh) & (sd != 0)).astype(np.int8)).ravel()
        absd = np.abs(d).ravel()
        order = sweep_order(absd, delta)  # by |Δ|, losses before gains within a tie (see _max_gain)
        self.pair = (order // 4).astype(np.intp)
        self.var = (order % 4).astype(np.int8)
        self.var2 = (3 - self.var).astype(np.int8)
        self.delta = delta[order] if w is None else delta[order] * w[self.pair]
        self.buf = np.empty(len(order), dtype=self.delta.dtype)

    def _base(self, v: np.ndarray) -> float:
        right = np.bitwise_and(np.right_shift(self.code, v), 1)
        return float(np.count_nonzero(right)) if self.w is None else float(np.dot(self.w, right))

    def _max_gain(self, selected: np.ndarray) -> float:
        # entries in sweep_order: the max over all prefixes is the max over thresholds (mt-metrics-eval's
        # candidates: 0 and every |Δ|)
        np.multiply(self.delta, selected, out=self.buf)
        cs = np.cumsum(self.buf, dtype=np.int32 if self.uniform else float)  # |sums| <= 4P
        return max(float(cs.max()), 0.0) if len(cs) else 0.0

    def __call__(self, w: np.ndarray) -> tuple[float, float]:
        w8 = w.view(np.int8) if w.dtype == bool else w.astype(np.int8)
        v = np.take(w8, self.i) * np.int8(2) + np.take(w8, self.j)
        b1, b2 = self._base(v.view(np.uint8)), self._base((3 - v).view(np.uint8))
        if self.calibrate:
            g = np.take(v, self.pair)
            b1 += self._max_gain(g == self.var)
            b2 += self._max_gain(g == self.var2)
        return (b1 / self.n, b2 / self.n) if self.uniform else (b1, b2)

    def many(self, draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Both hybrids' values for every row of ``draws``, the numbers of __call__ per row. A small view's draws go
        through each step together (chunks of about _CHUNK entries: one gather, compare and cumulative sum per
        chunk instead of a dozen numpy calls per draw); a large one's draw by draw (each draw's entries then stay in
        the CPU cache: chunks measured 3x slower on WMT22 zh-en's ~300k entries)."""
        size = max(len(self.delta) if self.calibrate else 0, self.n, 1)
        step = _CHUNK // size
        if step < 2:
            out = np.array([self(w) for w in draws]).reshape(-1, 2)
            return out[:, 0], out[:, 1]
        w8 = draws.view(np.int8) if draws.dtype == bool else draws.astype(np.int8)
        s1, s2 = np.empty(len(w8)), np.empty(len(w8))
        for at in range(0, len(w8), step):
            w = w8[at:at + step]
            v = np.take(w, self.i, axis=1) * np.int8(2) + np.take(w, self.j, axis=1)
            r1 = np.bitwise_and(np.right_shift(self.code, v.view(np.uint8)), 1)
            r2 = np.bitwise_and(np.right_shift(self.code, (3 - v).view(np.uint8)), 1)
            if self.w is None:
                b1, b2 = np.count_nonzero(r1, axis=1).astype(float), np.count_nonzero(r2, axis=1).astype(float)
            else:
                b1, b2 = r1 @ self.w, r2 @ self.w
            if self.calibrate and len(self.delta):
                g = np.take(v, self.pair, axis=1)
                b1 = b1 + self._max_gains(g == self.var)
                b2 = b2 + self._max_gains(g == self.var2)
            s1[at:at + step], s2[at:at + step] = (b1 / self.n, b2 / self.n) if self.uniform else (b1, b2)
        return s1, s2

    def _max_gains(self, selected: np.ndarray) -> np.ndarray:
        cs = np.cumsum(self.delta * selected, axis=1, dtype=np.int32 if self.uniform else float)
        return np.maximum(cs.max(axis=1), 0).astype(float)


class _TauPair:
    """tau_b of the two hybrids per draw.

    Each hybrid's sorted order is a merge of judge a's and judge b's presorted orders (rows sorted once per
    pair by (score, human)), so a draw costs O(n) positions plus scipy's Fenwick-tree count of discordant
    pairs instead of two sorts. tau_b = (n0 - n1 - n2 + n3 - 2 D) / sqrt((n0 - n1)(n0 - n2)) as scipy
    computes it (n1 / n2 / n3: pairs tied in the hybrid / the human / both). Without scipy's private counter
    each hybrid goes through scipy.stats.kendalltau (same value, slower)."""

    def __init__(self, h: np.ndarray, a: np.ndarray, b: np.ndarray):
        self.h, self.a, self.b = h, a, b
        n = len(h)
        _, y, counts = np.unique(h, return_inverse=True, return_counts=True)
        self.y = (y + 1).astype(np.intp)  # dense ranks from 1 (the Fenwick tree's indices)
        self.n2 = int((counts * (counts - 1) // 2).sum())
        self.ord_a, self.ord_b = np.lexsort((self.y, a)), np.lexsort((self.y, b))
        self.pos_a, self.pos_b = np.empty(n, np.intp), np.empty(n, np.intp)
        self.pos_a[self.ord_a], self.pos_b[self.ord_b] = np.arange(n), np.arange(n)
        # (score, human) keys as complex numbers: numpy orders complex lexicographically (real, then imag)
        key_a, key_b = a + 1j * self.y, b + 1j * self.y
        self.b_below_a = np.searchsorted(key_b[self.ord_b], key_a, side="left")  # b-keys < row's a-key
        self.a_upto_b = np.searchsorted(key_a[self.ord_a], key_b, side="right")  # a-keys <= row's b-key

    def _tau(self, take_a: np.ndarray) -> float:
        if seg._kendall_dis is None:
            return float(sps.kendalltau(self.h, np.where(take_a, self.a, self.b))[0])
        n = len(take_a)
        in_a = take_a[self.ord_a]  # rows taking a, in a's order
        in_b = ~take_a[self.ord_b]
        cum_a = np.r_[0, np.cumsum(in_a)]  # cum_a[k]: rows taking a among a's first k
        cum_b = np.r_[0, np.cumsum(in_b)]
        rows_a, rows_b = np.flatnonzero(take_a), np.flatnonzero(~take_a)
        pos = np.empty(n, np.intp)  # place in the hybrid's order (ties: a's rows first)
        pos[rows_a] = cum_a[self.pos_a[rows_a]] + cum_b[self.b_below_a[rows_a]]
        pos[rows_b] = cum_b[self.pos_b[rows_b]] + cum_a[self.a_upto_b[rows_b]]
        x, y = np.empty(n), np.empty(n, np.intp)
        x[pos] = np.where(take_a, self.a, self.b)
        y[pos] = self.y
        return seg.tau_b_of_sorted(x, y, self.n2)

    def __call__(self, w: np.ndarray) -> tuple[float, float]:
        w = w.astype(bool, copy=False)
        return self._tau(w), self._tau(~w)

    def many(self, draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Both hybrids' τ_b for every row of ``draws``: draw by draw (one Fenwick count each), or for a small view
        (n² <= _CHUNK) from every pair of rows of a chunk of draws at once, C - D = Σ sign(Δh) sign(Δx) and the ties
        counted directly: the same integers, so the same τ_b as scipy's formula above."""
        n = len(self.h)
        if n * n > _CHUNK or n < 2 or seg._kendall_dis is None:
            out = np.array([self(w) for w in draws]).reshape(-1, 2)
            return out[:, 0], out[:, 1]
        iu, ju = np.triu_indices(n, 1)
        sh = np.sign(self.h[iu] - self.h[ju]).astype(np.int8)
        n0 = n * (n - 1) // 2
        n2 = int(np.count_nonzero(sh == 0))
        step = max(1, _CHUNK // len(iu))
        out = []
        for at in range(0, len(draws), step):
            w = draws[at:at + step].astype(bool, copy=False)
            for take in (w, ~w):
                x = np.where(take, self.a, self.b)
                sx = np.sign(x[:, iu] - x[:, ju]).astype(np.int8)
                s_ = (sx * sh).sum(axis=1, dtype=np.int64)  # C - D = n0 - n1 - n2 + n3 - 2D
                n1 = np.count_nonzero(sx == 0, axis=1)
                with np.errstate(invalid="ignore", divide="ignore"):
                    tau = s_ / np.sqrt((n0 - n1).astype(float)) / np.sqrt(float(n0 - n2))
                tau = np.where((n1 == n0) | (n2 == n0), np.nan, np.clip(tau, -1.0, 1.0))
                out.append(tau)
        s1 = np.concatenate(out[0::2]) if out else np.empty(0)
        s2 = np.concatenate(out[1::2]) if out else np.empty(0)
        return s1, s2


def _evaluator(statistic: str, h, a, b, pairs):
    if statistic == "tau_b":
        return _TauPair(h, a, b)
    return _AccPair(h, a, b, pairs, calibrate=statistic == "acc_eq_calibrated")


def _check(statistic: str, groups) -> None:
    if statistic not in STATISTICS:
        raise DHPError(f"Unknown segment statistic {statistic!r}.", f"use one of {list(STATISTICS)}.")
    if statistic != "tau_b" and groups is None:
        raise DHPError(f"{statistic} compares the systems of one item: it needs groups.",
                       "pass groups= (the item/segment id of each row).")


def _run(evaluate, draws: np.ndarray, early_stop: EarlyStop | None) -> dict:
    """Observed values, Δ and the counts over the draws (stopping early per ``early_stop``). The draws of a block
    are evaluated together (``evaluate.many``); the stop is decided at the block ends, as draw by draw."""
    value_a, value_b = evaluate(np.ones(draws.shape[1], dtype=bool))
    delta = value_a - value_b
    k = len(draws)
    block = early_stop.block_size if early_stop else k
    ge = ab = used = 0
    if not (math.isfinite(value_a) and math.isfinite(value_b)):
        return {"value_a": value_a, "value_b": value_b, "delta": math.nan, "p_a_better": math.nan,
                "p_two_sided": math.nan, "k": 0}
    for start in range(0, k, block):
        s1, s2 = evaluate.many(draws[start:start + block])
        d = s1 - s2
        ge += int(np.count_nonzero(d >= delta - _TOL))
        ab += int(np.count_nonzero(np.abs(d) >= abs(delta) - _TOL))
        used = min(start + block, k)
        if early_stop and used % block == 0 and used < k and early_stop.stops(ge, used):
            break
    return {"value_a": value_a, "value_b": value_b, "delta": delta, "p_a_better": (1 + ge) / (1 + used),
            "p_two_sided": (1 + ab) / (1 + used), "k": used}


def paired_permutation_test(human, metric_a, metric_b, groups=None, statistic: str = "acc_eq_calibrated",
                            k: int = 1000, seed: int = 0, draws: np.ndarray | None = None,
                            early_stop: EarlyStop | None = None) -> dict:
    """PERM-BOTH test of judge a against judge b on the same rows (module docstring). Rows where the human
    or either judge lacks a finite score are left out; ``draws`` (k × all rows, e.g. from
    ``permutation_draws``) overrides k and seed. Returns value_a, value_b, delta (a - b), p_a_better,
    p_two_sided and k (draws used); NaN p-values when a value is undefined."""
    _check(statistic, groups)
    h, a, b = (np.asarray(x, dtype=float) for x in (human, metric_a, metric_b))
    if not (len(h) == len(a) == len(b)) or (groups is not None and len(groups) != len(h)):
        raise DHPError("human, metric_a, metric_b (and groups) differ in length.", "pass one value per row in each.")
    ok = np.isfinite(h) & np.isfinite(a) & np.isfinite(b)
    if draws is None:
        draws = permutation_draws(len(h), k, seed)
    elif draws.ndim != 2 or draws.shape[1] != len(h):
        raise DHPError(f"draws has shape {draws.shape}, not (k, {len(h)}).", "draw one coin per row per resample.")
    pairs = SegmentPairs.from_groups(np.asarray(groups)[ok]) if groups is not None else None
    if pairs is not None and not len(pairs):
        return {"value_a": math.nan, "value_b": math.nan, "delta": math.nan, "p_a_better": math.nan,
                "p_two_sided": math.nan, "k": 0}
    evaluate = _evaluator(statistic, h[ok], _zscore(a[ok]), _zscore(b[ok]), pairs)
    return _run(evaluate, draws[:, ok], early_stop)


def pair_tester(human, scores, groups=None, statistic: str = "acc_eq_calibrated", draws: np.ndarray | None = None,
                early_stop: EarlyStop | None = None, k: int = 1000, seed: int = 0):
    """f(a, b) -> paired_permutation_test(human, scores[a], scores[b], groups, ...) for many pairs of the rows of
    ``scores`` (judges × rows): the pairs of items and the z-scores are computed once, not per pair. The same
    numbers as paired_permutation_test (it is called instead where a score is missing: its rows then differ per
    pair)."""
    _check(statistic, groups)
    h, x = np.asarray(human, dtype=float), np.asarray(scores, dtype=float)
    if draws is None:
        draws = permutation_draws(len(h), k, seed)
    if not (np.isfinite(h).all() and np.isfinite(x).all()) or draws.shape[1] != len(h):
        return lambda a, b: paired_permutation_test(h, x[a], x[b], groups, statistic, draws=draws,
                                                    early_stop=early_stop)
    pairs = SegmentPairs.from_groups(np.asarray(groups)) if groups is not None else None
    z = {}

    def test(a: int, b: int) -> dict:
        if pairs is not None and not len(pairs):
            return {"value_a": math.nan, "value_b": math.nan, "delta": math.nan, "p_a_better": math.nan,
                    "p_two_sided": math.nan, "k": 0}
        za, zb = (z.setdefault(n, _zscore(x[n])) for n in (a, b))
        return _run(_evaluator(statistic, h, za, zb, pairs), draws, early_stop)

    return test


def permutation_table(human, scores, judges, groups=None, statistic: str = "acc_eq_calibrated", k: int = 1000,
                      seed: int = 0, draws: np.ndarray | None = None,
                      early_stop: EarlyStop | None = None) -> pd.DataFrame:
    """Every pair of judges tested on the same rows with one shared matrix of draws. ``scores``: judges ×
    rows (e.g. ``JudgeScores.scores``), ``judges`` their names; rows where the human or any judge lacks a
    finite score are left out. Judges are ordered by decreasing value (name breaks ties) and each pair is
    reported once with judge_a the better one, so delta >= 0 and p_a_better is the one-sided p-value the WMT
    significance clusters use. Returns PAIR_COLUMNS."""
    _check(statistic, groups)
    h = np.asarray(human, dtype=float)
    x = np.asarray(scores, dtype=float)
    if x.ndim != 2 or x.shape != (len(judges), len(h)) or (groups is not None and len(groups) != len(h)):
        raise DHPError(f"scores has shape {x.shape}; expected (judges={len(judges)}, rows={len(h)}).",
                       "pass one row of scores per judge, one column per row of human.")
    ok = np.isfinite(h) & np.isfinite(x).all(axis=0)
    if draws is None:
        draws = permutation_draws(len(h), k, seed)
    draws = draws[:, ok]
    h, x = h[ok], np.stack([_zscore(r) for r in x[:, ok]])
    pairs = SegmentPairs.from_groups(np.asarray(groups)[ok]) if groups is not None else None
    # each judge's own value: the evaluator on an all-True draw is the judge itself (same code path as Δ*)
    values = {judges[n]: _evaluator(statistic, h, x[n], x[n], pairs)(np.ones(len(h), bool))[0]
              for n in range(len(judges))}
    rank = sorted(range(len(judges)), key=lambda n: (-values[judges[n]] if math.isfinite(values[judges[n]])
                                                     else math.inf, str(judges[n])))
    rows = []
    for p, q in itertools.combinations(rank, 2):
        res = _run(_evaluator(statistic, h, x[p], x[q], pairs), draws, early_stop)
        rows.append({"statistic": statistic, "judge_a": judges[p], "judge_b": judges[q], **res})
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)
