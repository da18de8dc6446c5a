"""Batch runner: execute the methods' notebooks over a grid of judges × modes (× datasets) with papermill.

    python -m dhp.grid params/demo.yaml

The grid YAML names the judges, modes and methods (any registered method: dhp.methods) and gives method parameters
— ``params`` for every method that has the parameter, ``method_params`` per method, ``overrides`` for some judges
(e.g. a cheap baseline judge on more items). Every parameter is validated against the method's parameter model
(dhp.config) before anything runs. Layout (run_id from the YAML):

    runs/<run_id>/<method>/[<dataset>/]<shared notebooks>         a method's judge-independent stage (dhp: 01_perturb)
    runs/<run_id>/<method>/[<dataset>/]<judge>-<mode>/NN_*.ipynb   one run folder per grid point
    runs/<run_id>/aggregate/*.ipynb                                notebooks on the collected results: the methods'
                                                                   result notebooks (dhp: 04, 05), 10_report_card
    results/<table>.csv     every point's numeric tables stacked (judge and mode columns; never texts)
    figures/                regenerated from results/
    runs/<run_id>/staging/{results,figures}   where a run writes them first (see below)

Nothing a run does destroys results: the tables and figures are written into runs/<run_id>/staging (which starts
as a copy of results/), and only a run in which every notebook succeeded publishes them — each file replaced
atomically, only where its bytes changed; the tables of methods not run this time removed, as the card reads them
"not run". A run that fails, raises or is killed leaves results/ and figures/ as they were; its staged tables and
figures stay for inspection.

Every notebook gets one progress line when it starts and one with its elapsed time when it ends; while it runs, a
bar shows its model calls (the notebook's ``progress`` parameter names a file the call engine keeps up to date). A failing cell is recorded
(notebook, parameters, cell, error) and the other grid points go on; the run ends with a summary of failures and a
non-zero exit status if any. At the end the grid prints every notebook's and step's time.

(The module is long because it holds the whole batch runner: the grid's schema, the run order of points and shared
stages, stamps, gathering and the report; each is a few functions.)

A rerun skips what is up to date, as ``make`` does: each executed notebook gets a stamp (``NN_*.ipynb.stamp``: a
hash of dhp's code and resources, the notebook, its parameters and the stamps of the notebooks it reads from), and a
notebook whose stamp is unchanged is not run again; its tables are used as they are. ``rerun: true`` (or
``--rerun``) runs everything; a failed notebook loses its stamp. The notebooks that write into the staging folder
(leaderboard, result notebooks, report card) get theirs only once their output is published.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import hashlib
import json
import os
import re
import resource
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import yaml
from pydantic import Field, field_validator, model_validator

from dhp import methods, runlock
from dhp.config import MODES, EngineParams, Params, validate
from dhp.datasets import data_root
from dhp.errors import DHPError
from dhp.io import decode_user_text, project_root, read_table, resolve, slug, write_bytes, write_csv, write_manifest
from dhp.leaderboard import LeaderboardParams
from dhp.methods import read_tables
from dhp.recorded import IMPORTERS
from dhp.lazy import lazy_module

ray_engine = lazy_module("dhp.backends.ray_engine")  # the optional extra: imported only when asked for

REPORT_NB = "10_report_card"
LEADERBOARD_NB = "11_leaderboard"
__all__ = ["GridParams", "load_params", "validate_params", "run_grid", "main", "slug", "points"]


class JudgeEntry(Params):
    """A judge with its own modes (a base model has no chat modes; a baseline judge has only 'metric')."""

    judge: str = Field(description="judge spec, e.g. embedded:gemma-3-270m or baseline:rouge_l_src")
    modes: list[str] = Field(min_length=1, description=f"its modes, from {list(MODES)}")
    methods: list[str] | None = Field(None, min_length=1, description="the grid's methods this judge runs in these "
                                      "modes (None: all of them); the others read \"not run\" on its card")
    notebooks: bool = Field(True, description="false: its points run through the stage runner (dhp.methods.run) "
                            "inside the grid, with no notebook kernel and no per-point figures: the same method "
                            "tables, no executed notebook to read (for controls and baselines: a notebook's kernel, "
                            "imports, figures and lesson extras cost 5-35 CPU s a point, the analysis of a control "
                            "about 1 s). A notebook's extras beside the judge (the bias lesson's recorded judges) "
                            "come from the points that run it")


class Override(Params):
    """Parameters for some judges (and methods): e.g. a cheap baseline judge on more items."""

    judges: list[str] = Field(description="the judge specs this override applies to")
    modes: list[str] | None = Field(None, description="the modes it applies to (None: all)")
    methods: list[str] | None = Field(None, description="the methods it applies to (None: all)")
    params: dict[str, Any] = Field(default_factory=dict, description="method parameters for these judges")


class GridParams(EngineParams):
    """The grid YAML (python -m dhp.grid FILE): what runs, and where the results go (``engine: ray``: every point's
    calls through Ray Data, dhp.config.EngineParams)."""

    run_id: str = Field("default", description="name of the run folder under runs_dir")
    judges: list[str | JudgeEntry] = Field(min_length=1, description="judge specs, e.g. [embedded, "
                                                                     "'openai:gpt-4o-mini'], or {judge, modes} for a "
                                                                     "judge with its own modes")
    modes: list[str] = Field(min_length=1, description=f"judge modes from {list(MODES)} (for judges given without "
                                                       "their own)")
    methods: list[str] = Field(
        ["dhp"], description="registered methods to run per judge × mode, or 'all': every registered method "
                             "(python -m dhp methods); a method that requires another's tables runs after it, in "
                             "its folder")
    datasets: list[str] | None = Field(None, description="datasets for methods that take one (one run each; "
                                                         "None: the method's default)")
    params: dict[str, Any] = Field(default_factory=dict, description="method parameters for every method that "
                                                                     "has them (e.g. seed, n_boot, cache_path)")
    protocols: list[str] = Field(default_factory=list, description="published judge protocols, as evaluate "
                                 "--protocol (e.g. [llmbar:Rating, llmbar:Swap], [gemba:DA_ref]): each method of "
                                 "methods that runs one gets its parameters in protocol_profile; params, "
                                 "method_params and overrides still win. [] (default): none")
    protocol_profile: Literal["quick", "standard", "paper"] = Field("quick", description="the evaluate profile whose units the protocols run on")
    method_params: dict[str, dict[str, Any]] = Field(default_factory=dict, description="parameters per method")
    overrides: list[Override] = Field(default_factory=list, description="parameters for some judges")
    runs_dir: str = Field("runs", description="where executed notebooks go")
    results_dir: str = Field("results", description="aggregated tables (numbers only)")
    figures_dir: str = Field("figures", description="aggregated figures")
    notebooks_dir: str = Field("notebooks", description="folder holding the notebooks")
    execution_timeout: int | None = Field(None, ge=1, description="seconds allowed per cell (None: no limit)")
    rerun: bool = Field(False, description="run every notebook, even those whose stamp says they are up to date")
    workers: int = Field(2, ge=1, description="run folders executed at the same time (each a notebook kernel; an "
                                              "embedded judge then gets one llama.cpp thread each): 2 for 2 cores")
    report_card: bool = Field(True, description="write results/report_card.csv and its figures at the end")
    result_notebooks: bool = Field(True, description="run the methods' notebooks on the aggregated results")
    leaderboard: dict[str, Any] | None = Field(
        default_factory=dict, description="compare the judges (notebook 11) on every point's tables gathered into "
                                          "runs/<run_id>/leaderboard, with these leaderboard parameters (e.g. "
                                          "{recorded: [llmbar, mtme]}); null: no leaderboard")

    @field_validator("leaderboard")
    @classmethod
    def _leaderboard_params(cls, v):
        if v is not None:
            bad = sorted(set(v) & {"run_dir", "figures_dir"})
            if bad:
                raise ValueError(f"{bad} are set by the grid")
            validate(LeaderboardParams, v, source="grid leaderboard")
        return v

    @field_validator("run_id")
    @classmethod
    def _safe_run_id(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", v) or v in (".", ".."):
            raise ValueError("it has characters unsafe in a folder name; use letters, digits, '.', '_' or '-'")
        return v

    @field_validator("modes")
    @classmethod
    def _known_modes(cls, v: list[str]) -> list[str]:
        bad = [m for m in v if m not in MODES]
        if bad:
            raise ValueError(f"unknown mode(s) {bad}; use modes from {list(MODES)}")
        return v

    def judge_modes(self) -> list[tuple[str, list[str]]]:
        """(judge spec, its modes) for every judge of the grid."""
        return [(j, list(self.modes)) if isinstance(j, str) else (j.judge, list(j.modes)) for j in self.judges]

    def judge_methods(self, judge: str, mode: str) -> list[str] | None:
        """The methods a judge runs in a mode when its entry names them (JudgeEntry.methods), else None: all."""
        for j in self.judges:
            if not isinstance(j, str) and j.judge == judge and mode in j.modes and j.methods is not None:
                return list(j.methods)
        return None

    def without_notebooks(self) -> set[str]:
        """The judge specs whose points run through the stage runner, without a notebook (JudgeEntry.notebooks)."""
        return {j.judge for j in self.judges if not isinstance(j, str) and not j.notebooks}

    @field_validator("judges")
    @classmethod
    def _judge_modes_known(cls, v):
        bad = [m for j in v if not isinstance(j, str) for m in j.modes if m not in MODES]
        if bad:
            raise ValueError(f"unknown mode(s) {bad}; use modes from {list(MODES)}")
        return v

    @model_validator(mode="before")
    @classmethod
    def _all_methods(cls, data):
        if isinstance(data, dict) and data.get("methods") == "all":  # the registry's list, never one kept by hand
            data = {**data, "methods": methods.names()}
        return data

    @field_validator("methods")
    @classmethod
    def _known_methods(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("name at least one method, or 'all'")
        bad = [m for m in v if m not in methods.names()]
        if bad:
            raise ValueError(f"unknown method(s) {bad}; use methods from {methods.names()}")
        for name in v:
            missing = [r for r in methods.get(name).requires if r not in v]
            if missing:
                raise ValueError(f"method {name!r} reads the tables of {missing}, which the grid does not run; add "
                                 "them to methods")
        # a method that requires another's tables runs after it (stable: the rest keep their order)
        return sorted(v, key=lambda name: bool(methods.get(name).requires))


@dataclass(frozen=True)
class Point:
    """One run of one method: a judge × mode (× dataset), its folder and validated parameters."""

    method: str
    judge: str
    mode: str
    dataset: str | None
    folder: Path
    config: Any


def _protocol_values(g: GridParams, method: methods.Method) -> dict:
    """The parameters ``method`` runs the grid's protocols with (Method.protocol_params; {} when it runs none)."""
    if not g.protocols:
        return {}
    return dict(method.protocol_params(g.protocol_profile, list(g.protocols), g.params.get("data_dir")) or {})


