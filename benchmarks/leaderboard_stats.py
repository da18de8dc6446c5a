"""WMT22 zh-en segment-level leaderboard statistics: dhp.stats against google-research/mt-metrics-eval.

Prints (1) acc*_eq (and its ε) of BLEU, chrF, BERTScore, BLEURT-20, COMET-22, MetricX-XXL-MQM and COMETKiwi
from both implementations (must agree to 0.002, same order); (2) seconds per permutation resample for acc*_eq
and tau_b, COMET-22 vs BLEURT-20, both implementations measured side by side on the same draws (their
per-draw values must agree); (3) the time of a full leaderboard over every metric with a refA or source
variant: values, paired permutation tests of every pair with one shared draw matrix, significance clusters,
and item-bootstrap intervals, for tau_b and acc*_eq.

mt-metrics-eval is not a dependency and is not vendored. Fetch it and pass its path (or set MTME_PATH):
    git clone https://github.com/google-research/mt-metrics-eval /tmp/mtme
    python benchmarks/leaderboard_stats.py --mtme /tmp/mtme
It needs only numpy and scipy for the parts used here (its data.py imports apache_beam and dacite, used
only for parallel runs and rating files: stand-in modules are inserted when they are absent). Without it, only dhp.stats' side runs.

Data: <data>/wmt22/mqm_zh-en/zh-en.mqm.seg.score and <data>/wmt22/metric-scores_zh-en/*.seg.score
(default data: the data root, $DHP_DATA_DIR else the per-user cache; fetched when missing: `python -m dhp data
fetch wmt22_mqm_zh_en wmt22_metric_scores_zh_en`). Settings as mt-metrics-eval's GetCorrelations for
level "seg" with main_refs {"refA"} and human outputs included: the MQM-scored systems other than refA.

With --run-dir, only the leaderboard of a run folder is timed, before and after the sequential stop, in one run:
    python -m dhp import-judgments gemba --run-dir runs/gemba
    python benchmarks/leaderboard_stats.py --run-dir runs/gemba [--max-judges 20] [--views segment]
"before": every pair's permutation test with mt-metrics-eval's early stop alone (the numbers of the code before
dhp.stats.permutation.LEADERBOARD_EARLY_STOP); "after": the leaderboard's default. Prints CPU and wall seconds of
each, their ratio, and checks the values and ranks are equal (to 1e-9) and the clusters the same.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.stats as sps

from dhp.datasets import declared_files
from dhp.stats.clusters import assign_ranks, significance_ranks
from dhp.stats.paired import item_bootstrap_draws, percentile_interval, segment_bootstrap
from dhp.stats.permutation import (LEADERBOARD_EARLY_STOP, WMT_EARLY_STOP, _evaluator, _zscore, paired_permutation_test,
                                   permutation_draws, permutation_table)
from dhp.stats.segment import SegmentPairs, kendall_tau_b, pairwise_accuracy, tie_calibrated_accuracy

SEVEN = ["BLEU-refA", "chrF-refA", "BERTScore-refA", "BLEURT-20-refA", "COMET-22-refA",
         "metricx_xxl_MQM_2020-refA", "COMETKiwi-src"]
PRIMARY = {"BERTScore", "BLEURT-20", "BLEU", "chrF", "COMET-20", "COMET-22", "COMETKiwi", "COMET-QE", "f200spBLEU",
           "HWTSC-Teacher-Sim", "MATESE-QE", "MATESE", "MEE4", "metricx_xxl_MQM_2020", "MS-COMET-22",
           "MS-COMET-QE-22", "REUSE", "SEScore", "UniTE", "UniTE-src", "YiSi-1"}  # mt-metrics-eval WMT22_PRIMARIES


def read_scores(path: Path) -> dict[str, np.ndarray]:
    out: dict[str, list[float]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        system, score = line.split("\t")
        out.setdefault(system, []).append(np.nan if score == "None" else float(score))
    return {s: np.array(v) for s, v in out.items()}


def load(data: Path, primary: bool):
    mqm = read_scores(data / "mqm_zh-en" / "zh-en.mqm.seg.score")
    systems = sorted(s for s, v in mqm.items() if np.isfinite(v).any() and s != "refA")
    human = np.concatenate([mqm[s] for s in systems])  # system-major, as mt-metrics-eval's vectors
    groups = np.tile(np.arange(len(mqm[systems[0]])), len(systems))
    metrics = {}
    for f in sorted((data / "metric-scores_zh-en").glob("*.seg.score")):
        name = f.name[: -len(".seg.score")]
        base, ref = name.rsplit("-", 1)
        if ref not in ("refA", "src") or (primary and base not in PRIMARY):
            continue
        scores = read_scores(f)
        metrics[name] = np.concatenate([scores[s] for s in systems])
    return systems, human, groups, metrics


def import_mtme(path: str | None):
    if not path:
        return None
    sys.path.insert(0, path)
    for module in ("apache_beam", "dacite"):  # imported by data.py / ratings.py for parts not used here
        try:
            __import__(module)
        except ImportError:
            sys.modules[module] = types.ModuleType(module)
    from mt_metrics_eval import data as mdata
    from mt_metrics_eval import stats as mstats
    return mstats, mdata


class FixedDraws:
    """Feeds mt-metrics-eval's np.random.binomial the given draws, so both sides resample identically."""

    def __init__(self, draws):
        self.it, self.orig = iter(draws.astype(int)), np.random.binomial

    def __enter__(self):
        np.random.binomial = lambda n, p, size: next(self.it)

    def __exit__(self, *exc):
        np.random.binomial = self.orig


