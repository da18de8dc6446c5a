"""Calls per second through Ray Data (--engine ray) vs the live engine, against the loopback instant server, in one run,
and Ray's fixed start-up cost: from what size of job Ray pays (docs/benchmarks.md, docs/cluster.md).

    RAY_ADDRESS=...  python benchmarks/ray_throughput.py --calls 400 --replicas 2 --batch-size 50

Both engines answer the same N chat calls (fresh in-memory caches, so every call is made); the instant server
(benchmarks/instant_server.py) answers at once, so what is measured is the engines' own cost per call. Ray's fixed
cost is the time from nothing to the first answer of a one-call job (connecting to the cluster or starting a local
Ray, then starting the job's actors); its per-call rate is measured on a second, N-call job. Crossover: the N above
which live time N / live_rate exceeds fixed + N / ray_rate (none when Ray's rate is not higher).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=50)
    ap.add_argument("--cpus", type=float, default=0.5, help="CPUs per request actor")
    a = ap.parse_args(argv)

    import instant_server

    from dhp import calls
    from dhp.backends import ChatRequest
    from dhp.backends.ray_engine import RayEngine
    from dhp.config import EngineParams

    srv = ThreadingHTTPServer(("127.0.0.1", 0), instant_server.Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    judge = f"openai:stub@http://127.0.0.1:{srv.server_address[1]}/v1"

    def requests(tag: str, n: int):
        return [ChatRequest(messages=(("user", f"{tag} rate text {i}"),), max_tokens=4, temperature=0.0)
                for i in range(n)]

    t = time.perf_counter()
    calls.chat(judge, requests("live", a.calls), progress=False)
    live = time.perf_counter() - t

    engine = RayEngine(EngineParams(engine="ray", ray_replicas=a.replicas, ray_batch_size=a.batch_size,
                                    ray_cpus=a.cpus), out=open(os.devnull, "w"))
    t = time.perf_counter()
    with calls.using_engine(engine):
        calls.chat(judge, requests("warm", 1), progress=False)
    fixed = time.perf_counter() - t
    t = time.perf_counter()
    with calls.using_engine(engine):
        got = calls.chat(judge, requests("ray", a.calls), progress=False)
    ray_s = time.perf_counter() - t
    assert all(not isinstance(g, calls.CallFailure) for g in got)

    live_rate, ray_rate = a.calls / live, a.calls / ray_s
    print(f"cluster: {engine.address or 'local Ray started here'}; {a.calls} calls; {a.replicas} request actors x "
          f"{a.batch_size} rows per block; nodes that answered: {len(engine.last.get('nodes', []))}")
    print(f"live engine: {live:.2f} s, {live_rate:.1f} calls/s")
    print(f"ray engine:  {ray_s:.2f} s, {ray_rate:.1f} calls/s (a job of {a.calls} calls on a started cluster)")
    print(f"ray fixed cost (connect or start Ray, first one-call job): {fixed:.1f} s")
    if ray_rate > live_rate:
        n = fixed / (1 / live_rate - 1 / ray_rate)
        print(f"crossover: Ray pays from about {n:,.0f} calls")
    else:
        print("crossover: none here (Ray's per-call rate is not above the live engine's on this machine)")


if __name__ == "__main__":
    main()
