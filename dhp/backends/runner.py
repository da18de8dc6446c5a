"""The shared request runner of remote judge backends: concurrency, retries with backoff, and the sorting of errors
into "stop the run" (a wrong key, an unknown model), "retry" (rate limits, 5xx, timeouts, malformed replies) and
"this call failed" (the row becomes NaN with its reason; the call engine's circuit breaker counts these).

A provider gives the runner three small decisions (``is_transient``, ``to_fatal``, ``to_call_error``) and one
coroutine per request; the runner owns the rest (inspect_ai's Model/ModelAPI split: the API says what an error is,
the model decides what to do about it). The call engine (dhp.calls) owns the cache and the circuit breaker.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

__all__ = ["Runner"]


@dataclass
class Runner:
    """``concurrency``: requests in flight at once; ``max_retries``: retries after the first try; backoff:
    exponential from ``backoff_initial`` seconds, capped at ``backoff_max``, plus jitter. ``attempts`` counts every
    try (first tries and retries)."""

    is_transient: Callable[[BaseException], bool]
    to_fatal: Callable[[Exception], Exception | None]
    to_call_error: Callable[[Exception], Exception]
    concurrency: int = 8
    max_retries: int = 4
    backoff_initial: float = 0.5
    backoff_max: float = 8.0
    attempts: int = field(default=0)

    async def with_retries(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        """``fn()`` tried up to 1 + max_retries times while its error is transient; the last error is raised. The
        wait after the k-th failed try is min(backoff_initial * 2**(k-1), backoff_max) + uniform(0, backoff_initial)
        seconds (what tenacity's wait_exponential + wait_random gave; a plain loop costs less per call, and every
        call of a run goes through here)."""
        tries = 0
        while True:
            tries += 1
            self.attempts += 1
            try:
                return await fn()
            except Exception as e:  # noqa: BLE001 - only a transient error is retried; the rest is raised as is
                if tries > self.max_retries or not self.is_transient(e):
                    raise
            await asyncio.sleep(self.backoff(tries))

    def backoff(self, tries: int) -> float:
        """Seconds to wait after ``tries`` failed tries (exponential, capped, plus jitter)."""
        try:
            step = self.backoff_initial * 2 ** (tries - 1)
        except OverflowError:
            step = self.backoff_max
        return max(0.0, min(step, self.backoff_max)) + random.uniform(0, self.backoff_initial)

    async def run_many(self, items: Sequence, one: Callable[[Any], Awaitable[Any]], on_result=None,
                       retry: bool = True) -> list:
        """``one(item)`` for every item, ``concurrency`` at a time, in input order. A fatal error (``to_fatal``
        gives one for a non-transient error) cancels the rest and is raised; any other error becomes that item's
        result (``to_call_error``). ``retry=False``: ``one`` retries inside itself. ``on_result(i, result)`` as each
        item finishes."""
        sem = asyncio.Semaphore(self.concurrency)
        results: list[Any] = [None] * len(items)

        async def run(i, item):
            async with sem:
                try:
                    res = await (self.with_retries(lambda: one(item)) if retry else one(item))
                except Exception as e:  # noqa: BLE001 - sorted into fatal vs per-call below
                    fatal = self.to_fatal(e)
                    if fatal is not None and not self.is_transient(e):
                        raise fatal from None
                    res = self.to_call_error(e)
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
