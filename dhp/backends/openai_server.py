"""Any OpenAI-compatible server (OpenAI, vllm serve, llama_cpp.server, Ollama): async, retried, key-safe."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import json
import os
from dataclasses import replace
from typing import Any, Sequence
from urllib.parse import urlparse


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


def is_loopback(host: str) -> bool:
    """True for addresses that never leave this machine (127.0.0.0/8, ::1, localhost)."""
    if host in _LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ServerStatusError(RuntimeError):
    """An HTTP error status from the server. Its text is worded as the openai SDK worded it ("Error code: 400 - <the
    server's error message>"): the protocols' refusal rules read it (too long, content filter), and reasons already
    recorded keep their form."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status_code = status
        self.message = message


class ServerTimeout(RuntimeError):
    """No answer within the client's timeout (retried)."""


class ServerUnreachable(RuntimeError):
    """The connection failed or dropped (fatal before the server has answered once, retried after)."""


def _status_error(response) -> ServerStatusError:
    """The error for a non-2xx response: the status and the server's ``error.message`` (or top-level ``message``)."""
    text = f"Error code: {response.status_code}"
    try:
        body = json.loads(response.text.strip())
    except ValueError:
        body = None
    error = body.get("error", body) if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if isinstance(message, str) and message:
        text += f" - {message}"
    return ServerStatusError(response.status_code, text)


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

    Without OPENAI_API_KEY a server other than api.openai.com gets :data:`PLACEHOLDER_KEY` (self-hosted servers take
    no key). ``model`` may be empty when ``base_url`` is given and the server's /models lists exactly one model: that
    one is used. ``transport``: an httpx transport for every request (tests replace the network with
    ``httpx.MockTransport``).
    """

    def __init__(self, model: str, base_url: str | None = None, *, concurrency: int = 8,
                 max_retries: int = 4, timeout: float = 60.0, backoff_initial: float = 0.5,
                 backoff_max: float = 8.0, n_ctx: int | None = None, allow_insecure_key: bool = False,
                 transport=None):
        if not model and not base_url:
            raise DHPError("The openai backend needs a model name.", "use 'openai:<model>[@<base_url>]'.")
        self._transport = transport
        self.timeout = float(timeout)
        self.base_url = (base_url or "https://api.openai.com/v1").rstrip("/")
        parsed = urlparse(self.base_url)
        host = parsed.hostname or ""
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
        self.model = model or self._only_model()
        self.identity = f"openai:{self.model}" if base_url is None else f"openai:{self.model}@{self.base_url}"
        self._n_ctx_given = n_ctx is not None
        self._server_info: dict | None = None
        self._recorded_info: dict | None = None  # what the server reported when the cache was filled
        self._tokenize_route: str | None = None  # "vllm", "llama_cpp" or "" (none) once probed
        self._token_counts: dict[str, int] = {}
        self.timeout = float(timeout)
        self._n_ctx = n_ctx
        # concurrency, retries and backoff belong to the shared runner; this backend says what an error means
        self.runner = Runner(self._transient, self._fatal, self._per_call_error, concurrency=int(concurrency),
                             max_retries=int(max_retries), backoff_initial=float(backoff_initial),
                             backoff_max=float(backoff_max))
        self._checked = False
        self._single_replies = False  # the server refused n > 1 replies in one request

    @property
    def attempts(self) -> int:
        """Every HTTP try so far (first tries and retries), counted by the runner."""
        return self.runner.attempts

    @property
    def concurrency(self) -> int:
        return self.runner.concurrency

    @property
    def max_retries(self) -> int:
        return self.runner.max_retries

    def _only_model(self) -> str:
        """The one model the server lists at /models (no model named in the spec)."""
        data = self._get("/models")
        ids = [m.get("id") for m in (data or {}).get("data") or [] if isinstance(m, dict) and m.get("id")] \
            if isinstance(data, dict) else []
        if len(ids) != 1:
            found = f"lists {ids}" if ids else "lists no model (or cannot be reached)"
            raise DHPError(f"No model named for {self.base_url}, and its /models {found}.",
                           "name the model: openai:<model>@<base_url>.")
        return str(ids[0])

    def _client(self):
        """One bare httpx client per batch of calls (per event loop): every request of the batch shares its pool of
        keep-alive connections, one per request in flight. Not the openai SDK: its request path cost ~0.3 CPU-ms more
        per call than bare httpx over an in-process transport and its import ~0.8 s per command (docs/benchmarks.md);
        the bodies, statuses and error texts are the ones it gave (see _send, _status_error)."""
        import httpx

        timeout = httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0))
        n = max(1, self.concurrency)
        # the key goes in the client's headers, which httpx never logs nor shows, and drops on a redirect elsewhere
        return httpx.AsyncClient(transport=self._transport, timeout=timeout, follow_redirects=True,
                                 limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
                                 headers={"Authorization": f"Bearer {self.__key}", "Accept": "application/json"})

    async def _send(self, client, method: str, path: str, body: dict | None = None):
        """One HTTP try: the 2xx response, or ServerStatusError / ServerTimeout / ServerUnreachable."""
        import httpx

        try:
            r = await client.request(method, self.base_url + path, json=body)
        except httpx.TimeoutException:
            raise ServerTimeout(f"timeout: no answer from {self.base_url}{path} within {self.timeout:g} s") from None
        except httpx.RequestError as e:
            raise ServerUnreachable(f"connection error ({type(e).__name__}) to {self.base_url}{path}") from None
        if not r.is_success:
            raise _status_error(r)
        return r

    def _http(self):
        import httpx

        return httpx.Client(transport=self._transport, timeout=min(self.timeout, 10.0))

    # ------------------------------------------------------------------ what the server says about itself
    def _get(self, path: str) -> dict | None:
        import httpx

        try:
            with self._http() as client:
                r = client.get(self.base_url + path, headers={"Authorization": f"Bearer {self.__key}"})
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def _post_sync(self, url: str, body: dict) -> dict | None:
        import httpx

        try:
            with self._http() as client:
                r = client.post(url, json=body, headers={"Authorization": f"Bearer {self.__key}"})
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def server_info(self) -> dict:
        """The /models entry the server reports for this model ({} if it reports none), fetched once.
        Its id/owner/root name the model that answers, whatever the URL's port; vLLM's entry also gives
        ``max_model_len``, used as ``n_ctx`` unless one was given."""
        if self._server_info is None:
            data = self._get("/models")
            if data is None and self._recorded_info is not None:
                # the server cannot be reached (an offline rerun after a batch import): what it reported when
                # the answers were made names the model, so the cached answers are found without a connection
                self._server_info = dict(self._recorded_info)
            else:
                entries = (data or {}).get("data") if isinstance(data, dict) else None
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
        where = f"{self.identity}"
        status = e.status_code if isinstance(e, ServerStatusError) else None
        if status == 401:
            return DHPError(f"{where} rejected the API key (401).",
                            "set a valid OPENAI_API_KEY in the environment.")
        if status == 403:
            return DHPError(f"{where} refused access (403) for model {self.model!r}.",
                            "check that your key/project may use this model.")
        if status == 404:
            return DHPError(f"{where}: model {self.model!r} or endpoint not found (404).",
                            "check the model name and the base URL (it usually ends in /v1).")
        if isinstance(e, ServerUnreachable) and not self._checked:
            return DHPError(f"Cannot reach the judge server at {self.base_url}.",
                            "start the server or fix the base URL / port.")
        return None  # 400 and the rest: that call fails with its reason (see _per_call_error), the run goes on

    def _transient(self, e: BaseException) -> bool:
        # A dropped connection is retried once the server has answered us (the model list):
        # before that it means a wrong URL/port, which must fail fast.
        dropped = self._checked and isinstance(e, ServerUnreachable)
        return dropped or isinstance(e, (TransientError, ServerTimeout)) or (
            isinstance(e, ServerStatusError) and (e.status_code == 429 or e.status_code >= 500))

    @staticmethod
    def _per_call_error(e: Exception) -> Exception:
        """A readable reason for one failed call (the run goes on; the circuit breaker counts it)."""
        if isinstance(e, ServerStatusError) and e.status_code == 400:
            msg = e.message
            low = msg.lower()
            if any(w in low for w in ("context", "too long", "maximum", "exceed", "n_ctx")):
                return RuntimeError(f"context overflow: HTTP 400: {msg[:200]}")
            return RuntimeError(f"HTTP 400: {msg[:200]}")
        if isinstance(e, ServerStatusError):
            return RuntimeError(f"HTTP {e.status_code}: {e.message[:200]}")
        if isinstance(e, ServerTimeout):
            return RuntimeError("timeout")
        return e

    async def _with_retries(self, fn):
        return await self.runner.with_retries(fn)

    async def _post(self, client, path: str, body: dict) -> dict:
        """POST and parse the JSON ourselves, so a malformed body is a retryable error."""
        raw = await self._send(client, "POST", path, body)
        try:
            data = json.loads(raw.content)
            if not isinstance(data, dict) or not data.get("choices"):
                raise ValueError("no choices")
            return data
        except (ValueError, TypeError) as e:
            raise TransientError(f"malformed response from {self.base_url}{path}: {e}") from None

    async def _check(self, client) -> None:
        """Fail fast on bad key / unreachable server / unknown model before queueing many calls."""
        if self._checked:
            return

        async def models() -> set[str]:
            data = (await self._send(client, "GET", "/models")).json()
            return {m["id"] for m in data["data"] if isinstance(m, dict) and m.get("id")}

        try:
            ids = await self._with_retries(models)
        except Exception as e:  # noqa: BLE001 - mapped to a clear message below
            if not (isinstance(e, ServerStatusError) and e.status_code == 404):
                fatal = self._fatal(e)
                if fatal is not None:
                    raise fatal from None
                raise DHPError(f"{self.identity} did not answer the model list: {e}",
                               "check the server is healthy, then rerun (cached calls are kept).") from None
            ids = set()  # some servers have no /models endpoint: the first call will tell
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

    async def _run_many(self, items: Sequence, one, on_result, retry: bool = True) -> list:
        client = self._client()
        try:
            await self._check(client)
            return await self.runner.run_many(items, lambda item: one(client, item), on_result, retry=retry)
        finally:
            await client.aclose()

    def chat_many(self, requests, on_result=None):
        async def post(client, req):
            return await self._with_retries(
                lambda: self._post_parsed(client, req))

        async def one(client, req):
            try:
                res = await post(client, replace(req, n=1) if req.n > 1 and self._single_replies else req)
            except ServerStatusError as e:
                # vLLM refuses n > 1 at temperature 0 ("n must be 1 when using greedy sampling"): ask for the
                # replies one by one instead, from now on, rather than losing the row
                if req.n > 1 and e.status_code == 400 and "greedy" in str(e).lower():
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

        return _run_coro(self._run_many(list(requests), one, on_result, retry=False))

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
            return _run_coro(self._run_many(list(pairs), one, on_result))
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
