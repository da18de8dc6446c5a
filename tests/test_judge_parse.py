"""Fast tests of the judge's parsing, prompts, scheduling, cache use and cost estimate (no model)."""

import math

import numpy as np
import pandas as pd
import pytest

from dhp.backends import Backend, Completion, LogLikelihood
from dhp.errors import DHPError
from dhp.judging import (SCORE_COLUMNS, build_prompt, failure_summary, failures_table, score_perturbed, likelihood_prefix,
                       load_prompt, parse_reply, parse_score, score_from_logprobs)
from dhp.schema import TASK_METRICS


@pytest.mark.parametrize("text,expected", [
    ("4", 4.0), (" 4\n", 4.0), ("Score: 4", 4.0), ("4/5", 4.0), ("4 out of 5", 4.0),
    ("4 - mostly coherent, with small issues", 4.0), ("**3**", 3.0), ("- Coherence: 3", 3.0),
    ("Coherence (1-5): 2", 2.0), ("3.5", 3.5), ("5.", 5.0), ("Rating: 1/5 because it is bad", 1.0),
    ("The summary is fine. Score: 4", 4.0), ("The score is 2", 2.0),
    ("Coherence: 1. The summary jumps between topics.", 1.0),  # labelled: a score and its explanation
])
def test_parse_score_accepts(text, expected):
    assert parse_score(text, "coherence") == expected


@pytest.mark.parametrize("text", [
    "", "6", "0", "10", "45", "4/10", "1-5", "1. Read the summary thoroughly", "Evaluation Steps: 1. Read",
    "I read 3 articles", "The summary is coherent.", None, "Score: 9",
])
def test_parse_score_rejects(text):
    assert math.isnan(parse_score(text, "coherence"))


@pytest.mark.parametrize("text,reason", [
    ("5.5", "out of scale: 5.5"), ("Score: 5.9", "out of scale: 5.9"), ("3 out of 10", "not a single score"),
    ("4,5", "not a single score"), ("3-4", "not a single score"), ("3 to 4", "not a single score"),
    ("2, 3, 4", "not a single score"), ("4/10", "not a single score"),
    ("1. Read the summary", "not a single score"), ("The summary is fine.", "unparsable reply"),
])
def test_parse_reply_rejects_with_a_reason(text, reason):
    """Each of these was accepted as a number by the old parser (issue 9: 5.5, 5.9, 3 of 10, 4 of 4,5)."""
    score, why = parse_reply(text, "coherence")
    assert math.isnan(score) and reason in why


def test_logprobs_and_sample_apply_the_same_acceptance_rule():
    """A reply that sample mode rejects ("1. Read the summary...") is NaN in logprobs mode too, although
    its first token "1" carries score probability (the old logprobs path scored it near 1)."""
    pt, ds = tables(1)
    echo = "1. Read the summary"

    class ListEcho(CountingBackend):
        def chat_many(self, requests, on_result=None):
            out = []
            for i, r in enumerate(requests):
                tops = [{"1": -0.05, "2": -3.0}, {".": -0.01}, {" Read": -0.2}] if r.logprobs else None
                out.append(Completion(echo, tops, 10, 3, None, [echo] * r.n if r.n > 1 else None))
                on_result(i, out[-1])
            return out

    for mode in ("logprobs", "sample"):
        sc = score_perturbed(pt, ds, judge=ListEcho(), mode=mode, n_samples=2, cache=None, progress=False).table
        assert sc["score"].isna().all(), mode
        assert sc["failure"].str.contains("not a single score").all(), mode


def test_unknown_metric_raises_instead_of_an_empty_table():
    pt, ds = tables(1)
    with pytest.raises(DHPError, match="Unknown metric"):
        score_perturbed(pt, ds, judge=CountingBackend(), metrics=["typo"], cache=None, progress=False)
    with pytest.raises(DHPError, match="is defined for these items"):
        score_perturbed(pt, ds, judge=CountingBackend(), metrics=["accuracy"], cache=None, progress=False)


