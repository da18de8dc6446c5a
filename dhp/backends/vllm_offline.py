"""Offline vLLM (``vllm.LLM``), imported lazily; needs a GPU and was not run while developing this workbench."""

from __future__ import annotations

from typing import Any


from dhp.errors import DHPError
from dhp.backends.base import (
    Backend, Completion, LogLikelihood,
)


class VLLMBackend(Backend):
    """Offline vLLM (GPU). Prefix caching is on, so the judge's grouped order reuses the shared prompt
    prefix; likelihood uses ``prompt_logprobs``. NOT run in this workbench's tests (no GPU here)."""

    def __init__(self, model: str, seed: int = 0, n_ctx: int | None = None, **llm_kwargs: Any):
        try:
            import vllm  # noqa: F401 - heavy, optional, imported only when asked for
        except ImportError as e:
            raise DHPError(f"The vllm backend needs the 'vllm' package, which is not importable ({e}).",
                           "on a Linux machine with an NVIDIA GPU run `pip install -e '.[vllm]'`, "
                           "or use judge='embedded' / 'openai:<model>@<url>'.") from None
        self.model = model
        self.identity = f"vllm:{model}"
        kwargs: dict[str, Any] = {"enable_prefix_caching": True, "seed": seed}
        if n_ctx:
            kwargs["max_model_len"] = n_ctx
        kwargs.update(llm_kwargs)
        self._llm = vllm.LLM(model=model, **kwargs)
        self._tok = self._llm.get_tokenizer()
        self.n_ctx = n_ctx or int(self._llm.llm_engine.model_config.max_model_len)

    def count_tokens(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False))

    def truncate_to_tokens(self, text: str, n_tokens: int) -> str:
        ids = self._tok.encode(text, add_special_tokens=False)
        return text if len(ids) <= n_tokens else self._tok.decode(ids[: max(0, n_tokens)])

    def chat_many(self, requests, on_result=None):
        from vllm import SamplingParams

        reqs = list(requests)
        params = [SamplingParams(temperature=r.temperature, max_tokens=r.max_tokens, seed=r.seed,
                                 logprobs=r.logprobs) for r in reqs]
        outs = self._llm.chat([r.message_dicts() for r in reqs], params, use_tqdm=False)
        results: list[Completion | Exception] = []
        for i, o in enumerate(outs):
            gen = o.outputs[0]
            tops = None
            if gen.logprobs is not None:
                tops = [{lp.decoded_token: float(lp.logprob) for lp in pos.values()} for pos in gen.logprobs]
            res = Completion(gen.text, tops, len(o.prompt_token_ids), len(gen.token_ids),
                             len(o.prompt_token_ids) - int(getattr(o, "num_cached_tokens", 0) or 0))
            results.append(res)
            if on_result is not None:
                on_result(i, res)
        return results

    def loglikelihood_many(self, pairs, on_result=None):
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        ids = []
        for prefix, cont in pairs:
            pre = self._tok.encode(prefix, add_special_tokens=True)
            ids.append((pre, self._tok.encode(cont, add_special_tokens=False)))
        outs = self._llm.generate([TokensPrompt(prompt_token_ids=p + c) for p, c in ids],
                                  SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)
        results: list[LogLikelihood | Exception] = []
        for i, (o, (pre, cont)) in enumerate(zip(outs, ids)):
            full = pre + cont
            s = sum(float(o.prompt_logprobs[t][full[t]].logprob) for t in range(len(pre), len(full)))
            res = LogLikelihood(s, len(cont), len(full), None)
            results.append(res)
            if on_result is not None:
                on_result(i, res)
        return results
