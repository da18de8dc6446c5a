"""The whole DHP pipeline in one call or one command: dataset -> perturb -> judge -> statistics.

    python -m dhp.pipeline --dataset summeval --n-items 3 --seed 0 --run-dir runs/try

This is a thin chain over the stages (the notebooks run the same functions step by step):
`dhp.data.load_dataset` (or `dhp.data.load_custom` for your own CSV/JSONL file) ->
`dhp.perturb.perturb` -> `dhp.judge.judge` -> `dhp.stats.discernment` / `dhp.stats.summarize`.

Files written in `run_dir` (each atomically, with dhp.io; all of them only after every stage has
succeeded, so a failed run leaves no table behind):

- ``perturbed.parquet``   the perturbed table (dhp.perturb.perturb)
- ``scores.parquet``      the scores table (dhp.judge.judge); run statistics are not stored in it
- ``discernment.csv``     one row per perturbation (dhp.stats.discernment)
- ``summary.csv``         one row per dataset x judge x mode (dhp.stats.summarize)
- ``failures.csv``        judge calls / replies that gave no score (dhp.judge.failure_summary)
- ``judge_stats.json``    calls made, cache hits, failures of this run (varies between runs:
                          timing, cache state; never part of a reproducibility comparison)

The judge cache (SQLite, one row per model call) is ``cache_path`` or, by default,
``<run_dir>/cache.sqlite``: rerunning the same command after a crash resumes without repeating
finished calls.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from dhp.errors import DHPError
from dhp.io import resolve, write_csv, write_parquet
from dhp.schema import DATASET_TASK

__all__ = ["run_pipeline", "main", "OUTPUTS"]

OUTPUTS = ("perturbed", "scores", "discernment", "summary", "failures", "judge_stats")
_CUSTOM_SUFFIXES = (".csv", ".jsonl", ".ndjson")


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _validate(dataset, n_items, seed, mode, n_samples, combine, n_boot) -> None:
    """Cheap parameter checks, before anything is loaded, computed or written."""
    from dhp.data import DATASETS
    from dhp.judge import MODES
    from dhp.stats import COMBINES

    if not _is_int(n_items) or n_items < 1:
        raise DHPError(f"n_items must be a positive integer, got {n_items!r}.", "pass e.g. n_items=5.")
    if not _is_int(seed):
        raise DHPError(f"seed must be an integer, got {seed!r}.", "pass e.g. seed=0.")
    if not isinstance(dataset, (str, os.PathLike)) or not str(dataset).strip():
        raise DHPError(f"dataset must be a dataset name or a file path, got {dataset!r}.",
                       f"use one of {list(DATASETS)} or the path of your own .csv/.jsonl file.")
    if str(dataset) not in DATASETS and Path(dataset).suffix.lower() not in _CUSTOM_SUFFIXES:
        raise DHPError(f"Unknown dataset {str(dataset)!r}.",
                       f"use one of {list(DATASETS)} or the path of your own .csv/.jsonl file.")
    if mode not in MODES:
        raise DHPError(f"Unknown judge mode {mode!r}.", f"use one of {list(MODES)}.")
    if not _is_int(n_samples) or n_samples < 1:
        raise DHPError(f"n_samples must be a positive integer, got {n_samples!r}.",
                       "pass n_samples=5 (the paper's value).")
    if combine not in COMBINES:
        raise DHPError(f"Unknown combine={combine!r}.", f"use one of {list(COMBINES)}.")
    if not _is_int(n_boot) or n_boot < 0:
        raise DHPError(f"n_boot must be a non-negative integer, got {n_boot!r}.", "pass e.g. n_boot=1000.")


def _load(dataset, n_items, seed, data_dir, path) -> pd.DataFrame:
    from dhp import data

    if str(dataset) in data.DATASETS:
        return data.load_dataset(str(dataset), n_items=n_items, seed=seed, data_dir=data_dir, path=path)
    table = data.load_custom(dataset)  # your own file: same seeded selection rule as the loaders
    ids = data.select_ids(list(table["item_id"]), n_items, seed)
    return table.set_index("item_id", drop=False).loc[ids].reset_index(drop=True)


def run_pipeline(
    dataset: str | os.PathLike,
    n_items: int,
    seed: int,
    judge: str = "embedded",
    mode: str = "logprobs",
    n_samples: int = 5,
    run_dir: str | os.PathLike = "runs/default",
    cache_path: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    path: str | os.PathLike | None = None,
    perturber: str = "rule",
    expert_weights=None,
    combine: str = "paper",
    n_boot: int = 0,
    perturbations: list[str] | None = None,
    progress: bool = False,
    dry_run: bool = False,
):
    """Run dataset -> perturb -> judge -> statistics and write the tables into `run_dir`.

    Parameters: `dataset` a name from dhp.data.DATASETS or the path of your own .csv/.jsonl file
    (dhp.data.load_custom); `n_items`, `seed` the seeded selection (and perturbation/judge seed);
    `judge` a backend spec ("embedded", "openai:<model>[@<url>]", "vllm:<model>") or a
    dhp.backends.Backend object (e.g. with custom retries/timeouts); `mode`, `n_samples` as in
    dhp.judge.judge; `run_dir` output folder (relative paths are
    relative to the repo root); `cache_path` judge cache (default `<run_dir>/cache.sqlite`);
    `data_dir`, `path` as in dhp.data.load_dataset; `perturber` "rule" or a backend spec;
    `expert_weights` None (shipped CSV), a CSV path or a DataFrame; `combine`, `n_boot` as in
    dhp.stats.discernment; `perturbations` restricts the perturbation methods (default: all);
    `dry_run=True` loads and perturbs, then returns the judge's cost estimate
    (dhp.judge.JudgeEstimate: calls, tokens, USD) without calling the judge or writing any table.

    Returns {"perturbed", "scores", "discernment", "summary", "failures", "judge_stats"} -> path of
    the file written (see the module docstring). Raises DHPError (problem + "Fix: ...") for bad
    parameters or inputs; parameters are checked before any data is loaded, and no table is
    written unless every stage succeeded.
    """
    from dhp import judge as judge_mod
    from dhp import stats
    from dhp.backends import get_backend
    from dhp.perturb import perturb, resolve_perturber
    from dhp.perturb.registry import methods_for
    from dhp.weights import load_expert_weights, validate_expert_weights

    _validate(dataset, n_items, seed, mode, n_samples, combine, n_boot)
    if str(dataset) in DATASET_TASK:
        methods_for(str(dataset), perturbations)  # unknown perturbation names fail here, up front
    if expert_weights is None or isinstance(expert_weights, (str, os.PathLike)):
        expert_weights = load_expert_weights(expert_weights)
    else:
        expert_weights = validate_expert_weights(expert_weights)
    backend = get_backend(judge)  # unknown backend / missing key fail before any work
    resolve_perturber(perturber)
    out_dir = resolve(run_dir)
    cache = resolve(cache_path) if cache_path is not None else out_dir / "cache.sqlite"

    table = _load(dataset, n_items, seed, data_dir, path)
    perturbed = perturb(table, seed=seed, perturber=perturber, perturbations=perturbations,
                        progress=progress)
    if dry_run:
        return judge_mod.judge(perturbed, table, judge=backend, mode=mode, n_samples=n_samples, seed=seed,
                               cache=cache, progress=False, dry_run=True)
    scores = judge_mod.judge(perturbed, table, judge=backend, mode=mode, n_samples=n_samples, seed=seed,
                             cache=cache, progress=progress)
    run_stats = dict(scores.attrs.get("judge_stats") or {})
    # attrs would be stored in the parquet metadata: keep run statistics (timings) out of the table.
    scores.attrs.clear()
    disc = stats.discernment(scores, expert_weights=expert_weights, combine=combine, n_boot=n_boot,
                             seed=seed)
    summary = stats.summarize(disc)
    disc.attrs.clear()
    failures = judge_mod.failure_summary(scores)

    paths = {
        "perturbed": write_parquet(perturbed, out_dir / "perturbed.parquet"),
        "scores": write_parquet(scores, out_dir / "scores.parquet"),
        "discernment": write_csv(disc, out_dir / "discernment.csv"),
        "summary": write_csv(summary, out_dir / "summary.csv"),
        "failures": write_csv(failures, out_dir / "failures.csv"),
    }
    stats_path = out_dir / "judge_stats.json"
    tmp = stats_path.with_name(f".{stats_path.name}.tmp")
    tmp.write_text(json.dumps(run_stats, indent=1, sort_keys=True, default=str), encoding="utf-8")
    os.replace(tmp, stats_path)
    paths["judge_stats"] = stats_path
    return paths


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m dhp.pipeline",
                                 description="Run dataset -> perturb -> judge -> statistics into a run folder.")
    ap.add_argument("--dataset", required=True, help="dataset name (e.g. summeval) or your own .csv/.jsonl")
    ap.add_argument("--n-items", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--judge", default="embedded", help="embedded | openai:<model>[@<url>] | vllm:<model>")
    ap.add_argument("--mode", default="logprobs", help="logprobs | sample | likelihood")
    ap.add_argument("--n-samples", type=int, default=5)
    ap.add_argument("--run-dir", default="runs/default")
    ap.add_argument("--cache-path", default=None, help="judge cache (default <run-dir>/cache.sqlite)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--path", default=None, help="your Story Cloze / Answer Equivalence copy")
    ap.add_argument("--perturber", default="rule")
    ap.add_argument("--perturbations", default=None, help="comma-separated subset, e.g. char_typo,control")
    ap.add_argument("--expert-weights", default=None)
    ap.add_argument("--combine", default="paper")
    ap.add_argument("--n-boot", type=int, default=0)
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the judge's calls, tokens and cost estimate; call no model, write no table")
    return ap


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    perts = [p.strip() for p in args.perturbations.split(",") if p.strip()] if args.perturbations else None
    try:
        paths = run_pipeline(
            args.dataset, args.n_items, args.seed, judge=args.judge, mode=args.mode,
            n_samples=args.n_samples, run_dir=args.run_dir, cache_path=args.cache_path,
            data_dir=args.data_dir, path=args.path, perturber=args.perturber,
            expert_weights=args.expert_weights, combine=args.combine, n_boot=args.n_boot,
            perturbations=perts, progress=args.progress, dry_run=args.dry_run)
    except DHPError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        return 0  # the judge printed its estimate
    for name, p in paths.items():
        print(f"{name}: {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
