"""The judge leaderboard: every view on which two or more judges were measured on the same units, each judge's value
with a bootstrap interval over the units, a paired significance test for every pair of judges, Holm's adjustment
within the view, and significance clusters and ranks as in the WMT metrics findings (dhp.stats.clusters).

A view (:class:`View`) is one measure on one scope — e.g. LLMBar agreement on the four adversarial subsets with the
Vanilla strategy, acc*_eq on WMT22 zh-en against MQM, DHP's D_avg on SummEval — given as unit-level rows of every
judge; each method builds its views from its tables (``Method.views``). Three kinds:

- ``mean``: one value per judge and unit, the view's value is their mean (LLMBar correctness averaged over the two
  orders, a local chain pair ordered right, a criteria-confusion cell decided as expected). Paired test: exact
  McNemar when every value is 0 or 1, else the paired sign-flip permutation test of the mean difference — exact
  (every sign vector, by convolution) when the differences lie on a grid such as LLMBar's 0, ½, 1, else resampled.
- ``segment``: segment scores beside the human scores (τ_b, acc*_eq): mt-metrics-eval's PERM-BOTH paired permutation
  test (Deutsch et al. 2021; acc*_eq re-optimises its tie threshold on every resample) with one matrix of draws
  shared by every pair (dhp.stats.permutation), intervals from resampling segments.
- ``statistic``: any statistic of a judge's rows (DHP's D_avg, weighted κ, a correlation over documents): a paired
  bootstrap over units — the same resampled units for both judges — gives intervals and the test of the
  difference (the resampled differences centred on the null, Hall & Wilson 1991).

Units: judges are compared on the units all of them have (a finite value; in a segment view, the (unit, system)
outputs all of them scored, and ``n`` counts their units). A judge measured on fewer than
``min_coverage`` of the best-covered judge's units is left out of that view with its reason (status), so a judge
run on 4 items does not shrink a 319-item comparison to 4 items. Every pair gets a two-sided p (``p``: twice the smaller of the two one-sided p,
:func:`two_sided`), adjusted by Holm within the view (view × scope × measure × strategy: ``p_adj``; the pair is ``significant`` when p_adj ≤ α), and the
one-sided p that the better-valued judge is better (``p_better``). The clusters follow the WMT metrics findings
(mt-metrics-eval's AssignRanks) exactly: walking down the judges sorted by value, a judge opens a new cluster when
a judge of the current cluster beats it with one-sided p_better ≤ α, unadjusted — so a cluster boundary is WMT's,
while ``significant`` is the stricter, family-wise statement. Segment pairs use mt-metrics-eval's early stop (a
block of 100 draws at a time, stopping once p is below 0.02 or above 0.5). Pure: tables in, tables out.

Tables: ``leaderboard.csv`` (LEADERBOARD_COLUMNS: one row per view × judge: value, lo, hi, n, rank = position by
value, cluster = significance cluster by the WMT rule, recorded, status, cluster_rule = the rule stated in words
(CLUSTER_RULE), cluster_holm = the same walk with the Holm-adjusted decisions of ``significant`` — the two can differ,
and both are shown —, judge_kind = control / baseline / recorded / model (dhp.controls.judge_kind: a control or a
baseline is never read as a model), protocol = the judge's protocol, e.g. LLMBar's identity
``llmbar/Vanilla@900616b sha256:…`` (with "[PaLM2: own answer rule …]" for a recorded judge run on its own config),
given by the method in ``View.notes["protocols"]`` per (judge, mode), else the view's ``View.notes["protocol"]``) and ``leaderboard_pairs.csv`` (PAIR_COLUMNS: one row per
view × pair of judges, the better-valued first: diff, p, p_adj, significant, test, n).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import itertools
import math
import multiprocessing
import os
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from dhp.controls import judge_kind
from dhp.errors import DHPError
from dhp.stats import clusters, paired, permutation
from dhp.stats import segment as seg
from dhp.stats.resample import MIN_RESAMPLE_UNITS
from dhp.lazy import lazy_module

sps = lazy_module("scipy.stats")  # imported when first used (dhp.lazy)

__all__ = ["View", "leaderboard", "LEADERBOARD_COLUMNS", "PAIR_COLUMNS", "KINDS", "CLUSTER_RULE", "STATS_VERSION",
           "view_key", "MIN_UNITS_RANKED", "two_sided", "pair_p_consistent"]

KINDS = ("mean", "segment", "statistic")
LEADERBOARD_COLUMNS = ["view", "scope", "measure", "strategy", "judge", "mode", "value", "lo", "hi", "n", "rank",
                       "cluster", "recorded", "status", "cluster_rule", "cluster_holm", "protocol", "judge_kind"]  # judge_kind: dhp.controls.judge_kind
#: The rule that draws ``cluster`` (and the bands of every leaderboard figure); ``cluster_holm`` is the same walk with
#: the Holm-adjusted decisions of ``significant`` instead, so both outcomes are visible side by side.
CLUSTER_RULE = ("WMT rule (mt-metrics-eval AssignRanks): a new cluster where a judge of the current one beats the "
                "next with one-sided p_better <= alpha, unadjusted; cluster_holm: the same walk with Holm-adjusted "
                "p_adj <= alpha (= significant)")
PAIR_COLUMNS = ["view", "scope", "measure", "strategy", "judge_a", "mode_a", "judge_b", "mode_b", "value_a",
                "value_b", "diff", "p", "p_adj", "significant", "p_better", "test", "n",
                "p_upstream", "test_upstream"]  # a view's own paper's test of the pair (FRANK: Williams), if any
RECORDED_MODE = "recorded"
#: The statistics' code version: part of every stored view's key (``view_key``). Raise it with any change that
#: alters a number of leaderboard.csv or leaderboard_pairs.csv, so results stored by older code are not reused.
STATS_VERSION = 5  # 3: p is twice the smaller one-sided p (two_sided); 4: no zero-width interval of a proportion;
# 5: no zero-width interval at all (NaN where every resample gave the same value)
#: Fewest units a view's statistic is read as a ranking on (``View.notes["min_units_ranked"]`` overrides): with
#: fewer, the judges' rows get a "too few units" status instead of "ok" (their value and rank stay, as indicative).
#: Segment statistics: 30 items; a system-level statistic (notes set by dhp.analysis.system_level): 100 segments.
MIN_UNITS_RANKED = {"segment": 30}


@dataclass
class View:
    """One measure of several judges on shared units.

    ``data``: long rows with judge, mode, unit and — kind "mean": value; kind "segment": system, score, human (one
    row per unit × system); kind "statistic": whatever ``statistic`` reads (it gets one judge's rows, with units
    relabelled per resampled copy, and returns a number). Every measure is higher-is-better."""

    view: str
    scope: str
    measure: str
    kind: str
    data: pd.DataFrame
    strategy: str = ""
    statistic: Callable[[pd.DataFrame], float] | None = None
    #: optional vectorised resampling of a "statistic" view: f(rows of one judge, units, idx) -> one value per row
    #: of idx (k × units positions); without it the statistic is recomputed on each resampled copy
    draws: Callable[[pd.DataFrame, list, np.ndarray], np.ndarray] | None = None
    notes: dict = field(default_factory=dict)
    #: optional second test of a pair as the view's own paper computes it (FRANK: Williams): f(rows of the
    #: better-valued judge, rows of the other) -> one-sided p; reported beside the project's test (p_upstream,
    #: test_upstream = pair_test_name), never used for clusters or Holm
    pair_test: Callable[[pd.DataFrame, pd.DataFrame], float] | None = None
    pair_test_name: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise DHPError(f"Unknown view kind {self.kind!r}.", f"use one of {list(KINDS)}.")
        need = {"judge", "mode", "unit"} | ({"value"} if self.kind == "mean" else
                                            {"system", "score", "human"} if self.kind == "segment" else set())
        missing = need - set(self.data.columns)
        if missing:
            raise DHPError(f"View {self.view}/{self.scope}/{self.measure} lacks columns {sorted(missing)}.",
                           f"give a {self.kind} view the columns {sorted(need)}.")
        if self.kind == "statistic" and self.statistic is None:
            raise DHPError(f"View {self.view}/{self.measure} is of kind 'statistic' but has no statistic.",
                           "pass statistic=f(rows of one judge) -> float.")


def _entry(judge, mode) -> str:
    return f"{judge}\x1f{mode}"


def _entries(d: pd.DataFrame) -> pd.Series:
    """_entry of every row of ``d`` (judge, mode), computed column-wise."""
    return d["judge"].astype(str) + "\x1f" + d["mode"].astype(str)


def _split(entry: str) -> tuple[str, str]:
    judge, mode = entry.split("\x1f")
    return judge, mode


# ---------------------------------------------------------------------------------------------- units per judge

def _units(v: View) -> dict[str, set]:
    """The units each judge has a usable value on."""
    d = v.data
    if v.kind == "mean":
        d = d[np.isfinite(d["value"].astype(float))]
    elif v.kind == "segment":
        d = d[np.isfinite(d["score"].astype(float)) & np.isfinite(d["human"].astype(float))]
    out: dict[str, set] = {}
    for (j, m), g in d.groupby(["judge", "mode"], sort=True):
        # a segment statistic compares judges on the outputs (unit, system) they all scored: coverage counts those
        # (lists first: iterating an Arrow-backed column makes a Python object per element, 10x slower)
        out[_entry(j, m)] = (set(zip(g["unit"].tolist(), g["system"].tolist())) if v.kind == "segment"
                             else set(g["unit"].tolist()))
    for (j, m) in v.data[["judge", "mode"]].drop_duplicates().itertuples(index=False):
        out.setdefault(_entry(j, m), set())
    return out


#: Fewest units a judge is compared on (dhp.stats.resample.MIN_RESAMPLE_UNITS): with fewer, no paired test of two
#: judges can reach p < 0.05 and a bootstrap has only a handful of distinct resamples.
MIN_UNITS = MIN_RESAMPLE_UNITS


def _common(v: View, min_coverage: float, min_units: int) -> tuple[list[str], list, dict[str, str]]:
    """(judges compared, their common units sorted, reason a judge is left out)."""
    units = _units(v)
    best = max((len(u) for u in units.values()), default=0)
    left_out = {e: f"too few units ({len(u)} of {best})" for e, u in units.items()
                if best == 0 or len(u) < max(min_units, min_coverage * best)}
    kept = sorted(e for e in units if e not in left_out)
    common = sorted(set.intersection(*(units[e] for e in kept)), key=str) if kept else []
    n_common = len({u for u, _ in common}) if v.kind == "segment" else len(common)
    if kept and n_common < min_units:
        left_out.update({e: f"too few common units ({n_common})" for e in kept})
        kept = []
    return kept, common, left_out


# ---------------------------------------------------------------------------------------------- the three kinds

def _no_zero_width(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """NaN for an interval of no width: every resample gave the same value (a judge whose scores never move has D = 0
    on every draw), which says nothing about the value's precision — never a zero-width interval (a binary view's
    Wilson interval is the exception that has a width: _mean_kind)."""
    return [(math.nan, math.nan) if paired.no_width(lo, hi) else (lo, hi) for lo, hi in intervals]


def _mean_kind(v: View, judges: list[str], units: list, k: int, seed: int, ci: float):
    d = v.data[v.data["unit"].isin(set(units))]
    wide = (d.assign(entry=_entries(d))
            .pivot_table(index="unit", columns="entry", values="value", aggfunc="mean").reindex(index=units,
                                                                                                columns=judges))
    x = wide.to_numpy(float).T  # judges × units
    values = x.mean(axis=1)
    counts = paired.item_bootstrap_draws(len(units), k, seed)
    boots = (counts @ x.T / len(units)).T  # judges × draws
    intervals = [paired.percentile_interval(b, len(units), ci) for b in boots]
    binary = np.isin(x, (0.0, 1.0)).all()
    if binary:  # every unit alike (all 1 or all 0): the bootstrap has no spread; a proportion's interval still has one
        intervals = [paired.wilson_interval(float(row.sum()), len(units), ci) if lo == hi else (lo, hi)
                     for row, (lo, hi) in zip(x, intervals)]
    else:
        intervals = _no_zero_width(intervals)
    signs = np.random.default_rng(seed + 1).choice((-1.0, 1.0), size=(k, len(units)))
    pairs = []
    for a, b in itertools.combinations(range(len(judges)), 2):
        if binary:
            r = paired.mcnemar_exact(x[a], x[b])
            p = r["p_value"]
            n_disc = r["n_ab"] + r["n_ba"]
            p_ab = float(sps.binom.sf(r["n_ab"] - 1, n_disc, 0.5)) if n_disc else 1.0  # P(a wins >= n_ab)
            p_ba = float(sps.binom.sf(r["n_ba"] - 1, n_disc, 0.5)) if n_disc else 1.0
            test = "exact McNemar"
        else:
            diff = x[a] - x[b]
            exact = _sign_flip_exact(diff)
            if exact is not None:
                p, p_ab, p_ba = exact
                test = "exact paired sign-flip permutation"
            else:
                obs = diff.mean()
                perm = (signs @ diff) / len(units)
                p = float((1 + np.sum(np.abs(perm) >= abs(obs) - 1e-12)) / (1 + k))
                p_ab = float((1 + np.sum(perm >= obs - 1e-12)) / (1 + k))
                p_ba = float((1 + np.sum(perm <= obs + 1e-12)) / (1 + k))
                test = "paired sign-flip permutation"
        pairs.append((a, b, p, p_ab, p_ba, test))
    return values, intervals, pairs, None


def _sign_flip_exact(diff: np.ndarray, max_total: int = 200_000):
    """The exact sign-flip permutation p-values of the sum of paired differences when they lie on a small grid
    (LLMBar correctness averaged over two orders: multiples of 1/2): the distribution of Σ s_i |d_i| over all 2^n
    sign vectors, by convolution of integer steps. (p two-sided, p a better, p b better), or None off the grid."""
    for scale in (1, 2, 4, 10):
        m = diff * scale
        steps = np.rint(np.abs(m)).astype(np.int64)
        if np.allclose(m, np.rint(m), atol=1e-9) and steps.sum() <= max_total:
            break
    else:
        return None
    total = int(steps.sum())
    dist = np.zeros(2 * total + 1)
    dist[total] = 1.0  # index = sum + total
    for step in steps[steps > 0]:
        dist = 0.5 * (np.roll(dist, step) + np.roll(dist, -step))  # rolls never wrap: |sum| <= total
    values = np.arange(-total, total + 1)
    obs = int(np.rint(m.sum()))
    p_two = float(dist[np.abs(values) >= abs(obs)].sum())
    return min(1.0, p_two), float(dist[values >= obs].sum()), float(dist[values <= obs].sum())


#: Above this many judges a segment view tests only the pairs that decide its clusters (the walk down the sorted
#: judges compares each with the judges of the current cluster, stopping at the first significant one).
ALL_PAIRS_MAX_JUDGES = 10


def _segment_kind(v: View, judges: list[str], units: list, k: int, seed: int, ci: float,
                  early_stop: permutation.EarlyStop | None = None, alpha: float = 0.05):
    rows = pd.MultiIndex.from_tuples(units)  # the (unit, system) outputs every compared judge scored
    d = v.data[pd.MultiIndex.from_arrays([v.data["unit"], v.data["system"]]).isin(rows)]
    d = d.assign(entry=_entries(d))
    d = d[d["entry"].isin(set(judges))]  # a judge left out must not remove the rows it lacks from the others
    js = seg.judge_scores(d, item="unit", system="system", judge="entry", score="score", human="human")
    x = js.scores[[js.judges.index(e) for e in judges]]
    statistic = v.measure
    values = np.array([seg_value(js.human, row, js.groups, statistic) for row in x])
    counts = paired.item_bootstrap_draws(len(np.unique(js.groups)), k, seed)
    # the judges' bootstraps (independent of the permutation tests) run in worker processes beside the tests
    # when the view is large; every judge's resamples are the same numbers either way
    with _Background(paired.segment_bootstrap, js.human, x, js.groups, statistic, counts) as boot:
        table_or_walk = _segment_tests(js, x, judges, values, statistic, k, seed, early_stop, alpha)
        boots = boot.result()
    intervals = [paired.percentile_interval(b, len(np.unique(js.groups)), ci) for b in boots]
    return (values, intervals, *table_or_walk)


#: Judges × rows of a segment view from which its bootstrap runs in worker processes (WMT22 zh-en: 28,125 rows)
PARALLEL_MIN_WORK = 500_000


class _Background:
    """segment_bootstrap(human, x, groups, statistic, counts=counts) split by judges over up to os.cpu_count()
    worker processes (fork) while the caller goes on; in this process when the view is small, the scores are not
    all finite (a split would change the rows kept), or no worker can be started."""

    def __init__(self, fn, human, x, groups, statistic, counts):
        self.args, self.fn, self.pool, self.futures = (human, x, groups, statistic, counts), fn, None, []
        workers = min(os.cpu_count() or 1, len(x))
        if workers < 2 or x.size < PARALLEL_MIN_WORK or not (np.isfinite(x).all() and np.isfinite(human).all()):
            return
        try:
            ctx = multiprocessing.get_context("fork")
            self.pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
            self.futures = [self.pool.submit(fn, human, x[part], groups, statistic, counts=counts)
                            for part in np.array_split(np.arange(len(x)), workers)]
        except (OSError, ValueError):
            self._close()

    def result(self) -> np.ndarray:
        if self.futures:
            try:
                return np.concatenate([f.result() for f in self.futures])
            except (OSError, concurrent.futures.process.BrokenProcessPool):
                pass  # a worker died (e.g. out of memory): computed here instead
        human, x, groups, statistic, counts = self.args
        return self.fn(human, x, groups, statistic, counts=counts)

    def _close(self):
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool, self.futures = None, []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._close()


def _segment_tests(js, x, judges, values, statistic, k, seed, early_stop, alpha):
    """(pairs, clusters of the walk or None) of a segment view: every pair of up to ALL_PAIRS_MAX_JUDGES judges,
    else the pairs the WMT walk decides plus every pair of a live judge."""
    draws = permutation.permutation_draws(len(js.human), k, seed)
    test = "PERM-BOTH permutation" + (" (early stop)" if early_stop else "")
    if early_stop is not None and early_stop.settle_alpha is not None:  # settle the decision the clusters take
        early_stop = dataclasses.replace(early_stop, settle_alpha=alpha)
    if len(judges) <= ALL_PAIRS_MAX_JUDGES:
        table = permutation.permutation_table(js.human, x, judges, js.groups, statistic, draws=draws,
                                              early_stop=early_stop)
        index = {e: i for i, e in enumerate(judges)}
        # permutation_table reports each pair better-valued first: the reverse direction is not tested (NaN)
        pairs = [(index[r.judge_a], index[r.judge_b], float(r.p_two_sided), float(r.p_a_better), math.nan, test)
                 for r in table.itertuples()]
        return pairs, None
    order = sorted(range(len(judges)), key=lambda i: (-values[i] if math.isfinite(values[i]) else math.inf,
                                                      judges[i]))
    tester = permutation.pair_tester(js.human, x, js.groups, statistic, draws=draws, early_stop=early_stop)
    pairs, cluster, start, clusters_of = [], 1, 0, {}
    for pos, i in enumerate(order):
        for j in order[start:pos]:  # the judges of the current cluster, best first
            r = tester(j, i)
            pairs.append((j, i, r["p_two_sided"], r["p_a_better"], math.nan, test))
            if r["p_a_better"] <= alpha:  # significantly beaten by a judge of the cluster: a new cluster
                cluster, start = cluster + 1, pos
                break
        clusters_of[judges[i]] = cluster
    # a live judge among many recorded ones (evaluate): every pair of it is tested, not only those the walk decides
    done = {frozenset((a, b)) for a, b, *_ in pairs}
    for i in [k for k, e in enumerate(judges) if _split(e)[1] != RECORDED_MODE]:
        for j in range(len(judges)):
            if j != i and frozenset((i, j)) not in done:
                a, b = (i, j) if not values[j] > values[i] else (j, i)  # better-valued first, as the walk's pairs
                r = tester(a, b)
                pairs.append((a, b, r["p_two_sided"], r["p_a_better"], math.nan, test))
                done.add(frozenset((i, j)))
    return pairs, clusters_of


def seg_value(human, scores, groups, statistic: str) -> float:
    """One judge's segment statistic (τ_b, acc_eq or acc*_eq)."""
    if statistic == "tau_b":
        return seg.kendall_tau_b(human, scores)
    if statistic == "acc_eq":
        return seg.pairwise_accuracy(human, scores, groups)
    return seg.tie_calibrated_accuracy(human, scores, groups)[0]


