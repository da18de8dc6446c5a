"""The LLM perturbation path: prompts, validators, bounded retries (with a scripted stand-in
backend), and one end-to-end run against a real llama_cpp.server on loopback (slow)."""

import re

import pandas as pd
import pytest

from dhp.backends import Backend, Completion
from dhp.errors import DHPError
from dhp.perturb import audit, perturb
from dhp.perturb.llm import build_prompt, clean_output, llm_perturb, validate

TEXT = "Maria Lopez opened the new library in Springfield on Monday. About 300 people came."


class Scripted(Backend):
    """Stand-in backend: returns the scripted answers in order and records each call. A DHPError is
    raised (a configuration error stops the run); any other exception is that call's failure."""

    identity = "scripted:test"
    model = "scripted"

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []

    def answer(self, prompt: str):
        return self.answers.pop(0) if self.answers else ""

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            prompt = r.messages[0][1]
            self.calls.append({"prompt": prompt, "temperature": r.temperature, "seed": r.seed,
                               "max_tokens": r.max_tokens})
            a = self.answer(prompt)
            if isinstance(a, DHPError):
                raise a
            res = a if isinstance(a, Exception) else Completion(a, None, 10, 5)
            out.append(res)
            if on_result:
                on_result(i, res)
        return out


def test_prompt_follows_the_auto_cot_structure():
    p = build_prompt("fictional_entities", "minor", "summarization", TEXT)
    for part in ("Adjustment:", "Adjustment Steps:", "1.", "Summary:", TEXT, "an article"):
        assert part in p
    assert p.rstrip().endswith("Revised Summary:")
    assert p.index("Adjustment:") < p.index("Adjustment Steps:") < p.index(TEXT)
    assert not re.search(r"\{\w+\}", p)  # every slot filled
    story = build_prompt("grammatical_errors", "single", "story_completion", "He left.")
    assert story.rstrip().endswith("Revised Story ending:") and "one grammatical error" in story
    assert "two or more" in build_prompt("grammatical_errors", "major", "translation", "x")


def test_every_llm_method_and_severity_has_a_prompt():
    from dhp.perturb.catalog import PERTURBATIONS, llm_methods

    assert llm_methods() >= {"fictional_entities", "grammatical_errors", "rewrite_insert"}
    for p in llm_methods():
        for task, sevs in PERTURBATIONS[p].tasks.items():
            for s in sevs:
                assert "Revised" in build_prompt(p, s, task, "Some text.")


@pytest.mark.parametrize(
    "perturbation,output,why",
    [
        ("fictional_entities", "", "empty"),
        ("fictional_entities", TEXT, "identical"),
        ("fictional_entities", "  " + TEXT.replace(" ", "  ") + " ", "identical"),
        ("fictional_entities", "Maria", "length ratio"),
        ("fictional_entities", "Here is the revised summary: " + TEXT.replace("Maria", "Olga"), "meta text"),
        ("fictional_entities", TEXT.replace("Maria", "Olga") + "\nAdjustment: replaced a name", "prompt echoed"),
        ("grammatical_errors", TEXT.replace(".", "!"), "no word changed"),
        ("fictional_entities", TEXT.replace("Maria Lopez", "Lopez Maria"), "no entity replaced"),
        ("rewrite_insert", TEXT + " " + TEXT, None),
        ("rewrite_insert", "A totally different text that is long enough to pass the length check of ok.", "length ratio"),
        ("rewrite_insert", "Completely other words here, nothing from the source remains in this output, sadly, none at all.", "not kept"),
        ("fictional_entities", TEXT.replace("Maria Lopez", "Olga Brandt"), None),
    ],
)
def test_validators(perturbation, output, why):
    got = validate(perturbation, TEXT, output)
    if why is None:
        assert got is None
    else:
        assert got is not None and why in got


def test_clean_output_strips_labels_quotes_and_fences():
    assert clean_output('Revised Summary: "A b c."', "summarization") == "A b c."
    assert clean_output("```\nA b c.\n```", "summarization") == "A b c."
    assert clean_output("Here is it: A b c.", "summarization") == "Here is it: A b c."  # left for the validator


def test_valid_first_answer_is_kept_with_greedy_decoding():
    b = Scripted([TEXT.replace("Springfield", "Lake Ora")])
    r = llm_perturb(b, "fictional_entities", "minor", "summarization", TEXT, seed=5)
    assert r.status == "ok" and "Lake Ora" in r.text and r.reason == ""
    assert len(b.calls) == 1 and b.calls[0]["temperature"] == 0.0 and b.calls[0]["seed"] == 5


