"""Any OpenAI-compatible server (OpenAI, vllm serve, llama_cpp.server, Ollama): async, retried, key-safe.

Requests go through the openai SDK (``openai.AsyncOpenAI`` over one pooled ``httpx.AsyncClient`` per batch, the SDK's
own retries off: :class:`~dhp.backends.runner.Runner` retries, backs off and sorts errors), so a failed call reads as
the SDK words it ("Error code: 400 - <the server's message>") and carries the server's structured error
(:class:`CallError`: ``code`` such as "context_length_exceeded", ``type``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import json
import os
import re
import time
from dataclasses import replace
from typing import Any, Sequence
from urllib.parse import urlsplit, urlunsplit


from dhp.errors import DHPError
from dhp.backends.runner import Runner
from dhp.backends.base import (
    Backend, ChatRequest, Completion, LogLikelihood, TransientError, estimate_tokens, register_backend,
    truncate_estimated,
)


_LOCAL_HOSTS = {"localhost", "0.0.0.0"}
#: The key sent when OPENAI_API_KEY is unset: self-hosted servers (vllm serve, llama_cpp.server, Ollama, SGLang) take
#: none, but the OpenAI client needs a string (their docs use such a placeholder too). It is not a secret.
PLACEHOLDER_KEY = "sk-no-key-required"
#: Hosts that always need a real key: failing before the first call says so more clearly than a 401.
_KEYED_HOSTS = {"api.openai.com"}
#: Seconds the model list (GET /models) may take, all tries together, before the run gives up on the server: a server
#: still busy with a killed client's requests (llama_cpp.server answers them in turn) or loading its model (503)
#: answers within it. ``models_wait=`` or the environment's DHP_MODELS_WAIT sets another.
MODELS_WAIT_S = 60.0

# A prompt longer than the model's context, as each server says it (and nothing else: an unrelated 400 such as
# "integer above maximum value" is not one): the structured code of OpenAI and llama-cpp-python, the error type of
# llama.cpp's server, and the exact messages of OpenAI/vLLM ("This model's maximum context length is N tokens"),
# vLLM's prompt check and llama.cpp's server for servers that send no code.
_CONTEXT_CODES = {"context_length_exceeded"}
_CONTEXT_TYPES = {"exceed_context_size_error"}
_CONTEXT_MESSAGES = re.compile(r"maximum context length is \d+ tokens|exceeds the available context size"
                               r"|is longer than the maximum model length")


def is_loopback(host: str) -> bool:
    """True for addresses that never leave this machine (127.0.0.0/8, ::1, localhost)."""
    if host in _LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def redact_url(url: str) -> str:
    """``url`` without its ``user:password@`` part: what identities, cache rows, manifests and messages show (the
    credentials are used for the requests only, like the key)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def is_context_overflow(code: Any = None, type_: Any = None, message: str = "") -> bool:
    """True when a server's error says the prompt (plus max_tokens) exceeds the model's context (see above)."""
    return code in _CONTEXT_CODES or type_ in _CONTEXT_TYPES or bool(_CONTEXT_MESSAGES.search(message or ""))


class CallError(RuntimeError):
    """One call's failure as the openai SDK reported it, readable by the protocols' refusal rules. Its text:
    ``[context overflow: ]HTTP <status>[ [code: <error.code>]]: <the SDK's message>`` for an error status (the
    message is the SDK's "Error code: 400 - <the server's message>"), ``timeout: ...`` or ``connection error
    (<cause>): ...``. The server's structured error is kept: ``status_code``, ``code`` (e.g.
    "context_length_exceeded"), ``type``, ``param``, ``body`` and ``context_overflow`` (:func:`is_context_overflow`);
    :func:`reason_code` reads the code back from a recorded reason."""

    def __init__(self, text: str, *, status_code: int | None = None, code: str | None = None,
                 type: str | None = None, param: str | None = None, body: Any = None,
                 context_overflow: bool = False):
        super().__init__(text)
        self.status_code, self.code, self.type, self.param, self.body = status_code, code, type, param, body
        self.context_overflow = context_overflow