def test_parse_metric_label_is_metric_specific():
    assert parse_score("Answer quality: 5", "answer_quality") == 5.0
    assert math.isnan(parse_score("Fluency was checked", "fluency"))


def test_score_from_logprobs_expected_value_and_mass():
    lp = [{"4": math.log(0.6), "3": math.log(0.2), " 4": math.log(0.1), "The": math.log(0.05)}]
    score, mass = score_from_logprobs(lp, "coherence")
    assert mass == pytest.approx(0.9)
    assert score == pytest.approx((4 * 0.7 + 3 * 0.2) / 0.9)


def test_score_from_logprobs_reads_the_first_position_that_chose_a_digit():
    lp = [{"Score": -0.1, "4": -3.0}, {":": -0.1}, {" ": -0.2, "2": -3.0}, {"5": -0.1, "4": -2.5}]
    score, mass = score_from_logprobs(lp, "coherence")
    p5, p4 = math.exp(-0.1), math.exp(-2.5)
    assert score == pytest.approx((5 * p5 + 4 * p4) / (p5 + p4))


def test_score_from_logprobs_no_digit_is_nan():
    score, mass = score_from_logprobs([{"The": -0.1, "A": -1.0}, {" summary": -0.1}], "coherence")
    assert math.isnan(score) and mass == 0.0
    assert math.isnan(score_from_logprobs(None)[0])


def test_prompts_exist_with_source_before_candidate():
    item = {"source": "SRC_MARK", "question": "Q_MARK", "src_lang": "de", "tgt_lang": "en"}
    for task, metrics in TASK_METRICS.items():
        for metric in metrics:
            p = build_prompt(task, metric, item, "CAND_MARK")
            assert p.index("SRC_MARK") < p.index("CAND_MARK"), (task, metric)
            assert "{" not in p, (task, metric)  # every slot filled
            assert "1" in load_prompt(task, metric) and "5" in load_prompt(task, metric)
        pre = likelihood_prefix(task, item)
        assert "SRC_MARK" in pre and pre.endswith("\n") and "{" not in pre
    assert "Q_MARK" in build_prompt("question_answering", "answer_quality", item, "x")
    assert "German" in build_prompt("translation", "accuracy", item, "x")


def test_slot_filling_is_single_pass():
    p = build_prompt("summarization", "fluency", {"source": "a {candidate} b"}, "C")
    assert "a {candidate} b" in p


class CountingBackend(Backend):
    """Deterministic stand-in to test the engine's bookkeeping quickly (the real backends are tested
    in test_backends.py / test_judge_embedded.py). Replies are chosen per call from the candidate."""

    identity = "fake:counting"
    model = "counting"
    n_ctx = None

    def __init__(self, reply=lambda prompt, i: "4", n_ctx=None):
        self.reply = reply
        self.n_ctx = n_ctx
        self.calls = 0
        self.prompts = []

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            self.calls += 1
            prompt = r.messages[-1][1]
            self.prompts.append(prompt)
            # A request for n replies gets reply(prompt, seed + j) for j < n, like an n-capable server.
            texts = [self.reply(prompt, r.seed + j) for j in range(r.n)]
            text = texts[0]
            res = text if isinstance(text, Exception) else Completion(
                text, [{text: -0.1, "3": -2.5}] if r.logprobs else None, len(prompt) // 4, 1, None,
                texts if r.n > 1 else None)
            out.append(res)
            if on_result:
                on_result(i, res)
        return out

    def loglikelihood_many(self, pairs, on_result=None):
        out = []
        for i, (p, c) in enumerate(pairs):
            self.calls += 1
            res = LogLikelihood(-float(len(c)), max(1, len(c.split())), 10, None)
            out.append(res)
            if on_result:
                on_result(i, res)
        return out


