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
from dhp.datasets import declared_files
from dhp.judging import PROTOCOLS
from dhp.judging.gemba import GEMBA_PROTOCOLS, gemba_messages, gemba_parse, gemba_protocol, gemba_score

ROOT = declared_files.data_root() / "gemba" / "gemba"


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


# ------------------------------------------------------------------ every protocol on the quick segments, error paths

_PROSE = "lorem ipsum " * 40  # about 80 tokens of prose before the answer: past the 64 tokens the project once sent


def _server(proto, text: str, temperature: float, max_tokens):
    """A scripted server, the same for GEMBA's client and the project's backend: (content or None, finish_reason)
    from the prompt and temperature — a null content, a reply the server cuts off (no max_tokens), a reply without
    a valid answer (GEMBA asks again hotter), or the answer after ~80 tokens of prose; with a max_tokens under 100
    the reply is cut there."""
    import hashlib

    h = int(hashlib.sha256(f"{text}|{temperature}".encode()).hexdigest(), 16)
    kind = h % 10
    if kind == 0:
        return None, "stop"
    if kind == 1:
        return "The translation", "length"
    if kind in (2, 3, 4):
        return "I cannot judge this translation.", "stop"
    answer = {"number": str(h % 101), "stars": "★" * (1 + h % 5),
              "classes": proto.classes[h % len(proto.classes)] if proto.classes else ""}[proto.rule]
    if max_tokens is not None and max_tokens < 100:
        return _PROSE[: 2 * max_tokens], "length"
    return f"{_PROSE}\n{answer}", "stop"


class ScriptedServer(Backend):
    """The project's side of :func:`_server`: what an OpenAI-compatible server's reply becomes (parse_chat)."""

    identity = "fake:gemba-server"
    model = "server"
    n_ctx = None
    accepts_no_max_tokens = True

    def __init__(self, proto):
        self.proto, self.requests = proto, []

    def chat_many(self, requests, on_result=None):
        from dhp.backends.openai_server import OpenAIBackend

        out = []
        for i, r in enumerate(requests):
            self.requests.append(r)
            content, finish = _server(self.proto, r.messages[-1][1], r.temperature, r.max_tokens)
            res = OpenAIBackend.parse_chat({"choices": [{"message": {"content": content}, "finish_reason": finish}],
                                            "usage": {"prompt_tokens": 10, "completion_tokens": 3}})
            out.append(res)
            if on_result:
                on_result(i, res)
        return out


def _upstream_answer(gpt_api, proto, text, rule):
    """GEMBA's GptApi.request for one prompt (as gemba_da.py calls it: no max_tokens), its client :func:`_server`:
    the parameters of every call and the answer gemba_da.py keeps (parsed_answers[0])."""
    sent = []

    class Client:
        def __init__(self):
            self.chat = types.SimpleNamespace(completions=types.SimpleNamespace(create=self.create))

        def create(self, **parameters):
            sent.append(parameters)
            content, finish = _server(proto, parameters["messages"][-1]["content"], parameters["temperature"],
                                      parameters.get("max_tokens"))
            choice = types.SimpleNamespace(message=types.SimpleNamespace(content=content), finish_reason=finish)
            return types.SimpleNamespace(choices=[choice])

    class Cache(dict):
        def __contains__(self, k):
            return super().__contains__(repr(k))

        def __getitem__(self, k):
            return super().__getitem__(repr(k))

        def __setitem__(self, k, v):
            super().__setitem__(repr(k), v)

    api = object.__new__(gpt_api.GptApi)
    api.verbose, api.client = False, Client()
    answers = api.request(text, "model", rule, cache=Cache())
    return sent, answers[0]["answer"]


def _quick_outputs() -> pd.DataFrame:
    """evaluate --protocol gemba:<name> --profile quick's outputs: 6 seeded MQM segments x every MQM-scored system
    but refA (dhp.methods.human_alignment.collect_segments' sample)."""
    from dhp.datasets import wmt22_human as wh
    from dhp.methods.human_alignment import GEMBA_SEGMENTS

    systems = sorted(set(wh.load_mqm_zh_en()["system"].astype(str)) - {"refA"})
    mqm = wh.load_mqm_zh_en(systems=systems)
    pick = pd.Series(sorted(mqm["seg_id"].unique())).sample(n=GEMBA_SEGMENTS["quick"], random_state=0).tolist()
    rows = mqm[mqm["seg_id"].isin(pick)].sort_values(["seg_id", "system"])
    return rows[["seg_id", "system", "source", "target", "reference"]].reset_index(drop=True)