def _values(g: GridParams, method: methods.Method, judge: str, mode: str, dataset: str | None) -> dict:
    fields = method.Params.model_fields
    values = {k: v for k, v in _protocol_values(g, method).items() if k in fields}
    values.update({k: v for k, v in g.params.items() if k in fields})
    values.update(g.method_params.get(method.name, {}))
    for o in g.overrides:
        if judge in o.judges and (o.methods is None or method.name in o.methods) and (o.modes is None or
                                                                                        mode in o.modes):
            values.update({k: v for k, v in o.params.items() if k in fields})
    values.update(judge=judge, mode=mode)
    if dataset is not None:
        values["dataset"] = dataset
    for k in ("cache_path", "data_dir", "expert_weights", "path"):
        if values.get(k) is not None:
            values[k] = str(resolve(values[k]))
    return values


def points(g: GridParams) -> tuple[list[Point], list[str]]:
    """Every grid point with its validated parameters, and the (method, judge, mode) combinations a method does not
    support ("not run" on the card). A bad parameter fails here, naming the method and the key, before any run."""
    root = resolve(g.runs_dir) / g.run_id
    out, not_applicable = [], []
    known = set().union(*(methods.get(m).Params.model_fields for m in g.methods))
    unknown = sorted(set(g.params) - known)
    if unknown:
        raise DHPError(f"grid params: {unknown} is no parameter of the methods {g.methods}.",
                       "use only parameters of those methods (python -m dhp run --method NAME --help).")
    for o in g.overrides:
        targets = [methods.get(m) for m in (o.methods or g.methods) if m in g.methods]
        stray = sorted(set(o.params) - set().union(*(m.Params.model_fields for m in targets)))
        if stray:
            raise DHPError(f"grid overrides: {stray} is no parameter of the methods {[m.name for m in targets]}.",
                           "use parameters of the methods the override names (python -m dhp run --method NAME "
                           "--help).")
    methods.check_protocol_names(g.protocols, "grid protocols: ")  # as evaluate: any registered name
    claimed = {p for p in g.protocols for m in g.methods if methods.get(m).protocol_params(
        g.protocol_profile, [p], g.params.get("data_dir"))}
    if set(g.protocols) - claimed:
        raise methods.protocol_refusal(set(g.protocols) - claimed, g.protocol_profile, None, g.methods,
                                       g.params.get("data_dir"), "grid protocols: ")
    for j in g.judges:
        stray = [] if isinstance(j, str) or j.methods is None else [m for m in j.methods if m not in g.methods]
        if stray:
            raise DHPError(f"grid judges: {j.judge!r} names methods {stray}, which are not in methods {g.methods}.",
                           "name methods the grid runs, or add them to methods.")
    for name in g.method_params:
        if name not in g.methods:
            raise DHPError(f"grid method_params names {name!r}, which is not in methods {g.methods}.",
                           "add it to methods or remove its parameters.")
    owner: dict[tuple, str] = {}  # methods taught by the same notebooks share one run folder per point
    homes: dict[str, str] = {}
    for name in g.methods:
        m = methods.get(name)
        # a method that reads another's tables runs in that method's folders (its datasets, its judges' folders)
        home = homes[m.requires[0]] if m.requires else owner.setdefault(tuple(m.notebooks), name) if m.notebooks \
            else name
        homes[name] = home
        lead = methods.get(m.requires[0]) if m.requires else m
        datasets = (g.datasets or [None]) if "dataset" in lead.Params.model_fields else [None]
        for dataset in datasets:
            for judge, modes in g.judge_modes():
                for mode in modes:
                    own = g.judge_methods(judge, mode)
                    if own is not None and name not in own:
                        not_applicable.append(f"{name} for {judge} in {mode} mode (not among the methods the grid "
                                              "gives it)")
                        continue
                    if mode not in m.modes:
                        not_applicable.append(f"{name} for {judge} in {mode} mode (it runs in {', '.join(m.modes)})")
                        continue
                    if m.refuses(judge, mode):
                        not_applicable.append(f"{name} for {judge} in {mode} mode ({m.refuses(judge, mode)})")
                        continue
                    base = root / home / (dataset or "")
                    folder = base / f"{slug(judge)}-{mode}"
                    values = _values(g, m, judge, mode, dataset if "dataset" in m.Params.model_fields else None)
                    values.setdefault("run_dir", str(folder))
                    values["run_dir"], values["figures_dir"] = str(folder), str(folder / "figures")
                    cfg = validate(m.Params, values, source=f"grid method {name!r} (judge {judge}, mode {mode})")
                    out.append(Point(name, judge, mode, dataset, folder, cfg))
    return out, not_applicable