def tables(n_items=2):
    ds = pd.DataFrame([{"dataset": "summeval", "task": "summarization", "item_id": f"i{k}",
                        "source": f"Synthetic article number {k}. " * 5, "reference": f"Summary {k} text.",
                        "question": "", "wrong_ending": "", "src_lang": "", "tgt_lang": ""} for k in range(n_items)])
    rows = []
    for k in range(n_items):
        for pert, sev, lvl, text, status in [
            ("original", "none", "none", f"Summary {k} text.", "ok"),
            ("char_deletion", "minor", "character", f"Sumary {k} txt.", "ok"),
            ("sentence_reorder", "major", "sentence", None, "skipped"),
            ("control", "single", "none", f"Summary {k}  text.", "ok")]:
            rows.append({"dataset": "summeval", "task": "summarization", "item_id": f"i{k}", "perturbation": pert,
                         "level": lvl, "severity": sev, "method": "rule", "text": text, "edits": "",
                         "status": status, "reason": ""})
    return pd.DataFrame(rows), ds


def test_scores_table_schema_and_skipped_rows_excluded():
    pt, ds = tables()
    b = CountingBackend()
    sc, sc_stats = score_perturbed(pt, ds, judge=b, mode="sample", n_samples=3, cache=None, progress=False)
    assert list(sc.columns[:len(SCORE_COLUMNS)]) == SCORE_COLUMNS
    assert len(sc) == 2 * 3 * 4  # items x ok variants x metrics
    assert not (sc["perturbation"] == "sentence_reorder").any()
    assert (sc["score"] == 4.0).all() and (sc["n_valid"] == 3).all() and (sc["n_failed"] == 0).all()
    # one request per row for its 3 replies; the control's prompt differs from the original's, so it
    # is a call of its own (an identical-text placebo would reuse the original's cached answer)
    assert b.calls == 2 * 3 * 4
    assert sc_stats["calls"] == 2 * 3 * 4 and sc_stats["replies"] == 2 * 3 * 4 * 3


def test_grouped_order_keeps_item_metric_variants_adjacent():
    pt, ds = tables(3)
    b = CountingBackend()
    score_perturbed(pt, ds, judge=b, mode="logprobs", cache=None, progress=False)
    seen, last = [], None
    for p in b.prompts:
        key = (p.split("Quality dimension: ")[1].split(",")[0], p.split("Synthetic article number ")[1][0])
        if key != last:
            assert key not in seen, "an (item, metric) group was split"
            seen.append(key)
            last = key


def test_warm_rerun_makes_no_calls_and_same_table(tmp_path):
    pt, ds = tables()
    b = CountingBackend()
    first, first_stats = score_perturbed(pt, ds, judge=b, mode="sample", n_samples=2, cache=tmp_path / "c.sqlite", progress=False)
    n = b.calls
    again, again_stats = score_perturbed(pt, ds, judge=b, mode="sample", n_samples=2, cache=tmp_path / "c.sqlite", progress=False)
    assert b.calls == n and again_stats["calls"] == 0
    assert again_stats["cache_hits"] == first_stats["requests"] == 2 * n
    pd.testing.assert_frame_equal(first, again)


def test_cache_key_changes_with_params(tmp_path):
    pt, ds = tables(1)
    b = CountingBackend()
    path = tmp_path / "c.sqlite"
    score_perturbed(pt, ds, judge=b, mode="sample", n_samples=1, cache=path, progress=False)
    n = b.calls
    score_perturbed(pt, ds, judge=b, mode="sample", n_samples=2, cache=path, progress=False)  # only sample #2 is new
    assert b.calls == 2 * n
    score_perturbed(pt, ds, judge=b, mode="sample", n_samples=1, seed=7, cache=path, progress=False)
    assert b.calls == 3 * n
    score_perturbed(pt, ds, judge=b, mode="logprobs", cache=path, progress=False)
    assert b.calls == 4 * n