def _resampler(rows: pd.DataFrame, units: list) -> Callable[[np.ndarray], pd.DataFrame]:
    """A judge's rows for one bootstrap draw, as a function of the draw's counts: each unit's rows repeated as often as
    it was drawn, each copy a unit of its own (so a statistic that groups by unit sees distinct units). The units' row
    positions are found once per judge, and each draw takes its rows by position (a frame per unit and draw, then
    their concatenation, were ~70 % of the demo leaderboard's time under py-spy)."""
    if not len(rows):
        return lambda counts: rows.iloc[:0]
    at = rows.groupby("unit", sort=False).indices
    blocks = [at[u] for u in units]  # a unit the judge has no row for fails here, as a lookup did

    def draw(counts: np.ndarray) -> pd.DataFrame:
        take, labels = [], []
        for u, pos, n in zip(units, blocks, counts):
            for c in range(int(n)):
                take.append(pos)
                labels.append(np.full(len(pos), f"{u}#{c}", dtype=object))
        if not take:
            return rows.iloc[:0]
        out = rows.iloc[np.concatenate(take)].reset_index(drop=True)
        out["unit"] = np.concatenate(labels)
        return out

    return draw


def _statistic_kind(v: View, judges: list[str], units: list, k: int, seed: int, ci: float):
    d = v.data[v.data["unit"].isin(set(units))]
    rows = {e: d[(d["judge"] == _split(e)[0]) & (d["mode"] == _split(e)[1])] for e in judges}
    values = np.array([float(v.statistic(rows[e])) for e in judges])
    if v.draws is not None:
        idx = np.random.default_rng(seed).integers(0, len(units), size=(k, len(units)))
        boots = np.array([np.asarray(v.draws(rows[e], units, idx), dtype=float) for e in judges])
    else:
        counts = paired.item_bootstrap_draws(len(units), k, seed)
        draw = {e: _resampler(rows[e], units) for e in judges}
        boots = np.array([[float(v.statistic(draw[e](c))) for c in counts] for e in judges])
    intervals = _no_zero_width([paired.percentile_interval(b, len(units), ci) for b in boots])
    pairs = []
    for a, b in itertools.combinations(range(len(judges)), 2):
        delta = values[a] - values[b]
        dd = boots[a] - boots[b]
        dd = dd[np.isfinite(dd)]
        usable = len(dd) and math.isfinite(delta) and len(units) >= 2
        p = float((1 + np.sum(np.abs(dd - delta) >= abs(delta) - 1e-12)) / (1 + len(dd))) if usable else math.nan
        # one-sided, a beats b: the null-centred resampled differences at or above the observed one
        p_ab = float((1 + np.sum(dd - delta >= delta - 1e-12)) / (1 + len(dd))) if usable else math.nan
        p_ba = float((1 + np.sum(dd - delta <= delta + 1e-12)) / (1 + len(dd))) if usable else math.nan
        pairs.append((a, b, p, p_ab, p_ba, "paired bootstrap"))
    return values, intervals, pairs, None