def describe_plan(g: GridParams) -> str:
    """The grid's points, one line each (method, judge, mode, dataset, run folder), then the combinations a method
    does not run: what ``python -m dhp.grid PARAMS --plan`` prints. Nothing runs and nothing is written."""
    pts, not_applicable = points(g)
    lines = [f"{len(pts)} point(s) of grid {g.run_id}:"]
    lines += [f"  {p.method:24s} {p.judge:32s} {p.mode:10s} {p.dataset or '-':16s} {p.folder}" for p in pts]
    if not_applicable:
        lines += [f"not applicable ({len(not_applicable)}):", *(f"  {x}" for x in not_applicable)]
    return "\n".join(lines)


def validate_params(raw, source: str = "params") -> GridParams:
    """A grid mapping validated (and every point's method parameters with it); DHPError names the first problem."""
    if not isinstance(raw, dict):
        raise DHPError(f"{source}: the YAML must be a mapping of keys to values.", "see params/demo.yaml for the format.")
    g = validate(GridParams, raw, source=source)
    points(g)
    return g


def load_params(path) -> GridParams:
    """Read and validate a grid YAML file."""
    f = resolve(path)
    if not f.exists():
        raise DHPError(f"Grid parameter file not found: {f}.", "pass an existing YAML, e.g. params/demo.yaml.")
    try:
        data = f.read_bytes()
    except OSError as e:
        raise DHPError(f"Cannot read the grid parameter file {f}: {e.strerror or e}.",
                       "check the path and that the file is readable.") from None
    text = decode_user_text(data, str(f))  # UTF-8 only: another encoding is named, with how to convert it
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise DHPError(f"{f} is not valid YAML: {e}.", "fix the YAML syntax.") from None
    except (ValueError, RecursionError) as e:  # a value YAML parses but Python cannot hold (2024-13-01 as a date)
        raise DHPError(f"{f} holds a value that cannot be read: {e}.",
                       "quote the value to make it text, or fix it.") from None
    return validate_params(raw, source=str(f))


# ---------------------------------------------------------------------------------------------- execution

@dataclass
class Failure:
    notebook: str
    parameters: dict
    cell: str
    error: str


@dataclass
class Report:
    failures: list[Failure] = field(default_factory=list)
    timings: list[tuple[str, float]] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  # notebook or step -> CPU seconds (kernel, or the grid's own)
    skipped: list[str] = field(default_factory=list)
    not_applicable: list[str] = field(default_factory=list)
    up_to_date: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    stamps: dict = field(default_factory=dict)  # run folder -> stamp of its last notebook (what reads it depends on)
    # (stamp file, stamp) of notebooks whose output went to the staging folder: written when it is published, so
    # a run that did not publish runs them again (their stamp must not vouch for output that never arrived)
    deferred: list[tuple[Path, str]] = field(default_factory=list)
    steps: list[tuple[str, float]] = field(default_factory=list)  # the grid's own steps outside notebooks
    staging: Path | None = None
    published: list[str] | None = None  # files of results/ and figures/ this run changed (None: not published)


