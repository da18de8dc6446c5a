"""Dual-perspective meta-evaluation (Hu et al. 2025): does the judge agree with humans where they agree (global view:
linear weighted κ on SummEval targets all three experts rated alike, §3.1) and does it see one more error (local
view: adjacent pairwise accuracy along error chains built from references, §3.2)? The local view is also asked side
by side: each adjacent pair shown together in both orders (the paper's Table 10 question).

Notebook 09 runs its stages one by one (with the human_alignment method, the traditional view).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import Field, field_validator

from dhp.analysis import dual_perspective as dp
from dhp.analysis.leaderboard import View
from dhp.analysis.report_card import dual_rows
from dhp.backends import Backend
from dhp.config import RunParams
from dhp.datasets import CUSTOM_SUFFIXES, DATASETS, DatasetName, is_own_file, load_items
from dhp.datasets import summeval_annotators as sa
from dhp.errors import DHPError
from dhp.io import slug
from dhp.backends.control import is_control_backend
from dhp.judging import Judged, build_prompt, score_prompts
from dhp.judging.pairwise import compare_pairs
from dhp.methods import Method, Stage, StageResult, Table, register
from dhp.perturb.chains import CHAIN_EDITS, error_chain
from dhp.plots.dual_perspective import plot_dual_perspective

#: What each aspect means in the side-by-side question (the pairwise template names the aspect and its definition).
ASPECT_DEFINITIONS = {
    "coherence": "the summary is well organised: sentences follow each other in a sensible order and build a whole.",
    "consistency": "every fact in the summary is supported by the article; nothing is invented or contradicted.",
    "fluency": "each sentence is well written: correct spelling, grammar and word choice.",
    "relevance": "the summary keeps the article's important information and leaves out what is not.",
}
SUMMEVAL_ASPECTS = tuple(CHAIN_EDITS)
TASK = "summarization"


class DualPerspectiveParams(RunParams):
    """Parameters of a dual-perspective run (python -m dhp run --method dual_perspective; notebook 09)."""

    aspects: list[str] = Field(["coherence"], min_length=1,
                               description=f"SummEval aspects to evaluate ({', '.join(SUMMEVAL_ASPECTS)})")
    n_targets: int = Field(6, ge=1, description="global view: agreed-upon targets judged per aspect (a seeded "
                                                "sample; SummEval has 154-955 per aspect)")
    rating_rule: Literal["mode", "expected"] | None = Field(
        None, description="global view: how replies become a 1-5 rating — 'mode' of the sampled ratings (the "
                          "paper's; sample mode), 'expected' score rounded half up; None: mode when sampled, else "
                          "expected")
    n_samples: int = Field(10, ge=1, description="global view in sample mode: ratings sampled per target (the "
                                                 "paper's 10)")
    temperature: float = Field(1.0, ge=0, description="global view in sample mode: sampling temperature (the "
                                                       "paper's 1.0)")
    chain_dataset: DatasetName = Field("summeval", description="local view: the dataset whose references the error "
                                                             "chains start from — a name or the path of your own "
                                                             ".csv/.jsonl file")
    n_sources: int = Field(2, ge=1, description="local view: references turned into error chains")
    chain_length: int = Field(2, ge=1, description="local view: errors added along each chain (chain_length + 1 "
                                                   "targets; a text that cannot take another error ends early)")
    compare: bool = Field(True, description="local view: also show each adjacent pair side by side, in both orders")

    @field_validator("aspects")
    @classmethod
    def _known_aspects(cls, v: list[str]) -> list[str]:
        bad = [a for a in v if a not in SUMMEVAL_ASPECTS]
        if bad:
            raise ValueError(f"unknown aspect(s) {bad}; use some of {list(SUMMEVAL_ASPECTS)}")
        return v



GLOBAL = Table("global_targets.parquet", ("judge", "mode", "target_id", "aspect", "human_rating", "judge_score",
                                          "judge_rating", "rating_rule", "failure"),
               "one row per judge × agreed-upon SummEval target × aspect: the experts' common rating, the judge's "
               "score and the rating it maps to", results="numbers")
CHAINS = Table("chain_scores.parquet", ("judge", "mode", "source_id", "aspect", "step", "score", "failure"),
               "one row per judge × reference × aspect × chain step (step = errors injected): the judge's score",
               results="numbers")
COMPARISONS = Table("chain_comparisons.parquet", ("judge", "mode", "source_id", "aspect", "step", "order",
                                                  "preferred", "failure"),
                    "one row per judge × adjacent chain pair × order ('12': step j first): which target the judge "
                    "prefers ('better' = fewer errors, 'worse', 'tie', None with its reason)", results="numbers")


@register
class DualPerspective(Method):
    name = "dual_perspective"
    title = "Dual perspective (global κ, local accuracy)"
    paper = "Hu et al. 2025, §3.1-3.2, Table 1"
    notebooks = ("09_dual_perspective",)
    modes = ("logprobs", "sample", "metric")  # metric: a baseline or a control (dhp.controls)
    headline = "kappa"
    power = ("correlation", "n_targets", "targets per aspect")

    metric_controls_only = "a baseline cannot compare two texts"
    control_params = {"chain_dataset": "summeval", "n_targets": 50, "n_sources": 10}
    Params = DualPerspectiveParams
    collects = (GLOBAL, CHAINS, COMPARISONS)
    # python -m dhp evaluate (its own tables): two aspects, chains of three errors — the defaults are one aspect and
    # two errors, so that `dhp run` and lesson 09 take minutes on 2 cores
    profiles = {"standard": {"aspects": ["coherence", "fluency"], "chain_length": 3},
                "paper": {"aspects": ["coherence", "fluency"], "chain_length": 3}}
    produces = (
        Table("global_kappa.csv", ("judge", "mode", "aspect", "rating_rule", "kappa", "n"),
              "one row per judge × aspect × rating rule: linear weighted κ and the targets it rests on"),
        Table("local_accuracy.csv", ("judge", "mode", "aspect", "accuracy", "n_pairs"),
              "one row per judge × aspect: the share of adjacent chain pairs scored in the right order"),
        Table("local_pair_matrix.csv", ("judge", "mode", "aspect", "errors_i", "errors_j", "accuracy", "n"),
              "one row per judge × aspect × pair of error counts i < j: the share scored in the right order"),
        Table("local_comparison.csv", ("judge", "mode", "aspect", "accuracy", "position_consistency", "parsed",
                                       "n_pairs"),
              "one row per judge × aspect: adjacent pairs shown side by side — right in both orders, same verdict "
              "in both orders, replies with a verdict"),
        Table("table1.csv", ("judge", "mode", "aspect", "kappa", "accuracy", *dp.TABLE1_CORRELATIONS),
              "the paper's Table 1 per judge × aspect: κ, Acc and the traditional correlations by level, with the "
              "judges' ranks per column"),
    )
    uses = ("alignment.csv",)
    extra_stages = (
        Stage("global", (), ("judge",), (GLOBAL.name,), "the global view: agreed-upon targets judged and rated",
              lambda m, c, t, j: m.collect_global(c, j)),
        Stage("local", (), ("judge",), (CHAINS.name, COMPARISONS.name),
              "the local view: error chains judged step by step (and adjacent pairs side by side)",
              lambda m, c, t, j: m.collect_local(c, j)),
        Stage("references", (), (), (), "the reference texts every error chain starts from (to look at; no model "
              "call, nothing written)", lambda m, c, t, j: {"references": m.references(c)}),
    )

    # ------------------------------------------------------------------ collect
    def _score(self, rows: list[dict], backend: Backend, config: DualPerspectiveParams, n_samples: int = 1,
               temperature: float = 0.0) -> Judged:
        # a baseline (mode "metric") scores the text itself: source and candidate ride along; a control reads "gold"
        keep = ("source", "candidate") if config.mode == "metric" or is_control_backend(backend) else ()
        prompts = pd.DataFrame([{**{k: v for k, v in r.items() if k not in ("source", "candidate") or k in keep},
                                 "metric": r["aspect"],
                                 "prompt": build_prompt(TASK, r["aspect"], {"source": r["source"]}, r["candidate"])}
                                for r in rows])
        sample = config.mode == "sample"
        scored, stats = score_prompts(prompts, judge=backend, mode=config.mode, seed=config.seed, cache=config.cache,
                                      progress=config.progress, n_samples=n_samples if sample else 1,
                                      temperature=temperature if sample else 0.0,
                                      max_consecutive_failures=config.max_consecutive_failures)
        return Judged(scored.assign(judge=backend.identity, mode=config.mode), stats)

    def collect_global(self, config: DualPerspectiveParams, judge=None, targets: pd.DataFrame | None = None,
                       ratings: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
        """The global view: ``n_targets`` agreed-upon targets per aspect (seeded), judged and mapped to a rating.
        ``targets`` / ``ratings``: SummEval's rated summaries and per-annotator ratings (None: loaded from the
        data; dhp.datasets.summeval_annotators has their columns)."""
        rule = dp.default_rating_rule(config.mode) if config.rating_rule is None else config.rating_rule
        if rule == "mode" and config.mode != "sample":
            raise DHPError(f"rating_rule='mode' takes the most frequent of sampled ratings, but mode={config.mode!r} "
                           "gives one reply per target.", "use mode='sample' (the paper's ten samples at temperature "
                                                          "1) or rating_rule='expected'.")
        backend = self.backend(config, judge)
        ratings = sa.load_ratings(config.data_dir) if ratings is None else ratings
        targets = sa.load_targets(config.data_dir) if targets is None else targets
        agreed, by_id = sa.agreed_targets(ratings), targets.set_index("target_id")
        rows = []
        for aspect in config.aspects:
            pool = agreed[agreed["aspect"] == aspect]
            pick = pool.sample(n=min(config.n_targets, len(pool)), random_state=config.seed) if len(pool) else pool
            rows += [{"target_id": t.target_id, "aspect": aspect, "human_rating": int(t.human_rating),
                      "gold": (int(t.human_rating) - 1) / 4,
                      "source": by_id.at[t.target_id, "source"], "candidate": by_id.at[t.target_id, "candidate"]}
                     for t in pick.itertuples()]
        # the global view reports no run statistics: judge_stats.json holds the local view's (as it always has)
        scored = self._score(rows, backend, config, config.n_samples, config.temperature).table
        # score_prompts' rating is the sampled mode (ties to the lower) in sample mode
        rating = scored["rating"].astype(float) if rule == "mode" else pd.Series(dp.to_rating(scored["score"]))
        table = pd.DataFrame({"judge": scored["judge"], "mode": scored["mode"], "target_id": scored["target_id"],
                              "aspect": scored["aspect"], "human_rating": scored["human_rating"],
                              "judge_score": scored["score"], "judge_rating": rating.to_numpy(), "rating_rule": rule,
                              "failure": scored["failure"]})
        return {GLOBAL.name: table}

    def references(self, config: DualPerspectiveParams) -> pd.DataFrame:
        items = load_items(config.chain_dataset, config.n_sources, config.seed, config.data_dir)
        return items.rename(columns={"item_id": "source_id"})[["source_id", "source", "reference"]]

    def collect_local(self, config: DualPerspectiveParams, judge=None) -> StageResult:
        """The local view: every reference's error chain per aspect, each step judged on that aspect, and (with
        ``compare``) every adjacent pair shown side by side in both orders."""
        backend = self.backend(config, judge)
        refs = self.references(config)
        chains = {(r.source_id, a): error_chain(r.reference, a, config.chain_length, config.seed)
                  for r in refs.itertuples() for a in config.aspects}
        sources = dict(zip(refs["source_id"], refs["source"]))
        # gold: each step adds an error, so a later step is worse (what a control reads)
        rows = [{"source_id": s, "aspect": a, "step": step, "source": sources[s], "candidate": text,
                 "gold": 1 - step / max(1, len(chain) - 1)}
                for (s, a), chain in chains.items() for step, text in enumerate(chain)]
        scored, stats = self._score(rows, backend, config)
        out = {CHAINS.name: scored[list(CHAINS.columns)].reset_index(drop=True)}
        if config.compare and (backend.chats() or is_control_backend(backend)):  # a baseline compares no pair
            out[COMPARISONS.name] = self._compare(chains, sources, backend, config)
        return StageResult(out, stats={CHAINS.name: stats})

    def _compare(self, chains: dict, sources: dict, backend: Backend, config: DualPerspectiveParams) -> pd.DataFrame:
        pairs = pd.DataFrame([{"pair_id": f"{s}|{a}|{step}", "source": sources[s], "candidate_1": chain[step],
                               "candidate_2": chain[step + 1], "aspect_title": a.capitalize(),
                               "aspect_definition": ASPECT_DEFINITIONS[a], "gold": "1"}
                              for (s, a), chain in chains.items() for step in range(len(chain) - 1)],
                             columns=["pair_id", "source", "candidate_1", "candidate_2", "aspect_title",
                                      "aspect_definition", "gold"])
        if pairs.empty:
            return pd.DataFrame(columns=list(COMPARISONS.columns))
        v = compare_pairs(pairs, backend, mode="sample", cache=config.cache, seed=config.seed,
                          template=("pairwise", "summarization_compare"), progress=config.progress)
        parts = v["pair_id"].str.split("|", expand=True)
        preferred = v["verdict"].map({"1": "better", "2": "worse", "tie": "tie"}).astype(object)
        return pd.DataFrame({"judge": backend.identity, "mode": config.mode, "source_id": parts[0],
                             "aspect": parts[1], "step": parts[2].astype(int), "order": v["order"],
                             "preferred": preferred.where(v["verdict"].notna(), None),
                             "failure": v["failure"].fillna("")})

    def collect(self, config: DualPerspectiveParams, judge=None) -> StageResult:
        backend = self.backend(config, judge)
        global_view = self.collect_global(config, backend)
        local = self.collect_local(config, backend)
        return StageResult({**global_view, **local}, stats=local.stats)

    # ------------------------------------------------------------------ analyze (pure), card, figures
    def analyze(self, tables: dict[str, pd.DataFrame], config: DualPerspectiveParams) -> dict[str, pd.DataFrame]:
        return dp.dual_tables(tables.get(GLOBAL.name), tables.get(CHAINS.name), tables.get(COMPARISONS.name),
                              tables.get("alignment.csv"))

    def card(self, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
        kappa = tables.get("global_kappa.csv")
        if kappa is not None and "rating_rule" in kappa.columns:  # the card shows each judge's own rule's kappa
            kappa = kappa[kappa["rating_rule"] == kappa["mode"].map(dp.default_rating_rule)]
        return dual_rows(kappa, tables.get("local_accuracy.csv"))

    def figures(self, tables: dict[str, pd.DataFrame], config: DualPerspectiveParams) -> dict:
        targets, matrix = tables.get(GLOBAL.name), tables.get("local_pair_matrix.csv")
        if targets is None or matrix is None:
            return {}
        return {f"dual_perspective_{slug(j)}": plot_dual_perspective(targets, matrix, j)
                for j in sorted(set(targets["judge"]) & set(matrix["judge"]))}

    def views(self, tables: dict[str, pd.DataFrame]) -> list:
        """Global κ per aspect (units: agreed targets; each judge's own rating rule) and local adjacent accuracy
        per aspect (units: chain pairs; 1 when the pair is ordered right)."""
        out = []
        targets = tables.get(GLOBAL.name)
        if targets is not None and len(targets):
            t = targets[targets["rating_rule"] == targets["mode"].map(dp.default_rating_rule)]
            for aspect, g in t.groupby("aspect", sort=True):
                out.append(View("global_kappa", f"SummEval {aspect}", "kappa", "statistic",
                                g.assign(unit=g["target_id"]), statistic=_kappa))
        steps = tables.get(CHAINS.name)
        if steps is not None and len(steps):
            pairs = dp.local_pairs(steps)
            ok = pairs["score_step"].notna() & pairs["score_next"].notna()
            units = pairs.assign(unit=pairs["source_id"].astype(str) + ":" + pairs["step"].astype(str),
                                 value=(pairs["score_step"] > pairs["score_next"]).astype(float).where(ok))
            for aspect, g in units.groupby("aspect", sort=True):
                out.append(View("local_accuracy", f"SummEval {aspect}", "local_accuracy", "mean",
                                g[["judge", "mode", "unit", "value"]]))
        return out


def _kappa(rows: pd.DataFrame) -> float:
    """Linear weighted κ of one judge's targets (NaN below two rated targets or without variation)."""
    return dp.linear_kappa(rows["human_rating"].to_numpy(), rows["judge_rating"].to_numpy())[0] if len(rows) else \
        float("nan")