def section_values(mt, systems, human, groups, metrics):
    print("\n## acc*_eq (ties calibrated, grouped by item) of the seven metrics, both implementations")
    rows = []
    for name in SEVEN:
        x = metrics[name]
        t = time.perf_counter()
        ours, eps = tie_calibrated_accuracy(human, x, groups)
        t_ours = time.perf_counter() - t
        row = {"metric": name, "acc*_eq dhp": ours, "epsilon dhp": eps, "s dhp": t_ours,
               "acc_eq dhp": pairwise_accuracy(human, x, groups), "tau_b dhp": kendall_tau_b(human, x)}
        if mt:
            mstats = mt[0]
            gold = [None if not np.isfinite(v) else float(v) for v in human]
            t = time.perf_counter()
            val, meps, _ = mstats.KendallWithTiesOpt(gold, list(x), "acc23", len(systems), "item", 1.0)
            row.update({"acc*_eq mtme": val, "epsilon mtme": meps, "s mtme": time.perf_counter() - t})
            corr = mstats.Correlation(len(systems), gold, list(x))
            row["acc_eq mtme"] = corr.KendallVariants(average_by="item", variant="acc23")[0]
            row["tau_b mtme"] = corr.Kendall(average_by="none")[0]
        rows.append(row)
    df = pd.DataFrame(rows)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.6g}"))
    if mt:
        worst = (df["acc*_eq dhp"] - df["acc*_eq mtme"]).abs().max()
        same = list(df.sort_values("acc*_eq dhp", ascending=False)["metric"]) == \
            list(df.sort_values("acc*_eq mtme", ascending=False)["metric"])
        print(f"max |acc*_eq dhp - mtme| = {worst:.2e} (must be <= 0.002); same order: {same}")
        assert worst <= 0.002 and same
    return df


def section_resample(mt, systems, human, groups, metrics, n_mtme_acc: int, n_mtme_tau: int, n_ours: int):
    print("\n## Seconds per permutation resample, COMET-22-refA vs BLEURT-20-refA (28,125 scores each)")
    a, b = metrics["COMET-22-refA"], metrics["BLEURT-20-refA"]
    draws = permutation_draws(len(human), max(n_ours, n_mtme_acc, n_mtme_tau), seed=1)
    pairs = SegmentPairs.from_groups(groups)
    out = {}
    for statistic, n_mt in (("acc_eq_calibrated", n_mtme_acc), ("tau_b", n_mtme_tau)):
        ev = _evaluator(statistic, human, _zscore(a), _zscore(b), pairs if statistic != "tau_b" else None)
        t = time.perf_counter()
        ours = [ev(w) for w in draws[:n_ours]]
        s_ours = (time.perf_counter() - t) / n_ours
        line = f"{statistic:18s} dhp.stats {s_ours * 1e3:9.2f} ms/resample ({n_ours} draws)"
        if mt:
            mstats = mt[0]
            gold = [None if not np.isfinite(v) else float(v) for v in human]
            ca, cb = mstats.Correlation(len(systems), gold, list(a)), mstats.Correlation(len(systems), gold, list(b))
            params = mstats.PermutationSigDiffParams(block_size=10 ** 9)
            t = time.perf_counter()
            with FixedDraws(draws[:n_mt]):
                if statistic == "tau_b":  # mt-metrics-eval's 'kendall' correlation is scipy's
                    res = mstats.PermutationSigDiff(cb, ca, sps.kendalltau, "none", n_mt, params)
                else:
                    res = mstats.PermutationSigDiff(cb, ca, mstats.KendallWithTiesOpt, "item", n_mt, params,
                                                    variant="acc23", sample_rate=1.0)
            s_mt = (time.perf_counter() - t) / n_mt
            diff = max(abs(c2 - o[0]) + abs(c1 - o[1]) for (c2, c1), o in zip(res[3], ours))
            line += (f" | mt-metrics-eval {s_mt * 1e3:9.2f} ms/resample ({n_mt} draws) | speed-up {s_mt / s_ours:7.1f}x"
                     f" | max per-draw difference {diff:.1e}")
            assert diff < 1e-9
            out[statistic] = (s_ours, s_mt)
        print(line, flush=True)
    return out


