"""GEMBA through ``evaluate`` (the function behind ``dhp evaluate``) against GEMBA's own ``GptApi.request`` (loaded
from the data root's gemba/gemba/gpt_api.py, MicrosoftTranslator/GEMBA @ a7a7eff8; nothing of it is copied), both on
the same scripted OpenAI-compatible server (issue 50): every request body the project sends equals upstream's
parameters but for the documented differences, in the same sequence per prompt — HTTP 500 and 429 asked again
unchanged, a content-filter HTTP 400 no answer and nothing more, finish_reason content_filter or length no answer,
null content no answer, no valid answer asked again one temperature step up — and the scores are equal. Also GEMBA's
finish-reason rule read from the cache and at 3dd2c49's limit. Skipped without GEMBA's files."""

from __future__ import annotations

import hashlib
import json
import threading
import types

import pandas as pd
import pytest

from dhp import evaluate as evaluate_module
from dhp.judging.gemba import gemba_protocol, gemba_score

from servers import ScriptedOpenAI, chat_completion
from test_gemba_protocol import Scripted, _load

#: what the project sends differently from GptApi.call_api, each named in GembaProtocol.differences: a seed of 0 is
#: sent; top_p, n, the penalties and stop are not (the servers' defaults)
NOT_SENT = ("top_p", "n", "frequency_penalty", "presence_penalty", "stop")
SEED_SENT = 0
FILTERED = ("The response was filtered due to the prompt triggering Azure OpenAI's content management policy. "
            "Please modify your prompt and retry.")


class _Script:
    """The server's answer to one request, from its prompt and temperature and how often that body was asked: the
    same function answers GEMBA's client and the project's HTTP backend (each with its own count of tries)."""

    def __init__(self):
        self.tries: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, body: dict):
        key = json.dumps({k: body.get(k) for k in ("messages", "temperature", "max_tokens")}, sort_keys=True)
        with self.lock:
            k = self.tries[key] = self.tries.get(key, -1) + 1
        text, t = body["messages"][-1]["content"], body["temperature"]
        kind = int(hashlib.sha256(f"{text}|{t}".encode()).hexdigest(), 16) % 12
        answer = str(int(hashlib.sha256(text.encode()).hexdigest(), 16) % 101)
        if kind == 0 and k == 0:
            return 500, {"error": {"message": "The server had an error", "type": "server_error", "code": None}}
        if kind == 1 and k == 0:
            return 429, {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}
        if kind == 2:
            return 400, {"error": {"message": FILTERED, "type": None, "param": "prompt", "code": "content_filter",
                                   "status": 400}}
        if kind == 3:
            return chat_completion("", finish_reason="content_filter")
        if kind == 4:
            return chat_completion(None)
        if kind == 5:
            return chat_completion("The translation is", finish_reason="length")
        if kind in (6, 7, 8):
            return chat_completion("I cannot judge this translation.")
        return chat_completion(answer)


class _APIError(Exception):
    """An HTTP error as the openai SDK raises it: ``code`` is the error body's code (GptApi reads it)."""

    def __init__(self, status, body):
        super().__init__(f"Error code: {status} - {body}")
        self.status_code, self.code = status, body["error"].get("code")


def _upstream(gpt_api, text: str, rule, script: _Script, model: str):
    """GEMBA's GptApi.request for one prompt as gemba_da.py calls it (no max_tokens), its client the script: every
    parameters dict it sends, and its answer."""
    sent = []

    def create(**parameters):
        sent.append(parameters)
        out = script(parameters)
        status, obj = out if isinstance(out, tuple) else (200, out)
        if status != 200:
            raise _APIError(status, obj)
        choices = [types.SimpleNamespace(message=types.SimpleNamespace(content=c["message"]["content"]),
                                         finish_reason=c["finish_reason"]) for c in obj["choices"]]
        return types.SimpleNamespace(choices=choices)

    api = object.__new__(gpt_api.GptApi)
    api.verbose = False
    api.client = types.SimpleNamespace(chat=types.SimpleNamespace(completions=types.SimpleNamespace(create=create)))
    answers = api.request(text, model, rule, cache=_ReprCache())
    return sent, answers[0]["answer"]


class _ReprCache(dict):
    """Upstream keys its disk cache by the request dict: here by its repr (a fresh one per prompt)."""

    def __contains__(self, k):
        return super().__contains__(repr(k))

    def __getitem__(self, k):
        return super().__getitem__(repr(k))

    def __setitem__(self, k, v):
        super().__setitem__(repr(k), v)


