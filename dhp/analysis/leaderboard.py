"""The judge leaderboard: every view on which two or more judges were measured on the same units, each judge's value
with a bootstrap interval over the units, a paired significance test for every pair of judges, Holm's adjustment
within the view, and significance clusters and ranks as in the WMT metrics findings (dhp.stats.clusters).

A view (:class:`View`) is one measure on one scope — e.g. LLMBar agreement on the four adversarial subsets with the
Vanilla strategy, acc*_eq on WMT22 zh-en against MQM, DHP's D_avg on SummEval — given as unit-level rows of every
judge; each method builds its views from its tables (``Method.views``). Three kinds:

- ``mean``: one value per judge and unit, the view's value is their mean (LLMBar correctness averaged over the two
  orders, a local chain pair ordered right, a criteria-confusion cell decided as expected). Paired test: exact
  McNemar when every value is 0 or 1, else the paired sign-flip permutation test of the mean difference.
- ``segment``: segment scores beside the human scores (τ_b, acc*_eq): mt-metrics-eval's PERM-BOTH paired permutation
  test (Deutsch et al. 2021; acc*_eq re-optimises its tie threshold on every resample) with one matrix of draws
  shared by every pair (dhp.stats.permutation), intervals from resampling segments.
- ``statistic``: any statistic of a judge's rows (DHP's D_avg, weighted κ, a correlation over documents): a paired
  bootstrap over units — the same resampled units for both judges — gives intervals and the test of the
  difference (the resampled differences centred on the null, Hall & Wilson 1991).

Units: judges are compared on the units all of them have (a finite value). A judge measured on fewer than
``min_coverage`` of the best-covered judge's units is left out of that view with its reason (status), so a judge
run on 4 items does not shrink a 319-item comparison to 4 items. Every pair's p-value is two-sided; Holm adjusts
them within a view (view × scope × measure × strategy); a pair is significant when its adjusted p ≤ α, and the
clusters are formed from the same adjusted p-values (a judge starts a new cluster when a judge of the current one
is significantly better). Pure: tables in, tables out.

Tables: ``leaderboard.csv`` (LEADERBOARD_COLUMNS: one row per view × judge: value, lo, hi, n, rank = position by
value, cluster = significance cluster, recorded, status) and ``leaderboard_pairs.csv`` (PAIR_COLUMNS: one row per
view × pair of judges, the better-valued first: diff, p, p_adj, significant, test, n).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from dhp.errors import DHPError
from dhp.stats import clusters, paired, permutation
from dhp.stats import segment as seg

__all__ = ["View", "leaderboard", "LEADERBOARD_COLUMNS", "PAIR_COLUMNS", "KINDS"]

KINDS = ("mean", "segment", "statistic")
LEADERBOARD_COLUMNS = ["view", "scope", "measure", "strategy", "judge", "mode", "value", "lo", "hi", "n", "rank",
                       "cluster", "recorded", "status"]
PAIR_COLUMNS = ["view", "scope", "measure", "strategy", "judge_a", "mode_a", "judge_b", "mode_b", "value_a",
                "value_b", "diff", "p", "p_adj", "significant", "test", "n"]
RECORDED_MODE = "recorded"


@dataclass
class View:
    """One measure of several judges on shared units.

    ``data``: long rows with judge, mode, unit and — kind "mean": value; kind "segment": system, score, human (one
    row per unit × system); kind "statistic": whatever ``statistic`` reads (it gets one judge's rows, with units
    relabelled per resampled copy, and returns a number). ``higher_is_better``: False for a measure where lower is
    better (the leaderboard then ranks by the negated value)."""

    view: str
    scope: str
    measure: str
    kind: str
    data: pd.DataFrame
    strategy: str = ""
    statistic: Callable[[pd.DataFrame], float] | None = None
    higher_is_better: bool = True
    notes: dict = field(default_factory=dict)

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
        out[_entry(j, m)] = set(g["unit"])
    for (j, m) in v.data[["judge", "mode"]].drop_duplicates().itertuples(index=False):
        out.setdefault(_entry(j, m), set())
    return out


def _common(v: View, min_coverage: float, min_units: int) -> tuple[list[str], list, dict[str, str]]:
    """(judges compared, their common units sorted, reason a judge is left out)."""
    units = _units(v)
    best = max((len(u) for u in units.values()), default=0)
    left_out = {e: f"too few units ({len(u)} of {best})" for e, u in units.items()
                if best == 0 or len(u) < max(min_units, min_coverage * best)}
    kept = sorted(e for e in units if e not in left_out)
    common = sorted(set.intersection(*(units[e] for e in kept)), key=str) if kept else []
    if kept and len(common) < min_units:
        left_out.update({e: f"too few common units ({len(common)})" for e in kept})
        kept = []
    return kept, common, left_out


# ---------------------------------------------------------------------------------------------- the three kinds

def _mean_kind(v: View, judges: list[str], units: list, k: int, seed: int, ci: float):
    d = v.data[v.data["unit"].isin(set(units))]
    wide = (d.assign(entry=[_entry(j, m) for j, m in zip(d["judge"], d["mode"])])
            .pivot_table(index="unit", columns="entry", values="value", aggfunc="mean").reindex(index=units,
                                                                                                columns=judges))
    x = wide.to_numpy(float).T  # judges × units
    values = x.mean(axis=1)
    counts = paired.item_bootstrap_draws(len(units), k, seed)
    boots = (counts @ x.T / len(units)).T  # judges × draws
    intervals = [paired.percentile_interval(b, len(units), ci) for b in boots]
    binary = np.isin(x, (0.0, 1.0)).all()
    signs = np.random.default_rng(seed + 1).choice((-1.0, 1.0), size=(k, len(units)))
    pairs = []
    for a, b in itertools.combinations(range(len(judges)), 2):
        if binary:
            p = paired.mcnemar_exact(x[a], x[b])["p_value"]
            test = "exact McNemar"
        else:
            diff = x[a] - x[b]
            obs = abs(diff.mean())
            perm = np.abs(signs @ diff) / len(units)
            p = float((1 + np.sum(perm >= obs - 1e-12)) / (1 + k))
            test = "paired sign-flip permutation"
        pairs.append((a, b, p, test))
    return values, intervals, pairs


def _segment_kind(v: View, judges: list[str], units: list, k: int, seed: int, ci: float):
    d = v.data[v.data["unit"].isin(set(units))].assign(entry=lambda t: [_entry(j, m) for j, m in
                                                                       zip(t["judge"], t["mode"])])
    js = seg.judge_scores(d, item="unit", system="system", judge="entry", score="score", human="human")
    order = [js.judges.index(e) for e in judges]
    x = js.scores[order]
    statistic = v.measure
    draws = permutation.permutation_draws(len(js.human), k, seed)
    table = permutation.permutation_table(js.human, x, judges, js.groups, statistic, draws=draws)
    values = np.array([seg_value(js.human, row, js.groups, statistic) for row in x])
    counts = paired.item_bootstrap_draws(len(np.unique(js.groups)), k, seed)
    boots = paired.segment_bootstrap(js.human, x, js.groups, statistic, counts=counts)
    intervals = [paired.percentile_interval(b, len(np.unique(js.groups)), ci) for b in boots]
    index = {e: i for i, e in enumerate(judges)}
    pairs = [(index[r.judge_a], index[r.judge_b], float(r.p_two_sided), "PERM-BOTH permutation")
             for r in table.itertuples()]
    return values, intervals, pairs


def seg_value(human, scores, groups, statistic: str) -> float:
    """One judge's segment statistic (τ_b, acc_eq or acc*_eq)."""
    if statistic == "tau_b":
        return seg.kendall_tau_b(human, scores)
    if statistic == "acc_eq":
        return seg.pairwise_accuracy(human, scores, groups)
    return seg.tie_calibrated_accuracy(human, scores, groups)[0]


