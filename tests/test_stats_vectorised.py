"""The vectorised statistics (all tests of a table at once, the bootstrap's resamples as rows of one batch)
against the previous per-unit path (kept below and in stats_reference as the reference: scipy-checked
per-test Wilcoxon and 1-D combine_p per perturbation, the bootstrap one resample at a time) and scipy."""

import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats as sps
from hypothesis import given, settings
from hypothesis import strategies as st
from test_stats_fixtures import PERTURBATIONS, synth_scores

import dhp.analysis.discernment as dm
from dhp.analysis.discernment import (
    DISCERNMENT_COLUMNS,
    GROUP,
    P_FLOOR,
    SUMMARY_COLUMNS,
    _units,
    _weights_lookup,
    discernment,
    group_seed,
    level_balanced_mean,
    summarize,
)
from dhp.errors import DHPError
from dhp.stats.wilcoxon import SCIPY_ASYMPTOTIC
from stats_reference import boot_d as _boot_d
from stats_reference import combine_p, discernment_score, wilcoxon_greater
from dhp.schema import CONTROL, DATASET_TASK, LEVELS, ORIGINAL


# ---------------------------------------------------------------- the previous path, as it was
def _slow_check(scores):
    s = scores.copy()
    for c in ("dataset", "judge", "mode", "item_id", "perturbation", "severity", "level", "metric"):
        s[c] = s[c].astype(str)
    if "task" not in s.columns:
        s["task"] = s["dataset"].map(DATASET_TASK)
    s["score"] = pd.to_numeric(s["score"], errors="coerce")
    key = ["dataset", "judge", "mode", "item_id", "perturbation", "severity", "metric"]
    dup = s.duplicated(key)
    if dup.any():
        row = s.loc[dup, key].iloc[0].to_dict()
        raise DHPError(
            f"The scores table has {int(dup.sum())} duplicate rows (e.g. {row}).",
            "keep one score per item, variant and metric (average repeated samples before).",
        )
    return s


def _slow_row(key, u, idx, zero_method, method, correction, combine, n_boot, seed, ci):
    tests = [wilcoxon_greater(u.orig[j][u.present[j]], u.pert[j][u.present[j]], zero_method, method, correction)
             for j in range(len(u.metrics))]
    pj = [t.p for t in tests]
    p = combine_p(pj, None, combine)
    p_ew = p if u.ew is None else combine_p(pj, u.ew, combine)
    flags = [f"{f}:{m}" for m, t in zip(u.metrics, tests) for f in t.flags]
    if any(t.n_dropped_nan for t in tests):
        flags.append("nan_dropped")
    if (np.isfinite(p) and p < P_FLOOR) or (np.isfinite(p_ew) and p_ew < P_FLOOR):
        flags.append("p_floor")
    role = "negative_control" if u.perturbation == CONTROL else "perturbation"
    ident = {**dict(zip(GROUP, key)), "perturbation": u.perturbation, "severity": u.severity, "level": u.level,
             "role": role}
    row = {**ident, "p": p, "p_EW": p_ew, "D": discernment_score(p), "D_EW": discernment_score(p_ew),
           "D_lo": math.nan, "D_hi": math.nan, "D_EW_lo": math.nan, "D_EW_hi": math.nan,
           "share_D_gt_1": math.nan, "share_D_EW_gt_1": math.nan, "n_metrics": len(u.metrics),
           "n_items": int(u.present.any(axis=0).sum()), "n_pairs_min": min(t.n_pairs for t in tests),
           "n_nonzero_min": min(t.n_nonzero for t in tests), "n_dropped_nan": sum(t.n_dropped_nan for t in tests),
           "p_by_metric": ";".join(f"{m}={t.p:.6g}" for m, t in zip(u.metrics, tests)),
           "method_used": ";".join(f"{m}={t.method_used}" for m, t in zip(u.metrics, tests)),
           "zero_method": zero_method, "method": method, "combine": combine, "n_boot": int(n_boot),
           "seed": int(seed), "flags": ";".join(flags)}
    if not n_boot:
        return row, None
    bd, bde = _boot_d(u, idx, zero_method, method, correction, combine)
    lo_q, hi_q = 100 * (1 - ci) / 2, 100 * (1 + ci) / 2
    usable = int((u.present & np.isfinite(u.orig - u.pert)).any(axis=0).sum())
    if usable < 5:  # too few resampling units: no interval (NaN), flagged
        row["flags"] = ";".join([f for f in [row["flags"]] if f] + [f"few_items_for_interval:{usable}"])
        return row, pd.DataFrame({**ident, "boot": np.arange(n_boot), "D": bd, "D_EW": bde})
    def interval(x):  # an interval of no width (every draw the same D) is none: NaN (STATS_VERSION 5)
        lo, hi = float(np.nanpercentile(x, lo_q)), float(np.nanpercentile(x, hi_q))
        return (math.nan, math.nan) if abs(hi - lo) <= 1e-12 * max(1.0, abs(lo)) else (lo, hi)

    (d_lo, d_hi), (ew_lo, ew_hi) = interval(bd), interval(bde)
    row.update(D_lo=d_lo, D_hi=d_hi, D_EW_lo=ew_lo, D_EW_hi=ew_hi,
               share_D_gt_1=float(np.mean(bd > 1)), share_D_EW_gt_1=float(np.mean(bde > 1)))
    return row, pd.DataFrame({**ident, "boot": np.arange(n_boot), "D": bd, "D_EW": bde})