_KIND = {"mean": _mean_kind, "segment": _segment_kind, "statistic": _statistic_kind}


# ---------------------------------------------------------------------------------------------- the leaderboard

def _rows_of(v: View, judges: list[str], units: list) -> dict[str, pd.DataFrame]:
    """Each compared judge's rows on the common units."""
    d = v.data[v.data["unit"].isin(set(units))]
    return {e: d[(d["judge"] == _split(e)[0]) & (d["mode"] == _split(e)[1])] for e in judges}


def _one_view(v: View, k: int, seed: int, alpha: float, ci: float, min_coverage: float, min_units: int,
              early_stop):
    judges, units, left_out = _common(v, min_coverage, min_units)
    head = {"view": v.view, "scope": v.scope, "measure": v.measure, "strategy": v.strategy}
    tail = {"cluster_rule": CLUSTER_RULE, "protocol": str(v.notes.get("protocol", ""))}
    board, pair_rows = [], []
    holm = pd.DataFrame({"rank": []})
    n_units = len({u for u, _ in units}) if v.kind == "segment" else len(units)  # segment: items (rows grouped)
    if len(judges) >= 1:
        extra = {"early_stop": early_stop, "alpha": alpha} if v.kind == "segment" else {}
        values, intervals, pairs, walked = _KIND[v.kind](v, judges, units, k, seed, ci, **extra)
        better_first = []
        for a, b, p, p_ab, p_ba, test in pairs:
            p = two_sided(p, p_ab, p_ba)
            if values[b] > values[a] or (values[b] == values[a] and judges[b] < judges[a]):
                a, b, p_ab = b, a, p_ba
            better_first.append((a, b, p, p_ab, test))
        adj = paired.holm([p for _, _, p, _, _ in better_first]) if better_first else np.array([])
        own = _rows_of(v, judges, units) if v.pair_test is not None else None
        for (a, b, p, p_ab, test), pa in zip(better_first, adj):
            (ja, ma), (jb, mb) = _split(judges[a]), _split(judges[b])
            upstream = float(v.pair_test(own[judges[a]], own[judges[b]])) if own is not None else math.nan
            pair_rows.append({**head, "judge_a": ja, "mode_a": ma, "judge_b": jb, "mode_b": mb,
                              "value_a": values[a], "value_b": values[b], "diff": values[a] - values[b], "p": p,
                              "p_adj": pa, "significant": bool(pa <= alpha) if math.isfinite(pa) else False,
                              "p_better": p_ab, "test": test, "n": n_units, "p_upstream": upstream,
                              "test_upstream": v.pair_test_name if own is not None else ""})
        # clusters as in the WMT metrics findings: the one-sided p that the better-valued judge is better,
        # unadjusted, along the walk down the sorted judges (dhp.stats.clusters; a large segment view walked it
        # while testing only the pairs that decide it)
        if walked is None:
            ranked = clusters.significance_ranks(
                pd.Series(dict(zip(judges, values))),
                pd.DataFrame({"judge_a": [judges[a] for a, *_ in better_first],
                              "judge_b": [judges[b] for _, b, *_ in better_first],
                              "p_better": [p_ab for *_, p_ab, _ in better_first]}),
                alpha=alpha, p_column="p_better").set_index("judge")
        else:
            order = sorted(judges, key=lambda e: (-values[judges.index(e)] if math.isfinite(values[judges.index(e)])
                                                  else math.inf, e))
            ranked = pd.DataFrame({"position": range(1, len(order) + 1),
                                   "rank": [walked.get(e, math.nan) for e in order]}, index=order)
        holm = _holm_clusters(judges, values, better_first, adj, alpha)
        need = v.notes.get("min_units_ranked", MIN_UNITS_RANKED.get(v.kind))
        what = v.notes.get("units", "items" if v.kind == "segment" else "units")
        few = (f"too few units for a ranking: {n_units} {what} (< {need}); value and rank are indicative only"
               if need and n_units < need else "")
        for e, x, (lo, hi) in zip(judges, values, intervals):
            j, m = _split(e)
            finite = math.isfinite(x)
            # a judge's own protocol where the view knows it (a recorded judge run on its own config)
            own = {**tail, "protocol": str(v.notes.get("protocols", {}).get((j, m), tail["protocol"]))}
            board.append({**head, "judge": j, "mode": m, "value": x, "lo": lo, "hi": hi, "n": n_units,
                          "rank": ranked.at[e, "position"] if finite else math.nan,
                          "cluster": ranked.at[e, "rank"] if finite else math.nan,
                          "recorded": m == RECORDED_MODE,
                          "status": (few or "ok") if finite else "undefined (constant or no usable pair)",
                          **own, "cluster_holm": holm["rank"].get(e, math.nan) if finite else math.nan})
    for e, why in sorted(left_out.items()):
        j, m = _split(e)
        board.append({**head, "judge": j, "mode": m, "value": math.nan, "lo": math.nan, "hi": math.nan,
                      "n": math.nan, "rank": math.nan, "cluster": math.nan, "recorded": m == RECORDED_MODE,
                      "status": why, **tail, "protocol": str(v.notes.get("protocols", {}).get((j, m), tail["protocol"])),
                      "cluster_holm": math.nan})
    return board, pair_rows


