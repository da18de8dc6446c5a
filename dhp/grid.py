"""Batch runner: execute the notebooks over a grid of judges × modes × datasets with papermill.

    python -m dhp.grid params/demo.yaml

Layout (run_id from the YAML):
    runs/<run_id>/<dataset>/01_perturb.ipynb                 perturbation, once per dataset
    runs/<run_id>/<dataset>/<judge>-<mode>/02_judge.ipynb ... 05_response_styles.ipynb, one run_dir per point
    runs/<run_id>/<judge>-<mode>/<method>/NN_*.ipynb         the other methods (`methods:`), per judge × mode
    runs/<run_id>/aggregate/04_figures.ipynb, 05_..., 10_report_card.ipynb   from the aggregated results
    results/scores.csv, discernment.csv, summary.csv, <method tables>, report_card.csv
                                                             all points together (numbers only, never texts)
    figures/                                                 regenerated from results/

Every notebook gets one progress line when it starts and one with its elapsed time when it ends; while it
runs, a bar shows its model calls (the call engine reports them through DHP_PROGRESS_FILE). A failing cell
is recorded (notebook, parameters, cell index, error) and the other grid points go on; the run ends with a
summary of failures and a non-zero exit status if any.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from dhp.errors import DHPError
from dhp.io import project_root, resolve, slug, write_csv
from dhp.schema import DATASET_TASK
from dhp.analysis.discernment import COMBINES

KNOWN_MODES = ("logprobs", "likelihood", "sample")
#: Methods beside DHP: name -> (notebook, the tables it writes that results/ collects, the modes it can run
#: in: each asks for a 1-5 score, so likelihood does not apply). DHP itself runs as notebooks 01-05 per
#: dataset in every mode; the report card (notebook 10) reads what results/ collected.
METHOD_NOTEBOOKS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "criteria_confusion": ("07_criteria_confusion", ("confusion_summary.csv", "confusion_cells.csv"),
                           ("logprobs", "sample")),
    "decompose_aggregate": ("08_decompose_aggregate", ("pairwise_agreement.csv", "dna_bridge.csv"),
                            ("logprobs", "sample")),
    "dual_perspective": ("09_dual_perspective", ("global_kappa.csv", "local_accuracy.csv", "local_comparison.csv",
                                                  "alignment.csv", "table1.csv"), ("logprobs", "sample")),
}
METHODS = ("dhp", *METHOD_NOTEBOOKS)
REPORT_NB = "10_report_card"

# key -> (accepted types, description); None in types means the key may be null.
SCHEMA: dict[str, tuple[tuple, str]] = {
    "run_id": ((str,), "name of the run folder under runs/"),
    "judges": ((list,), "judge specs, e.g. [embedded, 'openai:gpt-4o-mini']"),
    "modes": ((list,), f"judge modes from {list(KNOWN_MODES)}"),
    "datasets": ((list,), f"datasets from {sorted(DATASET_TASK)}"),
    "n_items": ((int,), "items per dataset"),
    "seed": ((int,), "seed for sampling, perturbation, judging and bootstrap"),
    "n_boot": ((int,), "bootstrap resamples in notebook 03 (0 = none)"),
    "combine": ((str,), f"metric combination, one of {list(COMBINES)}"),
    "expert_weights": ((str, type(None)), "expert-weights CSV (null = dhp/resources/expert_weights.csv)"),
    "data_dir": ((str, type(None)), "dataset root (null = DHP_DATA_DIR or ../shared/datasets)"),
    "storycloze_path": ((str, type(None)), "user-supplied Story Cloze CSV"),
    "cache": ((str, type(None)), "judge cache path, passed to notebook 02 as `cache_path`"),
    "perturber": ((str,), "perturber for notebook 01 ('rule' or an LLM spec)"),
    "runs_dir": ((str,), "where executed notebooks go (default runs)"),
    "results_dir": ((str,), "aggregated tables (default results)"),
    "figures_dir": ((str,), "aggregated figures (default figures)"),
    "notebooks_dir": ((str,), "folder holding the notebooks (default notebooks)"),
    "per_point_figures": ((bool,), "also run 04/05 inside each grid point (default true)"),
    "execution_timeout": ((int, type(None)), "seconds allowed per cell (null = no limit)"),
    "notebook_params": ((dict,), "extra parameters per notebook name, e.g. {02_judge: {max_tokens: 4}}"),
    "methods": ((list,), f"methods to run per judge × mode, from {list(METHODS)} (default [dhp])"),
    "report_card": ((bool,), "write results/report_card.csv and its figures at the end (default true)"),
}
REQUIRED = ("judges", "modes", "datasets")
DEFAULTS = {
    "run_id": "default",
    "n_items": 5,
    "seed": 0,
    "n_boot": 0,
    "combine": "paper",
    "expert_weights": None,
    "data_dir": None,
    "storycloze_path": None,
    "cache": None,
    "perturber": "rule",
    "runs_dir": "runs",
    "results_dir": "results",
    "figures_dir": "figures",
    "notebooks_dir": "notebooks",
    "per_point_figures": True,
    "execution_timeout": None,
    "notebook_params": {},
    "methods": ["dhp"],
    "report_card": True,
}
PERTURB_NB = "01_perturb"
POINT_NBS = ("02_judge", "03_discernment")
FIGURE_NBS = ("04_figures", "05_response_styles")


def validate_params(raw, source: str = "params") -> dict:
    """Check a grid parameter mapping and fill defaults; DHPError names the first problem."""
    if not isinstance(raw, dict):
        raise DHPError(f"{source}: the YAML must be a mapping of keys to values.", "see params/demo.yaml for the format.")
    unknown = sorted(set(raw) - set(SCHEMA))
    if unknown:
        raise DHPError(f"{source}: unknown key(s) {unknown}.", f"use only {sorted(SCHEMA)}.")
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        raise DHPError(f"{source}: missing key(s) {missing}.", "list judges, modes and datasets.")
    p = {**DEFAULTS, **raw}
    for k, (types, desc) in SCHEMA.items():
        v = p[k]
        # bool is an int subclass in Python: do not accept True as n_items.
        if isinstance(v, bool) and bool not in types or not isinstance(v, types):
            names = "/".join("null" if t is type(None) else t.__name__ for t in types)
            raise DHPError(f"{source}: {k!r} should be {names}, got {v!r}.", f"set {k} to {desc}.")
    for k in ("judges", "modes", "datasets"):
        if not p[k] or not all(isinstance(x, str) and x for x in p[k]):
            raise DHPError(f"{source}: {k!r} must be a non-empty list of names, got {p[k]!r}.", f"set {k} to {SCHEMA[k][1]}.")
    bad = [d for d in p["datasets"] if d not in DATASET_TASK]
    if bad:
        raise DHPError(f"{source}: unknown dataset(s) {bad}.", f"use datasets from {sorted(DATASET_TASK)}.")
    bad = [m for m in p["methods"] if m not in METHODS]
    if bad or not p["methods"]:
        raise DHPError(f"{source}: unknown or no method(s) {bad or p['methods']}.", f"use methods from {list(METHODS)}.")
    bad = [m for m in p["modes"] if m not in KNOWN_MODES]
    if bad:
        raise DHPError(f"{source}: unknown mode(s) {bad}.", f"use modes from {list(KNOWN_MODES)}.")
    if p["n_items"] < 1:
        raise DHPError(f"{source}: n_items must be >= 1, got {p['n_items']}.", "set n_items to a positive integer.")
    if p["n_boot"] < 0:
        raise DHPError(f"{source}: n_boot must be >= 0, got {p['n_boot']}.", "set n_boot to 0 or more.")
    if p["combine"] not in COMBINES:
        raise DHPError(f"{source}: combine must be one of {list(COMBINES)}, got {p['combine']!r}.", "fix combine.")
    if not re.fullmatch(r"[A-Za-z0-9._-]+", p["run_id"]):
        raise DHPError(f"{source}: run_id {p['run_id']!r} has characters unsafe in a folder name.", "use letters, digits, '.', '_' or '-'.")
    for nb, extra in p["notebook_params"].items():
        if not isinstance(extra, dict):
            raise DHPError(f"{source}: notebook_params[{nb!r}] must be a mapping.", "write e.g. {02_judge: {key: value}}.")
    if "storycloze" in p["datasets"] and not (p["storycloze_path"] or os.environ.get("DHP_STORYCLOZE_PATH")):
        raise DHPError(
            f"{source}: storycloze is in the grid but no storycloze_path is given.",
            "set storycloze_path to your Story Cloze CSV (or the DHP_STORYCLOZE_PATH environment variable).",
        )
    return p


def load_params(path) -> dict:
    """Read and validate a grid YAML file."""
    f = resolve(path)
    if not f.exists():
        raise DHPError(f"Grid parameter file not found: {f}.", "pass an existing YAML, e.g. params/demo.yaml.")
    try:
        raw = yaml.safe_load(f.read_text())
    except yaml.YAMLError as e:
        raise DHPError(f"{f} is not valid YAML: {e}.", "fix the YAML syntax.") from e
    return validate_params(raw, source=str(f))



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
    skipped: list[str] = field(default_factory=list)
    not_applicable: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)


def _declared_parameters(nb_path: Path) -> set[str] | None:
    """Names assigned in the notebook's `parameters` cell (None if it has none or cannot be parsed)."""
    import ast

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
        import tempfile
        import threading

        fd, self.path = tempfile.mkstemp(prefix="dhp-progress-", suffix=".json")
        os.close(fd)
        os.unlink(self.path)  # the kernel creates it when its first run starts
        self.label, self.bar, self.key = label, None, None
        self.printed, self.shown = 0.0, None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self):
        from dhp.calls import PROGRESS_ENV

        self.saved = os.environ.get(PROGRESS_ENV)
        os.environ[PROGRESS_ENV] = self.path  # the kernel inherits this process's environment
        self.thread.start()
        return self

    def __exit__(self, *exc):
        from dhp.calls import PROGRESS_ENV

        self.stop.set()
        self.thread.join()
        self._show()  # the last state, so a bar ends at its true count
        if self.bar is not None:
            self.bar.close()
        if self.saved is None:
            os.environ.pop(PROGRESS_ENV, None)
        else:
            os.environ[PROGRESS_ENV] = self.saved
        Path(self.path).unlink(missing_ok=True)

    def _poll(self):
        while not self.stop.wait(0.5):
            self._show()

    def _show(self):
        import json

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


