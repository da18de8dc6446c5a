"""One command line for the workbench: ``python -m dhp <command> ...``.

    python -m dhp methods                                        the registered methods, their modes and notebooks
    python -m dhp run --method dhp --dataset summeval --n-items 3 --judge embedded --run-dir runs/try
    python -m dhp run --method criteria_confusion --help         a method's parameters, defaults and help
    python -m dhp run --method dhp --stage perturb ...           one stage of a method (dhp.methods.run_stage)
    python -m dhp batch export --method dhp <its parameters> --out calls.jsonl
    python -m dhp batch import results.jsonl --method dhp <the same parameters>
    python -m dhp import-judgments {llmbar,mtme,table} PATH --run-dir R [--dataset D] [--scale LOW HIGH]
    python -m dhp leaderboard --run-dir R                        every judge in R compared on every view

``run`` is :func:`dhp.methods.run` (the stages collect → analyze → figures into the run folder, each through the
stage runner :func:`dhp.methods.run_stage`; ``--stage NAME`` runs one), with the parameters of the
method's parameter model (dhp.config; the notebooks' parameters cells have the same names and defaults);
``--method`` defaults to ``dhp``. ``--dry-run`` prints the calls, tokens and cost a run would need without calling
anything. ``batch`` writes a run's pending model calls for an offline batch job and loads the answers back into
the run's cache (:mod:`dhp.batch`); ``import-judgments`` brings judgments recorded elsewhere (LLMBar's published
verdicts, mt-metrics-eval score files, your own CSV/JSONL) into the tables the methods read (:mod:`dhp.recorded`).
"""

from __future__ import annotations

import argparse
import sys

from dhp import batch, methods
from dhp import config as cfg
from dhp.errors import DHPError
from dhp.leaderboard import LeaderboardParams, run_leaderboard
from dhp.recorded import IMPORTERS, MAX_FILE_BYTES, import_judgments

__all__ = ["main", "method_parser", "config_from_argv"]

DEFAULT_METHOD = "dhp"


def _method_name(argv: list[str]) -> str:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--method", default=DEFAULT_METHOD)
    return pre.parse_known_args(argv)[0].method


def method_parser(name: str, prog: str, extra=None) -> argparse.ArgumentParser:
    """The parser of one method's parameters (generated from its parameter model), plus ``extra(parser)``."""
    m = methods.get(name)
    ap = argparse.ArgumentParser(prog=prog, description=f"{m.title} ({m.paper}). Modes: {', '.join(m.modes)}.")
    ap.add_argument("--method", default=DEFAULT_METHOD, help=f"one of {methods.names()} (default {DEFAULT_METHOD})")
    cfg.add_arguments(ap, m.Params)
    if extra is not None:
        extra(ap)
    return ap


def config_from_argv(argv: list[str], prog: str, extra=None):
    """(method, validated config, parsed arguments) from a command line."""
    name = _method_name(argv)
    m = methods.get(name)
    args = method_parser(name, prog, extra).parse_args(argv)
    return m, cfg.from_arguments(m.Params, args, source="command line"), args


def _run(argv: list[str]) -> int:
    def extra(ap):
        ap.add_argument("--dry-run", action="store_true", help="print the calls, tokens and cost of the run; call no "
                                                               "model, write no table")
        ap.add_argument("--stage", help="run this one stage only (python -m dhp methods lists each method's stages); "
                                        "default: collect, analyze and figures")

    m, config, args = config_from_argv(argv, "python -m dhp run", extra)
    if args.dry_run:
        for stage, est in m.estimate(config).items():
            if est is not None:
                print(est.describe(stage))
        return 0
    paths = methods.run_stage(m, args.stage, config).paths if args.stage else methods.run(m.name, config)
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def _batch(action: str, argv: list[str]) -> int:
    def extra(ap):
        if action == "export":
            ap.add_argument("--out", required=True, help="the OpenAI Batch input file to write (JSONL)")
        else:
            ap.add_argument("results", help="the batch job's output file (JSONL)")

    m, config, args = config_from_argv(argv, f"python -m dhp batch {action}", extra)
    m.check_mode(config)
    collect = lambda: m.collect(config)  # noqa: E731 - the run whose pending calls are exported/imported
    if action == "export":
        n = batch.export_calls(collect, args.out)
        print(f"wrote {n} pending calls to {args.out}" if n else "nothing to export: every call is cached")
    else:
        print(batch.import_results(collect, args.results, config.cache).describe())
    return 0


def _import_judgments(rest: list[str]) -> int:
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
    report = import_judgments(args.kind, args.path, args.run_dir, dataset=args.dataset, scale=args.scale,
                              lp=args.lp, data_dir=args.data_dir, max_bytes=int(args.max_mb * 2**20))
    print(report.describe())
    return 0


def _leaderboard(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m dhp leaderboard",
                                 description="Compare the judges of a run folder on every view (dhp.leaderboard).")
    cfg.add_arguments(ap, LeaderboardParams)
    config = cfg.from_arguments(LeaderboardParams, ap.parse_args(argv))
    for name, path in run_leaderboard(config).items():
        print(f"{name}: {path}")
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    try:
        if command == "methods":
            print(methods.describe_methods())
            return 0
        if command == "run":
            return _run(rest)
        if command == "batch" and rest and rest[0] in ("export", "import"):
            return _batch(rest[0], rest[1:])
        if command == "import-judgments":
            return _import_judgments(rest)
        if command == "leaderboard":
            return _leaderboard(rest)
    except DHPError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("error: use `python -m dhp methods`, `python -m dhp run --method NAME ...`, "
          "`python -m dhp batch export ... --out F`, `python -m dhp batch import F ...`, "
          "`python -m dhp import-judgments KIND PATH --run-dir R` or `python -m dhp leaderboard --run-dir R`",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
