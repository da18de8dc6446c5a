"""The call engine: every model call of every stage (judging, LLM perturbations, multi-step judge
protocols) goes through here, so all of them share one cache, one scheduler and one set of counters.

- A call is planned with :func:`plan_chat` / :func:`plan_loglik`: its cache key(s) come from
  :func:`dhp.cache.make_key` over the backend's ``cache_identity()`` (backend, model content identity,
  output-affecting settings — never a secret), the prompt and the sampling parameters. A chat request
  asking for ``n`` replies has one key per reply, so each reply is stored on its own and a partly
  answered request resumes.
- :func:`run` makes the calls whose keys are not in the cache, in the given order (callers order them so
  that consecutive prompts share a prefix), and commits each result as it arrives: a run killed with
  SIGKILL repeats only the calls that were in flight. A **circuit breaker** stops the run with a
  :class:`~dhp.errors.DHPError` after ``max_consecutive_failures`` failed calls in a row (a dead server
  must not yield a "completed" table of NaN rows); what was done stays cached and a rerun resumes. A refusal the
  caller's protocol handles as an answer (``handled``: LLMBar's "too long, ask shorter" and content filter) is not a
  failure for the breaker. Failed keys are remembered in the cache, and a rerun asks them after the fresh ones, so
  it resumes where the stopped run was instead of meeting the same failures first, in a row.
- :func:`estimate` counts what :func:`run` would do (calls, tokens, USD) without calling anything.
- :func:`chat` is the one-line form for callers that want replies: plan, run, fetch.
"""

from __future__ import annotations

import contextvars
import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import pandas as pd
import yaml

from dhp.backends import Backend, ChatRequest, Completion, get_backend
from dhp.backends.base import reply_status_value
from dhp.cache import CachedCall, Cache, make_key, open_cache
from dhp.errors import DHPError
from dhp.io import resolve, resource
from dhp.lazy import lazy_module

# Ray is an optional extra: its engine module is imported only when an engine is named (dhp.lazy)
ray_engine = lazy_module("dhp.backends.ray_engine")

__all__ = [
    "Call", "CallFailure", "Estimate", "RunReport", "plan_chat", "plan_loglik", "plan_metric", "run", "estimate", "chat",
    "load_price_table", "MAX_CONSECUTIVE_FAILURES", "prime", "TEMPLATE_MARGIN", "PendingCalls", "collect_pending",
    "using_engine", "current_engine",
]

#: Default of the circuit breaker: this many failed calls in a row stop the run.
MAX_CONSECUTIVE_FAILURES = 20
#: Tokens of chat-template wrapping (system prompt, role tags) beyond the user text, for estimates.
TEMPLATE_MARGIN = 48
#: The reply length an estimate assumes for a request sent without max_tokens (GEMBA a7a7eff8 sends none): no upper
#: bound exists there, so its completion tokens are an assumption, said in the estimate's text.
UNLIMITED_REPLY_TOKENS = 256


@dataclass(frozen=True)
class Call:
    """One model call: ``kind`` "chat" (request: ChatRequest) or "loglik" (request: (prefix,
    continuation)); ``keys`` one cache key per reply (``request.n`` for chat, else one)."""

    kind: str
    request: Any
    keys: tuple[str, ...]


@dataclass(frozen=True)
class CallFailure:
    """A call that gave no usable result, and why (HTTP status, timeout, context overflow, ...). ``refused``: a
    refusal the caller's protocol handles as its answer (``handled`` of :func:`run`), cached as such; False: the
    call failed (a rerun asks it again)."""

    reason: str
    refused: bool = False


@dataclass
class Estimate:
    """What :func:`run` would do: calls still to make, cached ones, estimated tokens and cost."""

    identity: str
    calls: int
    cached_calls: int
    prompt_tokens: int
    completion_tokens: int  # upper bound: max_tokens per call (an assumption for the unlimited_calls)
    cost_usd: float | None  # None: no price known for this model; 0.0 for local backends
    unlimited_calls: int = 0  # calls sent without max_tokens, counted at UNLIMITED_REPLY_TOKENS each

    def describe(self, what: str = "calls") -> str:
        cost = "unknown (add the model to dhp/resources/judge_prices.yaml)" if self.cost_usd is None else f"${self.cost_usd:.4f}"
        # "<=" only where every call sends a max_tokens: a reply without one has no bound to state
        tokens = (f"<= {self.completion_tokens:,} completion tokens" if not self.unlimited_calls else
                  f"~{self.completion_tokens:,} completion tokens assumed (no bound: {self.unlimited_calls} calls "
                  f"without max_tokens counted at {UNLIMITED_REPLY_TOKENS} each)")
        return (f"[{what}] {self.identity}: {self.calls} calls to make ({self.cached_calls} cached), "
                f"~{self.prompt_tokens:,} prompt + {tokens}, est. cost {cost}"
                + (" (no upper bound)" if self.unlimited_calls and self.cost_usd else ""))