def _execute(nb_path: Path, out_path: Path, params: dict, extra: dict, p: dict, report: Report,
             watch_calls: bool = True) -> bool:
    """Run one notebook; pass only the parameters it declares (plus explicit extras). True if it succeeded.
    Prints a line when it starts, a bar for its model calls while it runs (``watch_calls``: the watcher
    sets an environment variable, so notebooks run side by side go without it) and its elapsed time."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    declared = _declared_parameters(nb_path)
    use = {k: v for k, v in params.items() if declared is None or k in declared}
    use.update(extra)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    rel = _rel(out_path)
    t0 = time.perf_counter()
    print(f"[grid] {rel}  {use}", flush=True)
    try:
        with _CallProgress(out_path.stem) if watch_calls else contextlib.nullcontext():
            pm.execute_notebook(
                str(nb_path), str(out_path), parameters=use, cwd=str(nb_path.parent), progress_bar=False,
                execution_timeout=p["execution_timeout"], kernel_name="python3",
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
    print(f"[grid] {'done' if ok else 'FAILED'} {rel} in {elapsed:.1f} s "
          f"(grid elapsed {time.perf_counter() - report.started:.0f} s)", flush=True)
    return ok


def _rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(project_root()))
    except ValueError:
        return str(path)


def _nb(p: dict, name: str) -> Path:
    f = resolve(p["notebooks_dir"]) / f"{name}.ipynb"
    if not f.exists():
        raise DHPError(f"Notebook {f} not found.", "run from a complete checkout or fix notebooks_dir.")
    return f


def _common(p: dict) -> dict:
    c = {
        "n_items": p["n_items"],
        "seed": p["seed"],
        "n_boot": p["n_boot"],
        "combine": p["combine"],
        "perturber": p["perturber"],
    }
    for k in ("expert_weights", "data_dir", "storycloze_path"):
        if p[k] is not None:
            c[k] = str(resolve(p[k]))
    if p["cache"] is not None:
        c["cache_path"] = str(resolve(p["cache"]))  # notebook 02's parameter name
    return c


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _read_any(run_dir: Path, name: str) -> pd.DataFrame | None:
    for suffix in (".parquet", ".csv"):
        f = run_dir / f"{name}{suffix}"
        if f.exists():
            return pd.read_parquet(f) if suffix == ".parquet" else pd.read_csv(f)
    return None


SCORE_KEEP = ("dataset", "task", "judge", "mode", "item_id", "perturbation", "severity", "level", "metric", "score", "n_valid", "n_failed")


def _numbers_only(scores: pd.DataFrame) -> pd.DataFrame:
    """Scores for results/: contract columns plus numeric/bool extras; never free text."""
    extra = [c for c in scores.columns if c not in SCORE_KEEP and (pd.api.types.is_numeric_dtype(scores[c]) or pd.api.types.is_bool_dtype(scores[c]))]
    return scores[[c for c in SCORE_KEEP if c in scores.columns] + extra]


def aggregate(point_dirs: list[Path], results_dir) -> dict[str, Path]:
    """Concatenate every point's scores / discernment / summary into results_dir (CSV)."""
    out = {}
    for name in ("scores", "discernment", "summary"):
        parts = [t for d in point_dirs if (t := _read_any(d, name)) is not None]
        if not parts:
            continue
        df = pd.concat(parts, ignore_index=True)
        if name == "scores":
            df = _numbers_only(df)
        keys = [c for c in ("dataset", "judge", "mode", "perturbation", "severity", "item_id", "metric") if c in df]
        df = df.sort_values(keys, kind="stable").reset_index(drop=True)
        out[name] = write_csv(df, resolve(results_dir) / f"{name}.csv")
    return out