def _declared_parameters(nb_path: Path) -> set[str] | None:
    """Names assigned in the notebook's `parameters` cell (None if it has none or cannot be parsed)."""
    import nbformat

    nb = nbformat.read(str(nb_path), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            try:
                tree = ast.parse(cell.source)
            except SyntaxError:
                return None
            names = set()
            for node in tree.body:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
            return names
    return None


class _CallProgress:
    """A tqdm bar in this process fed by the JSON file that dhp.calls keeps up to date inside the notebook's
    kernel (papermill shows nothing of a cell until it ends). One bar per call-engine run; polled twice a
    second by a daemon thread."""

    def __init__(self, label: str):
        fd, self.path = tempfile.mkstemp(prefix="dhp-progress-", suffix=".json")
        os.close(fd)
        os.unlink(self.path)  # the kernel creates it when its first run starts
        self.label, self.bar, self.key = label, None, None
        self.printed, self.shown = 0.0, None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self._show()  # the last state, so a bar ends at its true count
        if self.bar is not None:
            self.bar.close()
        Path(self.path).unlink(missing_ok=True)

    def _poll(self):
        while not self.stop.wait(0.5):
            self._show()

    def _show(self):
        try:
            state = json.loads(Path(self.path).read_text())
        except (OSError, ValueError):
            return
        key = (state.get("run"), state.get("desc"), state.get("total"))
        done, total = int(state.get("done", 0)), int(state.get("total", 0))
        label = f"  {self.label}: {state.get('desc', 'calls')}"
        if not sys.stdout.isatty():  # a log file: a plain line per run start, every 15 s and at the end
            now = time.monotonic()
            if key != self.key or now - self.printed >= 15 or (done == total and self.shown != (key, done)):
                self.key, self.printed, self.shown = key, now, (key, done)
                print(f"{label}: {done}/{total} calls", flush=True)
            return
        from tqdm import tqdm

        if key != self.key:  # a new call-engine run inside the notebook: a new bar
            if self.bar is not None:
                self.bar.close()
            self.key = key
            self.bar = tqdm(total=total, desc=label, unit="call", file=sys.stdout, mininterval=1.0, leave=True)
        self.bar.n = done
        self.bar.refresh()


@functools.lru_cache(maxsize=1)
def _code_stamp() -> str:
    """A hash of dhp's code, prompts and resources: a changed file makes every notebook out of date."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _stamp(nb_path: Path, params: dict, *upstream: str) -> str:
    """The stamp of a notebook run: dhp's code, the notebook, its parameters, what it reads from (upstream stamps,
    the data folder)."""
    declared = _declared_parameters(nb_path)  # what the notebook is given (as _execute passes it)
    params = {k: v for k, v in params.items() if declared is None or k in declared}
    h = hashlib.sha256()
    for part in (_code_stamp(), nb_path.read_bytes(), json.dumps(params, sort_keys=True, default=str),
                 os.environ.get("DHP_DATA_DIR", ""), *upstream):
        h.update(part if isinstance(part, bytes) else str(part).encode())
        h.update(b"\0")
    return h.hexdigest()


def _stamp_file(out_path: Path) -> Path:
    return out_path.with_name(out_path.name + ".stamp")


def _fresh(out_path: Path, stamp: str, g: GridParams) -> bool:
    """The executed notebook exists and ran with this very stamp (and rerun is off)."""
    f = _stamp_file(out_path)
    return not g.rerun and out_path.is_file() and f.is_file() and f.read_text() == stamp


def _up_to_date(out_paths: list[Path], report: Report) -> None:
    for out in out_paths:
        print(f"[grid] up to date {_rel(out)}", flush=True)
        report.up_to_date.append(_rel(out))


def _execute(nb_path: Path, out_path: Path, params: dict, g: GridParams, report: Report,
             watch_calls: bool = True, stamp: str | None = None, staged: bool = False) -> bool:
    """Run one notebook with the parameters it declares; True if it succeeded. Prints a line when it starts, a bar
    for its model calls while it runs (``watch_calls``: the watcher's file is the notebook's ``progress``
    parameter; notebooks run side by side go without it) and its elapsed time. ``staged``: it writes into the staging
    folder, so its stamp waits for the publication (Report.deferred)."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    declared = _declared_parameters(nb_path)
    use = {k: v for k, v in params.items() if declared is None or k in declared}
    # only a notebook that declares `progress` can hand the watcher's file to its calls (papermill warns otherwise)
    watch_calls = watch_calls and (declared is None or "progress" in declared)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    _stamp_file(out_path).unlink(missing_ok=True)  # written again only if this run succeeds
    rel = _rel(out_path)
    t0, cpu0 = time.perf_counter(), children_cpu_seconds()
    print(f"[grid] {rel}  {use}", flush=True)
    try:
        with _CallProgress(out_path.stem) if watch_calls else contextlib.nullcontext() as watcher:
            pm.execute_notebook(  # the watcher's file reaches the call engine as the run's progress parameter
                str(nb_path), str(out_path), parameters={**use, "progress": watcher.path} if watcher else use,
                # the kernel starts in the notebook's folder (nbclient's resources path): papermill's cwd= would
                # chdir this whole process, and two notebooks run side by side would leave it in the wrong folder
                resources={"metadata": {"path": str(nb_path.parent)}}, progress_bar=False,
                execution_timeout=g.execution_timeout, kernel_name="python3",
                # the kernel's start-up warning about its loopback TCP transport is noise in a batch log
                extra_arguments=["--IPKernelApp.log_level=ERROR"],
            )  # fmt: skip
        ok = True
    except PapermillExecutionError as e:
        src = (e.source or "").strip().splitlines()
        # cell_index counts the parameters cell papermill injects: it indexes the executed notebook.
        first = src[0][:80] if src else ""
        where = f"cell {e.cell_index} of the executed notebook (execution count {e.exec_count}), starting: {first}"
        report.failures.append(Failure(rel, use, where, f"{e.ename}: {str(e.evalue)[:500]}"))
        ok = False
    except Exception as e:  # kernel died, notebook missing, timeout...
        report.failures.append(Failure(rel, use, "(before/outside a cell)", f"{type(e).__name__}: {str(e)[:500]}"))
        ok = False
    elapsed = time.perf_counter() - t0
    report.timings.append((rel, elapsed))
    report.cpu[rel] = children_cpu_seconds() - cpu0
    if ok and stamp is not None:
        if staged:
            report.deferred.append((_stamp_file(out_path), stamp))
        else:
            _stamp_file(out_path).write_text(stamp)
    print(f"[grid] {'done' if ok else 'FAILED'} {rel} in {elapsed:.1f} s "
          f"(grid elapsed {time.perf_counter() - report.started:.0f} s)", flush=True)
    return ok


def _rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(project_root()))
    except ValueError:
        return str(path)


def _nb(g: GridParams, name: str) -> Path:
    f = resolve(g.notebooks_dir) / f"{name}.ipynb"
    if not f.exists():
        raise DHPError(f"Notebook {f} not found.", "run from a complete checkout or fix notebooks_dir.")
    return f


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _clear(folder: Path, m: methods.Method) -> None:
    """Remove a point's earlier tables before it runs: a failed run must not leave a stale table to aggregate."""
    for t in (*m.collects, *m.produces):
        (folder / t.name).unlink(missing_ok=True)


def _shared_stage(g: GridParams, m: methods.Method, group: list[Point], report: Report) -> bool:
    """Run the method's judge-independent notebooks once for a group of points (same dataset), with the largest
    item count any point asks for, and hand their tables to every point's folder. True if it succeeded."""
    if not m.shared_notebooks:
        return True
    folder = group[0].folder.parent
    widest = max(group, key=lambda p: getattr(p.config, "n_items", 0) or 0)
    params = {**widest.config.model_dump(), "run_dir": str(folder), "figures_dir": str(folder / "figures")}
    stamps, prev = [], ""
    for name in m.shared_notebooks:
        prev = _stamp(_nb(g, name), params, prev)
        stamps.append(prev)
    outs = [folder / f"{name}.ipynb" for name in m.shared_notebooks]
    report.stamps[folder] = prev
    if all(_fresh(o, s, g) for o, s in zip(outs, stamps)):
        _up_to_date(outs, report)
        return True
    _clear(folder, m)
    for name, out, s in zip(m.shared_notebooks, outs, stamps):
        if not _execute(_nb(g, name), out, params, g, report, stamp=s):
            report.skipped += [_rel(p.folder) for p in group]
            return False
    for p in group:
        _clear(p.folder, m)
        for t in m.collects:
            if (folder / t.name).exists() and t.name in m.shared_tables:
                _link_or_copy(folder / t.name, p.folder / t.name)
    return True