def two_sided(p: float, p_ab: float, p_ba: float) -> float:
    """The pair's two-sided p: twice the smaller one-sided p (capped at 1), where both one-sided p are known; else the
    test's own two-sided p (a segment test reports only the better-valued direction).

    Why: a paired bootstrap's two-sided p counted |resampled difference - observed| >= |observed| — both tails of a
    distribution that is far from symmetric when a judge's statistic is skewed (DHP's D_avg on 10 items: one judge's
    interval 0.09-0.53 around 0.14), so a pair read p = 0.50 two-sided beside p_better = 0.007 one-sided: two tests of
    different things in one row. Doubling the smaller tail is the equal-tailed test, the one the percentile interval
    of the difference inverts, and it keeps p <= 2 * p_better, so ``significant`` (Holm on p) and ``cluster``
    (p_better) read the same evidence. For the exact and the sign-flip tests, whose null is symmetric, it is the p
    they gave (up to the cap)."""
    if p_ab is None or p_ba is None or not (math.isfinite(p_ab) and math.isfinite(p_ba)):
        return p
    return float(min(1.0, 2.0 * min(p_ab, p_ba)))


def pair_p_consistent(pairs: pd.DataFrame, n_resamples: int, z: float = 4.0) -> pd.Series:
    """Per row of leaderboard_pairs.csv: whether p <= 2 * min(p_better, 1 - p_better) + the Monte Carlo error of the
    resampled p (z standard errors of 2 * p_better over ``n_resamples`` draws, plus the (1 + ...)/(1 + k) offset) —
    what a two-sided and a one-sided p of one pair must satisfy. An exact test's p may exceed 2 * (1 - p_better) by
    its atom at the observed value (its one-sided p count the observed value on both sides), allowed here too."""
    pb = pairs["p_better"].astype(float).clip(0, 1)
    k = float(n_resamples)
    mc = z * 2 * np.sqrt(pb * (1 - pb) / k) + 4.0 / (k + 1)
    atom = np.where(pairs["test"].astype(str).str.startswith("exact"), 2 * (1 - pb), 0.0)
    bound = 2 * np.minimum(pb, np.maximum(1 - pb, atom / 2)) + mc
    p = pairs["p"].astype(float)
    return ~(p > bound) | p.isna() | pb.isna()


