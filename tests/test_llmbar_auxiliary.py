"""LLMBar's auxiliary strategies (Metrics, Reference, Metrics_Reference; issue 35 item 3): the plan prices them
(auxiliary calls + both orders) instead of stopping with KeyError 'auxiliary_input_0', and a refused auxiliary call
goes on with an empty auxiliary text and its note, as LLMBar's evaluate.py does, and a failed one gives no verdict (issue
50). Skipped without LLMBar's templates."""

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


FILTERED = ("The response was filtered due to the prompt triggering Azure OpenAI's content management policy. "
            "Please modify your prompt and retry.")


def _scripted(monkeypatch, auxiliary_reply):
    """calls.chat replaced: the first batch (Reference's one auxiliary step) gets ``auxiliary_reply``, later ones a
    verdict; returns the batches sent."""
    sent = []

    def fake_chat(judge, requests, cache=None, **kw):
        sent.append(requests)
        final = len(sent) > 1
        return [type("R", (), {"text": "Output (a)", "prompt_tokens": 1})() if final else auxiliary_reply
                for _ in requests]

    monkeypatch.setattr(calls, "chat", fake_chat)
    return sent


def test_a_failed_auxiliary_call_gives_no_verdict(monkeypatch):
    # evaluate.py asks a failed call again until it is answered and makes no verdict without its reply; a verdict on
    # an empty reference, unmarked, was this project's silent substitute (issue 50)
    pairs = load_llmbar(["Adversarial_Neighbor"], n_items=2, seed=0)
    sent = _scripted(monkeypatch, calls.CallFailure("RuntimeError: HTTP 500: boom"))
    verdicts, _ = run_strategies(pairs, ["llmbar:Reference"], judge="embedded", progress=False)
    assert len(sent) == 1  # the verdict step is not asked for a pair without its reference
    assert len(verdicts) == 4 and verdicts["verdict"].isna().all()
    assert verdicts["failure"].str.contains(r"auxiliary step 0 \(.*\) failed, so no verdict").all()
    assert verdicts["failure"].str.contains("HTTP 500: boom").all()


def test_a_content_filtered_auxiliary_call_goes_on_with_an_empty_text_and_its_note(monkeypatch):
    pairs = load_llmbar(["Adversarial_Neighbor"], n_items=2, seed=0)
    sent = _scripted(monkeypatch, calls.CallFailure(f"BadRequestError: Error code: 400 - {FILTERED}", refused=True))
    verdicts, _ = run_strategies(pairs, ["llmbar:Reference"], judge="embedded", progress=False)
    assert len(sent) == 2 and len(sent[1]) == 4  # evaluate.py reads "" and goes on: the verdict step, both orders
    assert verdicts["verdict"].notna().all()
    # the note evaluate.py records with the auxiliary text ("content management policy") is on the pair's rows
    assert verdicts["failure"].str.contains("auxiliary step 0 .*content filter: the empty reply").all()