def _run_points(g: GridParams, pts: list[Point], report: Report) -> list[Point]:
    """Every point's notebooks in order; returns the points whose every notebook succeeded, in grid order. Methods
    taught by the same notebooks (dual_perspective and human_alignment: notebook 09) share a folder: its notebooks
    run once there, with the parameters of all of them.

    The jobs — each method's judge-independent stage, then each run folder's chain of notebooks — run ``g.workers``
    at a time (a folder's chain after its method's stage): points of different judges or methods share nothing but
    the call cache (SQLite, one transaction per reply), so two chains on two cores take little more than one."""
    groups: dict[tuple, list[Point]] = {}
    for p in pts:
        groups.setdefault((p.method, p.dataset), []).append(p)
    jobs: list[_Job] = []
    key = {}  # (folder, notebooks) -> its job: methods taught by the same notebooks share one run of them
    bare = g.without_notebooks()
    for (name, _), group in groups.items():
        m = methods.get(name)
        stage = _Job(f"{name} stage", functools.partial(_shared_stage, g, m, group, report))
        jobs.append(stage)
        for p in group:
            if (p.folder, m.notebooks or p.method) in key:  # its notebooks run for a method sharing them
                continue
            # a method that requires another shares its folder and runs after it there
            before = tuple(j for (folder, _), j in key.items() if folder == p.folder)
            bare_point = bool(m.notebooks) and p.judge in bare
            if m.notebooks and not bare_point:
                run = functools.partial(_run_chain, g, m, p, pts, report)
            else:  # no notebook (the method has none, or the judge runs without): the stage runner runs it
                run = functools.partial(_run_stages, g, m, p, pts, report, figures=not m.notebooks)
            key[(p.folder, m.notebooks or p.method)] = _Job(_rel(p.folder), run, (stage, *before), p,
                                                           filler=bare_point)
            jobs.append(key[(p.folder, m.notebooks or p.method)])
    _run_jobs(jobs, g.workers)
    return [p for p in pts if key[(p.folder, methods.get(p.method).notebooks or p.method)].ok]


def _run_chain(g: GridParams, m: methods.Method, p: Point, pts: list[Point], report: Report) -> bool:
    """One run folder's own notebooks, in order (skipped when every one is up to date); True if all succeeded."""
    together = [q for q in pts if q.folder == p.folder and methods.get(q.method).notebooks == m.notebooks]
    own = [nb for nb in m.notebooks if nb not in m.shared_notebooks]
    params = {}
    for q in reversed(together):  # every sharing method's parameters; the point's own win
        params.update(q.config.model_dump())
    # what its notebooks read was made before: the shared stage's, or (requires) the other method's, stamp
    prev = report.stamps.get(p.folder.parent, "") if m.shared_notebooks else \
        report.stamps.get(p.folder, "") if m.requires else ""
    stamps = []
    for nb in own:
        prev = _stamp(_nb(g, nb), params, prev)
        stamps.append(prev)
    report.stamps[p.folder] = prev
    outs = [p.folder / f"{nb}.ipynb" for nb in own]
    if all(_fresh(o, s, g) for o, s in zip(outs, stamps)):  # its tables are the ones it would write
        _up_to_date(outs, report)
        return True
    if not m.shared_notebooks:
        for q in together:
            _clear(p.folder, methods.get(q.method))
    for i, (nb, out, s) in enumerate(zip(own, outs, stamps)):
        if not _execute(_nb(g, nb), out, params, g, report, stamp=s):
            report.skipped += [f"{_rel(p.folder)}/{n}" for n in own[i + 1:]]
            return False
    return True


@dataclass(eq=False)
class _Job:
    """A unit of the grid's work: runs once its ``after`` jobs succeeded (skipped, not ok, if one did not)."""

    name: str
    run: Any
    after: tuple = ()
    point: Point | None = None
    ok: bool | None = None  # None: not finished
    # a point run without its notebooks (seconds, no model): taken only when no other job is ready, so the slow
    # model points start first and these fill the cores while the last of them runs
    filler: bool = False


def _run_jobs(jobs: list[_Job], workers: int) -> None:
    """Run the jobs on ``workers`` threads, each taking the first job (in list order) whose ``after`` jobs are
    done, a filler (a point run without notebooks) only when no other job is ready. With more than one worker, one
    more thread takes fillers only: they run in this process (a fraction of a core each, under the GIL) beside the
    model points' kernels, instead of all at the end on one core (the demo's 48 took ~110 s there, cold). And an
    embedded judge gets one llama.cpp thread per notebook (DHP_N_THREADS, unless set): two single-threaded runs side
    by side use two cores better than one run on two threads."""
    pending, lock = list(jobs), threading.Condition()
    threads = os.environ.get("DHP_N_THREADS")
    if workers > 1 and not threads:
        os.environ["DHP_N_THREADS"] = "1"  # the kernels inherit it

    def ready(fillers_only: bool) -> _Job | None:
        free = [j for j in pending if all(a.ok is not None for a in j.after)]
        if fillers_only:
            return next((j for j in free if j.filler), None)
        return next((j for j in free if not j.filler), free[0] if free else None)

    def work(fillers_only: bool = False) -> None:
        while True:
            with lock:
                while (left := any(j.filler or not fillers_only for j in pending)) and \
                        (job := ready(fillers_only)) is None:
                    lock.wait()
                if not left:
                    return
                pending.remove(job)
            ok = False
            try:
                ok = all(a.ok for a in job.after) and bool(job.run())
            finally:
                with lock:
                    job.ok = ok
                    lock.notify_all()

    lanes = [False] * max(1, workers) + ([True] if workers > 1 and any(j.filler for j in jobs) else [])
    try:
        with ThreadPoolExecutor(max_workers=len(lanes)) as pool:
            for f in [pool.submit(work, lane) for lane in lanes]:
                f.result()
    finally:
        if workers > 1 and not threads:
            os.environ.pop("DHP_N_THREADS", None)


