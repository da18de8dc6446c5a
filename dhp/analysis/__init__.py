"""Analyses: one module per meta-evaluation method (tables in, tables out), and a registry that ties each
to the run folder: an :class:`Analysis` names the tables it reads and writes there, so
``run_analysis(name, run_dir)`` can run any of them — the built-ins below or one you register::

    from dhp.analysis import analysis

    @analysis("mean_score", reads=("scores.parquet",), writes=("mean_score.csv",))
    def mean_score(scores):
        return {"mean_score.csv": scores.groupby(["perturbation", "metric"], as_index=False)["score"].mean()}
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from dhp.errors import DHPError


@dataclass(frozen=True)
class Analysis:
    """run(*tables, **params) -> {file name: table}, called with the tables of ``reads`` (in order, read from
    the run folder); ``writes`` lists the file names it returns; figures(outputs) -> {name: figure}, optional."""

    name: str
    run: Callable
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    figures: Callable | None = None
    description: str = ""


ANALYSES: dict[str, Analysis] = {}


def analysis(name: str, *, reads: tuple[str, ...], writes: tuple[str, ...], figures: Callable | None = None,
             replace: bool = True) -> Callable:
    """Register the decorated function as an analysis (``replace=False`` refuses to redefine a name)."""

    def wrap(fn: Callable) -> Callable:
        if name in ANALYSES and not replace:
            raise DHPError(f"An analysis named {name!r} is already registered.", "choose another name.")
        ANALYSES[name] = Analysis(name, fn, tuple(reads), tuple(writes), figures, (fn.__doc__ or "").strip())
        return fn

    return wrap


def run_analysis(name: str, run_dir: str | os.PathLike, figures_dir: str | os.PathLike | None = None,
                 **params) -> dict[str, Path]:
    """Read the analysis's input tables from ``run_dir``, run it, write its tables there (atomically; nothing
    is written unless it succeeded) and its figures to ``figures_dir`` (default ``<run_dir>/figures``).
    Returns file name -> path."""
    from dhp.io import read_table, resolve, write_csv, write_parquet

    if name not in ANALYSES:
        raise DHPError(f"Unknown analysis {name!r}.", f"use one of {sorted(ANALYSES)} or register yours.")
    a = ANALYSES[name]
    run = resolve(run_dir)
    tables = [read_table(run / f, f, f"the stage that writes {f}") for f in a.reads]
    out = a.run(*tables, **params)
    missing = [f for f in a.writes if f not in out]
    if missing:
        raise DHPError(f"Analysis {name!r} did not return {missing}.", "return every table listed in writes=.")
    paths = {f: (write_parquet if f.endswith(".parquet") else write_csv)(out[f], run / f) for f in a.writes}
    if a.figures is not None:
        from dhp.plots import save_figure

        for fig_name, fig in a.figures(out).items():
            for p in save_figure(fig, figures_dir or run / "figures", fig_name):
                paths[p.name] = p
    return paths


def label_judge(table: pd.DataFrame, judge, mode: str) -> pd.DataFrame:
    """``table`` with ``judge`` (the backend's identity, as every scores table names it: e.g. "embedded" ->
    "embedded:smollm2-135m") and ``mode`` as its first columns, so tables of several judges can be stacked
    (dhp.grid collects them into results/, the report card reads them)."""
    from dhp.backends import get_backend

    name = get_backend(judge).identity
    rest = table.drop(columns=[c for c in ("judge", "mode") if c in table.columns])
    return rest.assign(judge=name, mode=mode)[["judge", "mode", *rest.columns]]


@analysis("discernment", reads=("scores.parquet",), writes=("discernment.csv", "summary.csv"))
def _discernment(scores: pd.DataFrame, expert_weights=None, combine: str = "paper", n_boot: int = 200,
                 n_null: int = 1000, seed: int = 0) -> dict[str, pd.DataFrame]:
    """DHP (Wang, Yuan et al.): per perturbation D = log_0.05 p, and D_avg / D_min per judge with the
    negative control and the sign-flip null."""
    from dhp.analysis import discernment as d

    disc = d.discernment(scores, expert_weights=expert_weights, combine=combine, n_boot=n_boot, seed=seed)
    summary = d.summarize(disc, null=d.null_calibration(scores, n_null=n_null, seed=seed))
    disc.attrs.clear()
    return {"discernment.csv": disc, "summary.csv": summary}




def _carry_judge(out: pd.DataFrame, source: pd.DataFrame) -> pd.DataFrame:
    """``out`` labelled with the judge and mode of the table it was computed from, when that table has them."""
    if {"judge", "mode"} <= set(source.columns) and len(source):
        return out.assign(judge=source["judge"].iloc[0], mode=source["mode"].iloc[0])[
            ["judge", "mode", *[c for c in out.columns if c not in ("judge", "mode")]]]
    return out


@analysis("dual_perspective", reads=("global_targets.parquet", "local_pairs.parquet"),
          writes=("global_kappa.csv", "local_accuracy.csv"))
def _dual_perspective(targets: pd.DataFrame, pairs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Dual perspective (Hu et al. 2025): global linear weighted κ per aspect on agreed-upon targets, local
    adjacent accuracy per aspect on error chains."""
    from dhp.analysis import dual_perspective as dp

    return {"global_kappa.csv": _carry_judge(dp.global_kappa(targets), targets),
            "local_accuracy.csv": _carry_judge(dp.adjacent_accuracy(pairs), pairs)}
