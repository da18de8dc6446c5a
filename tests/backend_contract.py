"""The contract every judge backend keeps (in the spirit of scikit-learn's ``check_estimator``): ``check_backend(b)``
runs the same checks on any backend — what it says it can do (supports_* flags) it does, with the result types the
call engine stores, and what it cannot do fails with a DHPError naming the fix. tests/test_backend_contract.py runs it
on every registered backend family that can run here."""

from __future__ import annotations

import json
import math

from dhp.backends import Backend, ChatRequest, Completion, LogLikelihood, MetricScore
from dhp.errors import DHPError

SECRET_MARKERS = ("sk-", "Bearer", "api_key")
PROMPT = [{"role": "user", "content": "Rate the fluency of 'The cat sat on the mat.' from 1 to 5. Reply with the number."}]


def check_backend(b: Backend, long_prompt: str | None = None) -> dict:
    """Run every check that applies to ``b``; returns what was checked (for the test's own assertions)."""
    checked = {}
    assert isinstance(b.identity, str) and b.identity, "a backend names itself"
    ident = b.cache_identity()
    text = json.dumps(ident, sort_keys=True)
    assert json.loads(text) == ident and ident == b.cache_identity(), "a stable, JSON-serialisable cache identity"
    assert not any(m in text or m in b.identity for m in SECRET_MARKERS), "no secret in the identity"
    assert "key" not in repr(b).lower() or "sk-" not in repr(b), "repr shows no key"
    n = b.count_tokens("The cat sat on the mat. " * 5)
    assert isinstance(n, int) and n > 0, "token counts are positive integers"
    assert len(b.truncate_to_tokens("word " * 200, 5)) < len("word " * 200), "truncation shortens"
    checked["tokens"] = n

    chat_capable = not getattr(b, "supports_metric", False)
    if chat_capable:
        reqs = [ChatRequest.make(PROMPT, 4, 0.0, 0, None), ChatRequest.make(PROMPT, 4, 0.0, 0, 5),
                ChatRequest.make(PROMPT, 4, 0.0, 0, None, n=2)]
        seen = []
        out = b.chat_many(reqs, on_result=lambda i, r: seen.append(i))
        assert len(out) == len(reqs) and sorted(seen) == [0, 1, 2], "one result per request, each reported once"
        assert all(isinstance(r, Completion) for r in out), f"completions: {out}"
        assert out[0].top_logprobs is None or not reqs[0].logprobs
        if b.supports_logprobs:
            tops = out[1].top_logprobs
            assert tops and all(isinstance(d, dict) and all(v <= 0 for v in d.values()) for d in tops), \
                "logprobs: one {token: logprob <= 0} dict per generated token"
        assert len(out[2].texts or [out[2].text]) == 2, "n = 2 gives two replies"
        checked["chat"] = True
        if long_prompt is not None:  # a request the model cannot take fails only its own entry
            bad = b.chat_many([ChatRequest.make([{"role": "user", "content": long_prompt}], 4),
                               ChatRequest.make(PROMPT, 4)])
            assert isinstance(bad[0], Exception) and isinstance(bad[1], Completion), bad
            checked["failure_is_per_request"] = True
    else:
        try:
            b.chat_many([ChatRequest.make(PROMPT, 4)])
        except DHPError as e:
            assert e.fix, "a backend without chat says what to do instead"
            checked["chat_refused"] = True
    if b.supports_loglikelihood and chat_capable:
        ll = b.loglikelihood_many([("Summary: ", "The cat sat on the mat.")])
        assert isinstance(ll[0], LogLikelihood) and ll[0].n_tokens > 0 and ll[0].logprob_sum <= 0
        assert math.isfinite(ll[0].mean)
        checked["loglikelihood"] = True
    if getattr(b, "supports_metric", False):
        got = b.metric_many([("The cat sat on the mat today.", "The cat sat.", "summarization"),
                             ("猫坐在垫子上。", "The cat sat.", "translation")])
        assert isinstance(got[0], MetricScore) and math.isfinite(got[0].value)
        assert all(isinstance(g, MetricScore) and (math.isfinite(g.value) or g.reason) for g in got), \
            "not applicable is NaN with its reason"
        checked["metric"] = got
    else:
        try:
            b.metric_many([("a", "b", "summarization")])
            raise AssertionError("metric_many should refuse")
        except DHPError as e:
            assert e.fix
    checked["modes"] = b.modes()
    for mode in ("logprobs", "sample", "likelihood", "metric"):  # the modes it cannot serve are refused up front
        if mode not in checked["modes"]:
            try:
                b.check_mode(mode)
                raise AssertionError(f"check_mode({mode!r}) should refuse")
            except DHPError as e:
                assert all(m in str(e) for m in checked["modes"]) and e.fix
    return checked
