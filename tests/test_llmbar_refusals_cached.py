"""LLMBar's refusals on a loopback OpenAI-compatible server (issue 50): the refusals evaluate.py handles ("Please
reduce" -> ask shorter, "content management policy" -> the empty reply) are answers, cached with their reason, so a
finished run reruns with 0 posts and the same rows, and a resumed run asks only what was never answered; any other
HTTP 400 is a failed call, never asked shorter; a failed auxiliary call gives no verdict, and a rerun asks it again.
Skipped without LLMBar's templates."""

from __future__ import annotations

import pandas as pd
import pytest

from dhp.backends.openai_server import OpenAIBackend
from dhp.cache import Cache
from dhp.datasets.llmbar import load_llmbar
from dhp.judging.strategies import llmbar_protocol, run_strategies

from servers import ScriptedOpenAI, chat_completion

TOO_LONG = ("This model's maximum context length is 8192 tokens. However, you requested 8230 tokens (8180 in the "
            "messages, 50 in the completion). Please reduce the length of the messages or completion.")
FILTERED = ("The response was filtered due to the prompt triggering Azure OpenAI's content management policy. "
            "Please modify your prompt and retry.")
UNRELATED = "Invalid 'max_tokens': integer above maximum value. Expected a value <= 40, but got 50 instead."


def _error(message: str, code: str | None = None) -> tuple[int, dict]:
    return 400, {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}


def _judge(srv, **kw) -> OpenAIBackend:
    return OpenAIBackend("stub", srv.base_url, max_retries=0, **kw)


def _posts(srv) -> int:
    return sum(1 for path, _ in srv.requests if path.endswith("/chat/completions"))


def _refusing(long: set, filtered: set):
    """Instructions in ``long``: too long above 40 max_tokens; in ``filtered``: refused by the content filter."""
    def reply(path, body):
        text = body["messages"][-1]["content"]
        if any(i in text for i in filtered):
            return _error(FILTERED, "content_filter")
        if any(i in text for i in long) and body["max_tokens"] > 40:
            return _error(TOO_LONG, "context_length_exceeded")
        return chat_completion("Output (a)")
    return reply


def test_a_finished_run_with_60_refused_pairs_reruns_with_0_posts_and_the_same_rows(tmp_path):
    pairs = load_llmbar(["Natural", "Adversarial_Neighbor", "Adversarial_GPTInst"], n_items=60, seed=0)
    pairs = pairs.drop_duplicates("instruction").head(60)
    assert len(pairs) == 60
    inst = list(pairs["instruction"])
    reply = _refusing(set(inst[:30]), set(inst[30:]))
    db = tmp_path / "cache.sqlite"
    with ScriptedOpenAI(reply) as srv:
        first, costs = run_strategies(pairs, ["llmbar:Vanilla"], judge=_judge(srv), cache=db)
        made = _posts(srv)
    # 30 pairs x 2 orders refused at 50 and answered at 40, 30 x 2 filtered once
    assert made == 30 * 2 * 2 + 30 * 2
    assert first["verdict"].iloc[:60].notna().all() and first["verdict"].iloc[60:].isna().all()
    assert first["failure"].iloc[60:].str.contains("content filter: the empty reply").all()
    with ScriptedOpenAI(reply) as srv:
        again, costs2 = run_strategies(pairs, ["llmbar:Vanilla"], judge=_judge(srv), cache=db)
        assert _posts(srv) == 0  # every refusal was an answer, kept
    pd.testing.assert_frame_equal(first, again)  # a cached refusal reads as the fresh one did
    assert int(costs2["calls"].iloc[0]) == int(costs["calls"].iloc[0])


def test_a_resumed_run_asks_only_what_was_never_answered(tmp_path):
    pairs = load_llmbar(["Natural"], n_items=12, seed=0)
    inst = list(pairs["instruction"])
    reply = _refusing(set(inst[:4]), set(inst[4:8]))
    db = tmp_path / "cache.sqlite"
    with ScriptedOpenAI(reply) as srv:
        run_strategies(pairs.head(8), ["llmbar:Vanilla"], judge=_judge(srv), cache=db)  # a run stopped after 8
    with ScriptedOpenAI(reply) as srv:
        run_strategies(pairs, ["llmbar:Vanilla"], judge=_judge(srv), cache=db)
        asked = [body["messages"][-1]["content"] for _, body in srv.requests]
    assert len(asked) == 4 * 2 and all(any(i in a for i in inst[8:]) for a in asked)


def test_an_unrelated_http_400_is_a_failed_call_never_asked_shorter(tmp_path):
    pairs = load_llmbar(["Natural"], n_items=5, seed=0)
    with ScriptedOpenAI(lambda path, body: _error(UNRELATED)) as srv:
        verdicts, _ = run_strategies(pairs, ["llmbar:Vanilla"], judge=_judge(srv), cache=tmp_path / "c.sqlite")
        sent = [body["max_tokens"] for _, body in srv.requests]
    assert sent == [50] * 10  # once each, at evaluate.py's max_tokens: "maximum" is not "Please reduce"
    assert verdicts["verdict"].isna().all() and verdicts["failure"].str.contains("integer above maximum").all()


def test_a_reference_run_whose_auxiliary_calls_fail_gives_no_unmarked_verdict(tmp_path):
    pairs = load_llmbar(["Natural"], n_items=5, seed=0)
    aux_tokens = llmbar_protocol("Reference").auxiliary[0].max_tokens
    db = tmp_path / "cache.sqlite"

    def broken(path, body):  # the auxiliary (reference) calls fail with HTTP 500, the verdicts would be answered
        return (500, {"error": {"message": "boom"}}) if body["max_tokens"] == aux_tokens else \
            chat_completion("Output (a)")

    with ScriptedOpenAI(broken) as srv:
        verdicts, _ = run_strategies(pairs, ["llmbar:Reference"], judge=_judge(srv), cache=db)
        assert _posts(srv) == 5  # the verdict step is not asked without its reference
    assert verdicts["verdict"].isna().all() and len(verdicts) == 10
    assert verdicts["failure"].str.contains("auxiliary step 0 .* failed, so no verdict").all()
    # a transport failure stays a failure: the rerun asks the references again, then the verdicts
    with ScriptedOpenAI(lambda path, body: chat_completion("A reference." if body["max_tokens"] == aux_tokens
                                                           else "Output (a)")) as srv:
        healed, _ = run_strategies(pairs, ["llmbar:Reference"], judge=_judge(srv), cache=db)
        assert _posts(srv) == 5 + 10
    assert healed["verdict"].notna().all() and (healed["failure"] == "").all()


@pytest.mark.parametrize("refusal", ["filtered", "unrelated"])
def test_control_the_refusal_rule_decides_what_is_cached(tmp_path, refusal, monkeypatch):
    """A content-filter refusal is cached (0 posts on the rerun); an unrelated HTTP 400 is not (asked again)."""
    pairs = load_llmbar(["Natural"], n_items=2, seed=0)
    err = _error(FILTERED, "content_filter") if refusal == "filtered" else _error(UNRELATED)
    db = tmp_path / "cache.sqlite"
    for expected in (4, 0 if refusal == "filtered" else 4):
        with ScriptedOpenAI(lambda path, body: err) as srv:
            run_strategies(pairs, ["llmbar:Vanilla"], judge=_judge(srv), cache=db)
            assert _posts(srv) == expected
    with Cache(db) as store:
        assert len(store) == (4 if refusal == "filtered" else 0)