def _run_stages(g: GridParams, m: methods.Method, p: Point, pts: list[Point], report: Report,
                figures: bool = True) -> bool:
    """Run a point through the stage runner (dhp.methods.run) in its folder, with no notebook: a method that has
    none, or a judge the grid runs without notebooks (then with the methods sharing its folder, each after those
    whose tables it uses: human alignment before dual perspective, as notebook 09 orders them). Skipped when its
    stamp (dhp's code, the parameters, what it reads from) is unchanged; a failure is recorded like a notebook's.
    True if every method succeeded."""
    together = [q for q in pts if q.folder == p.folder and (q is p or (m.notebooks and
                                                                       methods.get(q.method).notebooks == m.notebooks))]
    made = {q.method: {t.name for t in (*methods.get(q.method).collects, *methods.get(q.method).produces)}
            for q in together}
    late = {q.method: any(set(methods.get(q.method).uses) & made[o.method] for o in together if o is not q)
            for q in together}  # (not inside sort's key: list.sort empties the list while it sorts)
    together.sort(key=lambda q: late[q.method])
    prev = report.stamps.get(p.folder.parent, "") if m.shared_notebooks else \
        report.stamps.get(p.folder, "") if m.requires else ""
    h = hashlib.sha256()
    for part in (_code_stamp(), prev, os.environ.get("DHP_DATA_DIR", ""), str(figures),
                 *(json.dumps({"method": q.method, **q.config.model_dump()}, sort_keys=True, default=str)
                   for q in together)):
        h.update(str(part).encode() + b"\0")
    stamp, stamp_file = h.hexdigest(), p.folder / "stage-runner.stamp"
    report.stamps[p.folder] = stamp
    if not g.rerun and stamp_file.is_file() and stamp_file.read_text() == stamp:
        _up_to_date([p.folder / f"{q.method} (stage runner)" for q in together], report)
        return True
    stamp_file.unlink(missing_ok=True)  # written again only if this run succeeds
    if not m.shared_notebooks:  # (the shared stage cleared the folder and linked its tables in)
        for q in together:
            _clear(p.folder, methods.get(q.method))
    for q in together:
        rel = f"{_rel(p.folder)}/{q.method} (stage runner)"
        t0 = time.perf_counter()
        print(f"[grid] {rel}", flush=True)
        try:
            methods.run(q.method, q.config, figures=figures)
            ok = True
        except Exception as e:  # one point's failure is reported; the other points go on
            report.failures.append(Failure(rel, q.config.model_dump(), "(stage runner)", f"{type(e).__name__}: "
                                                                                         f"{str(e)[:500]}"))
            ok = False
        report.timings.append((rel, time.perf_counter() - t0))
        print(f"[grid] {'done' if ok else 'FAILED'} {rel} in {time.perf_counter() - t0:.1f} s "
              f"(grid elapsed {time.perf_counter() - report.started:.0f} s)", flush=True)
        if not ok:
            return False
    stamp_file.parent.mkdir(parents=True, exist_ok=True)
    stamp_file.write_text(stamp)
    return True


def _results_view(df: pd.DataFrame, t: methods.Table) -> pd.DataFrame:
    """What of a table may go to results/: all of a public table; of a "numbers" table its declared columns and
    numeric extras (never free text)."""
    if t.results != "numbers":
        return df
    extra = [c for c in df.columns if c not in t.columns and (pd.api.types.is_numeric_dtype(df[c])
                                                              or pd.api.types.is_bool_dtype(df[c]))]
    return df[[c for c in t.columns if c in df.columns] + extra]


def _once_across_points(df: pd.DataFrame, sizes: list[int]) -> pd.DataFrame:
    """``df`` (the points' tables stacked, ``sizes`` rows each) with a row that an earlier point's table already
    holds left out: a method analyses every judge in its folder, so the recorded judges it sets beside the live one
    (bias's LLMBar judges) come out alike from every point. Repeats within one point's table stay."""
    point = np.repeat(np.arange(len(sizes)), sizes)
    row = pd.util.hash_pandas_object(df, index=False).to_numpy()
    first = pd.Series(point).groupby(row).transform("min").to_numpy()
    return df[point == first].reset_index(drop=True)


def aggregate(done: list[Point], results_dir, report: Report) -> dict[str, Path]:
    """Stack each method's result tables over the points that succeeded into results_dir (CSV). Every table carries
    judge and mode columns, so the report card tells judges apart; a table without them is a failure, left out."""
    out: dict[str, Path] = {}
    by_method: dict[str, list[Point]] = {}
    for p in done:
        by_method.setdefault(p.method, []).append(p)
    for name, pts in by_method.items():
        m = methods.get(name)
        for t in (*m.collects, *m.produces):
            if t.results == "none":
                continue
            parts = []
            for p in pts:
                f = p.folder / t.name
                if not f.exists():
                    continue
                df = read_table(f, t.name, f"the {name} method")
                # a table of the items themselves (partitioned by another column, e.g. bias's pair lengths) is the
                # same for every judge: kept once below; a judge's table must name its judge and mode
                per_judge = bool({"judge", "mode"} & set(t.partition))
                if per_judge and ("judge" not in df.columns or "mode" not in df.columns):
                    report.failures.append(Failure(_rel(f), {}, "(aggregation)",
                                                   "the table has no judge/mode columns: every method table "
                                                   "names the judge and mode of its rows"))
                    continue
                parts.append(_results_view(df, t))
            if parts:
                df = pd.concat(parts, ignore_index=True)
                if not {"judge", "mode"} & set(t.partition):
                    df = df.drop_duplicates(ignore_index=True)
                else:
                    df = _once_across_points(df, [len(x) for x in parts])
                keys = [c for c in ("dataset", "judge", "mode") if c in df.columns]
                df = df.sort_values(keys, kind="stable").reset_index(drop=True) if keys else df
                stem = Path(t.name).stem
                out[stem] = write_csv(df, resolve(results_dir) / f"{stem}.csv")
    return out


def run_grid(g: GridParams) -> Report:
    """Run the whole grid: every point's notebooks, the aggregation of their tables, then the notebooks that read
    the aggregated tables only (the methods' result notebooks and the report card), two at a time — all of it
    into the staging folder, published to results/ and figures/ only if every notebook succeeded."""
    report = Report()
    pts, report.not_applicable = points(g)
    for p in pts:  # a point folder inside results/ or figures/ (runs_dir: results) is refused before any run
        runlock.check_run_dir(p.folder, "runs_dir")
    # one grid per run_id at a time (its staging folder and stamps); each point's notebook holds its own folder
    # a cache shared by its points (params: cache_path) is the grid's: held here, its notebook kernels go in
    caches = [p.config.cache_path for p in pts if getattr(p.config, "cache_path", None)]
    with runlock.hold(resolve(g.runs_dir) / g.run_id), runlock.hold_caches(caches), _engine(g):
        return _run_grid(g, pts, report)


