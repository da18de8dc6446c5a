"""Every request and every final verdict of the 15 LLMBar evaluators equal those of LLMBar's evaluate.py
(princeton-nlp/LLMBar @ 900616b, LLMEvaluator/evaluate.py: openai_completion, completion_with_parsing, annotate), on
scripted replies that take every error path it has: a call refused as too long ("Please reduce": asked again at
int(max_tokens x 0.8), down to the call at 0 that the API refuses and evaluate.py reads as ""), a content-filter refusal
(""), a reply without content (""), replies that parse and replies that do not.

evaluate.py is written out below from its source (its module imports torch, openai 0.x, tiktoken, PaLM and
transformers, so it is not imported here); the configs and templates are read straight from the data root's JSON and
text files, not through the project's reader. The documented differences are the only ones allowed: no logit bias
(tokens_to_avoid / tokens_to_favor name tiktoken ids), no call at max_tokens 0 (its empty reply is used), and a Rating
whose reply is not an integer gives no verdict (evaluate.py: "1" in order 12, "2" in order 21)."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter

import pandas as pd
import pytest

from dhp.backends import Backend, Completion
from dhp.cache import Cache
from dhp.datasets.llmbar import load_llmbar
from dhp.judging.strategies import (LLMBAR_RATING, LLMBAR_STRATEGIES, LLMBAR_SWAP, llmbar_prompts_dir, llmbar_protocol,
                                    run_strategies)

TOO_LONG = "This model's maximum context length is 8192 tokens. Please reduce the length of the messages or completion."
FILTERED = "The response was filtered due to the prompt triggering Azure OpenAI's content management policy."
NO_CONTENT = object()
POOL = ["Output (a)", "Output (b)", "Output (a) is better.", "Output (b) is better.", "Output (a) is better.",
        "Output (a) is better.", "Output (b) is better.",
        "Explanation: Output (a) follows the instruction.\n\nTherefore, Output (b) is better.", "Both are fine.",
        "7", " 3 ", "10", "eight", "\nOutput (b)\n", "Output (a) is better than Output (b)."]


class Refused(Exception):
    """evaluate.py's openai.error.OpenAIError, with the API's message."""


def script(messages: list[dict], max_tokens: int):
    """The scripted API: a reply (or refusal) chosen by the messages' hash; the same on both sides."""
    h = int(hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest(), 16)
    if max_tokens == 0:
        raise Refused("0 is less than the minimum of 1 - 'max_tokens'")
    if h % 7 == 0 and max_tokens > 20 or h % 29 == 0:  # too long until 20 tokens; too long at any length
        raise Refused(TOO_LONG)
    if h % 11 == 0:
        raise Refused(FILTERED)
    if h % 13 == 0:
        return NO_CONTENT
    return POOL[(h // 31) % len(POOL)]


# ------------------------------------------------------------------ evaluate.py, written out

def _chatml(prompt: str) -> list[dict]:  # prompt_to_chatml (the templates' roles carry no extra fields)
    prompt = prompt.strip()
    assert prompt.startswith("<|im_start|>") and prompt.endswith("<|im_end|>")
    out = []
    for p in prompt.split("<|im_start|>")[1:]:
        head, rest = p.split("\n", 1)
        out.append({"role": head.strip(), "content": rest.split("<|im_end|>", 1)[0].strip()})
    return out


def _modules(strategy: str) -> list[dict]:  # get_modules, GPT-4's config
    root = llmbar_prompts_dir()
    out = []
    for c in json.loads((root / "config" / "GPT-4" / f"{strategy}.json").read_text()):
        kw = c["openai_kwargs"]
        out.append({"prompt": (root / "prompts" / c["prompt"]).read_text(), "parsing": c["parsing"],
                    "kwargs": {"max_tokens": kw["max_tokens"], "temperature": kw["temperature"]}})
    return out


def _complete(prompt: str, module: dict, sent: list) -> str:  # openai_completion
    kwargs = dict(module["kwargs"])
    while True:
        messages = _chatml(prompt)
        sent.append((messages, kwargs["max_tokens"], kwargs["temperature"]))
        try:
            out = script(messages, kwargs["max_tokens"])
            return "" if out is NO_CONTENT else out  # "" if "content" not in choice.message
        except Refused as e:
            if "Please reduce" in str(e):
                kwargs["max_tokens"] = int(kwargs["max_tokens"] * 0.8)
            elif "content management policy" in str(e):
                return ""
            elif "0 is less than the minimum of" in str(e):
                return ""
            else:
                raise


def _with_parsing(prompt, module, sent):  # completion_with_parsing
    completion = _complete(prompt, module, sent).strip()
    for value, exp in module["parsing"].items():
        if re.compile(exp).search(completion):
            return completion, value
    return completion, None


def _reverse_label(label):
    return None if label is None else {"1": "2", "2": "1"}[label]


def _reverse_ab(explanation: str) -> str:
    for output in ("Output", "output"):
        explanation = explanation.replace(f"{output} (a)", f"**********{output} (a)**********")
        explanation = explanation.replace(f"{output} (b)", f"##########{output} (b)##########")
        explanation = explanation.replace(f"**********{output} (a)**********", f"{output} (b)")
        explanation = explanation.replace(f"##########{output} (b)##########", f"{output} (a)")
    return explanation


def annotate(instance: dict, strategy: str, sent: list) -> dict:
    """evaluate.py's annotate: the last round's {"swap = False": winner, "swap = True": winner}."""
    modules = _modules(strategy)
    kwargs = {"input": instance["input"]}
    if strategy not in LLMBAR_SWAP:
        for index, module in enumerate(modules[:-1]):
            kwargs[f"auxiliary_input_{index}"] = _complete(module["prompt"].format(input=instance["input"]), module,
                                                           sent).strip()
    if strategy in LLMBAR_RATING:
        scores = []
        for index in (1, 2):
            kwargs["output"] = instance[f"output_{index}"]
            scores.append(_complete(modules[-1]["prompt"].format_map(kwargs), modules[-1], sent))
        try:
            s1, s2 = int(scores[0]), int(scores[1])
            return {"swap = False": "1" if s1 > s2 else "2", "swap = True": "2" if s2 > s1 else "1"}
        except Exception:
            return {"swap = False": "1", "swap = True": "2"}
    module = modules[0] if strategy in LLMBAR_SWAP else modules[-1]
    result = {}
    for swap in (False, True):
        kwargs["output_1"] = instance["output_2" if swap else "output_1"]
        kwargs["output_2"] = instance["output_1" if swap else "output_2"]
        completion, winner = _with_parsing(module["prompt"].format_map(kwargs), module, sent)
        result[f"swap = {swap}"] = {"completion": completion, "winner": _reverse_label(winner) if swap else winner}
    if strategy in LLMBAR_SWAP and {result["swap = False"]["winner"], result["swap = True"]["winner"]} == {"1", "2"}:
        winner2swap = {result["swap = False"]["winner"]: False, result["swap = True"]["winner"]: True}
        e1 = result[f"swap = {winner2swap['1']}"]["completion"]
        e2 = result[f"swap = {winner2swap['2']}"]["completion"]
        module, second = modules[1], {}
        for swap in (False, True):
            kwargs["output_1"] = instance["output_2" if swap else "output_1"]
            kwargs["output_2"] = instance["output_1" if swap else "output_2"]
            x1 = e1 if swap == winner2swap["1"] else _reverse_ab(e1)
            x2 = e2 if swap == winner2swap["2"] else _reverse_ab(e2)
            kwargs["explanation_1"], kwargs["explanation_2"] = (x2, x1) if swap else (x1, x2)
            completion, winner = _with_parsing(module["prompt"].format_map(kwargs), module, sent)
            second[f"swap = {swap}"] = {"winner": _reverse_label(winner) if swap else winner}
        result = second
    return {k: v["winner"] for k, v in result.items()}


# ------------------------------------------------------------------ the project's run on the same API

class ScriptedAPI(Backend):
    """The same scripted API behind the project's call engine, its refusals as the OpenAI backend reports them."""

    identity = "scripted:api"
    model = "scripted"
    deterministic = True

    def __init__(self):
        self.sent: list = []
        self.refusals: Counter = Counter()

    def cache_identity(self) -> dict:
        return {"backend": self.identity}

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            messages = r.message_dicts()
            self.sent.append((messages, r.max_tokens, r.temperature))
            try:
                got = script(messages, r.max_tokens)
                res = Completion(None if got is NO_CONTENT else got, None, 5, 1, 5)
                self.refusals["no content"] += got is NO_CONTENT
            except Refused as e:
                kind = "context overflow: " if "Please reduce" in str(e) else ""
                self.refusals["too long" if kind else "content filter"] += 1
                res = RuntimeError(f"{kind}HTTP 400: {e}")
            out.append(res)
            if on_result is not None:
                on_result(i, res)
        return out


def _pairs() -> pd.DataFrame:
    pairs = load_llmbar(["Natural", "Adversarial_Neighbor"], n_items=8, seed=0)
    # an instruction in two pairs (as Adversarial_Neighbor-94 and GPTInst-78): evaluate.py asks each pair on its own
    return pd.concat([pairs, pairs.iloc[[0]].assign(item_id="twin-of-first")], ignore_index=True)


def _key(sent):
    return sorted(json.dumps(s) for s in sent)


def _upstream(pairs, strategy):
    sent, verdicts = [], {}
    for it in pairs.itertuples():
        got = annotate({"input": it.instruction, "output_1": it.output_1, "output_2": it.output_2}, strategy, sent)
        verdicts[(it.item_id, "12")], verdicts[(it.item_id, "21")] = got["swap = False"], got["swap = True"]
    return sent, verdicts


def test_every_request_and_verdict_of_the_15_evaluators_equals_evaluate_py():
    pairs = _pairs()
    api = ScriptedAPI()
    names = [f"llmbar:{s}" for s in LLMBAR_STRATEGIES]
    verdicts, costs = run_strategies(pairs, names, judge=api, cache=Cache(None))  # one cache, as a run has
    assert min(api.refusals[k] for k in ("too long", "content filter", "no content")) > 0  # every path taken
    swap_second = llmbar_protocol("Swap").modules[1].max_tokens  # 50: no first-round retry lands on it
    assert any(m == swap_second for _, m, _ in _upstream(pairs, "Swap")[0])  # a second round was asked
    sent_all = []
    for s in LLMBAR_STRATEGIES:
        up_sent, up_verdicts = _upstream(pairs, s)
        sent_all += [x for x in up_sent if x[1] >= 1]  # evaluate.py's max_tokens-0 call: refused, not sent here
        v = verdicts[verdicts["strategy"] == f"llmbar:{s}"].set_index(["item_id", "order"])["verdict"]
        for key, up in up_verdicts.items():
            mine = None if pd.isna(v[key]) else v[key]
            if s in LLMBAR_RATING and mine is None:  # evaluate.py's made-up verdict for a non-integer score
                assert (key[1], up) in (("12", "1"), ("21", "2")), (s, key)
                continue
            assert mine == up, (s, key, mine, up)
        assert int(costs.set_index("strategy").at[f"llmbar:{s}", "calls"]) == sum(1 for x in up_sent if x[1] >= 1)
    assert _key(api.sent) == _key(sent_all)  # every request: messages, max_tokens, temperature


def test_shared_requests_are_not_evaluate_pys_procedure():
    # control: the sharing option answers identical requests once, so the requests are no longer evaluate.py's
    pairs = _pairs()
    api = ScriptedAPI()
    run_strategies(pairs, ["llmbar:CoT", "llmbar:Swap", "llmbar:Metrics", "llmbar:Rating_Metrics"], judge=api,
                   cache=Cache(None), share_requests=True)
    sent = [x for s in ("CoT", "Swap", "Metrics", "Rating_Metrics") for x in _upstream(pairs, s)[0] if x[1] >= 1]
    assert len(api.sent) < len(sent)


@pytest.mark.parametrize("reply,expected", [("Output (a)", "1"), ("", None)])
def test_the_scripted_api_and_the_written_out_parser_agree_on_a_plain_reply(reply, expected):
    module = _modules("Vanilla")[0]
    assert (re.search(module["parsing"]["1"], reply) is not None) == (expected == "1")
