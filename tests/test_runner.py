"""The shared runner of remote backends (dhp.backends.runner): retries, per-call failures, fatal errors, order and
concurrency — on scripted coroutines, no network."""

from __future__ import annotations

import asyncio

import pytest

from dhp.backends.runner import Runner
from dhp.errors import DHPError


class Flaky(Exception):
    pass


class Bad(Exception):
    pass


class Denied(Exception):
    pass


def _runner(**kw) -> Runner:
    return Runner(is_transient=lambda e: isinstance(e, Flaky),
                  to_fatal=lambda e: DHPError("denied", "fix the key") if isinstance(e, Denied) else None,
                  to_call_error=lambda e: RuntimeError(f"failed: {type(e).__name__}"),
                  backoff_initial=0.0, backoff_max=0.0, **kw)


def test_transient_errors_are_retried_and_the_rest_fail_only_their_call_in_input_order():
    tries: dict[int, int] = {}
    in_flight, peak = [0], [0]

    async def one(i):
        tries[i] = tries.get(i, 0) + 1
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        await asyncio.sleep(0.001 * (5 - i))  # finish out of order
        in_flight[0] -= 1
        if i == 1 and tries[i] < 3:
            raise Flaky()  # succeeds on its third try
        if i == 2:
            raise Flaky()  # never succeeds: 1 + max_retries tries, then a per-call error
        if i == 3:
            raise Bad()  # not transient: no retry
        return i * 10

    r = _runner(concurrency=2, max_retries=3)
    seen = []
    out = asyncio.run(r.run_many(list(range(5)), one, on_result=lambda i, res: seen.append(i)))
    assert out[0] == 0 and out[1] == 10 and out[4] == 40
    assert isinstance(out[2], RuntimeError) and "Flaky" in str(out[2]) and tries[2] == 4
    assert isinstance(out[3], RuntimeError) and "Bad" in str(out[3]) and tries[3] == 1
    assert sorted(seen) == [0, 1, 2, 3, 4] and peak[0] <= 2
    assert r.attempts == sum(tries.values())


def test_a_fatal_error_stops_the_run_with_its_message():
    async def one(i):
        if i == 0:
            raise Denied()
        await asyncio.sleep(0.05)
        return i

    with pytest.raises(DHPError, match="denied"):
        asyncio.run(_runner(concurrency=4).run_many(list(range(6)), one))
