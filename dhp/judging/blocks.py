"""Public building blocks for a pairwise strategy of your own (``@strategy("name")`` on ``fn(items, ctx) -> rows``):
what the project's strategies use, without copying private code.

- :func:`chat`: one chat call per prompt through the call engine (dhp.calls: the run's cache, retries, progress),
  counted on the strategy's costs (``ctx.calls``, ``ctx.prompt_tokens``); a failed call is ``(None, reason)``;
- :func:`verdict_row`: one row of the verdicts table with every column (``VERDICT_COLUMNS``), its defaults filled;
- :func:`oriented` / :func:`back`: the two responses as shown in an order, and values about them back in the
  dataset's labelling (output_1, output_2); :func:`verdict_from`: "1", "2", "tie" or None from two scores;
- :func:`check_rows`: the contract a strategy's rows keep (``run_strategies`` and the verdicts table read them).
"""

from __future__ import annotations

import math

import pandas as pd

from dhp.errors import DHPError
from dhp.judging.strategies import ORDERS, VERDICT_COLUMNS, Context, _back, _chat, _oriented, _row, verdict_from

__all__ = ["ORDERS", "VERDICT_COLUMNS", "Context", "chat", "verdict_row", "oriented", "back", "verdict_from",
           "check_rows"]

VERDICTS = ("1", "2", "tie", None)


def chat(ctx: Context, prompts: list[str], max_tokens: int = 16) -> list[tuple[str | None, str]]:
    """One user-message chat call per prompt, through the call engine at temperature 0: ``(reply, "")`` or
    ``(None, why it failed)`` per prompt, in order."""
    return _chat(ctx, list(prompts), max_tokens)


def verdict_row(item, strategy: str, order: str, **fields) -> dict:
    """A verdicts-table row for ``item`` (a row of the pairs table, e.g. from ``items.itertuples()``) judged by
    ``strategy`` in ``order`` ("12" or "21"); ``fields`` set the rest (verdict in the dataset's labelling, f1, f2,
    failure, aspects, ...). Unknown fields are refused."""
    unknown = sorted(set(fields) - set(VERDICT_COLUMNS))
    if unknown:
        raise DHPError(f"verdict_row got fields {unknown}, which the verdicts table does not have.",
                       f"use some of {VERDICT_COLUMNS}.")
    return _row(item, strategy, order, **fields)


def oriented(item, order: str) -> tuple[str, str]:
    """(Output (a), Output (b)) as shown in ``order``: (output_1, output_2) for "12", swapped for "21"."""
    return _oriented(item, order)


def back(a, b, order: str):
    """Values about (Output (a), Output (b)) as shown in ``order`` -> about (output_1, output_2)."""
    return _back(a, b, order)


def check_rows(rows: list[dict], items: pd.DataFrame, strategy: str) -> None:
    """The contract of a strategy's rows: exactly the verdicts table's columns, one row per item and order, the
    strategy's name, a verdict of "1", "2", "tie" or None, and a reason wherever the verdict is None. A DHPError
    names the first row that breaks it."""
    want = {(str(it.item_id), o) for it in items.itertuples() for o in ORDERS}
    got = []
    for r in rows:
        if set(r) != set(VERDICT_COLUMNS):
            raise DHPError(f"Strategy {strategy!r} returned a row with columns {sorted(r)}.",
                           f"build rows with dhp.judging.blocks.verdict_row (columns {VERDICT_COLUMNS}).")
        if r["strategy"] != strategy or r["verdict"] not in VERDICTS:
            raise DHPError(f"Strategy {strategy!r} returned strategy {r['strategy']!r}, verdict {r['verdict']!r}.",
                           "name the strategy as registered; a verdict is '1', '2', 'tie' or None.")
        if r["verdict"] is None and not str(r["failure"] or "").strip():
            raise DHPError(f"Strategy {strategy!r} gave item {r['item_id']!r} no verdict and no reason.",
                           "say why in failure (an unparseable reply is None with its reason, never a guess).")
        for f in ("f1", "f2"):
            if not isinstance(r[f], (int, float)) or (isinstance(r[f], float) and math.isinf(r[f])):
                raise DHPError(f"Strategy {strategy!r} returned {f} = {r[f]!r}.", "give a number or NaN.")
        got.append((str(r["item_id"]), r["order"]))
    if sorted(got) != sorted(want):
        raise DHPError(f"Strategy {strategy!r} returned {len(got)} rows for {len(want)} item x order pairs "
                       f"(missing {sorted(want - set(got))[:3]}, extra {sorted(set(got) - want)[:3]}).",
                       "return one row per item and order (blocks.ORDERS).")
