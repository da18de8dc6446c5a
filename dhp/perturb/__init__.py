"""Hierarchical perturbation (DHP paper §4.1, Table 2, Appendix B): turn each reference text into
lower-quality variants at the character, word and sentence level, reproducibly.

Public API:
- `perturb(dataset_df, seed=0, perturber="rule", ...)` -> the perturbed table;
- `audit(perturbed, dataset=None)` -> one row per method: did it do what it claims?;
- `verify(perturbed, dataset=None)` -> the table with a per-row `verified` column;
- `methods_table(dataset=None)` -> Table 2 as data (levels, severities, k values);
- `diff_html(original, new)`, `examples_html(perturbed)` -> highlighted changes for notebooks.
"""

from __future__ import annotations

import random

import pandas as pd

from dhp.backends import get_backend
from dhp.errors import DHPError
from dhp.perturb.display import diff_html, examples_html
from dhp.perturb.llm import LLMJob, llm_perturb_many
from dhp.perturb.catalog import (PERTURBATIONS, Context, Perturbation, llm_methods, methods_for,
                                  methods_table, perturbation, register, task_of)
from dhp.perturb.rules import Skip, stable_seed
from dhp.perturb.verify import audit, verify
from dhp.schema import ORIGINAL

__all__ = [
    "COLUMNS", "perturb", "audit", "verify", "methods_table", "diff_html", "examples_html",
    "row_seed", "resolve_perturber", "perturbation", "register", "Perturbation", "Context", "PERTURBATIONS",
]

COLUMNS = [
    "dataset", "task", "item_id", "perturbation", "level", "severity", "method", "text", "edits",
    "status", "reason",
]
_REQUIRED = ("dataset", "item_id", "reference")


def row_seed(seed: int, dataset: str, item_id: str, perturbation: str, severity: str) -> int:
    """The seed of one output row: a stable hash of the run seed and the row's identity, so a row
    is the same whatever n_items or the other rows are."""
    return stable_seed("dhp-perturb", seed, dataset, item_id, perturbation, severity)


def resolve_perturber(perturber):
    """(backend or None, method label for LLM methods).

    "rule" -> (None, "rule"); a backend spec string -> dhp.backends.get_backend(spec); an object
    with .chat and .identity (for instance a test double) is used as is.
    """
    if isinstance(perturber, str):
        if perturber.strip().lower() == "rule":
            return None, "rule"
        if not perturber.strip():
            raise DHPError("Empty perturber.", "pass perturber='rule' or a backend spec like 'openai:<model>@<url>'.")
        try:
            backend = get_backend(perturber)
        except DHPError as e:
            raise DHPError(f"Bad perturber {perturber!r}: {e.problem}",
                           f"pass perturber='rule', or an LLM backend spec: {e.fix}") from None
    elif hasattr(perturber, "chat"):
        backend = perturber
    else:
        raise DHPError(
            f"perturber must be 'rule', a backend spec string or a backend object, not {type(perturber).__name__}.",
            "pass perturber='rule' or e.g. 'openai:<model>@http://127.0.0.1:8000/v1'.",
        )
    identity = getattr(backend, "identity", None) or type(backend).__name__
    # Drop "@<base_url>": a local server's random port must not change the table between runs.
    return backend, f"llm:{identity.split('@')[0]}"


def _dataset_tasks(dataset_df: pd.DataFrame) -> dict[str, str]:
    """dataset -> task from the table's `task` column (a dataset of your own has no built-in task)."""
    if "task" not in dataset_df.columns:
        return {}
    pairs = dataset_df[["dataset", "task"]].astype(str).drop_duplicates()
    clash = pairs[pairs.duplicated("dataset", keep=False)]
    if not clash.empty:
        ds = clash["dataset"].iloc[0]
        raise DHPError(f"Dataset {ds!r} has rows of several tasks {sorted(clash['task'])}.",
                       "give each dataset name a single task (split the file or rename the dataset).")
    return {d: t for d, t in pairs.itertuples(index=False) if t and t != "nan"}