def _resampled(rows: pd.DataFrame, units: list, counts: np.ndarray) -> pd.DataFrame:
    """A judge's rows for one bootstrap draw: each unit's rows repeated as often as it was drawn, each copy a unit of
    its own (so a statistic that groups by unit sees distinct units)."""
    blocks = {u: g for u, g in rows.groupby("unit", sort=False)}
    parts = [blocks[u].assign(unit=f"{u}#{c}") for u, n in zip(units, counts) if n for c in range(int(n))]
    return pd.concat(parts, ignore_index=True) if parts else rows.iloc[:0]


def _statistic_kind(v: View, judges: list[str], units: list, k: int, seed: int, ci: float):
    d = v.data[v.data["unit"].isin(set(units))]
    rows = {e: d[(d["judge"] == _split(e)[0]) & (d["mode"] == _split(e)[1])] for e in judges}
    values = np.array([float(v.statistic(rows[e])) for e in judges])
    counts = paired.item_bootstrap_draws(len(units), k, seed)
    boots = np.array([[float(v.statistic(_resampled(rows[e], units, c))) for c in counts] for e in judges])
    intervals = [paired.percentile_interval(b, len(units), ci) for b in boots]
    pairs = []
    for a, b in itertools.combinations(range(len(judges)), 2):
        delta = values[a] - values[b]
        dd = boots[a] - boots[b]
        dd = dd[np.isfinite(dd)]
        p = (float((1 + np.sum(np.abs(dd - delta) >= abs(delta) - 1e-12)) / (1 + len(dd)))
             if len(dd) and math.isfinite(delta) and len(units) >= 2 else math.nan)
        pairs.append((a, b, p, "paired bootstrap"))
    return values, intervals, pairs


