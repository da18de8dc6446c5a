"""Calls per second the project pushes to a server that answers instantly (issue 39, item 3).

One run starts a loopback OpenAI-compatible stub in a child process (asyncio, HTTP/1.1 keep-alive, answers every chat
request at once with "Output (a)"; it stops itself after a bounded number of requests or seconds), then measures, on
that same server at the same concurrency (the openai backend's default, 8 requests in flight):

    raw       a bare async httpx loop: N chat requests, each body parsed as JSON (the floor the project is held to)
    engine    the call engine (dhp.calls.plan_chat + run) with an SQLite cache file: N new calls
    evaluate  ``python -m dhp evaluate openai:stub@URL --protocol llmbar:Vanilla --profile paper --yes`` (840 calls),
              calls/s over its call phase (first to last request the stub saw) and the whole command's wall time;
              each run alternates with the raw loop replaying the very requests it sent (LLMBar's longer prompts)

and, with no network and no server (an in-process httpx.MockTransport answering at once), the CPU time per call of the
raw loop and of the openai backend's chat_many: the client's own cost per call, which load from elsewhere moves less
than wall-clock rates. It prints, last, the ratios ``engine/raw``, ``evaluate/raw`` and ``evaluate/raw_same_requests``
(goal >= 0.8), then the paper profile's wall time at the stub's speed, with the machine's facts (CPU model, cores,
load average before and after, date).

With ``--model-server`` it also measures the raw loop and the engine against a served model (llama_cpp.server with the
embedded SmolLM2 on loopback, the same prompts for both, max_tokens 8) and prints ``engine/raw_model_server``: what
the client's own cost is worth beside a model's, on real sockets.

Usage: python benchmarks/call_throughput.py [--n 1000] [--rounds 5] [--evaluate-runs 2] [--concurrency 8]
       [--skip-evaluate] [--model-server [--model-n 48] [--model-rounds 3]]
Not a test: numbers depend on the machine and its load (printed with them).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = "stub"
REPLY = "Output (a)"


# ------------------------------------------------------------------------------------------------- the stub server

def _reply_body(req: dict) -> bytes:
    n = int(req.get("n") or 1)
    choice_lp = None
    if req.get("logprobs"):
        choice_lp = {"content": [{"token": REPLY, "logprob": 0.0, "top_logprobs": [{"token": REPLY, "logprob": 0.0}]}]}
    choices = [{"index": i, "message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop",
                "logprobs": choice_lp if i == 0 else None} for i in range(n)]
    return json.dumps({"id": "stub", "object": "chat.completion", "created": 0, "model": MODEL, "choices": choices,
                       "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}).encode()


class _Stats:
    def __init__(self, max_requests: int):
        self.max_requests = max_requests
        self.chat = 0
        self.other = 0
        self.first = self.last = None  # wall-clock times of the first and last chat request
        self.bodies: list[bytes] = []  # the chat bodies since the last reset (bounded), for the replay
        self.done = asyncio.Event()


async def _serve_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, st: _Stats) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length = 0
            for line in lines[1:]:
                if line[:15].lower() == "content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length) if length else b""
            status = "200 OK"
            if path.endswith("/chat/completions") and method == "POST":
                now = time.time()
                st.first = st.first or now
                st.last = now
                st.chat += 1
                if len(st.bodies) < 20_000:
                    st.bodies.append(body)
                out = _reply_body(json.loads(body))
            elif path.endswith("/models"):
                st.other += 1
                out = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "stub",
                                                              "root": MODEL}]}).encode()
            elif path == "/reset":  # start a new measurement: count and time the chat requests from here
                st.chat, st.first, st.last, st.bodies = 0, None, None, []
                out = b"{}"
            elif path == "/bodies":
                out = b"[" + b",".join(st.bodies) + b"]"
            elif path == "/stats":
                out = json.dumps({"chat": st.chat, "other": st.other, "first": st.first, "last": st.last}).encode()
            else:  # e.g. tokenize probes: this server has none
                st.other += 1
                status, out = "404 Not Found", b'{"error": {"message": "not found"}}'
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(out)}\r\n"
                         f"\r\n".encode() + out)
            await writer.drain()
            if st.chat + st.other >= st.max_requests:
                st.done.set()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _serve(max_requests: int, lifetime: float) -> None:
    st = _Stats(max_requests)
    server = await asyncio.start_server(lambda r, w: _serve_conn(r, w, st), "127.0.0.1", 0, backlog=256)
    print(server.sockets[0].getsockname()[1], flush=True)
    try:
        await asyncio.wait_for(st.done.wait(), lifetime)  # bounded: stops by itself
    except asyncio.TimeoutError:
        pass
    server.close()


class Stub:
    """The stub in a child process (so it does not share the measured process's interpreter lock)."""

    def __init__(self, max_requests: int = 100_000, lifetime: float = 900.0):
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", str(max_requests), str(lifetime)],
                                     stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline())
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict:
        import httpx

        return httpx.get(f"http://127.0.0.1:{self.port}/stats", timeout=30).json()

    def bodies(self) -> list[dict]:
        """The chat request bodies the stub received since the last reset, in arrival order."""
        import httpx

        return httpx.get(f"http://127.0.0.1:{self.port}/bodies", timeout=60).json()

    def reset(self) -> None:
        import httpx

        httpx.get(f"http://127.0.0.1:{self.port}/reset", timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


# ------------------------------------------------------------------------------------------------- the measurements

def _messages(i: int) -> list[dict]:
    return [{"role": "system", "content": "You are a helpful assistant in evaluating the quality of the outputs."},
            {"role": "user", "content": f"# Instruction:\nWrite sentence {i}.\n# Output (a):\nA {i}.\n"
                                        f"# Output (b):\nB {i}.\n# Which is better, Output (a) or Output (b)?"}]


def measure_raw(base_url: str, n: int, concurrency: int, bodies: list[dict] | None = None, offset: int = 0,
                max_tokens: int = 16, model: str = MODEL) -> float:
    """Seconds for a bare httpx.AsyncClient loop to send ``n`` chat requests, ``concurrency`` in flight (``bodies``:
    these requests instead, e.g. the ones evaluate sent; ``offset``: the first prompt's number)."""
    import httpx

    if bodies is not None:
        n = len(bodies)

    async def main() -> float:
        sem = asyncio.Semaphore(concurrency)
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(base_url=base_url, timeout=60, limits=limits) as client:
            async def one(i: int) -> None:
                async with sem:
                    r = await client.post("/chat/completions", json=bodies[i] if bodies is not None else {
                        "model": model, "messages": _messages(offset + i), "max_tokens": max_tokens,
                        "temperature": 0.0})
                    text = r.json()["choices"][0]["message"]["content"]
                    assert text == REPLY or model != MODEL and isinstance(text, str), text

            t0 = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(n)))
            return time.perf_counter() - t0

    return asyncio.run(main())


