"""What every backend is: the request and result types, the Backend interface, token estimates."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence


from dhp.errors import DHPError
from dhp.extensions import Registry, origin_of, registrar
from dhp.io import file_sha256

Messages = Sequence[dict[str, str]]
OnResult = Callable[[int, Any], None]


@dataclass(frozen=True)
class ChatRequest:
    """One chat call. ``logprobs``: how many top alternatives to return per generated token (None: none).
    ``stop_after``: the embedded backend stops right after generating a token whose text (stripped) is
    one of these; HTTP backends generate up to ``max_tokens`` regardless. ``stop_when``: a stop condition
    named by :func:`dhp.judging.parsing.score_stop` — a backend with ``supports_stop_when`` stops as soon
    as no further text can change the judge's verdict on the reply (:func:`dhp.judging.parsing.reply_decided`);
    part of the cache key when set."""

    messages: tuple[tuple[str, str], ...]  # (role, content) pairs, hashable
    max_tokens: int | None = 256  # None: none sent (a backend with accepts_no_max_tokens only: GEMBA's protocol)
    temperature: float = 0.0
    seed: int | None = 0  # None: no seed is sent (a protocol that never sent one, e.g. LLMBar's)
    logprobs: int | None = None
    stop_after: tuple[str, ...] = ()
    n: int = 1  # replies wanted (sample mode): one request, n replies
    stop_when: str = ""

    @staticmethod
    def make(messages: Messages, max_tokens: int | None = 256, temperature: float = 0.0, seed: int | None = 0,
             logprobs: int | None = None, stop_after: tuple[str, ...] = (), n: int = 1,
             stop_when: str = "") -> "ChatRequest":
        if int(n) < 1:
            raise DHPError(f"A chat request needs n >= 1 replies (got {n}).", "pass n=1 or more.")
        return ChatRequest(tuple((m["role"], m["content"]) for m in messages),
                           None if max_tokens is None else int(max_tokens),
                           float(temperature), None if seed is None else int(seed), logprobs, tuple(stop_after), int(n), str(stop_when))

    def message_dicts(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]


@dataclass
class Completion:
    """A chat result.

    ``top_logprobs``: one {token_text: logprob} dict per generated token (the top alternatives at that
    position), or None when logprobs were not requested or the server gave none.
    ``prompt_tokens_computed``: prompt tokens the backend actually evaluated (smaller than
    ``prompt_tokens`` when a cached prefix was reused); None when the backend cannot tell.
    ``texts``: all replies of a request with ``n > 1`` (``text`` is the first); ``calls``: model calls
    made to get them (1 when the server honoured ``n`` or a deterministic backend repeated its reply).
    """

    text: str
    top_logprobs: list[dict[str, float]] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_computed: int | None = None
    texts: list[str] | None = None
    calls: int = 1
    content_null: bool = False
    finish_reason: str | None = None


#: What a chat row's cache ``value`` records about its first reply (chat rows have no numeric result, so the column
#: is free; None there: a complete reply, as in every cache written before): the server sent no content (null), or
#: cut the reply at max_tokens (finish_reason "length"). :func:`reply_status` reads it back.
REPLY_NULL_CONTENT = -1.0
REPLY_CUT_OFF = -2.0


def reply_status_value(res: "Completion") -> float | None:
    """The cache ``value`` of a chat reply (see REPLY_NULL_CONTENT); None for a complete reply."""
    if getattr(res, "content_null", False):
        return REPLY_NULL_CONTENT
    return REPLY_CUT_OFF if getattr(res, "finish_reason", None) == "length" else None


def reply_status(cached) -> str:
    """"null" (no content), "length" (cut off at max_tokens) or "" of a cached chat reply (dhp.cache.CachedCall)."""
    value = getattr(cached, "value", None)
    return {REPLY_NULL_CONTENT: "null", REPLY_CUT_OFF: "length"}.get(value, "") if value is not None else ""


def reply_finish(cached) -> str | None:
    """The finish_reason the server gave for a chat reply (a fresh Completion or a cached row), as it said it:
    "stop", "length", "content_filter", ...; None where it is not known (a backend that reports none, or a row cached
    before the finish reason was kept: there only a cut-off, REPLY_CUT_OFF, was recorded, read back as "length")."""
    finish = getattr(cached, "finish_reason", None)
    if isinstance(finish, str) and finish:
        return finish
    return "length" if getattr(cached, "value", None) == REPLY_CUT_OFF else None


@dataclass
class LogLikelihood:
    """Sum of log-probabilities of the continuation tokens given the prefix, and their count."""

    logprob_sum: float
    n_tokens: int
    prompt_tokens: int = 0
    prompt_tokens_computed: int | None = None

    @property
    def mean(self) -> float:
        return self.logprob_sum / self.n_tokens if self.n_tokens else math.nan


@dataclass
class MetricScore:
    """A score computed from a text directly (mode "metric": a baseline judge), with why it is NaN when it is."""

    value: float
    reason: str = ""
    prompt_tokens: int = 0
    prompt_tokens_computed: int | None = 0
    calls: int = 1


class TransientError(RuntimeError):
    """A call failed in a way worth retrying (429, 5xx, timeout, malformed response)."""


#: CJK ideographs, kana, hangul and full-width forms: one token per character or more.
_WIDE = re.compile("[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\U00020000-\U0002fa1f]")


def _thirds(text: str) -> int:
    """The estimate's cost of ``text`` in thirds of a token: 6 per wide character, 1 per other one (integers, so
    a long text sums exactly; a regex count, as the estimate runs over every prompt of a paper-size plan)."""
    wide = 0 if text.isascii() else len(_WIDE.findall(text))
    return 6 * wide + (len(text) - wide)


def estimate_tokens(text: str) -> int:
    """Conservative token estimate for a backend without a tokenizer: two tokens per CJK/kana/hangul
    character (large multilingual vocabularies need about one, English-centric byte-level BPEs such as
    SmolLM2's nearly two), one per 3 other characters (BPE vocabularies average ~4 for English). It errs
    towards more tokens, the safe side for fitting a context."""
    return max(1, -(-_thirds(text) // 3))


def truncate_estimated(text: str, n_tokens: int) -> str:
    """The longest prefix of ``text`` whose :func:`estimate_tokens` is at most ``n_tokens``."""
    budget = 3 * max(0, n_tokens)
    if _thirds(text) <= budget:
        return text
    if text.isascii():
        return text[:budget]
    used = 0
    for i, ch in enumerate(text):
        used += 6 if _WIDE.match(ch) else 1
        if used > budget:
            return text[:i]
    return text


def gguf_sha256(path: str | os.PathLike) -> str:
    """sha256 of a model file (memoised by path, size and mtime: see dhp.io.file_sha256)."""
    return file_sha256(path)


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class Backend:
    """Interface every judge backend implements (see module docstring)."""

    identity: str = ""
    model: str = ""
    n_ctx: int | None = None  # context window in tokens, None if unknown
    is_paid: bool = False  # print a cost estimate before running
    supports_logprobs: bool = True
    supports_loglikelihood: bool = True
    #: Honours ``ChatRequest.stop_when`` (the judge sets it only then, so other backends' cache keys stay).
    supports_stop_when: bool = False
    supports_metric: bool = False  # scores (source, candidate) directly: mode "metric" (metric_many)
    #: Generates chat replies (modes "sample" and, with supports_logprobs, "logprobs"). None: it does, unless it
    #: scores texts directly (supports_metric) and does not implement chat_many (a metric-only backend need not say).
    supports_chat: bool | None = None
    #: Same request, same reply (greedy decoding at temperature 0 in process): n replies need one call.
    deterministic: bool = False
    #: Takes a request with ``max_tokens=None`` (sends none: the server's own limit); others need a bound.
    accepts_no_max_tokens: bool = False

    @property
    def fingerprint(self) -> str:
        """The model's content identity (what changes when the model's weights change)."""
        return self.model

    def cache_identity(self) -> dict:
        """Everything besides the prompt and sampling parameters that determines a call's output:
        backend, the model's content identity and output-affecting settings. Part of every cache key;
        never holds a secret."""
        return {"backend": self.identity, "model": self.fingerprint}

    def count_tokens(self, text: str) -> int:
        """Token count of ``text``: the backend's tokenizer where it has one, else
        :func:`estimate_tokens` (conservative: errs towards more tokens, so truncation cuts enough)."""
        return estimate_tokens(text)

    def truncate_to_tokens(self, text: str, n_tokens: int) -> str:
        """Keep the first ``n_tokens`` tokens of ``text`` (by :func:`estimate_tokens` unless overridden)."""
        return truncate_estimated(text, n_tokens)

    def chat(self, messages: Messages, max_tokens: int = 256, temperature: float = 0.0, seed: int = 0,
             logprobs: int | None = None) -> Completion:
        """One chat call; raises DHPError if it cannot be completed."""
        out = self.chat_many([ChatRequest.make(messages, max_tokens, temperature, seed, logprobs)])[0]
        if isinstance(out, Exception):
            raise DHPError(f"The judge call to {self.identity} failed: {out}",
                           "check the server, or raise max_retries/timeout.") from out
        return out

    def chat_many(self, requests: Sequence[ChatRequest], on_result: OnResult | None = None
                  ) -> list[Completion | Exception]:
        """Run many chat calls. Per-call failures (after retries) come back as exceptions in the list;
        configuration errors (bad key, unknown model, unreachable server) raise DHPError at once.
        ``on_result(i, result)`` is called as each result arrives (the judge stores it in the cache)."""
        raise DHPError(f"{self.identity} generates no chat replies.", f"run it in mode {' or '.join(self.modes())}.")

    def loglikelihood(self, prefix: str, continuation: str) -> LogLikelihood:
        out = self.loglikelihood_many([(prefix, continuation)])[0]
        if isinstance(out, Exception):
            raise DHPError(f"The likelihood call to {self.identity} failed: {out}",
                           "check the server, or raise max_retries/timeout.") from out
        return out

    def loglikelihood_many(self, pairs: Sequence[tuple[str, str]], on_result: OnResult | None = None
                           ) -> list[LogLikelihood | Exception]:
        raise DHPError(f"{self.identity} has no token likelihoods (mode 'likelihood').",
                       f"run it in mode {' or '.join(self.modes())}.")

    def chats(self) -> bool:
        """Whether it generates chat replies: ``supports_chat``; unset, every backend does but one that scores texts
        directly (supports_metric) without implementing chat_many."""
        if self.supports_chat is not None:
            return bool(self.supports_chat)
        return not (self.supports_metric and type(self).chat_many is Backend.chat_many)

    def modes(self) -> tuple[str, ...]:
        """The judging modes this backend can serve, read from its supports_* flags (dhp.config.MODES' order)."""
        can = {"logprobs": self.chats() and self.supports_logprobs, "sample": self.chats(),
               "likelihood": self.supports_loglikelihood,
               "metric": self.supports_metric}
        return tuple(m for m in ("logprobs", "sample", "likelihood", "metric") if can[m])

    def check_mode(self, mode: str) -> None:
        """Refuse, before any call, a mode this backend cannot serve, naming the modes it can."""
        if mode in ("logprobs", "sample", "likelihood", "metric") and mode not in self.modes():
            can = self.modes()
            raise DHPError(f"The judge {self.identity} cannot serve mode {mode!r}; it serves: "
                           f"{', '.join(can) or 'no mode'} (its supports_* flags).",
                           f"use --mode {' or '.join(can)}." if can else "use another judge.")

    def metric_many(self, requests: Sequence[tuple[str, str, str]], on_result: OnResult | None = None
                    ) -> list[MetricScore | Exception]:
        """Score (source, candidate, task) triples directly (mode "metric"); only backends with supports_metric."""
        raise DHPError(f"{self.identity} does not score texts directly (mode 'metric').",
                       "use mode 'logprobs', 'sample' or 'likelihood', or a baseline judge (baseline:<name>).")

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.identity}>"