def test_invalid_answers_are_retried_with_new_seeds_then_kept_if_valid():
    b = Scripted(["", TEXT, TEXT.replace("300", "410")])
    r = llm_perturb(b, "fictional_entities", "minor", "summarization", TEXT, seed=5, max_attempts=3)
    assert r.status == "ok" and "410" in r.text and "attempt 3" in r.edits
    assert [c["seed"] for c in b.calls] == [5, 6, 7]
    assert [c["temperature"] for c in b.calls] == [0.0, 0.7, 0.7]


def test_exhausted_retries_are_recorded_failures_never_kept():
    b = Scripted(["Sure! " + TEXT, TEXT, RuntimeError("connection reset")])
    r = llm_perturb(b, "fictional_entities", "major", "summarization", TEXT, seed=1, max_attempts=3)
    assert r.status == "failed" and r.text is None
    assert "meta text" in r.reason and "identical" in r.reason and "connection reset" in r.reason
    assert len(b.calls) == 3


def test_configuration_errors_propagate():
    b = Scripted([DHPError("Server unreachable.", "start it.")])
    with pytest.raises(DHPError, match="unreachable"):
        llm_perturb(b, "grammatical_errors", "minor", "summarization", TEXT, seed=1)


def test_perturb_uses_the_backend_only_for_llm_methods():
    df = pd.DataFrame([{"dataset": "summeval", "task": "summarization", "item_id": "x", "source": "",
                        "reference": TEXT, "question": "", "wrong_ending": "", "src_lang": "", "tgt_lang": ""}])
    good = {
        "fictional_entities": TEXT.replace("Springfield", "Lake Ora"),
        "grammatical_errors": TEXT.replace("came", "comes"),
        "rewrite_insert": TEXT + " In other words, around 300 people attended.",
    }

    class ByMethod(Scripted):
        def answer(self, prompt):
            return good["fictional_entities" if "entit" in prompt else
                        "grammatical_errors" if "grammatical" in prompt else "rewrite_insert"]

    b = ByMethod([])
    t = perturb(df, perturber=b)
    llm = t[t.method == "llm:scripted:test"].set_index(["perturbation", "severity"])
    assert set(llm.index.get_level_values(0)) == {"fictional_entities", "grammatical_errors", "rewrite_insert"}
    assert len(b.calls) == len(llm) == 6
    assert (t[~t.perturbation.isin(llm.index.get_level_values(0)) & (t.perturbation != "original")].method
            == "rule").all()
    # Each row carries the edit its method promises, checked here without the validators that accepted it.
    for sev in ("minor", "major"):
        ent = llm.loc[("fictional_entities", sev), "text"]
        assert "Lake Ora" in ent and "Springfield" not in ent
        gram = llm.loc[("grammatical_errors", sev), "text"]
        assert gram.split() != TEXT.split() and len(gram.split()) == len(TEXT.split())
        ins = llm.loc[("rewrite_insert", sev), "text"]
        assert ins.startswith(TEXT) and len(ins) > len(TEXT)


# --- end to end against a real OpenAI-compatible server ------------------------------------


@pytest.fixture(scope="module")
def llama_server():
    """A real llama_cpp.server with the embedded model on loopback (serves the model as "smollm2")."""
    from servers import start_llama_server

    with start_llama_server(model_alias="smollm2") as server:
        yield server.base_url


@pytest.mark.slow
def test_end_to_end_llm_perturbation_against_llama_cpp_server(llama_server):
    from dhp.backends import get_backend

    backend = get_backend(f"openai:smollm2@{llama_server}")
    df = pd.DataFrame([{"dataset": "storycloze", "task": "story_completion", "item_id": "e2e", "source": "",
                        "reference": "Tom gave his old guitar to his sister Anna.", "question": "",
                        "wrong_ending": "Tom hated music.", "src_lang": "", "tgt_lang": ""}])
    t = perturb(df, perturber=backend, perturbations=["fictional_entities", "grammatical_errors"],
                max_attempts=2)
    llm = t[t.perturbation != "original"]
    assert (llm.method == "llm:openai:smollm2").all()  # the server URL (random port) is not part of it
    assert set(llm.status) <= {"ok", "failed"}
    ref = df.reference[0]
    for r in llm.itertuples():
        if r.status == "ok":  # whatever the small model wrote, it changed some words and kept most
            new_words = set(r.text.lower().split()) - set(ref.lower().split())
            kept = set(ref.lower().split()) & set(r.text.lower().split())
            assert new_words and len(kept) >= len(set(ref.lower().split())) // 2, r.text
        else:  # or it was recorded as a failure with the reasons, never kept
            assert pd.isna(r.text) and "attempt 2" in r.reason
