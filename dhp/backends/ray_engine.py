"""Ray Data's LLM batch inference (``ray.data.llm``) as the call engine: ``--engine ray`` (``engine: ray`` in a grid).

:func:`dhp.calls.run` hands each stage's pending chat calls to :class:`RayEngine` (``dhp.calls.using_engine``), which
sends them through a Ray Data processor and gives every answer back to ``run`` as the live backend would — so the
cache, the protocols' refusal rules (LLMBar's "too long", GEMBA's null reply) and the circuit breaker are the live
path's, unchanged:

- ``openai:<model>@<url>`` → ``HttpRequestProcessorConfig``: each row carries the very body the live backend sends
  (:meth:`OpenAIBackend.chat_body`), so the cache keys and the answers are those of a live run. The request actors
  retry as the live runner does and return every answer, an error status included, as a row
  (dhp.backends._ray_worker): one refused prompt never fails the job (ray-project/ray#59194).
- ``ray-vllm:<model or path>`` → ``vLLMEngineProcessorConfig`` (tensor-parallel size and replicas from
  :class:`dhp.config.EngineParams`); vLLM's per-token log-probability dicts are mapped to the ``top_logprobs`` the
  OpenAI-compatible ``vllm serve`` returns for the same request (:func:`vllm_top_logprobs`; ray-project/ray#58899).
- Checkpointed: the driver reads the processed dataset row by row (``iter_rows``) and ``run`` commits each answer to
  the run's SQLite cache as it arrives (a block's rows arrive when the block is done); a driver killed by SIGKILL,
  Ctrl-C or a lost node leaves every answer read so far in the cache, and a rerun asks only the rest.

Ray is an optional extra (``pip install -e '.[ray]'``); nothing here imports it until a call is made.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import time
from types import SimpleNamespace
from typing import Any, Callable, Sequence

from dhp.backends.base import Backend, ChatRequest, Completion, estimate_tokens, register_backend, TransientError
from dhp.backends.openai_server import OpenAIBackend
from dhp.config import EngineParams, validate
from dhp.errors import DHPError
from dhp.lazy import lazy_module

# the request actors' code, shipped to the nodes by value; imported when a processor is built (it needs aiohttp)
w = lazy_module("dhp.backends._ray_worker")

__all__ = ["RayEngine", "RayVLLMBackend", "engine_from_env", "engine_env", "live_result", "vllm_top_logprobs",
           "vllm_processor_config", "http_processor_config", "OBJECT_STORE_BYTES"]

#: The object store of a local Ray started here (bytes): the rows are small JSON texts, and the machine is shared.
OBJECT_STORE_BYTES = 500_000_000


def _ray():
    try:
        import ray
        import ray.data.llm  # noqa: F401 - the processors
    except ImportError as e:
        raise DHPError(f"--engine ray needs Ray Data's LLM package ({e.name or e} is not installed).",
                       "install the extra: pip install -e '.[ray]' (make test-ray builds such an environment), or "
                       "use --engine live.") from None
    return ray


def engine_env(params: EngineParams) -> dict[str, str]:
    """The environment naming this engine for another process (a grid's notebook kernels: dhp.calls.current_engine)."""
    return {"DHP_ENGINE": params.model_dump_json()}


_FROM_ENV: dict[str, "RayEngine"] = {}


def engine_from_env() -> "RayEngine | None":
    """The engine ``DHP_ENGINE`` names (one per process), None for the live engine."""
    raw = os.environ.get("DHP_ENGINE", "")
    if raw not in _FROM_ENV:
        try:
            values = json.loads(raw) if raw.strip().startswith("{") else {"engine": raw.strip()}
        except ValueError:
            values = {"engine": raw}
        params = validate(EngineParams, values, source="DHP_ENGINE")
        _FROM_ENV[raw] = RayEngine(params) if params.engine == "ray" else None
    return _FROM_ENV[raw]


# ---------------------------------------------------------------------------------------------- answers

def live_result(backend: OpenAIBackend, status: int, text: str, error: str = "") -> Any:
    """What the live backend hands :func:`dhp.calls.run` for this HTTP answer (after its retries): a Completion, or
    the exception whose reason it records — built by the openai SDK from the same status and body, then sorted by the
    backend's own rules, so a refused row carries the live path's reason word for word. A status that stops a live
    run (401, 403, 404) raises its DHPError here too."""
    import httpx
    import openai

    request = httpx.Request("POST", backend.base_url + "/chat/completions")
    if status == 0:  # no HTTP answer: the live runner's timeout / dropped-connection errors
        err: Exception = openai.APITimeoutError(request=request) if error == "timeout" else \
            openai.APIConnectionError(message=error or "Connection error.", request=request)
        return backend._per_call_error(err)
    if not 200 <= status < 300:
        response = httpx.Response(status, content=(text or "").encode("utf-8"), request=request,
                                  headers={"content-type": "application/json"})
        with openai.OpenAI(api_key="sk-no-key-required", base_url=backend.base_url, max_retries=0) as client:
            err = client._make_status_error_from_response(response)  # the SDK's own error for this response
        fatal = backend._fatal(err)
        if fatal is not None and not backend._transient(err):
            raise fatal
        return backend._per_call_error(err)
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or not data.get("choices"):
            raise ValueError("no choices")
    except (ValueError, TypeError) as e:
        return TransientError(f"malformed response from {backend.base_url}/chat/completions: {e}")
    try:
        return backend.parse_chat(data)
    except TransientError as e:
        return e


def vllm_top_logprobs(per_token: Sequence[dict] | None, k: int | None) -> list[dict[str, float]] | None:
    """vLLM's per-token log-probabilities (``[{token_id: {"logprob", "rank", "decoded_token"}}]``, as Ray's vLLM stage
    returns them) → the live backend's ``Completion.top_logprobs`` (one {token: logprob} per generated token).

    Mirrors what ``vllm serve`` sends for ``top_logprobs=k`` (its chat handler keeps a position's first ``k`` entries
    in vLLM's order and floors each at -9999) read by :meth:`OpenAIBackend.parse_chat` (the first of two entries
    decoding to the same text wins), so a Ray run and a live run of the same model score alike."""
    if not per_token or not k:
        return None
    out = []
    for pos in per_token:
        d: dict[str, float] = {}
        for i, info in enumerate((pos or {}).values()):
            if i >= k:
                break
            info = info or {}
            token = info.get("decoded_token")
            if token is None:
                continue
            d.setdefault(str(token), max(float(info["logprob"]), -9999.0))
        out.append(d)
    return out


def _vllm_result(row: dict, k: int | None) -> Any:
    error = row.get("__inference_error__") or ""
    if error:
        return RuntimeError(f"vLLM: {error}"[:300])
    logprobs = row.get("logprobs")
    if isinstance(logprobs, str):
        logprobs = json.loads(logprobs)
    return Completion(str(row.get("generated_text") or ""), vllm_top_logprobs(logprobs, k),
                      int(row.get("num_input_tokens") or 0), int(row.get("num_generated_tokens") or 0), None)


# ---------------------------------------------------------------------------------------------- processors

def _json_body(body: dict) -> str:
    """The body's bytes as the live client writes them (the openai SDK serializes as httpx's ``json=`` does): a server
    that reads the bytes, not just the JSON, sees the same request."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def http_processor_config(backend: OpenAIBackend, params: EngineParams):
    """The ``HttpRequestProcessorConfig`` answering ``backend``'s chat calls (its URL, retries, timeout)."""
    from ray.data.llm import HttpRequestProcessorConfig


    return HttpRequestProcessorConfig(
        url=backend.base_url + "/chat/completions", qps=params.ray_qps, batch_size=params.ray_batch_size,
        concurrency=params.ray_replicas, max_retries=0,  # the session retries (and never raises): _ray_worker
        # the live client's retry policy (read defensively: the live backend's internals may change)
        session_factory=w.SessionFactory(getattr(backend, "timeout", 60.0), getattr(backend, "max_retries", 4),
                                         getattr(getattr(backend, "runner", None), "backoff_initial", 0.5),
                                         getattr(getattr(backend, "runner", None), "backoff_max", 8.0)),
        # a fixed pool of ray_replicas actors (an int would be an autoscaling pool starting from one)
        http_request_stage={"num_cpus": params.ray_cpus, "concurrency": (params.ray_replicas, params.ray_replicas),
                            "batch_size": params.ray_batch_size})


def vllm_processor_config(backend: "RayVLLMBackend", params: EngineParams):
    """The ``vLLMEngineProcessorConfig`` of a ``ray-vllm`` judge: ``ray_replicas`` engines of
    ``ray_tensor_parallel`` GPUs each; a failing row becomes an error row (should_continue_on_error)."""
    from ray.data.llm import vLLMEngineProcessorConfig

    engine_kwargs = {"tensor_parallel_size": params.ray_tensor_parallel, "enable_prefix_caching": True,
                     "max_logprobs": 20}
    if backend.n_ctx_given:
        engine_kwargs["max_model_len"] = backend.n_ctx_given
    return vLLMEngineProcessorConfig(
        model_source=backend.model, engine_kwargs=engine_kwargs, concurrency=params.ray_replicas,
        batch_size=params.ray_batch_size, should_continue_on_error=True, chat_template_stage=True,
        tokenize_stage=True, detokenize_stage=True)


def vllm_sampling_params(req: ChatRequest) -> dict:
    """vLLM's SamplingParams of a chat request (what ``vllm serve`` derives from the live body)."""
    return {"temperature": float(req.temperature), "max_tokens": req.max_tokens, "seed": req.seed,
            "logprobs": min(int(req.logprobs), 20) if req.logprobs else None, "n": 1}


# ---------------------------------------------------------------------------------------------- the engine

class RayEngine:
    """Answers :func:`dhp.calls.run`'s chat calls through Ray Data (see the module docstring). ``out``: where the
    plan line of each job is printed. ``last``: what the last job did (rows, nodes that answered, seconds)."""

    name = "ray"

    def __init__(self, params: EngineParams | None = None, out=None):
        self.params = params or EngineParams(engine="ray")
        self.out = out
        self.last: dict[str, Any] = {}
        self.jobs = 0
        self.rows_total = 0  # rows answered through Ray (every answer is one call to the server)

    # -- where
    @property
    def address(self) -> str | None:
        return self.params.ray_address or os.environ.get("RAY_ADDRESS") or None

    def start(self) -> str:
        """Connect to the cluster (``ray_address`` / RAY_ADDRESS), else start a local Ray with a small object store;
        returns the cluster's address (a grid hands it to its notebook kernels)."""
        ray = _ray()
        if not ray.is_initialized():
            kw: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
                                      configure_logging=False)
            if self.address:
                ray.init(address=self.address, **kw)
            else:
                ray.init(object_store_memory=OBJECT_STORE_BYTES, **kw)
            from ray.data import DataContext

            ctx = DataContext.get_current()
            ctx.enable_progress_bars = False  # the plan line and dhp's own bar say what runs
            ctx.print_on_execution_start = False
            # the nodes need Ray and aiohttp, not dhp: the request actors' code travels by value
            from ray import cloudpickle

            # the real module (w is its lazy stand-in, dhp.lazy): its code travels to the nodes by value
            cloudpickle.register_pickle_by_value(importlib.import_module(w.__name__))
        return ray.get_runtime_context().gcs_address

    # -- what
    def takes(self, backend: Backend, calls: Sequence) -> bool:
        """Chat calls of one reply each to an OpenAI-compatible server or a ``ray-vllm`` judge (a request for n > 1
        replies, and every other backend, stays with the judge's own client)."""
        kinds = isinstance(backend, (OpenAIBackend, RayVLLMBackend))
        return kinds and all(int(getattr(c.request, "n", 1)) == 1 for c in calls)

    def describe(self, n_calls: int | None = None, backend: Backend | None = None) -> str:
        p = self.params
        what = "vLLM engine replicas" if isinstance(backend, RayVLLMBackend) else "request actors"
        calls = f"{n_calls} calls" if n_calls is not None else "each stage's pending calls"
        n_blocks = math.ceil(n_calls / p.ray_batch_size) if n_calls else 0
        blocks = f" ({n_blocks} block{'s' if n_blocks > 1 else ''})" if n_calls else ""
        tp = f" x {p.ray_tensor_parallel} GPUs" if isinstance(backend, RayVLLMBackend) else ""
        return (f"Engine: ray, cluster {self.address or 'local (started here)'}: {calls} through Ray Data, "
                f"{p.ray_replicas} {what}{tp}, {p.ray_batch_size} rows per block{blocks}; each answer is committed "
                "to the cache as its block finishes")

    # -- how
    def answer(self, backend: Backend, calls: Sequence, on_result: Callable[[int, Any], None]) -> None:
        """Send ``calls`` (dhp.calls.Call, chat, n = 1) through one Ray Data job; ``on_result(i, result)`` for each as
        its row reaches the driver (the result as the live backend gives it: a Completion or the call's error)."""
        if not calls:
            return
        self.start()
        ray = _ray()
        t0 = time.perf_counter()
        print(f"[engine ray] {self.describe(len(calls), backend)}", file=self.out or sys.stderr, flush=True)
        if isinstance(backend, RayVLLMBackend):
            rows = [{"dhp_index": i, "dhp_messages": json.dumps(c.request.message_dicts()),
                     "dhp_sampling": json.dumps(vllm_sampling_params(c.request))} for i, c in enumerate(calls)]
            from ray.data.llm import build_processor

            processor = build_processor(vllm_processor_config(backend, self.params), preprocess=w.vllm_row,
                                        postprocess=w.keep_vllm_answer)
            ks = [c.request.logprobs for c in calls]
            convert = lambda i, row: _vllm_result(row, ks[i])  # noqa: E731
        else:
            from ray.data.llm import build_processor

            rows = [{"dhp_index": i, "payload": {w.BODY: _json_body(backend.chat_body(c.request))}}
                    for i, c in enumerate(calls)]
            # the row maps around the requests are light: a small CPU share, so they fit beside the request actors on
            # a node whose CPUs those hold (a whole CPU each would wait for one forever)
            light = {"num_cpus": 0.05}
            processor = build_processor(http_processor_config(backend, self.params), preprocess_map_kwargs=light,
                                        postprocess=w.keep_answer, postprocess_map_kwargs=light)
            convert = lambda i, row: live_result(  # noqa: E731
                backend, int(row["reply_status"]), row["reply_text"] or "", row["reply_error"] or "")
        n_blocks = max(1, math.ceil(len(rows) / self.params.ray_batch_size))
        ds = processor(ray.data.from_items(rows, override_num_blocks=n_blocks))
        nodes: set[str] = set()
        done = 0
        for row in ds.iter_rows():
            i = int(row["dhp_index"])
            if row.get("reply_node"):
                nodes.add(str(row["reply_node"]))
            on_result(i, convert(i, row))  # run() commits it to the cache now
            done += 1
        self.jobs += 1
        self.rows_total += done
        self.last = {"rows": done, "nodes": sorted(nodes), "seconds": time.perf_counter() - t0}
        where = f" from {len(nodes)} node(s)" if nodes else ""
        print(f"[engine ray] {done} answers in {self.last['seconds']:.1f} s{where}", file=self.out or sys.stderr,
              flush=True)