def _holm_clusters(judges, values, better_first, adj, alpha) -> pd.DataFrame:
    """The WMT walk with the Holm-adjusted two-sided decisions (``significant``) in place of the unadjusted one-sided
    p: indexed by judge entry, column rank (empty when a pair was not tested, e.g. a segment view's early stop)."""
    try:
        return clusters.significance_ranks(
            pd.Series(dict(zip(judges, values))),
            pd.DataFrame({"judge_a": [judges[a] for a, *_ in better_first],
                          "judge_b": [judges[b] for _, b, *_ in better_first], "p_holm": list(adj)}),
            alpha=alpha, p_column="p_holm").set_index("judge")
    except DHPError:
        return pd.DataFrame({"rank": []})


def _name(v: View) -> str:
    return " · ".join(x for x in (v.view, v.scope, v.measure, v.strategy) if x)


def _done(views, n, b, p, key, stored, progress, took, worker=False):
    """A computed view's rows, stored under its key (a view of recorded judges only) and reported when slow or
    computed by a worker process."""
    if key is not None:
        stored[key] = (pd.DataFrame(b, columns=LEADERBOARD_COLUMNS), pd.DataFrame(p, columns=PAIR_COLUMNS))
    if progress and (took > 1 or worker):
        progress(f"view {n + 1}/{len(views)} {_name(views[n])}: computed in {took:.0f} s"
                 + (" (in a worker process, beside other views)" if worker else ""))
    return b, p


