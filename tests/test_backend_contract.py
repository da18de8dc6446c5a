"""Every backend family that can run here passes the same contract (tests/backend_contract.py): the embedded
llama.cpp judge, the baseline judges, an OpenAI-compatible server (a real llama_cpp.server on loopback), and a
scripted test backend registered the way any new backend is (one factory with register_backend)."""

from __future__ import annotations

import math

import pytest

from backend_contract import check_backend
from dhp.backends import BACKENDS, Backend, Completion, get_backend, register_backend
from dhp.errors import DHPError


class Echo(Backend):
    """A scripted backend: replies '3' with fixed logprobs, fails prompts over 200 characters."""

    identity = "echo:test"
    model = "echo"
    supports_loglikelihood = False

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            if len(r.messages[-1][1]) > 200:
                res = RuntimeError("context overflow: prompt too long")
            else:
                res = Completion("3", [{"3": -0.1, "4": -2.4}] if r.logprobs else None, 10, 1, None,
                                 ["3"] * r.n if r.n > 1 else None)
            out.append(res)
            if on_result:
                on_result(i, res)
        return out


def test_a_registered_family_is_found_by_its_spec_and_passes():
    @register_backend("echo", example="echo:<anything>")
    def _make(rest, **options):
        return Echo()

    try:
        b = get_backend("echo:whatever")
        assert isinstance(b, Echo)
        got = check_backend(b, long_prompt="x" * 500)
        assert got["chat"] and got["failure_is_per_request"]
    finally:
        BACKENDS.pop("echo")
    with pytest.raises(DHPError, match="Unknown judge backend 'echo'"):
        get_backend("echo:whatever")


def test_the_contract_catches_a_backend_that_breaks_it():
    class Liar(Echo):
        def chat_many(self, requests, on_result=None):
            return super().chat_many(requests[:-1], on_result)  # drops a request

    with pytest.raises(AssertionError, match="one result per request"):
        check_backend(Liar())


@pytest.mark.parametrize("name", ["rouge_l_src", "chrf_src", "length_ratio"])
def test_baselines(name):
    got = check_backend(get_backend(f"baseline:{name}"))
    assert got["chat_refused"] and got["modes"] == ("metric",)
    # a Chinese source against an English candidate: the baselines cannot apply, NaN with its reason
    assert math.isnan(got["metric"][1].value) and got["metric"][1].reason


@pytest.mark.slow
def test_embedded():
    b = get_backend("embedded")
    got = check_backend(b, long_prompt="The cat sat. " * 2000)
    assert got["chat"] and got["loglikelihood"] and got["failure_is_per_request"]


@pytest.mark.slow
def test_openai_compatible_server():
    from servers import start_llama_server

    server = start_llama_server(model_alias="smollm2-135m", n_threads=1, timeout=180)
    try:
        b = get_backend(f"openai:smollm2-135m@{server.base_url}")
        got = check_backend(b, long_prompt="The cat sat. " * 2000)
        assert got["chat"] and got["failure_is_per_request"]
    finally:
        server.stop()


def test_a_server_that_refuses_several_greedy_replies_is_asked_one_by_one():
    """vLLM answers HTTP 400 "n must be 1 when using greedy sampling" to sample mode's n replies at temperature 0;
    the backend then asks for the replies singly instead of turning every sample-mode row into NaN."""
    from servers import ScriptedOpenAI, chat_completion

    def greedy(path: str, body: dict):
        if body.get("n", 1) > 1 and body["temperature"] == 0:
            return 400, {"error": {"message": "n must be 1 when using greedy sampling, got 3",
                                   "type": "BadRequestError", "code": 400}}
        return chat_completion("4", model="greedy")

    with ScriptedOpenAI(greedy, model="greedy") as srv:
        from dhp.backends import ChatRequest, OpenAIBackend

        b = OpenAIBackend("greedy", srv.base_url, max_retries=0)
        out = b.chat_many([ChatRequest.make([{"role": "user", "content": "score?"}], 4, 0.0, 0, None, n=3)])
        asked = [body.get("n", 1) for _, body in srv.requests]
        assert isinstance(out[0], Completion) and out[0].texts == ["4", "4", "4"]
        assert asked == [3, 1, 1, 1]
        b.chat_many([ChatRequest.make([{"role": "user", "content": "again?"}], 4, 0.0, 0, None, n=2)])
        asked = [body.get("n", 1) for _, body in srv.requests]
        assert asked[4:] == [1, 1]  # remembered: no second refused request


def test_the_docs_echo_backend_passes_the_contract_the_page_says_it_passes():
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text(encoding="utf-8")
    code = re.search(r"<!-- file: dhp/backends/echo.py -->\n```python\n(.*?)\n```", page, re.S).group(1)
    scope: dict = {"__name__": "docs_echo_test"}
    exec(compile(code, "docs/extending.md:echo.py", "exec"), scope)
    try:
        got = check_backend(get_backend("echo:1"))
        assert got["modes"] == ("sample", "metric") and got["metric"][0].value == 3.0
    finally:
        BACKENDS.pop("echo")


def test_a_mode_the_backend_cannot_serve_is_refused_before_any_call(tmp_path):
    from dhp import methods

    calls = []

    class NoLogprobs(Echo):
        identity = "nolog:test"
        supports_logprobs = False

        def chat_many(self, requests, on_result=None):
            calls.append(len(requests))
            return super().chat_many(requests, on_result)

    b = NoLogprobs()
    assert b.modes() == ("sample",)
    with pytest.raises(DHPError, match=r"cannot serve mode 'logprobs'; it serves: sample .*Fix: use --mode sample"):
        methods.run("dhp", run_dir=str(tmp_path), judge=b, mode="logprobs", n_items=2, figures=False)
    assert calls == [] and not (tmp_path / "scores.parquet").exists()
