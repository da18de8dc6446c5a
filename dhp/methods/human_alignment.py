"""Human alignment, the traditional view: how well do a judge's scores correlate with human ratings? SummEval system
summaries against the experts' mean rating at summary, system and dataset level (G-Eval's layout; dataset level is
the level of Hu et al. 2025's Table 1), and WMT22 zh-en segments against MQM and DA at segment level — Kendall τ_b,
pairwise accuracy with exact ties and with calibrated ties (acc*_eq, Deutsch et al. 2023, the headline, as WMT since
2023). Judges recorded elsewhere (the WMT22 metrics: ``python -m dhp import-judgments mtme``) sit in the same segment
table and are analysed with ``--judge recorded``.

Notebook 09 runs its stages (with the dual_perspective method).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from dhp.analysis import alignment as al
from dhp.analysis.bias import word_count
from dhp.analysis.leaderboard import RECORDED_MODE, View
from dhp.analysis.system_level import system_accuracy_view
from dhp.analysis.report_card import alignment_rows
from dhp.backends import Backend, get_backend
from dhp.cache import Cache
from dhp.config import RunParams
from dhp.datasets import summeval_annotators as sa
from dhp.datasets import wmt22_human as wh
from dhp.errors import DHPError
from dhp.judging import Judged, build_prompt, score_prompts
from dhp.judging.prompts import likelihood_prefix
from dhp import calls
from dhp.judging.gemba import (GEMBA_REPLY_TOKENS, _resolve_limit, gemba_call_bounds, gemba_messages, gemba_protocol,
                               gemba_request, gemba_score)
from dhp.methods import Method, Plan, StageResult, Table, register
from dhp.methods.dual_perspective import SUMMEVAL_ASPECTS
from dhp.recorded import SEGMENT_COLUMNS
from dhp.recorded.gemba import PROTOCOLS as GEMBA_RECORDED

#: ``evaluate --protocol gemba:<name>``: MQM-scored segments judged per profile (quick: the fewest a paired test
#: resamples, dhp.stats.resample; paper: every one, GEMBA's own units)
GEMBA_SEGMENTS = {"quick": 6, "standard": 50, "paper": 100_000}

LP = "zh-en"


class HumanAlignmentParams(RunParams):
    """Parameters of a human-alignment run (python -m dhp run --method human_alignment; notebook 09)."""

    aspects: list[str] = Field(["coherence"], min_length=1,
                               description=f"SummEval aspects to evaluate ({', '.join(SUMMEVAL_ASPECTS)})")
    n_docs: int = Field(2, ge=0, description="SummEval documents whose 12 rated system summaries are judged per "
                                             "aspect (0: none)")
    n_segments: int = Field(3, ge=0, description="WMT22 zh-en segments judged for every system of mt_systems (0: "
                                                 "none)")
    mt_systems: list[str] = Field(["Online-A", "HuaweiTSC", "JDExploreAcademy", "Online-W"], min_length=1,
                                  description="WMT22 zh-en systems whose outputs the judge scores")
    main_reference: str = Field("refA", description="the segment view's main reference (mt-metrics-eval's primary "
                                                    "setting): metric variants using it or the source are compared, "
                                                    "on every MQM-scored system but it")
    n_boot: int = Field(200, ge=0, description="bootstrap resamples over documents / segments (0: no intervals)")
    segment_protocol: str = Field("", description="how WMT22 segments are judged: '' (the project's translation "
                                                  "prompt) or a GEMBA protocol, gemba:DA ... gemba:classes_ref "
                                                  "(dhp.judging.gemba: GEMBA's own prompt, read from the data root, "
                                                  "beside GEMBA's recorded judges)")

    gemba_max_tokens: int | None = Field(None, ge=1, description="with a GEMBA protocol: the max_tokens sent (default "
                                                               "none, as GEMBA a7a7eff8; a backend that needs one gets "
                                                               "20); a cut-off reply asks again with 200 more, up to "
                                                               "500 (GEMBA 3dd2c49's rule), named on the protocol")

    @field_validator("aspects")
    @classmethod
    def _known_aspects(cls, v: list[str]) -> list[str]:
        bad = [a for a in v if a not in SUMMEVAL_ASPECTS]
        if bad:
            raise ValueError(f"unknown aspect(s) {bad}; use some of {list(SUMMEVAL_ASPECTS)}")
        return v


TARGETS = Table("summary_targets.parquet", ("judge", "mode", "doc_id", "system", "aspect", "human", "judge_score",
                                            "failure"),
                "one row per judge × SummEval document × system × aspect: the experts' mean rating and the judge's "
                "score", results="numbers")
SEGMENTS = Table("segment_scores.parquet", tuple(SEGMENT_COLUMNS),
                 "one row per judge × language pair × reference variant × system × segment: the judge's (or the "
                 "recorded metric's) score; reference 'src' for a judge that reads the source", results="numbers")
HUMAN = Table("segment_human.parquet", ("lp", "system", "seg_id", "mqm", "da_z"),
              "one row per language pair × system × segment: the MQM score (higher is better) and the crowd DA "
              "z-score (NaN where not rated)", partition=("lp",), results="none")


LENGTHS = Table("output_lengths.parquet", ("dataset", "lp", "system", "item", "words"),
                "one row per rated output: its length in words — SummEval's rated summaries (item: the document) and "
                "WMT22 zh-en's translations (item: the segment) — numbers, no text; the bias method's pointwise "
                "length view reads it", partition=("dataset",), results="none")


def output_lengths(targets: pd.DataFrame, mqm: pd.DataFrame) -> pd.DataFrame:
    """LENGTHS of SummEval's summaries (``targets``: doc_id, system, candidate) and WMT22 zh-en's translations
    (``mqm``: system, seg_id, target)."""
    summ = pd.DataFrame({"dataset": "summeval", "lp": "", "system": targets["system"].astype(str),
                         "item": targets["doc_id"].astype(str), "words": targets["candidate"].map(word_count)})
    wmt = pd.DataFrame({"dataset": "wmt22", "lp": LP, "system": mqm["system"].astype(str),
                        "item": mqm["seg_id"].astype(str), "words": mqm["target"].map(word_count)})
    out = pd.concat([summ, wmt], ignore_index=True).drop_duplicates(["dataset", "lp", "system", "item"])
    return out.astype({"words": "int64"}).sort_values(["dataset", "system", "item"]).reset_index(drop=True)


def _protocols(*tables: pd.DataFrame) -> dict[tuple[str, str], str]:
    """{(judge, mode): protocol} of the segment rows that name one (a live GEMBA run's rows, GEMBA's recorded rows);
    recorded GEMBA rows imported before they carried one get theirs from dhp.recorded.gemba.PROTOCOLS."""
    by_label = {f"{j}-{r}": p for (j, r), p in GEMBA_RECORDED.items()}
    out: dict[tuple[str, str], str] = {}
    for t in tables:
        if "protocol" in t.columns:
            named = t[t["protocol"].fillna("").astype(str) != ""]
            out.update(named.groupby(["judge", "mode"])["protocol"].first().astype(str).to_dict())
        for j, m in set(zip(t["judge"].astype(str).tolist(), t["mode"].astype(str).tolist())):
            if m == RECORDED_MODE and j in by_label:
                out.setdefault((j, m), by_label[j])
    return out


def _last_limit(limit: int) -> int:
    """The highest max_tokens GEMBA's cut-off rule asks, starting at ``limit``."""
    while limit + 200 <= 500:
        limit += 200
    return limit


