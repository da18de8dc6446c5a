"""The judge leaderboard of a run folder (or results/): every registered method contributes its views of the judges
in its tables (``Method.views``), dhp.analysis.leaderboard compares the judges on each, and the tables and one
figure per view are written.

    python -m dhp leaderboard --run-dir runs/llmbar            (notebook 11 runs the same steps)

Writes ``leaderboard.csv`` and ``leaderboard_pairs.csv`` into the run folder (schemas:
dhp.analysis.leaderboard.LEADERBOARD_COLUMNS, PAIR_COLUMNS) and ``leaderboard_<view>.png/.pdf`` into the figures
folder.

Recorded sources stand on their own: importing one brings the human scores its views need (mtme: the MQM scores
beside the metric scores; hanna, frank: their human ratings), and their views are built here from the imported
tables (HANNA, FRANK: dhp.analysis.recorded_views). A view that cannot be built — its human scores are missing, or
only one judge is in it — is printed with the reason and written as a row of leaderboard.csv (judge "", status
"not built: ..." / "not compared: ...").
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import tempfile
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Literal

import pandas as pd
import platformdirs
from pydantic import Field, field_validator

import dhp.analysis
import dhp.stats
from dhp import methods, runlock
from dhp.analysis.leaderboard import View, leaderboard
from dhp.analysis.recorded_views import item_views
from dhp.config import EMPTY_KEPT, Params
from dhp.errors import DHPError
from dhp.io import read_csv, resolve, slug, write_csv
from dhp.plots import save_figures
from dhp.plots.leaderboard import leaderboard_figures
from dhp.recorded import IMPORTERS, RECORDED_MODE, default_path, import_judgments
from dhp.stats.permutation import LEADERBOARD_EARLY_STOP

__all__ = ["LeaderboardParams", "collect_views", "run_leaderboard", "TABLES", "StoredViews", "default_views_cache",
           "default_recorded_cache", "judged_segments"]

TABLES = ("leaderboard.csv", "leaderboard_pairs.csv")


class LeaderboardParams(Params):
    """Parameters of the leaderboard (python -m dhp leaderboard; notebook 11)."""

    run_dir: str = Field("runs/default", description="the folder holding the methods' tables (make demo: runs/demo/leaderboard; never results/ or figures/, which make demo publishes); "
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
                                               "below 0.02 or above 0.5 (mt-metrics-eval's setting for WMT), or "
                                               "once its decision at alpha is settled (dhp.stats.permutation)")
    views_cache: str | None = Field(None, description="where the results of views holding only recorded judges are "
                                                      "stored and reused (keyed by their inputs' sha256 and the "
                                                      "statistics' version); None: <per-user cache>/dhp/views; '': "
                                                      "compute every view", json_schema_extra=EMPTY_KEPT)
    recorded_cache: str | None = Field(None, description="where the parsed rows of the recorded sources are kept "
                                                         "per input version (keyed by the files' sha256 and the "
                                                         "importers' code), so a later import reads them instead of "
                                                         "parsing the files; None: <per-user cache>/dhp/recorded; '': "
                                                         "parse every time", json_schema_extra=EMPTY_KEPT)
    recorded_units: Literal["all", "judged"] = Field(
        "all", description="the recorded segment rows imported: 'all', or 'judged' — only those on the segments the "
                           "run's own judges scored (and every unscored row), the rows your judge's views compare it "
                           "on (python -m dhp evaluate); the manifest records the files' sha256 and how many rows "
                           "were kept")
    recorded: list[str] = Field(
        ["llmbar"], description="published judgments to import into run_dir first, so your judges stand beside "
                                "them: any registered recorded source with a default path under data_dir "
                                "({registered:recorded source:default}; python -m dhp extensions); an empty list "
                                "(--recorded '') imports nothing")
    recorded_views: Literal["headline", "all"] = Field(
        "headline", description="HANNA and FRANK views: 'headline' (HANNA overall Kendall per criterion with the "
                                "LLM judges and upstream's 17 shown metrics; FRANK partial Pearson and Spearman) "
                                "or 'all' (every level and correlation, all 92 HANNA judges: minutes)")
    data_dir: str | None = Field(None, description="dataset root for the recorded judgments (None: the data root, "
                                                   "docs/data.md)")

    @field_validator("recorded")
    @classmethod
    def _registered_sources(cls, kinds: list[str]) -> list[str]:
        kinds = [k for k in kinds if k]  # --recorded '' imports nothing
        unknown = [k for k in kinds if k not in IMPORTERS or IMPORTERS[k].default is None]
        if unknown:
            raise ValueError(f"{unknown} are not recorded sources with a default path; use some of "
                             f"{[k for k, imp in IMPORTERS.items() if imp.default]}")
        return kinds


def collect_views(folder, which: str = "headline", report: bool = True) -> list[View]:
    """Every registered method's views of the judges in ``folder`` (its collected and produced tables), the views of
    the imported rated outputs (HANNA, FRANK; ``which``: "headline" or "all"), and one empty view per view that
    cannot be built or compared (``notes["not_built"]``: the reason, printed when ``report``)."""
    root = resolve(folder)
    views: list[View] = []
    for m in methods.all_methods():
        tables = {**methods.read_tables(m, folder), **methods.read_uses(m, folder)}
        if tables:
            views += m.views(tables)
    missing = []
    scores, human = root / "item_scores.parquet", root / "item_human.parquet"
    if scores.is_file():
        built, missing = item_views(pd.read_parquet(scores), pd.read_parquet(human) if human.is_file() else None,
                                    which)
        views += built
    if (root / "segment_scores.parquet").is_file() and not (root / "segment_human.parquet").is_file():
        missing.append({"view": "segment", "scope": "WMT22 vs MQM", "measure": "acc_eq_calibrated",
                        "status": "not built: segment_scores.parquet has no human scores beside it "
                                  "(segment_human.parquet); import the metric scores from a folder in the "
                                  "mt-metrics-eval layout, with <lp>.mqm.seg.score beside them, or run "
                                  "python -m dhp run --method human_alignment"})
    out = []
    for v in views:
        entries = v.data[["judge", "mode"]].drop_duplicates()
        if len(entries) >= 2:
            out.append(v)
        else:
            who = ", ".join(f"{j} ({m})" for j, m in entries.itertuples(index=False)) or "none"
            missing.append({"view": v.view, "scope": v.scope, "measure": v.measure, "strategy": v.strategy,
                            "status": f"not compared: one judge in this view ({who})"})
    for miss in missing:
        if report:
            parts = (miss["view"], miss["scope"], miss["measure"], miss.get("strategy", ""))
            where = " · ".join(x for x in parts if x)
            print(f"[leaderboard] {where}: {miss['status']}", flush=True)
        out.append(View(miss["view"], miss["scope"], miss["measure"], "mean",
                        pd.DataFrame(columns=["judge", "mode", "unit", "value"]), strategy=miss.get("strategy", ""),
                        notes={"not_built": miss["status"]}))
    return out


def run_leaderboard(config: LeaderboardParams | None = None, **values) -> dict[str, Path]:
    """Compare the judges of ``config.run_dir`` on every view that has two or more of them; write the tables and one
    figure per view. Returns file name -> path."""
    config = config or LeaderboardParams(**values)
    with runlock.hold(config.run_dir):  # one writer per run folder; never results/, figures/ or the root
        return _run_leaderboard(config)


def _run_leaderboard(config: LeaderboardParams) -> dict[str, Path]:
    start = time.perf_counter()
    import_recorded(config)
    _progress(f"recorded judgments imported ({', '.join(config.recorded) or 'none'})", start)
    start = time.perf_counter()
    views = collect_views(config.run_dir, config.recorded_views)
    _progress(f"{len(views)} views collected", start)
    judged = [v for v in views if not v.notes.get("not_built")]
    if not judged:
        raise DHPError(f"No view in {config.run_dir} holds two or more judges to compare.",
                       "run several judges into one run folder (or the grid: results/), or import recorded ones "
                       "(python -m dhp import-judgments).")
    out = leaderboard(views, n_resamples=config.n_resamples, n_resamples_statistic=config.n_resamples_statistic,
                      seed=config.seed, alpha=config.alpha, min_coverage=config.min_coverage,
                      early_stop=LEADERBOARD_EARLY_STOP if config.early_stop else None,
                      stored=StoredViews(config.views_cache) if config.views_cache != "" else None,
                      progress=lambda line: _progress(line))
    root = resolve(config.run_dir)
    paths = {name: write_csv(df, root / name) for name, df in out.items()}
    figures = Path(config.figures_dir) if config.figures_dir else root / "figures"
    drawn = leaderboard_figures(out["leaderboard.csv"], out["leaderboard_pairs.csv"])
    for p in save_figures({f"leaderboard_{slug(name)}": fig for name, fig in drawn.items()}, figures):
        paths[p.name] = p
    return paths


def _progress(line: str, since: float | None = None) -> None:
    """One progress line on stderr (a step taking over a second says how long it took)."""
    took = time.perf_counter() - since if since is not None else None
    if took is None or took > 1:
        print(f"[leaderboard] {line}" + (f" in {took:.0f} s" if took is not None else ""), file=sys.stderr, flush=True)


def default_views_cache() -> Path:
    """DHP_VIEWS_CACHE if set, else <per-user cache>/dhp/views: beside the data cache (<per-user cache>/dhp/datasets)."""
    if os.environ.get("DHP_VIEWS_CACHE"):
        return Path(os.environ["DHP_VIEWS_CACHE"])
    return Path(platformdirs.user_cache_dir("dhp", appauthor=False)) / "views"


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 of the source of the statistics modules (dhp.stats, dhp.analysis's leaderboard and views): the store
    keeps each code version's results in a folder of its own, so an edit that forgot to raise STATS_VERSION never
    reuses an older result (kept here, not in the pure analysis code, because it reads files)."""
    analysis = Path(dhp.analysis.__file__).parent
    files = sorted(Path(dhp.stats.__file__).parent.glob("*.py")) + [
        analysis / f"{m}.py" for m in ("leaderboard", "system_level", "recorded_views")]
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + (f.read_bytes() if f.is_file() else b"") + b"\0")
    return h.hexdigest()