@dataclass
class RunReport:
    """Outcome of :func:`run`: ``errors`` maps each key of a failed call to its reason; ``stats`` counts
    requests (replies asked for), calls made, replies used, cache hits and tokens."""

    errors: dict[str, str] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)


class PendingCalls(Exception):
    """Raised by :func:`run` inside :func:`collect_pending` instead of calling the model: carries the
    calls that are not cached yet (offline batch export/import reads them, see dhp.batch)."""

    def __init__(self, backend: Backend, calls: list[Call]):
        super().__init__(f"{len(calls)} pending calls to {backend.identity}")
        self.backend = backend
        self.calls = calls


_COLLECTING: contextvars.ContextVar[bool] = contextvars.ContextVar("dhp_collect_pending", default=False)


@contextmanager
def collect_pending():
    """Within this block the first :func:`run` that has uncached calls raises :class:`PendingCalls`
    instead of calling the model (a stage's calls are known only once the stage before it is done)."""
    token = _COLLECTING.set(True)
    try:
        yield
    finally:
        _COLLECTING.reset(token)


_ENGINE: contextvars.ContextVar[Any] = contextvars.ContextVar("dhp_engine", default=None)


@contextmanager
def using_engine(engine):
    """Within this block :func:`run` hands the chat calls it would make to ``engine`` (an object with
    ``takes(backend, calls) -> bool`` and ``answer(backend, calls, on_result)``, e.g. Ray Data's:
    dhp.backends.ray_engine) instead of the judge's own client. Everything else stays :func:`run`'s: the cache
    (each answer committed as it arrives), the refusal rules, the circuit breaker. None: the live client."""
    token = _ENGINE.set(engine)
    try:
        yield engine
    finally:
        _ENGINE.reset(token)


def current_engine():
    """The engine :func:`run` uses here: :func:`using_engine`'s, else the one the environment names
    (``DHP_ENGINE``, dhp.config.EngineParams as JSON: how a grid's notebook kernels and worker threads get it),
    else None (the live client)."""
    engine = _ENGINE.get()
    if engine is None and os.environ.get("DHP_ENGINE"):
        engine = ray_engine.engine_from_env()
    return engine


def prime(backend: Backend, cache) -> None:
    """Give ``backend`` what its server reported when the cache was filled (see Cache.record_server), so a rerun
    from the cache needs no connection to name the model. A no-op for backends that describe themselves."""
    if not hasattr(backend, "adopt_record") or cache is None or cache is False:
        return
    store = open_cache(cache)
    try:
        backend.adopt_record(store.recorded_server(backend.identity))
    finally:
        if not isinstance(cache, Cache):
            store.close()


def _remember(backend: Backend, store: Cache) -> None:
    if hasattr(backend, "record"):
        info = backend.record()
        if info:
            store.record_server(backend.identity, info)


def _identity(backend: Backend) -> dict:
    return backend.cache_identity()


def plan_chat(backend: Backend, request: ChatRequest, scope: str | None = None) -> Call:
    """The call for one chat request, with one cache key per reply. ``scope``: a name that is part of the keys and is
    never sent, so identical requests of different scopes are answered separately (a protocol that asks each
    strategy and pair on its own, as LLMBar's evaluate.py does); None: identical requests share their reply."""
    params = {"kind": "chat", "max_tokens": request.max_tokens, "temperature": request.temperature,
              "seed": request.seed, "logprobs": request.logprobs, "stop_after": list(request.stop_after),
              "n": int(getattr(request, "n", 1))}
    if request.stop_when:  # only when set: keys of requests without it stay those of earlier caches
        params["stop_when"] = request.stop_when
    if scope is not None:  # only when set: unscoped keys stay those of earlier caches
        params["scope"] = str(scope)
    messages = [list(m) for m in request.messages]
    ident = _identity(backend)
    return Call("chat", request, tuple(make_key(ident, messages, params, i) for i in range(params["n"])))


def plan_metric(backend: Backend, source: str, candidate: str, task: str) -> Call:
    """The call scoring ``candidate`` against its ``source`` directly (mode "metric": a baseline judge)."""
    return Call("metric", (source, candidate, task),
                (make_key(_identity(backend), [source, candidate, task], {"kind": "metric"}, 0),))