class _Stop(Exception):
    pass


@pytest.fixture()
def gemba_run(tmp_path, monkeypatch):
    """``evaluate --protocol gemba:DA_ref --profile quick`` on the scripted server, stopped once the method's calls are
    made (the leaderboard of ~80 recorded judges is not what is tested here): the server's requests, the scores."""
    gpt_api = _load("gpt_api")
    monkeypatch.setattr(gpt_api.time, "sleep", lambda s: None)  # upstream waits 1 s before asking again

    def stop(*a, **k):
        raise _Stop

    monkeypatch.setattr(evaluate_module, "run_leaderboard", stop)
    script = _Script()
    run = tmp_path / "run"
    def reply(path, body):  # the backend's tokenize probes are not found: it estimates token counts
        return script(body) if path.endswith("/chat/completions") else (404, {"error": {"message": "not found"}})

    with ScriptedOpenAI(reply) as srv:
        with pytest.raises(_Stop):
            evaluate_module.evaluate(f"openai:stub@{srv.base_url}", "quick", run_dir=str(run), yes=True,
                                     protocols=["gemba:DA_ref"], out=open(tmp_path / "out.txt", "w"))
        requests = [body for path, body in srv.requests if path.endswith("/chat/completions")]
    return gpt_api, requests, pd.read_parquet(run / "segment_scores.parquet")


def test_evaluate_sends_gembas_requests_in_gembas_sequence_and_scores_as_gemba(gemba_run):
    gpt_api, requests, scores = gemba_run
    prompt = _load("prompt")
    entry = prompt.prompts["GEMBA-DA_ref"]
    mine: dict[str, list] = {}
    for body in requests:
        mine.setdefault(body["messages"][-1]["content"], []).append(body)
    live = scores[scores["judge"].str.startswith("openai:stub@")]
    assert len(live) == 90 and len(mine) > 40
    from dhp.datasets import wmt22_human as wh

    mqm = wh.load_mqm_zh_en()
    paths = set()
    for row in live.itertuples():
        seg = mqm[(mqm["seg_id"] == row.seg_id) & (mqm["system"] == row.system)].iloc[0]
        text = entry["prompt"].format(source_seg=seg.source, target_seg=seg.target, reference_seg=seg.reference,
                                      source_lang=prompt.language_codes["zh"], target_lang=prompt.language_codes["en"])
        sent, answer = _upstream(gpt_api, text, entry["validate_answer"], _Script(), "stub")
        # every field of every request, in upstream's order: upstream's parameters less what the project documents it
        # does not send, plus the seed it documents it sends
        want = [{**{k: v for k, v in p.items() if k not in NOT_SENT}, "seed": SEED_SENT} for p in sent]
        assert mine[text] == want, (row.seg_id, row.system)
        assert (pd.isna(row.score) and answer is None) or row.score == answer, (row.seg_id, row.system, row.failure)
        paths |= {json.dumps(_Script()(p), sort_keys=True)[:40] for p in sent}
        paths.add(f"{len(sent)} calls")
    # the paths were taken: errors asked again, a filtered call, a content_filter finish, null, cut off, climbs
    assert {"[500", "[429", "[400"} <= {p[:4] for p in paths} and "1 calls" in paths and "3 calls" in paths


# ------------------------------------------------------------------ finish reasons, from the cache and at a limit

class _Finish(Scripted):
    """Replies with a finish reason each: (text, finish_reason, completion_tokens)."""

    def chat_many(self, requests, on_result=None):
        from dhp.backends import Completion

        out = []
        for i, r in enumerate(requests):
            self.requests.append(r)
            text, finish, n = self.replies.pop(0)
            res = Completion(text, None, 10, n, None, None, finish_reason=finish)
            out.append(res)
            if on_result:
                on_result(i, res)
        return out