def test_unparsable_and_failed_calls_are_nan_and_counted():
    pt, ds = tables(1)

    def reply(prompt, seed):
        if "Sumary" in prompt:  # the perturbed candidate: the whole call fails
            return RuntimeError("HTTP 500: boom")
        return "Score: 2" if seed == 0 else "Score: 5.5"

    sc = score_perturbed(pt, ds, judge=CountingBackend(reply), mode="sample", n_samples=2, cache=None, progress=False).table
    pert = sc[sc["perturbation"] == "char_deletion"]
    assert pert["score"].isna().all() and (pert["n_valid"] == 0).all() and (pert["n_failed"] == 2).all()
    assert pert["failure"].str.contains("HTTP 500: boom").all()
    orig = sc[sc["perturbation"] == "original"]
    assert (orig["score"] == 2.0).all() and (orig["n_valid"] == 1).all() and (orig["n_failed"] == 1).all()
    assert orig["failure"].str.contains("out of scale: 5.5").all()
    fs = failure_summary(sc)
    assert set(fs["metric"]) == set(TASK_METRICS["summarization"])
    row = fs[fs["metric"] == "fluency"].iloc[0]
    assert row["calls"] == 6 and row["n_failed"] == 4 and row["nan_rows"] == 1
    assert row["failure_rate"] == pytest.approx(4 / 6)
    ft = failures_table(sc)
    assert len(ft) == len(sc) and set(ft["failure"]) == set(sc["failure"])  # every row had a failed reply


def test_logprobs_mode_and_text_fallback():
    pt, ds = tables(1)
    sc = score_perturbed(pt, ds, judge=CountingBackend(lambda p, s: "4"), mode="logprobs", cache=None, progress=False).table
    p4, p3 = math.exp(-0.1), math.exp(-2.5)
    assert np.allclose(sc["score"], (4 * p4 + 3 * p3) / (p4 + p3))
    assert np.allclose(sc["prob_mass"], p4 + p3) and not sc["fallback"].any()

    class NoLogprobs(CountingBackend):
        def chat_many(self, requests, on_result=None):
            out = [Completion("3", None, 5, 1) for _ in requests]
            for i, r in enumerate(out):
                on_result(i, r)
            return out

    with pytest.warns(UserWarning, match="no logprobs"):
        sc = score_perturbed(pt, ds, judge=NoLogprobs(), mode="logprobs", cache=None, progress=False).table
    assert (sc["score"] == 3.0).all() and sc["fallback"].all() and sc["prob_mass"].isna().all()


def test_likelihood_mode_one_row_per_variant():
    pt, ds = tables(2)
    sc = score_perturbed(pt, ds, judge=CountingBackend(), mode="likelihood", cache=None, progress=False).table
    assert len(sc) == 2 * 3 and (sc["metric"] == "likelihood").all()
    row = sc[(sc["item_id"] == "i0") & (sc["perturbation"] == "original")].iloc[0]
    text = "Summary 0 text."
    assert row["score"] == pytest.approx(-len(text) / len(text.split()))


def test_source_truncated_never_candidate():
    pt, ds = tables(1)
    ds.loc[0, "source"] = "word " * 3000
    b = CountingBackend(n_ctx=900)
    with pytest.warns(UserWarning, match="truncated"):
        sc = score_perturbed(pt, ds, judge=b, mode="logprobs", cache=None, progress=False).table
    assert sc["truncated"].all()
    assert all(p.rstrip().endswith(":") for p in b.prompts)
    assert all("[...]" in p for p in b.prompts)
    assert any("Sumary 0 txt." in p for p in b.prompts) and any("Summary 0 text." in p for p in b.prompts)
    # all variants of an (item, metric) are judged against the same cut source
    for metric in TASK_METRICS["summarization"]:
        srcs = {p.split("Source article:")[1].split("Summary:")[0] for p in b.prompts if f"{metric.capitalize()}," in p}
        assert len(srcs) == 1