def section_leaderboard(mt, human, groups, metrics, k: int, early, n_boot: int, seed: int):
    names = list(metrics)
    print(f"\n## Full leaderboard: {len(names)} metrics, {len(names) * (len(names) - 1) // 2} pairs, k = {k} "
          f"resamples, early stop {early}, bootstrap {n_boot} item resamples")
    scores = np.stack([metrics[n] for n in names])
    draws = permutation_draws(len(human), k, seed)
    counts = item_bootstrap_draws(len(np.unique(groups)), n_boot, seed) if n_boot else None
    tables, times = {}, {}
    for statistic in ("acc_eq_calibrated", "tau_b"):
        t = time.perf_counter()
        pairs = permutation_table(human, scores, names, groups, statistic, draws=draws, early_stop=early)
        t_perm = time.perf_counter() - t
        values = {n: v for n, v in zip(list(pairs["judge_a"]) + list(pairs["judge_b"]),
                                       list(pairs["value_a"]) + list(pairs["value_b"]))}
        t = time.perf_counter()
        ranks = significance_ranks(values, pairs)
        t_rank = time.perf_counter() - t
        t = time.perf_counter()
        if counts is not None:
            boots = segment_bootstrap(human, scores, groups, statistic, counts=counts)
            ci = {n: percentile_interval(boots[i], len(counts[0])) for i, n in enumerate(names)}
        else:
            ci = {n: (np.nan, np.nan) for n in names}
        t_boot = time.perf_counter() - t
        ranks["ci_lo"] = [ci[j][0] for j in ranks["judge"]]
        ranks["ci_hi"] = [ci[j][1] for j in ranks["judge"]]
        times[statistic] = (t_perm, t_rank, t_boot, int(pairs["k"].sum()))
        tables[statistic] = (pairs, ranks)
        print(f"{statistic:18s} permutation tests {t_perm:8.1f} s ({pairs['k'].sum()} resamples over all pairs, "
              f"{t_perm / max(pairs['k'].sum(), 1) * 1e3:.2f} ms each), clusters {t_rank:.3f} s, "
              f"bootstrap {t_boot:7.1f} s", flush=True)
        if mt:
            order = list(ranks["judge"])
            mat = np.full((len(order), len(order)), np.nan)
            lookup = {(r.judge_a, r.judge_b): r.p_a_better for r in pairs.itertuples()}
            for i in range(len(order)):
                for j in range(i + 1, len(order)):
                    mat[i, j] = lookup[(order[i], order[j])]
            assert mt[1].AssignRanks(mat, 0.05) == assign_ranks(mat, 0.05) == list(ranks["rank"])
            print(f"{'':18s} clusters equal mt-metrics-eval's data.AssignRanks on the same p-values")
    total = sum(sum(v[:3]) for v in times.values())
    print(f"total leaderboard time {total:.1f} s (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    star, tau = tables["acc_eq_calibrated"][1], tables["tau_b"][1].set_index("judge")
    eps = {n: tie_calibrated_accuracy(human, metrics[n], groups)[1] for n in names}
    board = star.assign(epsilon=[eps[j] for j in star["judge"]], tau_b=[tau.loc[j, "value"] for j in star["judge"]],
                        tau_b_rank=[tau.loc[j, "rank"] for j in star["judge"]])
    print("\nacc*_eq leaderboard (rank = significance cluster, one-sided PERM-BOTH p <= 0.05, as WMT):")
    print(board.rename(columns={"value": "acc*_eq"}).to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return board, times


def section_run_dir(folder: str, max_judges: int | None, kinds: list[str], k: int, recorded_views: str):
    """Time leaderboard() over the views of a run folder with the WMT stop alone (before) and the leaderboard's
    stop (after), on the same views, in this one process."""
    from dhp.analysis.leaderboard import View, leaderboard
    from dhp.leaderboard import collect_views

    t = time.perf_counter()
    views = [v for v in collect_views(folder, recorded_views, report=False)
             if not v.notes.get("not_built") and (not kinds or v.view in kinds)]
    if max_judges:
        cut = []
        for v in views:
            keep = sorted(v.data[["judge", "mode"]].drop_duplicates().itertuples(index=False))[:max_judges]
            d = v.data.merge(pd.DataFrame(keep, columns=["judge", "mode"]), on=["judge", "mode"])
            cut.append(View(v.view, v.scope, v.measure, v.kind, d, v.strategy, v.statistic, v.draws, v.notes,
                            v.pair_test, v.pair_test_name))
        views = cut
    print(f"{len(views)} views of {folder} collected in {time.perf_counter() - t:.1f} s: " + "; ".join(
        f"{v.scope} {v.measure} ({v.data[['judge', 'mode']].drop_duplicates().shape[0]} judges)" for v in views))
    out, times = {}, {}
    for name, stop in (("before (WMT stop only)", WMT_EARLY_STOP), ("after (LEADERBOARD_EARLY_STOP)",
                                                                      LEADERBOARD_EARLY_STOP)):
        load = os.getloadavg()[0]
        t, c = time.perf_counter(), time.process_time()
        out[name] = leaderboard(views, n_resamples=k, n_resamples_statistic=200, early_stop=stop)
        times[name] = (time.perf_counter() - t, time.process_time() - c)
        pairs = out[name]["leaderboard_pairs.csv"]
        print(f"{name:32s} wall {times[name][0]:8.1f} s, CPU {times[name][1]:8.1f} s, {len(pairs)} pairs "
              f"(load average {load:.1f} at start on {os.cpu_count()} cores)", flush=True)
    (b, bt), (a, at) = out.items()
    keys = ["view", "scope", "measure", "strategy", "judge", "mode"]
    old, new = (x["leaderboard.csv"].set_index(keys).sort_index() for x in (bt, at))
    dv = float(np.nanmax(np.abs(old["value"] - new["value"]))) if len(old) else 0.0
    same_rank = old["rank"].fillna(-1).equals(new["rank"].fillna(-1))
    same_cluster = old["cluster"].fillna(-1).equals(new["cluster"].fillna(-1))
    pk = ["view", "scope", "measure", "strategy", "judge_a", "mode_a", "judge_b", "mode_b"]
    pp = bt["leaderboard_pairs.csv"].merge(at["leaderboard_pairs.csv"], on=pk, suffixes=("_b", "_a"))
    print(f"max |value before - after| = {dv:.1e}; ranks equal: {same_rank}; clusters equal: {same_cluster}; "
          f"pairs tested before/after: {len(bt['leaderboard_pairs.csv'])}/{len(at['leaderboard_pairs.csv'])}, "
          f"max |p_better before - after| = {np.nanmax(np.abs(pp['p_better_b'] - pp['p_better_a'])) if len(pp) else 0:.3f}")
    print(f"ratio before/after: wall {times[b][0] / times[a][0]:.2f}x, CPU {times[b][1] / times[a][1]:.2f}x")
    assert dv <= 1e-9 and same_rank


def section_walk(human, groups, metrics, n_judges: int, k: int, statistic: str = "acc_eq_calibrated"):
    """The WMT cluster walk over the n_judges best metrics (the leaderboard's path for views of > 10 judges), with
    mt-metrics-eval's stop alone (before) and LEADERBOARD_EARLY_STOP (after) on the same draws: CPU, draws, ratio,
    and whether the clusters are the same."""
    from dhp.analysis.leaderboard import seg_value
    from dhp.stats.permutation import pair_tester

    names = sorted(metrics, key=lambda n: -seg_value(human, metrics[n], groups, statistic))[:n_judges]
    x = np.stack([metrics[n] for n in names])
    keep = np.isfinite(human) & np.isfinite(x).all(axis=0)
    h, x, g = human[keep], x[:, keep], groups[keep]
    draws = permutation_draws(len(h), k, 0)
    print(f"\n## Cluster walk, {statistic}, the {len(names)} best metrics, {len(h)} rows, k = {k}")
    res = {}
    for name, stop in (("before", WMT_EARLY_STOP), ("after", LEADERBOARD_EARLY_STOP)):
        t = time.process_time()
        test = pair_tester(h, x, g, statistic, draws=draws, early_stop=stop)
        start, cluster, clusters, used, pairs = 0, 1, [], 0, 0
        for pos in range(len(names)):
            for j in range(start, pos):
                r = test(j, pos)
                used, pairs = used + r["k"], pairs + 1
                if r["p_a_better"] <= 0.05:
                    cluster, start = cluster + 1, pos
                    break
            clusters.append(cluster)
        res[name] = (time.process_time() - t, clusters)
        print(f"{name:7s} CPU {res[name][0]:7.1f} s, {pairs} pairs, {used} draws, clusters {clusters}", flush=True)
    print(f"CPU ratio before/after {res['before'][0] / res['after'][0]:.2f}x; same clusters: "
          f"{res['before'][1] == res['after'][1]} (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mtme", default=os.environ.get("MTME_PATH"), help="mt-metrics-eval checkout (or MTME_PATH)")
    ap.add_argument("--data", default=str(declared_files.data_root()),
                    help="a data root (default: DHP_DATA_DIR, else the per-user cache; docs/data.md)")
    ap.add_argument("--k", type=int, default=1000, help="permutation resamples per pair")
    ap.add_argument("--boot", type=int, default=1000, help="item-bootstrap resamples per metric (0: none)")
    ap.add_argument("--early-stop", choices=("wmt", "none", "leaderboard"), default="wmt",
                    help="wmt: mt-metrics-eval's Task defaults (blocks of 100, stop at p < 0.02 or > 0.5); "
                         "leaderboard: also stop once the decision at 0.05 is settled (LEADERBOARD_EARLY_STOP)")
    ap.add_argument("--primary", action="store_true", help="only WMT22's primary metrics")
    ap.add_argument("--mtme-draws", type=int, default=3, help="mt-metrics-eval acc*_eq resamples to time")
    ap.add_argument("--skip-leaderboard", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--walk", type=int, help="time only the cluster walk over the N best metrics, before/after")
    ap.add_argument("--run-dir", help="time only the leaderboard of this run folder, before/after (see above)")
    ap.add_argument("--max-judges", type=int, help="--run-dir: the first N judges of each view (by name)")
    ap.add_argument("--views", nargs="*", default=[], help="--run-dir: only these view kinds (e.g. segment system)")
    ap.add_argument("--recorded-views", choices=("headline", "all"), default="headline",
                    help="--run-dir: HANNA and FRANK views")
    args = ap.parse_args(argv)
    if args.run_dir:
        section_run_dir(args.run_dir, args.max_judges, args.views, args.k, args.recorded_views)
        return
    data = declared_files.ensure(["wmt22_mqm_zh_en", "wmt22_metric_scores_zh_en"], args.data) / "wmt22"  # fetched if missing
    mt = import_mtme(args.mtme)
    if mt is None:
        print("mt-metrics-eval not given: only dhp.stats runs. To compare, fetch it and pass --mtme:\n"
              "    git clone https://github.com/google-research/mt-metrics-eval /tmp/mtme")
    else:
        commit = subprocess.run(["git", "-C", args.mtme, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        print(f"mt-metrics-eval at {args.mtme} (commit {commit or 'unknown'})")
    systems, human, groups, metrics = load(data, args.primary)
    if args.walk:
        section_walk(human, groups, metrics, args.walk, args.k)
        return
    print(f"{len(systems)} systems (MQM-scored, refA left out as the reference, refB kept), "
          f"{len(human)} segment scores, {len(np.unique(groups))} items, {len(metrics)} metrics")
    section_values(mt, systems, human, groups, metrics)
    section_resample(mt, systems, human, groups, metrics, args.mtme_draws, 20, 50)
    if not args.skip_leaderboard:
        stop = {"wmt": WMT_EARLY_STOP, "leaderboard": LEADERBOARD_EARLY_STOP}.get(args.early_stop)
        section_leaderboard(mt, human, groups, metrics, args.k, stop, args.boot, args.seed)


if __name__ == "__main__":
    main()