_KIND = {"mean": _mean_kind, "segment": _segment_kind, "statistic": _statistic_kind}


# ---------------------------------------------------------------------------------------------- the leaderboard

def _one_view(v: View, k: int, seed: int, alpha: float, ci: float, min_coverage: float, min_units: int):
    judges, units, left_out = _common(v, min_coverage, min_units)
    head = {"view": v.view, "scope": v.scope, "measure": v.measure, "strategy": v.strategy}
    board, pair_rows = [], []
    if len(judges) >= 1:
        values, intervals, pairs = _KIND[v.kind](v, judges, units, k, seed, ci)
        sign = 1.0 if v.higher_is_better else -1.0
        better_first = []
        for a, b, p, test in pairs:
            if sign * values[b] > sign * values[a] or (values[b] == values[a] and judges[b] < judges[a]):
                a, b = b, a
            better_first.append((a, b, p, test))
        adj = paired.holm([p for *_, p, _ in better_first]) if better_first else np.array([])
        for (a, b, p, test), pa in zip(better_first, adj):
            (ja, ma), (jb, mb) = _split(judges[a]), _split(judges[b])
            pair_rows.append({**head, "judge_a": ja, "mode_a": ma, "judge_b": jb, "mode_b": mb,
                              "value_a": values[a], "value_b": values[b], "diff": values[a] - values[b], "p": p,
                              "p_adj": pa, "significant": bool(pa <= alpha) if math.isfinite(pa) else False,
                              "test": test, "n": len(units)})
        ranked = clusters.significance_ranks(
            pd.Series({e: sign * x for e, x in zip(judges, values)}),
            pd.DataFrame({"judge_a": [judges[a] for a, *_ in better_first],
                          "judge_b": [judges[b] for _, b, *_ in better_first], "p_adj": adj}),
            alpha=alpha, p_column="p_adj").set_index("judge")
        for e, x, (lo, hi) in zip(judges, values, intervals):
            j, m = _split(e)
            finite = math.isfinite(x)
            board.append({**head, "judge": j, "mode": m, "value": x, "lo": lo, "hi": hi, "n": len(units),
                          "rank": ranked.at[e, "position"] if finite else math.nan,
                          "cluster": ranked.at[e, "rank"] if finite else math.nan,
                          "recorded": m == RECORDED_MODE,
                          "status": "ok" if finite else "undefined (constant or no usable pair)"})
    for e, why in sorted(left_out.items()):
        j, m = _split(e)
        board.append({**head, "judge": j, "mode": m, "value": math.nan, "lo": math.nan, "hi": math.nan,
                      "n": math.nan, "rank": math.nan, "cluster": math.nan, "recorded": m == RECORDED_MODE,
                      "status": why})
    return board, pair_rows


def leaderboard(views: list[View], n_resamples: int = 1000, seed: int = 0, alpha: float = 0.05, ci: float = 0.95,
                min_coverage: float = 0.5, min_units: int = 2, n_resamples_statistic: int | None = None
                ) -> dict[str, pd.DataFrame]:
    """leaderboard.csv and leaderboard_pairs.csv of ``views`` (see the module docstring). ``n_resamples``: draws of
    the bootstrap and the permutation tests (shared by every judge and pair of a view); ``n_resamples_statistic``:
    the draws of "statistic" views, whose statistic is recomputed per draw (default: n_resamples)."""
    if n_resamples < 1:
        raise DHPError(f"n_resamples = {n_resamples} leaves nothing to test with.", "pass n_resamples >= 1.")
    board, pairs = [], []
    for v in views:
        k = n_resamples_statistic or n_resamples if v.kind == "statistic" else n_resamples
        b, p = _one_view(v, k, seed, alpha, ci, min_coverage, min_units)
        board += b
        pairs += p
    board_df = pd.DataFrame(board, columns=LEADERBOARD_COLUMNS)
    board_df = board_df.sort_values(["view", "scope", "measure", "strategy", "rank"], kind="stable",
                                    na_position="last").reset_index(drop=True)
    return {"leaderboard.csv": board_df, "leaderboard_pairs.csv": pd.DataFrame(pairs, columns=PAIR_COLUMNS)}