def test_dry_run_estimates_without_calls(tmp_path):
    pt, ds = tables(2)

    class Paid(CountingBackend):
        is_paid = True
        model = "gpt-4o-mini"

    b = Paid()
    est = score_perturbed(pt, ds, judge=b, mode="sample", n_samples=5, dry_run=True, cache=tmp_path / "c.sqlite",
                price_table={"gpt-4o-mini": {"input": 1.0, "output": 2.0}})
    # one request per row asks for the 5 replies (one prompt charge); completion is bounded per reply
    assert b.calls == 0 and est.calls == 2 * 3 * 4 and est.cached_calls == 0
    assert est.completion_tokens == 2 * 3 * 4 * 5 * 12
    assert est.cost_usd == pytest.approx((est.prompt_tokens * 1.0 + est.completion_tokens * 2.0) / 1e6)
    est2 = score_perturbed(pt, ds, judge=b, mode="sample", dry_run=True, price_table={}, cache=None)
    assert est2.cost_usd is None and "unknown" in est2.describe()


def test_bad_inputs_raise_dhperror():
    pt, ds = tables(1)
    with pytest.raises(DHPError, match="mode"):
        score_perturbed(pt, ds, judge=CountingBackend(), mode="vibes", cache=None)
    with pytest.raises(DHPError, match="dataset table"):
        score_perturbed(pt, None, judge=CountingBackend(), cache=None)
    with pytest.raises(DHPError, match="not in the dataset table"):
        score_perturbed(pt, ds.assign(item_id="other"), judge=CountingBackend(), cache=None)


def test_load_judge_inputs_takes_first_items_and_their_sources(tmp_path):
    from dhp.io import write_parquet
    from dhp.judging import load_judge_inputs

    pt, ds = tables(3)
    with pytest.raises(DHPError, match="notebooks/01_perturb"):
        load_judge_inputs(tmp_path, "summeval")
    write_parquet(pt, tmp_path / "perturbed.parquet")
    write_parquet(ds, tmp_path / "dataset.parquet")
    p2, d2 = load_judge_inputs(tmp_path, "summeval", n_items=2)
    assert list(dict.fromkeys(p2["item_id"])) == ["i0", "i1"] and list(d2["item_id"]) == ["i0", "i1"]
    assert len(load_judge_inputs(tmp_path, "summeval")[0]) == len(pt)
    with pytest.raises(DHPError, match="no rows"):
        load_judge_inputs(tmp_path, "wmt22_de_en")
    # stage 02 reads stage 01's dataset.parquet: without it, or with other items, it says to rerun 01
    other = tmp_path / "other"
    write_parquet(pt, other / "perturbed.parquet")
    with pytest.raises(DHPError, match="dataset table not found.*notebooks/01_perturb"):
        load_judge_inputs(other, "summeval")
    write_parquet(ds.iloc[:1], other / "dataset.parquet")
    with pytest.raises(DHPError, match="lacks 1 of the perturbed items"):
        load_judge_inputs(other, "summeval", n_items=2)


def test_score_prompts_rating_is_the_modal_reply_in_sample_mode_and_rounded_in_logprobs():
    from dhp.judging import score_prompts

    replies = {0: "4", 1: "2", 2: "2", 3: "4", 4: "3"}  # 2 and 4 tie twice each: the lower, 2, is kept
    b = CountingBackend(lambda prompt, seed: replies[seed])
    out = score_prompts(pd.DataFrame({"id": [1], "metric": ["fluency"], "prompt": ["Rate it."]}), judge=b,
                        mode="sample", n_samples=5, progress=False).table
    assert out.loc[0, "score"] == pytest.approx(3.0) and out.loc[0, "rating"] == 2.0
    lp = score_prompts(pd.DataFrame({"prompt": ["Rate it."]}), judge=CountingBackend(lambda p, s: "4"),
                       mode="logprobs", progress=False).table
    p4, p3 = math.exp(-0.1), math.exp(-2.5)
    assert lp.loc[0, "score"] == pytest.approx((4 * p4 + 3 * p3) / (p4 + p3)) and lp.loc[0, "rating"] == 4.0