#: What a grid point or a dataset folder writes; cleared before it runs, so a failed run leaves no stale
#: table from an earlier run to be aggregated into results/.
STAGE_OUTPUTS = ("dataset.parquet", "perturbed.parquet", "scores.parquet", "discernment.csv", "summary.csv",
                 "failures.csv", "judge_stats.json")


def _clear_outputs(folder: Path, names) -> None:
    for name in names:
        (folder / name).unlink(missing_ok=True)


def _method_params(p: dict, judge: str, mode: str, run_dir: Path) -> dict:
    """What every method notebook gets from the grid; each method's own sizes (items, pairs, targets) come
    from its notebook's defaults or from notebook_params, since they mean different things per method."""
    c = {"judge": judge, "mode": mode, "seed": p["seed"], "run_dir": str(run_dir),
         "figures_dir": str(run_dir / "figures")}
    if p["data_dir"] is not None:
        c["data_dir"] = str(resolve(p["data_dir"]))
    c["cache_path"] = str(resolve(p["cache"])) if p["cache"] is not None else str(run_dir / "cache.sqlite")
    return c


def _run_dhp(p: dict, root: Path, common: dict, report: Report) -> list[Path]:
    """Notebooks 01 (per dataset) and 02-03 (+ 04/05) per judge × mode; returns the points that succeeded."""
    extras = p["notebook_params"]
    point_dirs: list[Path] = []
    for ds in p["datasets"]:
        ds_dir = root / ds
        _clear_outputs(ds_dir, STAGE_OUTPUTS)
        ok = _execute(_nb(p, PERTURB_NB), ds_dir / f"{PERTURB_NB}.ipynb",
                      {**common, "dataset": ds, "run_dir": str(ds_dir)}, extras.get(PERTURB_NB, {}), p, report)  # fmt: skip
        if not ok:
            report.skipped += [f"{ds}/{slug(j)}-{m}" for j in p["judges"] for m in p["modes"]]
            continue
        for judge in p["judges"]:
            for mode in p["modes"]:
                pt = ds_dir / f"{slug(judge)}-{mode}"
                _clear_outputs(pt, STAGE_OUTPUTS)
                for stage_table in ("dataset.parquet", "perturbed.parquet"):  # notebook 01's outputs, read by 02
                    if (ds_dir / stage_table).exists():
                        _link_or_copy(ds_dir / stage_table, pt / stage_table)
                params = {**common, "dataset": ds, "judge": judge, "mode": mode, "run_dir": str(pt),
                          "figures_dir": str(pt / "figures"), "results_dir": None}  # fmt: skip
                names = POINT_NBS + (FIGURE_NBS if p["per_point_figures"] else ())
                for i, name in enumerate(names):
                    if not _execute(_nb(p, name), pt / f"{name}.ipynb", params, extras.get(name, {}), p, report):
                        report.skipped += [f"{_rel(pt)}/{n}" for n in names[i + 1:]]
                        break
                else:  # only a point whose every notebook succeeded reaches results/
                    point_dirs.append(pt)
    return point_dirs