def plan_loglik(backend: Backend, prefix: str, continuation: str) -> Call:
    """The call scoring log p(continuation | prefix)."""
    return Call("loglik", (prefix, continuation),
                (make_key(_identity(backend), [prefix, continuation], {"kind": "loglik"}, 0),))


def _unique(calls: Iterable[Call]) -> list[Call]:
    seen: set[tuple[str, ...]] = set()
    out = []
    for c in calls:
        if c.keys not in seen:
            seen.add(c.keys)
            out.append(c)
    return out


def run_stats(identity: str, requests: int, replies_made: int = 0, cache_hits: int = 0) -> dict:
    """The run statistics every judging stage reports (calls made, cache hits, tokens), before any call: one shape
    for a model's calls and for a judge that makes none (a control answers ``requests`` rows with 0 calls)."""
    return {"identity": identity, "requests": int(requests), "calls": 0, "replies_made": int(replies_made),
            "cache_hits": int(cache_hits), "call_errors": 0, "refusals": 0, "prompt_tokens_submitted": 0,
            "prompt_tokens_computed": 0, "prompt_tokens_computed_known": True, "completion_tokens": 0}


def pending(calls: Iterable[Call], store: Cache) -> list[Call]:
    """The calls with at least one reply not in the cache (duplicates removed), in order, except that calls which
    failed in an earlier run (:meth:`Cache.failed`) come after the fresh ones: a rerun after a stop resumes where the
    run was instead of asking the same failing calls first, in a row, and stopping the same way."""
    todo = [c for c in _unique(calls) if not all(store.contains(k) for k in c.keys)]
    failed = store.failed([c.keys[0] for c in todo]) if todo else set()
    return [c for c in todo if c.keys[0] not in failed] + [c for c in todo if c.keys[0] in failed]


# ---------------------------------------------------------------------------------------------- prices

def load_price_table(price_table: "dict | str | os.PathLike | None" = None) -> dict[str, dict[str, float]]:
    """Prices in USD per 1M tokens: {model: {"input": x, "output": y}}. ``None`` reads
    ``dhp/resources/judge_prices.yaml``; a path may be YAML (same shape) or CSV (columns model,input,output)."""
    if isinstance(price_table, dict):
        return price_table
    path = resolve(price_table) if price_table is not None else resource("judge_prices.yaml")
    if not path.exists():
        if price_table is None:
            return {}
        raise DHPError(f"Price table {path} not found.", "pass a YAML/CSV path or a dict.")
    if path.suffix == ".csv":
        df = pd.read_csv(path)
        return {r.model: {"input": float(r.input), "output": float(r.output)} for r in df.itertuples()}
    data = yaml.safe_load(path.read_text()) or {}
    return data.get("models", data)


def estimate(backend: Backend, calls: Sequence[Call], store: Cache, price_table=None) -> Estimate:
    """Calls :func:`run` would make for ``calls`` given the cache, with estimated tokens and cost."""
    todo = pending(calls, store)
    n_all = len(_unique(calls))
    prompt_tokens = completion = unlimited = 0
    for c in todo:
        if c.kind == "chat":
            text = "".join(content for _, content in c.request.messages)
            prompt_tokens += backend.count_tokens(text) + TEMPLATE_MARGIN
            if c.request.max_tokens is None:
                unlimited += len(c.keys)
            completion += (UNLIMITED_REPLY_TOKENS if c.request.max_tokens is None else c.request.max_tokens) * len(c.keys)
        else:
            prompt_tokens += backend.count_tokens(c.request[0] + c.request[1]) + 1
    cost: float | None = 0.0
    if backend.is_paid:
        p = load_price_table(price_table).get(backend.model)
        cost = None if p is None else (prompt_tokens * float(p["input"]) + completion * float(p["output"])) / 1e6
    return Estimate(backend.identity, len(todo), n_all - len(todo), prompt_tokens, completion, cost, unlimited)


# ---------------------------------------------------------------------------------------------- run