def _slow_discernment(scores, expert_weights=None, combine="paper", n_boot=0, seed=0, zero_method="wilcox",
                      method="auto", correction=False, ci=0.95):
    s = _slow_check(scores)
    ew = _weights_lookup(expert_weights)
    rows, boots = [], []
    for key, g in s.groupby(GROUP, sort=True):
        if not (g["perturbation"] == ORIGINAL).any():
            raise DHPError(
                f"No 'original' rows for dataset/judge/mode {key}.",
                "score the original texts too (notebook 02 does this by default).",
            )
        items = sorted(g["item_id"].unique())
        units = _units(g, items, ew)
        idx = (np.random.default_rng(group_seed(seed, key)).integers(0, len(items), size=(n_boot, len(items)))
               if n_boot else None)
        for u in units:
            row, boot = _slow_row(key, u, idx, zero_method, method, correction, combine, n_boot, seed, ci)
            rows.append(row)
            if boot is not None:
                boots.append(boot)
    out = pd.DataFrame(rows, columns=DISCERNMENT_COLUMNS)
    return dm.Discernment(out, pd.concat(boots, ignore_index=True) if boots else None, ci)


def _slow_summarize(discernment):
    """The point columns of the former summarize (its bootstrap part is unchanged code)."""
    rows = []
    for key, g in discernment.groupby(GROUP, sort=True):
        real = g[g["perturbation"] != CONTROL]
        plc = g[g["perturbation"] == CONTROL]
        fin = real[np.isfinite(real["D"].astype(float))]
        row = dict(zip(GROUP, key))
        row.update({c: math.nan for c in SUMMARY_COLUMNS if c not in GROUP})
        row.update(
            D_avg=level_balanced_mean(real["D"], real["level"]),
            D_avg_EW=level_balanced_mean(real["D_EW"], real["level"]),
            D_min=float(real["D"].min()) if len(fin) else math.nan,
            D_min_EW=float(real["D_EW"].min()) if len(fin) else math.nan,
            weakest=(f"{fin.loc[fin['D'].idxmin(), 'perturbation']}/{fin.loc[fin['D'].idxmin(), 'severity']}"
                     if len(fin) else ""),
            control_D=float(plc["D"].iloc[0]) if len(plc) else math.nan,
            control_D_EW=float(plc["D_EW"].iloc[0]) if len(plc) else math.nan,
            n_perturbations=int(len(fin)),
            n_perturbations_nan=int(len(real) - len(fin)),
            levels=";".join(lv for lv in LEVELS if lv in set(fin["level"])),
            combine=";".join(sorted(set(g["combine"].astype(str)))) if "combine" in g else "",
            n_boot=int(g["n_boot"].max()) if "n_boot" in g else 0,
            interval_note="",
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


# ---------------------------------------------------------------- tables with every case in them
def _noisy(s, seed, sd=0.1):
    s = s.copy()
    s["score"] = s["score"] + np.random.default_rng(seed).normal(0, sd, len(s))
    return s


def _with_gaps(seed=9):
    """NaN scores, missing rows, a unit with all-zero differences, a metric without any pair."""
    s = synth_scores(n=25, seed=seed)
    rng = np.random.default_rng(seed)
    s.loc[rng.random(len(s)) < 0.1, "score"] = np.nan
    orig = s[s["perturbation"] == "original"].set_index(["item_id", "metric"])["score"]
    hit = (s["perturbation"] == "char_typo") & (s["severity"] == "major")
    s.loc[hit, "score"] = [orig[(i, m)] for i, m in zip(s.loc[hit, "item_id"], s.loc[hit, "metric"])]
    s.loc[(s["perturbation"] == "char_deletion") & (s["metric"] == "fluency"), "score"] = np.nan
    return s.drop(index=s.index[rng.random(len(s)) < 0.05])


def _many_metrics():
    """Nine metrics (the combination then sums more than 8 terms)."""
    s = synth_scores(n=14, seed=11)
    extra = [s[s["metric"] == "fluency"].assign(metric=f"z{k}") for k in range(5)]
    return _noisy(pd.concat([s, *extra], ignore_index=True), 11, 0.4).round(0)


def _duplicate_originals():
    """Two original rows for one item and metric (different severities): the later one counts."""
    s = synth_scores(n=12, seed=12)
    again = s[(s["perturbation"] == "original") & s["item_id"].isin(["i1", "i4"])].assign(severity="again")
    return pd.concat([s, again.assign(score=again["score"] - 2)], ignore_index=True)


def _tables():
    big = synth_scores(n=2000, seed=13, perturbations=PERTURBATIONS[:2] + PERTURBATIONS[-1:])
    typo = big["perturbation"] == "char_typo"
    big.loc[typo, "score"] -= 50 * np.arange(int(typo.sum()))  # p underflows: the p_floor flag
    partial = synth_scores(n=15, seed=10)
    partial = partial[~((partial["perturbation"] == "fictional_entities") & (partial["metric"] == "relevance"))]
    return {
        "mixed_sizes": pd.concat([synth_scores(n=6, seed=1, judge="a"), synth_scores(n=30, seed=2, judge="b"),
                                  synth_scores(n=60, seed=3, judge="c"),
                                  synth_scores(n=9, seed=4, judge="d", mode="likelihood"),
                                  synth_scores(n=8, seed=5, dataset="pubmedqa", judge="e")]),
        "continuous": pd.concat([_noisy(synth_scores(n=20, seed=6), 6),
                                 _noisy(synth_scores(n=70, seed=7, judge="x"), 7)]),
        "gaps": _with_gaps(),
        "partial": pd.concat([partial, synth_scores(n=15, seed=14, judge="zz").assign(score=np.nan)]),
        "many_metrics": _many_metrics(),
        "duplicate_originals": _duplicate_originals(),
        "shuffled": synth_scores(n=12, seed=15).sample(frac=1, random_state=1),
        "p_floor": big,
    }


TABLES = _tables()
OPTIONS = [
    {}, {"combine": "wilson"}, {"zero_method": "pratt"}, {"zero_method": "zsplit"}, {"method": "exact"},
    {"method": "asymptotic", "correction": True}, {"method": "permutation"},
    {"zero_method": "zsplit", "method": "asymptotic", "correction": True, "combine": "wilson"},
]


# every table under every option, but p_floor with method=exact: scipy's exact null for 2,000 pairs takes seconds
# per call (both paths make the call), so that pair is not generated (no skip to hide in the summary)
CASES = [pytest.param(name, opts, id=f"{','.join(f'{k}={v}' for k, v in opts.items()) or 'defaults'}-{name}")
         for opts in OPTIONS for name in sorted(TABLES) if not (name == "p_floor" and opts.get("method") == "exact")]


@pytest.mark.parametrize("name,opts", CASES)
def test_discernment_and_summary_equal_the_previous_path(name, opts):
    new = discernment(TABLES[name], **opts).table
    old = _slow_discernment(TABLES[name], **opts).table
    pd.testing.assert_frame_equal(new, old, check_exact=True)
    pd.testing.assert_frame_equal(summarize(new), _slow_summarize(old), check_exact=True)


def test_the_cases_are_in_the_tables():
    d = pd.concat([discernment(t).table for t in TABLES.values()])
    for word in ("exact", "permutation", "asymptotic", "none"):
        assert d["method_used"].str.contains(word).any(), word
    for flag in ("all_zero", "no_pairs", "nan_dropped", "p_floor"):
        assert d["flags"].str.contains(flag).any(), flag
    assert (d["n_metrics"] > 8).any() and d["D"].isna().any()


def test_bootstrap_rows_and_draws_equal_the_previous_path():
    s = TABLES["mixed_sizes"]
    new, old = discernment(s, n_boot=20, seed=3), _slow_discernment(s, n_boot=20, seed=3)
    pd.testing.assert_frame_equal(new.table, old.table, check_exact=True)
    pd.testing.assert_frame_equal(new.bootstrap, old.bootstrap, check_exact=True)
    pd.testing.assert_frame_equal(summarize(new), summarize(old), check_exact=True)


@pytest.mark.parametrize("name", ["mixed_sizes", "gaps", "duplicate_originals", "shuffled"])
def test_hashing_fallbacks_give_the_same_tables(name, monkeypatch):
    """Large key spaces are hashed or sorted instead of tabulated densely: same results."""
    monkeypatch.setattr(dm, "_small_key_space", lambda *a, **k: False)
    pd.testing.assert_frame_equal(discernment(TABLES[name]).table, _slow_discernment(TABLES[name]).table, check_exact=True)


@pytest.mark.parametrize("dense", [True, False])
def test_duplicate_rows_are_reported_as_before(dense, monkeypatch):
    if not dense:
        monkeypatch.setattr(dm, "_small_key_space", lambda *a, **k: False)
    s = synth_scores(n=6, seed=2)
    s = pd.concat([s, s.iloc[[3, 40, 3]]], ignore_index=True)
    with pytest.raises(DHPError) as old:
        _slow_discernment(s)
    with pytest.raises(DHPError) as new:
        discernment(s)
    assert str(new.value) == str(old.value) and "3 duplicate rows" in str(new.value)


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
def test_errors_come_in_the_order_of_the_groups(order):
    """A group without originals and a perturbation without expert weights: the first group's error."""
    no_orig = synth_scores(n=5, seed=1, judge=order[0])
    no_orig = no_orig[no_orig["perturbation"] != "original"]
    no_weights = synth_scores(n=5, seed=2, judge=order[1])
    no_weights.loc[no_weights["perturbation"] == "char_typo", "perturbation"] = "unregistered_thing"
    s = pd.concat([no_orig, no_weights], ignore_index=True)
    with pytest.raises(DHPError) as old:
        _slow_discernment(s)
    with pytest.raises(DHPError) as new:
        discernment(s)
    assert str(new.value) == str(old.value)
    assert ("No 'original'" in str(new.value)) == (order[0] == "a")


def test_a_table_with_originals_only_gives_an_empty_table():
    s = synth_scores(n=5)
    s = s[s["perturbation"] == "original"]
    pd.testing.assert_frame_equal(discernment(s).table, _slow_discernment(s).table)


@pytest.mark.parametrize("zero_method", ["wilcox", "pratt", "zsplit"])
@pytest.mark.parametrize("correction", [False, True])
def test_every_normal_approximation_in_a_table_matches_scipy(zero_method, correction):
    s = synth_scores(n=60, seed=21, mode="likelihood")  # one metric per perturbation, integer scores
    d = discernment(s, zero_method=zero_method, method="asymptotic", correction=correction).table
    orig = s[s["perturbation"] == "original"].set_index("item_id")["score"]
    for r in d.itertuples():
        pert = s[(s["perturbation"] == r.perturbation) & (s["severity"] == r.severity)].set_index("item_id")["score"]
        diff = (orig[pert.index] - pert).to_numpy()
        ref = sps.wilcoxon(diff, zero_method=zero_method, correction=correction, alternative="greater",
                           method=SCIPY_ASYMPTOTIC).pvalue if np.any(diff != 0) else 1.0
        assert r.p == pytest.approx(ref, rel=1e-12, abs=0), r.perturbation


# ---------------------------------------------------------------- the combination, unit by unit
p_or_nan = st.one_of(st.just(math.nan), st.just(0.0), st.floats(1e-320, 1.0))


@settings(max_examples=200, deadline=None)
@given(units=st.lists(st.lists(st.tuples(p_or_nan, st.floats(0.0, 1.0)), min_size=1, max_size=10), min_size=1,
                      max_size=6),
       combine=st.sampled_from(["paper", "wilson"]))
def test_combined_p_of_every_unit_equals_combine_p(units, combine):
    p = np.array([x for u in units for x, _ in u])
    starts = np.cumsum([0] + [len(u) for u in units])
    ew = [None if len(u) == 1 else np.array([w for _, w in u]) for u in units]
    got, got_ew = dm._combine_units(p, starts, ew, combine)
    for i, u in enumerate(units):
        ref = combine_p([x for x, _ in u], None, combine)
        ref_ew = ref if ew[i] is None else combine_p([x for x, _ in u], ew[i], combine)
        np.testing.assert_array_equal([got[i], got_ew[i]], [ref, ref_ew])