class StoredViews(MutableMapping):
    """The stored results of views holding only recorded judges (dhp.analysis.leaderboard.view_key -> (board rows,
    pair rows)): two parquet files per key in ``folder``, each written to a temporary file and renamed into place,
    the board last, so a key is present only once both are complete (an interrupted run leaves no half-written
    result). An unreadable entry counts as absent (computed again and rewritten)."""

    def __init__(self, folder=None):
        self.folder = Path(folder) if folder else default_views_cache()

    def _paths(self, key: str) -> tuple[Path, Path]:
        folder = self.folder / code_digest()[:16]
        return folder / f"{key}.board.parquet", folder / f"{key}.pairs.parquet"

    def __contains__(self, key) -> bool:
        board, pairs = self._paths(str(key))
        return board.is_file() and pairs.is_file()

    def __getitem__(self, key):
        board, pairs = self._paths(str(key))
        try:
            return pd.read_parquet(board), pd.read_parquet(pairs)
        except (OSError, ValueError) as e:
            raise KeyError(key) from e

    def __setitem__(self, key, value) -> None:
        board_df, pairs_df = value
        board, pairs = self._paths(str(key))
        try:
            board.parent.mkdir(parents=True, exist_ok=True)
            for df, path in ((pairs_df, pairs), (board_df, board)):
                fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
                os.close(fd)
                try:
                    df.to_parquet(tmp, index=False)
                    os.replace(tmp, path)
                finally:
                    Path(tmp).unlink(missing_ok=True)
        except OSError as e:  # a read-only or full cache: the results are still used, only not kept
            print(f"[leaderboard] could not store a view's results in {self.folder}: {e}", file=sys.stderr)

    def __delitem__(self, key) -> None:
        for path in self._paths(str(key)):
            path.unlink(missing_ok=True)

    def __iter__(self):
        boards = sorted((self.folder / code_digest()[:16]).glob("*.board.parquet"))
        return (p.name[: -len(".board.parquet")] for p in boards)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def import_recorded(config: LeaderboardParams) -> None:
    """Import ``config.recorded`` into the run folder (idempotent), with the reference tables their views need (each
    source declares its default files, language pair and the method whose reference tables it needs:
    dhp.recorded.Importer)."""
    keep = judged_segments(config.run_dir) if config.recorded_units == "judged" else None
    store = None if config.recorded_cache == "" else (config.recorded_cache or default_recorded_cache())
    references = []
    for kind in config.recorded:
        imp = IMPORTERS.lookup(kind)
        import_judgments(kind, default_path(kind, config.data_dir), config.run_dir, lp=imp.lp,
                         data_dir=config.data_dir, keep_segments=keep, store=store)
        if imp.reference_method is not None and imp.reference_method not in references:
            references.append(imp.reference_method)  # two sources needing the same tables: collected once
    for name in references:
        m = methods.get(name)
        methods.write_tables(m, m.collect_reference(m.config(data_dir=config.data_dir, run_dir=config.run_dir)),
                             config.run_dir)


def judged_segments(folder) -> pd.DataFrame:
    """(lp, seg_id) of every segment a judge of ``folder`` scored itself (segment_scores rows not imported)."""
    path = resolve(folder) / "segment_scores.parquet"
    if not path.is_file():
        return pd.DataFrame({"lp": pd.Series([], dtype=str), "seg_id": pd.Series([], dtype="int64")})
    rows = pd.read_parquet(path, columns=["lp", "seg_id", "mode"])
    return rows[rows["mode"] != RECORDED_MODE][["lp", "seg_id"]].drop_duplicates().reset_index(drop=True)


def default_recorded_cache() -> Path:
    """DHP_RECORDED_CACHE if set, else <per-user cache>/dhp/recorded: beside the data cache and the views' store."""
    if os.environ.get("DHP_RECORDED_CACHE"):
        return Path(os.environ["DHP_RECORDED_CACHE"])
    return Path(platformdirs.user_cache_dir("dhp", appauthor=False)) / "recorded"


def read(folder) -> dict[str, pd.DataFrame]:
    """The leaderboard tables written into ``folder`` ({} when absent)."""
    root = resolve(folder)
    return {n: read_csv(root / n) for n in TABLES if (root / n).is_file()}