@contextlib.contextmanager
def _engine(g: GridParams):
    """``engine: ray``: the cluster is reached (or a local Ray started) once, here, and every notebook kernel and stage
    thread the grid starts finds the engine in its environment (DHP_ENGINE, RAY_ADDRESS; dhp.calls.current_engine)."""
    if g.engine == "live":
        yield
        return
    params = EngineParams(**{k: getattr(g, k) for k in EngineParams.model_fields})
    engine = ray_engine.RayEngine(params)
    address = engine.start()
    env = {**ray_engine.engine_env(params.model_copy(update={"ray_address": address})), "RAY_ADDRESS": address}
    print(f"[grid] {engine.describe()}", flush=True)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run_grid(g: GridParams, pts: list[Point], report: Report) -> Report:
    with _step(report, "staging: copy results/"):
        report.staging, results, figures_path = _stage(g)
    figures = str(figures_path)
    for m in map(methods.get, methods.names()):
        for t in (*m.collects, *m.produces):  # a method not run this time must read "not run" on the card
            (results / f"{Path(t.name).stem}.csv").unlink(missing_ok=True)
    if not g.report_card:
        (results / "report_card.csv").unlink(missing_ok=True)  # (else: removed when notebook 10 runs again)
    done = _run_points(g, pts, report)
    with _step(report, "aggregate tables"):
        tables = aggregate(done, results, report)
    agg_dir = resolve(g.runs_dir) / g.run_id / "aggregate"
    agg_dir.mkdir(parents=True, exist_ok=True)  # a run folder like any other: its manifest says what it gathered
    write_manifest(agg_dir, "aggregate", {"run_id": g.run_id, "results_dir": str(results),
                                          "points": [str(p.folder) for p in done]}, inputs=list(tables.values()))
    for name in ("leaderboard.csv", "leaderboard_pairs.csv"):
        (results / name).unlink(missing_ok=True)
    entries = {(p.judge, p.mode) for p in done}
    board = g.leaderboard is not None and (len(entries) >= 2 or bool(g.leaderboard.get("recorded")))
    if g.leaderboard is not None and done and not board:  # one judge, nothing published beside it: nothing to compare
        print("[grid] no leaderboard: one judge × mode ran and leaderboard.recorded is empty", flush=True)
    jobs = []  # (notebook, parameters): they read results/ only and call no model, so they run side by side
    if g.result_notebooks:
        for name in dict.fromkeys(p.method for p in done):
            m = methods.get(name)
            first = next(p for p in done if p.method == name)
            base = {**first.config.model_dump(), "run_dir": str(agg_dir), "results_dir": str(results),
                    "figures_dir": figures}
            jobs += [(nb, base) for nb in m.result_notebooks]
    if g.report_card and tables:
        jobs.append((REPORT_NB, {"run_dir": str(results), "figures_dir": figures}))
    upstream = _upstream(done, report)
    # The leaderboard (notebook 11) runs beside the result notebooks, which read none of its tables; the report
    # cards, which show its standings, after it.
    cards = [j for j in jobs if j[0] == REPORT_NB]
    with ThreadPoolExecutor(max_workers=1) as beside:
        lb_job = beside.submit(_leaderboard, g, done, results, figures, report) if board else None
        _run_side_by_side(g, agg_dir, [j for j in jobs if j[0] != REPORT_NB], report, upstream,
                          workers=1 if board else 2)
        if lb_job is not None:
            lb_job.result()
    lb_out = resolve(g.runs_dir) / g.run_id / "leaderboard" / f"{LEADERBOARD_NB}.ipynb"
    if g.leaderboard is not None and _stamp_file(lb_out).is_file():  # the cards show the leaderboard's standings
        upstream.append(_stamp_file(lb_out).read_text())
    elif g.leaderboard is not None:  # its stamp waits for the publication: the cards depend on this run's
        upstream += [s for f, s in report.deferred if f == _stamp_file(lb_out)]
    _run_side_by_side(g, agg_dir, cards, report, upstream)
    if not report.failures:
        with _step(report, "publish results/ and figures/"):
            report.published = publish(results, figures_path, resolve(g.results_dir), resolve(g.figures_dir))
        for f, stamp in report.deferred:
            f.write_text(stamp)
        shutil.rmtree(report.staging, ignore_errors=True)
    return report


@contextlib.contextmanager
def _step(report: Report, name: str):
    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        yield
    finally:
        report.steps.append((name, time.perf_counter() - t0))
        report.cpu[f"({name})"] = time.process_time() - cpu0


def children_cpu_seconds() -> float:
    """CPU seconds of this process's finished children: a notebook's kernel (and the model it ran in-process) once
    papermill has shut it down. Unlike wall-clock time it hardly grows when other work shares the cores."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _stage(g: GridParams) -> tuple[Path, Path, Path]:
    """A fresh staging folder runs/<run_id>/staging: (folder, its results/ — a copy of the published tables, so the
    notebooks a rerun skips keep theirs and the card reads a complete set —, its figures/, empty)."""
    root = resolve(g.runs_dir) / g.run_id / "staging"
    if root.exists():
        shutil.rmtree(root)
    results, figures = root / "results", root / "figures"
    results.mkdir(parents=True)
    figures.mkdir()
    published = resolve(g.results_dir)
    if published.is_dir():
        for f in sorted(published.iterdir()):
            if f.is_file() and not f.name.startswith("."):
                shutil.copy2(f, results / f.name)
    return root, results, figures


def publish(staged_results: Path, staged_figures: Path, results: Path, figures: Path) -> list[str]:
    """Make results/ hold what the staged results hold (its top-level files; sub-folders such as another grid's
    results_dir are not touched) and add the staged figures to figures/. Each file is replaced atomically and only
    where its bytes differ, so an unchanged table keeps its file. Returns the paths it changed."""
    changed = []
    for src_dir, dst_dir, remove in ((staged_results, results, True), (staged_figures, figures, False)):
        dst_dir.mkdir(parents=True, exist_ok=True)
        staged = {f.name: f for f in sorted(src_dir.iterdir()) if f.is_file()}
        for name, f in staged.items():
            dst = dst_dir / name
            data = f.read_bytes()
            if not dst.is_file() or dst.read_bytes() != data:
                write_bytes(dst, data)
                changed.append(_rel(dst))
        for dst in sorted(dst_dir.iterdir()):
            if not dst.is_file() or dst.name.startswith(".") or dst.name in staged:
                continue
            # results: a table this run removed on purpose (a method not run: "not run" on the card); figures: only
            # a view's figure this run drew in other parts (a view split into <name>_<part> once more judges made it
            # too tall, or whole again): figures/ also holds other grids' figures, which stay
            if remove or _redrawn(dst, staged):
                dst.unlink()
                changed.append(_rel(dst))
    return changed


def _redrawn(old: Path, staged: dict) -> bool:
    """Whether figure ``old`` is a view this run drew under other names: the whole figure where the run drew its
    parts (<stem>_<part>), or a part where it drew the whole."""
    others = [Path(n) for n in staged if Path(n).suffix == old.suffix]
    return any(o.stem.startswith(old.stem + "_") or old.stem.startswith(o.stem + "_") for o in others)


def gather(done: list[Point], folder: Path) -> None:
    """Every successful point's tables in one folder, judges side by side (each table merged by its partition)."""
    if folder.exists():
        shutil.rmtree(folder)
    for p in done:
        m = methods.get(p.method)
        tables = read_tables(m, p.folder)
        if tables:
            methods.write_tables(m, tables, folder, merge_all=True)