def measure_engine(base_url: str, n: int, concurrency: int, offset: int, max_tokens: int = 16,
                   model: str = MODEL) -> tuple[float, int]:
    """Seconds for dhp.calls (plan + run, SQLite cache file) to make ``n`` new chat calls; and the rows it stored."""
    from dhp.backends import ChatRequest, OpenAIBackend
    from dhp.cache import Cache
    from dhp.calls import plan_chat, run

    backend = OpenAIBackend(model, base_url, concurrency=concurrency)
    with tempfile.TemporaryDirectory() as tmp:
        store = Cache(Path(tmp) / "cache.sqlite")
        t0 = time.perf_counter()
        calls = [plan_chat(backend, ChatRequest(tuple((m["role"], m["content"]) for m in _messages(offset + i)),
                                                max_tokens=max_tokens, temperature=0.0)) for i in range(n)]
        report = run(backend, calls, store, progress=False)
        seconds = time.perf_counter() - t0
        rows = len(store)
        store.close()
    assert not report.errors, list(report.errors.values())[:3]
    return seconds, rows


def measure_client_cpu(n: int, concurrency: int) -> tuple[float, float]:
    """CPU-ms per call, in this process, of the raw loop and of OpenAIBackend.chat_many over an in-process transport
    that answers at once (no sockets, no server): what each side's own code costs per call."""
    import httpx

    from dhp.backends import ChatRequest, OpenAIBackend

    reply = _reply_body({})
    listing = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()

    def handle(request: httpx.Request) -> httpx.Response:
        body = listing if request.url.path.endswith("/models") else reply
        return httpx.Response(200, content=body, headers={"Content-Type": "application/json"})

    url = "http://127.0.0.1:9/v1"  # never contacted: the transport answers

    def raw() -> None:
        async def main() -> None:
            sem = asyncio.Semaphore(concurrency)
            async with httpx.AsyncClient(transport=httpx.MockTransport(handle), timeout=60) as client:
                async def one(i: int) -> None:
                    async with sem:
                        r = await client.post(url + "/chat/completions", json={
                            "model": MODEL, "messages": _messages(i), "max_tokens": 16, "temperature": 0.0})
                        assert r.json()["choices"][0]["message"]["content"] == REPLY

                await asyncio.gather(*(one(i) for i in range(n)))

        asyncio.run(main())

    def backend() -> None:
        b = OpenAIBackend(MODEL, url, concurrency=concurrency, transport=httpx.MockTransport(handle))
        out = b.chat_many([ChatRequest(tuple((m["role"], m["content"]) for m in _messages(i)), max_tokens=16,
                                       temperature=0.0) for i in range(n)])
        assert all(o.text == REPLY for o in out)

    best = {}
    for f in (raw, backend, raw, backend, raw, backend):
        t0 = time.process_time()
        f()
        best[f] = min(best.get(f, float("inf")), (time.process_time() - t0) / n * 1e3)
    return best[raw], best[backend]


