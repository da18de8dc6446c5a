"""The no-LLM baselines on the pairwise and the criteria methods (issue 53: "controls and baselines on every method"):
a baseline prefers the output whose surface score against the instruction is higher, and gives every criterion its one
score of the text. Each expectation is computed here from the texts with the scoring libraries directly."""

import numpy as np
import pandas as pd
import pytest
import sacrebleu
from rouge_score import rouge_scorer

from dhp.cache import open_cache
from dhp.errors import DHPError
from dhp.judging.strategies import run_strategies
from dhp.methods import get

ITEMS = pd.DataFrame({"dataset": "x", "subset": "Natural", "item_id": ["a", "b", "c", "d"],
                      "instruction": ["write a short poem about cats", "say hello to the team",
                                      "list three prime numbers", ""],
                      "output_1": ["cats purr and cats sleep, a poem about cats", "hi",
                                   "two three five", "anything"],
                      "output_2": ["dogs bark", "hello to the whole team, from me", "4 6 8 9 and 10", "else"],
                      "label": ["1", "2", "1", "2"]})


def _rouge(src, cand):
    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(src, cand)["rougeL"].fmeasure


@pytest.mark.parametrize("judge,score", [
    ("baseline:length_ratio", lambda s, c: len(c.split()) / len(s.split())),
    ("baseline:rouge_l_src", _rouge),
    ("baseline:chrf_src", lambda s, c: sacrebleu.sentence_chrf(c, [s]).score)])
def test_a_baseline_prefers_the_output_scoring_higher_against_the_instruction_in_both_orders(tmp_path, judge, score):
    cache = tmp_path / "cache.sqlite"
    v, costs = run_strategies(ITEMS, ["dhp_vanilla", "direct"], judge=judge, mode="metric", cache=cache)
    assert len(v) == 4 * 2 * 2 and (costs["calls"] == 8).all() and (costs["prompt_tokens"] == 0).all()
    for r in ITEMS.iloc[:3].itertuples():
        s1, s2 = score(r.instruction, r.output_1), score(r.instruction, r.output_2)
        want = "1" if s1 > s2 else "2" if s2 > s1 else "tie"
        got = v.loc[v["item_id"] == r.item_id, "verdict"]
        assert (got == want).all(), (judge, r.item_id, s1, s2, list(got))
    # no instruction to score against: no verdict, with the baseline's reason (never a guessed label)
    d = v[v["item_id"] == "d"]
    assert d["verdict"].isna().all() and d["failure"].str.contains("no source text").all()
    # the calls went through the cache: a second run asks nothing new
    with open_cache(cache) as store:
        before = len(store)
    again, _ = run_strategies(ITEMS, ["dhp_vanilla"], judge=judge, mode="metric", cache=cache)
    with open_cache(cache) as store:
        assert len(store) == before
    assert list(again["verdict"]) == list(v.loc[v["strategy"] == "dhp_vanilla", "verdict"])


def test_decompose_aggregate_and_bias_run_a_baseline_on_llmbar(tmp_path):
    """length_ratio on LLMBar's pairs is "the longer output wins": its agreement equals the share of pairs whose
    gold output is the longer (word counts here), and it never flips with the order."""
    from dhp.datasets.llmbar import load_llmbar

    run = tmp_path / "run"
    m = get("decompose_aggregate")
    cfg = m.config({"run_dir": str(run), "judge": "baseline:length_ratio", "mode": "metric", "n_pairs": 30,
                    "dhp_items": 0, "subsets": ["Natural", "Adversarial_Neighbor"], "strategies": ["direct"],
                    "progress": False})
    tables = m.collect(cfg)
    out = m.analyze({**dict(tables)}, cfg)["pairwise_agreement.csv"]
    pairs = load_llmbar(["Natural", "Adversarial_Neighbor"], n_items=30, seed=0)
    for subset, g in pairs.groupby("subset"):
        n1, n2 = g["output_1"].str.split().str.len(), g["output_2"].str.split().str.len()
        longer = np.where(n1 > n2, "1", np.where(n2 > n1, "2", "tie"))
        row = out[out["subset"] == subset].iloc[0]
        assert row["agreement"] == pytest.approx((longer == g["label"].to_numpy()).mean()), subset
        assert row["position_consistency"] == 1
    # Adversarial_Neighbor's worse outputs are the longer ones (LLMBar's point): the length floor sits under chance
    assert out.set_index("subset").loc["Adversarial_Neighbor", "agreement"] < 0.3

    b = get("bias")
    bcfg = b.config({"run_dir": str(tmp_path / "bias"), "judge": "baseline:length_ratio", "mode": "metric",
                     "n_pairs": 30, "subsets": ["Natural", "Adversarial_Neighbor"], "strategies": ["dhp_vanilla"],
                     "progress": False, "n_boot": 50})
    got = b.analyze(dict(b.collect(bcfg)), bcfg)
    pos = got["bias_position.csv"].set_index("subset")
    assert (pos["flip_rate"] == 0).all()  # the order is no input of a baseline
    length = got["bias_length.csv"].set_index("subset").loc["LLMBar (Natural + Adversarial)"]
    assert length["p_longer"] > 0.9  # length_ratio is a length bias of known size