#: The MQM score a control reads as the worst quality (0): MQM is 0 for a flawless segment, -25 for a
#: non-translation (dhp.controls reads gold = 1 + mqm / 25, clipped to [0, 1]).
MQM_FLOOR = 25.0


@register
class HumanAlignment(Method):
    name = "human_alignment"
    title = "Human alignment (correlations, segment-level acc*_eq)"
    paper = "G-Eval's layout; Hu et al. 2025 App. A.3; Deutsch et al. 2023 (WMT22 zh-en)"
    notebooks = ("09_dual_perspective",)
    # likelihood: the output's mean log-probability per token after the task and source (GPTScore's own use: how
    # a likelihood tracks human ratings); every view reads ranks or orders, so its scale (nats per token) needs none
    modes = ("logprobs", "sample", "likelihood", "metric")
    control_params = {"n_docs": 20, "n_segments": 50}
    headline = ("segment_acc_eq_calibrated", "summary_spearman")
    power = ("correlation", "n_docs", "documents")
    Params = HumanAlignmentParams
    collects = (TARGETS, SEGMENTS, HUMAN, LENGTHS)
    produces = (Table("alignment.csv", tuple(al.ALIGNMENT_COLUMNS),
                      "one row per judge × view × aspect × statistic: the correlation (or segment accuracy) with its "
                      "bootstrap interval and n; epsilon: acc*_eq's tie threshold"),)

    # python -m dhp evaluate: WMT22 zh-en segments vs MQM (beside the recorded metrics) and SummEval documents
    profiles = {
        # two aspects (the default is one, so that `dhp run` and lesson 09 take minutes on 2 cores)
        "standard": {"n_docs": 10, "n_segments": 50, "aspects": ["coherence", "fluency"]},
        # every MQM-rated zh-en segment of every MQM-rated system but the main reference: the recorded metrics' units
        "paper": {"n_docs": 100, "n_segments": 100_000, "mt_systems": None,
                  "aspects": ["coherence", "consistency", "fluency", "relevance"]},
    }

    def profile_params(self, profile: str, data_dir=None) -> dict | None:
        values = super().profile_params(profile, data_dir)
        if values is not None and "mt_systems" in values and values["mt_systems"] is None:  # every system, read here
            main = values.get("main_reference", self.Params.model_fields["main_reference"].default)
            values["mt_systems"] = sorted(set(wh.load_mqm_zh_en(data_dir)["system"].astype(str)) - {main})
        return values

    def protocol_params(self, profile: str, protocols: list[str], data_dir=None) -> dict | None:
        """``gemba:<name>``: the WMT22 zh-en segments judged with GEMBA's protocol, beside GEMBA's recorded judges (no
        SummEval documents) — quick: 6 segments (the fewest a paired test resamples) x every MQM-scored system;
        paper: every MQM-scored segment x system, GEMBA's own units. One GEMBA protocol a run: the judge's segment
        rows carry no protocol column."""
        mine = [p for p in protocols if p.startswith("gemba:")]
        if not mine:
            return None
        if len(mine) > 1:
            raise DHPError(f"Several GEMBA protocols in one run ({mine}).", "run each into its own --run-dir.")
        gemba_protocol(mine[0], data_dir)  # an unknown name stops here, with the known ones
        main = self.Params.model_fields["main_reference"].default
        return {"n_docs": 0, "n_segments": GEMBA_SEGMENTS[profile], "segment_protocol": mine[0], "mode": "sample",
                "mt_systems": sorted(set(wh.load_mqm_zh_en(data_dir)["system"].astype(str)) - {main})}

    def evaluate_plan(self, config: HumanAlignmentParams, backend=None) -> Plan:
        """The segments and documents the judge is put on; one call per judged output and aspect."""
        mqm = wh.load_mqm_zh_en(config.data_dir, systems=config.mt_systems)
        n_seg = min(config.n_segments, mqm["seg_id"].nunique())
        # the seeded sample collect_segments draws, so the count is the run's
        pick = pd.Series(sorted(mqm["seg_id"].unique())).sample(n=n_seg, random_state=config.seed)
        outputs = int(mqm["seg_id"].isin(pick).sum())
        targets = sa.load_targets(config.data_dir)
        n_docs = min(config.n_docs, targets["doc_id"].nunique())
        per_doc = int(targets.groupby("doc_id").size().max())
        names = ", ".join(config.mt_systems) if len(config.mt_systems) <= 6 else "every MQM-scored system"
        note = "calls: one per judged output and aspect, before the cache (tokens not estimated)"
        beside = "the WMT22 metrics' recorded scores"
        units = [f"WMT22 zh-en vs MQM: {n_seg} of {mqm['seg_id'].nunique()} MQM segments x "
                 f"{len(config.mt_systems)} systems ({names}): {outputs} outputs, beside {beside}",
                 f"SummEval summary correlation: {n_docs} documents x {per_doc} systems x {len(config.aspects)} "
                 "aspects"]
        if config.segment_protocol:
            units[0] += f" and GEMBA's recorded judges, protocol {config.segment_protocol}"
            est, note = self._gemba_plan(config, backend, mqm[mqm["seg_id"].isin(pick)])
            return Plan(units, estimates=[est], note=note)
        return Plan(units, calls=outputs + n_docs * per_doc * len(config.aspects), note=note)

    @staticmethod
    def _gemba_plan(config: HumanAlignmentParams, backend, rows: pd.DataFrame):
        """The calls a GEMBA run sends, counted as they will be sent: one request per distinct prompt at t=0 that
        the run's cache lacks (the expected count: every reply answers), at most (the retry rule) every temperature
        — times the raised limits where a limit is sent; tokens and the cost (a priced model) at both bounds. The
        cache is read only where it exists: a plan writes nothing."""
        judge = get_backend(backend or config.judge)
        proto = _resolve_limit(gemba_protocol(config.segment_protocol, config.data_dir), judge,
                               config.gemba_max_tokens)
        requests = [gemba_request(proto, gemba_messages(proto, r.source, r.target, r.reference), 0, proto.limit)
                    for r in rows.itertuples()]
        planned = [calls.plan_chat(judge, r) for r in requests]
        path = Path(config.cache)
        store = Cache(path) if path.is_file() else Cache(None)
        try:
            todo = calls.pending(planned, store)
            distinct = len(calls._unique(planned))
        finally:
            store.close()
        prompt = sum(judge.count_tokens(c.request.messages[-1][1]) + calls.TEMPLATE_MARGIN for c in todo)
        reply = proto.limit or GEMBA_REPLY_TOKENS
        low, high = gemba_call_bounds(proto)
        cost, cost_max = None, None
        if not judge.is_paid:
            cost = cost_max = 0.0
        else:
            price = calls.load_price_table().get(judge.model)
            if price is not None:
                cost = (prompt * float(price["input"]) + len(todo) * reply * float(price["output"])) / 1e6
                # a bound only where a max_tokens bounds each reply: without one (a7a7eff8) a reply's length is the
                # server's to decide, and no price is an upper bound
                cost_max = None if not proto.limit else high * (prompt * float(price["input"]) + len(
                    todo) * _last_limit(proto.limit) * float(price["output"])) / 1e6
        est = calls.Estimate(judge.identity, len(todo), distinct - len(todo), prompt, len(todo) * reply, cost,
                             len(todo) if proto.limit is None else 0)
        money = ("" if cost is None else f", cost ${cost:.4f} expected, " + (
            f"at most ${cost_max:.4f}" if cost_max is not None else
            f"no upper bound (no max_tokens is sent; ${cost:.4f} assumes {reply}-token replies)"))
        note = (f"GEMBA calls: {len(todo)} expected ({distinct} distinct prompts of {len(rows)} outputs, "
                f"{distinct - len(todo)} cached; every reply answering at t=0), at most {high * len(todo)} "
                f"({high} per prompt: a reply without a valid answer asks again at each temperature up to "
                f"{proto.temperature_limit / proto.temperature_divisor:g}"
                + ("" if proto.limit is None else ", a cut-off reply with 200 more tokens up to 500")
                + f"){money}; completion tokens assumed {reply} per reply"
                + (" (no max_tokens is sent)" if proto.limit is None else "") + f"; protocol {proto.identity}")
        return est, note

    def _score(self, rows: list[dict], backend: Backend, config: HumanAlignmentParams) -> Judged:
        # source, candidate and task ride along: a baseline judge (mode "metric") scores the text itself, a
        # likelihood judge the candidate after the task's prefix (the same for every aspect: one call per output)
        ask = (lambda r: likelihood_prefix(r["task"], r["item"])) if config.mode == "likelihood" else \
            (lambda r: build_prompt(r["task"], r["aspect"], r["item"], r["candidate"]))
        prompts = pd.DataFrame([{**{k: v for k, v in r.items() if k != "item"}, "source": r["item"]["source"],
                                 "metric": r["aspect"], "prompt": ask(r)} for r in rows])
        if prompts.empty:
            return Judged(prompts.assign(score=[], failure=[]), {})
        return score_prompts(prompts, judge=backend, mode=config.mode, seed=config.seed, cache=config.cache,
                             progress=config.progress, n_samples=5 if config.mode == "sample" else 1,
                             max_consecutive_failures=config.max_consecutive_failures)

    def collect_reference(self, config: HumanAlignmentParams) -> dict[str, pd.DataFrame]:
        """The human scores of the segment view (MQM and DA for WMT22 zh-en), and every rated output's length in
        words (SummEval's summaries, the translations): no model call."""
        texts = wh.load_mqm_zh_en(config.data_dir)
        mqm = texts[["seg_id", "system", "mqm"]]
        da = wh.load_da(LP, config.data_dir).groupby(["seg_id", "system"], as_index=False)["z"].mean()
        human = mqm.merge(da.rename(columns={"z": "da_z"}), on=["seg_id", "system"], how="left").assign(lp=LP)
        return {HUMAN.name: human[list(HUMAN.columns)].sort_values(["system", "seg_id"]).reset_index(drop=True),
                LENGTHS.name: output_lengths(sa.load_targets(config.data_dir), texts)}

    def collect_targets(self, config: HumanAlignmentParams, backend: Backend) -> Judged:
        """Every rated system summary of ``n_docs`` seeded SummEval documents per aspect, judged on that aspect."""
        targets, ratings = sa.load_targets(config.data_dir), sa.load_ratings(config.data_dir)
        docs = sorted(targets["doc_id"].unique())
        pick = pd.Series(docs).sample(n=min(config.n_docs, len(docs)), random_state=config.seed).tolist()
        human = ratings.groupby(["target_id", "aspect"])["rating"].mean()
        # gold: the human rating (1-5) as a quality in [0, 1], what a control judge reads (dhp.controls)
        rows = [{"doc_id": t.doc_id, "system": t.system, "aspect": aspect, "human": float(human[(t.target_id, aspect)]),
                 "gold": (float(human[(t.target_id, aspect)]) - 1) / 4,
                 "task": "summarization", "item": {"source": t.source}, "candidate": t.candidate}
                for aspect in config.aspects
                for t in targets[targets["doc_id"].isin(pick)].sort_values(["doc_id", "system"]).itertuples()]
        scored, stats = self._score(rows, backend, config)
        table = scored.rename(columns={"score": "judge_score"}).assign(judge=backend.identity, mode=config.mode)
        return Judged(table.reindex(columns=list(TARGETS.columns)), stats)

    def collect_segments(self, config: HumanAlignmentParams, backend: Backend) -> Judged:
        """``mt_systems``' outputs on ``n_segments`` seeded WMT22 zh-en segments, judged for translation accuracy."""
        mqm = wh.load_mqm_zh_en(config.data_dir, systems=config.mt_systems)
        segs = sorted(mqm["seg_id"].unique())
        pick = pd.Series(segs).sample(n=min(config.n_segments, len(segs)), random_state=config.seed).tolist()
        rows = [{"seg_id": r.seg_id, "system": r.system, "aspect": "accuracy", "task": "translation",
                 "item": {"source": r.source, "src_lang": "zh", "tgt_lang": "en"}, "candidate": r.target,
                 "reference": r.reference, "gold": min(1.0, max(0.0, 1 + float(r.mqm) / MQM_FLOOR))}
                for r in mqm[mqm["seg_id"].isin(pick)].sort_values(["seg_id", "system"]).itertuples()]
        if config.segment_protocol:
            return self._gemba_segments(rows, backend, config)
        scored, stats = self._score(rows, backend, config)
        table = scored.assign(judge=backend.identity, mode=config.mode, lp=LP, reference="src", source="")
        return Judged(table.reindex(columns=list(SEGMENTS.columns)), stats)

    @staticmethod
    def _gemba_segments(rows: list[dict], backend: Backend, config: HumanAlignmentParams) -> Judged:
        """The segments judged with a GEMBA protocol: reference "refA" for a _ref one (it reads reference A, GEMBA's
        main reference), else "src"."""
        proto = gemba_protocol(config.segment_protocol, config.data_dir)
        frame = pd.DataFrame([{"seg_id": r["seg_id"], "system": r["system"], "source": r["item"]["source"],
                               "target": r["candidate"], "reference": r["reference"]} for r in rows])
        if frame.empty:
            return Judged(pd.DataFrame(columns=list(SEGMENTS.columns)), {})
        scored = gemba_score(frame, backend, proto, cache=config.cache, progress=config.progress,
                             max_tokens=config.gemba_max_tokens,
                             max_consecutive_failures=config.max_consecutive_failures)
        # mode "sample" whatever the run's: GEMBA's score is read from a sampled reply's text (protocol_params sets
        # it for evaluate); the protocol column names the decoding followed and the reference variant
        table = scored.drop(columns=["source"]).assign(judge=backend.identity, mode="sample", lp=LP,
                                                       reference="refA" if proto.use_ref else "src", source="")
        return Judged(table.reindex(columns=[*SEGMENTS.columns, "protocol"]), {})

    def collect(self, config: HumanAlignmentParams, judge=None) -> StageResult:
        backend = self.backend(config, judge)
        targets, segments = self.collect_targets(config, backend), self.collect_segments(config, backend)
        return StageResult({TARGETS.name: targets.table, SEGMENTS.name: segments.table,
                            **self.collect_reference(config)},
                           stats={TARGETS.name: targets.stats, SEGMENTS.name: segments.stats})

    def analyze(self, tables: dict[str, pd.DataFrame], config: HumanAlignmentParams) -> dict[str, pd.DataFrame]:
        return {"alignment.csv": al.alignment_tables(tables.get(TARGETS.name), tables.get(SEGMENTS.name),
                                                     tables.get(HUMAN.name), n_boot=config.n_boot, seed=config.seed,
                                                     main_reference=config.main_reference)}

    def card(self, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
        return alignment_rows(tables["alignment.csv"]) if "alignment.csv" in tables else pd.DataFrame()

    @staticmethod
    def _segment_views(scores: pd.DataFrame, human: pd.DataFrame) -> list:
        """Per language pair: the segment views (main reference and source variants; one more per other reference
        variant, e.g. refB), recorded judges that left outputs unscored (GEMBA's None) in a view of their own, and
        the system-level pairwise accuracy of every judge of the main view."""
        out = []
        cols = ["judge", "mode", "unit", "system", "score", "human"]
        rows = al.segment_rows(scores, human)
        others = al.other_reference_rows(scores, human)
        protocols = _protocols(rows, *others.values())
        for lp, g in rows.groupby("lp", sort=True):
            data = g.rename(columns={"seg_id": "unit", "mqm": "human"})[cols]
            scope = f"WMT22 {lp} vs MQM"
            # a recorded judge with unscored outputs would shrink every judge's comparison to the outputs it
            # scored (mt-metrics-eval has no rule for a metric's None at the segment level): its own view
            gaps = data[(data["mode"] == RECORDED_MODE) & ~np.isfinite(data["score"].astype(float))]["judge"]
            partial = data["judge"].isin(set(gaps))
            parts = [(scope, data[~partial], "variants: main reference refA and source-only; systems: all but refA")]
            if partial.any():
                parts.append((f"{scope}, unscored outputs", data[partial],
                              "recorded judges with unscored outputs (None in their file), compared on the outputs "
                              "all of them scored"))
            for ref, r in others.items():
                part = r[r["lp"] == lp].rename(columns={"seg_id": "unit", "mqm": "human"})[cols]
                if len(part):
                    parts.append((f"{scope}, reference {ref}", part,
                                  f"variants: reference {ref}; systems: all but {ref}"))
            for name, d, variants in parts:
                # the view's judges once (not per protocol: a set of every row's pair per entry took minutes on the
                # 4 M rows of GEMBA + WMT22's metrics)
                present = set(d[["judge", "mode"]].drop_duplicates().itertuples(index=False, name=None))
                mine = {k: v for k, v in protocols.items() if k in present}
                out += [View("segment", name, measure, "segment", d.reset_index(drop=True),
                             notes={"variants": variants, "protocols": mine})
                        for measure in ("acc_eq_calibrated", "tau_b")]
            sysview = system_accuracy_view(data, f"WMT22 {lp} vs MQM", protocols)  # the same protocol per judge
            if sysview is not None:
                out.append(sysview)
        return out

    def views(self, tables: dict[str, pd.DataFrame]) -> list:
        """The segment view per language pair (acc*_eq and τ_b against MQM; units: segments, every scored system of
        a segment) and the summary-level Spearman ρ per SummEval aspect: the mean over documents of each document's
        ρ across its systems, so a "mean" view of per-document ρ (units: documents where the ρ is defined)."""
        out = []
        scores, human = tables.get(SEGMENTS.name), tables.get(HUMAN.name)
        if scores is not None and human is not None and len(scores):
            out += self._segment_views(scores, human)
        targets = tables.get(TARGETS.name)
        if targets is not None and len(targets):
            scored = targets.dropna(subset=["human", "judge_score"])  # a target without a usable score is no unit
            for aspect, g in scored.groupby("aspect", sort=True):
                per_doc = [al.document_correlations(rows, "spearman").rename("value").rename_axis("unit")
                           .reset_index().assign(judge=judge, mode=mode)
                           for (judge, mode), rows in g.groupby(["judge", "mode"], sort=True)]
                data = pd.concat(per_doc, ignore_index=True)[["judge", "mode", "unit", "value"]]
                out.append(View("summary_correlation", f"SummEval {aspect}", "summary_spearman", "mean", data))
        return out
