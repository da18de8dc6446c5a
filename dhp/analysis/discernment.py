"""Discernment statistics (paper §4.3): Wilcoxon tests -> harmonic-mean p -> D = log_0.05(p).

The chain, per (dataset, judge, mode):

1. For every perturbation i (one `perturbation` × `severity` pair, e.g. char_typo/minor) and metric j,
   a one-sided Wilcoxon signed-rank test on the paired differences original − perturbed
   (H1: originals score higher), scipy's test (dhp.stats.wilcoxon, every test of the table at once) -> p_ij.
2. Metrics are combined per perturbation with the harmonic mean p-value, as the paper prints it:
   p_i = 1 / Σ_j (1 / p_ij) and p_i^EW = 1 / Σ_j (EW_ij / p_ij), Σ_j EW_ij = 1.
   `combine="wilson"` uses Wilson's (2019) weighted harmonic mean with weights summing to 1 instead:
   unweighted, p_i = M / Σ_j (1 / p_ij), i.e. M times the paper's value (the EW form is the same)
   (dhp.stats.combine).
3. D_i = log_0.05(p_i) (p clipped to at least P_FLOOR so that D stays finite). D > 1 <=> p < 0.05.
4. Per judge: D_avg is level-balanced (character, word and sentence levels weigh equally; equal weights
   within a level; a task without a sentence level averages the levels it has); D_min is the minimum.

Beyond the paper: a bootstrap over items (the same resampled items for every perturbation and metric)
gives 95% percentile intervals for every D and for D_avg/D_min, and the share of resamples with D > 1
(the resampling seed is derived from a hash of the judge's group key, so a judge's intervals do not
depend on which other judges share the table); `original` rows are the reference, never a perturbation.
A perturbation with fewer than MIN_BOOT_ITEMS items holding a usable pair gets no interval (NaN, flag
``few_items_for_interval:<k>``): resampling 2 items gives a zero-width interval, certainty from nothing.

Two controls (beyond the paper):
- the **negative control** (`control`: the original re-scored through a separate judge call, see
  dhp.perturb.rules.control_format) is reported with role "negative_control", excluded from D_avg and
  D_min: its D measures the judge's test-retest noise (`control_D` in the summary);
- the **sign-flip null calibration** (:func:`null_calibration`): each item's paired differences get a
  random sign (the same for all its metrics and perturbations, so their dependence is kept) and p, D and
  D_avg are recomputed; the share of null D values above 1 is the false-positive rate of a "discerned"
  verdict under each combination rule — with the paper's rule it is far above 5% for multi-metric tasks.

The statistics themselves (the Wilcoxon test, the combination, the resampling) are dhp.stats'; this
module holds the method's own logic: the units and levels, the table layout, D_avg / D_min, the summary.
(About 200 of its ~800 lines pack a long score table into integer-coded arrays so that every test of a table runs
in one pass; that layout code is what makes 875,900 score rows take 0.2 s.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from dhp.errors import DHPError
from dhp.schema import CONTROL, DATASET_TASK, LEVELS, ORIGINAL
from dhp.stats.combine import COMBINES, P_FLOOR, combine_rows, discernment_score
from dhp.stats.paired import no_width
from dhp.stats.resample import MIN_RESAMPLE_UNITS, group_seed, resample_items
from dhp.stats.wilcoxon import METHODS, ZERO_METHODS, wilcoxon_greater_many
from dhp.weights import load_expert_weights, validate_expert_weights, weights_for

__all__ = ["COMBINES", "DISCERNMENT_COLUMNS", "FEW_ITEMS", "GROUP", "METHODS", "MIN_BOOT_ITEMS", "NULL_COLUMNS",
           "P_FLOOR", "SUMMARY_COLUMNS", "ZERO_METHODS", "Discernment", "discernment", "discernment_score",
           "group_seed", "level_balanced_mean", "level_balanced_rows", "level_weights", "null_calibration", "summarize"]

#: Columns of the scores table the statistics need (the rest of dhp.schema.SCORE_COLUMNS is optional here).
REQUIRED_SCORE_COLUMNS = ("dataset", "judge", "mode", "item_id", "perturbation", "severity", "level", "metric", "score")
GROUP = ["dataset", "judge", "mode"]

#: Fewest items with a usable pair for a bootstrap interval. The resampling units are the items: from 2
#: items every resample can give the same D (a zero-width interval), and with fewer than 5 pairs no
#: single one-sided signed-rank test can reach p < 0.05 (its smallest p is 2^-n >= 1/16), so the interval
#: would describe the sample size rather than the judge. Too few: the interval is NaN and flagged.
MIN_BOOT_ITEMS = MIN_RESAMPLE_UNITS
#: The flag of a row whose interval was withheld (followed by ":<items with a usable pair>").
FEW_ITEMS = "few_items_for_interval"


def level_weights(levels) -> np.ndarray:
    """Weights for the level-balanced average: each level present gets 1/L, split equally inside it.

    `levels` is the level of each perturbation row (the control excluded by the caller).
    """
    levels = list(levels)
    present = [lv for lv in dict.fromkeys(levels)]
    counts = {lv: levels.count(lv) for lv in present}
    return np.array([1.0 / len(present) / counts[lv] for lv in levels])


def level_balanced_mean(values, levels) -> float:
    """Level-balanced average of D over perturbations (NaN values are left out before weighting)."""
    v = np.asarray(values, dtype=float)
    lv = np.asarray(list(levels), dtype=object)
    keep = np.isfinite(v)
    if not keep.any():
        return math.nan
    return float(np.sum(level_weights(lv[keep]) * v[keep]))


def level_balanced_rows(values, levels) -> np.ndarray:
    """:func:`level_balanced_mean` of every row of a (resamples × perturbations) matrix: rows without NaN
    share one set of weights (numpy sums each row of the product as it sums one row alone)."""
    v = np.asarray(values, dtype=float)
    out = np.full(v.shape[0], math.nan)
    full = np.isfinite(v).all(axis=1)
    if full.any() and v.shape[1]:
        out[full] = (level_weights(levels) * v[full]).sum(axis=1)
    for i in np.flatnonzero(~full):
        out[i] = level_balanced_mean(v[i], levels)
    return out


# --------------------------------------------------------------------------------------------------
# The discernment table
# --------------------------------------------------------------------------------------------------
def _check_scores(scores: pd.DataFrame) -> pd.DataFrame:
    return _checked_with_codes(scores)[0]


def _checked_with_codes(scores: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The checked copy of the scores table and {key column: (codes, sorted values)} of its key columns.

    The duplicate check uses those codes (DataFrame.duplicated factorized the same columns again)."""
    if not isinstance(scores, pd.DataFrame):
        raise DHPError("scores must be a pandas DataFrame (the scores table).", "pass the table notebook 02 wrote.")
    missing = [c for c in REQUIRED_SCORE_COLUMNS if c not in scores.columns]
    if missing:
        raise DHPError(f"The scores table lacks columns {missing}.", "pass the scores table written by notebook 02.")
    s = scores.copy()
    for c in ("dataset", "judge", "mode", "item_id", "perturbation", "severity", "level", "metric"):
        s[c] = s[c].astype(str)
    if "task" not in s.columns:  # tables from before the task column: the paper's datasets know theirs
        s["task"] = s["dataset"].map(DATASET_TASK)
    s["score"] = pd.to_numeric(s["score"], errors="coerce")
    codes = _row_codes(s)
    variant = _compact(*_pack([codes[c][0] for c in ("perturbation", "severity", "metric")],
                              [len(codes[c][1]) for c in ("perturbation", "severity", "metric")]))
    full, size = _pack([codes["pair"][0], variant[0]], [codes["pair"][1], variant[1]])  # all KEY_COLUMNS
    # Whether any key repeats: a bitmap of the key space when it is small (hashing 10^6 keys was a tenth
    # of the statistics' time); which rows repeat is asked only then.
    if _small_key_space(size, len(full), per_row=16):  # one byte per key here, not eight
        seen = np.zeros(size, bool)
        seen[full] = True
        if np.count_nonzero(seen) == len(full):
            return s, codes
    dup = pd.Series(full).duplicated().to_numpy()
    if dup.any():
        row = s.loc[dup, KEY_COLUMNS].iloc[0].to_dict()
        raise DHPError(
            f"The scores table has {int(dup.sum())} duplicate rows (e.g. {row}).",
            "keep one score per item, variant and metric (average repeated samples before).",
        )
    return s, codes


