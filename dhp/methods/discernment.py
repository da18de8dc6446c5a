"""DHP discernment (Wang, Yuan et al., "DHP Benchmark: Are LLMs Good NLG Evaluators?", §4.3): perturb references
at character, word and sentence level, score originals and copies, test every perturbation × metric with a
one-sided Wilcoxon signed-rank test, combine the metrics' p with the harmonic mean and report D = log_0.05 p per
perturbation, D_avg (level-balanced) and D_min per judge, with the negative control and the sign-flip null.

Notebooks 01 (perturb), 02 (judge) and 03 (statistics) run its stages one by one; 04 and 05 draw its figures.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from pydantic import Field, field_validator

from dhp import plots
from dhp.analysis import discernment as stats
from dhp.analysis.leaderboard import View
from dhp.analysis.report_card import dhp_rows
from dhp.backends import Backend
from dhp.config import RunParams
from dhp.datasets import CUSTOM_SUFFIXES, DATASETS, DatasetName, is_own_file, load_items
from dhp.judging import failures_table, score_perturbed
from dhp.methods import Method, Plan, Stage, StageResult, Table, register, run_rows
from dhp.perturb import perturb, resolve_perturber
from dhp.perturb.catalog import methods_for
from dhp.schema import DATASET_TASK, SCORE_COLUMNS, TASK_METRICS, metrics_for
from dhp.weights import check_weights_cover, load_expert_weights



class DHPParams(RunParams):
    """Parameters of a DHP run (python -m dhp run --method dhp; notebooks 01-03)."""

    dataset: DatasetName = Field("summeval", description=f"a dataset name ({', '.join(sorted(DATASET_TASK))}) or the "
                                                 "path of your own .csv/.jsonl file")
    n_items: int = Field(2, ge=1, description="items (references) to perturb and judge; the paper uses 100")
    path: str | None = Field(None, description="your copy of Story Cloze / Answer Equivalence (checked by sha256)")
    perturber: str = Field("rule", description="'rule' or an LLM judge spec that writes the LLM perturbations")
    perturbations: list[str] | None = Field(None, description="perturbations to run (None: every one of the "
                                                              "dataset's task)")
    metrics: list[str] | None = Field(None, description="the task's metrics to ask the judge for (None: every one; "
                                                        "e.g. [coherence]: a quarter of SummEval's calls); "
                                                        "likelihood and metric modes score each text once anyway")
    n_samples: int = Field(5, ge=1, description="replies per prompt in sample mode (the paper's 5)")
    max_tokens: int | None = Field(None, ge=1, description="reply length limit (None: the mode's default)")
    expert_weights: str | None = Field(None, description="expert-weights CSV (None: the shipped "
                                                         "dhp/resources/expert_weights.csv)")
    combine: str = Field("paper", description="metric combination: 'paper' (as printed) or 'wilson'")
    n_boot: int = Field(200, ge=0, description="bootstrap resamples over items (0: no intervals)")
    n_null: int = Field(1000, ge=1, description="sign-flip null resamples (false-positive rate of D > 1)")
    zero_method: str = Field("wilcox", description="Wilcoxon zero handling: wilcox | pratt | zsplit (scipy's)")
    wilcoxon_method: str = Field("auto", description="Wilcoxon p: auto | exact | asymptotic | permutation")


    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, v: list[str] | None) -> list[str] | None:
        known = {m for ms in TASK_METRICS.values() for m in ms}
        if v is not None and (not v or set(v) - known):
            raise ValueError(f"use metrics from {sorted(known)} (None: every one of the task's)")
        return v

    @field_validator("combine")
    @classmethod
    def _known_combine(cls, v: str) -> str:
        if v not in stats.COMBINES:
            raise ValueError(f"use one of {list(stats.COMBINES)}")
        return v

    @field_validator("zero_method")
    @classmethod
    def _known_zero_method(cls, v: str) -> str:
        if v not in stats.ZERO_METHODS:
            raise ValueError(f"use one of {list(stats.ZERO_METHODS)}")
        return v

    @field_validator("wilcoxon_method")
    @classmethod
    def _known_wilcoxon_method(cls, v: str) -> str:
        if v not in stats.METHODS:
            raise ValueError(f"use one of {list(stats.METHODS)}")
        return v


SCORES = Table("scores.parquet", tuple(SCORE_COLUMNS),
               "one row per item × variant × metric: the judge's score (NaN with its reason in `failure`)",
               partition=("dataset", "judge", "mode"), results="numbers")


@register
class DHP(Method):
    name = "dhp"
    title = "DHP discernment"
    paper = "Wang, Yuan et al., DHP Benchmark (arXiv:2408.13704), §4.3"
    notebooks = ("01_perturb", "02_judge", "03_discernment")
    shared_notebooks = ("01_perturb",)
    shared_tables = ("dataset.parquet", "perturbed.parquet")
    result_notebooks = ("04_figures", "05_response_styles")
    modes = ("logprobs", "sample", "likelihood", "metric")
    headline = "D_avg"
    power = ("agreement", "n_items", "items")
    Params = DHPParams
    collects = (
        Table("dataset.parquet", ("dataset", "task", "item_id", "source", "reference"),
              "the items: one row per item with its source and reference texts", partition=("dataset",),
              results="none"),
        Table("perturbed.parquet", ("dataset", "item_id", "perturbation", "severity", "level", "text", "status"),
              "one row per item × perturbation × severity (originals included): the text and whether it was made",
              partition=("dataset",), results="none"),
        SCORES,
        Table("failures.csv", ("dataset", "judge", "mode", "item_id", "perturbation", "severity", "metric"),
              "one row per score row without a usable reply, and why", partition=("dataset", "judge", "mode"),
              results="none"),
    )
    extra_stages = (
        Stage("perturb", (), ("perturber",), ("dataset.parquet", "perturbed.parquet"),
              "notebook 01: the items and their perturbed copies (an LLM perturber's calls are cached)",
              lambda m, c, t, j: m.collect_perturbed(c)),
        Stage("judge", ("dataset.parquet", "perturbed.parquet"), ("judge",), ("scores.parquet", "failures.csv"),
              "notebook 02: the first n_items items the perturb stage wrote, every ok variant scored per metric",
              lambda m, c, t, j: m.collect_scores(c, *run_rows(t["dataset.parquet"], t["perturbed.parquet"],
                                                               c.dataset, c.n_items), j)),
    )
    produces = (
        Table("discernment.csv", tuple(stats.DISCERNMENT_COLUMNS[:8]),
              "one row per dataset × judge × mode × perturbation: p, D (+ expert-weighted, intervals)"),
        Table("summary.csv", ("dataset", "judge", "mode", "D_avg", "D_min"),
              "one row per dataset × judge × mode: D_avg, D_min, their intervals, the controls"),
    )

    # ------------------------------------------------------------------ collect
    def expert_weights(self, config: DHPParams) -> pd.DataFrame:
        return load_expert_weights(config.expert_weights)

    def collect_perturbed(self, config: DHPParams) -> dict[str, pd.DataFrame]:
        """Stage 1 (notebook 01): the items and their perturbed copies (rule-based, or written by the perturber)."""
        items, perturbed = self._perturbed(config)
        return {"dataset.parquet": items, "perturbed.parquet": perturbed}

    def _perturbed(self, config: DHPParams, dry_run: bool = False) -> tuple:
        """(items, perturbed table); ``dry_run``: (items, perturbed table, the perturber's dhp.calls.Estimate)."""
        if config.dataset in DATASET_TASK:
            methods_for(config.dataset, config.perturbations)  # an unknown perturbation fails here, up front
        items = load_items(config.dataset, config.n_items, config.seed, config.data_dir, config.path)
        perturber = resolve_perturber(config.perturber)[0]
        perturbed = perturb(items, seed=config.seed, perturber=perturber or "rule",
                            perturbations=config.perturbations, progress=config.progress, cache=config.cache,
                            dry_run=dry_run)
        return (items, *perturbed) if dry_run else (items, perturbed)

    def collect_scores(self, config: DHPParams, items: pd.DataFrame, perturbed: pd.DataFrame,
                       judge: "str | Backend | None" = None) -> StageResult:
        """Stage 2 (notebook 02): every ok variant scored per metric by the judge; the run statistics of the calls
        (calls made, cache hits: they vary between runs) ride beside the tables, for judge_stats.json."""
        backend = self.backend(config, judge)
        self._check_weights(config, items)
        scores, judge_stats = score_perturbed(perturbed, items, judge=backend, mode=config.mode,
                                              n_samples=config.n_samples, seed=config.seed, cache=config.cache,
                                              metrics=config.metrics, max_tokens=config.max_tokens,
                                              n_ctx=config.n_ctx, progress=config.progress,
                                              max_consecutive_failures=config.max_consecutive_failures)
        return StageResult({"scores.parquet": scores, "failures.csv": failures_table(scores)},
                           stats={"scores.parquet": judge_stats})

    def collect(self, config: DHPParams, judge: "str | Backend | None" = None) -> StageResult:
        judge = self.backend(config, judge)  # a bad judge spec or an exposed key fails before any work
        resolve_perturber(config.perturber)
        self._check_weights(config, None)
        first = self.collect_perturbed(config)
        scored = self.collect_scores(config, first["dataset.parquet"], first["perturbed.parquet"], judge)
        return StageResult({**first, **scored}, stats=scored.stats)

    # python -m dhp evaluate: the leaderboard's DHP view on SummEval items (the paper's N = 100)
    profiles = {"standard": {"dataset": "summeval", "n_items": 20}, "paper": {"dataset": "summeval", "n_items": 100}}

    def evaluate_plan(self, config: DHPParams, backend=None) -> Plan:
        plan = Plan([f"DHP {config.dataset}: {config.n_items} items (the paper's N = 100)"])
        plan.estimates = [e for e in self.estimate(config, backend).values() if e is not None]
        return plan

    def estimate(self, config: DHPParams, judge: "str | Backend | None" = None) -> dict:
        """What the run would cost, without any model call or written table: {"perturber": dhp.calls.Estimate or
        None, "judge": dhp.calls.Estimate}. LLM perturbations not made yet are estimated with their reference as a
        stand-in of similar length."""
        backend = self.backend(config, judge)
        self._check_weights(config, None)
        items, perturbed, perturber_est = self._perturbed(config, dry_run=True)
        refs = dict(zip(items["item_id"].astype(str), items["reference"]))
        stand_in = perturbed.assign(
            text=perturbed["text"].where(perturbed["status"] != "pending", perturbed["item_id"].map(refs)),
            status=perturbed["status"].replace("pending", "ok"))
        judge_est = score_perturbed(stand_in, items, judge=backend, mode=config.mode, n_samples=config.n_samples,
                                    seed=config.seed, cache=config.cache, metrics=config.metrics,
                                    max_tokens=config.max_tokens, n_ctx=config.n_ctx, progress=False, dry_run=True)
        return {"perturber": perturber_est, "judge": judge_est}

    def _check_weights(self, config: DHPParams, items: pd.DataFrame | None) -> None:
        """Fail before paying: expert weights must exist for everything that will be scored."""
        ew = self.expert_weights(config)
        if items is None:
            if config.dataset not in DATASET_TASK:
                return
            pairs = [(config.dataset, DATASET_TASK[config.dataset])]
        else:
            pairs = [(str(items["dataset"].iloc[0]), t) for t in sorted(set(items["task"].astype(str)))]
        for dataset, task in pairs:
            planned = [m.perturbation for m in methods_for(dataset, config.perturbations, task)]
            metrics = ("likelihood",) if config.mode in ("likelihood", "metric") else [
                m for m in metrics_for(task) if config.metrics is None or m in config.metrics]
            check_weights_cover(ew, task, planned, metrics)

    def inputs(self, config: DHPParams) -> list[Path]:
        return [Path(config.dataset)] if is_own_file(config.dataset) else []

    # ------------------------------------------------------------------ analyze (pure)
    def analyze(self, tables: dict[str, pd.DataFrame], config: DHPParams) -> dict[str, pd.DataFrame]:
        scores = tables["scores.parquet"]
        ew = self.expert_weights(config)
        disc = stats.discernment(scores, expert_weights=ew, combine=config.combine, n_boot=config.n_boot,
                                 seed=config.seed, zero_method=config.zero_method, method=config.wilcoxon_method)
        null = stats.null_calibration(scores, n_null=config.n_null, seed=config.seed, zero_method=config.zero_method,
                                      method=config.wilcoxon_method)
        summary = stats.summarize(disc, null=null)  # D_avg/D_min intervals from disc's bootstrap draws
        return {"discernment.csv": disc.table, "summary.csv": summary}

    def card(self, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
        return dhp_rows(tables["summary.csv"], tables.get("discernment.csv")) if "summary.csv" in tables \
            else pd.DataFrame()

    def figures(self, tables: dict[str, pd.DataFrame], config: DHPParams) -> dict:
        if "summary.csv" not in tables or "discernment.csv" not in tables:
            return {}
        return plots.discernment_figures(tables["summary.csv"], tables["discernment.csv"],
                                         ew=self.expert_weights(config))

    def views(self, tables: dict[str, pd.DataFrame]) -> list:
        """D_avg and D_min per dataset (units: items; a paired bootstrap of items tests two judges' difference)."""
        scores = tables.get(SCORES.name)
        if scores is None or scores.empty:
            return []
        data = scores.assign(unit=scores["item_id"].astype(str))
        return [View("dhp", f"DHP {dataset}", measure, "statistic", g, statistic=_summary_value(measure),
                     draws=_summary_draws(measure))
                for dataset, g in data.groupby("dataset", sort=True) for measure in ("D_avg", "D_min")]


def _summary_value(measure: str):
    """A statistic of one judge's score rows: ``measure`` of its DHP summary (no bootstrap, no null), each unit an
    item."""
    def statistic(rows: pd.DataFrame) -> float:
        disc = stats.discernment(rows.assign(item_id=rows["unit"]), n_boot=0)
        summary = stats.summarize(disc)
        return float(summary[measure].iloc[0]) if len(summary) else float("nan")

    statistic.__name__ = measure
    return statistic


def _summary_draws(measure: str):
    """The vectorised resampling of :func:`_summary_value`: ``measure`` for every resample of the units."""
    def draws(rows: pd.DataFrame, units: list, idx) -> list:
        return stats.summary_draws(rows.assign(item_id=rows["unit"]), [str(u) for u in units], idx, measure)

    return draws
