"""One command line for the workbench: ``dhp <command> ...`` (``make setup`` installs the ``dhp`` command into
.venv/bin; ``python -m dhp <command> ...`` is the same command).

    dhp methods                                        the registered methods, their modes and notebooks
    dhp run --method dhp --dataset summeval --n-items 3 --judge embedded --run-dir runs/try
    dhp run --method criteria_confusion --help         a method's parameters, defaults and help
    dhp run --method dhp --stage perturb ...           one stage of a method (dhp.methods.run_stage)
    dhp batch export --method dhp <its parameters> --out calls.jsonl
    dhp batch import results.jsonl --method dhp <the same parameters>
    dhp batch export evaluate JUDGE [--profile P ...] --out calls.jsonl   every method of an evaluation, one file
    dhp run|evaluate ... --engine ray [--ray-address A]   the calls through Ray Data (docs/cluster.md)
    dhp import-judgments KIND [PATH] --run-dir R [--dataset D] [--scale LOW HIGH]   (llmbar, mtme, ..., table)
    dhp leaderboard --run-dir R                        every judge in R compared on every view
    dhp data list | fetch [NAME ...|--for demo|--all] | doc   the input files (docs/data.md)
    dhp evaluate JUDGE [--profile quick|standard|paper] [--protocol P ...] [--yes] [--dry-run] [--run-dir R]
                                                       your judge beside the published ones (dhp.evaluate)
    dhp extensions                                     every registered extension of every kind
    dhp weights [--out PATH]                           regenerate dhp/resources/expert_weights.csv from the
                                                       registered perturbations' votes (dhp.weights)

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
import contextlib
import os
import sys

from dhp import batch, methods, runlock, weights
from dhp import extensions
from dhp import config as cfg
from dhp.datasets import declared_files
from dhp.lazy import lazy_module
from dhp.errors import DHPError
from dhp.calls import using_engine
from dhp.evaluate import PROFILES, batch_runs, evaluate
from dhp.io import from_cwd, resolve, write_text
from dhp.leaderboard import LeaderboardParams, run_leaderboard
from dhp.recorded import IMPORTERS, MAX_FILE_BYTES, default_path, import_judgments

# Ray is an optional extra: its engine module is imported only when --engine ray asks for it (dhp.lazy)
ray_engine = lazy_module("dhp.backends.ray_engine")

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
        ap.add_argument("--stage", help="run this one stage only (dhp methods lists each method's stages); "
                                        "default: collect, analyze and figures")
        ap.add_argument("--wait", action="store_true", help="when another run writes into the run folder, wait for "
                                                            "it to finish (default: refuse, naming its pid)")

    m, config, args = config_from_argv(argv, "dhp run", lambda ap: (extra(ap), cfg.add_arguments(ap, cfg.EngineParams)))
    runlock.check_run_dir(config.run_dir)  # never results/, figures/, the repository root or ''; dry run too
    if args.dry_run:
        # as evaluate --dry-run: the plan is made offline (no model list, no tokenizer probe) and says so
        backend = m.backend(config)
        offline = backend.plan_offline() if hasattr(backend, "plan_offline") else None
        for stage, est in m.estimate(config, backend).items():
            if est is not None:
                print(est.describe(stage))
        if offline:
            print(f"Dry run: {offline}.")
        return 0
    # one writer per run folder: run and run_stage take it (refusing); --wait takes it first, waiting
    with (runlock.hold(config.run_dir, wait=True) if args.wait else contextlib.nullcontext(),
          runlock.hold_cache(config.cache_path, config.run_dir, wait=True) if args.wait else contextlib.nullcontext(),
          _engine(args)):
        paths = methods.run_stage(m, args.stage, config).paths if args.stage else methods.run(m.name, config)
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def _engine(args):
    """``--engine``: the block in which dhp.calls.run hands its calls to that engine (its plan line printed first)."""
    params = cfg.from_arguments(cfg.EngineParams, args)
    if params.engine == "live":
        return contextlib.nullcontext()
    engine = ray_engine.RayEngine(params)
    print(engine.describe(), file=sys.stderr)
    return using_engine(engine)


def _batch(action: str, argv: list[str]) -> int:
    def extra(ap):
        if action == "export":
            ap.add_argument("--out", required=True, help="the OpenAI Batch input file to write (JSONL)")
        else:
            ap.add_argument("results", help="the batch job's output file (JSONL)")
        ap.add_argument("--wait", action="store_true", help="when another run writes into the run folder, wait for "
                                                            "it to finish (default: refuse, naming its pid)")

    if argv and argv[0] == "evaluate":  # every method of an evaluation: one file, one custom_id space
        ap = _evaluate_parser(f"dhp batch {action} evaluate")  # (it has --wait)
        if action == "export":
            ap.add_argument("--out", required=True, help="the OpenAI Batch input file to write (JSONL)")
        else:
            ap.add_argument("results", help="the batch job's output file (JSONL)")
        args = ap.parse_args(argv[1:])
        collect, cache = batch_runs(args.judge, args.profile, args.mode, args.run_dir, args.data_dir, args.seed,
                                    args.protocols, allow_insecure_key=args.allow_insecure_key)
        run_dir = os.path.dirname(cache)
    else:
        m, config, args = config_from_argv(argv, f"dhp batch {action}", extra)
        m.check_mode(config)
        collect = lambda: m.collect(config)  # noqa: E731 - the run whose pending calls are exported/imported
        cache, run_dir = config.cache, config.run_dir
    # its cache is the run's (or a --cache-path outside it, locked too): one writer at a time
    with runlock.hold(run_dir, wait=args.wait), runlock.hold_cache(cache, run_dir, wait=args.wait):
        if action == "export":
            n = batch.export_calls(collect, args.out)
            print(f"wrote {n} pending calls to {args.out}" if n else "nothing to export: every call is cached")
        else:
            print(batch.import_results(collect, from_cwd(args.results), cache).describe())
    return 0


def _import_judgments(rest: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="dhp import-judgments",
                                 description="Import recorded judgments into a run folder (dhp.recorded).")
    ap.add_argument("kind", choices=sorted(IMPORTERS))
    ap.add_argument("path", nargs="?", help="a file, or a folder searched recursively (default: the source's place "
                                            "under the data root, its importer's default)")
    ap.add_argument("--run-dir", required=True, help="the run folder to write the tables into")
    ap.add_argument("--dataset", help="table: the dataset table item ids are checked against")
    ap.add_argument("--scale", nargs=2, type=float, metavar=("LOW", "HIGH"), help="table: the scores' scale")
    ap.add_argument("--lp", help=extensions.expand_help("the language pair of a source that has one ({registered:recorded "
                                             "source:lp}), when no folder name gives it"))
    ap.add_argument("--data-dir", help="the data root of the default PATH; table: where LLMBar is read from for the "
                                       "id check")
    ap.add_argument("--max-mb", type=float, default=MAX_FILE_BYTES / 2**20, help="size limit of one file (MiB)")
    args = ap.parse_args(rest)
    if args.path is None:
        if IMPORTERS[args.kind].default is None:
            ap.error(f"{args.kind}: name the file or folder to import")
        args.path = default_path(args.kind, args.data_dir)
    else:
        args.path = from_cwd(args.path)  # a file or folder named on the command line: relative to the current dir
    with runlock.hold(args.run_dir):  # one writer per run folder; never results/, figures/ or the root
        report = import_judgments(args.kind, args.path, args.run_dir, dataset=args.dataset, scale=args.scale,
                                  lp=args.lp, data_dir=args.data_dir, max_bytes=int(args.max_mb * 2**20))
    print(report.describe())
    return 0


def _leaderboard(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="dhp leaderboard",
                                 description="Compare the judges of a run folder on every view (dhp.leaderboard).")
    cfg.add_arguments(ap, LeaderboardParams)
    config = cfg.from_arguments(LeaderboardParams, ap.parse_args(argv))
    for name, path in run_leaderboard(config).items():
        print(f"{name}: {path}")
    return 0


def _data(argv: list[str]) -> int:
    """``data list`` / ``data fetch`` / ``data doc``: the declared input files (dhp.datasets.declared_files)."""
    ap = argparse.ArgumentParser(prog="dhp data", description="The workbench's input files, declared "
                                 "in dhp/resources/data_registry.json (docs/data.md).")
    sub = ap.add_subparsers(dest="action", required=True)
    ls = sub.add_parser("list", help="each data set: files present, size, licence, source")
    ls.add_argument("--data-dir", help="the data root (default: DHP_DATA_DIR, else docs/data.md)")
    ls.add_argument("--verify", action="store_true", help="also check the sha256 of every present file")
    fe = sub.add_parser("fetch", help="fetch what is missing (checked against the declared sha256)")
    fe.add_argument("names", nargs="*", help="data sets, declared paths or folders of the data root")
    fe.add_argument("--for", dest="for_", choices=["demo"], help="every set the demo reads")
    fe.add_argument("--all", action="store_true", help="every openly licensed set")
    fe.add_argument("--data-dir", help="the data root to fill (default: as for list)")
    doc = sub.add_parser("doc", help="write docs/data.md from the declaration")
    doc.add_argument("--out", default="docs/data.md")
    args = ap.parse_args(argv)
    if args.action == "doc":
        print(write_text(resolve(args.out), declared_files.markdown()))
        return 0
    root = declared_files.data_root(args.data_dir)
    if args.action == "list":
        print(f"data root: {root}")
        print(f"{'set':27} {'present':>9} {'size':>9}  {'licence':24} source")
        for r in declared_files.status(args.data_dir):
            mark = " (demo)" if r["demo"] else " (user-supplied)" if r["fetch"] != "open" else ""
            print(f"{r['set']:27} {r['present']:>4}/{r['files']:<4} {r['bytes'] / 1e6:>7.1f}MB  "
                  f"{r['licence'][:24]:24} {r['source']}{mark}")
        if args.verify:
            bad = declared_files.differing(args.data_dir)
            print(f"sha256: {'all present files match' if not bad else f'{len(bad)} differ: ' + ', '.join(bad)}")
            return 1 if bad else 0
        return 0
    names = list(args.names)
    if args.for_ == "demo":
        names += declared_files.demo_sets()
    if args.all:
        names += [n for n, s in declared_files.sets().items() if s.fetch == "open"]
    if not names:
        ap.error("name data sets or paths, or pass --for demo or --all")
    chosen = declared_files.select(dict.fromkeys(names))
    got = declared_files.fetch(chosen, root, progress=True, replace_wrong_size=True)
    print(f"{root}: fetched {len(got)} file(s) ({sum(f.bytes or 0 for f in got) / 1e6:.1f} MB); "
          f"{len(chosen) - len(got)} already present")
    return 0


def _evaluate_parser(prog: str = "dhp evaluate") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=(
        "Run every method your judge's mode supports on the units of the published judges, then the leaderboard "
        "and the report card, into its own run folder (dhp.evaluate)."))
    ap.add_argument("judge", help="judge spec, e.g. openai:<model>@http://host:8000/v1 (model optional when the "
                                  "server lists one), openai:gpt-4o-mini, embedded")
    ap.add_argument("--profile", choices=PROFILES, default="quick",
                    help="quick: minutes on a CPU, a few pairs; standard: samples of every view; paper: the "
                         "published sizes (default quick)")
    ap.add_argument("--mode", default="logprobs", help="logprobs | sample (default logprobs)")
    ap.add_argument("--run-dir", help="run folder (default runs/evaluate/<judge>); never results/ or figures/")
    ap.add_argument("--data-dir", help="dataset root (default: DHP_DATA_DIR, else the per-user cache; docs/data.md)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--yes", action="store_true", help="run without asking after the plan")
    ap.add_argument("--dry-run", action="store_true", help="print the plan only; call nothing, write nothing")
    ap.add_argument("--wait", action="store_true", help="when another run writes into the run folder, wait for "
                                                        "it to finish (default: refuse, naming its pid)")
    ap.add_argument("--allow-insecure-key", action="store_true",
                    help="allow sending OPENAI_API_KEY over plain http to a non-loopback host")
    ap.add_argument("--protocol", action="append", dest="protocols", metavar="P",
                    help="run only this judge protocol (repeatable): llmbar:<Strategy> (LLMBar pairs) or "
                         "gemba:DA ... gemba:classes_ref (WMT22 segments beside GEMBA's recorded judges)")
    return ap


def _evaluate(argv: list[str]) -> int:
    ap = _evaluate_parser()
    cfg.add_arguments(ap, cfg.EngineParams)
    a = ap.parse_args(argv)
    evaluate(a.judge, a.profile, a.mode, a.run_dir, a.data_dir, yes=a.yes, dry_run=a.dry_run, seed=a.seed,
             allow_insecure_key=a.allow_insecure_key, protocols=a.protocols, wait=a.wait,
             engine=cfg.from_arguments(cfg.EngineParams, a))
    return 0


def _weights(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="dhp weights", description=(
        "Regenerate the shipped expert weights from every registered perturbation's declared votes (dhp.weights)."))
    ap.add_argument("--out", help="where to write (default: dhp/resources/expert_weights.csv, replaced)")
    print(weights.write_default_weights(ap.parse_args(argv).out))
    return 0


#: Options whose value is a path: given relative, it is relative to the current directory (dhp.io.from_cwd).
PATH_OPTIONS = ("--run-dir", "--out", "--figures-dir", "--data-dir", "--cache-path", "--results-dir")
#: --dataset is a path when it names a file (a CSV/JSONL/Parquet of your texts), else a registered dataset's name.
DATASET_FILE = (".csv", ".tsv", ".jsonl", ".json", ".parquet")


def _paths_from_cwd(argv: list[str]) -> list[str]:
    """The command line with every path option made absolute against the current directory."""
    out = list(argv)
    for i, tok in enumerate(out):
        flag, eq, value = tok.partition("=")
        is_path = flag in PATH_OPTIONS
        if flag == "--dataset":
            nxt = value if eq else (out[i + 1] if i + 1 < len(out) else "")
            is_path = nxt.lower().endswith(DATASET_FILE) or os.sep in nxt
        if not is_path:
            continue
        if eq and value:
            out[i] = f"{flag}={from_cwd(value)}"
        elif not eq and i + 1 < len(out) and out[i + 1] and not out[i + 1].startswith("-"):
            out[i + 1] = from_cwd(out[i + 1])
    return out


def main(argv=None) -> int:
    argv = _paths_from_cwd(list(sys.argv[1:] if argv is None else argv))
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
        if command == "data":
            return _data(rest)
        if command == "evaluate":
            return _evaluate(rest)
        if command == "extensions":
            print(extensions.describe_all())
            return 0
        if command == "weights":
            return _weights(rest)
    except DHPError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("error: use `dhp methods`, `dhp run --method NAME ...`, "
          "`dhp batch export ... --out F`, `dhp batch import F ...`, "
          "`dhp import-judgments KIND PATH --run-dir R`, `dhp leaderboard --run-dir R` or "
          "`dhp evaluate JUDGE`",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
