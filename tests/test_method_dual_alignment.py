"""The dual_perspective and human_alignment methods end to end: their stages with a counting judge on real SummEval
and WMT22 data (from the session's data root, conftest.DATA), two judges in one run folder, the WMT22 metrics imported and
analysed with the judge "recorded" (acc*_eq equal to mt-metrics-eval's), and the pure segment view."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dhp import methods
from dhp.analysis.alignment import alignment_tables, segment_rows
from dhp.backends import Backend, Completion
from dhp.recorded import import_judgments
from conftest import DATA


class Lengthy(Backend):
    """Scores a text by its length in words (longer = better, capped to 1-5): it sees deletions, not typos; shown
    two texts side by side it names the longer. Deterministic, no model."""

    model = "lengthy"

    def __init__(self, name: str = "scripted:lengthy", offset: int = 0):
        self.identity, self.offset = name, offset

    def reply(self, prompt: str) -> str:
        if "Candidate 1:" in prompt or "Summary 1" in prompt:
            return "1"
        body = prompt.rsplit("\n\n", 2)[-2] if prompt.count("\n\n") >= 2 else prompt
        return str(int(np.clip(len(body.split()) // 15 + 1 + self.offset, 1, 5)))

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            text = self.reply(r.messages[-1][1])
            res = Completion(text, [{text: -0.01}] if r.logprobs else None, 10, 1, None,
                             [text] * r.n if r.n > 1 else None)
            out.append(res)
            if on_result:
                on_result(i, res)
        return out


SMALL = dict(aspects=["relevance"], n_targets=3, n_sources=2, chain_length=2)


def test_dual_perspective_runs_and_keeps_two_judges(tmp_path):
    run = str(tmp_path / "run")
    methods.run("dual_perspective", judge=Lengthy(), run_dir=run, figures=False, **SMALL)
    paths = methods.run("dual_perspective", judge=Lengthy("scripted:other", offset=1), run_dir=run, **SMALL)
    local = pd.read_csv(paths["local_accuracy.csv"]).set_index("judge")
    assert set(local.index) == {"scripted:lengthy", "scripted:other"}  # the second run kept the first judge
    # deleting a sentence shortens the text: a length judge orders a relevance chain right, or ties
    assert local["n_pairs"].tolist() == [4, 4] and local["accuracy"].between(0, 1).all()
    steps = pd.read_parquet(Path(run) / "chain_scores.parquet")
    assert steps.groupby("judge")["step"].max().tolist() == [2, 2]
    kappa = pd.read_csv(paths["global_kappa.csv"])
    assert set(kappa["judge"]) == set(local.index) and (kappa["n"] == 3).all()
    assert (kappa["rating_rule"] == "expected").all()  # logprobs: the expected rule
    card = methods.report_card(run)
    assert set(card.loc[card["method"] == "dual_perspective", "status"]) <= {"ok", "no usable scores"}
    assert any(p.suffix == ".png" for p in map(Path, paths.values()))


def test_human_alignment_judges_summeval_targets_and_wmt_segments(tmp_path):
    run = str(tmp_path / "run")
    paths = methods.run("human_alignment", judge=Lengthy(), run_dir=run, aspects=["relevance"], n_docs=2,
                        n_segments=3, n_boot=20)
    a = pd.read_csv(paths["alignment.csv"])
    assert set(a["view"]) == {"summary", "system", "dataset", "segment"}
    seg = a[a["view"] == "segment"]
    assert set(seg["aspect"]) == {"mqm_zh_en", "da_zh_en"}
    assert seg["statistic"].iloc[0] == "acc_eq_calibrated"  # the headline first
    scores = pd.read_parquet(Path(run) / "segment_scores.parquet")
    assert set(scores["reference"]) == {"src"} and scores["seg_id"].nunique() == 3 and scores["score"].notna().all()
    targets = pd.read_parquet(Path(run) / "summary_targets.parquet")
    assert targets["doc_id"].nunique() == 2 and targets["human"].between(1, 5).all()
    assert (a.loc[a["view"] == "dataset", "n"] == len(targets)).all()


class Fluent(Backend):
    """A base model's likelihood: a text's mean log-probability per token is minus its length in words over 100
    (shorter reads as likelier), whatever precedes it. Records the (prefix, continuation) pairs; no chat."""

    identity, model, supports_chat, supports_logprobs = "scripted:fluent", "fluent", False, False

    def __init__(self):
        self.pairs = []

    def loglikelihood_many(self, pairs, on_result=None):
        from dhp.backends.base import LogLikelihood
        out = []
        for i, (prefix, text) in enumerate(pairs):
            self.pairs.append((prefix, text))
            n = len(text.split())
            out.append(LogLikelihood(-n * n / 100, n, len(prefix) // 4, None))
            if on_result:
                on_result(i, out[-1])
        return out


def test_human_alignment_reads_a_likelihood_after_the_task_prefix(tmp_path):
    """Mode likelihood (GPTScore's use): each output is scored once as the continuation of its task's prefix
    (instruction and source, no aspect question), so two aspects ask no more calls than one; every view reads it,
    and a score equal to minus the length correlates with the human ratings as minus the length does."""
    from scipy.stats import spearmanr

    from dhp.judging.prompts import likelihood_prefix
    judge = Fluent()
    run = str(tmp_path / "run")
    paths = methods.run("human_alignment", judge=judge, mode="likelihood", run_dir=run,
                        aspects=["coherence", "relevance"], n_docs=3, n_segments=2, n_boot=20)
    targets = pd.read_parquet(Path(run) / "summary_targets.parquet")
    segments = pd.read_parquet(Path(run) / "segment_scores.parquet")
    summ = likelihood_prefix("summarization", {"source": ""}).split("Article:")[0]
    on_summaries = [(p, t) for p, t in judge.pairs if p.startswith(summ)]
    # one call per summary, not per summary and aspect; the translations' own prefix for the rest
    assert len(on_summaries) == len(targets[["doc_id", "system"]].drop_duplicates()) == len(targets) // 2
    assert 0 < len(judge.pairs) - len(on_summaries) <= len(segments)  # a translation two systems share: once
    assert len(set(judge.pairs)) == len(judge.pairs)  # nothing asked twice
    assert all(t not in p for p, t in judge.pairs)
    assert targets["judge_score"].notna().all() and (targets["judge_score"] < 0).all()
    a = pd.read_csv(paths["alignment.csv"])
    assert set(a["view"]) == {"summary", "system", "dataset", "segment"}
    ds = a[(a["view"] == "dataset") & (a["statistic"] == "spearman")].set_index("aspect")["value"]
    for aspect, g in targets.groupby("aspect"):
        want = spearmanr(g["judge_score"], g["human"]).statistic
        assert ds[aspect] == pytest.approx(want)


def test_recorded_wmt_metrics_are_analysed_like_mt_metrics_eval(tmp_path):
    """Imported metric files + the judge "recorded": the segment view's acc*_eq equals mt-metrics-eval's (the values
    recorded in tests/test_stats_meta_wmt.py), and the two metrics of the issue swap places once ties are calibrated."""
    src = tmp_path / "scores"
    src.mkdir()
    for name in ("BLEURT-20-refA", "COMET-22-refA", "BLEU-refB"):
        (src / f"{name}.seg.score").write_bytes((DATA / "wmt22" / "metric-scores_zh-en" / f"{name}.seg.score").read_bytes())
    run = str(tmp_path / "run")
    import_judgments("mtme", src, run, lp="zh-en")
    paths = methods.run("human_alignment", run_dir=run, judge="recorded", n_boot=0)
    a = pd.read_csv(paths["alignment.csv"])
    mqm = a[a["aspect"] == "mqm_zh_en"].set_index(["judge", "statistic"])["value"]
    assert mqm[("COMET-22-refA", "acc_eq_calibrated")] == pytest.approx(0.535589, abs=2e-6)
    assert mqm[("BLEURT-20-refA", "acc_eq_calibrated")] == pytest.approx(0.489458, abs=2e-6)
    # exact ties: COMET-22 below BLEURT-20
    assert mqm[("COMET-22-refA", "acc_eq")] < mqm[("BLEURT-20-refA", "acc_eq")]
    assert "BLEU-refB" not in set(a["judge"])  # a refB variant is not in the main-reference comparison
    assert (a.loc[(a["statistic"] == "acc_eq_calibrated") & (a["aspect"] == "mqm_zh_en"), "n"] == 15 * 14 // 2 * 1875).all()


def test_segment_view_of_several_judges_is_per_judge_and_leaves_out_the_reference():
    human = pd.DataFrame({"lp": "zh-en", "system": np.repeat(["A", "B", "refA"], 4), "seg_id": np.tile([1, 2, 3, 4], 3),
                          "mqm": [0, -1, -2, 0, -5, -1, -3, -2, 0, 0, 0, 0.0], "da_z": np.nan})
    rows = []
    for judge, sign in (("good", 1), ("bad", -1)):
        for r in human.itertuples():
            rows.append({"judge": judge, "mode": "recorded", "lp": "zh-en", "reference": "refA", "system": r.system,
                         "seg_id": r.seg_id, "score": sign * r.mqm + (10 if r.system == "refA" else 0),
                         "failure": "", "source": "x"})
    scores = pd.DataFrame(rows)
    joined = segment_rows(scores, human)
    assert "refA" not in set(joined["system"])  # the main reference is not a system here
    out = alignment_tables(None, scores, human, n_boot=0)
    acc = out[out["statistic"] == "acc_eq"].set_index("judge")["value"]
    assert acc["good-refA"] > acc["bad-refA"]  # recorded judges are named with their reference variant
    tau = out[out["statistic"] == "tau_b"].set_index("judge")["value"]
    assert tau["good-refA"] == pytest.approx(-tau["bad-refA"])
    assert set(out["aspect"]) == {"mqm_zh_en"}  # no DA score: no DA rows
    assert math.isnan(out[out["statistic"] == "acc_eq"]["ci_lo"].iloc[0])  # n_boot 0: no interval