# ---------------------------------------------------------------------------------------------- ray-vllm judges

class RayVLLMBackend(Backend):
    """``ray-vllm:<model or path>``: vLLM engines on a Ray cluster's GPUs answer the chat calls
    (:func:`vllm_processor_config`; replicas and tensor-parallel size from the run's EngineParams). Its calls always
    go through Ray, with or without ``--engine ray``."""

    def __init__(self, model: str, n_ctx: int | None = None, **_ignored):
        if not model:
            raise DHPError("The ray-vllm backend needs a model.", "use 'ray-vllm:<huggingface id or local path>'.")
        self.model = model
        self.identity = f"ray-vllm:{model}"
        self.n_ctx_given = n_ctx
        self.accepts_no_max_tokens = True
        self.is_local = False
        self.is_paid = False

    @property
    def n_ctx(self) -> int | None:  # type: ignore[override]
        return self.n_ctx_given

    @property
    def fingerprint(self) -> str:
        return self.model

    def cache_identity(self) -> dict:
        return {"backend": "ray-vllm", "model": self.model}

    def count_tokens(self, text: str) -> int:
        return estimate_tokens(text)

    def chat_many(self, requests, on_result=None):
        # run() hands the calls to an active --engine ray itself; here none is: the environment's, else a default one
        engine = engine_from_env() or RayEngine()
        results: list[Any] = [None] * len(requests)

        def keep(i, res):
            results[i] = res
            if on_result is not None:
                on_result(i, res)

        engine.answer(self, [SimpleNamespace(request=r) for r in requests], keep)
        return results

    def loglikelihood_many(self, pairs, on_result=None):
        raise DHPError(f"{self.identity} answers chat calls only.", "use mode logprobs or sample.")

    def __repr__(self) -> str:
        return f"<RayVLLMBackend {self.identity}>"


@register_backend("ray-vllm", example="ray-vllm:<model or path>")
def _ray_vllm(rest: str, **options: Any) -> RayVLLMBackend:
    return RayVLLMBackend(rest, **{k: v for k, v in options.items() if k == "n_ctx"})
