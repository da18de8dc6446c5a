"""LLMBar's auxiliary strategies (Metrics, Reference, Metrics_Reference; issue 35 item 3): the plan prices them
(auxiliary calls + both orders) instead of stopping with KeyError 'auxiliary_input_0', and a refused auxiliary call
goes on with an empty auxiliary text, as LLMBar's evaluate.py does. Skipped without LLMBar's templates."""

from __future__ import annotations

import pytest

from dhp import calls
from dhp.datasets.llmbar import load_llmbar
from dhp.evaluate import plan
from dhp.judging.strategies import llmbar_prompts_dir, llmbar_protocol, run_strategies

AUXILIARY = ("Metrics", "Reference", "Metrics_Reference")


def test_plan_prices_the_auxiliary_strategies(tmp_path):
    steps = plan("openai:m@http://127.0.0.1:9/v1", "quick", run_dir=str(tmp_path),
                 protocols=[f"llmbar:{s}" for s in AUXILIARY])
    (step,) = steps
    assert step.method == "decompose_aggregate" and "not estimated" not in step.note
    # 6 pairs: per strategy its auxiliary steps once per pair, then both orders
    n_aux = sum(len(llmbar_protocol(s).modules) - 1 for s in AUXILIARY)
    assert n_aux == 4 and step.calls == 6 * n_aux + 6 * 2 * len(AUXILIARY)


def test_a_refused_auxiliary_call_goes_on_with_an_empty_text(monkeypatch):
    pairs = load_llmbar(["Adversarial_Neighbor"], n_items=2, seed=0)
    sent = []

    def fake_chat(judge, requests, cache=None, **kw):
        sent.append(requests)
        final = len(sent) > 1  # the first batch is the auxiliary step (Reference: one step)
        return [type("R", (), {"text": "Output (a)", "prompt_tokens": 1})() if final else calls.CallFailure("refused")
                for _ in requests]

    monkeypatch.setattr(calls, "chat", fake_chat)
    verdicts, _ = run_strategies(pairs, ["llmbar:Reference"], judge="embedded", progress=False)
    assert len(sent) == 2 and len(sent[1]) == 4  # the final step still asked, for both pairs and orders
    assert verdicts["verdict"].notna().all() and (verdicts["failure"].fillna("") == "").all()
