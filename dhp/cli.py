"""One command line for the workbench: ``python -m dhp <command> ...``.

    python -m dhp run --dataset summeval --n-items 3 --judge embedded --run-dir runs/try
    python -m dhp batch export <the run arguments> --out calls.jsonl
    python -m dhp batch import results.jsonl <the run arguments>
    python -m dhp import-judgments {llmbar,mtme,table} PATH --run-dir R [--dataset D] [--scale LOW HIGH]
                                   [--lp zh-en] [--data-dir DIR] [--max-mb N]

``run`` is the whole pipeline (:func:`dhp.pipeline.run_pipeline`, the same function and defaults the
notebooks use); ``batch`` writes a run's pending model calls for an offline batch job and loads the
answers back into the run's cache (:mod:`dhp.batch`); ``import-judgments`` brings judgments recorded
elsewhere (LLMBar's result.json files, mt-metrics-eval score files, your own CSV/JSONL) into a run folder as
the tables the methods read (:mod:`dhp.recorded`).
"""

from __future__ import annotations

import argparse
import sys

from dhp.errors import DHPError

__all__ = ["main"]


def _run_callable(args: argparse.Namespace):
    from dhp.pipeline import args_to_kwargs, run_pipeline

    kwargs = args_to_kwargs(args)
    return kwargs, (lambda: run_pipeline(**kwargs))


def _cache_of(kwargs: dict):
    from dhp.io import resolve

    return resolve(kwargs["cache_path"]) if kwargs.get("cache_path") else resolve(kwargs["run_dir"]) / "cache.sqlite"


def _import_judgments(rest: list[str]) -> int:
    from dhp.recorded import IMPORTERS, MAX_FILE_BYTES, import_judgments

    ap = argparse.ArgumentParser(prog="python -m dhp import-judgments",
                                 description="Import recorded judgments into a run folder (dhp.recorded).")
    ap.add_argument("kind", choices=sorted(IMPORTERS))
    ap.add_argument("path", help="a file, or a folder searched recursively")
    ap.add_argument("--run-dir", required=True, help="the run folder to write the tables into")
    ap.add_argument("--dataset", help="table: the dataset table item ids are checked against")
    ap.add_argument("--scale", nargs=2, type=float, metavar=("LOW", "HIGH"), help="table: the scores' scale")
    ap.add_argument("--lp", help="mtme: the language pair, when no folder name gives it")
    ap.add_argument("--data-dir", help="table: where LLMBar is read from for the id check")
    ap.add_argument("--max-mb", type=float, default=MAX_FILE_BYTES / 2**20, help="size limit of one file (MiB)")
    args = ap.parse_args(rest)
    try:
        report = import_judgments(args.kind, args.path, args.run_dir, dataset=args.dataset, scale=args.scale,
                                  lp=args.lp, data_dir=args.data_dir, max_bytes=int(args.max_mb * 2**20))
    except DHPError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(report.describe())
    return 0


def main(argv=None) -> int:
    from dhp import pipeline

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "run":
        return pipeline.main(rest)
    if command == "import-judgments":
        return _import_judgments(rest)
    if command != "batch" or not rest or rest[0] not in ("export", "import"):
        print("error: use `python -m dhp run ...`, `python -m dhp batch export ... --out F` or "
              "`python -m dhp batch import F ...` or `python -m dhp import-judgments KIND PATH --run-dir R`", file=sys.stderr)
        return 2
    from dhp import batch

    action, rest = rest[0], rest[1:]
    ap = argparse.ArgumentParser(prog=f"python -m dhp batch {action}", parents=[pipeline._parser()],
                                 add_help=False, conflict_handler="resolve")
    if action == "export":
        ap.add_argument("--out", required=True, help="the OpenAI Batch input file to write (JSONL)")
    else:
        ap.add_argument("results", help="the batch job's output file (JSONL)")
    args = ap.parse_args(rest)
    try:
        kwargs, run = _run_callable(args)
        if action == "export":
            n = batch.export_calls(run, args.out)
            print(f"wrote {n} pending calls to {args.out}" if n else "nothing to export: every call is cached")
        else:
            print(batch.import_results(run, args.results, _cache_of(kwargs)).describe())
    except DHPError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