#: Views worth a worker process of their own: a segment view of at least PARALLEL_VIEW_ROWS rows (WMT22 zh-en's:
#: 309k-591k rows; a segment view's cost grows with its rows and judges), a statistic view of at least
#: PARALLEL_STATISTIC_ROWS rows (its statistic is recomputed on every resample: HANNA's 35k rows 2.4 s, DHP's 4.5k
#: rows 3-4 s, FRANK's 24k rows 2-3 s). Two or more of them to compute run in worker processes, side by side.
PARALLEL_VIEW_ROWS = 100_000
PARALLEL_STATISTIC_ROWS = 2_000
_FORKED: tuple | None = None  # (views, early_stop, settings) as a forked worker inherits them


def _view_job(n: int, k: int) -> tuple[list, list, float]:
    """A forked worker's view: its board and pair rows and its seconds (its bootstrap in this process)."""
    views, early_stop, s = _FORKED
    start = time.perf_counter()
    b, p = _one_view(views[n], k, s["seed"], s["alpha"], s["ci"], s["min_coverage"], s["min_units"], early_stop)
    return b, p, time.perf_counter() - start


def _worker_init() -> None:
    global PARALLEL_MIN_WORK
    PARALLEL_MIN_WORK = math.inf  # a worker's view keeps its bootstrap in the worker: the cores are already busy