def perturb(
    dataset_df: pd.DataFrame,
    seed: int = 0,
    perturber="rule",
    perturbations: list[str] | None = None,
    max_attempts: int = 3,
    progress: bool | str = False,
    cache=None,
    dry_run: bool = False,
) -> "pd.DataFrame | tuple":
    """Perturb every reference of a dataset table with every method of its task (paper Table 2).

    Parameters: `dataset_df` is the dataset table of `dhp.datasets.load_dataset` (needs at least
    dataset, item_id, reference; task and wrong_ending are used when present); `seed` the run
    seed; `perturber` "rule" (rule-based counterparts for the LLM methods) or a backend spec /
    backend object used for fictional_entities, grammatical_errors and rewrite_insert;
    `perturbations` restricts the methods (default: all of the task, plus the control); `max_attempts`
    bounds the LLM retries per row; `cache` (a dhp.cache.Cache or SQLite path; None: in memory) stores
    every LLM perturber call, so a rerun or a resumed run repeats none (dhp.perturb.llm.llm_perturb_many);
    `dry_run=True` makes no LLM call: LLM rows not in the cache get status "pending" (text None), and the
    return value is ``(table, estimate)``, the dhp.calls.Estimate of their first attempts (None without an LLM
    perturber).

    Returns the perturbed table, one row per (item, perturbation, severity), items in input order,
    methods in Table 2 order, with columns:
    - dataset, task, item_id (str): the item;
    - perturbation: "original", "control" (the negative control: same words, one sentence per line,
      scored by its own judge call) or a method name (see `methods_table()`);
    - level: "character", "word", "sentence", or "none" (original, control);
    - severity: "minor", "major", "single", or "none" (original);
    - method: "none" (original), "rule", or "llm:<backend identity without its @base_url>" (e.g. "llm:openai:gpt-4o");
    - text: the perturbed text (str), None unless status is "ok";
    - edits: short human-readable summary of what changed ("deleted 10 alphanumeric chars", ...);
    - status: "ok", "skipped" (the text cannot carry the method: too short, one sentence, no
      entity, ...) or "failed" (LLM output invalid after all retries);
    - reason: why a row is skipped/failed ("" when ok).

    Each row's randomness comes from `row_seed(seed, dataset, item_id, perturbation, severity)`:
    the same seed gives a byte-identical table, and a row does not change when n_items changes
    (random_ending/random_answer pick the donor by rendezvous hashing for the same reason).
    Python's global `random` state is left untouched.

    Long only in this documentation of the parameters and the columns; the work is in `_item_rows` and
    `_run_llm_rows`.
    """
    _check_dataset_table(dataset_df)
    datasets = list(dict.fromkeys(dataset_df["dataset"].astype(str)))
    tasks = _dataset_tasks(dataset_df)
    plans = {ds: methods_for(ds, perturbations, tasks.get(ds)) for ds in datasets}  # validates names first
    backend, llm_label = resolve_perturber(perturber)
    items = dataset_df.to_dict("records")
    pools = {ds: {str(r["item_id"]): str(r["reference"] or "") for r in items if str(r["dataset"]) == ds}
             for ds in datasets}
    if progress is True:  # a path (dhp.grid's watcher) is for the call engine only
        from tqdm.auto import tqdm

        items = tqdm(items, desc="perturb", unit="item")
    rows: list[dict] = []
    llm_rows: list[tuple[dict, LLMJob]] = []
    llm = llm_methods() if backend is not None else frozenset()
    state = random.getstate()  # belt and braces: no method may leak changes to global random
    try:
        for item in items:
            ds = str(item["dataset"])
            task = str(item.get("task") or tasks.get(ds) or task_of(ds))
            rows += _item_rows(item, task, plans[ds], pools[ds], seed, llm, llm_label, llm_rows)
    finally:
        random.setstate(state)
    estimate = _run_llm_rows(llm_rows, backend, cache, max_attempts, dry_run, progress)
    table = pd.DataFrame(rows, columns=COLUMNS)
    return (table, estimate) if dry_run else table


def _check_dataset_table(dataset_df) -> None:
    if not isinstance(dataset_df, pd.DataFrame):
        raise DHPError("perturb() needs the dataset table (a pandas DataFrame).",
                       "pass the result of dhp.datasets.load_dataset(...).")
    missing = [c for c in _REQUIRED if c not in dataset_df.columns]
    if missing:
        raise DHPError(f"The dataset table lacks column(s) {missing}.",
                       "pass the table made by dhp.datasets.load_dataset(...).")
    if dataset_df.empty:
        raise DHPError("The dataset table has no rows.", "load at least one item (n_items >= 1).")
    if dataset_df.duplicated(["dataset", "item_id"]).any():
        raise DHPError("The dataset table has duplicate (dataset, item_id) rows.",
                       "make item_id unique within each dataset.")


def _item_rows(item: dict, task: str, plan, pool: dict[str, str], seed: int, llm: frozenset, llm_label: str,
               llm_rows: list) -> list[dict]:
    """The original row and one row per method for one item. Rule methods run here; LLM rows are
    appended to ``llm_rows`` with their job and filled in later, all in one batch of calls."""
    ds, item_id = str(item["dataset"]), str(item["item_id"])
    text = item["reference"] if isinstance(item["reference"], str) else ""
    base = {"dataset": ds, "task": task, "item_id": item_id}
    empty = not text.strip()
    rows = [{**base, "perturbation": ORIGINAL, "level": "none", "severity": "none", "method": "none",
             "text": None if empty else text, "edits": "", "status": "skipped" if empty else "ok",
             "reason": "empty reference text" if empty else ""}]
    for m in plan:
        use_llm = m.perturbation in llm
        row = {**base, "perturbation": m.perturbation, "level": m.level, "severity": m.severity,
               "method": llm_label if use_llm else "rule", "text": None, "edits": "", "status": "skipped",
               "reason": ""}
        rs = row_seed(seed, ds, item_id, m.perturbation, m.severity)
        if empty:
            row["reason"] = "empty reference text"
        elif use_llm:
            llm_rows.append((row, LLMJob(m.perturbation, m.severity, task, text, rs)))
        else:
            try:
                ctx = Context(m.severity, m.k, random.Random(rs), {**item, "item_id": item_id}, pool, seed)
                new, edits = PERTURBATIONS[m.perturbation].apply(text, ctx)
                row.update(text=new, edits=edits, status="ok")
            except Skip as s:
                row["reason"] = s.reason
        rows.append(row)
    return rows


def _run_llm_rows(llm_rows: list, backend, cache, max_attempts: int, dry_run: bool, progress: bool | str):
    """Fill the LLM rows in place (or mark them pending in a dry run); returns the dry run's estimate."""
    if not llm_rows:
        return None
    jobs = [j for _, j in llm_rows]
    if dry_run:
        for row, _ in llm_rows:
            row.update(status="pending", reason="dry run: LLM perturbation not made yet")
        return llm_perturb_many(backend, jobs, cache, max_attempts, dry_run=True)
    for (row, _), res in zip(llm_rows, llm_perturb_many(backend, jobs, cache, max_attempts, progress=progress)):
        row.update(text=res.text, edits=res.edits, status=res.status, reason=res.reason)
    return None