@pytest.mark.parametrize("name", GEMBA_PROTOCOLS)
def test_every_quick_segment_gets_gembas_own_requests_and_scores_on_every_error_path(upstream, name, tmp_path):
    """All 8 protocols x the 90 quick outputs: the calls (message, temperature, no max_tokens) and the final score
    equal those of GEMBA's GptApi.request on the same scripted server, with null contents, replies cut off by the
    server, replies without a valid answer (asked again hotter) and answers after 80 tokens of prose."""
    prompt, gpt_api = upstream
    proto = gemba_protocol(f"gemba:{name}")
    entry = prompt.prompts[f"GEMBA-{name}"]
    frame = _quick_outputs()
    assert len(frame) == 90
    judge = ScriptedServer(proto)
    out = gemba_score(frame, judge, proto, cache=tmp_path / "c.sqlite")
    mine: dict[str, list] = {}
    for r in judge.requests:
        mine.setdefault(r.messages[-1][1], []).append((r.message_dicts(), r.temperature, r.max_tokens))
    kinds = set()
    for row, got in zip(frame.itertuples(), out.itertuples()):
        data = {"source_seg": row.source, "target_seg": row.target, "reference_seg": row.reference,
                "source_lang": prompt.language_codes["zh"], "target_lang": prompt.language_codes["en"]}
        text = entry["prompt"].format(**data)
        sent, answer = _upstream_answer(gpt_api, proto, text, entry["validate_answer"])
        assert mine[text] == [(p["messages"], p["temperature"], p.get("max_tokens")) for p in sent], row
        assert (pd.isna(got.score) and answer is None) or got.score == answer, (row, got.failure)
        kinds |= {_server(proto, text, p["temperature"], None)[1] + ("-null" if _server(
            proto, text, p["temperature"], None)[0] is None else "") for p in sent}
        kinds.add("climb" if len(sent) > 1 else "first")
    assert {"stop-null", "length", "climb", "first"} <= kinds  # every path was taken
    assert out["protocol"].eq(proto.identity).all() and "no max_tokens" in proto.identity


def test_a_limit_is_named_and_a_cut_reply_asks_for_more_tokens_never_a_higher_temperature(tmp_path):
    """A max_tokens set by the user (or needed by the backend) follows GEMBA's older rule: the reply cut at the limit
    is asked again with 200 more tokens up to 500, at the same temperature; past that, no answer."""
    proto = gemba_protocol("gemba:DA")
    row = pd.DataFrame([{"source": "s", "target": "t"}])
    judge = ScriptedServer(proto)
    # find a prompt whose t=0 reply is an answer after prose (cut below 100 tokens)
    out = gemba_score(row, judge, proto, cache=tmp_path / "a.sqlite", max_tokens=64)
    kind = _server(proto, judge.requests[0].messages[-1][1], 0.0, None)
    assert "max_tokens 64 (set by the user" in out["protocol"].iloc[0]
    assert any("3dd2c49" in d for d in proto.with_limit(64).differences)
    if kind[1] == "stop" and kind[0] and kind[0].startswith("lorem"):
        assert [(r.temperature, r.max_tokens) for r in judge.requests] == [(0.0, 64), (0.0, 264)]
        assert out["score"].notna().all()

    class Prose(ScriptedServer):  # every reply is long: cut at 20, 220, 420 (20 + 600 > 500: no more asked)
        def chat_many(self, requests, on_result=None):
            out = []
            for i, r in enumerate(requests):
                self.requests.append(r)
                res = Completion("lorem " * 10, None, 10, r.max_tokens, None, None, finish_reason="length")
                out.append(res)
                if on_result:
                    on_result(i, res)
            return out

    judge = Prose(proto)
    judge.accepts_no_max_tokens = False  # a backend that needs a bound gets GEMBA's old start, 20
    out = gemba_score(row, judge, proto, cache=tmp_path / "b.sqlite")
    assert [(r.temperature, r.max_tokens) for r in judge.requests] == [(0.0, 20), (0.0, 220), (0.0, 420)]
    assert pd.isna(out["score"].iloc[0]) and "cut off at max_tokens 420" in out["failure"].iloc[0]
    assert "max_tokens 20 (set by the backend" in out["protocol"].iloc[0]


def test_a_null_content_is_no_answer_and_asks_nothing_more(tmp_path):
    proto = gemba_protocol("gemba:DA")

    class Null(ScriptedServer):
        def chat_many(self, requests, on_result=None):
            from dhp.backends.openai_server import OpenAIBackend

            out = []
            for i, r in enumerate(requests):
                self.requests.append(r)
                res = OpenAIBackend.parse_chat({"choices": [{"message": {"content": None}, "finish_reason": "stop"}]})
                out.append(res)
                if on_result:
                    on_result(i, res)
            return out

    judge = Null(proto)
    out = gemba_score(pd.DataFrame([{"source": "s", "target": "t"}]), judge, proto, cache=tmp_path / "c.sqlite")
    assert len(judge.requests) == 1 and pd.isna(out["score"].iloc[0])
    assert "no content (null)" in out["failure"].iloc[0]
    again = gemba_score(pd.DataFrame([{"source": "s", "target": "t"}]), judge, proto, cache=tmp_path / "c.sqlite")
    assert len(judge.requests) == 1 and "no content (null)" in again["failure"].iloc[0]  # the cache keeps "null"
