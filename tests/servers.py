"""Loopback helpers for the tests (not part of the installed package): a real ``llama_cpp.server`` with the embedded GGUF, a
fault-injecting HTTP proxy, and a server that answers every request with one fixed status.

Everything binds to 127.0.0.1 on a free port, and stops itself (context managers, an ``atexit`` hook,
and a lifetime limit on the proxies), so no test leaves a process or thread behind.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from dhp.errors import DHPError

__all__ = ["free_port", "LlamaServer", "start_llama_server", "FaultProxy", "StatusServer", "HangSignalTransport",
           "ScriptedOpenAI", "chat_completion"]

FAULTS = ("429", "500", "timeout", "garbage")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """A running ``python -m llama_cpp.server`` child process. ``base_url`` ends in /v1."""

    def __init__(self, process: subprocess.Popen, port: int, model_alias: str, log_path: Path):
        self.process = process
        self.port = port
        self.model_alias = model_alias
        self.log_path = log_path
        self.base_url = f"http://127.0.0.1:{port}/v1"
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def __enter__(self) -> "LlamaServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_llama_server(model_alias: str = "smollm2-135m", n_ctx: int = 2048, port: int | None = None,
                       n_threads: int | None = None, timeout: float = 120.0,
                       model_path: str | os.PathLike | None = None) -> LlamaServer:
    """Start llama-cpp-python's OpenAI-compatible server with the embedded GGUF (or ``model_path``)
    on 127.0.0.1 and wait until ``/v1/models`` answers."""
    from dhp.backends import default_threads, smollm2_gguf_path

    path = Path(model_path) if model_path else smollm2_gguf_path()
    port = port or free_port()
    threads = n_threads or default_threads()
    log = Path(tempfile.mkstemp(prefix="llama_server_", suffix=".log")[1])
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--host", "127.0.0.1",
           "--port", str(port), "--model_alias", model_alias, "--n_ctx", str(n_ctx), "--seed", "0",
           "--n_threads", str(threads), "--n_threads_batch", str(threads), "--verbose", "False"]
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    server = LlamaServer(proc, port, model_alias, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DHPError(f"llama_cpp.server exited with code {proc.returncode}: "
                           f"{log.read_text(errors='replace')[-800:]}", "check that llama-cpp-python[server] is installed.")
        try:
            with urllib.request.urlopen(f"{server.base_url}/models", timeout=2) as r:
                if r.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.2)
    server.stop()
    raise DHPError(f"llama_cpp.server did not start within {timeout:.0f} s.", "retry, or raise the timeout.")


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # hanging "timeout" handlers must not keep the process alive
    allow_reuse_address = True


class _Base:
    """Shared start/stop for the loopback servers below; stops itself after ``max_lifetime`` seconds."""

    def __init__(self, max_lifetime: float):
        self.max_lifetime = max_lifetime
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _handler(self):  # pragma: no cover - overridden
        raise NotImplementedError

    def start(self):
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        self._timer = threading.Timer(self.max_lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()
        atexit.register(self.stop)
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._timer is not None:
            self._timer.cancel()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class FaultProxy(_Base):
    """HTTP proxy to an OpenAI-compatible ``upstream`` (base URL ending in /v1) that injects faults.

    For each request the proxy decides, from ``sha256(seed, request body, k)`` where k counts how often
    it has seen this exact body, whether to inject a fault (probability ``fault_rate``) and which one
    from ``faults``: "429" (rate limit, with Retry-After: 0), "500", "timeout" (holds the connection for
    ``hang_seconds`` and closes it without answering) or "garbage" (status 200 with a body that is not
    valid JSON). With ``signal_hangs`` a "timeout" sends its status line and headers, one of them
    ``X-DHP-Fault: hang``, then never the body (until the client hangs up, at most ``hang_seconds``): a
    real hang that says so, which :class:`HangSignalTransport` turns into the client's read timeout at
    once, so a test needs no client timeout racing the machine's load. Decisions depend on the body and the try number, not on arrival order, so they are
    deterministic by seed even with concurrent clients. ``max_consecutive`` bounds the faults in a row
    for one body (None: unbounded); ``only_matching``: inject only into bodies containing this string;
    ``paths``: inject only on these URL path suffixes (default: completion endpoints).
    ``counts`` tallies "forwarded" and every fault kind; ``log`` lists (path, outcome) per request.
    """

    def __init__(self, upstream: str, fault_rate: float = 0.3, faults=FAULTS, seed: int = 0,
                 hang_seconds: float = 3.0, max_consecutive: int | None = 2, only_matching: str | None = None,
                 paths: tuple[str, ...] = ("/chat/completions", "/completions"), max_lifetime: float = 600.0,
                 signal_hangs: bool = False):
        super().__init__(max_lifetime)
        bad = [f for f in faults if f not in FAULTS]
        if bad or not faults:
            raise DHPError(f"Unknown fault kind(s) {bad}.", f"use some of {list(FAULTS)}.")
        self.upstream = upstream.rstrip("/")
        self.fault_rate = float(fault_rate)
        self.faults = tuple(faults)
        self.seed = seed
        self.hang_seconds = hang_seconds
        self.signal_hangs = signal_hangs
        self.max_consecutive = max_consecutive
        self.only_matching = only_matching
        self.paths = paths
        self.counts: Counter = Counter()
        self.log: list[tuple[str, str]] = []
        self._seen: Counter = Counter()
        self._streak: Counter = Counter()
        self._lock = threading.Lock()

    def _decide(self, path: str, body: bytes) -> str:
        if not any(path.endswith(p) for p in self.paths):
            return "forwarded"
        if self.only_matching is not None and self.only_matching.encode() not in body:
            return "forwarded"
        digest = hashlib.sha256(body).hexdigest()
        with self._lock:
            k = self._seen[digest]
            self._seen[digest] += 1
            if self.max_consecutive is not None and self._streak[digest] >= self.max_consecutive:
                self._streak[digest] = 0
                return "forwarded"
        h = hashlib.sha256(f"{self.seed}:{digest}:{k}".encode()).digest()
        u = int.from_bytes(h[:8], "big") / 2**64
        if u >= self.fault_rate:
            with self._lock:
                self._streak[digest] = 0
            return "forwarded"
        with self._lock:
            self._streak[digest] += 1
        return self.faults[h[8] % len(self.faults)]

    def _handler(self):
        proxy = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def _send(self, status: int, body: bytes, headers: dict | None = None):
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its own timeout): nothing to deliver

            def _handle(self, method: str):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                outcome = proxy._decide(self.path, body)
                with proxy._lock:
                    proxy.counts[outcome] += 1
                    proxy.log.append((self.path, outcome))
                if outcome == "429":
                    return self._send(429, b'{"error":{"message":"injected rate limit","type":"rate_limit"}}',
                                      {"Retry-After": "0"})
                if outcome == "500":
                    return self._send(500, b'{"error":{"message":"injected server error"}}')
                if outcome == "garbage":
                    return self._send(200, b'{"choices": [{"message": {"content": "4"')
                if outcome == "timeout":
                    self.close_connection = True
                    if not proxy.signal_hangs:
                        time.sleep(proxy.hang_seconds)
                        return
                    try:
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", "64")  # promised, never sent
                        self.send_header(HANG_HEADER, "hang")
                        self.end_headers()
                        self.wfile.flush()
                        self.connection.settimeout(proxy.hang_seconds)
                        self.rfile.read(1)  # returns when the client hangs up (or after hang_seconds)
                    except OSError:
                        pass
                    return
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() in ("content-type", "authorization", "accept")}
                req = urllib.request.Request(proxy.upstream + self.path[len("/v1"):] if self.path.startswith("/v1")
                                             else proxy.upstream + self.path, data=body if method == "POST" else None,
                                             headers=headers, method=method)
                try:
                    with urllib.request.urlopen(req, timeout=300) as r:
                        return self._send(r.status, r.read())
                except urllib.error.HTTPError as e:
                    return self._send(e.code, e.read())
                except (urllib.error.URLError, OSError) as e:
                    return self._send(502, json.dumps({"error": {"message": f"upstream: {e}"}}).encode())

            def do_POST(self):
                self._handle("POST")

            def do_GET(self):
                self._handle("GET")

        return H


HANG_HEADER = "X-DHP-Fault"


class HangSignalTransport:
    """httpx transport (sync and async) for a client behind a ``FaultProxy(signal_hangs=True)``: a response that
    carries the proxy's hang header ends the try with ``httpx.ReadTimeout``, what the client would raise once its
    read timeout ran out on that body, but at once. The client's own timeout can then be long enough that no real
    answer ever meets it, however loaded the machine: which tries time out is decided by the proxy's seed alone.
    ``hangs`` counts them. A fresh connection pool per event loop (the backend runs one loop per batch of calls)."""

    def __init__(self):
        import httpx

        self._httpx = httpx
        self._sync = httpx.HTTPTransport()
        self._async = None
        self._loop = None
        self.hangs = 0

    def _hung(self, request, response) -> bool:
        if response.headers.get(HANG_HEADER, "").lower() != "hang":
            return False
        self.hangs += 1
        return True

    def handle_request(self, request):
        response = self._sync.handle_request(request)
        if self._hung(request, response):
            response.close()
            raise self._httpx.ReadTimeout("read timed out (a hang signalled by the fault proxy)", request=request)
        return response

    async def handle_async_request(self, request):
        import asyncio

        loop = asyncio.get_running_loop()
        if self._async is None or self._loop is not loop:
            self._async, self._loop = self._httpx.AsyncHTTPTransport(), loop
        response = await self._async.handle_async_request(request)
        if self._hung(request, response):
            await response.aclose()
            raise self._httpx.ReadTimeout("read timed out (a hang signalled by the fault proxy)", request=request)
        return response

    def close(self) -> None:  # the backend closes each client it makes: the next one gets a fresh pool
        self._sync.close()
        self._sync = self._httpx.HTTPTransport()

    async def aclose(self) -> None:
        if self._async is not None:
            await self._async.aclose()
            self._async = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


class StatusServer(_Base):
    """Answers every request with ``status`` and an OpenAI-style error body (e.g. 401 for a bad key)."""

    def __init__(self, status: int = 401, message: str = "Incorrect API key provided.",
                 max_lifetime: float = 120.0):
        super().__init__(max_lifetime)
        self.status = status
        self.message = message
        self.requests = 0

    def _handler(self):
        srv = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _reply(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                srv.requests += 1
                body = json.dumps({"error": {"message": srv.message, "type": "invalid_request_error",
                                             "code": str(srv.status)}}).encode()
                self.send_response(srv.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = _reply
            do_POST = _reply

        return H


def chat_completion(content: str | None, *, model: str = "stub", logprobs: list | None = None,
                    finish_reason: str = "stop") -> dict:
    """An OpenAI chat.completion body with one choice (``logprobs``: its ``logprobs.content`` list)."""
    return {"id": "c", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": finish_reason, "logprobs": None if logprobs is None else
                         {"content": logprobs}, "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}


class ScriptedOpenAI(_Base):
    """An OpenAI-compatible loopback server whose answers a test writes: ``reply(path, body)`` returns a JSON body
    (status 200) or ``(status, body)`` for each POST; GET lists ``model``. Every POST's (path, body) is kept in
    ``requests``, the client address of every request (GET too) in ``connections`` (HTTP/1.1 keep-alive: one per TCP
    connection). One server for the tests' stubs instead of a handler class in each test file."""

    def __init__(self, reply, model: str = "stub", max_lifetime: float = 600.0):
        super().__init__(max_lifetime)
        self.reply, self.model = reply, model
        self.requests: list[tuple[str, dict]] = []
        self.connections: set = set()
        self._lock = threading.Lock()

    def _handler(self):
        srv = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status: int, obj: dict) -> None:
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802 (http.server's name)
                with srv._lock:
                    srv.connections.add(self.client_address)
                self._send(200, {"object": "list", "data": [{"id": srv.model, "object": "model"}]})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with srv._lock:
                    srv.connections.add(self.client_address)
                    srv.requests.append((self.path, body))
                out = srv.reply(self.path, body)
                status, obj = out if isinstance(out, tuple) else (200, out)
                self._send(status, obj)

        return H
