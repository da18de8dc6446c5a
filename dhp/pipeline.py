"""The whole DHP pipeline in one call or one command: dataset -> perturb -> judge -> statistics.

    python -m dhp.pipeline --dataset summeval --n-items 3 --seed 0 --run-dir runs/try

This is a thin chain over the stages (the notebooks run the same functions step by step):
`dhp.datasets.load_dataset` (or `dhp.datasets.load_custom` for your own CSV/JSONL file) ->
`dhp.perturb.perturb` -> `dhp.judging.score_perturbed` -> `dhp.analysis.discernment.discernment` / `dhp.analysis.discernment.summarize`.

Files written in `run_dir` (each atomically, with dhp.io; all of them only after every stage has
succeeded, so a failed run leaves no table behind):

- ``perturbed.parquet``   the perturbed table (dhp.perturb.perturb)
- ``scores.parquet``      the scores table (dhp.judging.score_perturbed); run statistics are not stored in it
- ``discernment.csv``     one row per perturbation (dhp.analysis.discernment.discernment)
- ``summary.csv``         one row per dataset x judge x mode (dhp.analysis.discernment.summarize)
- ``dataset.parquet``     the items (sources, references, task) the later stages read
- ``failures.csv``        one row per (item, variant, metric) with a failed reply, and why (dhp.judging.failures_table)
- ``manifest.json``       parameters, package versions, model identities, input checksums (dhp.io.write_manifest)
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
from dhp.io import resolve, write_csv, write_manifest, write_parquet, write_text
from dhp.schema import DATASET_TASK

__all__ = ["run_pipeline", "main", "OUTPUTS"]

OUTPUTS = ("dataset", "perturbed", "scores", "discernment", "summary", "failures", "judge_stats", "manifest")
_CUSTOM_SUFFIXES = (".csv", ".jsonl", ".ndjson")


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _validate(dataset, n_items, seed, mode, n_samples, combine, n_boot) -> None:
    """Cheap parameter checks, before anything is loaded, computed or written."""
    from dhp.datasets import DATASETS
    from dhp.judging import MODES
    from dhp.analysis.discernment import COMBINES

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
    from dhp import datasets

    if str(dataset) in datasets.DATASETS:
        return datasets.load_dataset(str(dataset), n_items=n_items, seed=seed, data_dir=data_dir, path=path)
    table = datasets.load_custom(dataset)  # your own file: same seeded selection rule as the loaders
    ids = datasets.select_ids(list(table["item_id"]), n_items, seed)
    return table.set_index("item_id", drop=False).loc[ids].reset_index(drop=True)


def run_pipeline(
    dataset: str | os.PathLike,
    n_items: int,
    seed: int = 0,
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
    n_boot: int = 200,
    n_null: int = 1000,
    perturbations: list[str] | None = None,
    progress: bool = False,
    dry_run: bool = False,
    n_ctx: int | None = None,
    allow_insecure_key: bool = False,
    max_consecutive_failures: int = 20,
):
    """Run dataset -> perturb -> judge -> statistics and write the tables into `run_dir`.

    Parameters: `dataset` a name from dhp.datasets.DATASETS or the path of your own .csv/.jsonl file
    (dhp.datasets.load_custom); `n_items`, `seed` the seeded selection (and perturbation/judge seed);
    `judge` a backend spec ("embedded", "openai:<model>[@<url>]", "vllm:<model>") or a
    dhp.backends.Backend object (e.g. with custom retries/timeouts); `mode`, `n_samples` as in
    dhp.judging.score_perturbed; `run_dir` output folder (relative paths are relative to the repo root);
    `cache_path` the call cache of the judge AND the LLM perturber (default `<run_dir>/cache.sqlite`);
    `data_dir`, `path` as in dhp.datasets.load_dataset; `perturber` "rule" or a backend spec;
    `expert_weights` None (shipped CSV), a CSV path or a DataFrame; `combine`, `n_boot` as in
    dhp.analysis.discernment.discernment; `n_null` sign-flip resamples of dhp.analysis.discernment.null_calibration; `perturbations`
    restricts the perturbation methods (default: all); `n_ctx` the judge's context for source
    truncation (default: what the backend reports); `allow_insecure_key` lets OPENAI_API_KEY go to a
    plain-http remote server; `max_consecutive_failures` the circuit breaker of dhp.calls.run.
    `dry_run=True` loads and perturbs (rule-based rows only), then prints and returns the estimates
    ({"perturber": dhp.calls.Estimate | None, "judge": dhp.calls.Estimate}) without any model call and
    without writing any table.

    Everything later stages need — parameters, perturbation names, the expert weights of every task ×
    perturbation, the judge backend — is checked before the first model call, so a run never fails
    after it was paid for. Returns {"dataset", "perturbed", "scores", "discernment", "summary",
    "failures", "judge_stats", "manifest"} -> path of the file written (see the module docstring); no
    table is written unless every stage succeeded.

    Long only in its signature and this documentation (the CLI's parameters); the body is a short chain
    of stage calls.
    """
    from dhp import judging
    from dhp.analysis import ANALYSES
    from dhp.perturb import perturb

    expert_weights, backend, perturber_backend = _prepare(
        dataset, n_items, seed, mode, n_samples, combine, n_boot, n_null, perturbations, expert_weights, judge,
        allow_insecure_key, perturber)
    out_dir = resolve(run_dir)
    cache = resolve(cache_path) if cache_path is not None else out_dir / "cache.sqlite"
    table = _load(dataset, n_items, seed, data_dir, path)
    _check_weights(table, expert_weights, perturbations, mode)
    perturbed = perturb(table, seed=seed, perturber=perturber_backend or "rule", perturbations=perturbations,
                        progress=progress, cache=cache, dry_run=dry_run)
    judge_args = dict(judge=backend, mode=mode, n_samples=n_samples, seed=seed, cache=cache, n_ctx=n_ctx,
                      max_consecutive_failures=max_consecutive_failures)
    if dry_run:
        return _estimates(perturbed, table, judge_args)
    scores = judging.score_perturbed(perturbed, table, progress=progress, **judge_args)
    run_stats = dict(scores.attrs.get("judge_stats") or {})
    # attrs would be stored in the parquet metadata: keep run statistics (timings) out of the table.
    scores.attrs.clear()
    results = ANALYSES["discernment"].run(scores, expert_weights=expert_weights, combine=combine, n_boot=n_boot,
                                          n_null=n_null, seed=seed)
    paths = _write_tables(out_dir, {"dataset": table, "perturbed": perturbed, "scores": scores,
                                    "discernment": results["discernment.csv"], "summary": results["summary.csv"],
                                    "failures": judging.failures_table(scores)}, run_stats)
    params = dict(dataset=str(dataset), n_items=n_items, seed=seed, judge=backend.identity, mode=mode,
                  n_samples=n_samples, perturber=str(perturber if isinstance(perturber, str) else "object"),
                  combine=combine, n_boot=n_boot, n_null=n_null, perturbations=perturbations, n_ctx=n_ctx,
                  max_consecutive_failures=max_consecutive_failures)
    inputs = [Path(dataset)] if Path(str(dataset)).suffix.lower() in _CUSTOM_SUFFIXES else []
    paths["manifest"] = write_manifest(out_dir, "pipeline", params,
                                       [b for b in (backend, perturber_backend) if b is not None], inputs)
    return paths


def _prepare(dataset, n_items, seed, mode, n_samples, combine, n_boot, n_null, perturbations, expert_weights,
             judge, allow_insecure_key, perturber):
    """Every check that needs no data: parameters, perturbation names, the weights file, the backends
    (unknown backend, missing or exposed key). Returns (expert weights table, judge backend, perturber
    backend or None)."""
    from dhp.backends import get_backend
    from dhp.perturb import resolve_perturber
    from dhp.perturb.registry import methods_for
    from dhp.weights import load_expert_weights, validate_expert_weights

    _validate(dataset, n_items, seed, mode, n_samples, combine, n_boot)
    if not (_is_int(n_null) and n_null >= 1):
        raise DHPError(f"n_null must be a positive integer, got {n_null!r}.", "pass e.g. n_null=1000.")
    if str(dataset) in DATASET_TASK:
        methods_for(str(dataset), perturbations)  # unknown perturbation names fail here, up front
    if expert_weights is None or isinstance(expert_weights, (str, os.PathLike)):
        expert_weights = load_expert_weights(expert_weights)
    else:
        expert_weights = validate_expert_weights(expert_weights)
    options = {"allow_insecure_key": True} if allow_insecure_key and str(judge).startswith("openai:") else {}
    backend = get_backend(judge, **options)
    return expert_weights, backend, resolve_perturber(perturber)[0]


def _check_weights(table: pd.DataFrame, expert_weights, perturbations, mode: str) -> None:
    """Fail before paying: expert weights must exist for everything that will be scored."""
    from dhp.perturb.registry import methods_for
    from dhp.schema import metrics_for
    from dhp.weights import check_weights_cover

    for task in sorted(set(table["task"].astype(str))):
        planned = [m.perturbation for m in methods_for(str(table["dataset"].iloc[0]), perturbations, task)]
        metrics = ("likelihood",) if mode == "likelihood" else metrics_for(task)
        check_weights_cover(expert_weights, task, planned, metrics)


def _estimates(perturbed: pd.DataFrame, table: pd.DataFrame, judge_args: dict) -> dict:
    """The dry run's result: print and return the perturber's and the judge's call estimates."""
    from dhp import judging

    pert_est = perturbed.attrs.get("perturber_estimate")
    if pert_est is not None:
        print(pert_est.describe("perturber"))
    # LLM rows not made yet are estimated with their reference text as a stand-in of similar length.
    stand_in = perturbed.assign(
        text=perturbed["text"].where(perturbed["status"] != "pending", perturbed["item_id"].map(
            dict(zip(table["item_id"].astype(str), table["reference"])))),
        status=perturbed["status"].replace("pending", "ok"))
    return {"perturber": pert_est,
            "judge": judging.score_perturbed(stand_in, table, progress=False, dry_run=True, **judge_args)}


def _write_tables(out_dir: Path, tables: dict[str, pd.DataFrame], run_stats: dict) -> dict[str, Path]:
    """Write the run folder's tables (parquet for row tables, CSV for result tables) and judge_stats.json,
    each atomically; returns name -> path."""
    paths = {}
    for name, df in tables.items():
        if name in ("dataset", "perturbed", "scores"):
            paths[name] = write_parquet(df, out_dir / f"{name}.parquet")
        else:
            paths[name] = write_csv(df, out_dir / f"{name}.csv")
    paths["judge_stats"] = write_text(out_dir / "judge_stats.json",
                                      json.dumps(run_stats, indent=1, sort_keys=True, default=str))
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
    ap.add_argument("--n-boot", type=int, default=200, help="bootstrap resamples over items (0: no intervals)")
    ap.add_argument("--n-null", type=int, default=1000, help="sign-flip null resamples (null_fpr_* columns)")
    ap.add_argument("--n-ctx", type=int, default=None, help="judge context in tokens (default: the backend's)")
    ap.add_argument("--allow-insecure-key", action="store_true",
                    help="allow sending OPENAI_API_KEY over plain http to a non-loopback server")
    ap.add_argument("--max-consecutive-failures", type=int, default=20,
                    help="stop the run after this many failed calls in a row (cached calls are kept)")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the judge's calls, tokens and cost estimate; call no model, write no table")
    return ap


def args_to_kwargs(args: argparse.Namespace) -> dict:
    """run_pipeline keyword arguments from parsed command-line arguments (the CLI's one mapping)."""
    perts = [p.strip() for p in args.perturbations.split(",") if p.strip()] if args.perturbations else None
    return dict(dataset=args.dataset, n_items=args.n_items, seed=args.seed, judge=args.judge, mode=args.mode,
                n_samples=args.n_samples, run_dir=args.run_dir, cache_path=args.cache_path,
                data_dir=args.data_dir, path=args.path, perturber=args.perturber,
                expert_weights=args.expert_weights, combine=args.combine, n_boot=args.n_boot,
                n_null=args.n_null, perturbations=perts, progress=args.progress, dry_run=args.dry_run,
                n_ctx=args.n_ctx, allow_insecure_key=args.allow_insecure_key,
                max_consecutive_failures=args.max_consecutive_failures)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        paths = run_pipeline(**args_to_kwargs(args))
    except DHPError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        return 0  # the estimates were printed
    for name, p in paths.items():
        print(f"{name}: {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