def _heavy(v: View) -> bool:
    return ((v.kind == "segment" and len(v.data) >= PARALLEL_VIEW_ROWS)
            or (v.kind == "statistic" and len(v.data) >= PARALLEL_STATISTIC_ROWS))


class _ViewWorkers:
    """The heavy views of ``todo`` ((view index, draws)) computed by up to os.cpu_count() forked worker processes
    (segment views first, then by rows) while the caller computes the rest: each view's numbers are those of
    _one_view in this process (its draws are seeded per view). Nothing is started for fewer than two heavy views
    (one large segment view spreads its bootstrap over the cores itself: _Background) or one core; a worker that
    dies (e.g. out of memory) leaves its view to be computed here."""

    def __init__(self, views, todo, early_stop, settings):
        global _FORKED
        self.views, self.todo, self.early_stop, self.settings = views, dict(todo), early_stop, settings
        self.pool, self.jobs = None, {}
        large = sorted((n for n, _ in todo if _heavy(views[n])),
                       key=lambda n: (views[n].kind != "segment", -len(views[n].data)))
        workers = min(os.cpu_count() or 1, len(large))
        if workers < 2:
            return
        _FORKED = (views, early_stop, settings)
        try:
            ctx = multiprocessing.get_context("fork")
            self.pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                                                               initializer=_worker_init)
            self.jobs = {n: self.pool.submit(_view_job, n, self.todo[n]) for n in large}
        except (OSError, ValueError):
            self._close()

    def result(self, n: int) -> tuple[list, list, float, bool]:
        """View n's board rows, pair rows, seconds, and whether a worker computed it."""
        try:
            return *self.jobs[n].result(), True
        except (OSError, concurrent.futures.process.BrokenProcessPool):
            s, start = self.settings, time.perf_counter()  # computed here instead
            b, p = _one_view(self.views[n], self.todo[n], s["seed"], s["alpha"], s["ci"], s["min_coverage"],
                             s["min_units"], self.early_stop)
            return b, p, time.perf_counter() - start, False

    def _close(self):
        global _FORKED
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        self.pool, self.jobs, _FORKED = None, {}, None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._close()