def _leaderboard(g: GridParams, done: list[Point], results: Path, figures: str, report: Report) -> None:
    """Notebook 11 on every point's tables gathered into runs/<run_id>/leaderboard (recorded judges imported there as
    asked); its two tables (numbers only) are copied into results/."""
    folder = resolve(g.runs_dir) / g.run_id / "leaderboard"
    data_dir = g.params.get("data_dir")  # the grid's data root travels as a parameter, as it does to every point
    params = {**({"data_dir": str(resolve(data_dir))} if data_dir else {}), **g.leaderboard, "run_dir": str(folder),
              "figures_dir": figures}
    out = folder / f"{LEADERBOARD_NB}.ipynb"
    stamp = _stamp(_nb(g, LEADERBOARD_NB), params, *_upstream(done, report), *_recorded_files(g))
    if _fresh(out, stamp, g):
        _up_to_date([out], report)
        ok = True
    else:
        gather(done, folder)
        ok = _execute(_nb(g, LEADERBOARD_NB), out, params, g, report, watch_calls=False, stamp=stamp,
                      staged=True)
    if ok:
        for name in ("leaderboard.csv", "leaderboard_pairs.csv"):
            if (folder / name).is_file():
                shutil.copy2(folder / name, results / name)


def _upstream(done: list[Point], report: Report) -> list[str]:
    """The stamps of every finished point (what a notebook on the gathered tables depends on)."""
    return sorted({report.stamps.get(p.folder, "") for p in done})


def _recorded_files(g: GridParams) -> list[str]:
    """Name, size and modification time of the recorded judgments the leaderboard imports (cheap: no reading)."""
    kinds = (g.leaderboard or {}).get("recorded") or []
    if not kinds:
        return []
    root = data_root((g.leaderboard or {}).get("data_dir") or g.params.get("data_dir"))
    out = []
    for kind in kinds:
        base = root / IMPORTERS.lookup(kind).default
        files = [base] if base.is_file() else sorted(f for f in base.rglob("*") if f.is_file()) if base.exists() else []
        out += [f"{f.relative_to(root)}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files]
    return out


def _run_side_by_side(g: GridParams, folder: Path, jobs: list[tuple[str, dict]], report: Report,
                      upstream: list[str] = (), workers: int = 2) -> None:
    """Run notebooks that depend on nothing but finished tables ``workers`` at a time (this machine class has two
    cores; each notebook is mostly kernel start-up, imports and plotting); those whose stamp (over ``upstream``,
    the stamps of what they read) is unchanged are up to date."""
    notebooks = [(_nb(g, name), params) for name, params in jobs]  # a missing notebook fails before any runs
    todo = []
    for nb, params in notebooks:
        stamp = _stamp(nb, params, *upstream)
        if _fresh(folder / nb.name, stamp, g):
            _up_to_date([folder / nb.name], report)
        else:
            if nb.stem == REPORT_NB:  # a failed card must not leave the previous one in results/
                (Path(params["run_dir"]) / "report_card.csv").unlink(missing_ok=True)
            todo.append((nb, params, stamp))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda job: _execute(job[0], folder / job[0].name, job[1], g, report, watch_calls=False,
                                           stamp=job[2], staged=True), todo))


def print_timings(report: Report, total_s: float, out=None) -> None:
    """Seconds per notebook and per grid step, in run order, with each one's share of the total and the five
    slowest named again at the end (what to shrink first when a grid is too slow)."""
    out = out or sys.stdout
    rows = [(name, s) for name, s in report.timings] + [(f"({name})", s) for name, s in report.steps]
    if not rows:
        return
    print("\n[grid] time per notebook and step (wall clock; CPU: the kernel's CPU seconds, which other work on the "
          "machine hardly changes; notebooks that ran side by side (workers > 1, and the result notebooks) mix "
          "theirs):", file=out)
    print(f"  {'seconds':>8}  {'share':>5}  {'CPU s':>7}  notebook / step", file=out)
    for name, s in rows:
        cpu = report.cpu.get(name)
        cpu_s = f"{cpu:7.1f}" if cpu is not None else f"{'':>7}"
        print(f"  {s:8.1f}  {100 * s / max(total_s, 1e-9):4.0f}%  {cpu_s}  {name}", file=out)
    print(f"  {total_s:8.1f}   100%  {sum(report.cpu.values()):7.1f}  total", file=out)
    slow = sorted(rows, key=lambda r: -r[1])[:5]
    print("[grid] slowest: " + "; ".join(f"{Path(n).parent.name}/{Path(n).name} {s:.0f} s" if "/" in n
                                         else f"{n} {s:.0f} s" for n, s in slow), file=out)


def print_report(report: Report, total_s: float, out=None) -> None:
    out = out or sys.stdout
    print_timings(report, total_s, out)
    if report.skipped:
        print(f"[grid] skipped after a failure: {len(report.skipped)}", file=out)
        for s in report.skipped:
            print(f"  - {s}", file=out)
    for s in report.not_applicable:
        print(f"[grid] not run: {s}", file=out)
    if report.up_to_date:
        print(f"[grid] up to date (not run again; --rerun runs them): {len(report.up_to_date)} notebook(s)", file=out)
    if report.failures:
        print(f"[grid] {len(report.failures)} FAILED notebook(s):", file=out)
        for f in report.failures:
            print(f"  - {f.notebook}\n      {f.cell}\n      {f.error}\n      parameters: {f.parameters}", file=out)
    else:
        print("[grid] all notebooks succeeded", file=out)
    if report.published is not None:
        print(f"[grid] published: {len(report.published)} file(s) of results/ and figures/ changed", file=out)
    elif report.staging is not None:
        print(f"[grid] results/ and figures/ left as they were (the run did not succeed); this run's tables and "
              f"figures are in {_rel(report.staging)}", file=out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dhp.grid", description=__doc__.split("\n")[0])
    ap.add_argument("params", help="grid YAML, e.g. params/demo.yaml")
    ap.add_argument("--rerun", action="store_true", help="run every notebook, even those that are up to date")
    ap.add_argument("--plan", action="store_true", help="print the grid's points (method, judge, mode, dataset, run "
                                                        "folder) and those not applicable, without running them")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        g = load_params(args.params)
        if args.plan:
            print(describe_plan(g))
            return 0
        if args.rerun:
            g = g.model_copy(update={"rerun": True})
        report = run_grid(g)
    except DHPError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_report(report, time.perf_counter() - t0)
    return 1 if report.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