def _store_result(store: Cache, backend: Backend, call: Call, res: Any, stats: dict) -> None:
    stats["calls"] += int(getattr(res, "calls", 1) or 1)
    stats["prompt_tokens_submitted"] += int(res.prompt_tokens or 0)
    if res.prompt_tokens_computed is None:
        stats["prompt_tokens_computed_known"] = False
    else:
        stats["prompt_tokens_computed"] += int(res.prompt_tokens_computed)
    if isinstance(res, Completion):
        stats["completion_tokens"] += int(res.completion_tokens or 0)
        texts = list(getattr(res, "texts", None) or [res.text])
        if len(texts) < len(call.keys):
            raise DHPError(f"{backend.identity} returned {len(texts)} replies where {len(call.keys)} were asked for.",
                           "report this backend bug; rerun to retry the missing replies.")
        # Token logprobs belong to the first reply only; later replies of an n-request carry text.
        # a chat row's value says how its first reply ended (null content, cut off: dhp.backends.base.reply_status)
        store.put_many([(key, backend.identity, "chat",
                         CachedCall(texts[i], res.top_logprobs if i == 0 else None,
                                    reply_status_value(res) if i == 0 else None,
                                    res.prompt_tokens if i == 0 else 0, res.completion_tokens if i == 0 else 0,
                                    getattr(res, "finish_reason", None) if i == 0 else None))
                        for i, key in enumerate(call.keys)])
    elif call.kind == "metric":  # the reason of a NaN score is kept (a text the statistic does not apply to)
        store.put(call.keys[0], backend.identity, "metric", CachedCall(res.reason, None, res.value, 0, 0))
    else:
        store.put(call.keys[0], backend.identity, "loglik",
                  CachedCall(None, None, res.logprob_sum, res.prompt_tokens, res.n_tokens))


def run(backend: Backend, calls: Sequence[Call], store: Cache, *, progress: bool | str = True,
        desc: str = "calls", max_consecutive_failures: int = MAX_CONSECUTIVE_FAILURES,
        handled: "Callable[[str], bool] | None" = None) -> RunReport:
    """Make every call of ``calls`` that is not (fully) cached, in order, storing each result at once.

    ``progress``: True shows a bar; a path keeps a small JSON file there up to date ({"desc", "done", "total"}) so
    a process that runs notebooks (dhp.grid) can show the calls' progress that papermill's kernel hides.

    Per-call failures (after the backend's own retries) are recorded in ``report.errors`` and not cached,
    so a rerun tries them again (after the calls that never failed, see :func:`pending`). After
    ``max_consecutive_failures`` failures in a row the run stops with a DHPError (circuit breaker); configuration
    errors (bad key, unknown model, unreachable server) are raised by the backend before or during the run.

    ``handled(reason)``: True for a refusal the caller's protocol handles as an answer (LLMBar: "too long" is asked
    again shorter, a content filter is an empty reply). It is reported in ``report.errors`` like a failure (the
    caller reads its reason), but the server did answer: it neither counts towards the breaker nor is remembered as
    a failed key, it ends a streak as a reply does (``stats["refusals"]`` counts them), and it is cached as the
    answer it is (:attr:`dhp.cache.CachedCall.refusal`, its reason): a rerun does not ask it again, and
    :func:`chat` hands the protocol the same :class:`CallFailure` whether the refusal is fresh or cached. A transport
    failure (nothing ``handled`` accepts) stays a failure, asked again by a rerun.
    """
    todo = pending(calls, store)
    if todo:  # the server answers (or is about to be exported for): keep what it says about its model
        _remember(backend, store)
    if todo and _COLLECTING.get():
        raise PendingCalls(backend, todo)
    n_keys = sum(len(c.keys) for c in _unique(calls))
    made = sum(len(c.keys) for c in todo)
    stats = run_stats(backend.identity, n_keys, replies_made=made, cache_hits=n_keys - made)
    report = RunReport({}, stats)
    if todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc=desc, unit="call", disable=not progress or isinstance(progress, str))
        outside = _ProgressFile(progress if isinstance(progress, str) else None, desc, len(todo))
        streak = [0]

        def on_result(batch: list[Call]):
            def cb(i: int, res: Any) -> None:
                call = batch[i]
                bar.update(1)
                outside.update()
                if isinstance(res, Exception):
                    reason = _reason(res)
                    for k in call.keys:
                        report.errors[k] = reason
                    if handled is not None and handled(reason):  # an answer of the protocol, not a failure:
                        stats["refusals"] += 1  # cached as such, so a rerun asks it no more (and reads it again)
                        streak[0] = 0
                        store.put_many([(k, backend.identity, "chat", CachedCall(None, None, None, 0, 0, None, reason))
                                        for k in call.keys])
                        return
                    stats["call_errors"] += 1
                    store.note_failure(call.keys[0], reason)  # a rerun asks it after the fresh calls
                    streak[0] += 1
                    if max_consecutive_failures and streak[0] >= max_consecutive_failures:
                        raise DHPError(
                            f"{streak[0]} calls to {backend.identity} failed in a row (last: {_reason(res)}); "
                            "the run was stopped.",
                            "check the server/model (is it still running? does the prompt fit its context?), "
                            "then rerun: finished calls are cached and will not be repeated.")
                    return
                streak[0] = 0
                _store_result(store, backend, call, res, stats)
            return cb

        try:
            chats = [c for c in todo if c.kind == "chat"]
            logliks = [c for c in todo if c.kind == "loglik"]
            metrics = [c for c in todo if c.kind == "metric"]
            engine = current_engine() if chats else None
            if engine is not None and engine.takes(backend, chats):  # e.g. Ray Data (dhp.backends.ray_engine)
                engine.answer(backend, chats, on_result(chats))
            elif chats:
                backend.chat_many([c.request for c in chats], on_result=on_result(chats))
            if logliks:
                backend.loglikelihood_many([c.request for c in logliks], on_result=on_result(logliks))
            if metrics:
                backend.metric_many([c.request for c in metrics], on_result=on_result(metrics))
        finally:
            bar.close()
            outside.update(final=True)
    if not stats.pop("prompt_tokens_computed_known"):
        stats["prompt_tokens_computed"] = None
    return report