def test_a_content_filter_finish_is_no_answer_fresh_and_cached(tmp_path):
    # a7a7eff8's request_api: finish_reason other than "stop" without max_tokens -> [] -> no answer, nothing more
    proto = gemba_protocol("gemba:DA")
    row = pd.DataFrame([{"source": "s", "target": "t"}])
    judge = _Finish([("85", "content_filter", 1)])
    fresh = gemba_score(row, judge, proto, cache=tmp_path / "c.sqlite")
    assert len(judge.requests) == 1 and pd.isna(fresh["score"].iloc[0])
    assert "finish_reason 'content_filter'" in fresh["failure"].iloc[0]
    cached = gemba_score(row, judge, proto, cache=tmp_path / "c.sqlite")
    assert len(judge.requests) == 1  # from the cache, which kept the finish reason: judged as the fresh reply was
    pd.testing.assert_frame_equal(fresh, cached)


def test_with_a_limit_a_content_filter_finish_is_asked_again_and_a_reply_ending_at_the_limit_is_kept(tmp_path):
    # 3dd2c49's request_api reads the finish reason alone: not "stop" -> max_tokens + 200 (none above 500)
    proto = gemba_protocol("gemba:DA")
    row = pd.DataFrame([{"source": "s", "target": "t"}])
    judge = _Finish([("", "content_filter", 0)] * 3)
    out = gemba_score(row, judge, proto, cache=tmp_path / "a.sqlite", max_tokens=20)
    assert [r.max_tokens for r in judge.requests] == [20, 220, 420] and pd.isna(out["score"].iloc[0])
    assert "finish_reason 'content_filter' at max_tokens 420" in out["failure"].iloc[0]
    exact = _Finish([("85", "stop", 20)])  # ended normally with exactly 20 tokens: complete, not asked again
    out = gemba_score(row, exact, proto, cache=tmp_path / "b.sqlite", max_tokens=20)
    assert len(exact.requests) == 1 and out["score"].iloc[0] == 85


# ------------------------------------------------------------------ refusals by error code, and a rerun's calls

def test_a_filtered_request_is_no_answer_cached_as_such_and_any_other_400_stays_a_failure(tmp_path):
    """GptApi.request_api returns no answer, asking nothing more, for an error whose ``code`` is "content_filter" (or
    "invalid_model_output"); the project caches that refusal, so a rerun posts nothing for it (issue 50: "a rerun makes
    0 calls"). Another HTTP 400 (an unrelated code) is a failed call: not cached, asked again by a rerun, never read as
    a refusal because its message mentions a filter."""
    from dhp.backends import OpenAIBackend

    def reply(path, body):
        if not path.endswith("/chat/completions"):
            return 404, {"error": {"message": "not found"}}
        text = body["messages"][-1]["content"]
        if "filtered-one" in text:
            return 400, {"error": {"message": FILTERED, "type": None, "param": "prompt", "code": "content_filter"}}
        if "odd-one" in text:  # the filter's wording, another code: not GEMBA's refusal
            return 400, {"error": {"message": FILTERED, "type": "invalid_request_error", "code": "invalid_value"}}
        return chat_completion("87")

    proto = gemba_protocol("gemba:DA")
    rows = pd.DataFrame([{"source": "a", "target": "filtered-one"}, {"source": "b", "target": "odd-one"},
                         {"source": "c", "target": "plain"}])
    db = tmp_path / "c.sqlite"
    with ScriptedOpenAI(reply) as srv:
        judge = OpenAIBackend("stub", srv.base_url, max_retries=0)
        first = gemba_score(rows, judge, proto, cache=db)
        posts = [b["messages"][-1]["content"] for p, b in srv.requests if p.endswith("/chat/completions")]
        assert sum("filtered-one" in t for t in posts) == 1  # no answer, nothing more asked (no higher temperature)
        assert sum("odd-one" in t for t in posts) == 1 and sum("plain" in t for t in posts) == 1
        srv.requests.clear()
        second = gemba_score(rows, OpenAIBackend("stub", srv.base_url, max_retries=0), proto, cache=db)
        posts = [b["messages"][-1]["content"] for p, b in srv.requests if p.endswith("/chat/completions")]
    assert first["score"].tolist()[2] == second["score"].tolist()[2] == 87
    assert first["score"].iloc[:2].isna().all() and second["score"].iloc[:2].isna().all()
    assert [sum(s in t for t in posts) for s in ("filtered-one", "odd-one", "plain")] == [0, 1, 0]
    for out in (first, second):
        assert out["failure"].iloc[0].startswith("no answer: the server refused the request")
        assert "content_filter" in out["failure"].iloc[0]
        assert out["failure"].iloc[1].startswith("call failed:") and "invalid_value" in out["failure"].iloc[1]