def test_criteria_confusion_gives_a_baselines_one_score_to_every_criterion(tmp_path):
    m = get("criteria_confusion")
    src, texts = "the cat sat on the mat all day long", {"original": "the cat sat on the mat",
                                                         "perturbed": "a dog ran in the park"}
    prompts = pd.DataFrame([{"dataset": "summeval", "item_id": "i1", "attack": "" if v == "original" else "swap",
                             "variant": v, "method": "rule", "aspect": a, "description_type": "detailed",
                             "instruction": "paper", "prompt": f"rate {a}", "source": src, "candidate": t}
                            for v, t in texts.items() for a in ("coherence", "fluency", "relevance")])
    cfg = m.Params(judge="baseline:chrf_src", mode="metric", run_dir=str(tmp_path), progress=False)
    out = m.collect_scores(cfg, prompts, "baseline:chrf_src")["confusion_scores.parquet"]
    for v, t in texts.items():
        got = out.loc[out["variant"] == v, "score"]
        assert got.nunique() == 1 and got.iloc[0] == pytest.approx(sacrebleu.sentence_chrf(t, [src]).score)
    assert (out["judge"] == "baseline:chrf_src").all() and out["failure"].eq("").all()


def test_the_bias_dry_run_prices_what_a_control_and_a_baseline_ask(tmp_path):
    """``dhp run --method bias --dry-run``: a control asks nothing, a baseline one score per distinct output (the plain
    pairs' and each cue's rewritten ones) — not LLMBar's chat requests, which neither sends. Nothing is written."""
    from dhp.judging.strategies import metric_requests

    b = get("bias")
    common = {"run_dir": str(tmp_path / "run"), "mode": "metric", "n_pairs": 4, "subsets": ["Natural"],
              "strategies": ["llmbar:Vanilla"], "progress": False}
    ctl = b.estimate(b.config({**common, "judge": "control:chance"}))["collect"]
    assert (ctl.calls, ctl.prompt_tokens, ctl.cost_usd) == (0, 0, 0.0)
    cfg = b.config({**common, "judge": "baseline:length_ratio"})
    est = b.estimate(cfg)["collect"]
    texts = pd.concat([metric_requests(p) for _c, p, r in b._runs(cfg) if r == 0])
    assert est.calls == len(texts.drop_duplicates(["source", "candidate"])) > 8 and est.completion_tokens == 0
    assert not (tmp_path / "run").exists()


def test_mode_metric_on_these_methods_is_for_controls_and_baselines_not_a_language_model():
    llm = "openai:m@http://127.0.0.1:9/v1"  # never called
    for name in ("decompose_aggregate", "bias", "criteria_confusion"):
        m = get(name)
        assert "language model" in m.refuses(llm, "metric") and not m.refuses(llm, "logprobs")
        assert not m.refuses("baseline:chrf_src", "metric") and not m.refuses("control:chance", "metric")
    with pytest.raises(DHPError, match="is a language model"):
        run_strategies(ITEMS, ["direct"], judge="embedded", mode="metric")