def measure_model_server(n: int, rounds: int, concurrency: int, max_tokens: int) -> tuple[list, list]:
    """Raw loop and engine against a served model: llama_cpp.server with the embedded SmolLM2 GGUF on loopback (the
    test suite's server helper). Each round sends both sides the same ``n`` new prompts (temperature 0: the same
    replies), raw first; returns each side's seconds per round."""
    sys.path.insert(0, str(ROOT / "tests"))
    from servers import start_llama_server  # the tests' loopback helper: one way to start the server

    raw, eng = [], []
    with start_llama_server(model_alias="smollm2") as server:
        measure_raw(server.base_url, 4, concurrency, offset=-100, max_tokens=max_tokens, model="smollm2")  # warm up
        for k in range(rounds):
            raw.append(measure_raw(server.base_url, n, concurrency, offset=10_000 + k * n, max_tokens=max_tokens,
                                   model="smollm2"))
            seconds, stored = measure_engine(server.base_url, n, concurrency, offset=10_000 + k * n,
                                             max_tokens=max_tokens, model="smollm2")
            assert stored == n, f"engine stored {stored} rows for {n} calls"
            eng.append(seconds)
    return raw, eng


def measure_evaluate(stub: Stub, concurrency: int) -> dict:
    """The evaluate command on LLMBar's Vanilla protocol at the paper profile, in a fresh run folder and cache."""
    stub.reset()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "dhp", "evaluate", f"openai:{MODEL}@{stub.base_url}", "--protocol",
               "llmbar:Vanilla", "--profile", "paper", "--yes", "--run-dir", str(Path(tmp) / "run")]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "no_proxy": "127.0.0.1,localhost"}
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"evaluate failed ({r.returncode}):\n{r.stderr[-3000:]}")
    after = stub.stats()
    return {"calls": after["chat"], "call_phase_s": after["last"] - after["first"], "wall_s": wall,
            "bodies": stub.bodies()}


