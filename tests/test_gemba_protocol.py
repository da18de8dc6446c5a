"""GEMBA live (dhp.judging.gemba) against GEMBA's own code, loaded from the data root's gemba/gemba/{prompt,gpt_api}.py
(MicrosoftTranslator/GEMBA @ a7a7eff8): its answer rules on many replies, and the messages, temperatures and
max_tokens its GptApi sends for the same segment, including the retry rule. Upstream's third-party imports (openai,
termcolor, tqdm, ipdb) are replaced by stand-ins; nothing of it is copied. Skipped without the GEMBA files."""

from __future__ import annotations

import importlib.util
import random
import sys
import types

import pandas as pd
import pytest

from dhp.backends import Backend, Completion
from dhp.datasets import registry
from dhp.judging import PROTOCOLS
from dhp.judging.gemba import GEMBA_PROTOCOLS, gemba_messages, gemba_parse, gemba_protocol, gemba_score

ROOT = registry.data_root() / "gemba" / "gemba"


def _load(name: str):
    """Upstream's module from the data root, its third-party imports stood in for."""
    for mod in ("termcolor", "openai", "tqdm", "ipdb"):
        try:
            importlib.import_module(mod)
        except ImportError:  # a stand-in for what this environment lacks (GptApi's client is replaced below)
            stub = types.ModuleType(mod)
            stub.colored = lambda text, *a, **k: str(text)
            stub.tqdm = lambda it, **k: it
            sys.modules[mod] = stub
    spec = importlib.util.spec_from_file_location(f"gemba_upstream_{name}", ROOT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def upstream():
    return _load("prompt"), _load("gpt_api")


def _replies() -> list[str]:
    """Hand-picked and generated replies: numbers in GEMBA's accepted forms and out of range, stars and star words,
    GEMBA's class names (read from the data root, never written here: one, two, none, other case), mixtures, junk."""
    rng = random.Random(35)
    classes = list(gemba_protocol("gemba:classes").classes)
    fixed = ["85", "Score: 85", "85/100", "['85']", '["85"]', "[85]", "100", "101", "-5", "0", "", "  42 ",
             "I'd give it 85 out of 100", "85.5", "Score: 85/100", "٣", "['٣']", "4 stars", "****", "★★★", "five",
             "Five stars: the best", "1 star", "one star, two stars", "Stars: 3", "3 stars (out of 5)", "six",
             "0 stars", "*****\n5 stars"]
    fixed += [c for c in classes] + [c.upper() + "." for c in classes] + [f"Class: {c.lower()}" for c in classes]
    fixed += [f"{a} / {b}" for a, b in zip(classes, classes[1:])] + [c.split(",")[0] for c in classes]
    words = ["85", "100", "/100", "3", "stars", "star", "five", "two", "*", "★", "Score:", "\n", "the", "[", "'",
             "]", "0", "out of", "one", "-", "/", "5", *classes]
    generated = ["".join(rng.choice([" ", ""]) + rng.choice(words) for _ in range(rng.randint(1, 5)))
                 for _ in range(3000)]
    return fixed + generated


@pytest.mark.parametrize("name", GEMBA_PROTOCOLS)
def test_answer_rule_equals_upstreams_validate_answer(upstream, name):
    prompt, _ = upstream
    proto = gemba_protocol(f"gemba:{name}")
    rule = prompt.prompts[f"GEMBA-{name}"]["validate_answer"]
    checked = 0
    for reply in _replies():
        text = reply.strip()  # GptApi strips every reply before parsing it
        try:
            want = rule(text)
        except ValueError:  # upstream raises on "['']": no answer either way
            continue
        assert gemba_parse(proto, reply) == want, (name, reply)
        checked += 1
    assert checked > 3000


class Scripted(Backend):
    """Replies from a script per call, recording every request."""

    identity = "fake:gemba-scripted"
    model = "scripted"
    n_ctx = None
    accepts_no_max_tokens = True  # as an OpenAI-compatible server

    def __init__(self, replies):
        self.replies, self.requests = list(replies), []

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            self.requests.append(r)
            res = Completion(self.replies.pop(0), None, 10, 1, None, None)
            out.append(res)
            if on_result:
                on_result(i, res)
        return out


def _upstream_calls(gpt_api, prompt_text, rule, replies, max_tokens):
    """The parameters GEMBA's GptApi.request sends for one prompt, its client answering ``replies`` in turn."""
    sent = []

    class Choice:
        def __init__(self, text):
            self.message = types.SimpleNamespace(content=text)
            self.finish_reason = "stop"

    class Client:
        def __init__(self):
            self.chat = types.SimpleNamespace(completions=types.SimpleNamespace(create=self.create))

        def create(self, **parameters):
            sent.append(parameters)
            return types.SimpleNamespace(choices=[Choice(replies[len(sent) - 1])])

    class Cache(dict):  # upstream keys its disk cache by the request dict
        def __contains__(self, k):
            return super().__contains__(repr(k))

        def __getitem__(self, k):
            return super().__getitem__(repr(k))

        def __setitem__(self, k, v):
            super().__setitem__(repr(k), v)

    api = object.__new__(gpt_api.GptApi)
    api.verbose, api.client = False, Client()
    answers = api.request(prompt_text, "model", rule, cache=Cache(), max_tokens=max_tokens)
    return sent, answers[0]["answer"]


@pytest.mark.parametrize("name", ["DA_ref", "SQM", "stars_ref", "classes_ref"])
def test_messages_temperatures_and_retries_equal_what_gemba_sends(upstream, name, tmp_path):
    prompt, gpt_api = upstream
    seg = {"source": "源文本 {x}", "target": "A target with {braces}", "reference": "The reference"}
    data = {"source_seg": seg["source"], "target_seg": seg["target"], "reference_seg": seg["reference"],
            "source_lang": prompt.language_codes["zh"], "target_lang": prompt.language_codes["en"]}
    entry = prompt.prompts[f"GEMBA-{name}"]
    text = entry["prompt"].format(**data)
    proto = gemba_protocol(f"gemba:{name}")
    good = {"DA_ref": "85", "SQM": "Score: 70", "stars_ref": "four stars"}.get(name) or proto.classes[-1]
    replies = ["I cannot judge this.", "Hmm, 1 or 2 or 3?", good]
    sent, answer = _upstream_calls(gpt_api, text, entry["validate_answer"], replies, None)  # as gemba_da.py
    assert gemba_messages(proto, **seg) == sent[0]["messages"] == [{"role": "user", "content": text}]
    judge = Scripted(replies)
    out = gemba_score(pd.DataFrame([seg]), judge, proto, cache=tmp_path / "cache.sqlite")
    assert [r.temperature for r in judge.requests] == [p["temperature"] for p in sent] == [0.0, 0.1, 0.2]
    assert all(r.message_dicts() == p["messages"] for r, p in zip(judge.requests, sent))
    # gemba_da.py passes no max_tokens (not even the classes prompts' 100), and neither does the project
    assert all("max_tokens" not in p for p in sent) and all(r.max_tokens is None for r in judge.requests)
    assert not any("max_tokens" in d for d in proto.differences) and "no max_tokens" in proto.identity
    assert out["score"].iloc[0] == answer and out["attempt"].iloc[0] == 2 and out["failure"].iloc[0] == ""


def test_no_valid_answer_up_to_the_limit_is_nan_with_its_reason(tmp_path):
    proto = gemba_protocol("gemba:DA")
    judge = Scripted(["no idea"] * 20)
    out = gemba_score(pd.DataFrame([{"source": "s", "target": "t"}]), judge, proto, cache=tmp_path / "c.sqlite")
    assert len(judge.requests) == 11 and judge.requests[-1].temperature == 1.0  # t = 0..10, sent as t/10
    assert pd.isna(out["score"].iloc[0]) and "no valid answer up to temperature 1" in out["failure"].iloc[0]


def test_every_gemba_protocol_is_registered_and_reads_its_own_template():
    templates = set()
    for name in GEMBA_PROTOCOLS:
        assert f"gemba:{name}" in PROTOCOLS
        proto = gemba_protocol(f"gemba:{name}")
        assert proto.use_ref == name.endswith("_ref")
        templates.add(proto.identity.split(" ")[1])
    assert len(templates) == 8
    with pytest.raises(Exception, match="Unknown GEMBA protocol"):
        gemba_protocol("gemba:MQM")