#: Stop conditions of ``ChatRequest.stop_when`` by kind (the part before ":") -> factory(argument) returning
#: ``(text_so_far, top_logprobs_so_far or None) -> bool``. The protocol that sets ``stop_when`` registers its kind
#: (dhp.judging.parsing registers "scored"), so a backend applies it without importing the protocol.
STOP_CONDITIONS: dict[str, Callable[[str], Callable]] = {}


def stop_condition(stop_when: str):
    """The test a generating backend applies after each token for ``stop_when``; None for ""."""
    if not stop_when:
        return None
    kind, _, arg = stop_when.partition(":")
    if kind not in STOP_CONDITIONS:
        raise DHPError(f"Unknown stop condition {stop_when!r}.",
                       f"use one of the registered kinds {sorted(STOP_CONDITIONS)} (dhp.judging.parsing.score_stop).")
    return STOP_CONDITIONS[kind](arg)


#: Backend families by the spec prefix before the first ":" -> (factory(rest, **options), an example spec); found by
#: discovery (dhp.extensions): every module of dhp.backends and the entry-point group ``dhp.backends``.
BACKENDS: "Registry[tuple[Callable[..., Backend], str]]" = Registry(
    "judge backend", "dhp.backends",
    fix="use one of those spec families, or add a module to dhp/backends/ with @register_backend(\"family\", example).",
    show=lambda name, entry: entry[1])

#: family -> the run-level options its factory takes (``register_backend(accepts=)``), e.g. allow_insecure_key.
BACKEND_OPTIONS: dict[str, tuple[str, ...]] = {}


def register_backend(name: str, example: str, accepts: tuple[str, ...] = ()) -> Callable:
    """Register a backend family: ``factory(rest, **options)`` builds the backend of spec ``<name>:<rest>``.
    A new backend is one module with one registered factory (and a Backend subclass). ``accepts``: the run-level
    options (dhp.config.RunParams, e.g. ``allow_insecure_key``) its factory takes, passed only to it
    (:func:`run_options`): no family is special-cased by its prefix elsewhere."""
    @registrar
    def deco(factory: Callable) -> Callable:
        BACKENDS.add(name, (factory, example), origin_of(factory))
        BACKEND_OPTIONS[name] = tuple(accepts)
        return factory

    return deco


def run_options(spec, **options) -> dict:
    """The run-level ``options`` (those set) that the family of ``spec`` accepts (``register_backend(accepts=)``)."""
    if not isinstance(spec, str):
        return {}
    family = spec.strip().partition(":")[0]
    BACKENDS.discover()
    return {k: v for k, v in options.items() if v and k in BACKEND_OPTIONS.get(family, ())}