def machine_facts() -> str:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"cpu={cpu!r} cores={cores} python={platform.python_version()}"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="calls per round for the raw loop and the engine (default 1000)")
    ap.add_argument("--concurrency", type=int, default=8, help="requests in flight (the openai backend's default)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="alternating raw/engine rounds; the best of each counts (default 5: on a shared 2-core "
                    "machine the best of 3 still moved the ratio by ~0.1 from run to run)")
    ap.add_argument("--evaluate-runs", type=int, default=2, help="evaluate runs (each ~10-30 s); the best counts")
    ap.add_argument("--skip-evaluate", action="store_true", help="measure the raw loop and the engine only")
    ap.add_argument("--model-server", action="store_true",
                    help="also measure both against a served model (llama_cpp.server with the embedded SmolLM2 on "
                         "loopback): prints engine/raw_model_server")
    ap.add_argument("--model-n", type=int, default=48, help="calls per round against the served model (default 48)")
    ap.add_argument("--model-rounds", type=int, default=3, help="rounds against the served model (default 3)")
    ap.add_argument("--paper-calls", type=int, default=42_287,
                    help="calls of a full paper-profile evaluate, for the wall-time estimate (default 42287)")
    args = ap.parse_args()

    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"date={date} {machine_facts()}")
    print(f"load_before={load()}")
    raw, eng, rows = [], [], []
    with Stub() as stub:
        measure_raw(stub.base_url, 200, args.concurrency)  # warm up both sides (imports, connections)
        measure_engine(stub.base_url, 200, args.concurrency, offset=-1000)
        # Rounds alternate the two, so a burst of load from elsewhere hits both; the best of each is compared.
        for k in range(args.rounds):
            t0 = time.process_time()
            raw.append((measure_raw(stub.base_url, args.n, args.concurrency), time.process_time() - t0))
            t0 = time.process_time()
            seconds, stored = measure_engine(stub.base_url, args.n, args.concurrency, offset=(k + 1) * args.n)
            eng.append((seconds, time.process_time() - t0))
            rows.append(stored)
        assert rows == [args.n] * args.rounds, f"engine stored {rows} rows for {args.n} calls per round"
        raw_s, eng_s = min(w for w, _ in raw), min(w for w, _ in eng)
        raw_rate, eng_rate = args.n / raw_s, args.n / eng_s
        ms = lambda runs: min(c for _, c in runs) / args.n * 1e3  # noqa: E731 - CPU ms per call in this process
        print(f"raw       {args.n} calls x {args.rounds}: best {raw_s:6.2f} s  {raw_rate:7.1f} calls/s  "
              f"{ms(raw):.2f} CPU-ms/call  (all: {', '.join(f'{w:.2f}' for w, _ in raw)} s)")
        print(f"engine    {args.n} calls x {args.rounds}: best {eng_s:6.2f} s  {eng_rate:7.1f} calls/s  "
              f"{ms(eng):.2f} CPU-ms/call  (all: {', '.join(f'{w:.2f}' for w, _ in eng)} s; SQLite cache file)")
        c_raw, c_backend = measure_client_cpu(args.n, args.concurrency)
        print(f"client    {args.n} calls x 3 over an in-process transport (no network, no server): raw {c_raw:.3f}, "
              f"openai backend {c_backend:.3f} CPU-ms/call (best of 3)")
        ev = None
        if not args.skip_evaluate:
            # evaluate runs alternate with the raw loop replaying the requests evaluate sent (LLMBar's prompts, longer
            # than the loop's), the best of each compared as for the engine
            evs, replays = [], []
            for _ in range(args.evaluate_runs):
                evs.append(measure_evaluate(stub, args.concurrency))
                replays.append(measure_raw(stub.base_url, 0, args.concurrency, evs[-1]["bodies"]))
            ev = min(evs, key=lambda e: e["call_phase_s"])
            ev_rate = ev["calls"] / ev["call_phase_s"] if ev["call_phase_s"] > 0 else float("nan")
            replay_rate = len(ev["bodies"]) / min(replays)
            phases = ", ".join(f"{e['call_phase_s']:.2f}" for e in evs)
            walls = ", ".join(f"{e['wall_s']:.1f}" for e in evs)
            print(f"evaluate  {ev['calls']} calls x {len(evs)}: best call phase {ev['call_phase_s']:6.2f} s  "
                  f"{ev_rate:7.1f} calls/s  (first to last request the stub saw; all: {phases} s); whole command "
                  f"{walls} s (llmbar:Vanilla, --profile paper)")
            print(f"raw       the same {len(ev['bodies'])} requests replayed x {len(replays)}: "
                  f"best {min(replays):6.2f} s  {replay_rate:7.1f} calls/s")
    ms_ratio = None
    if args.model_server:
        m_raw, m_eng = measure_model_server(args.model_n, args.model_rounds, args.concurrency, max_tokens=8)
        ms_ratio = min(m_raw) / min(m_eng)
        print(f"model_server raw     {args.model_n} calls x {args.model_rounds}: best {min(m_raw):6.2f} s  "
              f"{args.model_n / min(m_raw):6.1f} calls/s  (all: {', '.join(f'{w:.2f}' for w in m_raw)} s; "
              "llama_cpp.server, SmolLM2-135M, max_tokens 8)")
        print(f"model_server engine  {args.model_n} calls x {args.model_rounds}: best {min(m_eng):6.2f} s  "
              f"{args.model_n / min(m_eng):6.1f} calls/s  (all: {', '.join(f'{w:.2f}' for w in m_eng)} s; the same "
              "prompts, SQLite cache file)")
    print(f"load_after={load()}")
    print(f"engine/raw {eng_rate / raw_rate:.3f}")
    if ms_ratio is not None:
        print(f"engine/raw_model_server {ms_ratio:.3f}")
    if ev is not None:
        print(f"evaluate/raw {ev_rate / raw_rate:.3f}")
        print(f"evaluate/raw_same_requests {ev_rate / replay_rate:.3f}")
        print(f"paper_wall llmbar:Vanilla {ev['wall_s']:.1f} s at a server of {raw_rate:.0f} calls/s "
              f"({ev['call_phase_s']:.1f} s calls + {ev['wall_s'] - ev['call_phase_s']:.1f} s the rest)")
    eff = min(eng_rate, raw_rate)
    print(f"paper_wall_calls {args.paper_calls} calls: >= {args.paper_calls / eff / 60:.1f} min of calls at "
          f"{eff:.0f} calls/s (the engine's rate here; a slower server sets its own)")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        asyncio.run(_serve(int(sys.argv[2]), float(sys.argv[3])))
    else:
        main()
