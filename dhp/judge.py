"""The judge engine: score every perturbed variant with an LLM judge (G-Eval prompts, paper App. E).

Three scoring modes (``mode``):

- ``sample``: ``n_samples`` calls per (item, variant, metric) (paper: 5 at temperature 0); each reply is
  parsed by :func:`parse_score`; the score is the mean of the replies that parse. Replies that do not
  parse are NaN and counted in ``n_failed`` — never replaced by a number.
- ``logprobs``: one call; at the score position the top-20 log-probabilities of the tokens "1".."5" are
  renormalised and the score is their expected value (:func:`score_from_logprobs`); ``prob_mass`` records
  how much probability the valid score tokens had. If a reply carries no logprobs, that reply's text
  is parsed instead (``fallback`` = True, and a warning says how often).
- ``likelihood``: GPTScore-style, no number is asked for: the score is the mean token log-probability of
  the candidate text after a task instruction and the source (``metric`` = "likelihood").

Engineering (see :func:`judge`): a persistent SQLite cache (:mod:`dhp.cache`) so a warm rerun makes no
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
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from dhp.backends import Backend, ChatRequest, Completion, get_backend
from dhp.cache import CachedCall, Cache, make_key, open_cache
from dhp.errors import DHPError
from dhp.schema import DATASET_TASK, ORIGINAL, metrics_for

__all__ = [
    "MODES", "SCORE_COLUMNS", "judge", "parse_score", "score_from_logprobs", "failure_summary",
    "load_prompt", "build_prompt", "likelihood_prefix", "JudgeEstimate", "load_price_table",
    "load_judge_inputs",
]

MODES = ("sample", "logprobs", "likelihood")
SCORE_COLUMNS = ["dataset", "judge", "mode", "item_id", "perturbation", "severity", "level", "metric",
                 "score", "n_valid", "n_failed"]
EXTRA_COLUMNS = ["prob_mass", "truncated", "fallback", "prompt_tokens", "completion_tokens"]
VALID_SCORES = (1, 2, 3, 4, 5)
_SCORE_TOKENS = tuple(str(v) for v in VALID_SCORES)
DEFAULT_MAX_TOKENS = {"sample": 12, "logprobs": 5}
TOP_LOGPROBS = 20
_TEMPLATE_MARGIN = 48  # tokens of chat-template wrapping (system prompt, role tags) beyond the user text
_CUT_MARK = " [...]"
_LANG_NAMES = {"de": "German", "zh": "Chinese", "en": "English", "fr": "French", "ru": "Russian",
               "ja": "Japanese", "cs": "Czech", "uk": "Ukrainian"}


# ---------------------------------------------------------------------------------------------- prompts

def _prompt_dir() -> Path:
    return Path(__file__).resolve().parent / "prompts" / "judge"


def load_prompt(task: str, metric: str) -> str:
    """The G-Eval template for (task, metric), from ``dhp/prompts/judge/<task>_<metric>.txt``."""
    if metric not in metrics_for(task):
        raise DHPError(f"Metric {metric!r} is not defined for task {task!r}.",
                       f"use one of {list(metrics_for(task))}.")
    return (_prompt_dir() / f"{task}_{metric}.txt").read_text(encoding="utf-8")


def _fill(template: str, slots: dict[str, str]) -> str:
    """Single-pass slot filling: braces or slot names inside the inserted texts are left alone."""
    return re.sub(r"\{(\w+)\}", lambda m: slots.get(m.group(1), m.group(0)), template)


def _slots(item: dict, candidate: str) -> dict[str, str]:
    return {"source": item.get("source", "") or "", "candidate": candidate,
            "question": item.get("question", "") or "",
            "src_lang": _LANG_NAMES.get(item.get("src_lang") or "", item.get("src_lang") or "the source language"),
            "tgt_lang": _LANG_NAMES.get(item.get("tgt_lang") or "", item.get("tgt_lang") or "the target language")}


def build_prompt(task: str, metric: str, item: dict, candidate: str) -> str:
    """The user message for one judge call: instructions, then the source, then the candidate (so that
    variants of one item share the longest possible prefix)."""
    return _fill(load_prompt(task, metric), _slots(item, candidate))


def likelihood_prefix(task: str, item: dict) -> str:
    """Text the candidate is scored after in likelihood mode (instruction + source)."""
    metrics_for(task)
    tpl = (_prompt_dir() / f"likelihood_{task}.txt").read_text(encoding="utf-8")
    return _fill(tpl, _slots(item, ""))


# ---------------------------------------------------------------------------------------------- parsing

def _labels(metric: str | None) -> list[str]:
    labels = ["overall score", "overall", "score", "rating", "grade"]
    if metric:
        labels += [metric.replace("_", " "), metric]
    return sorted(set(labels), key=len, reverse=True)


_NUM = r"([1-5](?:\.\d+)?)(?![\d])"
_SCALE = r"(?:\s*(?:/|out\s+of)\s*5(?![\d.]))?"
_BAD_AFTER = re.compile(r"^(?:[.)]\s*[^\W\d_]|\s*(?:-|–|to)\s*\d|\s*/\s*\d|\.\d)")


def parse_score(text: str | None, metric: str | None = None) -> float:
    """The 1–5 score in a judge reply, or NaN.

    Accepted: the score at the start of the reply, optionally after a label ("4", "4.", "Score: 4",
    "- Coherence: 3", "**4**", "4/5", "4 out of 5", "3.5", "4 - mostly coherent\\n..."), or a labelled
    score anywhere ("... Score: 4"). Rejected (NaN): numbers outside 1–5 ("0", "6", "10"), other scales
    ("4/10"), ranges echoed from the rubric ("1-5"), numbered-list echoes of the evaluation steps
    ("1. Read the summary"), and numbers that are not anchored to the start or to a label ("I read 3
    articles"). The prompt itself is never searched, so its own numbers cannot be matched.
    """
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return math.nan
    t = str(text).replace("*", "").replace("`", "").strip()
    lab = "|".join(re.escape(x) for x in _labels(metric))
    head = rf"(?:(?:{lab})\s*(?:\(\s*1\s*-\s*5\s*\))?\s*(?:[:=\-]|is)?\s*)"
    for pattern in (rf"^[\s\-•>#]*{head}?{_NUM}{_SCALE}",
                    rf"\b(?:{lab})\s*(?:\(\s*1\s*-\s*5\s*\))?\s*(?:[:=]|is)\s*{_NUM}{_SCALE}"):
        for m in re.finditer(pattern, t, flags=re.IGNORECASE | re.MULTILINE):
            if not _BAD_AFTER.match(t[m.end():]):
                return float(m.group(1))
    return math.nan


def _is_preamble(text: str, metric: str | None) -> bool:
    """True while a reply so far is only whitespace/punctuation and (part of) a score label."""
    t = re.sub(r"\(\s*1\s*-\s*5\s*\)", "", text).strip(" \t\r\n*-#>•:=").lower()
    return t == "" or any(lb.startswith(t) or t == lb for lb in _labels(metric))


def score_from_logprobs(top_logprobs: list[dict[str, float]] | None, metric: str | None = None
                        ) -> tuple[float, float]:
    """Expected score and probability mass at the score position, from per-position top logprobs.

    The score position is the first generated position whose chosen (most likely) token is a valid
    score "1".."5", as long as everything before it is a preamble (spaces, punctuation, a label such as
    "Score:"). If the reply leaves the preamble without such a token, the position among those walked
    where "1".."5" have the most probability is used. Token texts are compared after stripping spaces,
    and probabilities of the same digit are added. Returns (NaN, 0.0) when no valid score token is seen.
    """
    if not top_logprobs:
        return math.nan, 0.0
    walked: list[np.ndarray] = []
    so_far = ""
    for pos in top_logprobs:
        p = np.zeros(len(VALID_SCORES))
        for tok, lp in pos.items():
            s = tok.strip()
            if s in {"1", "2", "3", "4", "5"}:
                p[int(s) - 1] += math.exp(lp)
        walked.append(p)
        chosen = max(pos, key=pos.get)
        if chosen.strip() in {"1", "2", "3", "4", "5"} and p.sum() > 0:
            break
        so_far += chosen
        if not _is_preamble(so_far, metric):
            p = max(walked, key=lambda a: a.sum())
            break
    mass = float(p.sum())
    if mass <= 0:
        return math.nan, 0.0
    return float(np.dot(np.array(VALID_SCORES), p) / mass), min(mass, 1.0)


# ---------------------------------------------------------------------------------------------- prices

@dataclass
class JudgeEstimate:
    """What a judge run will cost before it is made (also what ``dry_run=True`` returns)."""

    identity: str
    mode: str
    calls: int  # calls still to make (not in the cache)
    cached_calls: int
    prompt_tokens: int  # estimated, for the calls still to make
    completion_tokens: int  # upper bound (max_tokens per call)
    cost_usd: float | None  # None: no price known for this model

    def describe(self) -> str:
        cost = "unknown (add the model to the price table)" if self.cost_usd is None else f"${self.cost_usd:.4f}"
        return (f"[judge] {self.identity} mode={self.mode}: {self.calls} calls to make "
                f"({self.cached_calls} cached), ~{self.prompt_tokens:,} prompt + <= "
                f"{self.completion_tokens:,} completion tokens, est. cost {cost}")


def load_price_table(price_table: "dict | str | os.PathLike | None" = None) -> dict[str, dict[str, float]]:
    """Prices in USD per 1M tokens: {model: {"input": x, "output": y}}. ``None`` reads
    ``data/judge_prices.yaml``; a path may be YAML (same shape) or CSV (columns model,input,output)."""
    from dhp.io import resolve

    if isinstance(price_table, dict):
        return price_table
    path = resolve(price_table) if price_table is not None else resolve("data/judge_prices.yaml")
    if not path.exists():
        if price_table is None:
            return {}
        raise DHPError(f"Price table {path} not found.", "pass a YAML/CSV path or a dict.")
    if path.suffix == ".csv":
        df = pd.read_csv(path)
        return {r.model: {"input": float(r.input), "output": float(r.output)} for r in df.itertuples()}
    import yaml

    data = yaml.safe_load(path.read_text()) or {}
    return data.get("models", data)


def _cost(model: str, prompt_tokens: int, completion_tokens: int, prices: dict) -> float | None:
    p = prices.get(model)
    if p is None:
        return None
    return (prompt_tokens * float(p["input"]) + completion_tokens * float(p["output"])) / 1e6


# ---------------------------------------------------------------------------------------------- judge

@dataclass
class _Call:
    key: str
    kind: str  # "chat" | "loglik"
    request: Any  # ChatRequest | (prefix, continuation)
    est_prompt_tokens: int
    max_new: int


@dataclass
class _Row:
    meta: dict
    metric: str
    keys: list[str]
    truncated: bool
    failed_upfront: bool = False


def _item_table(perturbed: pd.DataFrame, dataset: pd.DataFrame | None) -> tuple[pd.DataFrame, dict]:
    need = ["dataset", "item_id", "perturbation", "severity", "level", "text", "status"]
    miss = [c for c in need if c not in perturbed.columns]
    if miss:
        raise DHPError(f"The perturbed table lacks columns {miss}.",
                       "pass the table written by notebook 01 (dhp.perturb.perturb).")
    if dataset is None or not isinstance(dataset, pd.DataFrame):
        raise DHPError("judge() needs the dataset table for the sources.",
                       "pass dataset=dhp.data.load_dataset(...) (the table notebook 01 used).")
    ok = perturbed[perturbed["status"] == "ok"].copy()
    items: dict[tuple[str, str], dict] = {}
    for rec in dataset.to_dict("records"):
        items[(str(rec["dataset"]), str(rec["item_id"]))] = rec
    missing = {(d, i) for d, i in zip(ok["dataset"].astype(str), ok["item_id"].astype(str))} - set(items)
    if missing:
        raise DHPError(f"{len(missing)} perturbed item(s) are not in the dataset table, e.g. {sorted(missing)[:3]}.",
                       "load the dataset with the same name, n_items and seed as notebook 01.")
    return ok, items


def _task_of(dataset_name: str, item: dict) -> str:
    task = item.get("task") or DATASET_TASK.get(dataset_name)
    if not task:
        raise DHPError(f"Unknown task for dataset {dataset_name!r}.", "add a 'task' column to the dataset table.")
    return task


def judge(
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
    progress: bool = True,
    backend_options: dict | None = None,
) -> "pd.DataFrame | JudgeEstimate":
    """Score every ``status == "ok"`` row of the perturbed table (originals included) with an LLM judge.

    Parameters: ``perturbed`` the perturbed table (notebook 01); ``dataset`` the dataset table (sources,
    questions, languages); ``judge`` a backend spec ("embedded", "openai:<model>[@url]", "vllm:<model>")
    or a :class:`~dhp.backends.Backend`; ``mode`` one of "sample", "logprobs", "likelihood" (module
    docstring); ``n_samples`` calls per row in sample mode; ``seed`` the base seed (sample i uses
    seed + i); ``cache`` a :class:`~dhp.cache.Cache`, a SQLite path (relative to the repo root) or None
    (in memory); ``dry_run`` return a :class:`JudgeEstimate` without calling the model;
    ``price_table`` USD per 1M tokens (dict or YAML/CSV path; default data/judge_prices.yaml);
    ``metrics`` restrict the task's metrics; ``max_tokens`` reply length (default 12 sample, 5
    logprobs); ``n_ctx`` the judge's context for source truncation (default: the backend's);
    ``order`` "grouped" (prefix-sharing order) or "shuffled" (for benchmarks only);
    ``backend_options`` passed to :func:`~dhp.backends.get_backend`.

    Returns the scores table, one row per (item, ok variant, metric) — for likelihood one row per
    (item, ok variant) with metric "likelihood" — with columns:
    - dataset, judge (backend identity, no secrets), mode, item_id, perturbation, severity, level, metric;
    - score (float): mean parsed score (sample), expected score (logprobs), mean candidate-token
      log-probability (likelihood); NaN when nothing valid came back;
    - n_valid, n_failed (int): calls that gave / did not give a valid score for this row;
    - prob_mass (float): probability of the valid score tokens at the score position (logprobs; NaN
      otherwise); truncated (bool): the source was cut to fit the context; fallback (bool): logprobs
      mode had to parse text because the reply had no logprobs; prompt_tokens, completion_tokens (int):
      usage summed over the row's calls (for likelihood, completion_tokens = candidate tokens scored).
    Run statistics (calls made, cache hits, prompt tokens submitted/computed, seconds, failures) are in
    ``scores.attrs["judge_stats"]``.
    """
    t0 = time.perf_counter()
    if mode not in MODES:
        raise DHPError(f"Unknown judge mode {mode!r}.", f"use one of {list(MODES)}.")
    if mode == "sample" and int(n_samples) < 1:
        raise DHPError(f"n_samples must be >= 1 (got {n_samples}).", "pass n_samples=5 (the paper's value).")
    if order not in ("grouped", "shuffled"):
        raise DHPError(f"Unknown order {order!r}.", "use 'grouped' (or 'shuffled' for benchmarks).")
    backend = get_backend(judge, **(backend_options or {}))
    ok, items = _item_table(perturbed, dataset)
    ctx = n_ctx if n_ctx is not None else backend.n_ctx
    max_new = int(max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS.get(mode, 0))
    n_calls_per_row = int(n_samples) if mode == "sample" else 1
    wanted = set(metrics) if metrics is not None else None

    # ---- rows and calls, in prefix-grouped order: metric -> item -> original first -> variants.
    # Consecutive prompts then share the instructions (same metric) and the source (same item), which
    # the embedded backend's KV cache and vLLM/llama.cpp prefix caches reuse.
    ok["_rank"] = (ok["perturbation"] != ORIGINAL).astype(int)
    item_order = {k: i for i, k in enumerate(dict.fromkeys(zip(ok["dataset"].astype(str), ok["item_id"].astype(str))))}
    ok["_item"] = [item_order[(d, i)] for d, i in zip(ok["dataset"].astype(str), ok["item_id"].astype(str))]
    ok = ok.sort_values(["_item", "_rank", "perturbation", "severity"], kind="stable")
    groups = []  # (metric, item index, dataset, item_id, group rows)
    for (idx, ds_name, item_id), grp in ok.groupby(["_item", "dataset", "item_id"], sort=True):
        item = items[(str(ds_name), str(item_id))]
        task = _task_of(str(ds_name), item)
        task_metrics = ["likelihood"] if mode == "likelihood" else [
            m for m in metrics_for(task) if wanted is None or m in wanted]
        for metric in task_metrics:
            groups.append((metric, idx, str(ds_name), str(item_id), task, item, grp))
    metric_rank = {m: i for i, m in enumerate(dict.fromkeys(g[0] for g in groups))}
    groups.sort(key=lambda g: (metric_rank[g[0]], g[1]))
    rows: list[_Row] = []
    calls: dict[str, _Call] = {}
    call_order: list[str] = []
    n_truncated = 0
    for metric, _, ds_name, item_id, task, item, grp in groups:
        texts = [str(t) for t in grp["text"]]
        source, truncated, too_long = _fit_source(backend, ctx, mode, task, metric, item, texts, max_new)
        n_truncated += bool(truncated) * len(grp)
        it = {**item, "source": source}
        for rec, cand in zip(grp.to_dict("records"), texts):
            meta = {"dataset": ds_name, "item_id": item_id, "perturbation": rec["perturbation"],
                    "severity": rec["severity"], "level": rec["level"]}
            if too_long:
                rows.append(_Row(meta, metric, [], truncated, failed_upfront=True))
                continue
            keys = []
            if mode == "likelihood":
                prefix = likelihood_prefix(task, it)
                key = make_key(backend.identity, backend.model, [prefix, cand], {"kind": "loglik"}, 0)
                if key not in calls:
                    calls[key] = _Call(key, "loglik", (prefix, cand), 0, 0)
                    call_order.append(key)
                keys.append(key)
            else:
                content = build_prompt(task, metric, it, cand)
                messages = [{"role": "user", "content": content}]
                for s in range(n_calls_per_row):
                    # Greedy logprobs scoring reads the first position whose top token is a score digit
                    # (score_from_logprobs): tokens after it cannot change the score.
                    greedy_lp = mode == "logprobs" and temperature <= 0
                    req = ChatRequest.make(messages, max_new, temperature, seed + s,
                                           TOP_LOGPROBS if mode == "logprobs" else None,
                                           _SCORE_TOKENS if greedy_lp else ())
                    params = {"kind": "chat", "max_tokens": req.max_tokens, "temperature": req.temperature,
                              "seed": req.seed, "logprobs": req.logprobs, "stop_after": list(req.stop_after)}
                    key = make_key(backend.identity, backend.model, messages, params, s)
                    if key not in calls:
                        calls[key] = _Call(key, "chat", req, 0, max_new)
                        call_order.append(key)
                    keys.append(key)
            rows.append(_Row(meta, metric, keys, truncated))
    if n_truncated:
        warnings.warn(f"{n_truncated} judge row(s) had their source truncated to fit the context of "
                      f"{ctx} tokens (see the 'truncated' column); candidates are never cut.", stacklevel=2)
    if order == "shuffled":
        rng = np.random.default_rng(seed)
        call_order = [call_order[i] for i in rng.permutation(len(call_order))]

    # ---- what is cached, what it will cost
    store = open_cache(cache)
    owns_store = not isinstance(cache, Cache)
    try:
        pending = [k for k in call_order if not store.contains(k)]
        est = _estimate(backend, mode, calls, pending, len(call_order) - len(pending), price_table)
        if dry_run:
            print(est.describe())
            return est
        if backend.is_paid and pending:
            print(est.describe())
        stats = {"identity": backend.identity, "mode": mode, "requests": len(call_order),
                 "calls": 0, "cache_hits": len(call_order) - len(pending), "call_errors": 0,
                 "prompt_tokens_submitted": 0, "prompt_tokens_computed": 0,
                 "prompt_tokens_computed_known": True, "completion_tokens": 0}
        errors: dict[str, str] = {}
        _execute(backend, store, calls, pending, stats, errors, progress)
        table = _assemble(backend, mode, rows, store, n_calls_per_row, errors)
    finally:
        if owns_store:
            store.close()
    stats["rows"] = len(table)
    stats["failed_calls_or_parses"] = int(table["n_failed"].sum()) if len(table) else 0
    stats["truncated_rows"] = int(table["truncated"].sum()) if len(table) else 0
    stats["seconds"] = time.perf_counter() - t0
    if not stats.pop("prompt_tokens_computed_known"):
        stats["prompt_tokens_computed"] = None
    fb = int(table["fallback"].sum()) if len(table) else 0
    if fb:
        warnings.warn(f"{fb} logprobs-mode row(s) got no logprobs from {backend.identity}; their reply "
                      "text was parsed instead (column 'fallback').", stacklevel=2)
    table.attrs["judge_stats"] = stats
    return table


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
        frame = backend.count_tokens(build_prompt(task, metric, empty, longest)) + _TEMPLATE_MARGIN + max_new
    budget = ctx - frame
    if budget <= 8:
        return source, False, True
    if backend.count_tokens(source) <= budget:
        return source, False, False
    return backend.truncate_to_tokens(source, budget - backend.count_tokens(_CUT_MARK) - 2) + _CUT_MARK, True, False


def _estimate(backend: Backend, mode: str, calls: dict, pending: list[str], n_cached: int,
              price_table) -> JudgeEstimate:
    prompt_tokens = 0
    completion = 0
    for k in pending:
        c = calls[k]
        if c.kind == "chat":
            prompt_tokens += backend.count_tokens(c.request.messages[-1][1]) + _TEMPLATE_MARGIN
            completion += c.max_new
        else:
            prompt_tokens += backend.count_tokens(c.request[0] + c.request[1]) + 1
    cost = 0.0 if not backend.is_paid else _cost(backend.model, prompt_tokens, completion,
                                                 load_price_table(price_table))
    return JudgeEstimate(backend.identity, mode, len(pending), n_cached, prompt_tokens, completion, cost)


def _execute(backend: Backend, store: Cache, calls: dict, pending: list[str], stats: dict,
             errors: dict, progress: bool) -> None:
    """Make the pending calls in order, storing each result in the cache as soon as it arrives."""
    if not pending:
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=len(pending), desc=f"judge {backend.identity}", unit="call", disable=not progress)

    def on_result(keys: list[str]):
        def cb(i: int, res: Any) -> None:
            key = keys[i]
            bar.update(1)
            if isinstance(res, Exception):
                stats["call_errors"] += 1
                errors[key] = f"{type(res).__name__}: {res}"
                return  # not cached: a rerun tries again
            stats["calls"] += 1
            stats["prompt_tokens_submitted"] += int(res.prompt_tokens or 0)
            if res.prompt_tokens_computed is None:
                stats["prompt_tokens_computed_known"] = False
            else:
                stats["prompt_tokens_computed"] += int(res.prompt_tokens_computed)
            if isinstance(res, Completion):
                stats["completion_tokens"] += int(res.completion_tokens or 0)
                store.put(key, backend.identity, "chat",
                          CachedCall(res.text, res.top_logprobs, None, res.prompt_tokens, res.completion_tokens))
            else:
                store.put(key, backend.identity, "loglik",
                          CachedCall(None, None, res.logprob_sum, res.prompt_tokens, res.n_tokens))
        return cb

    try:
        chat_keys = [k for k in pending if calls[k].kind == "chat"]
        ll_keys = [k for k in pending if calls[k].kind == "loglik"]
        if chat_keys:
            backend.chat_many([calls[k].request for k in chat_keys], on_result=on_result(chat_keys))
        if ll_keys:
            backend.loglikelihood_many([calls[k].request for k in ll_keys], on_result=on_result(ll_keys))
    finally:
        bar.close()


def _assemble(backend: Backend, mode: str, rows: list[_Row], store: Cache, n_calls: int,
              errors: dict) -> pd.DataFrame:
    out = []
    for r in rows:
        rec = {**r.meta, "judge": backend.identity, "mode": mode, "metric": r.metric}
        values: list[float] = []
        masses: list[float] = []
        fallback = False
        pt = ct = 0
        n_failed = n_calls if r.failed_upfront else 0
        for key in r.keys:
            got = store.get(key)
            if got is None:  # the call failed (errors[key] says why)
                n_failed += 1
                continue
            pt += int(got.prompt_tokens or 0)
            ct += int(got.completion_tokens or 0)
            if mode == "likelihood":
                v = got.value / got.completion_tokens if got.completion_tokens else math.nan
            elif mode == "logprobs" and got.top_logprobs:
                v, mass = score_from_logprobs(got.top_logprobs, r.metric)
                masses.append(mass)
            else:
                fallback = fallback or mode == "logprobs"
                v = parse_score(got.text, r.metric)
            if v is None or math.isnan(v):
                n_failed += 1
            else:
                values.append(float(v))
        rec.update({
            "score": float(np.mean(values)) if values else math.nan,
            "n_valid": len(values), "n_failed": int(n_failed),
            "prob_mass": float(np.mean(masses)) if masses else math.nan,
            "truncated": bool(r.truncated), "fallback": bool(fallback),
            "prompt_tokens": pt, "completion_tokens": ct,
        })
        out.append(rec)
    df = pd.DataFrame(out, columns=SCORE_COLUMNS + EXTRA_COLUMNS)
    return df.astype({"score": float, "n_valid": int, "n_failed": int, "prob_mass": float,
                      "truncated": bool, "fallback": bool, "prompt_tokens": int, "completion_tokens": int})


def failure_summary(scores: pd.DataFrame) -> pd.DataFrame:
    """Parse/call failures per (judge, mode, metric).

    Columns: judge, mode, metric; rows (score rows); calls (n_valid + n_failed); n_failed; failure_rate
    (n_failed / calls); nan_rows (rows whose score is NaN)."""
    if scores.empty:
        return pd.DataFrame(columns=["judge", "mode", "metric", "rows", "calls", "n_failed", "failure_rate", "nan_rows"])
    g = scores.assign(calls=scores["n_valid"] + scores["n_failed"], nan_row=scores["score"].isna())
    out = g.groupby(["judge", "mode", "metric"], sort=True).agg(
        rows=("score", "size"), calls=("calls", "sum"), n_failed=("n_failed", "sum"), nan_rows=("nan_row", "sum"))
    out["failure_rate"] = out["n_failed"] / out["calls"].where(out["calls"] > 0)
    return out.reset_index()[["judge", "mode", "metric", "rows", "calls", "n_failed", "failure_rate", "nan_rows"]]


def load_judge_inputs(run_dir: "str | os.PathLike", dataset: str, n_items: int | None = None, seed: int = 0,
                      data_dir: "str | os.PathLike | None" = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What notebook 02 judges: ``<run_dir>/perturbed.parquet`` restricted to ``dataset`` and to its first
    ``n_items`` items (None: all), and the dataset table with their sources — ``<run_dir>/dataset.parquet``
    if an earlier notebook wrote it, else ``dhp.data.load_dataset`` with as many items as notebook 01
    perturbed (the same selection, so every perturbed item is found)."""
    from dhp.io import read_table, resolve

    run = resolve(run_dir)
    perturbed = read_table(run / "perturbed.parquet", "perturbed table", "notebooks/01_perturb.ipynb")
    perturbed = perturbed[perturbed["dataset"] == dataset]
    if perturbed.empty:
        raise DHPError(f"{run / 'perturbed.parquet'} has no rows for dataset {dataset!r}.",
                       "run notebook 01 with the same dataset and run_dir.")
    all_ids = list(dict.fromkeys(perturbed["item_id"].astype(str)))
    ids = all_ids if n_items is None else all_ids[: int(n_items)]
    perturbed = perturbed[perturbed["item_id"].astype(str).isin(ids)].reset_index(drop=True)
    ds_path = run / "dataset.parquet"
    items = pd.read_parquet(ds_path) if ds_path.exists() else None
    if items is None or not set(ids) <= set(items["item_id"].astype(str)):
        from dhp.data import load_dataset

        items = load_dataset(dataset, n_items=len(all_ids), seed=seed, data_dir=data_dir)
    items = items[(items["dataset"] == dataset) & items["item_id"].astype(str).isin(ids)].reset_index(drop=True)
    return perturbed, items
