"""Pointwise judging: score every perturbed variant with an LLM judge (G-Eval prompts, paper App. E).

Three scoring modes (``mode``):

- ``sample``: ``n_samples`` replies per (item, variant, metric) (paper: 5 at temperature 0), asked as ONE
  request with ``n`` replies; each reply is parsed by :func:`parse_reply`; the score is the mean of the
  replies that parse. Replies that do not parse are counted in ``n_failed`` with their reason in
  ``failure`` — never replaced by a number.
- ``logprobs``: one call; the reply must pass the same :func:`parse_reply` rule as in sample mode (else
  NaN with its reason); then at the score position the top-20 log-probabilities of the tokens "1".."5"
  are renormalised and the score is their expected value (:func:`score_from_logprobs`); ``prob_mass``
  records how much probability the valid score tokens had. If a server returns no logprobs, the parsed
  number is used (``fallback`` = True, and a warning says how often).
- ``likelihood``: GPTScore-style, no number is asked for: the score is the mean token log-probability of
  the candidate text after a task instruction and the source (``metric`` = "likelihood").
- ``metric``: a baseline judge (``baseline:<name>``, dhp.backends.baseline) scores the candidate against its
  source directly — no prompt, no reply (``metric`` = "text"; NaN with its reason where it does not apply).

Engineering (see :func:`score_perturbed`): a persistent SQLite cache (:mod:`dhp.cache`) so a warm rerun makes no
calls and a killed run resumes without repeating calls; requests sorted so all variants of one
(item, metric) are adjacent (their prompts share the instruction+source prefix, which the embedded
backend and vLLM/llama.cpp servers reuse); prompt tokens submitted vs computed are counted; a cost
estimate is printed before paid runs and ``dry_run=True`` returns it without calling anything.

Context overflow: when instruction + source + candidate + reply do not fit the judge's context, the
SOURCE is cut at the end (token-exact for the embedded backend) and " [...]" appended; the candidate is
never cut, because it is the text being judged. The cut is made once per (item, metric), sized for the
longest variant of that item, so the original and all its perturbations are judged against the same
source text. Rows whose source was cut have ``truncated`` = True and a warning is issued. A candidate
that alone does not fit gives NaN rows (counted as failed), never a score.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from dataclasses import dataclass
from typing import Iterable, NamedTuple

import numpy as np
import pandas as pd

from dhp import calls as calls_mod
from dhp.backends import Backend, ChatRequest, get_backend
from dhp.backends.control import is_control_backend, score_rows
from dhp.cache import Cache, open_cache
from dhp.calls import Call
from dhp.errors import DHPError
from dhp.io import read_table, resolve
from dhp.schema import DATASET_TASK, ORIGINAL, SCORE_COLUMNS, SCORE_EXTRA_COLUMNS, TASK_METRICS, metrics_for
from dhp.judging.prompts import _CUT_MARK, build_prompt, likelihood_prefix
from dhp.judging.parsing import parse_rating, parse_reply, rating_logprobs, score_from_logprobs, score_stop

MODES = ("sample", "logprobs", "likelihood", "metric")
#: The scores table's metric of mode "metric" (a baseline judge scores each text once, not per quality metric).
METRIC_MODE_METRIC = "text"
# logprobs replies get a few tokens past the digit so "1. Read ..." or "3 out of 10" can be told from a score
# (a backend with supports_stop_when stops sooner, once the reply's verdict is decided).
DEFAULT_MAX_TOKENS = {"sample": 12, "logprobs": 8}
TOP_LOGPROBS = 20


class Judged(NamedTuple):
    """A judged table and the run statistics of the calls that made it (requests, calls made, replies, cache hits,
    prompt tokens submitted/computed, seconds, failures). The statistics vary between runs (a warm cache makes no
    call), so no table holds them: they are returned beside it (the stage runner writes them to judge_stats.json)."""

    table: pd.DataFrame
    stats: dict


@dataclass
class _Row:
    """One score to produce: its id fields, the metric (parser label) and the call that answers it."""

    meta: dict
    metric: str
    call: Call | None  # None: failed before any call (e.g. the candidate alone does not fit)
    truncated: bool = False
    upfront_failure: str = ""
    analysis_first: bool = False  # an analyse-then-rate reply: read the rating after the analysis


def _chat_request(backend: Backend, content: str, metric: str, mode: str, n_samples: int, seed: int,
                  max_new: int, temperature: float, early_stop: bool = True) -> ChatRequest:
    """The request for one score; ``metric`` is the label the reply is parsed with, so the backend's
    early stop (when it has one) decides with the same rule the judge then applies."""
    messages = [{"role": "user", "content": content}]
    stop = score_stop(metric) if early_stop and backend.supports_stop_when else ""
    return ChatRequest.make(messages, max_new, temperature, seed, TOP_LOGPROBS if mode == "logprobs" else None,
                            n=n_samples if mode == "sample" else 1, stop_when=stop)


def _row_value(mode: str, metric: str, got: list, n_expected: int, analysis_first: bool = False) -> dict:
    """Score of one row from its stored replies (None where a reply is missing). ``analysis_first``: the
    replies analyse, then rate ("Rating: 4"): the rating after the analysis is read (parse_rating)."""
    values: list[float] = []
    reasons: list[str] = []
    masses: list[float] = []
    fallback = False
    for g in got:
        if g is None:
            continue
        if mode == "likelihood":
            v = g.value / g.completion_tokens if g.completion_tokens else math.nan
            why = "" if math.isfinite(v) else "no candidate tokens to score"
        elif mode == "metric":
            v = float(g.value) if g.value is not None else math.nan
            why = "" if math.isfinite(v) else (g.text or "no score")
        else:
            v, why = (parse_rating if analysis_first else parse_reply)(g.text, metric)
            if mode == "logprobs" and math.isfinite(v):
                if g.top_logprobs:
                    tops = rating_logprobs(g.text, g.top_logprobs) if analysis_first else g.top_logprobs
                    v, mass = score_from_logprobs(tops, metric)
                    masses.append(mass)
                    why = "" if math.isfinite(v) else "no score token in the reply's logprobs"
                else:
                    fallback = True  # the server returned no logprobs: the parsed number stands
        if math.isfinite(v):
            values.append(float(v))
        else:
            reasons.append(why)
    return {"score": float(np.mean(values)) if values else math.nan, "rating": _rating(mode, values),
            "n_valid": len(values),
            "n_failed": n_expected - len(values), "reasons": reasons,
            "prob_mass": float(np.mean(masses)) if masses else math.nan, "fallback": fallback}


def _rating(mode: str, values: list[float]) -> float:
    """An ordinal 1-5 rating for a row: the most frequent parsed rating in sample mode (ties: the lower,
    the conservative choice), the expected score rounded half up in logprobs mode; NaN without values."""
    if not values or mode in ("likelihood", "metric"):
        return math.nan
    rounded = [int(math.floor(v + 0.5)) for v in values]
    if mode == "sample":
        counts = {r: rounded.count(r) for r in rounded}
        best = max(counts.values())
        return float(min(r for r, c in counts.items() if c == best))
    return float(rounded[0])


def _assemble(rows: list[_Row], mode: str, store: Cache, errors: dict, n_expected: int) -> list[dict]:
    out = []
    for r in rows:
        rec = dict(r.meta)
        if r.call is None:
            rec.update(score=math.nan, rating=math.nan, n_valid=0, n_failed=n_expected, failure=r.upfront_failure,
                       prob_mass=math.nan, fallback=False, prompt_tokens=0, completion_tokens=0)
            out.append({**rec, "truncated": r.truncated})
            continue
        got = [store.get(k) for k in r.call.keys]
        val = _row_value(mode, r.metric, got, n_expected, r.analysis_first)
        call_errors = sorted({errors.get(k, "no result") for k, g in zip(r.call.keys, got) if g is None})
        reasons = list(dict.fromkeys(call_errors + val.pop("reasons")))
        rec.update(val, failure="; ".join(reasons)[:300] if val["n_failed"] else "",
                   prompt_tokens=sum(int(g.prompt_tokens or 0) for g in got if g is not None),
                   completion_tokens=sum(int(g.completion_tokens or 0) for g in got if g is not None),
                   truncated=r.truncated)
        out.append(rec)
    return out


def _score_rows(backend: Backend, rows: list[_Row], mode: str, n_expected: int, cache, dry_run: bool,
                price_table, progress: bool | str, desc: str, max_consecutive_failures: int):
    """Plan → (estimate | run) → assemble: the core shared by :func:`score_perturbed` and :func:`score_prompts`."""
    planned = [r.call for r in rows if r.call is not None]
    store = open_cache(cache)
    try:
        if dry_run:
            est = calls_mod.estimate(backend, planned, store, price_table)
            print(est.describe(f"judge {mode}"))
            return est, None
        if backend.is_paid and calls_mod.pending(planned, store):
            print(calls_mod.estimate(backend, planned, store, price_table).describe(f"judge {mode}"))
        report = calls_mod.run(backend, planned, store, progress=progress, desc=desc,
                               max_consecutive_failures=max_consecutive_failures)
        return _assemble(rows, mode, store, report.errors, n_expected), report.stats
    finally:
        if not isinstance(cache, Cache):
            store.close()


PROMPT_SCORE_COLUMNS = ["score", "rating", "n_valid", "n_failed", "failure", "prob_mass", "prompt_tokens", "completion_tokens"]


def score_prompts(prompts: pd.DataFrame, judge: "str | Backend" = "embedded", mode: str = "logprobs",
                  n_samples: int = 5, seed: int = 0, cache: "Cache | str | os.PathLike | None" = None,
                  max_tokens: int | None = None, temperature: float = 0.0, progress: bool | str = True,
                  max_consecutive_failures: int = calls_mod.MAX_CONSECUTIVE_FAILURES,
                  analysis_first: bool = False, dry_run: bool = False) -> "Judged | calls_mod.Estimate":
    """Score arbitrary 1–5 judge questions through the shared cache (the core of :func:`score_perturbed`).

    ``prompts``: one row per question, column ``prompt`` (the full user message), optional ``metric``
    (the aspect name, used by the parser to recognise "Coherence: 4"), any other columns are ids and are
    kept. ``mode``: "logprobs" or "sample". Returns the same rows without ``prompt``, plus ``score``
    (NaN when no valid score), ``rating`` (ordinal 1-5: most frequent parsed rating in sample mode, ties to
    the lower; expected score rounded half up in logprobs mode), ``n_valid``, ``n_failed``, ``failure`` (reason, "" when ok),
    ``prob_mass``, ``prompt_tokens``, ``completion_tokens``, as :class:`Judged` ``(table, stats)`` with the run
    statistics beside the table.
    ``mode="likelihood"``: ``prompt`` is a prefix and column ``candidate`` the text scored after it; the score is its
    mean log-probability per token (no reply, no rating).
    ``analysis_first``: the prompts ask for an analysis, then "Rating: <1-5>"; each reply's rating is read
    after the analysis (:func:`dhp.judging.parsing.parse_rating`; in logprobs mode the expected score at the
    rating's position, :func:`dhp.judging.parsing.rating_logprobs`). ``dry_run``: no call; the
    :class:`dhp.calls.Estimate` of the calls not yet in the cache instead of the table.
    """
    if not isinstance(prompts, pd.DataFrame) or "prompt" not in prompts.columns:
        raise DHPError("score_prompts needs a DataFrame with a 'prompt' column.",
                       "build one row per question with the full prompt text in 'prompt'.")
    if mode not in ("logprobs", "sample", "metric", "likelihood"):
        raise DHPError(f"score_prompts scores in mode 'logprobs', 'sample', 'likelihood' or 'metric', not {mode!r}.",
                       "pass mode='logprobs' or mode='sample' (or 'metric' for a baseline judge).")
    if mode == "likelihood" and "candidate" not in prompts.columns:
        raise DHPError("score_prompts in mode 'likelihood' needs a 'candidate' column: the text scored after "
                       "'prompt'.", "add the candidate texts (dhp.judging.aspects.aspect_prompts has them).")
    backend = get_backend(judge)
    if is_control_backend(backend):  # a control answers from each row's gold (dhp.controls), no call is made
        return _score_controlled(prompts, backend, dry_run)
    if dry_run and calls_mod._no_file(cache):  # a dry run reads a missing cache as empty: it creates no file
        cache = None
    calls_mod.prime(backend, cache)
    if mode == "metric":
        return _score_texts(prompts, backend, cache, progress, max_consecutive_failures, dry_run)
    max_new = int(max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS.get(mode, 0))
    n = int(n_samples) if mode == "sample" else 1
    rows = []
    for i, rec in enumerate(prompts.to_dict("records")):
        text = rec.get("prompt")
        metric = str(rec.get("metric") or "") or None
        if not isinstance(text, str) or not text.strip():
            rows.append(_Row({"_i": i}, metric or "", None, upfront_failure="empty prompt"))
            continue
        if mode == "likelihood":  # the prompt is the text the candidate continues (GPTScore); no reply
            rows.append(_Row({"_i": i}, "likelihood", calls_mod.plan_loglik(backend, text, str(rec["candidate"]))))
            continue
        # an analyse-then-rate reply is read from its "Rating:" line, which the score rule's early stop cannot see
        call = calls_mod.plan_chat(backend, _chat_request(backend, text, metric or "", mode, n, seed, max_new,
                                                          temperature, early_stop=not analysis_first))
        rows.append(_Row({"_i": i}, metric or "", call, analysis_first=analysis_first))
    scored, stats = _score_rows(backend, rows, mode, n, cache, dry_run, None, progress,
                                f"score {backend.identity}", max_consecutive_failures)
    if dry_run:
        return scored
    values = pd.DataFrame(scored).sort_values("_i")
    out = prompts.drop(columns=["prompt"]).reset_index(drop=True)
    for c in PROMPT_SCORE_COLUMNS:
        out[c] = values[c].to_numpy()
    out = out.astype({"score": float, "n_valid": int, "n_failed": int, "prompt_tokens": int,
                      "completion_tokens": int})
    return Judged(out, stats)


# ---------------------------------------------------------------------------------------------- judge

def _item_table(perturbed: pd.DataFrame, dataset: pd.DataFrame | None) -> tuple[pd.DataFrame, dict]:
    need = ["dataset", "item_id", "perturbation", "severity", "level", "text", "status"]
    miss = [c for c in need if c not in perturbed.columns]
    if miss:
        raise DHPError(f"The perturbed table lacks columns {miss}.",
                       "pass the table written by notebook 01 (dhp.perturb.perturb).")
    if dataset is None or not isinstance(dataset, pd.DataFrame):
        raise DHPError("score_perturbed() needs the dataset table for the sources.",
                       "pass dataset=dhp.datasets.load_dataset(...) (the table notebook 01 used).")
    ok = perturbed[perturbed["status"] == "ok"].copy()
    items: dict[tuple[str, str], dict] = {}
    for rec in dataset.to_dict("records"):
        items[(str(rec["dataset"]), str(rec["item_id"]))] = rec
    missing = {(d, i) for d, i in zip(ok["dataset"].astype(str), ok["item_id"].astype(str))} - set(items)
    if missing:
        raise DHPError(f"{len(missing)} perturbed item(s) are not in the dataset table, e.g. {sorted(missing)[:3]}.",
                       "load the dataset with the same name, n_items and seed as notebook 01.")
    return ok, items


def _task_of(dataset_name: str, item: dict, row_task=None) -> str:
    task = row_task if isinstance(row_task, str) and row_task not in ("", "nan") else None
    task = task or item.get("task") or DATASET_TASK.get(dataset_name)
    if not task or (isinstance(task, float) and math.isnan(task)):
        raise DHPError(f"Unknown task for dataset {dataset_name!r}.", "add a 'task' column to the dataset table.")
    return str(task)


def _check_judge_args(mode, n_samples, order, metrics) -> set | None:
    if mode not in MODES:
        raise DHPError(f"Unknown judge mode {mode!r}.", f"use one of {list(MODES)}.")
    if mode == "sample" and int(n_samples) < 1:
        raise DHPError(f"n_samples must be >= 1 (got {n_samples}).", "pass n_samples=5 (the paper's value).")
    if order not in ("grouped", "shuffled"):
        raise DHPError(f"Unknown order {order!r}.", "use 'grouped' (or 'shuffled' for benchmarks).")
    if metrics is None:
        return None
    wanted = {metrics} if isinstance(metrics, str) else set(metrics)
    known = {m for ms in TASK_METRICS.values() for m in ms}
    unknown = sorted(wanted - known)
    if unknown or not wanted:
        raise DHPError(f"Unknown metric(s) {unknown or '(none given)'}.", f"use metrics from {sorted(known)}.")
    return wanted


def _groups(ok: pd.DataFrame, items: dict, mode: str, wanted: set | None) -> list[tuple]:
    """(metric, item, task, rows) in prefix-grouped order: metric -> item -> original first -> variants.
    Consecutive prompts then share the instructions (same metric) and the source (same item), which
    the embedded backend's KV cache and vLLM/llama.cpp prefix caches reuse."""
    ok = ok.copy()
    ok["_rank"] = (ok["perturbation"] != ORIGINAL).astype(int)
    keys = list(zip(ok["dataset"].astype(str), ok["item_id"].astype(str)))
    order = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    ok["_item"] = [order[k] for k in keys]
    ok = ok.sort_values(["_item", "_rank", "perturbation", "severity"], kind="stable")
    groups = []
    for (idx, ds_name, item_id), grp in ok.groupby(["_item", "dataset", "item_id"], sort=True):
        item = items[(str(ds_name), str(item_id))]
        task = _task_of(str(ds_name), item, grp["task"].iloc[0] if "task" in grp else None)
        task_metrics = ["likelihood"] if mode == "likelihood" else [METRIC_MODE_METRIC] if mode == "metric" else [
            m for m in metrics_for(task) if wanted is None or m in wanted]
        for metric in task_metrics:
            groups.append((metric, idx, str(ds_name), str(item_id), task, item, grp))
    if wanted is not None and not groups and len(ok):
        tasks = sorted({_task_of(str(d), items[(str(d), str(i))]) for d, i in zip(ok["dataset"], ok["item_id"])})
        raise DHPError(f"None of the metrics {sorted(wanted)} is defined for these items' tasks {tasks}.",
                       f"use metrics of those tasks: {sorted({m for t in tasks for m in TASK_METRICS[t]})}.")
    rank = {m: i for i, m in enumerate(dict.fromkeys(g[0] for g in groups))}
    groups.sort(key=lambda g: (rank[g[0]], g[1]))
    return groups


def _plan_judge_rows(backend, groups, mode, ctx, max_new, n, seed, temperature) -> tuple[list[_Row], int]:
    rows: list[_Row] = []
    n_truncated = 0
    for metric, _, ds_name, item_id, task, item, grp in groups:
        texts = [str(t) for t in grp["text"]]
        source, truncated, too_long = _fit_source(backend, ctx, mode, task, metric, item, texts, max_new)
        n_truncated += bool(truncated) * len(grp)
        it = {**item, "source": source}
        for rec, cand in zip(grp.to_dict("records"), texts):
            meta = {"dataset": ds_name, "task": task, "item_id": item_id, "perturbation": rec["perturbation"],
                    "severity": rec["severity"], "level": rec["level"], "metric": metric}
            if too_long:
                rows.append(_Row(meta, metric, None, truncated, "candidate too long for the judge's context"))
            elif mode == "likelihood":
                rows.append(_Row(meta, metric, calls_mod.plan_loglik(backend, likelihood_prefix(task, it), cand),
                                 truncated))
            elif mode == "metric":
                rows.append(_Row(meta, metric, calls_mod.plan_metric(backend, item.get("source", "") or "", cand,
                                                                     task)))
            else:
                req = _chat_request(backend, build_prompt(task, metric, it, cand), metric, mode, n, seed, max_new,
                                    temperature)
                rows.append(_Row(meta, metric, calls_mod.plan_chat(backend, req), truncated))
    return rows, n_truncated


def score_perturbed(
    perturbed: pd.DataFrame,
    dataset: pd.DataFrame,
    judge: "str | Backend" = "embedded",
    mode: str = "logprobs",
    n_samples: int = 5,
    seed: int = 0,
    cache: "Cache | str | os.PathLike | None" = "runs/cache.sqlite",
    dry_run: bool = False,
    price_table: "dict | str | os.PathLike | None" = None,
    metrics: Iterable[str] | None = None,
    max_tokens: int | None = None,
    temperature: float = 0.0,
    n_ctx: int | None = None,
    order: str = "grouped",
    progress: bool | str = True,
    backend_options: dict | None = None,
    max_consecutive_failures: int = calls_mod.MAX_CONSECUTIVE_FAILURES,
) -> "Judged | calls_mod.Estimate":
    """Score every ``status == "ok"`` row of the perturbed table (originals included) with an LLM judge.

    Parameters: ``perturbed`` the perturbed table (notebook 01); ``dataset`` the dataset table (sources,
    questions, languages); ``judge`` a backend spec ("embedded", "openai:<model>[@url]", "vllm:<model>")
    or a :class:`~dhp.backends.Backend`; ``mode`` one of "sample", "logprobs", "likelihood" (module
    docstring); ``n_samples`` replies per row in sample mode (ONE request with ``n`` replies: one prompt
    charge on OpenAI-compatible servers, one generation on deterministic backends at temperature 0);
    ``seed`` the request seed; ``cache`` a :class:`~dhp.cache.Cache`, a SQLite path (relative to the repo
    root) or None (in memory); ``dry_run`` return a :class:`dhp.calls.Estimate` without calling the
    model; ``price_table`` USD per 1M tokens (dict or YAML/CSV path; default dhp/resources/judge_prices.yaml);
    ``metrics`` restrict the task's metrics (unknown names raise); ``max_tokens`` reply length
    (default 12 sample, 8 logprobs: enough to see whether the number is a score or a list/range/scale);
    ``n_ctx`` the judge's context for source truncation (default: the backend's, e.g. what the server
    reports); ``order`` "grouped" (prefix-sharing order) or "shuffled" (for benchmarks only);
    ``backend_options`` passed to :func:`~dhp.backends.get_backend`; ``max_consecutive_failures`` the
    circuit breaker of :func:`dhp.calls.run`.

    Returns :class:`Judged` ``(table, stats)``: the scores table, one row per (item, ok variant, metric) — for
    likelihood one row per (item, ok variant) with metric "likelihood" — with columns (``dhp.schema.SCORE_COLUMNS`` +
    ``SCORE_EXTRA_COLUMNS``):
    - dataset, task, judge (backend identity, no secrets), mode, item_id, perturbation, severity, level, metric;
    - score (float): mean parsed score (sample), expected score (logprobs), mean candidate-token
      log-probability (likelihood); NaN when nothing valid came back;
    - n_valid, n_failed (int): replies that gave / did not give a valid score for this row;
    - failure (str): why replies failed ("" when none did): parse failure with the reply's first 80
      characters, out of scale, context overflow, HTTP status, timeout, candidate too long;
    - prob_mass (float): probability of the valid score tokens at the score position (logprobs; NaN
      otherwise); truncated (bool): the source was cut to fit the context; fallback (bool): logprobs
      mode had to use the parsed number because the reply had no logprobs; prompt_tokens,
      completion_tokens (int): usage of the row's call (for likelihood, completion_tokens = candidate
      tokens scored).
    ``stats``: the run statistics (requests, calls made, replies, cache hits, prompt tokens submitted/computed,
    seconds, failures).

    Long only in its signature and this documentation of the parameters and the columns; the work is in
    the helpers it calls (planning, scheduling, assembly).
    """
    t0 = time.perf_counter()
    wanted = _check_judge_args(mode, n_samples, order, metrics)
    backend = get_backend(judge, **(backend_options or {}))
    if is_control_backend(backend):
        return _score_perturbed_controlled(perturbed, dataset, backend, mode, dry_run)
    if dry_run and calls_mod._no_file(cache):  # a dry run reads a missing cache as empty: it creates no file
        cache = None
    calls_mod.prime(backend, cache)
    ok, items = _item_table(perturbed, dataset)
    ctx = n_ctx if n_ctx is not None else backend.n_ctx
    max_new = int(max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS.get(mode, 0))
    n = int(n_samples) if mode == "sample" else 1
    rows, n_truncated = _plan_judge_rows(backend, _groups(ok, items, mode, wanted), mode, ctx, max_new, n,
                                         seed, temperature)
    if n_truncated:
        warnings.warn(f"{n_truncated} judge row(s) had their source truncated to fit the context of "
                      f"{ctx} tokens (see the 'truncated' column); candidates are never cut.", stacklevel=2)
    if order == "shuffled":
        rows = [rows[i] for i in np.random.default_rng(seed).permutation(len(rows))]
    scored, stats = _score_rows(backend, rows, mode, n, cache, dry_run, price_table, progress,
                                f"judge {backend.identity}", max_consecutive_failures)
    if dry_run:
        return scored
    for rec in scored:
        rec.update(judge=backend.identity, mode=mode)
    table = pd.DataFrame(scored, columns=SCORE_COLUMNS + SCORE_EXTRA_COLUMNS).astype(
        {"score": float, "n_valid": int, "n_failed": int, "prob_mass": float, "truncated": bool,
         "fallback": bool, "prompt_tokens": int, "completion_tokens": int})
    if order == "shuffled":
        table = table.sort_values(["dataset", "item_id", "metric", "perturbation", "severity"], kind="stable")
        table = table.reset_index(drop=True)
    stats.update(mode=mode, rows=len(table), replies=int(table["n_valid"].sum() + table["n_failed"].sum()),
                 failed_rows=int((table["n_failed"] > 0).sum()), truncated_rows=int(table["truncated"].sum()),
                 seconds=time.perf_counter() - t0)
    fb = int(table["fallback"].sum())
    if fb:
        warnings.warn(f"{fb} logprobs-mode row(s) got no logprobs from {backend.identity}; their parsed "
                      "number was used instead (column 'fallback').", stacklevel=2)
    return Judged(table, stats)


def _control_frame(n: int, scores) -> dict:
    """PROMPT_SCORE_COLUMNS of a control's rows: no reply, no tokens; NaN only where the gold was unknown."""
    scores = np.asarray(scores, dtype=float)
    ok = np.isfinite(scores)
    return {"score": scores, "rating": np.where(ok, np.floor(scores + 0.5), np.nan), "n_valid": ok.astype(int),
            "n_failed": (~ok).astype(int), "failure": np.where(ok, "", "no gold label for this unit"),
            "prob_mass": np.full(n, np.nan), "prompt_tokens": np.zeros(n, int), "completion_tokens": np.zeros(n, int)}


def _score_controlled(prompts: pd.DataFrame, backend: Backend, dry_run: bool) -> "Judged | calls_mod.Estimate":
    """score_prompts for a control (dhp.backends.control): each row's score from its ``gold`` column, seeded by the
    row's id columns."""
    if dry_run:
        return calls_mod.Estimate(backend.identity, 0, 0, 0, 0, 0.0)
    keys = [c for c in prompts.columns if c not in ("prompt", "gold", "source", "candidate", "item", "reference")
            and prompts[c].map(lambda v: isinstance(v, (str, int, float, np.integer, np.floating))).all()]
    scores = score_rows(backend, prompts, keys)
    out = prompts.drop(columns=[c for c in ("prompt", "source", "candidate", "gold") if c in prompts.columns])
    out = out.reset_index(drop=True).assign(**_control_frame(len(prompts), scores))
    return Judged(out, {"calls": 0, "rows": len(out), "control": backend.identity})


def _score_texts(prompts: pd.DataFrame, backend: Backend, cache, progress: bool | str, max_consecutive_failures: int,
                 dry_run: bool) -> "Judged | calls_mod.Estimate":
    """score_prompts in mode "metric": each row's ``candidate`` scored against its ``source`` by a baseline judge
    (``task`` tells a translation, where an overlap with the source does not apply)."""
    missing = {"source", "candidate"} - set(prompts.columns)
    if missing:
        raise DHPError(f"Mode 'metric' scores a text against its source, but the rows lack {sorted(missing)}.",
                       "give the rows source and candidate columns (the methods do).")
    rows = [_Row({"_i": i}, METRIC_MODE_METRIC, calls_mod.plan_metric(backend, str(r["source"] or ""),
                                                                       str(r["candidate"] or ""),
                                                                       str(r.get("task") or "")))
            for i, r in enumerate(prompts.to_dict("records"))]
    scored, stats = _score_rows(backend, rows, "metric", 1, cache, dry_run, None, progress,
                                f"score {backend.identity}", max_consecutive_failures)
    if dry_run:
        return scored
    values = pd.DataFrame(scored).sort_values("_i")
    out = prompts.drop(columns=["prompt", "source", "candidate"]).reset_index(drop=True)
    for c in PROMPT_SCORE_COLUMNS:
        out[c] = values[c].to_numpy()
    return Judged(out, stats)


#: The gold quality a control reads in DHP: the original is the better text, every perturbed copy the worse one.
CONTROL_GOLD = {"original": 1.0, "perturbed": 0.5}


def _score_perturbed_controlled(perturbed: pd.DataFrame, dataset: pd.DataFrame | None, backend: Backend, mode: str,
                                dry_run: bool):
    """score_perturbed for a control: one score per ok text (metric "text", as a baseline), gold from whether the text
    is the original (CONTROL_GOLD), seeded by dataset, item, perturbation and severity."""
    if dry_run:
        return calls_mod.Estimate(backend.identity, 0, 0, 0, 0, 0.0)
    ok = perturbed[perturbed["status"] == "ok"].reset_index(drop=True)
    rows = ok.assign(gold=np.where(ok["perturbation"] == ORIGINAL, CONTROL_GOLD["original"],
                                   CONTROL_GOLD["perturbed"]), candidate=ok["text"])
    scores = score_rows(backend, rows, ["dataset", "item_id", "perturbation", "severity"])
    tasks = ({} if dataset is None or "task" not in dataset.columns else
             dict(zip(zip(dataset["dataset"].astype(str), dataset["item_id"].astype(str)), dataset["task"])))
    task = [tasks.get((str(d), str(i)), DATASET_TASK.get(str(d), "")) for d, i in zip(ok["dataset"], ok["item_id"])]
    table = pd.DataFrame({"dataset": ok["dataset"], "task": task,
                          "judge": backend.identity, "mode": mode, "item_id": ok["item_id"],
                          "perturbation": ok["perturbation"], "severity": ok["severity"], "level": ok["level"],
                          "metric": METRIC_MODE_METRIC, **_control_frame(len(ok), scores)})
    table = table.assign(truncated=False, fallback=False)
    return Judged(table[SCORE_COLUMNS + SCORE_EXTRA_COLUMNS].astype(
        {"score": float, "n_valid": int, "n_failed": int, "prob_mass": float, "truncated": bool, "fallback": bool,
         "prompt_tokens": int, "completion_tokens": int}),
        {**calls_mod.run_stats(backend.identity, len(table)), "mode": mode, "rows": len(table), "replies": len(table),
         "failed_rows": int((table["n_failed"] > 0).sum()), "truncated_rows": 0})


def _fit_source(backend: Backend, ctx: int | None, mode: str, task: str, metric: str, item: dict,
                texts: list[str], max_new: int) -> tuple[str, bool, bool]:
    """Cut the source so the longest variant fits the context (module docstring). Returns
    (source, truncated, candidate_too_long)."""
    source = item.get("source", "") or ""
    if not ctx or not source:
        return source, False, False
    longest = max(texts, key=len) if texts else ""
    empty = {**item, "source": ""}
    if mode == "likelihood":
        frame = backend.count_tokens(likelihood_prefix(task, empty) + longest) + 8
    else:
        frame = backend.count_tokens(build_prompt(task, metric, empty, longest)) + calls_mod.TEMPLATE_MARGIN + max_new
    budget = ctx - frame
    if budget <= 8:
        return source, False, True
    if backend.count_tokens(source) <= budget:
        return source, False, False
    return backend.truncate_to_tokens(source, budget - backend.count_tokens(_CUT_MARK) - 2) + _CUT_MARK, True, False



def load_judge_inputs(run_dir: "str | os.PathLike", dataset: str, n_items: int | None = None
                      ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What notebook 02 judges: notebook 01's ``<run_dir>/perturbed.parquet`` restricted to ``dataset`` and
    to its first ``n_items`` items (None: all), and the items with their sources from notebook 01's
    ``<run_dir>/dataset.parquet`` (the run-folder contract: stage 02 reads what stage 01 wrote)."""
    run = resolve(run_dir)
    perturbed = read_table(run / "perturbed.parquet", "perturbed table", "notebooks/01_perturb.ipynb")
    items = read_table(run / "dataset.parquet", "dataset table", "notebooks/01_perturb.ipynb")
    perturbed = perturbed[perturbed["dataset"] == dataset]
    if perturbed.empty:
        raise DHPError(f"{run / 'perturbed.parquet'} has no rows for dataset {dataset!r}.",
                       "run notebook 01 with the same dataset and run_dir.")
    ids = list(dict.fromkeys(perturbed["item_id"].astype(str)))[: None if n_items is None else int(n_items)]
    perturbed = perturbed[perturbed["item_id"].astype(str).isin(ids)].reset_index(drop=True)
    items = items[(items["dataset"] == dataset) & items["item_id"].astype(str).isin(ids)].reset_index(drop=True)
    if len(items) != len(ids):
        raise DHPError(f"{run / 'dataset.parquet'} lacks {len(ids) - len(items)} of the perturbed items.",
                       "rerun notebook 01 so that both tables come from the same run.")
    return perturbed, items
