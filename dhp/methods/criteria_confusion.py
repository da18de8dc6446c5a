"""Criteria confusion (Hu et al. 2024, "Are LLM-based evaluators confusing NLG quality criteria?", §3-§6): does
the judge lower the score of the aspect an attack damages, and leave the other aspects alone?

The 18 aspect-targeted attacks of the paper's Table 2 (dhp.perturb.hu2024; nine with spaCy/lemminflect rules,
all 18 with an LLM perturber) damage each reference; the judge scores the original and every attacked copy on
each aspect with the aspect's description of a chosen type (dhp.judging.aspects: the paper's prompt of Table 18,
analysis then "Rating:", 10 replies at temperature 1.0 in sample mode); the paper's Table 19 says, per attack ×
aspect, whether the score should drop (S_T) or stay (S_F). The statistics (dhp.analysis.confusion, beyond the
paper's mean drops): a one-sided Wilcoxon per cell (D = log_0.05 p), a TOST equivalence test per cell, one
multiple-testing adjustment per description type for every decision, and the confusion index.

Notebook 07 runs its stages one by one (dhp.methods.run_stage): reference → variants → prompts → judge → analyze
→ figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import Field, field_validator, model_validator

from dhp import calls as calls_mod
from dhp.analysis import confusion as cf
from dhp.analysis.leaderboard import View
from dhp.analysis.report_card import confusion_rows
from dhp.backends import Backend
from dhp.backends.baseline import is_metric_backend
from dhp.backends.control import is_control_backend, score_rows
from dhp.config import RunParams
from dhp.datasets import CUSTOM_SUFFIXES, DATASETS, DatasetName, is_own_file, load_items
from dhp.datasets.criteria_hu2024 import ASPECTS, DESCRIPTION_TYPES, load_criteria, load_expectations
from dhp.errors import DHPError
from dhp.judging import aspects as aj
from dhp.judging.pointwise import score_prompts
from dhp.methods import Method, Stage, StageResult, Table, register, run_rows
from dhp.perturb import perturb, resolve_perturber
from dhp.perturb.hu2024 import CONFUSION_ATTACKS
from dhp.perturb.llm import PROMPT_UNITS
from dhp.perturb.catalog import methods_for
from dhp.plots.confusion import confusion_figures
from dhp.schema import DATASET_TASK


def _known(values: list[str] | None, allowed, what: str) -> list[str] | None:
    """``values`` when each is one of ``allowed`` and none is named twice (None passes: "all")."""
    if values is None:
        return None
    bad = [v for v in values if v not in allowed]
    if bad:
        raise ValueError(f"unknown {what} {bad}; use some of {list(allowed)}")
    if len(set(values)) < len(values):
        raise ValueError(f"a {what} is named twice")
    return values


#: The paper's judging setting (Hu et al. 2024 App. C.2): ten replies at temperature 1.0 (temperature None means
#: 1.0 in sample mode), each with room for the analysis before "Rating:". ``paper_setting=True`` applies it.
PAPER_SETTING = {"mode": "sample", "n_samples": aj.N_SAMPLES, "max_tokens": aj.MAX_TOKENS, "temperature": None}


class CriteriaConfusionParams(RunParams):
    """Parameters of a criteria-confusion run (python -m dhp run --method criteria_confusion; notebook 07).

    The defaults are a quick first look (one greedy reply of at most 8 tokens: about 90 s for notebook 07 with the
    embedded judge on two CPU cores); ``paper_setting=True`` asks as the paper does (:data:`PAPER_SETTING`)."""

    paper_setting: bool = Field(False, description="True: the paper's judging setting (mode 'sample', n_samples 10 "
                                                   "at temperature 1.0, max_tokens 256), whatever mode, n_samples, "
                                                   "temperature and max_tokens say; about 2 minutes per prompt "
                                                   "for the embedded judge on a CPU")

    dataset: DatasetName = Field("summeval", description=f"a dataset name ({', '.join(sorted(DATASET_TASK))}) or the "
                                                 "path of your own .csv/.jsonl file (item_id, source, reference, "
                                                 "task)")
    n_items: int = Field(2, ge=1, description="references to attack and judge (a seeded sample); the paper "
                                              "attacks about 1,000 over four tasks, and the equivalence test "
                                              "needs at least 5")
    path: str | None = Field(None, description="your copy of Story Cloze / Answer Equivalence (checked by sha256)")
    mode: Literal["logprobs", "sample", "likelihood", "metric"] = Field(
        "logprobs", description="'logprobs' (one greedy reply; the expected rating at its position) or 'sample' "
                                "(the paper's setting, App. C.2: n_samples replies at temperature 1.0, averaged); "
                                "'likelihood' (not the paper's: GPTScore's form, the text's mean log-probability "
                                "per token after the task, source and criterion; no reply, a base model's route); "
                                "'metric' for a control or a baseline only")
    description_types: list[str] = Field(["detailed"], min_length=1,
                                         description="aspect description types to ask with, each its own prompt "
                                                     f"and adjustment family ({', '.join(DESCRIPTION_TYPES)}); "
                                                     "the paper's main results use 'detailed'")
    attacks: list[str] | None = Field(None, description="attacks of the paper's Table 2 to run (None: all 18; "
                                                        "with perturber 'rule' the nine without a rule are "
                                                        "skipped with their reason)")
    aspects: list[str] | None = Field(["fluency", "coherence", "informativeness"],
                                      description=f"aspects to score ({', '.join(ASPECTS)}; None: all 11, as the "
                                                  "paper); the default three keep a first run short and hold an "
                                                  "S_T cell of four rule attacks")
    perturber: str = Field("rule", description="'rule' (the nine rule attacks) or an LLM judge spec that writes "
                                               "all 18 with their prompts and validators")
    instruction: Literal[tuple(aj.INSTRUCTIONS)] = Field(
        "paper", description="'paper': the paper's prompt; 'mitigated': it also says to judge the given criterion "
                             "only (the paper's §6 mitigation); 'rating_only': the rating alone, no analysis (not "
                             "the paper's: the route for a judge too small to analyse first). Runs of each can "
                             "share a run folder")
    n_samples: int = Field(aj.N_SAMPLES, ge=1, description="replies per prompt in sample mode, asked as one "
                                                           "request (the paper's 10)")
    temperature: float | None = Field(None, ge=0, description="sampling temperature (None: the paper's 1.0 in "
                                                              "sample mode, 0 in logprobs mode)")
    max_tokens: int = Field(8, ge=1, description="reply length limit (a reply cut off before 'Rating:' is NaN with "
                                                 "its reason); 8 fits the embedded 135M judge, which rates at once "
                                                 "or never; a judge that writes its analysis first needs room: "
                                                 "256, the paper's (paper_setting=True)")
    delta: float = Field(0.2, gt=0, description="equivalence margin of the invariance test, in score points "
                                                "(the paper's 'no degradation' threshold; in mode likelihood, "
                                                "nats per token)")
    alpha: float = Field(0.05, gt=0, lt=1, description="significance level of every decision (on adjusted p)")
    adjust_method: Literal[cf.ADJUST_METHODS] = Field("holm", description="multiple-testing adjustment within "
                                                                          "each description type: 'holm' or 'bh'")


    @model_validator(mode="before")
    @classmethod
    def _paper_setting(cls, data):
        if isinstance(data, dict) and data.get("paper_setting") is True:
            return {**data, **PAPER_SETTING}
        return data

    @model_validator(mode="after")
    def _likelihood_asks_nothing(self):
        if self.mode == "likelihood" and self.instruction != "paper":
            raise ValueError(f"instruction {self.instruction!r} shapes a question, and mode 'likelihood' asks none "
                             "(it scores the text after the criterion); leave instruction 'paper' or use mode "
                             "logprobs or sample")
        return self

    @field_validator("description_types")
    @classmethod
    def _known_description_types(cls, v: list[str]) -> list[str]:
        return _known(v, DESCRIPTION_TYPES, "description type")

    @field_validator("attacks")
    @classmethod
    def _known_attacks(cls, v: list[str] | None) -> list[str] | None:
        return _known(v, CONFUSION_ATTACKS, "attack")

    @field_validator("aspects")
    @classmethod
    def _known_aspects(cls, v: list[str] | None) -> list[str] | None:
        return _known(v, ASPECTS, "aspect")


# ---------------------------------------------------------------------------------------------- tables

SCORE_COLUMNS = tuple(c for c in aj.ASPECT_SCORE_COLUMNS if c != "failure")  # failure quotes replies: not results

ITEMS = Table("confusion_items.parquet", ("dataset", "task", "item_id", "source", "reference"),
              "the items: one row per item with its source and reference (the text the attacks damage)",
              partition=("dataset",), results="none")
VARIANTS = Table("confusion_variants.parquet", ("dataset", "task", "item_id", "perturbation", "level", "method",
                                                "text", "status", "reason"),
                 "one row per item × attack (the original included, perturbation 'original'): the attacked text "
                 "and whether it was made (status ok / skipped / failed, with the reason)",
                 partition=("dataset",), results="none")
SCORES = Table("confusion_scores.parquet", SCORE_COLUMNS,
               "one row per judge × mode × instruction × item × variant × aspect × description type: the score "
               "(mean of the replies whose rating parses; NaN with its reason in `failure`), n_valid and "
               "n_failed replies; attack is '' on the originals, which every attack of the item shares",
               partition=("dataset", "judge", "mode", "instruction", "description_type"), results="numbers")
EXPECTATIONS = Table("confusion_expectations.csv", ("attack", "target_aspect", "aspect", "human", "system", "set"),
                     "the paper's Table 19, one row per attack × aspect: whether annotators (human) and the "
                     "classification tree (system) expect a drop; set S_T (both), S_F (neither) or excluded. "
                     "Judge-independent (collected without a model), so results/ does not copy it",
                     partition=(), results="none")
CELLS = Table("confusion_cells.csv", tuple(cf.RUN_KEYS + cf.CELL_COLUMNS),
              "one row per judge × mode × instruction × attack × aspect × description type: set, mean drop, "
              "pairs, directional p (raw, adjusted) and D, equivalence p (raw, adjusted; the test used, or why "
              "none could be), significant_drop and invariant (both decided on the adjusted p)")
SUMMARY = Table("confusion_summary.csv", tuple(cf.RUN_KEYS + cf.SUMMARY_COLUMNS),
                "one row per judge × mode × instruction × description type: S_T and S_F cells, the share of S_T "
                "cells with D > 1, of S_F cells shown invariant (among n_SF_tested), dropped, and the confusion "
                "index (NaN, never 0, where it cannot be computed)")
CORRELATIONS = Table("confusion_correlations.csv", tuple(cf.RUN_KEYS + cf.CORRELATION_COLUMNS + ["n_texts"]),
                     "one row per judge × mode × instruction × description type × ordered pair of aspects: the "
                     "Pearson correlation of their scores over the texts (originals and attacked copies) both "
                     "scored, and how many those were (the paper's Figures 4, 8-13)")


@register
class CriteriaConfusion(Method):
    name = "criteria_confusion"
    title = "Criteria confusion (aspect-targeted attacks)"
    paper = ("Hu et al. 2024, Are LLM-based evaluators confusing NLG quality criteria? (ACL 2024), §3-§6, "
             "Tables 2, 18, 19")
    notebooks = ("07_criteria_confusion",)
    # likelihood: the text's log-probability after each criterion (GPTScore's form); metric: a control
    # (dhp.controls) or a baseline (one score, every aspect)
    modes = ("logprobs", "sample", "likelihood", "metric")
    metric_no_model = "a language model answers its prompts in mode logprobs or sample, or scores the text in mode " \
                      "likelihood"
    headline = "confusion_index"
    power = ("agreement", "n_items", "items")
    Params = CriteriaConfusionParams
    collects = (ITEMS, VARIANTS, SCORES, EXPECTATIONS)

    # on the method's own data (SummEval, the rule attacks): 93 attack x aspect cells of the nine rule attacks
    control_params = {"dataset": "summeval", "path": None, "n_items": 30, "aspects": None, "attacks": None,
                      "perturber": "rule"}
    profiles = {"standard": {}, "paper": {"n_items": 100}}  # python -m dhp evaluate: its defaults (its own tables)
    produces = (CELLS, SUMMARY, CORRELATIONS)
    extra_stages = (
        Stage("variants", (), ("perturber",), (ITEMS.name, VARIANTS.name),
              "the items and their attacked copies (an LLM perturber's calls are cached); no judge call",
              lambda m, c, t, j: m.collect_variants(c)),
        Stage("prompts", (ITEMS.name, VARIANTS.name), (), (),
              "what the judge stage asks: one prompt per ok variant × aspect × description type (not written)",
              lambda m, c, t, j: {"prompts": m.prompts(c, *run_rows(t[ITEMS.name], t[VARIANTS.name], c.dataset,
                                                                     c.n_items))}),
        Stage("judge", (ITEMS.name, VARIANTS.name), ("judge",), (SCORES.name,),
              "every prompt of the variants stage's rows scored by the judge (cached calls)",
              lambda m, c, t, j: m.collect_scores(c, m.prompts(c, *run_rows(t[ITEMS.name], t[VARIANTS.name],
                                                                            c.dataset, c.n_items)), j)),
    )

    # ------------------------------------------------------------------ collect
    def collect_reference(self, config: CriteriaConfusionParams) -> dict[str, pd.DataFrame]:
        """The paper's Table 19 expectations (no model call): what a run with judge ``recorded`` collects."""
        return {EXPECTATIONS.name: load_expectations()[list(EXPECTATIONS.columns)]}

    def criteria(self, config: CriteriaConfusionParams) -> pd.DataFrame:
        """The aspects' descriptions (the authors' aspect_criteria.json under the data root)."""
        return load_criteria(data_dir=config.data_dir)

    def collect_variants(self, config: CriteriaConfusionParams) -> dict[str, pd.DataFrame]:
        """Stage 1: the items and their attacked copies (rule-based, or written and validated by the perturber;
        its calls go through the run's cache). No judge call."""
        items, variants = self._variants(config)
        return {ITEMS.name: items, VARIANTS.name: variants}

    def _variants(self, config: CriteriaConfusionParams, dry_run: bool = False) -> tuple:
        """(items, variants); ``dry_run``: no perturber call either (LLM rows not in the cache are "pending") and
        (items, variants, the perturber's dhp.calls.Estimate)."""
        attacks = list(config.attacks or CONFUSION_ATTACKS)
        if config.dataset in DATASET_TASK:
            methods_for(config.dataset, attacks)  # an attack the dataset's task lacks fails here, up front
        items = load_items(config.dataset, config.n_items, config.seed, config.data_dir, config.path)
        perturber = resolve_perturber(config.perturber)[0]
        variants = perturb(items, seed=config.seed, perturber=perturber or "rule", perturbations=attacks,
                           progress=config.progress, cache=config.cache, dry_run=dry_run)
        return (items, *variants) if dry_run else (items, variants)

    def prompts(self, config: CriteriaConfusionParams, items: pd.DataFrame, variants: pd.DataFrame,
                criteria: pd.DataFrame | None = None) -> pd.DataFrame:
        """Stage 2a: one prompt per ok variant × aspect × description type (dhp.judging.aspects.aspect_prompts),
        the text called what the item's task makes it (summary, story ending, answer, translation). A DHPError
        when there is nothing to ask (e.g. only source aspects and items without a source)."""
        criteria = self.criteria(config) if criteria is None else criteria
        parts = []
        for task, group in items.groupby(items["task"].astype(str), sort=False):
            ids = set(group["item_id"].astype(str))
            unit = PROMPT_UNITS.get(task, ("text", ""))[0]
            parts.append(aj.aspect_prompts(variants[variants["item_id"].astype(str).isin(ids)], group, criteria,
                                           description_types=config.description_types, aspects=config.aspects,
                                           unit=unit, instruction=config.instruction,
                                           likelihood=config.mode == "likelihood"))
        prompts = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        if prompts.empty:
            raise DHPError(f"Nothing to ask the judge: no ok variant × aspect of {config.dataset} "
                           f"(aspects {config.aspects or 'all'}).",
                           "check the variants' status and reason, and give aspects that read the text alone "
                           "(fluency, coherence, ...) when the items have no source.")
        return prompts

    def collect_scores(self, config: CriteriaConfusionParams, prompts: pd.DataFrame,
                       judge: "str | Backend | None" = None) -> StageResult:
        """Stage 2b: every prompt scored by the judge (dhp.judging.aspects.score_aspects; cached calls); the run
        statistics of the calls (calls made, cache hits: they vary between runs) ride beside, for judge_stats.json."""
        backend = self._live(config, judge)
        if is_control_backend(backend):
            return self._control_scores(config, prompts, backend)
        if config.mode == "metric":
            if not is_metric_backend(backend):
                raise DHPError(f"{backend.identity} is a language model: in mode 'metric' criteria confusion runs a "
                               "control or a baseline (one score of the text, no prompt).",
                               "run it in mode logprobs or sample (the paper's), or likelihood.")
            return self._metric_scores(config, prompts, backend)
        scores, judge_stats = aj.score_aspects(prompts, backend, mode=config.mode, n_samples=config.n_samples,
                                               temperature=config.temperature, max_tokens=config.max_tokens,
                                               seed=config.seed, cache=config.cache, progress=config.progress,
                                               max_consecutive_failures=config.max_consecutive_failures)
        return StageResult({SCORES.name: scores}, stats={SCORES.name: judge_stats})

    def _control_scores(self, config: CriteriaConfusionParams, prompts: pd.DataFrame, backend) -> StageResult:
        """A control's aspect scores (dhp.controls), no call: gold 0.5 for an attacked copy on an aspect the attack
        damages — its target aspect (the paper's Table 2) and any other aspect annotators expect to drop (Table 19,
        ``human``: the S_T cells are drawn from these) — and 1 for the original and every other aspect: a good judge
        lowers the damaged criteria only. The control reads the prompt's length for the text's (``longer``): within
        one aspect and description type the prompt is the text plus fixed words."""
        if config.mode != "metric":
            raise DHPError(f"{backend.identity} is a control: it runs in mode 'metric', not {config.mode!r}.",
                           "pass mode='metric' (python -m dhp run --method criteria_confusion --judge "
                           f"{backend.identity} --mode metric).")
        e = load_expectations()
        damaged = set(zip(e["attack"], e["target_aspect"])) | set(zip(e.loc[e["human"], "attack"],
                                                                      e.loc[e["human"], "aspect"]))
        hit = pd.Series([(a, b) in damaged for a, b in zip(prompts["attack"].astype(str),
                                                           prompts["aspect"].astype(str))], index=prompts.index)
        rows = prompts.assign(gold=hit.map({True: 0.5, False: 1.0}), candidate=prompts["prompt"],
                              instruction=prompts["instruction"] if "instruction" in prompts else "paper")
        scores = score_rows(backend, rows, ["dataset", "item_id", "attack", "aspect", "description_type",
                                            "instruction"])
        ok = pd.Series(scores).notna()
        out = rows.drop(columns=["prompt", "gold", "candidate"]).assign(
            judge=backend.identity, mode=config.mode, score=scores, n_valid=ok.astype(int).values,
            n_failed=(~ok).astype(int).values, failure=ok.map({True: "", False: "no gold label"}).values)
        # the columns a model's scores have (score_aspects), failure included: the table written keeps SCORE_COLUMNS
        return StageResult({SCORES.name: out[aj.ASPECT_SCORE_COLUMNS].reset_index(drop=True)},
                           stats={SCORES.name: {**calls_mod.run_stats(backend.identity, len(out)), "rows": len(out)}})

    def _metric_scores(self, config: CriteriaConfusionParams, prompts: pd.DataFrame, backend) -> StageResult:
        """A baseline's aspect scores: its one surface score of the text against the source (cached calls), the same
        number whatever the criterion — a judge that cannot tell criteria apart by construction, the floor of the
        method's scale (what its confusion index reads for a score that moves every criterion together)."""
        rows = prompts.assign(task=prompts["dataset"].astype(str).map(DATASET_TASK).fillna(""))
        scored, stats = score_prompts(rows, judge=backend, mode="metric", cache=config.cache, progress=config.progress,
                                      max_consecutive_failures=config.max_consecutive_failures)
        out = scored.assign(judge=backend.identity, mode=config.mode)
        return StageResult({SCORES.name: out[aj.ASPECT_SCORE_COLUMNS].reset_index(drop=True)},
                           stats={SCORES.name: stats})

    def collect(self, config: CriteriaConfusionParams, judge: "str | Backend | None" = None) -> StageResult:
        backend = self._live(config, judge)  # a bad judge spec or an exposed key fails before any work
        resolve_perturber(config.perturber)
        criteria = self.criteria(config)  # a missing criteria file fails before the perturber is paid
        reference = self.collect_reference(config)
        first = self.collect_variants(config)
        prompts = self.prompts(config, first[ITEMS.name], first[VARIANTS.name], criteria)
        scored = self.collect_scores(config, prompts, backend)
        return StageResult({**reference, **first, **scored}, stats=scored.stats)

    def estimate(self, config: CriteriaConfusionParams, judge: "str | Backend | None" = None) -> dict:
        """What the run would cost, without any model call or written table: {"perturber": dhp.calls.Estimate or
        None, "judge": dhp.calls.Estimate}. Attacks an LLM has not written yet are estimated with their reference
        as a stand-in of similar length."""
        backend = self._live(config, judge)
        if is_control_backend(backend):
            return {"perturber": None, "judge": calls_mod.Estimate(backend.identity, 0, 0, 0, 0, 0.0)}
        criteria = self.criteria(config)
        items, variants, perturber_est = self._variants(config, dry_run=True)
        refs = dict(zip(items["item_id"].astype(str), items["reference"]))
        stand_in = variants.assign(
            text=variants["text"].where(variants["status"] != "pending", variants["item_id"].astype(str).map(refs)),
            status=variants["status"].replace("pending", "ok"))
        prompts = self.prompts(config, items, stand_in, criteria)
        judge_est = aj.score_aspects(prompts, backend, mode=config.mode, n_samples=config.n_samples,
                                     temperature=config.temperature, max_tokens=config.max_tokens, seed=config.seed,
                                     cache=config.cache, dry_run=True)
        return {"perturber": perturber_est, "judge": judge_est}

    def _live(self, config: CriteriaConfusionParams, judge) -> Backend:
        self.check_mode(config)
        backend = self.backend(config, judge)
        if backend is None:
            raise DHPError("Judge 'recorded' calls no model, so it collects no scores.",
                           "analyze the confusion_scores.parquet already in the run folder with dhp.methods.run "
                           "(python -m dhp run --method criteria_confusion --judge recorded), or name a live judge.")
        return backend

    def inputs(self, config: CriteriaConfusionParams) -> list[Path]:
        return [Path(config.dataset)] if is_own_file(config.dataset) else []

    # ------------------------------------------------------------------ analyze (pure)
    def analyze(self, tables: dict[str, pd.DataFrame], config: CriteriaConfusionParams) -> dict[str, pd.DataFrame]:
        """Cells, summary and correlations of every judge × mode × instruction in the run folder's scores."""
        if EXPECTATIONS.name not in tables:
            raise DHPError(f"The run folder {config.run_dir} has no {EXPECTATIONS.name}.",
                           "collect it first (python -m dhp run --method criteria_confusion, or "
                           "methods.write_tables(m, m.collect_reference(config), run_dir)).")
        cells, summary, correlations = cf.confusion_tables(tables[SCORES.name], tables[EXPECTATIONS.name],
                                                           delta=config.delta, alpha=config.alpha,
                                                           adjust_method=config.adjust_method)
        return {CELLS.name: cells, SUMMARY.name: summary, CORRELATIONS.name: correlations}

    def card(self, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
        return confusion_rows(tables[SUMMARY.name]) if SUMMARY.name in tables else pd.DataFrame()

    def figures(self, tables: dict[str, pd.DataFrame], config: CriteriaConfusionParams) -> dict:
        if not {CELLS.name, SUMMARY.name, CORRELATIONS.name} <= set(tables):
            return {}
        return confusion_figures(tables[CELLS.name], tables[SUMMARY.name], tables[CORRELATIONS.name])

    def views(self, tables: dict[str, pd.DataFrame]) -> list:
        """Per description type and instruction: the share of S_T cells with a significant drop (D > 1) and the
        share of tested S_F cells shown invariant — units: attack × aspect cells, 1 when the cell went as expected."""
        cells = tables.get("confusion_cells.csv")
        if cells is None or cells.empty:
            return []
        out = []
        c = cells.assign(unit=cells["attack"].astype(str) + ":" + cells["aspect"].astype(str))
        for (dtype, instruction), g in c.groupby(["description_type", "instruction"], sort=True):
            scope = dtype if instruction == "paper" else f"{dtype}/{instruction}"
            st = g[g["set"] == "S_T"].assign(value=lambda t: (t["D"] > 1).astype(float))
            sf = g[(g["set"] == "S_F") & g["p_equivalence"].notna()].assign(
                value=lambda t: t["invariant"].astype(float))
            out.append(View("criteria_confusion", scope, "share_ST_D_gt_1", "mean", st[["judge", "mode", "unit",
                                                                                          "value"]]))
            out.append(View("criteria_confusion", scope, "share_SF_invariant", "mean", sf[["judge", "mode", "unit",
                                                                                             "value"]]))
        return out
