"""LLM perturbations go through the shared cache: a run killed with SIGKILL and rerun repeats no call
except those in flight at the kill — counted at the server — and ends with the uninterrupted run's table.
A dry run counts the calls without making any."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pytest

from dhp.cache import Cache
from dhp.perturb import perturb

N_ITEMS = 10
REF = "Anna Smith met {i} friends in Boston on Monday. They ate cake together at noon."


class FakeServer:
    """OpenAI-compatible chat server on loopback that swaps "Boston" for "Lake Ora" in the reference
    found in the prompt, answers after a delay, and counts requests received and answered."""

    def __init__(self, delay: float = 0.15):
        self.received = 0
        self.answered = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, obj):
                body = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self._send({"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "test"}]})

            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not self.path.endswith("/chat/completions"):  # e.g. a tokenizer probe: not a model call
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                with outer.lock:
                    outer.received += 1
                time.sleep(delay)
                prompt = req["messages"][-1]["content"]
                ref = re.findall(r"Anna Smith met \d+ friends in Boston on Monday\. They ate cake together at noon\.",
                                 prompt)[-1]
                text = ref.replace("Boston", "Lake Ora")
                try:
                    self._send({"id": "x", "object": "chat.completion", "model": "fake",
                                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                             "finish_reason": "stop"}],
                                "usage": {"prompt_tokens": 50, "completion_tokens": 20}})
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client was killed while this answer was on its way
                with outer.lock:
                    outer.answered += 1

        class Server(ThreadingHTTPServer):
            # connections accepted and not yet handled to the end, counted on the accepting thread (before the
            # handler's thread starts), so "none open" after a later probe means every earlier request was counted
            def process_request(self, request, client_address):
                with outer.lock:
                    outer.open += 1
                super().process_request(request, client_address)

            def shutdown_request(self, request):
                super().shutdown_request(request)
                with outer.lock:
                    outer.open -= 1

        self.open = 0
        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def settle(self, timeout: float = 300.0) -> None:
        """Return once every request that reached the server before this call has been read and counted: a probe
        connection is accepted after all earlier ones (the listen queue is first in, first out), then wait until no
        accepted connection is still being handled. No fixed pause that a loaded machine could outrun."""
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(self.url + "/models", timeout=timeout).read()
        deadline = time.monotonic() + timeout  # only a hung server gets here: load delays, never fails this
        while True:
            with self.lock:
                if self.open == 0:
                    return
            assert time.monotonic() < deadline, f"{self.open} connections still open after {timeout:.0f} s"
            time.sleep(0.01)

    def close(self):
        self.httpd.shutdown()


def items() -> pd.DataFrame:
    return pd.DataFrame([{"dataset": "mine", "task": "summarization", "item_id": f"i{i}", "source": "",
                          "reference": REF.format(i=i + 2)} for i in range(N_ITEMS)])


SCRIPT = """
import sys, pandas as pd
from dhp.perturb import perturb
df = pd.read_json(sys.argv[1])
df["item_id"] = df["item_id"].astype(str)
perturb(df, perturber="openai:fake@" + sys.argv[2], perturbations=["fictional_entities"], cache=sys.argv[3])
"""


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def test_sigkill_then_rerun_repeats_only_calls_in_flight(tmp_path, server):
    n_calls = N_ITEMS * 2  # minor and major per item
    data = tmp_path / "items.json"
    items().to_json(data)
    cache = tmp_path / "cache.sqlite"
    env = {**os.environ, "OPENAI_API_KEY": ""}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(data), server.url, str(cache)], env=env)
    deadline = time.monotonic() + 120
    while server.answered < 6 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    with server.lock:
        answered_at_kill = server.answered
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # Count requests only once the client is dead: one sent between a count and the kill would be missed.
    # Requests already in the server's socket buffers are read and counted before the count is taken.
    server.settle()
    with server.lock:
        received_at_kill = server.received
    assert 6 <= answered_at_kill < n_calls, "the kill must interrupt the run"
    with Cache(cache) as c:
        committed = len(c)  # answers the killed run had stored
    in_flight = received_at_kill - committed  # asked but not stored at the kill: may be asked again
    assert 0 <= in_flight <= 8  # bounded by the backend's concurrency

    table = perturb(items(), perturber=f"openai:fake@{server.url}", perturbations=["fictional_entities"],
                    cache=cache)
    assert server.received - received_at_kill == n_calls - committed  # every stored answer is reused
    assert server.received <= n_calls + in_flight
    assert (table.loc[table.perturbation != "original", "status"] == "ok").all()

    before = server.received
    fresh = perturb(items(), perturber=f"openai:fake@{server.url}", perturbations=["fictional_entities"],
                    cache=tmp_path / "fresh.sqlite")
    assert server.received - before == n_calls  # the uninterrupted run asks each call once
    pd.testing.assert_frame_equal(table, fresh)
    again = perturb(items(), perturber=f"openai:fake@{server.url}", perturbations=["fictional_entities"],
                    cache=cache)
    assert server.received - before == n_calls  # a rerun asks nothing
    pd.testing.assert_frame_equal(again, fresh)


def test_dry_run_counts_calls_and_makes_none(tmp_path, server):
    t, est = perturb(items(), perturber=f"openai:fake@{server.url}", perturbations=["fictional_entities"],
                     cache=tmp_path / "c.sqlite", dry_run=True)
    assert server.received == 0
    assert est.calls == N_ITEMS * 2 and est.cached_calls == 0 and est.prompt_tokens > 0
    assert set(t.loc[t.perturbation != "original", "status"]) == {"pending"}
    perturb(items().iloc[:3], perturber=f"openai:fake@{server.url}", perturbations=["fictional_entities"],
            cache=tmp_path / "c.sqlite")
    _, est2 = perturb(items(), perturber=f"openai:fake@{server.url}", perturbations=["fictional_entities"],
                      cache=tmp_path / "c.sqlite", dry_run=True)
    assert (est2.calls, est2.cached_calls) == ((N_ITEMS - 3) * 2, 3 * 2)