def view_key(v: View, **settings) -> str | None:
    """The key under which a view's results can be stored and reused: None unless every judge of the view is a
    recorded one (a live judge's views are computed fresh), else the sha256 of the view's rows (its judges' scores,
    the human scores: what the pinned, checksummed inputs give), its names, notes and statistic, the leaderboard
    ``settings`` and STATS_VERSION. Equal keys: equal results (every draw is seeded)."""
    if v.notes.get("not_built") or not len(v.data) or (v.data["mode"] != RECORDED_MODE).any():
        return None
    h = hashlib.sha256(f"dhp-leaderboard-view v{STATS_VERSION}\x1e".encode())
    fn = (lambda f: "" if f is None else f"{getattr(f, '__module__', '')}.{getattr(f, '__qualname__', repr(f))}")
    h.update(repr((v.view, v.scope, v.measure, v.kind, v.strategy, fn(v.statistic), fn(v.draws), fn(v.pair_test),
                   v.pair_test_name, sorted((str(a), repr(b)) for a, b in v.notes.items()),
                   sorted((a, repr(b)) for a, b in settings.items()), list(v.data.columns))).encode())
    h.update(pd.util.hash_pandas_object(v.data, index=False).to_numpy().tobytes())
    return h.hexdigest()


def leaderboard(views: list[View], n_resamples: int = 1000, seed: int = 0, alpha: float = 0.05, ci: float = 0.95,
                min_coverage: float = 0.5, min_units: int = MIN_UNITS, n_resamples_statistic: int | None = None,
                early_stop: permutation.EarlyStop | None = permutation.LEADERBOARD_EARLY_STOP, stored=None,
                progress: Callable[[str], None] | None = None) -> dict[str, pd.DataFrame]:
    """leaderboard.csv and leaderboard_pairs.csv of ``views`` (see the module docstring). ``n_resamples``: draws of
    the bootstrap and the permutation tests (shared by every judge and pair of a view); ``n_resamples_statistic``:
    the draws of "statistic" views, whose statistic is recomputed per draw (default: n_resamples); ``early_stop``:
    a segment pair's permutation test stops after a block of draws once its one-sided p is clearly below or above α
    (mt-metrics-eval's setting for the WMT findings), or once the cluster decision at α is settled
    (permutation.LEADERBOARD_EARLY_STOP; None: every draw); ``min_units``: a judge with fewer usable
    units is left out of the view (MIN_UNITS). ``stored``: a mutable mapping view_key -> (board rows, pair rows) as
    DataFrames: a view of recorded judges only whose key is in it is taken from it, one computed is added to it (the
    caller keeps it, e.g. on disk: dhp.leaderboard). ``progress``: called with a line per view that takes a while."""
    if n_resamples < 1:
        raise DHPError(f"n_resamples = {n_resamples} leaves nothing to test with.", "pass n_resamples >= 1.")
    settings = dict(seed=seed, alpha=alpha, ci=ci, min_coverage=min_coverage, min_units=min_units)
    parts, todo = {}, []  # view index -> (board rows, pair rows); the views to compute: (index, draws, key)
    for n, v in enumerate(views):
        if v.notes.get("not_built"):  # a view that could not be built: named, with its reason, as one row
            parts[n] = ([{"view": v.view, "scope": v.scope, "measure": v.measure, "strategy": v.strategy,
                          "judge": "", "mode": "", "value": math.nan, "lo": math.nan, "hi": math.nan, "n": math.nan,
                          "rank": math.nan, "cluster": math.nan, "recorded": False, "status": v.notes["not_built"]}],
                        [])
            continue
        k = n_resamples_statistic or n_resamples if v.kind == "statistic" else n_resamples
        key = None if stored is None else view_key(v, k=k, **settings, early_stop=early_stop)
        hit = None
        if key is not None:
            try:
                hit = stored[key]
            except KeyError:
                hit = None
        if hit is not None:
            parts[n] = (hit[0].to_dict("records"), hit[1].to_dict("records"))
            if progress:
                progress(f"view {n + 1}/{len(views)} {_name(v)}: recorded judges only, reused its stored results")
        else:
            todo.append((n, k, key))
    with _ViewWorkers(views, [(n, k) for n, k, _ in todo], early_stop, settings) as workers:
        for n, k, key in todo:  # the small views here while the workers compute the large ones
            if n not in workers.jobs:
                start = time.perf_counter()
                b, p = _one_view(views[n], k, seed, alpha, ci, min_coverage, min_units, early_stop)
                parts[n] = _done(views, n, b, p, key, stored, progress, time.perf_counter() - start)
        for n, k, key in todo:
            if n in workers.jobs:
                b, p, took, worker = workers.result(n)
                parts[n] = _done(views, n, b, p, key, stored, progress, took, worker)
    board, pairs = [], []
    for n in range(len(views)):  # the tables in the views' order, however they were computed
        board += parts[n][0]
        pairs += parts[n][1]
    board_df = pd.DataFrame(board, columns=LEADERBOARD_COLUMNS)
    # what kind of judge each row is (control / baseline / recorded / model): a control is never read as a model
    board_df["judge_kind"] = [judge_kind(j, "recorded" if r is True or r == True else m)  # noqa: E712 (a numpy bool)
                              for j, m, r in zip(board_df["judge"], board_df["mode"], board_df["recorded"])]
    board_df = board_df.sort_values(["view", "scope", "measure", "strategy", "rank"], kind="stable",
                                    na_position="last").reset_index(drop=True)
    return {"leaderboard.csv": board_df, "leaderboard_pairs.csv": pd.DataFrame(pairs, columns=PAIR_COLUMNS)}