def _run_methods(p: dict, root: Path, report: Report) -> dict[str, list[Path]]:
    """The non-DHP methods per judge × mode, in the grid's order; returns method -> folders that succeeded."""
    done: dict[str, list[Path]] = {}
    for judge in p["judges"]:
        for mode in p["modes"]:
            for method in p["methods"]:
                if method == "dhp":
                    continue
                nb, tables, modes = METHOD_NOTEBOOKS[method]
                if mode not in modes:  # the card then says "not run" for this judge × mode
                    report.not_applicable.append(f"{method} for {judge} in {mode} mode (it runs in {', '.join(modes)})")
                    continue
                folder = root / f"{slug(judge)}-{mode}" / method
                _clear_outputs(folder, tables)
                if _execute(_nb(p, nb), folder / f"{nb}.ipynb", _method_params(p, judge, mode, folder),
                            p["notebook_params"].get(nb, {}), p, report):
                    done.setdefault(method, []).append(folder)
    return done


def aggregate_methods(done: dict[str, list[Path]], results_dir, report: Report) -> dict[str, Path]:
    """Concatenate each method's tables over judge × mode into results_dir (CSV). Every table written
    there carries judge and mode columns, so the report card can tell judges apart; a table without them
    is reported as a failure and left out."""
    out = {}
    for method, folders in done.items():
        for name in METHOD_NOTEBOOKS[method][1]:
            parts = []
            for folder in folders:
                t = _read_any(folder, Path(name).stem)
                if t is None:
                    continue
                if "judge" not in t.columns or "mode" not in t.columns:
                    report.failures.append(Failure(_rel(folder / name), {}, "(aggregation)",
                                                   "the table has no judge/mode columns: write them with "
                                                   "dhp.analysis.label_judge in the method's notebook"))
                    continue
                parts.append(t)
            if parts:
                out[name] = write_csv(pd.concat(parts, ignore_index=True), resolve(results_dir) / name)
    return out