#: The columns that identify a score row.
KEY_COLUMNS = ["dataset", "judge", "mode", "item_id", "perturbation", "severity", "metric"]


def _factor(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of a column in the sorted order of its values, and those values (Python objects)."""
    codes, values = pd.factorize(col)  # sorted below, in place: pandas' sort=True re-maps into a new array
    values = np.asarray(values, dtype=object)
    order = np.argsort(values, kind="stable")
    rank = np.empty(len(values), np.int64)
    rank[order] = np.arange(len(values))
    codes = codes.astype(np.int64, copy=False)
    np.take(rank, codes, out=codes, mode="clip")
    return codes, values[order]


def _row_codes(s: pd.DataFrame) -> dict:
    """{key column: (codes, sorted values)}, plus "group" (dataset, judge, mode) and "pair" (group, item):
    (codes, how many). All codes follow the sorted order of their keys."""
    codes = {c: _factor(s[c]) for c in KEY_COLUMNS}
    n = {c: len(v[1]) for c, v in codes.items()}
    grp = _compact(*_pack([codes[c][0] for c in GROUP], [n[c] for c in GROUP]))
    codes["group"] = grp
    codes["pair"] = _compact(*_pack([grp[0], codes["item_id"][0]], [grp[1], n["item_id"]]))
    return codes


def _small_key_space(size: int, n_rows: int, per_row: int = 4) -> bool:
    """Whether a dense table over a key space of `size` is affordable for `n_rows` rows: it replaces
    hashing or sorting the keys, the costliest steps on large tables."""
    return size <= per_row * n_rows + (1 << 16)


def _compact(x: np.ndarray, size: int) -> tuple[np.ndarray, int]:
    """Codes 0..k-1 of integer keys in [0, size), in the sorted order of the keys, and k."""
    if _small_key_space(size, len(x)):
        seen = np.bincount(x, minlength=size) > 0
        np.take(np.cumsum(seen) - 1, x, out=x, mode="clip")  # x is always a temporary of _pack
        return x, int(seen.sum())
    codes, values = pd.factorize(x, sort=True)
    return codes.astype(np.int64, copy=False), len(values)


def _pack(codes: list, sizes: list) -> tuple[np.ndarray, int]:
    """One int64 key per row for a tuple of codes, ordered like the tuples, and the size of the key
    space (re-coded with order kept before the product of sizes could overflow)."""
    out, size = np.array(codes[0], dtype=np.int64), max(int(sizes[0]), 1)
    for c, k in zip(codes[1:], sizes[1:]):
        k = max(int(k), 1)
        if size * k >= 2**62:
            out, size = _compact(out, size)
        out *= k  # in place: fresh 10^6-row temporaries cost more than the arithmetic
        out += c
        size *= k
    return out, size


def _weights_lookup(expert_weights):
    if expert_weights is None or isinstance(expert_weights, (str, bytes)) or hasattr(expert_weights, "__fspath__"):
        return load_expert_weights(expert_weights)

    return validate_expert_weights(expert_weights)


def _ew_vector(ew: pd.DataFrame, task, perturbation: str, metrics: list[str]) -> np.ndarray | None:
    """Expert weights for `metrics` (None when a single metric: its weight is 1 by definition)."""
    if len(metrics) == 1:
        return None
    if not isinstance(task, str) or task in ("", "nan"):
        raise DHPError("The scores table has no task for its rows, so expert weights cannot be found.",
                       "score with this version of dhp.judging (it writes a 'task' column) or add one.")

    return weights_for(ew, task, perturbation, metrics)


@dataclass
class _Unit:
    perturbation: str
    severity: str
    level: str
    metrics: list[str]
    orig: np.ndarray  # (n_metrics, n_items), NaN where missing
    pert: np.ndarray  # (n_metrics, n_items), NaN where missing / no perturbed row
    present: np.ndarray  # (n_metrics, n_items) bool: a perturbed row exists
    ew: np.ndarray | None


def _units(g: pd.DataFrame, items: list[str], ew: pd.DataFrame | None) -> list[_Unit]:
    """The (perturbation, severity) units of one judge group as (metric × item) arrays. Rows are placed by
    integer indexing rather than one pivot per unit: _check_scores already refused duplicate rows."""
    task = g["task"].iloc[0]
    item_pos = pd.Index(items).get_indexer(g["item_id"])
    metric_names = sorted(g["metric"].unique())
    metric_pos = pd.Index(metric_names).get_indexer(g["metric"])
    score = g["score"].to_numpy(float)
    is_orig = (g["perturbation"] == ORIGINAL).to_numpy()
    orig_all = np.full((len(metric_names), len(items)), np.nan)
    orig_all[metric_pos[is_orig], item_pos[is_orig]] = score[is_orig]
    units = []
    levels = g["level"].to_numpy()
    for (pert, sev), rows in g[~is_orig].groupby(["perturbation", "severity"], sort=True).indices.items():
        rows = np.flatnonzero(~is_orig)[rows]
        used = np.unique(metric_pos[rows])  # this unit's metrics, in sorted order
        local = np.searchsorted(used, metric_pos[rows])
        pert_arr = np.full((len(used), len(items)), np.nan)
        present = np.zeros((len(used), len(items)), dtype=bool)
        pert_arr[local, item_pos[rows]] = score[rows]
        present[local, item_pos[rows]] = True
        metrics = [metric_names[i] for i in used]
        units.append(_Unit(perturbation=pert, severity=sev, level=str(levels[rows[0]]), metrics=metrics,
                           orig=orig_all[used], pert=pert_arr, present=present,
                           ew=None if ew is None else _ew_vector(ew, task, pert, metrics)))
    return units


def _unit_diffs(unit: _Unit) -> tuple[np.ndarray, np.ndarray]:
    """A unit's differences original − perturbed (metrics × items) and which are usable."""
    with np.errstate(invalid="ignore"):  # inf − inf: such pairs are not usable anyway
        d = unit.orig - unit.pert
    return d, unit.present & np.isfinite(d)


#: Cells of resampled differences tested at once in the bootstrap (its memory, not its result).
_BOOT_CELLS = 1 << 21


def _boot_d(unit: _Unit, idx: np.ndarray, zero_method, method, correction, combine):
    """D and D_EW of one perturbation for each bootstrap resample of items (rows of idx): every metric's
    test on every resample is one row of a single Wilcoxon batch."""
    d, ok = _unit_diffs(unit)
    n_metrics, (n_boot, n_items) = d.shape[0], idx.shape
    pm = np.empty((n_boot, n_metrics))  # resamples × metrics
    step = max(1, _BOOT_CELLS // max(n_metrics * n_items, 1))  # a few arrays of this size at a time, not n_boot's
    for a in range(0, n_boot, step):
        part = idx[a: a + step]
        flat = (n_metrics * len(part), n_items)
        p = wilcoxon_greater_many(d[:, part].reshape(flat), ok[:, part].reshape(flat), zero_method, method,
                                  correction).p
        pm[a: a + len(part)] = p.reshape(n_metrics, len(part)).T
    p = combine_rows(pm, None, combine)
    p_ew = p if unit.ew is None else combine_rows(pm, np.broadcast_to(unit.ew, pm.shape), combine)
    return discernment_score(p), discernment_score(p_ew)


# --------------------------------------------------------------------------------------------------
# Point statistics of the whole table at once (the bootstrap goes unit by unit, through _units)
# --------------------------------------------------------------------------------------------------
@dataclass
class _Layout:
    """Integer layout of a checked scores table. Groups (dataset, judge, mode), units (a group's
    perturbation × severity) and tests (unit × metric) are numbered in the sorted order of their keys —
    the order of the former per-group loops (groupby(sort=True), sorted items and metrics)."""

    group_keys: list  # (dataset, judge, mode) of each group
    group_has_orig: np.ndarray
    group_width: np.ndarray  # items of each group (originals included)
    group_first: np.ndarray  # first row of each group (its task)
    unit_group: np.ndarray
    unit_pert: np.ndarray  # perturbation code (codes["perturbation"])
    unit_sev: np.ndarray
    unit_first: np.ndarray  # first row of each unit (its level)
    unit_start: np.ndarray  # first test of each unit, then the number of tests
    test_unit: np.ndarray
    test_metric: np.ndarray  # metric code (codes["metric"])
    row_test: np.ndarray  # for every row: its test (-1 for an original),
    row_item: np.ndarray  # its item's position among the group's sorted items,
    row_o: np.ndarray  # the original's score (NaN when there is no original row)
    row_q: np.ndarray  # and its own score


def _first_rows(code: np.ndarray, k: int) -> np.ndarray:
    """Row of the first occurrence of each code 0..k-1 (all present)."""
    out = np.full(k, len(code), np.int64)
    np.minimum.at(out, code, np.arange(len(code)))
    return out


def _layout(s: pd.DataFrame, codes: dict) -> _Layout:
    """The groups, units and tests of a checked table (codes from :func:`_row_codes`), and every row's
    place among them, without a per-group loop."""
    c = {k: codes[k][0] for k in KEY_COLUMNS}
    n = {k: len(codes[k][1]) for k in KEY_COLUMNS}
    (grp, n_grp), (pair, n_pair) = codes["group"], codes["pair"]
    pair_grp = np.zeros(n_pair, np.int64)
    pair_grp[pair] = grp
    perts = list(codes["perturbation"][1])
    is_orig = c["perturbation"] == (perts.index(ORIGINAL) if ORIGINAL in perts else -1)
    score = s["score"].to_numpy(dtype=float)
    # Every (group, perturbation, severity, metric) cell in one pass over the rows; the tests are the
    # cells of perturbed rows, and their attributes come from their first rows (small arrays).
    cell, n_cell = _compact(*_pack([grp, c["perturbation"], c["severity"], c["metric"]],
                                   [n_grp, n["perturbation"], n["severity"], n["metric"]]))
    first = _first_rows(cell, n_cell)
    is_test = ~is_orig[first]
    first = first[is_test]
    test_of_cell = np.cumsum(is_test) - 1
    unit, n_unit = _compact(*_pack([grp[first], c["perturbation"][first], c["severity"][first]],
                                   [n_grp, n["perturbation"], n["severity"]]))
    unit_start = np.searchsorted(unit, np.arange(n_unit + 1))  # a unit's tests are adjacent
    unit_first = np.full(n_unit, len(s), np.int64)
    np.minimum.at(unit_first, unit, first)
    head = first[unit_start[:-1]]
    group_first = _first_rows(grp, n_grp)
    keys = zip(*[codes[k][1][c[k][group_first]].tolist() for k in GROUP])
    item = pair - np.searchsorted(pair_grp, np.arange(n_grp))[grp]  # pairs are sorted by group, then item
    orig = _originals(pair * n["metric"] + c["metric"], n_pair * n["metric"], is_orig, score)
    return _Layout(
        group_keys=list(keys), group_has_orig=np.bincount(grp[is_orig], minlength=n_grp) > 0,
        group_width=np.bincount(pair_grp, minlength=n_grp), group_first=group_first,
        unit_group=grp[head], unit_pert=c["perturbation"][head], unit_sev=c["severity"][head],
        unit_first=unit_first, unit_start=unit_start, test_unit=unit, test_metric=c["metric"][first],
        row_test=np.where(is_orig, -1, test_of_cell[cell]), row_item=item, row_o=orig, row_q=score,
    )


def _originals(key: np.ndarray, size: int, is_orig: np.ndarray, score: np.ndarray) -> np.ndarray:
    """For every row, the score of the original row with the same key (group, item, metric; in [0,
    size)), NaN if there is none. Should two originals share a key (different severities), the later
    row counts, as the former per-group array assignment had it."""
    if _small_key_space(size, len(key)):
        table = np.full(size, np.nan)
        table[key[is_orig]] = score[is_orig]
        return table[key]
    order = np.argsort(key[is_orig], kind="stable")
    k_orig, s_orig = key[is_orig][order], score[is_orig][order]
    at = np.searchsorted(k_orig, key, side="right") - 1
    hit = at >= 0
    hit[hit] = k_orig[at[hit]] == key[hit]
    out = np.full(len(key), np.nan)
    out[hit] = s_orig[at[hit]]
    return out


def _unit_weights(s: pd.DataFrame, lay: _Layout, codes: dict, ew: pd.DataFrame) -> list:
    """Expert weights of every unit (None for a single metric). Raises the errors of the former per-group
    loop in its order: a group without original rows, or a unit without weights."""
    tasks = s["task"].iloc[lay.group_first].tolist()
    metric_names, perts = codes["metric"][1], codes["perturbation"][1]
    bounds = np.searchsorted(lay.unit_group, np.arange(len(tasks) + 1))
    cache, out = {}, []
    for g, key in enumerate(lay.group_keys):
        if not lay.group_has_orig[g]:
            raise DHPError(
                f"No 'original' rows for dataset/judge/mode {key}.",
                "score the original texts too (notebook 02 does this by default).",
            )
        for u in range(bounds[g], bounds[g + 1]):
            k = (tasks[g], perts[lay.unit_pert[u]],
                 tuple(metric_names[lay.test_metric[lay.unit_start[u]: lay.unit_start[u + 1]]]))
            if k not in cache:  # weights_for filters a DataFrame: once per task, perturbation and metrics
                cache[k] = _ew_vector(ew, k[0], k[1], list(k[2]))
            out.append(cache[k])
    return out


@dataclass
class _TestStats:
    p: np.ndarray
    used: np.ndarray  # method used per test
    flags: np.ndarray  # tuple of flags per test
    n_pairs: np.ndarray
    n_nonzero: np.ndarray
    n_dropped: np.ndarray
    unit_items: np.ndarray  # items with a perturbed row, per unit
    unit_usable: np.ndarray  # items with a usable pair (for some metric), per unit


def _test_stats(lay: _Layout, zero_method: str, method: str, correction: bool) -> _TestStats:
    """Every test's p-value, method and flags, one Wilcoxon batch per group of similar widths.

    A batch is a (tests × items) matrix of the tests of groups of similar size (group widths in
    [2^(k-1), 2^k) share one, so padding at most doubles the memory)."""
    n_test, n_unit = len(lay.test_unit), len(lay.unit_group)
    st = _TestStats(p=np.full(n_test, np.nan), used=np.full(n_test, "none", dtype=object),
                    flags=np.full(n_test, None, dtype=object), n_pairs=np.zeros(n_test, np.int64),
                    n_nonzero=np.zeros(n_test, np.int64), n_dropped=np.zeros(n_test, np.int64),
                    unit_items=np.zeros(n_unit, np.int64), unit_usable=np.zeros(n_unit, np.int64))
    width = lay.group_width[lay.unit_group[lay.test_unit]]
    bucket = np.frexp(width.astype(float))[1]
    with np.errstate(invalid="ignore"):  # inf − inf: such pairs are not usable anyway
        diff = lay.row_o - lay.row_q
    usable = np.isfinite(lay.row_o) & np.isfinite(lay.row_q)
    for b in np.unique(bucket):
        tests = np.flatnonzero(bucket == b)
        _batch(lay, st, tests, diff, usable, int(width[tests].max()), zero_method, method, correction)
    return st


def _batch(lay, st, tests, diff, usable, width, zero_method, method, correction) -> None:
    """Fill `st` for `tests` (sorted test numbers) from every row's difference `diff` and `usable` flag."""
    # Rows of other tests (and originals, test -1) land in a spare last row, dropped after the scatter:
    # cheaper than selecting this batch's rows first.
    local = np.full(len(lay.test_unit) + 1, len(tests))
    local[tests] = np.arange(len(tests))
    flat = local[lay.row_test] * width + np.minimum(lay.row_item, width - 1)
    present, ok = np.zeros((2, len(tests) + 1, width), bool)
    dm = np.zeros((len(tests) + 1, width))
    present.reshape(-1)[flat] = True
    ok.reshape(-1)[flat] = usable
    dm.reshape(-1)[flat] = diff  # NaN or inf where not usable: the test looks through `ok`
    present, ok, dm = present[:-1], ok[:-1], dm[:-1]
    t = wilcoxon_greater_many(dm, ok, zero_method, method, correction)
    st.p[tests], st.used[tests], st.flags[tests] = t.p, t.method_used, t.flags
    st.n_pairs[tests], st.n_nonzero[tests] = t.n_pairs, t.n_nonzero
    st.n_dropped[tests] = present.sum(axis=1) - t.n_pairs
    tu = lay.test_unit[tests]
    heads = np.flatnonzero(np.r_[True, tu[1:] != tu[:-1]])  # a unit's tests are adjacent
    st.unit_items[tu[heads]] = np.logical_or.reduceat(present, heads, axis=0).sum(axis=1)
    st.unit_usable[tu[heads]] = np.logical_or.reduceat(ok, heads, axis=0).sum(axis=1)


def _combine_units(p_test: np.ndarray, starts: np.ndarray, ew_units: list, combine: str):
    """Every unit's combined p, unweighted and with its expert weights (p_EW = p for a single metric):
    the units' metric p-values as rows of a (units × metrics) matrix, NaN where a unit has fewer."""
    k = np.diff(starts)
    rows = np.repeat(np.arange(len(k)), k)
    cols = np.arange(len(p_test)) - np.repeat(starts[:-1], k)
    pm, wm = np.full((len(k), k.max()), np.nan), np.zeros((len(k), k.max()))
    pm[rows, cols] = p_test
    weighted = np.array([w is not None for w in ew_units])
    for u in np.flatnonzero(weighted):
        wm[u, : k[u]] = ew_units[u]
    p = combine_rows(pm, None, combine)
    return p, np.where(weighted, combine_rows(pm, wm, combine), p)


def spread_interval(draws, lo_q: float, hi_q: float) -> tuple[float, float]:
    """The percentile interval of bootstrap draws of D; NaN where it has no width: every draw gave the same D (a
    judge whose scores never move: D = 0 on every resample), which says nothing about its precision."""
    lo, hi = (float(v) for v in np.nanpercentile(draws, [lo_q, hi_q]))
    return (math.nan, math.nan) if no_width(lo, hi) else (lo, hi)


BOOT_COLUMNS = ("D_lo", "D_hi", "D_EW_lo", "D_EW_hi", "share_D_gt_1", "share_D_EW_gt_1")


def _point_table(s, lay, codes, st, ew_units, zero_method, method, combine, n_boot, seed) -> pd.DataFrame:
    """The discernment rows from the per-test statistics (the bootstrap columns NaN)."""
    starts, heads = lay.unit_start, lay.unit_start[:-1]
    p, p_ew = _combine_units(st.p, starts, ew_units, combine)
    n_dropped = np.add.reduceat(st.n_dropped, heads)
    floor = (np.isfinite(p) & (p < P_FLOOR)) | (np.isfinite(p_ew) & (p_ew < P_FLOOR))
    metric = codes["metric"][1][lay.test_metric].tolist()
    pt, used, flags = st.p.tolist(), st.used.tolist(), st.flags.tolist()
    by_metric, methods, notes = [], [], []
    for u, (a, b) in enumerate(zip(heads.tolist(), starts[1:].tolist())):
        by_metric.append(";".join(f"{metric[i]}={pt[i]:.6g}" for i in range(a, b)))
        methods.append(";".join(f"{metric[i]}={used[i]}" for i in range(a, b)))
        note = [f"{f}:{metric[i]}" for i in range(a, b) for f in flags[i]]
        notes.append(";".join(note + ["nan_dropped"] * bool(n_dropped[u]) + ["p_floor"] * bool(floor[u])))
    keys = [lay.group_keys[g] for g in lay.unit_group.tolist()]
    pert = codes["perturbation"][1][lay.unit_pert].tolist()
    cols = {
        **{c: [k[i] for k in keys] for i, c in enumerate(GROUP)},
        "perturbation": pert, "severity": codes["severity"][1][lay.unit_sev].tolist(),
        "level": [str(v) for v in s["level"].iloc[lay.unit_first].tolist()],
        "role": ["negative_control" if x == CONTROL else "perturbation" for x in pert],
        "p": p, "p_EW": p_ew, "D": discernment_score(p), "D_EW": discernment_score(p_ew),
        **{c: np.full(len(p), np.nan) for c in BOOT_COLUMNS},
        "n_metrics": np.diff(starts), "n_items": st.unit_items, "n_pairs_min": np.minimum.reduceat(st.n_pairs, heads),
        "n_nonzero_min": np.minimum.reduceat(st.n_nonzero, heads), "n_dropped_nan": n_dropped,
        "p_by_metric": by_metric, "method_used": methods, "zero_method": [zero_method] * len(p),
        "method": [method] * len(p), "combine": [combine] * len(p), "n_boot": np.full(len(p), int(n_boot)),
        "seed": np.full(len(p), int(seed)), "flags": notes,
    }  # fmt: skip
    return pd.DataFrame(cols, columns=DISCERNMENT_COLUMNS)


def _bootstrap(out, s, ew, usable, n_boot, seed, zero_method, method, correction, combine, ci) -> list:
    """Fill the bootstrap columns of `out` unit by unit and return the draws (one frame per unit).
    The same resampled items serve every perturbation and metric of a judge: keeps their dependence.
    `usable`: per row of `out`, the items with a usable pair; below MIN_BOOT_ITEMS the row gets no
    interval (NaN) and the flag few_items_for_interval:<k> (its draws are still returned)."""
    row_of = {k: i for i, k in enumerate(zip(*(out[c].tolist() for c in GROUP + ["perturbation", "severity"])))}
    cols = {c: out[c].to_numpy(dtype=float, copy=True) for c in BOOT_COLUMNS}
    flags = out["flags"].tolist()
    lo_q, hi_q = 100 * (1 - ci) / 2, 100 * (1 + ci) / 2
    boots = []
    for key, g in s.groupby(GROUP, sort=True):
        items = sorted(g["item_id"].unique())
        idx = resample_items(len(items), n_boot, group_seed(seed, key), "bootstrap")
        for u in _units(g, items, ew):
            i = row_of[(*key, u.perturbation, u.severity)]
            bd, bde = _boot_d(u, idx, zero_method, method, correction, combine)
            if usable[i] < MIN_BOOT_ITEMS:
                flags[i] = ";".join([f for f in [flags[i]] if f] + [f"{FEW_ITEMS}:{int(usable[i])}"])
            else:
                cols["D_lo"][i], cols["D_hi"][i] = spread_interval(bd, lo_q, hi_q)
                cols["D_EW_lo"][i], cols["D_EW_hi"][i] = spread_interval(bde, lo_q, hi_q)
                cols["share_D_gt_1"][i], cols["share_D_EW_gt_1"][i] = float(np.mean(bd > 1)), float(np.mean(bde > 1))
            role = "negative_control" if u.perturbation == CONTROL else "perturbation"
            ident = {**dict(zip(GROUP, key)), "perturbation": u.perturbation, "severity": u.severity,
                     "level": u.level, "role": role}
            boots.append(pd.DataFrame({**ident, "boot": np.arange(n_boot), "D": bd, "D_EW": bde}))
    if len(out):
        for c, v in cols.items():
            out[c] = v
        out["flags"] = flags
    return boots


class Discernment(NamedTuple):
    """What :func:`discernment` returns: the discernment ``table``, the ``bootstrap`` draws behind its intervals
    (columns dataset, judge, mode, perturbation, severity, level, role, boot, D, D_EW; None without draws) and the
    intervals' coverage ``ci``; :func:`summarize` takes it whole, to give D_avg/D_min the same intervals."""

    table: pd.DataFrame
    bootstrap: pd.DataFrame | None
    ci: float


def discernment(
    scores: pd.DataFrame,
    expert_weights=None,
    combine: str = "paper",
    n_boot: int = 0,
    seed: int = 0,
    zero_method: str = "wilcox",
    method: str = "auto",
    correction: bool = False,
    ci: float = 0.95,
) -> Discernment:
    """Discernment table: one row per (dataset, judge, mode, perturbation, severity), returned as
    :class:`Discernment` ``(table, bootstrap, ci)``.

    Parameters
    ----------
    scores : the scores table (contract schema: dataset, judge, mode, item_id, perturbation, severity,
        level, metric, score, ...). Rows with perturbation "original" are the reference.
    expert_weights : None (the shipped `dhp/resources/expert_weights.csv`), a path, or a DataFrame with columns
        task, perturbation, metric, votes, weight. Single-metric cases (likelihood mode, QA) use weight 1.
    combine : "paper" (p = 1/Σ 1/p_j, as printed) or "wilson" (weighted harmonic mean, weights sum to 1).
    n_boot, seed : bootstrap resamples of items (0 = none) and the seed of their generator.
    zero_method, method, correction : passed to scipy.stats.wilcoxon (scipy's defaults); see
        :func:`resolve_method` for how "auto"/"exact" are resolved and recorded.
    ci : coverage of the percentile intervals.

    Returns
    -------
    DataFrame with columns
        dataset, judge, mode, perturbation, severity, level : the perturbation (level from the scores table)
        role : "perturbation", or "negative_control" for the control row (excluded from D_avg/D_min)
        p, p_EW : combined p-values (harmonic mean; without / with expert weights)
        D, D_EW : log_0.05 of p and p_EW (p clipped to >= P_FLOOR); D > 1 means p < 0.05
        D_lo, D_hi, D_EW_lo, D_EW_hi : bootstrap percentile interval (NaN when n_boot = 0, or when fewer than
            MIN_BOOT_ITEMS items have a usable pair: flag few_items_for_interval)
        share_D_gt_1, share_D_EW_gt_1 : share of bootstrap resamples with D > 1 (NaN as the interval)
        n_metrics : metrics combined
        n_items : items with a perturbed row for this perturbation
        n_pairs_min, n_nonzero_min : smallest number of usable pairs / nonzero differences over metrics
        n_dropped_nan : pairs dropped because a score was NaN, summed over metrics
        p_by_metric : "metric=p;..." the per-metric Wilcoxon p-values
        method_used : "metric=method;..." null distribution actually used per metric
        zero_method, method : as requested
        combine, n_boot, seed : as requested
        flags : ";"-joined notes: all_zero:<metric>, no_pairs:<metric>, exact_fallback:<metric>,
                nan_dropped, p_floor (p was clipped before the log), few_items_for_interval:<k> (n_boot > 0
                and only k < MIN_BOOT_ITEMS items have a usable pair for some metric: no interval)

    The bootstrap draws (columns dataset, judge, mode, perturbation, severity, level, role, boot, D, D_EW)
    are returned beside the table (``bootstrap``), so :func:`summarize` can give intervals for D_avg/D_min.

    Long only in this documentation of the parameters and the columns; the work is in `_layout`,
    `_test_stats`, `_point_table` and `_bootstrap`.
    """
    if zero_method not in ZERO_METHODS:
        raise DHPError(f"Unknown zero_method={zero_method!r}.", f"use one of {list(ZERO_METHODS)}.")
    if method not in METHODS:
        raise DHPError(f"Unknown method={method!r}.", f"use one of {list(METHODS)}.")
    if combine not in COMBINES:
        raise DHPError(f"Unknown combine={combine!r}.", f"use one of {list(COMBINES)}.")
    if not (isinstance(n_boot, (int, np.integer)) and n_boot >= 0):
        raise DHPError(f"n_boot must be a non-negative integer, got {n_boot!r}.", "pass e.g. n_boot=1000.")
    s, codes = _checked_with_codes(scores)
    ew = _weights_lookup(expert_weights)
    lay = _layout(s, codes)
    ew_units = _unit_weights(s, lay, codes, ew)
    if len(lay.unit_group):
        st = _test_stats(lay, zero_method, method, correction)
        out = _point_table(s, lay, codes, st, ew_units, zero_method, method, combine, n_boot, seed)
    else:
        out = pd.DataFrame([], columns=DISCERNMENT_COLUMNS)
    boots = (_bootstrap(out, s, ew, st.unit_usable, n_boot, seed, zero_method, method, correction, combine, ci)
             if n_boot and len(out) else [])
    return Discernment(out, pd.concat(boots, ignore_index=True) if boots else None, ci)


DISCERNMENT_COLUMNS = [
    "dataset", "judge", "mode", "perturbation", "severity", "level", "role",
    "p", "p_EW", "D", "D_EW", "D_lo", "D_hi", "D_EW_lo", "D_EW_hi", "share_D_gt_1", "share_D_EW_gt_1",
    "n_metrics", "n_items", "n_pairs_min", "n_nonzero_min", "n_dropped_nan", "p_by_metric", "method_used",
    "zero_method", "method", "combine", "n_boot", "seed", "flags",
]  # fmt: skip

SUMMARY_COLUMNS = [
    "dataset", "judge", "mode", "D_avg", "D_avg_EW", "D_min", "D_min_EW",
    "D_avg_lo", "D_avg_hi", "D_avg_EW_lo", "D_avg_EW_hi", "D_min_lo", "D_min_hi", "D_min_EW_lo", "D_min_EW_hi",
    "share_D_avg_gt_1", "share_D_avg_EW_gt_1", "weakest", "control_D", "control_D_EW",
    "null_fpr_paper", "null_fpr_wilson", "null_fpr_avg_paper", "null_fpr_avg_wilson", "n_null",
    "n_perturbations", "n_perturbations_nan", "levels", "combine", "n_boot", "interval_note",
]  # fmt: skip

NULL_COLUMNS = ["dataset", "judge", "mode", "null_fpr_paper", "null_fpr_wilson", "null_fpr_avg_paper",
                "null_fpr_avg_wilson", "n_null"]


def summarize(discernment: "Discernment | pd.DataFrame", bootstrap: pd.DataFrame | None = None,
              null: pd.DataFrame | None = None, ci: float | None = None) -> pd.DataFrame:
    """Summary table: one row per (dataset, judge, mode).

    Columns
        dataset, judge, mode
        D_avg, D_avg_EW : level-balanced average of D / D_EW over perturbations (control excluded)
        D_min, D_min_EW : minimum over perturbations (control excluded)
        D_avg_lo, D_avg_hi, D_avg_EW_lo, D_avg_EW_hi, D_min_lo, D_min_hi, D_min_EW_lo, D_min_EW_hi :
            bootstrap percentile intervals (NaN without bootstrap draws)
        share_D_avg_gt_1, share_D_avg_EW_gt_1 : share of resamples with D_avg > 1
        weakest : the perturbation/severity giving D_min
        control_D, control_D_EW : D of the negative control (the original re-scored by its own call):
            the judge's test-retest noise; a discerning judge's D_min should stand well above it; NaN if absent
        null_fpr_paper, null_fpr_wilson, null_fpr_avg_paper, null_fpr_avg_wilson, n_null : from
            ``null`` (:func:`null_calibration`), NaN when not given
        n_perturbations : perturbation rows averaged; n_perturbations_nan : rows left out (D is NaN)
        levels : levels present (";"-joined); combine, n_boot : as in the discernment table
        interval_note : why the intervals and share_D_avg_gt_1 are NaN although draws exist: a perturbation
            of the judge (control excluded, D finite) had fewer than MIN_BOOT_ITEMS items with a usable pair
            (flag few_items_for_interval in the discernment table), so neither D_min's nor D_avg's interval
            would rest on enough items; "" otherwise

    ``discernment``: what :func:`discernment` returned (its bootstrap draws and ``ci`` give the intervals), or a
    discernment table alone (e.g. read back from discernment.csv: no intervals unless ``bootstrap`` is given).
    ``bootstrap`` / ``ci``: given, they take the place of the result's (``ci`` default 0.95).
    """
    nulls = {} if null is None else {tuple(r[c] for c in GROUP): r for r in null.to_dict("records")}
    if isinstance(discernment, Discernment):
        bootstrap = discernment.bootstrap if bootstrap is None else bootstrap
        ci = discernment.ci if ci is None else ci
        discernment = discernment.table
    ci = 0.95 if ci is None else ci
    lo_q, hi_q = 100 * (1 - ci) / 2, 100 * (1 + ci) / 2
    # Columns as arrays once; per group only positions are sliced (pandas per group dominated large tables).
    col = {c: discernment[c].to_numpy() for c in ("perturbation", "severity", "level")}
    col.update({c: discernment[c].to_numpy(dtype=float) for c in ("D", "D_EW")})
    combines = discernment["combine"].astype(str).to_numpy() if "combine" in discernment else None
    n_boots = discernment["n_boot"].to_numpy(dtype=float) if "n_boot" in discernment else None
    flags = discernment["flags"].astype(str).to_numpy() if "flags" in discernment else np.full(len(discernment), "")
    gb = discernment.groupby(GROUP, sort=True)
    rows = []
    for key in gb.size().index.tolist():
        pos = gb.indices[key]
        row = dict(zip(GROUP, key))
        row.update({c: math.nan for c in SUMMARY_COLUMNS if c not in GROUP})
        row.update(_point_summary(pos, col))
        row.update(combine=";".join(sorted(set(combines[pos]))) if combines is not None else "",
                   n_boot=int(np.nanmax(n_boots[pos])) if n_boots is not None else 0)
        if key in nulls:
            row.update({c: nulls[key][c] for c in NULL_COLUMNS[3:]})
        row["interval_note"] = _withheld(pos, col, flags)
        if bootstrap is not None and len(bootstrap) and not row["interval_note"]:
            row.update(_summary_intervals(bootstrap, key, lo_q, hi_q))
        rows.append(row)
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def _nanmin(x: np.ndarray) -> float:
    """Series.min(): the smallest value that is not NaN, NaN if there is none."""
    x = x[~np.isnan(x)]
    return float(x.min()) if len(x) else math.nan


def _point_summary(pos: np.ndarray, col: dict) -> dict:
    """D_avg, D_min, the weakest perturbation, the control's D and the counts of one group (rows `pos`)."""
    pert = col["perturbation"][pos]
    real, ctrl = pos[pert != CONTROL], pos[pert == CONTROL]
    d, d_ew, lv = col["D"][real], col["D_EW"][real], col["level"][real]
    fin = real[np.isfinite(d)]
    weakest = fin[np.argmin(col["D"][fin])] if len(fin) else None
    return dict(
        D_avg=level_balanced_mean(d, lv),
        D_avg_EW=level_balanced_mean(d_ew, lv),
        D_min=_nanmin(d) if len(fin) else math.nan,
        D_min_EW=_nanmin(d_ew) if len(fin) else math.nan,
        weakest=f"{col['perturbation'][weakest]}/{col['severity'][weakest]}" if len(fin) else "",
        control_D=float(col["D"][ctrl[0]]) if len(ctrl) else math.nan,
        control_D_EW=float(col["D_EW"][ctrl[0]]) if len(ctrl) else math.nan,
        n_perturbations=int(len(fin)),
        n_perturbations_nan=int(len(real) - len(fin)),
        levels=";".join(lv for lv in LEVELS if lv in set(col["level"][fin])),
    )


def _withheld(pos: np.ndarray, col: dict, flags: np.ndarray) -> str:
    """Why a group's summary intervals are withheld ("" if they are not): its perturbations (rows `pos`,
    control excluded, D finite) whose own interval was withheld for too few items."""
    real = pos[(col["perturbation"][pos] != CONTROL) & np.isfinite(col["D"][pos])]
    few = [i for i in real if FEW_ITEMS in flags[i]]
    if not few:
        return ""
    names = ", ".join(f"{col['perturbation'][i]}/{col['severity'][i]}" for i in few[:3]) + ", ..." * (len(few) > 3)
    return (f"no interval: {len(few)} of {len(real)} perturbations have fewer than {MIN_BOOT_ITEMS} items with a "
            f"usable pair ({names})")


def _summary_intervals(bootstrap: pd.DataFrame, key, lo_q: float, hi_q: float) -> dict:
    """Percentile intervals of D_avg/D_min and the share of D_avg > 1 over one group's bootstrap draws."""
    b = bootstrap
    sel = np.ones(len(b), bool)
    for c, v in zip(GROUP, key):
        sel &= b[c].to_numpy() == v
    b = b[sel & (b["perturbation"] != CONTROL).to_numpy()]
    agg = {}
    if not len(b):
        return agg
    for col, name in (("D", "D"), ("D_EW", "D_EW")):
        wide = b.pivot_table(index="boot", columns=["perturbation", "severity"], values=col)
        if wide.shape[1] == 0:  # every D is NaN (no usable pair): no interval to give
            continue
        lv = (
            b.drop_duplicates(["perturbation", "severity"])
            .set_index(["perturbation", "severity"])["level"]
            .reindex(wide.columns)
        )
        avg = level_balanced_rows(wide.to_numpy(), lv)
        mn = np.nanmin(wide.to_numpy(), axis=1)
        sfx = "" if name == "D" else "_EW"
        agg[f"D_avg{sfx}_lo"], agg[f"D_avg{sfx}_hi"] = spread_interval(avg, lo_q, hi_q)
        agg[f"D_min{sfx}_lo"], agg[f"D_min{sfx}_hi"] = spread_interval(mn, lo_q, hi_q)
        agg[f"share_D_avg{sfx}_gt_1"] = float(np.mean(avg > 1))
    return {k: float(v) for k, v in agg.items()}



# --------------------------------------------------------------------------------------------------
# Sign-flip null calibration
# --------------------------------------------------------------------------------------------------
def null_calibration(scores: pd.DataFrame, n_null: int = 1000, seed: int = 0, zero_method: str = "wilcox",
                     method: str = "auto", correction: bool = False) -> pd.DataFrame:
    """False-positive rates of "D > 1" for a judge that cannot see the damage, from its own scores.

    Per (dataset, judge, mode), ``n_null`` times: every item's paired differences (original − perturbed)
    get a random sign, the SAME for all metrics and perturbations of the item (so their dependence is
    kept); then per-metric p (one-sided Wilcoxon, same method rules as :func:`discernment`), combined p
    under ``combine="paper"`` and ``"wilson"``, D = log_0.05(p) and the level-balanced D_avg (control
    excluded). Under this null no perturbation is noticed, so every D > 1 is a false positive.

    Columns (NULL_COLUMNS): dataset, judge, mode; null_fpr_paper, null_fpr_wilson — share of
    per-perturbation null D values above 1 (over resamples × perturbations); null_fpr_avg_paper,
    null_fpr_avg_wilson — share of resamples with D_avg > 1; n_null. A calibrated rule has rates near or
    below 0.05. The resampling seed comes from ``seed`` and a hash of the group key.
    """
    if not (isinstance(n_null, (int, np.integer)) and n_null >= 1):
        raise DHPError(f"n_null must be a positive integer, got {n_null!r}.", "pass e.g. n_null=1000.")
    if zero_method not in ZERO_METHODS:
        raise DHPError(f"Unknown zero_method={zero_method!r}.", f"use one of {list(ZERO_METHODS)}.")
    if method not in METHODS:
        raise DHPError(f"Unknown method={method!r}.", f"use one of {list(METHODS)}.")
    s = _check_scores(scores)
    rows = []
    for key, g in s.groupby(GROUP, sort=True):
        items = sorted(g["item_id"].unique())
        units = [u for u in _units(g, items, None) if u.perturbation != CONTROL]
        row = dict(zip(GROUP, key), n_null=int(n_null))
        if not units:
            rows.append({**row, **{f"null_fpr{a}_{c}": math.nan for c in COMBINES for a in ("", "_avg")}})
            continue
        flips = resample_items(len(items), n_null, group_seed(seed, key), "sign_flip")
        d, ok = (np.concatenate(x) for x in zip(*map(_unit_diffs, units)))  # every test of the judge
        p = wilcoxon_greater_many(d, ok, zero_method, method, correction, flips=flips).p  # tests × n_null
        bounds = np.cumsum([0] + [len(u.metrics) for u in units])
        levels = [u.level for u in units]
        for c in COMBINES:
            dm = np.column_stack([discernment_score(combine_rows(p[a:b].T, None, c))
                                  for a, b in zip(bounds[:-1], bounds[1:])])  # n_null × units
            fin = np.isfinite(dm)
            row[f"null_fpr_{c}"] = float((dm[fin] > 1).mean()) if fin.any() else math.nan
            avg = level_balanced_rows(dm, levels)
            row[f"null_fpr_avg_{c}"] = float(np.mean(avg[np.isfinite(avg)] > 1)) if np.isfinite(avg).any() else math.nan
        rows.append(row)
    return pd.DataFrame(rows, columns=NULL_COLUMNS)


def summary_draws(scores: pd.DataFrame, items: list, idx: np.ndarray, measure: str = "D_avg",
                  zero_method: str = "wilcox", method: str = "auto", combine: str = "paper") -> np.ndarray:
    """``measure`` (D_avg or D_min, expert weights not applied) of ONE judge's scores for every row of ``idx`` (a
    resample: positions into ``items``), computed unit by unit on the resampled items as the bootstrap does — so
    two judges resampled with the same ``idx`` are compared on the same items (the leaderboard's paired test)."""
    s = _check_scores(scores)
    if s[GROUP].drop_duplicates().shape[0] != 1:
        raise DHPError("summary_draws takes the scores of one dataset × judge × mode.", "split the table first.")
    units = [u for u in _units(s, list(items), None) if u.perturbation != CONTROL]
    if not units:
        return np.full(len(idx), math.nan)
    d = np.column_stack([_boot_d(u, idx, zero_method, method, False, combine)[0] for u in units])
    if measure == "D_min":
        return np.array([_nanmin(row) for row in d])
    levels = np.array([u.level for u in units], dtype=object)
    return np.array([level_balanced_mean(row, levels) for row in d])
