"""Decompose and aggregate on LLMBar (Li et al., DnA-Eval; Zeng et al. 2023, LLMBar): which of two responses to an
instruction is better? Pairwise strategies (dhp.judging.strategies: LLMBar's Vanilla, DnA-Eval's direct and CoT
baselines, DnA, chain of aspects, and a pointwise control) run on LLMBar pairs — or on your own pairwise file — in
both orders; their agreement with the human label is scored with LLMBar's statistics, with position consistency and
the cost in calls and prompt tokens. Verdicts of published judges (LLMBar's result.json files, imported with
``python -m dhp import-judgments llmbar``) sit in the same table and are analysed the same way.

The bridge to DHP runs the same judge on a few perturbed DHP items: its pointwise metric scores give the direct D
and, aggregated with fixed weights, the DnA D; the original and its perturbed copy shown side by side, in both
orders, give the pairwise D (one sign-test trial per item).

Notebook 08 runs its stages one by one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import Field, field_validator

from dhp import calls
from dhp.analysis import decomposition as dec
from dhp.analysis import discernment as stats
from dhp.analysis.leaderboard import View
from dhp.analysis.report_card import agreement_rows
from dhp.backends import Backend
from dhp.config import RunParams
from dhp.datasets import CUSTOM_SUFFIXES, DATASETS, DatasetName, is_own_file, load_items
from dhp.datasets.llmbar import SUBSETS, load_llmbar, load_pairwise
from dhp.errors import DHPError
from dhp.backends.baseline import is_metric_backend
from dhp.backends.control import is_control_backend
from dhp.judging import score_perturbed
from dhp.judging.pairwise import compare_pairs
from dhp.judging.strategies import (LLMBAR_SHARED, LLMBAR_SWAP, STRATEGIES, llmbar_plan_jobs, llmbar_protocol,
                                    llmbar_retry_bound, run_strategies)
from dhp.methods import Method, Plan, Stage, StageResult, Table, register
from dhp.perturb import perturb
from dhp.perturb.llm import PROMPT_UNITS
from dhp.perturb.catalog import methods_for
from dhp.plots.decomposition import plot_agreement
from dhp.recorded import verdict_columns
from dhp.schema import DATASET_TASK, SCORE_COLUMNS, metrics_for
from dhp.weights import check_weights_cover, load_expert_weights



class DecomposeAggregateParams(RunParams):
    """Parameters of a decompose-and-aggregate run (python -m dhp run --method decompose_aggregate; notebook 08)."""

    subsets: list[str] = Field(["Natural", "Adversarial_Neighbor"], min_length=1,
                               description=f"LLMBar subsets ({', '.join(SUBSETS)}; 'Adversarial' = the four "
                                           "adversarial ones); not read when pairs_path is given")
    n_pairs: int | None = Field(2, ge=1, description="pairs per subset, a seeded sample (None: every pair; LLMBar "
                                                     "has 100 Natural and 319 Adversarial pairs)")
    strategies: list[str] = Field(["dhp_vanilla", "direct", "dna"], min_length=1,
                                  description=f"pairwise strategies to run, each in both orders "
                                              f"({', '.join(STRATEGIES)})")
    pairs_path: str | None = Field(None, description="your own pairwise .csv/.jsonl (item_id, instruction, output_1, "
                                                     "output_2, label 1/2/tie) instead of LLMBar (None: LLMBar)")
    dhp_dataset: DatasetName = Field("summeval", description=f"the DHP bridge's dataset: a name ({', '.join(DATASETS)}) or "
                                                     "the path of your own .csv/.jsonl file")
    dhp_path: str | None = Field(None, description="your copy of Story Cloze / Answer Equivalence when dhp_dataset "
                                                   "names one (checked by sha256)")
    dhp_items: int = Field(1, ge=0, description="items of dhp_dataset the bridge perturbs and judges (0: no bridge)")
    dhp_perturbations: list[str] | None = Field(["char_typo"], description="the bridge's perturbations, rule-based "
                                                                           "(None: every one of the dataset's task)")
    n_samples: int = Field(5, ge=1, description="replies per prompt when the bridge scores in sample mode")
    expert_weights: str | None = Field(None, description="expert-weights CSV for the bridge's statistics and its DnA "
                                                         "weights (None: the shipped dhp/resources/expert_weights.csv)")
    llmbar_share_requests: bool = Field(False, description="llmbar: strategies answer identical requests once across "
                                                           "strategies and pairs (cheaper; not LLMBar's procedure, "
                                                           "which asks each strategy and pair on its own: named in "
                                                           "the rows' protocol)")
    dna_weights: Literal["expert", "equal"] = Field("expert", description="the bridge's DnA aggregation weights: "
                                                                          "'expert' (the expert weights averaged over "
                                                                          "the task's perturbations) or 'equal'")

    @field_validator("subsets")
    @classmethod
    def _known_subsets(cls, v: list[str]) -> list[str]:
        bad = [s for s in v if s not in SUBSETS and s != "Adversarial"]
        if bad:
            raise ValueError(f"unknown LLMBar subset(s) {bad}; use some of {[*SUBSETS, 'Adversarial']}")
        return v

    @field_validator("strategies")
    @classmethod
    def _known_strategies(cls, v: list[str]) -> list[str]:
        bad = [s for s in v if s not in STRATEGIES]
        if "vanilla" in bad:  # renamed: it is not LLMBar's protocol, so it no longer borrows LLMBar's name
            raise ValueError("'vanilla' was renamed: use 'llmbar:Vanilla' (LLMBar's own template, read from the data "
                             "root) or 'dhp_vanilla' (this project's rewording)")
        if bad:
            raise ValueError(f"unknown strategy(ies) {bad}; use some of {list(STRATEGIES)}")
        if len(set(v)) < len(v):
            raise ValueError("a strategy is named twice")
        return v


    @field_validator("pairs_path")
    @classmethod
    def _pairs_file(cls, v: str | None) -> str | None:
        if v is not None and Path(v).suffix.lower() not in CUSTOM_SUFFIXES:
            raise ValueError("give the path of a .csv or .jsonl file")
        return v


# ---------------------------------------------------------------------------------------------- tables

VERDICTS = Table("pairwise_verdicts.parquet", tuple(verdict_columns()),
                 "one row per judge × mode × item × strategy × order: the verdict in the dataset's labelling ('1', "
                 "'2', 'tie'; None with its reason in failure), the strategy's intermediate results (aspects, "
                 "aspect scores, weights, overall scores f1/f2) and the gold label; source is the imported file "
                 "('' for a live run)", results="none")
COSTS = Table("pairwise_costs.csv", ("judge", "mode", "strategy", "calls", "prompt_tokens"),
              "one row per judge × mode × strategy: the calls the strategy asked over the run's pairs (cached or "
              "not: the protocol's cost) and their prompt tokens")
BRIDGE_SCORES = Table("bridge_scores.parquet", tuple(SCORE_COLUMNS),
                      "the bridge's pointwise scores: one row per DHP item × variant × metric (dhp's scores table)",
                      partition=("dataset", "judge", "mode"), results="numbers")
BRIDGE_COMPARISONS = Table("bridge_comparisons.parquet", tuple(dec.COMPARISON_COLUMNS),
                           "one row per DHP item × perturbation × severity × order: which of the original and its "
                           "perturbed copy, shown together, the judge says is better",
                           partition=("dataset", "judge", "mode"), results="none")
AGREEMENT = Table("pairwise_agreement.csv", ("judge", "mode", "source", *dec.AGREEMENT_COLUMNS[2:]),
                  "one row per judge × mode × subset × strategy: LLMBar's agreement statistics, position "
                  "consistency, missing verdicts, ties and cost")
PAIRWISE_D = Table("pairwise_discernment.csv", tuple(dec.PAIRWISE_D_COLUMNS),
                   "one row per dataset × judge × mode × perturbation: the items' outcomes when the original and "
                   "its perturbed copy are shown together, and the sign test's p and D")
BRIDGE = Table("dna_bridge.csv", tuple(dec.BRIDGE_COLUMNS),
               "one row per dataset × judge × mode × perturbation × kind: D from direct pointwise scores, from DnA "
               "(weighted metric scores) and from pairwise comparison")


def _empty(table: Table) -> pd.DataFrame:
    return pd.DataFrame(columns=list(table.columns))


def compare_with_perturbed(perturbed: pd.DataFrame, items: pd.DataFrame, judge: Backend, mode: str = "logprobs",
                           cache=None, seed: int = 0, progress: bool | str = False) -> pd.DataFrame:
    """Show each ok perturbed variant next to its original, in both orders, and ask which is better (the pairwise
    protocol, dhp.judging.pairwise.compare_pairs, candidate 1 = the original; the candidates are called what the
    task's texts are: summary, translation, ...). Returns dhp.analysis.decomposition.COMPARISON_COLUMNS."""
    ok = perturbed[perturbed["status"] == "ok"]
    original = ok[ok["perturbation"] == "original"].set_index("item_id")["text"]
    source = items.set_index(items["item_id"].astype(str))["source"]
    variants = ok[ok["perturbation"] != "original"].reset_index(drop=True)
    if variants.empty:
        return _empty(BRIDGE_COMPARISONS)
    pairs = pd.DataFrame({"pair_id": variants.index, "source": variants["item_id"].astype(str).map(source),
                          "candidate_1": variants["item_id"].map(original), "candidate_2": variants["text"],
                          "gold": "1",  # the original is the better text (what a control reads)
                          "unit": [PROMPT_UNITS.get(str(t), ("text", ""))[0] for t in variants["task"]]})
    v = compare_pairs(pairs, judge, mode=mode, cache=cache, seed=seed, progress=progress)
    meta = variants.loc[v["pair_id"], ["dataset", "item_id", "perturbation", "severity", "level"]].reset_index(drop=True)
    winner = v["verdict"].map({"1": "original", "2": "perturbed", "tie": "tie"}).astype(object)
    return meta.assign(judge=v["judge"].values, mode=v["mode"].values, order=v["order"].map({"12": "op", "21": "po"}).values,
                       winner=winner.where(v["verdict"].notna(), None).values, p_1=v["p_1"].values,
                       failure=v["failure"].values)[dec.COMPARISON_COLUMNS]


@register
class DecomposeAggregate(Method):
    name = "decompose_aggregate"
    title = "Decompose and aggregate (LLMBar pairwise judging)"
    paper = ("Li et al., DnA-Eval (decompose and aggregate), §3-4; Zeng et al. 2023, LLMBar (arXiv:2310.07641); "
             "bridge: DHP §4.3")
    notebooks = ("08_decompose_aggregate",)
    modes = ("logprobs", "sample", "metric")  # metric: a control (dhp.controls) or a baseline (the higher score wins)
    metric_no_model = "a language model answers its prompts in mode logprobs or sample"
    headline = "agreement"
    power = ("agreement", "n_pairs", "pairs per subset")

    # LLMBar's Natural and Adversarial_Neighbor pairs (100 and 134); no bridge: a control has no per-metric DnA weight
    control_params = {"pairs_path": None, "subsets": ["Natural", "Adversarial_Neighbor"], "n_pairs": 50, "dhp_items": 0}
    Params = DecomposeAggregateParams
    collects = (VERDICTS, COSTS, BRIDGE_SCORES, BRIDGE_COMPARISONS)
    produces = (AGREEMENT, PAIRWISE_D, BRIDGE)
    extra_stages = (
        Stage("pairs", (), (), (), "the pairs to judge (LLMBar's subsets, or your file): shown, not written",
              lambda m, c, t, j: {"pairs": m.load_pairs(c)}),
        Stage("verdicts", (), ("judge",), (VERDICTS.name, COSTS.name),
              "every strategy on every pair in both orders: the verdicts and the strategies' costs",
              lambda m, c, t, j: m.collect_verdicts(c, m.load_pairs(c), j)),
        Stage("bridge", (), ("judge",), (BRIDGE_SCORES.name, BRIDGE_COMPARISONS.name),
              "the DHP bridge: perturbed copies scored pointwise and compared with their originals (none with "
              "dhp_items 0)", lambda m, c, t, j: m.collect_bridge(c, j)),
    )

    # python -m dhp evaluate: LLMBar agreement on the pairs the recorded judges were measured on (both orders)
    profiles = {
        "quick": {"subsets": ["Adversarial_Neighbor"], "n_pairs": 6, "strategies": ["llmbar:Vanilla"], "dhp_items": 0},
        "standard": {"subsets": ["Natural", "Adversarial"], "n_pairs": 20, "strategies": ["llmbar:Vanilla"],
                     "dhp_items": 0},
        "paper": {"subsets": ["Natural", "Adversarial"], "n_pairs": None, "strategies": ["llmbar:Vanilla"],
                  "dhp_items": 0},
    }

    def protocol_params(self, profile: str, protocols: list[str], data_dir=None) -> dict | None:
        """Any registered pairwise strategy (``llmbar:<Strategy>``, the project's, yours): LLMBar's pairs of the profile
        judged with those strategies (every other protocol is not this method's)."""
        mine = [p for p in protocols if p in STRATEGIES]
        if not mine:
            return None
        return {**(self.profile_params(profile, data_dir) or self.profiles["quick"]), "strategies": mine}

    def evaluate_plan(self, config: DecomposeAggregateParams, backend=None) -> Plan:
        """LLMBar: the exact requests of LLMBar's evaluator, each under the cache key the run gives it (one per
        strategy, pair and step, as evaluate.py asks them; with llmbar_share_requests identical requests once), priced
        through the cache: the calls a run makes, except Swap's second round (counted for every pair, asked where
        the orders disagree; each explanation priced at the first round's max_tokens) and too-long retries."""
        plan, pairs = Plan(), self.load_pairs(config)
        jobs, swaps = [], []
        for s in (x for x in config.strategies if x.startswith("llmbar:")):
            protocol = llmbar_protocol(s.split(":", 1)[1], config.data_dir,
                                       share_requests=config.llmbar_share_requests)
            # the auxiliary steps' requests (Metrics, Reference), the verdicts' and Swap's second round (at most)
            jobs += llmbar_plan_jobs(pairs, protocol)
            swaps += [protocol.strategy] if protocol.strategy in LLMBAR_SWAP else []
            # every protocol of the step, not only the last
            plan.note = "; ".join(x for x in (plan.note, f"protocol {protocol.identity}") if x)
        if jobs:
            scopes = None if config.llmbar_share_requests else [sc for sc, _ in jobs]
            plan.estimates.append(calls.chat(backend or config.judge, [r for _, r in jobs], config.cache, dry_run=True,
                                             progress=False, scopes=scopes))
            bound = max(llmbar_retry_bound(r.max_tokens) for _, r in jobs)
            plan.note = "; ".join(x for x in (plan.note, (
                f"Swap's second round ({', '.join(swaps)}) counted for every pair: asked only where the two orders "
                "disagree, with each first-round explanation at most the first round's max_tokens" if swaps else ""),
                f"a request refused as too long is asked again at 80 % max_tokens: at most {bound} calls each"
                + (f"; {LLMBAR_SHARED}" if config.llmbar_share_requests else "")) if x)
        for scope, g in pairs.groupby(pairs["subset"].astype(str).str.startswith("Adversarial")):
            plan.units.append(f"LLMBar {'Adversarial (4 subsets)' if scope else 'Natural'}: {len(g)} pairs "
                              f"x 2 orders ({', '.join(sorted(set(g['subset'].astype(str))))})")
        return plan

    # ------------------------------------------------------------------ collect
    def load_pairs(self, config: DecomposeAggregateParams) -> pd.DataFrame:
        """The pairs to judge: n_pairs per LLMBar subset, or of your own file (one subset, "mine")."""
        if config.pairs_path is not None:
            return load_pairwise(config.pairs_path, n_items=config.n_pairs, seed=config.seed)
        return load_llmbar(config.subsets, n_items=config.n_pairs, seed=config.seed, data_dir=config.data_dir)

    def collect_verdicts(self, config: DecomposeAggregateParams, pairs: pd.DataFrame,
                         judge: "str | Backend | None" = None) -> dict[str, pd.DataFrame]:
        """Every strategy on every pair in both orders: the verdicts and the strategies' costs."""
        backend = self._live(config, judge)  # a control answers from the pairs' labels (run_strategies): no call
        verdicts, costs = run_strategies(pairs, config.strategies, judge=backend, mode=config.mode,
                                         cache=config.cache, seed=config.seed, progress=config.progress,
                                         data_dir=config.data_dir, share_requests=config.llmbar_share_requests)
        who = {"judge": backend.identity, "mode": config.mode}
        # source: '' for the project's own wordings; an llmbar: strategy's template identity (its protocol)
        source = verdicts["strategy"].map(dict(zip(costs["strategy"], costs["protocol"]))).fillna("")
        return {VERDICTS.name: verdicts.assign(**who, source=source)[list(VERDICTS.columns)],
                COSTS.name: costs.assign(**who)[list(COSTS.columns)]}

    def bridge_inputs(self, config: DecomposeAggregateParams) -> tuple[pd.DataFrame, pd.DataFrame] | None:
        """The bridge's items and their rule-based perturbed copies (no model call), or None with dhp_items 0.
        Unknown perturbations and missing expert weights fail here, before any judge call."""
        if config.dhp_items == 0:
            return None
        if config.dhp_dataset in DATASET_TASK:
            methods_for(config.dhp_dataset, config.dhp_perturbations)
        items = load_items(config.dhp_dataset, config.dhp_items, config.seed, config.data_dir, config.dhp_path)
        ew = load_expert_weights(config.expert_weights)
        for task in sorted(set(items["task"].astype(str))):
            planned = [m.perturbation for m in methods_for(str(items["dataset"].iloc[0]), config.dhp_perturbations, task)]
            check_weights_cover(ew, task, planned, metrics_for(task))
        return items, perturb(items, seed=config.seed, perturbations=config.dhp_perturbations)

    def collect_bridge(self, config: DecomposeAggregateParams, judge: "str | Backend | None" = None,
                       inputs: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> StageResult:
        """The bridge's judge calls: the pointwise metric scores of every ok variant (with the run statistics of
        their calls, for judge_stats.json), and every perturbed copy compared with its original in both orders.
        Empty with dhp_items 0."""
        backend = self._live(config, judge)
        if is_control_backend(backend) or is_metric_backend(backend):
            # a control or a baseline scores each text once (metric "text"), which the bridge's DnA aggregation over
            # the task's metrics has no weight for; its pairwise verdicts are what it stands for here
            return StageResult({})
        inputs = inputs if inputs is not None else self.bridge_inputs(config)
        if inputs is None:
            return StageResult({})
        items, perturbed = inputs
        scores, judge_stats = score_perturbed(perturbed, items, judge=backend, mode=config.mode,
                                              n_samples=config.n_samples, seed=config.seed, cache=config.cache,
                                              n_ctx=config.n_ctx, progress=config.progress,
                                              max_consecutive_failures=config.max_consecutive_failures)
        comparisons = compare_with_perturbed(perturbed, items, backend, mode=config.mode, cache=config.cache,
                                             seed=config.seed, progress=config.progress)
        return StageResult({BRIDGE_SCORES.name: scores, BRIDGE_COMPARISONS.name: comparisons},
                           stats={BRIDGE_SCORES.name: judge_stats})

    def collect(self, config: DecomposeAggregateParams, judge: "str | Backend | None" = None) -> StageResult:
        backend = self._live(config, judge)  # a bad judge spec or an exposed key fails before any work
        pairs = self.load_pairs(config)
        inputs = self.bridge_inputs(config)  # a missing dataset or weight fails before the first call is paid
        verdicts = self.collect_verdicts(config, pairs, backend)
        bridge = self.collect_bridge(config, backend, inputs)
        return StageResult({**verdicts, **bridge}, stats=bridge.stats)

    def _live(self, config: DecomposeAggregateParams, judge) -> Backend:
        self.check_mode(config)
        backend = self.backend(config, judge)
        if backend is None:
            raise DHPError("Judge 'recorded' calls no model, so it collects nothing.",
                           "analyze recorded verdicts with dhp.methods.run (python -m dhp run --method "
                           "decompose_aggregate --judge recorded), or name a live judge.")
        return backend

    def inputs(self, config: DecomposeAggregateParams) -> list[Path]:
        files = [config.pairs_path] if config.pairs_path else []
        if is_own_file(config.dhp_dataset) and config.dhp_items:
            files.append(config.dhp_dataset)
        return [Path(f) for f in files]

    # ------------------------------------------------------------------ analyze (pure)
    def dna_weights(self, config: DecomposeAggregateParams, scores: pd.DataFrame, ew: pd.DataFrame) -> pd.DataFrame:
        """The DnA aggregation weights (task, metric, weight) the bridge uses."""
        return dec.task_weights(ew) if config.dna_weights == "expert" else dec.equal_weights(scores)

    def analyze(self, tables: dict[str, pd.DataFrame], config: DecomposeAggregateParams) -> dict[str, pd.DataFrame]:
        """Agreement of every judge's verdicts (live and recorded), and the bridge's three D for every judge whose
        bridge tables are in the run folder; a table without input is empty (no row is ever a made-up 0)."""
        verdicts = tables.get(VERDICTS.name)
        agreement = (dec.agreement_table(verdicts, tables.get(COSTS.name)).reindex(columns=list(AGREEMENT.columns))
                     if verdicts is not None and len(verdicts) else _empty(AGREEMENT))
        scores, comparisons = tables.get(BRIDGE_SCORES.name), tables.get(BRIDGE_COMPARISONS.name)
        direct = dna = None
        if scores is not None and len(scores):
            ew = load_expert_weights(config.expert_weights)  # a package resource or the user's file: read here
            direct = stats.discernment(scores, expert_weights=ew, seed=config.seed).table
            dna = stats.discernment(dec.dna_scores(scores, self.dna_weights(config, scores, ew)), expert_weights=ew,
                                    seed=config.seed).table
        pairwise = (dec.pairwise_discernment(comparisons) if comparisons is not None and len(comparisons)
                    else _empty(PAIRWISE_D))
        return {AGREEMENT.name: agreement, PAIRWISE_D.name: pairwise, BRIDGE.name: dec.bridge_table(direct, dna, pairwise)}

    def card(self, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
        agreement = tables.get(AGREEMENT.name)
        return agreement_rows(agreement) if agreement is not None and len(agreement) else pd.DataFrame()

    def figures(self, tables: dict[str, pd.DataFrame], config: DecomposeAggregateParams) -> dict:
        agreement = tables.get(AGREEMENT.name)
        return {"dna_agreement": plot_agreement(agreement)} if agreement is not None and len(agreement) else {}

    def views(self, tables: dict[str, pd.DataFrame]) -> list:
        """LLMBar agreement per scope (Natural; the four adversarial subsets pooled; each other set) × strategy:
        one unit per item, its correctness averaged over the two orders."""
        verdicts = tables.get(VERDICTS.name)
        if verdicts is None or verdicts.empty:
            return []
        units = dec.correctness_units(verdicts)
        # one view per scope × strategy (dec.view_strategy: a live judge only on the recorded judges' protocol);
        # each judge's own protocol too, so a recorded judge run on its own config is labelled so
        return [View("llmbar_agreement", scope, "agreement", "mean", g.drop(columns=["scope", "strategy", "protocol"]),
                     strategy=strategy, notes={"protocol": " | ".join(sorted(set(g["protocol"]))), "protocols": {
                         (j, m): p for (j, m), p in g.groupby(["judge", "mode"])["protocol"].first().items()}})
                for (scope, strategy), g in units.groupby(["scope", "strategy"], sort=True)]