def run_grid(p: dict) -> Report:
    """Run the whole grid described by validated parameters `p` (see validate_params).

    Each dataset folder, grid point and method folder has its previous output tables removed before it
    runs, and only those whose every notebook succeeded are aggregated, so results/ never mixes in stale
    tables. The report card (notebook 10) then reads results/."""
    report = Report()
    if p["storycloze_path"]:
        # Story Cloze is only read from a user path; the loader also looks at this variable.
        os.environ["DHP_STORYCLOZE_PATH"] = str(resolve(p["storycloze_path"]))
    if p["data_dir"]:
        os.environ["DHP_DATA_DIR"] = str(resolve(p["data_dir"]))
    root = resolve(p["runs_dir"]) / p["run_id"]
    common = _common(p)
    results = resolve(p["results_dir"])
    for name in [t for _, tables, _ in METHOD_NOTEBOOKS.values() for t in tables] + ["report_card.csv"]:
        (results / name).unlink(missing_ok=True)  # a method not run this time must read "not run" on the card
    point_dirs = _run_dhp(p, root, common, report) if "dhp" in p["methods"] else []
    done = _run_methods(p, root, report)
    tables = aggregate(point_dirs, p["results_dir"]) if point_dirs else {}
    tables.update(aggregate_methods(done, p["results_dir"], report))
    agg_dir = root / "aggregate"
    agg_params = {**common, "run_dir": str(agg_dir), "results_dir": str(results),
                  "figures_dir": str(resolve(p["figures_dir"]))}  # fmt: skip
    jobs = []  # (notebook, parameters): they read results/ only and call no model, so they run side by side
    if "summary" in tables:
        jobs += [(name, agg_params) for name in FIGURE_NBS]
    elif "dhp" in p["methods"]:
        report.skipped.append("aggregate figures (no summary table from any grid point)")
    if p["report_card"] and tables:
        jobs.append((REPORT_NB, {"run_dir": str(results), "figures_dir": str(resolve(p["figures_dir"]))}))
    _run_side_by_side(p, agg_dir, jobs, report)
    return report


def _run_side_by_side(p: dict, folder: Path, jobs: list[tuple[str, dict]], report: Report) -> None:
    """Run notebooks that depend on nothing but finished tables two at a time (this machine class has two
    cores; each notebook is mostly kernel start-up, imports and plotting)."""
    from concurrent.futures import ThreadPoolExecutor

    notebooks = [(_nb(p, name), params) for name, params in jobs]  # a missing notebook fails before any runs
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda job: _execute(job[0], folder / job[0].name, job[1],
                                           p["notebook_params"].get(job[0].stem, {}), p, report, watch_calls=False),
                      notebooks))


def print_report(report: Report, total_s: float, out=None) -> None:
    out = out or sys.stdout
    print("\n[grid] timings (s):", file=out)
    for name, s in report.timings:
        print(f"  {s:7.1f}  {name}", file=out)
    print(f"[grid] total {total_s:.1f} s", file=out)
    if report.skipped:
        print(f"[grid] skipped after a failure: {len(report.skipped)}", file=out)
        for s in report.skipped:
            print(f"  - {s}", file=out)
    for s in report.not_applicable:
        print(f"[grid] not run: {s}", file=out)
    if report.failures:
        print(f"[grid] {len(report.failures)} FAILED notebook(s):", file=out)
        for f in report.failures:
            print(f"  - {f.notebook}\n      {f.cell}\n      {f.error}\n      parameters: {f.parameters}", file=out)
    else:
        print("[grid] all notebooks succeeded", file=out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dhp.grid", description=__doc__.split("\n")[0])
    ap.add_argument("params", help="grid YAML, e.g. params/demo.yaml")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        p = load_params(args.params)
        report = run_grid(p)
    except DHPError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_report(report, time.perf_counter() - t0)
    return 1 if report.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