class _ProgressFile:
    """Progress of one :func:`run` written to a JSON file (atomically, at most every 0.5 s) for a watcher in
    another process; a no-op without a path. Only counts are written, never prompts or keys."""

    def __init__(self, path: str | None, desc: str, total: int):
        self.path, self.desc, self.total, self.done, self.last = path, desc, total, 0, 0.0
        self.run_id = time.monotonic_ns()  # tells two runs with the same desc and total apart
        self.update(count=False)

    def update(self, final: bool = False, count: bool = True) -> None:
        self.done += int(count and not final)
        now = time.monotonic()
        if not self.path or (not final and self.done < self.total and now - self.last < 0.5):
            return
        self.last = now
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump({"desc": self.desc, "done": self.done, "total": self.total, "run": self.run_id}, f)
            os.replace(tmp, self.path)
        except OSError:  # progress display is best effort: never fail a run for it
            pass


def _reason(e: BaseException) -> str:
    """A short, secret-free reason for a failed call."""
    msg = getattr(e, "problem", None) or str(e) or type(e).__name__
    return f"{type(e).__name__}: {msg}"[:300]


def _no_file(cache) -> bool:
    """True for a cache path with no file yet: a dry run reads it as empty instead of creating it."""
    if cache is None or cache is False or isinstance(cache, Cache) or str(cache) == ":memory:":
        return False
    return not resolve(Path(cache)).exists()


def chat(judge: "str | Backend", requests: Sequence[ChatRequest], cache: "Cache | str | os.PathLike | None" = None,
         *, progress: bool | str = True, desc: str = "calls", dry_run: bool = False, price_table=None,
         max_consecutive_failures: int = MAX_CONSECUTIVE_FAILURES, backend_options: dict | None = None,
         scopes: "Sequence[str | None] | None" = None, handled: "Callable[[str], bool] | None" = None
         ) -> "list[CachedCall | CallFailure] | Estimate":
    """Answer chat requests through the cache: one result per request, in order — the stored
    :class:`~dhp.cache.CachedCall` (``.text``, ``.top_logprobs``, token counts) or a :class:`CallFailure`
    with its reason. Requests must ask for one reply (``n == 1``). ``dry_run=True`` returns an
    :class:`Estimate` and calls nothing — and writes nothing: a cache file that does not exist yet is read as empty,
    not created. ``scopes``: one per request (see :func:`plan_chat`); ``handled``: see :func:`run`."""
    backend = get_backend(judge, **(backend_options or {}))
    if dry_run and _no_file(cache):
        cache = None
    prime(backend, cache)
    if scopes is not None and len(scopes) != len(requests):
        raise DHPError(f"{len(scopes)} scopes for {len(requests)} requests.", "give one scope per request.")
    planned = []
    for i, r in enumerate(requests):
        if int(getattr(r, "n", 1)) != 1:
            raise DHPError("dhp.calls.chat answers one reply per request.", "use plan_chat + run for n > 1.")
        planned.append(plan_chat(backend, r, None if scopes is None else scopes[i]))
    store = open_cache(cache)
    owns = not isinstance(cache, Cache)
    try:
        if dry_run:
            return estimate(backend, planned, store, price_table)
        report = run(backend, planned, store, progress=progress, desc=desc,
                     max_consecutive_failures=max_consecutive_failures, handled=handled)
        out: list[CachedCall | CallFailure] = []
        for c in planned:
            got = store.get(c.keys[0])
            if got is not None and got.refusal is not None:  # a refusal the protocol handles: fresh or cached alike
                out.append(CallFailure(got.refusal, refused=True))
            else:
                out.append(got if got is not None else CallFailure(report.errors.get(c.keys[0], "no result")))
        return out
    finally:
        if owns:
            store.close()
