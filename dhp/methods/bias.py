"""Judge biases: position, length and planted cues (Zheng et al. 2023, "Judging LLM-as-a-Judge"; alpaca_eval's
length control; CALM, Ye et al. 2024), measured for every judge that gives pairwise verdicts — live, recorded
(LLMBar's result.json files, both orders: ``python -m dhp import-judgments llmbar``) or a baseline — with intervals,
and on the leaderboard with paired tests, Holm's adjustment and clusters.

- Position: share of verdicts for the output shown first, flip rate under swap, LLMBar's positional agreement;
- Length (observed): P(prefers the longer | gold longer) vs P(prefers the longer | gold shorter), the length bias
  index (their sum − 1) and the length coefficient of a logistic verdict ~ gold + order + log length ratio;
  pointwise: the partial correlation of a judge's score with the output's length given the human score (HANNA's
  recorded judges, with HANNA's own "Text length" metric as the length; where human_alignment ran in the same run
  folder, its judges on SummEval's summaries and on WMT22's translations, with the recorded WMT22 metrics on the same
  outputs);
- Planted cues (live): the gold-worse output rewritten by a cue perturbation (dhp.perturb.cues: verbosity,
  authority, bandwagon, and a no-cue control), both orders; robustness and flips toward the cued output;
- Repeatability (live, ``repeats`` ≥ 2): Fleiss' κ of the verdicts of the same requests run with other seeds.

Baselines (mode "baseline") stand on the views: "always the first", "always the longer", "never moved by a cue".
Analysis: dhp.analysis.bias (pure).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from dhp.analysis import alignment as al
from dhp.analysis import bias as ba
from dhp.analysis.leaderboard import RECORDED_MODE, View
from dhp.analysis.decomposition import view_strategy
from dhp.analysis.recorded_views import HANNA_EXCLUDED_SYSTEM, HANNA_HEADLINE_METRICS
from dhp.analysis.report_card import CARD_COLUMNS, card_row
from dhp.backends import Backend, get_backend
from dhp.backends.baseline import is_metric_backend
from dhp.backends.control import is_control_backend
from dhp.config import RunParams
from dhp.datasets.llmbar import SUBSETS, load_llmbar, load_processed
from dhp.errors import DHPError
from dhp import calls
from dhp.judging.pointwise import score_prompts
from dhp.judging.strategies import STRATEGIES, llmbar_plan_jobs, llmbar_protocol, metric_requests, run_strategies
from dhp.methods import Method, Plan, StageResult, Table, register
from dhp.plots.bias import plot_bias
from dhp.perturb.cues import CUES
from dhp.perturb.catalog import get as get_perturbation

VERDICT_KEEP = ("item_id", "subset", "strategy", "order", "verdict", "label", "failure")


class BiasParams(RunParams):
    """Parameters of a bias run (python -m dhp run --method bias)."""

    # defaults: a lesson's few calls (notebook 13); the evaluate profiles run Natural + Adversarial, 20 or all pairs
    subsets: list[str] = Field(["Adversarial_Neighbor"], min_length=1,
                               description=f"LLMBar subsets the live judge is run on ({', '.join(SUBSETS)}; "
                                           "'Adversarial' = the four adversarial ones)")
    n_pairs: int | None = Field(2, ge=1, description="pairs per subset, a seeded sample (None: every pair: 100 "
                                                     "Natural, 319 Adversarial)")
    strategies: list[str] = Field(["llmbar:Vanilla"], min_length=1,
                                  description="registered pairwise strategies the live judge runs, each in both "
                                              "orders (python -m dhp extensions)")
    cues: list[str] = Field(["verbosity", "control"],
                            description=f"planted cues on the gold-worse output ({', '.join(CUES)}; [] for none)")
    repeats: int = Field(0, ge=0, description="repeatability: runs of the plain pairs with seeds seed+1.. (0 or 1: "
                                              "none; k >= 2: Fleiss' kappa of the k runs)")
    n_boot: int = Field(1000, ge=10, description="bootstrap resamples over pairs (or outputs) for the intervals")

    @field_validator("subsets")
    @classmethod
    def _known_subsets(cls, v):
        bad = [s for s in v if s not in SUBSETS and s != "Adversarial"]
        if bad:
            raise ValueError(f"unknown LLMBar subset(s) {bad}; use some of {[*SUBSETS, 'Adversarial']}")
        return v

    @field_validator("strategies")
    @classmethod
    def _known_strategies(cls, v):
        bad = [s for s in v if s not in STRATEGIES]
        if bad:
            raise ValueError(f"unknown strategy(ies) {bad}; use some of {list(STRATEGIES)}")
        return v

    @field_validator("repeats")
    @classmethod
    def _repeats_are_new_requests(cls, v, info):
        # LLMBar's requests carry no seed (evaluate.py sends none) and run at temperature 0: a repeat is the same
        # request, answered by the cache — a kappa of 1 that measures nothing
        fixed = [s for s in info.data.get("strategies", []) if s.startswith("llmbar:")]
        if v > 1 and fixed:
            raise ValueError(f"with {fixed} LLMBar's requests carry no seed, so every repeat is the same request, "
                             "answered once by the cache; measure repeatability with a strategy whose requests "
                             "carry the seed (e.g. --strategies dhp_vanilla), or set repeats 0")
        return v

    @field_validator("cues")
    @classmethod
    def _known_cues(cls, v):
        bad = [c for c in v if c not in CUES]
        if bad:
            raise ValueError(f"unknown cue(s) {bad}; use some of {list(CUES)}")
        return v


PAIRS = Table("bias_pairs.parquet", ("subset", "item_id", "label", "words_1", "words_2", "longer"),
              "one row per LLMBar pair (all 419, and the 466 of the re-processed FairEval, LLMEval^2, MT-Bench): the "
              "gold label, each output's words and the longer one ('' when equal) — numbers, no text",
              partition=("subset",))
VERDICTS = Table("bias_verdicts.parquet", ("judge", "mode", *VERDICT_KEEP, "source", "cue", "cued_output", "repeat"),
                 "one row per live judge × pair × strategy × order × cue × repeat: the verdict ('1', '2', 'tie' or "
                 "None with its reason in failure); cue 'none' = the plain pair, else the cue planted on output "
                 "cued_output (the gold-worse one); repeat 0 = the first run")
POSITION = Table("bias_position.csv", tuple(ba.POSITION_COLUMNS),
                 "one row per judge × mode × strategy × subset (and the pooled 419 LLMBar pairs): prefer-first share, "
                 "flip rate under swap, LLMBar's positional agreement, with intervals and n")
LENGTH = Table("bias_length.csv", tuple(ba.LENGTH_COLUMNS),
               "one row per judge × mode × strategy × subset: P(prefers longer | gold longer / shorter), the length "
               "bias index, the logistic length coefficient, with intervals and n")
CUE = Table("bias_cues.csv", tuple(ba.CUE_COLUMNS),
            "one row per live judge × strategy × cue × order: robustness and flips toward the cued output")
POINTWISE = Table("bias_pointwise.csv", tuple(ba.POINTWISE_COLUMNS),
                  "one row per dataset × judge × criterion: partial correlation of score with length given the human "
                  "score, with its bootstrap interval")
REPEAT = Table("bias_repeat.csv", tuple(ba.REPEAT_COLUMNS),
               "one row per live judge × strategy: Fleiss' kappa of repeated verdicts")

#: the HANNA judges on the pointwise length view: its LLM judges and the metrics upstream's notebook shows
HANNA_LENGTH = "Text length"


def hanna_length_rows(scores: pd.DataFrame, human: pd.DataFrame, judges=None) -> pd.DataFrame:
    """HANNA outputs (every system but "Human", as upstream's analysis) with a judge's score, HANNA's own "Text
    length" metric and the human criterion: dataset, judge, mode, criterion, unit, score, length, human. A judge with
    one score per output (criterion "") is paired with every criterion; ``judges``: which (None: every judge)."""

    s = scores[(scores["dataset"] == "hanna") & (scores["system"] != HANNA_EXCLUDED_SYSTEM)]
    length = s[s["judge"] == HANNA_LENGTH].set_index(["system", "item"])["score"]
    if length.empty:
        return pd.DataFrame(columns=["dataset", "judge", "mode", "criterion", "unit", "score", "length", "human"])
    s = s[s["judge"] != HANNA_LENGTH]
    if judges is not None:
        s = s[s["judge"].isin(judges) | (s["mode"] != "recorded")]
    h = human[human["dataset"] == "hanna"][["system", "item", "criterion", "human"]]
    per = s[s["criterion"] != ""].merge(h, on=["system", "item", "criterion"])
    any_ = s[s["criterion"] == ""].drop(columns="criterion").merge(h, on=["system", "item"])
    out = pd.concat([per, any_], ignore_index=True)
    out["length"] = length.reindex(pd.MultiIndex.from_frame(out[["system", "item"]])).to_numpy()
    out["unit"] = out["system"].astype(str) + ":" + out["item"].astype(str)
    return out[["dataset", "judge", "mode", "criterion", "unit", "score", "length", "human"]]


POINTWISE_ROWS = ["dataset", "judge", "mode", "criterion", "unit", "score", "length", "human"]


def summeval_length_rows(targets: pd.DataFrame | None, lengths: pd.DataFrame | None) -> pd.DataFrame:
    """The SummEval summaries the judges scored (human_alignment's summary_targets: live judges, baselines,
    controls) with the summary's length in words (output_lengths) and the experts' mean rating of the aspect:
    POINTWISE_ROWS, one per judge × mode × aspect × summary (unit: document:system)."""
    if targets is None or lengths is None or not len(targets) or not len(lengths):
        return pd.DataFrame(columns=POINTWISE_ROWS)
    ln = lengths[lengths["dataset"] == "summeval"].rename(columns={"item": "doc_id", "words": "length"})
    t = targets.astype({"doc_id": str, "system": str}).merge(ln[["doc_id", "system", "length"]],
                                                               on=["doc_id", "system"])
    return pd.DataFrame({"dataset": "summeval", "judge": t["judge"], "mode": t["mode"], "criterion": t["aspect"],
                         "unit": t["doc_id"] + ":" + t["system"], "score": t["judge_score"].astype(float),
                         "length": t["length"].astype(float), "human": t["human"].astype(float)})[POINTWISE_ROWS]


def wmt_length_rows(scores: pd.DataFrame | None, human: pd.DataFrame | None,
                    lengths: pd.DataFrame | None) -> pd.DataFrame:
    """The WMT22 translations a judge of the run scored (mode not "recorded": live judges, GEMBA run live,
    baselines, controls), and every recorded judge (WMT22's metrics, GEMBA's recorded scores) on the same outputs —
    the segment view's main variants (dhp.analysis.alignment.segment_rows) — with the translation's length in words
    and its MQM score: POINTWISE_ROWS (dataset "wmt22 <lp>", criterion "MQM", unit system:segment). Recorded judges
    alone give no rows: their 30,000 outputs per metric are the human_alignment method's segment view."""
    if scores is None or human is None or lengths is None or not len(scores) or not len(human):
        return pd.DataFrame(columns=POINTWISE_ROWS)
    rows = al.segment_rows(scores, human)
    live = rows[rows["mode"] != RECORDED_MODE][["lp", "system", "seg_id"]].drop_duplicates()
    if live.empty:
        return pd.DataFrame(columns=POINTWISE_ROWS)
    rows = rows.merge(live, on=["lp", "system", "seg_id"])
    ln = lengths[lengths["dataset"] == "wmt22"]
    ln = pd.DataFrame({"lp": ln["lp"].astype(str), "system": ln["system"].astype(str),
                       "seg_id": ln["item"].astype("int64"), "length": ln["words"].astype(float)})
    r = rows.astype({"lp": str, "system": str, "seg_id": "int64"}).merge(ln, on=["lp", "system", "seg_id"])
    return pd.DataFrame({"dataset": "wmt22 " + r["lp"], "judge": r["judge"], "mode": r["mode"], "criterion": "MQM",
                         "unit": r["system"] + ":" + r["seg_id"].astype(str), "score": r["score"].astype(float),
                         "length": r["length"], "human": r["mqm"].astype(float)})[POINTWISE_ROWS]


@register
class Bias(Method):
    name = "bias"
    title = "Judge biases (position, length, planted cues, repeatability)"
    paper = ("Zheng et al. 2023 (position, verbosity); alpaca_eval length control; Ye et al. 2024, CALM (cues); "
             "LLMBar's positional agreement (Zeng et al. 2023)")
    notebooks = ("13_bias",)
    # metric: a control (dhp.controls; control:first, control:longer are biases of known size) or a baseline (the
    # output with the higher surface score wins)
    modes = ("logprobs", "sample", "metric")
    metric_no_model = "a language model answers its prompts in mode logprobs or sample"
    control_params = {"subsets": ["Natural", "Adversarial_Neighbor"], "n_pairs": 50}
    headline = ("flip_rate", "prefer_first")
    Params = BiasParams
    collects = (PAIRS, VERDICTS)
    produces = (POSITION, LENGTH, CUE, POINTWISE, REPEAT)
    # recorded judges: LLMBar's verdicts (decompose_aggregate's table) and HANNA's rated stories; the pointwise
    # length view also reads human_alignment's SummEval and WMT22 scores and the outputs' lengths, where it ran here
    uses = ("pairwise_verdicts.parquet", "item_scores.parquet", "item_human.parquet", "summary_targets.parquet",
            "segment_scores.parquet", "segment_human.parquet", "output_lengths.parquet")

    @property
    def judged(self) -> tuple[str, ...]:
        """Its own verdicts, and the other tables its views read judges from (recorded, or human_alignment's)."""
        return (VERDICTS.name, "pairwise_verdicts.parquet", "item_scores.parquet", "summary_targets.parquet",
                "segment_scores.parquet")

    profiles = {
        "standard": {"subsets": ["Natural", "Adversarial"], "n_pairs": 20, "strategies": ["llmbar:Vanilla"],
                     "cues": list(CUES)},
        "paper": {"subsets": ["Natural", "Adversarial"], "n_pairs": None, "strategies": ["llmbar:Vanilla"],
                  "cues": list(CUES)},
    }

    # ------------------------------------------------------------------ collect
    def load_pairs(self, config: BiasParams) -> pd.DataFrame:
        return load_llmbar(config.subsets, n_items=config.n_pairs, seed=config.seed, data_dir=config.data_dir)

    def collect_reference(self, config: BiasParams) -> dict[str, pd.DataFrame]:
        """The lengths of all 419 LLMBar pairs and of LLMBar's re-processed FairEval, LLMEval^2 and MT-Bench pairs
        (the recorded judges' units): no model call."""
        pairs = pd.concat([load_llmbar(list(ba.LLMBAR_SUBSETS), data_dir=config.data_dir),
                           load_processed(data_dir=config.data_dir)], ignore_index=True)
        return {PAIRS.name: ba.pair_lengths(pairs)}

    @staticmethod
    def cued_pairs(pairs: pd.DataFrame, cue: str) -> pd.DataFrame:
        """``pairs`` with the gold-worse output rewritten by the cue's perturbation; cued_output names it."""
        p = get_perturbation(CUES[cue])
        out = pairs.copy()
        worse = np.where(out["label"].astype(str) == "1", "2", "1")
        for i, w in enumerate(worse):
            col = f"output_{w}"
            out.iat[i, out.columns.get_loc(col)] = p.apply(str(out[col].iloc[i]), None)[0]
        return out.assign(cued_output=worse)

    def collect(self, config: BiasParams, judge=None) -> StageResult:
        self.check_mode(config)
        backend = self.backend(config, judge)
        if not isinstance(backend, Backend):
            raise DHPError("Judge 'recorded' calls no model, so the bias method collects nothing for it.",
                           "import LLMBar's verdicts (python -m dhp import-judgments llmbar) and run with "
                           "--judge recorded, or name a live judge.")
        runs = self._runs(config)
        parts = []
        for cue, p, repeat in runs:
            v, costs = run_strategies(p, config.strategies, judge=backend, mode=config.mode, cache=config.cache,
                                      seed=config.seed + repeat, progress=config.progress, data_dir=config.data_dir)
            source = v["strategy"].map(dict(zip(costs["strategy"], costs["protocol"]))).fillna("")
            cued = v["item_id"].map(dict(zip(p["item_id"], p["cued_output"])))
            parts.append(v[list(VERDICT_KEEP)].assign(judge=backend.identity, mode=config.mode, source=source,
                                                      cue=cue, cued_output=cued, repeat=repeat))
        verdicts = pd.concat(parts, ignore_index=True)[list(VERDICTS.columns)]
        return StageResult({VERDICTS.name: verdicts, **self.collect_reference(config)})

    def _runs(self, config: BiasParams) -> list[tuple[str, pd.DataFrame, int]]:
        """(cue, pairs, repeat) of every run of the judge: the plain pairs, each cue's, the repeats'."""
        pairs = self.load_pairs(config)
        pairs = pairs[pairs["label"].isin(["1", "2"])].reset_index(drop=True)  # a cue needs a gold-worse output
        runs = [("none", pairs.assign(cued_output=""), 0)]
        runs += [(c, self.cued_pairs(pairs, c), 0) for c in config.cues]
        runs += [("none", pairs.assign(cued_output=""), r) for r in range(1, config.repeats if config.repeats > 1 else 0)]
        return runs

    def estimate(self, config: BiasParams, judge=None) -> dict:
        """``dhp run --method bias --dry-run``: the exact requests of the ``llmbar:`` strategies (plain pairs, every
        cue's rewritten pairs), under the cache keys the run gives them, priced through the cache — so the plain
        pairs that decompose_aggregate asked on the same cache count as cached. Other strategies: not estimated. A
        control makes no call; a baseline scores each output once (whatever the strategies), priced through the
        cache."""
        backend = judge if isinstance(judge, Backend) else get_backend(judge or config.judge)
        if is_control_backend(backend):
            return {"collect": calls.Estimate(backend.identity, 0, 0, 0, 0, 0.0)}
        if is_metric_backend(backend):
            texts = pd.concat([metric_requests(p) for _cue, p, repeat in self._runs(config) if repeat == 0],
                              ignore_index=True)
            return {"collect": score_prompts(texts, judge=backend, mode="metric", cache=config.cache, dry_run=True,
                                             progress=False)}
        jobs = []
        for s in (x for x in config.strategies if x.startswith("llmbar:")):
            protocol = llmbar_protocol(s.split(":", 1)[1], config.data_dir)
            for _cue, p, repeat in self._runs(config):
                if repeat == 0:  # (repeats of an llmbar: request are the same request: refused by BiasParams)
                    jobs += llmbar_plan_jobs(p, protocol)
        if not jobs:
            return {"collect": None}
        return {"collect": calls.chat(judge or config.judge, [r for _, r in jobs], config.cache, dry_run=True,
                                      progress=False, scopes=[sc for sc, _ in jobs])}

    def evaluate_plan(self, config: BiasParams, backend=None) -> Plan:
        runs = self._runs(config)
        n = len(runs[0][1])
        others = [s for s in config.strategies if not s.startswith("llmbar:")]
        est = self.estimate(config, backend)["collect"]
        note = ("calls: one per pair, order, strategy and cue; the plain pairs are the requests decompose_aggregate "
                "asks of the same pairs with the same strategy (one cache: asked once)")
        if others:
            note += f"; not priced: {', '.join(others)} (about {n * 2 * len(others) * len(runs)} calls)"
        return Plan([f"LLMBar: {n} pairs x 2 orders x {len(config.strategies)} strategies, plain and with "
                     f"{len(config.cues)} planted cues, beside LLMBar's recorded judges (all strategies, 419 pairs)"],
                    estimates=[est] if est is not None else [],
                    calls=None if est is not None else n * 2 * len(config.strategies) * len(runs), note=note)

    # ------------------------------------------------------------------ analyze (pure)
    @staticmethod
    def _verdicts(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
        """Every judge's plain verdicts: the recorded/other (pairwise_verdicts) and this method's live ones."""
        parts = []
        other = tables.get("pairwise_verdicts.parquet")
        if other is not None and len(other):
            parts.append(other)
        mine = tables.get(VERDICTS.name)
        if mine is not None and len(mine):
            parts.append(mine[(mine["cue"] == "none") & (mine["repeat"] == 0)])
        if not parts:
            return pd.DataFrame(columns=["judge", "mode", *VERDICT_KEEP, "source"])
        cols = ["judge", "mode", *VERDICT_KEEP, "source"]
        allv = pd.concat([p.reindex(columns=cols) for p in parts], ignore_index=True)
        return allv.drop_duplicates(["judge", "mode", "strategy", "subset", "item_id", "order"], keep="last")

    def analyze(self, tables: dict[str, pd.DataFrame], config: BiasParams) -> dict[str, pd.DataFrame]:
        verdicts = self._verdicts(tables)
        lengths = tables.get(PAIRS.name)  # (the baselines stand on the views, not in these tables: see views)
        position = ba.position_table(verdicts, config.n_boot, config.seed) if len(verdicts) else None
        length = (ba.length_table(verdicts, lengths, config.n_boot, config.seed)
                  if len(verdicts) and lengths is not None and len(lengths) else None)
        mine = tables.get(VERDICTS.name)
        cues = repeat = None
        if mine is not None and len(mine):
            first = mine[mine["repeat"] == 0]
            cues = ba.cue_table(first, config.n_boot, config.seed) if (first["cue"] != "none").any() else None
            plain = mine[mine["cue"] == "none"]
            if plain["repeat"].nunique() >= 2:
                repeat = ba.repeatability_table(plain, config.n_boot, config.seed)
        parts = []
        scores, human = tables.get("item_scores.parquet"), tables.get("item_human.parquet")
        if scores is not None and human is not None:
            parts.append(hanna_length_rows(scores, human, self._hanna_judges(scores)))
        lengths_out = tables.get("output_lengths.parquet")
        parts.append(summeval_length_rows(tables.get("summary_targets.parquet"), lengths_out))
        parts.append(wmt_length_rows(tables.get("segment_scores.parquet"), tables.get("segment_human.parquet"),
                                     lengths_out))
        parts = [p[POINTWISE_ROWS] for p in parts if len(p)]
        rows = pd.concat(parts, ignore_index=True) if parts else None
        pointwise = ba.pointwise_length_table(rows, config.n_boot, config.seed) if rows is not None else None
        empty = lambda t: pd.DataFrame(columns=list(t.columns))  # noqa: E731 - no input: no row, never a 0
        return {POSITION.name: position if position is not None else empty(POSITION),
                LENGTH.name: length if length is not None else empty(LENGTH),
                CUE.name: cues if cues is not None else empty(CUE),
                POINTWISE.name: pointwise if pointwise is not None else empty(POINTWISE),
                REPEAT.name: repeat if repeat is not None else empty(REPEAT)}

    @staticmethod
    def _hanna_judges(scores: pd.DataFrame) -> list[str]:
        """HANNA's LLM judges (a score per criterion) and the metrics upstream's notebook shows."""
        llm = scores.loc[scores["criterion"] != "", "judge"].astype(str).unique().tolist()
        return sorted(set(llm) | set(HANNA_HEADLINE_METRICS))

    # ------------------------------------------------------------------ figures
    def figures(self, tables: dict[str, pd.DataFrame], config: BiasParams) -> dict:
        """Per leaderboard strategy of a live judge (and LLMBar's Vanilla, where recorded judges ran it) on the pooled
        LLMBar pairs: prefer-first, flip rate and length bias per judge with intervals, the baselines beside them
        (dhp.plots.bias)."""

        pos, ln, lengths = tables.get(POSITION.name), tables.get(LENGTH.name), _llmbar_pairs(tables.get(PAIRS.name))
        if pos is None or pos.empty:
            return {}
        pooled = pos[(pos["subset"] == ba.LLMBAR_SCOPE)]
        # the strategies of the live judges, and LLMBar's Vanilla (the recorded judges' headline): not all 15
        live = pooled[pooled["mode"] != "recorded"]
        names = sorted({view_strategy(s, p) for s, p in zip(live["strategy"].astype(str),
                                                              live["protocol"].fillna("").astype(str))}
                       | ({"Vanilla"} & set(pooled["strategy"].astype(str))))
        out = {}
        for name in names:
            p, q = pos, ln
            if lengths is not None and len(lengths):  # the baselines on the same pairs, as on the views
                b = ba.baseline_verdicts(lengths, name)
                p = pd.concat([pos, ba.position_table(b, config.n_boot, config.seed)], ignore_index=True)
                if ln is not None:
                    q = pd.concat([ln, ba.length_table(b, lengths, config.n_boot, config.seed)], ignore_index=True)
            out[f"bias_{re.sub(r'[^A-Za-z0-9_-]+', '_', name)}"] = plot_bias(p, q, name)
        return out

    # ------------------------------------------------------------------ card
    def card(self, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
        """Per judge × strategy on the pooled LLMBar pairs: flip rate, prefer-first share, length bias index; per
        cue: robustness (both orders). Judges the run ran only: the recorded LLMBar judges (imported beside them)
        are on the bias tables, the leaderboard's views and the method page, not a report card each."""
        rows = []
        tables = {k: (t[t["mode"] != "recorded"] if t is not None and "mode" in t.columns else t)
                  for k, t in tables.items()}
        pos = tables.get(POSITION.name)
        if pos is not None and len(pos):
            for r in pos[pos["subset"] == ba.LLMBAR_SCOPE].to_dict("records"):
                for m in ("flip_rate", "prefer_first"):
                    rows.append(card_row(r["judge"], r["mode"], self.name, m, f"LLMBar/{r['strategy']}", r[m],
                                         r[f"{m}_lo"], r[f"{m}_hi"], r["n_both"],
                                         nan_status=r["status"] if r["status"] != "ok" else "no usable scores"))
        ln = tables.get(LENGTH.name)
        if ln is not None and len(ln):
            for r in ln[ln["subset"] == ba.LLMBAR_SCOPE].to_dict("records"):
                rows.append(card_row(r["judge"], r["mode"], self.name, "length_bias", f"LLMBar/{r['strategy']}",
                                     r["length_bias"], r["length_bias_lo"], r["length_bias_hi"],
                                     r["n_gold_longer"] + r["n_gold_shorter"],
                                     nan_status=r["status"] if r["status"] != "ok" else "no usable scores"))
        cue = tables.get(CUE.name)
        if cue is not None and len(cue):
            for r in cue[cue["order"] == "both"].to_dict("records"):
                rows.append(card_row(r["judge"], r["mode"], self.name, "cue_robustness", f"{r['cue']}/{r['strategy']}",
                                     r["robustness"], r["robustness_lo"], r["robustness_hi"], r["n"],
                                     nan_status=r["status"] if r["status"] != "ok" else "no usable scores"))
        return pd.DataFrame(rows, columns=CARD_COLUMNS)

    # ------------------------------------------------------------------ leaderboard views
    def views(self, tables: dict[str, pd.DataFrame]) -> list:
        """Per strategy, on the pooled 419 LLMBar pairs (units: pairs; a live judge on its own pairs): position
        consistency (1 − flip rate; exact McNemar), position balance (1 − |2·prefer-first − 1|; paired bootstrap),
        length neutrality (1 − |length bias index|; paired bootstrap); per cue, robustness (units: pair × order;
        McNemar). Every measure higher-is-better; the baselines stand in every view."""
        verdicts = self._verdicts(tables)
        if verdicts.empty:
            return []
        lengths = _llmbar_pairs(tables.get(PAIRS.name))  # the views' units: LLMBar's own 419 pairs
        u = ba.pair_units(verdicts)
        u = u[u["subset"].isin(ba.LLMBAR_SUBSETS) & ba.both_orders(u)]
        out = []
        for strategy, g in u.groupby("view_strategy", sort=True):
            base = (ba.pair_units(ba.baseline_verdicts(lengths, strategy))
                    if lengths is not None and len(lengths) else g.iloc[:0])
            base = base[ba.both_orders(base)]
            gg = pd.concat([g, base], ignore_index=True)
            unit = gg["subset"].astype(str) + ":" + gg["item_id"].astype(str)
            protocols = {(j, m): p for (j, m), p in g.groupby(["judge", "mode"])["protocol"].first().items()}
            notes = {"protocols": protocols, "units": "pairs"}
            # "always the longer" is a length baseline: it has no verdict on pairs of equal length, and on the
            # position views it would take those pairs from every judge (a view compares on the units all share)
            on_pos = (gg["judge"] != "baseline:always_longer").to_numpy()
            consistent = gg.assign(unit=unit, value=(gg["v12"] == gg["v21"]).astype(float))[on_pos]
            out.append(View("bias_position", ba.LLMBAR_SCOPE, "position_consistency", "mean",
                            consistent[["judge", "mode", "unit", "value"]], strategy=strategy, notes=notes))
            first = gg.assign(unit=unit, value=ba.first_values(gg))[on_pos]
            out.append(View("bias_position", ba.LLMBAR_SCOPE, "position_balance", "statistic",
                            first[["judge", "mode", "unit", "value"]], strategy=strategy,
                            statistic=_balance, draws=_balance_draws, notes=notes))
            if lengths is not None and len(lengths):
                lu = gg.merge(lengths[["subset", "item_id", "longer"]], on=["subset", "item_id"])
                lu = lu[lu["longer"] != ""]
                lu = lu.assign(unit=lu["subset"].astype(str) + ":" + lu["item_id"].astype(str),
                               value=((lu["v12"] == lu["longer"]).astype(float)
                                      + (lu["v21"] == lu["longer"]).astype(float)) / 2,
                               gold_longer=(lu["label"].astype(str) == lu["longer"]))
                out.append(View("bias_length", ba.LLMBAR_SCOPE, "length_neutrality", "statistic",
                                lu[["judge", "mode", "unit", "value", "gold_longer"]], strategy=strategy,
                                statistic=_neutrality, draws=_neutrality_draws, notes=notes))
        mine = tables.get(VERDICTS.name)
        if mine is not None and len(mine) and (mine["cue"] != "none").any():
            first = mine[mine["repeat"] == 0]
            plain = first[first["cue"] == "none"].set_index(["judge", "mode", "strategy", "item_id", "order"])["verdict"]
            for (strategy, cue), g in first[first["cue"] != "none"].groupby(["strategy", "cue"], sort=True):
                base = plain.reindex(pd.MultiIndex.from_frame(g[["judge", "mode", "strategy", "item_id",
                                                                 "order"]])).to_numpy()
                ok = g["verdict"].notna().to_numpy() & pd.notna(base)
                g = g.assign(unit=g["item_id"].astype(str) + ":" + g["order"].astype(str),
                             value=np.where(ok, (g["verdict"].to_numpy() == base).astype(float), np.nan))
                never = g[["unit"]].drop_duplicates().assign(judge="baseline:never_moved", mode=ba.BASELINE_MODE,
                                                             value=1.0)
                data = pd.concat([g[["judge", "mode", "unit", "value"]], never], ignore_index=True)
                out.append(View("bias_cue", f"planted cue: {cue}", "cue_robustness", "mean", data,
                                strategy=strategy, notes={"units": "pair x order"}))
        return out


def _llmbar_pairs(lengths: pd.DataFrame | None) -> pd.DataFrame | None:
    """The lengths of LLMBar's own pairs (the pooled scope's), without the re-processed sets': the baselines stand on
    the pooled views' units only."""
    return None if lengths is None else lengths[lengths["subset"].isin(ba.LLMBAR_SUBSETS)]


def _balance(rows: pd.DataFrame) -> float:
    """1 − |2·(share of verdicts for the first-shown output) − 1|: 1 = no position preference."""
    return 1 - abs(2 * float(rows["value"].mean()) - 1) if len(rows) else math.nan


def _weights(rows: pd.DataFrame, units: list, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r = rows.drop_duplicates("unit").set_index("unit").reindex(units)
    k, n = idx.shape
    w = np.zeros((k, len(units)))
    np.add.at(w, (np.repeat(np.arange(k), n), idx.ravel()), 1.0)
    return r, w


def _balance_draws(rows: pd.DataFrame, units: list, idx: np.ndarray) -> np.ndarray:
    r, w = _weights(rows, units, idx)
    return 1 - np.abs(2 * (w @ r["value"].to_numpy(float)) / w.sum(axis=1) - 1)


def _neutrality(rows: pd.DataFrame) -> float:
    """1 − |P(longer | gold longer) + P(longer | gold shorter) − 1|: 1 = length moves no verdict."""
    return 1 - abs(ba.length_bias_of(rows["value"].to_numpy(float), rows["gold_longer"].to_numpy(bool)))


def _neutrality_draws(rows: pd.DataFrame, units: list, idx: np.ndarray) -> np.ndarray:
    r, w = _weights(rows, units, idx)
    return 1 - np.abs(ba.length_bias_of(r["value"].to_numpy(float), r["gold_longer"].to_numpy(bool), w))
