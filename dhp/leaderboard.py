"""The judge leaderboard of a run folder (or results/): every registered method contributes its views of the judges
in its tables (``Method.views``), dhp.analysis.leaderboard compares the judges on each, and the tables and one
figure per view are written.

    python -m dhp leaderboard --run-dir runs/llmbar            (notebook 11 runs the same steps)

Writes ``leaderboard.csv`` and ``leaderboard_pairs.csv`` into the run folder (schemas:
dhp.analysis.leaderboard.LEADERBOARD_COLUMNS, PAIR_COLUMNS) and ``leaderboard_<view>.png/.pdf`` into the figures
folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import Field

from dhp import methods
from dhp.analysis.leaderboard import View, leaderboard
from dhp.config import Params
from dhp.datasets import data_root
from dhp.errors import DHPError
from dhp.io import resolve, slug, write_csv
from dhp.plots import save_figure
from dhp.plots.leaderboard import leaderboard_figures
from dhp.recorded import import_judgments
from dhp.stats.permutation import WMT_EARLY_STOP

__all__ = ["LeaderboardParams", "collect_views", "run_leaderboard", "TABLES"]

TABLES = ("leaderboard.csv", "leaderboard_pairs.csv")


class LeaderboardParams(Params):
    """Parameters of the leaderboard (python -m dhp leaderboard; notebook 11)."""

    run_dir: str = Field("runs/default", description="the folder holding the methods' tables (make demo: results); "
                                                     "leaderboard.csv and leaderboard_pairs.csv are written here")
    figures_dir: str | None = Field(None, description="where the figures go (None: <run_dir>/figures)")
    n_resamples: int = Field(1000, ge=10, description="bootstrap and permutation draws per view (shared by every "
                                                      "judge and pair of it)")
    n_resamples_statistic: int = Field(200, ge=10, description="draws of views whose statistic is recomputed per "
                                                               "draw (DHP's D_avg, κ, correlations over documents)")
    alpha: float = Field(0.05, gt=0, lt=1, description="significance level of a pair (Holm-adjusted within a view) "
                                                       "and of the clusters")
    min_coverage: float = Field(0.5, gt=0, le=1, description="a judge measured on fewer than this share of the "
                                                             "best-covered judge's units is left out of a view")
    seed: int = Field(0, ge=0, description="seed of the resampling draws")
    early_stop: bool = Field(True, description="segment views: stop a pair's permutation test once its p is clearly "
                                               "below 0.02 or above 0.5 (mt-metrics-eval's setting for WMT)")
    recorded: list[Literal["llmbar", "mtme"]] = Field(
        ["llmbar"], description="published judgments to import into run_dir first, so your judges stand beside "
                                "them: 'llmbar' (LLMBar's GPT-4, ChatGPT, PaLM2, LLaMA2, Falcon verdicts; ~2 s), "
                                "'mtme' (the WMT22 zh-en metrics' segment scores; ~10 s); read from data_dir; an "
                                "empty list (--recorded '') imports nothing")
    data_dir: str | None = Field(None, description="dataset root for the recorded judgments (None: DHP_DATA_DIR or "
                                                   "../shared/datasets)")


def collect_views(folder) -> list[View]:
    """Every registered method's views of the judges in ``folder`` (its collected and produced tables)."""
    views: list[View] = []
    for m in methods.all_methods():
        tables = {**methods.read_tables(m, folder), **methods.read_uses(m, folder)}
        if tables:
            views += m.views(tables)
    return views


def run_leaderboard(config: LeaderboardParams | None = None, **values) -> dict[str, Path]:
    """Compare the judges of ``config.run_dir`` on every view that has two or more of them; write the tables and one
    figure per view. Returns file name -> path."""
    config = config or LeaderboardParams(**values)
    import_recorded(config)
    views = collect_views(config.run_dir)
    judged = [v for v in views if v.data[["judge", "mode"]].drop_duplicates().shape[0] >= 2]
    if not judged:
        raise DHPError(f"No view in {config.run_dir} holds two or more judges to compare.",
                       "run several judges into one run folder (or the grid: results/), or import recorded ones "
                       "(python -m dhp import-judgments).")
    out = leaderboard(judged, n_resamples=config.n_resamples, n_resamples_statistic=config.n_resamples_statistic,
                      seed=config.seed, alpha=config.alpha, min_coverage=config.min_coverage,
                      early_stop=WMT_EARLY_STOP if config.early_stop else None)
    root = resolve(config.run_dir)
    paths = {name: write_csv(df, root / name) for name, df in out.items()}
    figures = Path(config.figures_dir) if config.figures_dir else root / "figures"
    for name, fig in leaderboard_figures(out["leaderboard.csv"], out["leaderboard_pairs.csv"]).items():
        for p in save_figure(fig, figures, f"leaderboard_{slug(name)}"):
            paths[p.name] = p
    return paths


#: Where each kind of recorded judgment lies under the dataset root, and the method whose reference tables it needs.
RECORDED_SOURCES = {"llmbar": ("llmbar_judgments", None), "mtme": ("wmt22/metric-scores_zh-en", "human_alignment")}


def import_recorded(config: LeaderboardParams) -> None:
    """Import ``config.recorded`` into the run folder (idempotent), with the reference tables their views need."""
    for kind in config.recorded:
        folder, method = RECORDED_SOURCES[kind]
        import_judgments(kind, data_root(config.data_dir) / folder, config.run_dir,
                         lp="zh-en" if kind == "mtme" else None)
        if method is not None:
            m = methods.get(method)
            methods.write_tables(m, m.collect_reference(m.config(data_dir=config.data_dir, run_dir=config.run_dir)),
                                 config.run_dir)


def read(folder) -> dict[str, pd.DataFrame]:
    """The leaderboard tables written into ``folder`` ({} when absent)."""
    root = resolve(folder)
    return {n: pd.read_csv(root / n) for n in TABLES if (root / n).is_file()}