_REASON_CODE = re.compile(r"HTTP \d{3} \[code: ([^\]]+)\]")


def reason_code(reason: str) -> str | None:
    """The server's ``error.code`` recorded in a failed call's reason (see :class:`CallError`), None if it sent none."""
    m = _REASON_CODE.search(reason or "")
    return m.group(1) if m else None


def _call_error(e: Exception) -> Exception:
    """The SDK's exception as a :class:`CallError` (other exceptions unchanged)."""
    import openai

    if isinstance(e, openai.APIStatusError):
        # a numeric code repeating the status (vLLM's, llama.cpp's) says nothing more
        code = e.code if isinstance(e.code, str) and e.code and e.code != str(e.status_code) else None
        type_ = e.type if isinstance(e.type, str) and e.type else None
        overflow = e.status_code == 400 and is_context_overflow(code, type_, e.message)
        text = (("context overflow: " if overflow else "") + f"HTTP {e.status_code}"
                + (f" [code: {code}]" if code else "") + f": {e.message}")
        return CallError(text[:600], status_code=e.status_code, code=code, type=type_,
                         param=e.param if isinstance(e.param, str) else None, body=e.body, context_overflow=overflow)
    if isinstance(e, openai.APITimeoutError):  # a subclass of APIConnectionError: first
        return CallError(f"timeout: {e.message}")
    if isinstance(e, openai.APIConnectionError):
        cause = type(e.__cause__).__name__ if e.__cause__ is not None else "?"
        return CallError(f"connection error ({cause}): {e.message}")
    return e


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
    the network in clear text). ``attempts`` counts every try of a call (first tries and retries; not the model
    list's nor the tokenizer's requests). ``models_wait``: seconds the model list may take, all tries together
    (default :data:`MODELS_WAIT_S`, or DHP_MODELS_WAIT).

    Without OPENAI_API_KEY a server other than api.openai.com gets :data:`PLACEHOLDER_KEY` (self-hosted servers take
    no key). ``model`` may be empty when ``base_url`` is given and the server's /models lists exactly one model: that
    one is used. Credentials in the URL (``http://user:pw@host/v1``) are sent with the requests and appear nowhere
    else (:func:`redact_url`). ``transport``: an httpx transport for every request (tests replace the network with
    ``httpx.MockTransport``).
    """

    def __init__(self, model: str, base_url: str | None = None, *, concurrency: int = 8,
                 max_retries: int = 4, timeout: float = 60.0, backoff_initial: float = 0.5,
                 backoff_max: float = 8.0, n_ctx: int | None = None, allow_insecure_key: bool = False,
                 models_wait: float | None = None, transport=None):
        if not model and not base_url:
            raise DHPError("The openai backend needs a model name.", "use 'openai:<model>[@<base_url>]'.")
        self._transport = transport
        self.timeout = float(timeout)
        url = (base_url or "https://api.openai.com/v1").rstrip("/")
        self.__url = url  # with any credentials: requests only, never shown (name-mangled like the key)
        self.base_url = redact_url(url)
        parsed = urlsplit(url)
        try:
            host = parsed.hostname or ""
        except ValueError:
            host = ""
        if parsed.scheme not in ("http", "https") or not host:
            raise DHPError(f"Invalid judge server URL {self.base_url!r}.",
                           "use http(s)://host:port/v1, e.g. http://127.0.0.1:8000/v1.")
        self.accepts_no_max_tokens = True  # an OpenAI-compatible server applies its own limit
        self.is_local = is_loopback(host)
        self.is_paid = not self.is_local
        key = os.environ.get("OPENAI_API_KEY")
        if key and parsed.scheme != "https" and not self.is_local and not allow_insecure_key:
            raise DHPError(f"Refusing to send OPENAI_API_KEY over plain http to {host}: it would cross the "
                           "network unencrypted.",
                           "use an https:// URL, a loopback server, or pass --allow-insecure-key "
                           "(allow_insecure_key=True) if you accept that risk.")
        if not key:
            if host in _KEYED_HOSTS:
                raise DHPError(f"OPENAI_API_KEY is not set (needed for {self.base_url}).",
                               "export OPENAI_API_KEY in the environment; it is read from there only.")
            key = PLACEHOLDER_KEY
        self.__key = key  # name-mangled and excluded from repr: never logged, cached or saved
        if models_wait is None:
            try:
                models_wait = float(os.environ.get("DHP_MODELS_WAIT") or MODELS_WAIT_S)
            except ValueError:
                raise DHPError(f"DHP_MODELS_WAIT={os.environ['DHP_MODELS_WAIT']!r} is not a number of seconds.",
                               "set it to seconds, e.g. DHP_MODELS_WAIT=120, or unset it.") from None
        self.models_wait = max(0.0, float(models_wait))
        self._models: dict | None = None  # the server's /models body once it answered ({}: it has no /models)
        self.offline = False  # a dry run's plan: no request at all (see plan_offline)
        # concurrency, retries and backoff belong to the shared runner; this backend says what an error means
        self.runner = Runner(self._transient, self._fatal, self._per_call_error, concurrency=int(concurrency),
                             max_retries=int(max_retries), backoff_initial=float(backoff_initial),
                             backoff_max=float(backoff_max))
        self.model = model or self._only_model()
        self.identity = f"openai:{self.model}" if base_url is None else f"openai:{self.model}@{self.base_url}"
        self._n_ctx_given = n_ctx is not None
        self._server_info: dict | None = None
        self._recorded_info: dict | None = None  # what the server reported when the cache was filled
        self._tokenize_route: str | None = None  # "vllm", "llama_cpp" or "" (none) once probed
        self._token_counts: dict[str, int] = {}
        self._n_ctx = n_ctx
        self._checked = False
        self._single_replies = False  # the server refused n > 1 replies in one request

    @property
    def attempts(self) -> int:
        """Every try of a call so far (first tries and retries), counted by the runner."""
        return self.runner.attempts

    @property
    def concurrency(self) -> int:
        return self.runner.concurrency

    @property
    def max_retries(self) -> int:
        return self.runner.max_retries

    def plan_offline(self) -> str:
        """From now on send nothing (a dry run's plan): the model is named by what the cache recorded when it was
        filled (else by its name alone), token counts are the local estimate. Returns the plan's note saying so."""
        self.offline = True
        return (f"model list not checked (a dry run sends no request to {self.base_url}); token counts are local "
                "estimates")

    # ------------------------------------------------------------------ clients
    def _timeout(self, seconds: float | None = None):
        import httpx

        t = self.timeout if seconds is None else seconds
        return httpx.Timeout(t, connect=min(t, 10.0))

    def _client(self):
        """The openai SDK's client for one batch of calls (per event loop), over one pooled httpx client: every
        request of the batch shares its keep-alive connections, one per request in flight. The SDK's retries are
        off: the runner's own loop retries (backoff, the circuit breaker's counts)."""
        import httpx
        import openai

        n = max(1, self.concurrency)
        http = httpx.AsyncClient(transport=self._transport, timeout=self._timeout(), follow_redirects=True,
                                 limits=httpx.Limits(max_connections=n, max_keepalive_connections=n))
        # the key goes in the SDK's auth header, which httpx never logs nor shows, and drops on a redirect elsewhere
        return openai.AsyncOpenAI(api_key=self.__key, base_url=self.__url, max_retries=0, timeout=self._timeout(),
                                  http_client=http)

    def _sync_client(self, timeout: float):
        import httpx
        import openai

        http = httpx.Client(transport=self._transport, timeout=self._timeout(timeout), follow_redirects=True)
        return openai.OpenAI(api_key=self.__key, base_url=self.__url, max_retries=0,
                             timeout=self._timeout(timeout), http_client=http)

    def _http(self):
        import httpx

        return httpx.Client(transport=self._transport, timeout=min(self.timeout, 10.0))

    # ------------------------------------------------------------------ what the server says about itself
    def _list_models(self) -> dict:
        """The server's /models body ({} when it has no /models: 404), asked once (kept once answered). A busy
        server is waited for: timeouts, 429 and 5xx (a model still loading) are retried with the runner's backoff
        until ``models_wait`` seconds have passed in all, then a DHPError names that budget. Other errors are
        raised as the SDK gives them (a refused connection at once: a wrong URL or port fails fast); a body that
        is no model list is a TransientError. Not counted in ``attempts`` (not a call)."""
        import httpx
        import openai

        if self._models is not None:
            return self._models
        if self.offline:
            raise DHPError("A dry run sends no request.", "run without --dry-run.")  # pragma: no cover - guarded
        start = time.monotonic()
        deadline = start + self.models_wait
        tries = 0
        with self._sync_client(self.timeout) as client:
            while True:
                tries += 1
                left = deadline - time.monotonic()
                try:
                    r = client.get("/models", cast_to=httpx.Response,
                                   options={"timeout": self._timeout(max(0.5, min(self.timeout, left)))})
                except openai.NotFoundError:  # some servers have no /models: the first call will tell
                    self._models = {}
                    return self._models
                except (openai.APITimeoutError, openai.RateLimitError, openai.InternalServerError) as e:
                    wait = self.runner.backoff(tries)
                    if time.monotonic() + wait >= deadline:
                        raise DHPError(
                            f"{self.identity if hasattr(self, 'identity') else self.base_url} did not answer its "
                            f"model list (GET {self.base_url}/models) within the {self.models_wait:g} s budget "
                            f"({tries} tries in {time.monotonic() - start:.0f} s; last: {_call_error(e)}).",
                            "wait until the server is ready (a restarted client's server may still be answering "
                            "the killed run's requests, or loading its model), or give it longer: "
                            "DHP_MODELS_WAIT=<seconds> (or models_wait=); cached calls are kept.") from None
                    time.sleep(wait)
                    continue
                try:
                    data = json.loads(r.content)
                    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
                        raise ValueError("no 'data' list")
                except ValueError as e:
                    raise TransientError(f"malformed model list from {self.base_url}/models: {e}") from None
                self._models = data
                return data

    def _only_model(self) -> str:
        """The one model the server lists at /models (no model named in the spec)."""
        try:
            data = self._list_models()
        except DHPError:
            raise
        except Exception:  # noqa: BLE001 - said below: no model could be read
            data = {}
        ids = [m.get("id") for m in data.get("data") or [] if isinstance(m, dict) and m.get("id")]
        if len(ids) != 1:
            found = f"lists {ids}" if ids else "lists no model (or cannot be reached)"
            raise DHPError(f"No model named for {self.base_url}, and its /models {found}.",
                           "name the model: openai:<model>@<base_url>.")
        return str(ids[0])

    def server_info(self) -> dict:
        """The /models entry the server reports for this model ({} if it reports none), fetched once.
        Its id/owner/root name the model that answers, whatever the URL's port; vLLM's entry also gives
        ``max_model_len``, used as ``n_ctx`` unless one was given. Offline (a dry run), or when the server cannot
        be reached: what it reported when the cache was filled, if the cache recorded it."""
        if self.offline and self._server_info is None:
            info = dict(self._recorded_info or {})  # not kept: a later live run asks the server
            if not self._n_ctx_given and isinstance(info.get("max_model_len"), int):
                self._n_ctx = int(info["max_model_len"])
            return info
        if self._server_info is None:
            try:
                data: dict | None = self._list_models()
            except DHPError:
                if self._recorded_info is None:
                    raise  # the budget ran out and nothing names the model: say so, never guess
                data = None
            except Exception:  # noqa: BLE001 - unreachable or refused: the recorded entry, else none (the run's check says why)
                data = None
            if data is None and self._recorded_info is not None:
                # the server cannot be reached (an offline rerun after a batch import): what it reported when
                # the answers were made names the model, so the cached answers are found without a connection
                self._server_info = dict(self._recorded_info)
            else:
                entries = (data or {}).get("data")
                entry = next((m for m in entries or [] if isinstance(m, dict) and m.get("id") == self.model), None)
                self._server_info = entry or {}
            if not self._n_ctx_given and isinstance(self._server_info.get("max_model_len"), int):
                self._n_ctx = int(self._server_info["max_model_len"])
        return self._server_info

    def adopt_record(self, info: dict | None) -> None:
        """The server's self-description recorded in the cache, used when the server cannot be reached."""
        self._recorded_info = info

    def record(self) -> dict:
        """What to record about the server (its model entry as reported; never the key)."""
        info = self.server_info()
        return {k: info[k] for k in ("id", "owned_by", "root", "max_model_len") if info.get(k) is not None}

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
        # Never the URL's credentials (hostname has none).
        host = "local" if self.is_local else urlsplit(self.__url).hostname
        return {"backend": "openai", "host": host, "model": self.fingerprint}

    # ------------------------------------------------------------------ tokenizer
    def _root(self) -> str:
        url = self.__url
        return url[: -len("/v1")] if url.endswith("/v1") else url

    def _post_sync(self, url: str, body: dict) -> dict | None:
        import httpx

        try:
            with self._http() as client:
                r = client.post(url, json=body, headers={"Authorization": f"Bearer {self.__key}"})
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def _server_tokens(self, text: str) -> list[int] | None:
        """Token ids from the server's tokenizer (vLLM /tokenize, llama-cpp-python /extras/tokenize); None offline."""
        if self._tokenize_route == "" or self.offline:
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
        if not self.is_local or self.offline:
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

    # ------------------------------------------------------------------ errors: the SDK's classes
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
        if isinstance(e, openai.APIConnectionError) and not isinstance(e, openai.APITimeoutError) \
                and not self._checked:
            return DHPError(f"Cannot reach the judge server at {self.base_url}.",
                            "start the server or fix the base URL / port.")
        return None  # 400 and the rest: that call fails with its reason (see _per_call_error), the run goes on

    def _transient(self, e: BaseException) -> bool:
        import openai

        # A dropped connection is retried once the server has answered us (the model list):
        # before that it means a wrong URL/port, which must fail fast.
        dropped = self._checked and isinstance(e, openai.APIConnectionError)
        return dropped or isinstance(e, (TransientError, openai.APITimeoutError, openai.RateLimitError,
                                         openai.InternalServerError)) or (
            isinstance(e, openai.APIStatusError) and e.status_code >= 500)

    @staticmethod
    def _per_call_error(e: Exception) -> Exception:
        """A readable reason for one failed call (the run goes on; the circuit breaker counts it): a
        :class:`CallError` in the SDK's wording with the server's structured error."""
        return _call_error(e)

    async def _with_retries(self, fn):
        return await self.runner.with_retries(fn)

    async def _post(self, client, path: str, body: dict) -> dict:
        """POST through the SDK and parse the JSON ourselves, so a malformed body is a retryable error."""
        import httpx

        raw = await client.post(path, body=body, cast_to=httpx.Response)
        try:
            data = json.loads(raw.content)
            if not isinstance(data, dict) or not data.get("choices"):
                raise ValueError("no choices")
            return data
        except (ValueError, TypeError) as e:
            raise TransientError(f"malformed response from {self.base_url}{path}: {e}") from None

    def _check(self) -> None:
        """Fail fast on bad key / unreachable server / unknown model before queueing many calls."""
        if self._checked:
            return
        if self.offline:
            raise DHPError(f"{self.identity} was set up for a dry run, which sends no request.",
                           "make a new backend for the run.")
        try:
            data = self._list_models()
        except DHPError:
            raise
        except Exception as e:  # noqa: BLE001 - mapped to a clear message below
            fatal = self._fatal(e)
            if fatal is not None:
                raise fatal from None
            raise DHPError(f"{self.identity} did not answer the model list: {_call_error(e)}",
                           "check the server is healthy, then rerun (cached calls are kept).") from None
        ids = {m["id"] for m in data.get("data") or [] if isinstance(m, dict) and m.get("id")}
        if ids and self.model not in ids:
            raise DHPError(f"Model {self.model!r} is not served by {self.base_url} "
                           f"(it lists {sorted(ids)[:8]}).", "use one of the listed model names.")
        self._checked = True

    def chat_body(self, req: ChatRequest) -> dict:
        """The JSON body of one chat request, exactly as sent live (dhp.batch exports the same body, so batch and
        live answers share cache keys)."""
        body: dict[str, Any] = {"model": self.model, "messages": req.message_dicts(), "temperature": req.temperature}
        if req.max_tokens is not None:  # None: the server's own limit (GEMBA's a7a7eff8 sends none)
            body["max_tokens"] = req.max_tokens
        if req.seed is not None:  # a request without a seed (LLMBar's protocol) sends none
            body["seed"] = req.seed
        if req.logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = min(int(req.logprobs), 20)
        if req.n > 1:
            body["n"] = req.n
        return body

    @staticmethod
    def parse_chat(data: dict) -> Completion:
        """A chat response body -> Completion (TransientError when malformed); dhp.batch parses batch output with
        it."""
        try:
            choice = data["choices"][0]
            # a null (or absent) content is a reply without text, not a malformed body: readers of the text see "",
            # a protocol that tells it apart reads content_null (GEMBA's GptApi: no answer, no retry)
            content = choice["message"].get("content")
            text = content or ""
            texts = [(c["message"].get("content") or "") for c in data["choices"]]
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
            finish = choice.get("finish_reason")
            return Completion(text, tops, int(usage.get("prompt_tokens") or 0),
                              int(usage.get("completion_tokens") or 0), None,
                              texts if len(texts) > 1 else None, content_null=content is None,
                              finish_reason=finish if isinstance(finish, str) else None)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            raise TransientError(f"malformed chat response: {e!r}") from None

    def _run_many(self, items: Sequence, one, on_result, retry: bool = True) -> list:
        """``one(client, item)`` for every item (the runner's concurrency and retries), after the model list."""
        self._check()

        async def main() -> list:
            client = self._client()
            try:
                return await self.runner.run_many(items, lambda item: one(client, item), on_result, retry=retry)
            finally:
                await client.close()  # closes the pooled httpx client too

        return _run_coro(main())

    def chat_many(self, requests, on_result=None):
        import openai

        async def post(client, req):
            return await self._with_retries(
                lambda: self._post_parsed(client, req))

        async def one(client, req):
            try:
                res = await post(client, replace(req, n=1) if req.n > 1 and self._single_replies else req)
            except openai.BadRequestError as e:
                # vLLM refuses n > 1 at temperature 0 ("n must be 1 when using greedy sampling"): ask for the
                # replies one by one instead, from now on, rather than losing the row
                if req.n > 1 and "greedy" in str(e).lower():
                    self._single_replies = True
                    res = await post(client, replace(req, n=1))
                else:
                    raise
            texts = list(res.texts or [res.text])
            # A server that ignores `n` (llama-cpp-python's does) answers once: ask for the rest singly,
            # each with its own retries.
            while len(texts) < req.n:
                single = replace(req, seed=(req.seed or 0) + len(texts), n=1)
                more = await post(client, single)
                texts.append(more.text)
                res.calls += 1
                res.completion_tokens += more.completion_tokens
            if req.n > 1:
                res.texts = texts[: req.n]
            return res

        return self._run_many(list(requests), one, on_result, retry=False)

    async def _post_parsed(self, client, req: ChatRequest) -> Completion:
        return self.parse_chat(await self._post(client, "/chat/completions", self.chat_body(req)))

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
            return self._run_many(list(pairs), one, on_result)
        except DHPError as e:
            if "(400)" in e.problem or "(404)" in e.problem:
                raise DHPError(f"{self.identity} cannot score likelihoods: {e.problem}",
                               "use mode='logprobs' or 'sample' with this server, or a vLLM/llama.cpp "
                               "server, which support echo with logprobs.") from None
            raise

    def __repr__(self) -> str:  # never show the key
        return f"<OpenAIBackend {self.identity}>"


@register_backend("openai", example="openai:<model>[@<base_url>]", accepts=("allow_insecure_key",))
def _openai(rest: str, **options: Any) -> OpenAIBackend:
    model, _, base = rest.partition("@")
    return OpenAIBackend(model, base or None, **options)
