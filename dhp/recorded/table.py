"""Bring your own judgments: a UTF-8 CSV (with a header) or JSONL file (one object per line) of scores or
verdicts a judge gave elsewhere. A file holds one kind, told by its columns:

**Pointwise scores** (a ``score`` column) -> scores.parquet, keyed like the scores table
(dhp.schema.SCORE_COLUMNS): required ``item_id, judge, metric, score``; optional ``dataset``, ``task``
(default: the item's, from the dataset table), ``mode`` (default "recorded"), ``perturbation`` (default
"original"), ``severity`` and ``level`` (default "none"; required for any other perturbation), ``failure``
(why ``score`` is empty). ``metric`` is one of the task's metrics (dhp.schema.TASK_METRICS) or
"likelihood"; ``score`` is a number on the scale (default dhp.judging.parsing.SCALE, 1–5; ``scale=``), or
empty with a ``failure`` reason. n_valid/n_failed are 1/0 (0/1 without a score); prob_mass NaN; truncated
and fallback False; prompt_tokens and completion_tokens 0 (not known).

**Pairwise verdicts** (a ``verdict`` column) -> pairwise_verdicts.parquet: required ``item_id, judge,
strategy, order, verdict``; optional ``subset`` and ``label`` (default: the item's, from the dataset
table), ``mode`` (default "recorded"), ``f1``, ``f2`` (numbers), ``failure``. ``order`` is "12" (output_1
shown first) or "21"; ``verdict`` is "1", "2" or "tie" in the data set's numbering, or empty with a
``failure`` reason.

Item ids are checked against a dataset table: ``dataset=`` (a .parquet table, or a CSV/JSONL file that
dhp.datasets.load_custom — pointwise — or dhp.datasets.llmbar.load_pairwise — pairwise — reads), else the
run's dataset.parquet (for verdicts, when it has a ``label`` column), else, for verdicts, LLMBar (ids
``<subset>-<index>``, read by dhp.datasets.llmbar.load_llmbar). When the run has a perturbed.parquet,
(item_id, perturbation, severity, level) of a score must be one of its rows.

Every problem — unreadable or non-UTF-8 file, invalid CSV/JSON, a missing column, an empty required
field, an unknown item id, a task/subset/label that contradicts the dataset, an unknown metric, order or
verdict, a score that is not a number or off the scale, an empty score or verdict without a reason, a
duplicate key — raises one DHPError naming the file, the row (CSV: ``row N (line L of the file)``, header =
line 1; JSONL: ``line L``) and the fix; nothing is imported.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pandas as pd

from dhp.datasets import load_custom
from dhp.datasets.llmbar import SUBSETS, load_llmbar, load_pairwise
from dhp.errors import DHPError
from dhp.io import jsonl_lines
from dhp.judging.parsing import SCALE
from dhp.recorded.importers import RECORDED_MODE, TABLE_KEYS, SourceFile, importer, score_columns, verdict_columns
from dhp.schema import ORIGINAL, TASK_METRICS

__all__ = ["read_judgments_file", "POINTWISE_REQUIRED", "PAIRWISE_REQUIRED"]

POINTWISE_REQUIRED = ("item_id", "judge", "metric", "score")
PAIRWISE_REQUIRED = ("item_id", "judge", "strategy", "order", "verdict")
VERDICTS = ("1", "2", "tie")
ORDERS = ("12", "21")


# ---------------------------------------------------------------------------------------------- reading

def _records(p: Path, data: bytes) -> tuple[list[str], list[tuple[str, dict]]]:
    """(columns, [(where, record)]); ``where`` names the row as an editor shows it."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise DHPError(f"{p} line {line} contains bytes that are not UTF-8.", "save the file as UTF-8.") from None
    suffix = p.suffix.lower()
    if suffix == ".csv":
        return _csv(p, text)
    if suffix in (".jsonl", ".ndjson"):
        return _jsonl(p, text)
    raise DHPError(f"{p} has extension {p.suffix!r}; judgments are read from .csv and .jsonl files.",
                   "save the file as CSV (with a header) or JSONL (one object per line).")


def _csv(p: Path, text: str) -> tuple[list[str], list[tuple[str, dict]]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [h.strip() for h in next(reader, [])]
    except csv.Error as e:
        raise DHPError(f"{p} line 1 is not valid CSV ({e}).", "fix the header line.") from None
    if not header or header == [""]:
        raise DHPError(f"{p} is empty.", "add a header line and one row per judgment.")
    out, row, start = [], 0, reader.line_num + 1
    try:
        for values in reader:
            if values:
                row += 1
                where = f"row {row} (line {start} of the file)"
                if len(values) != len(header):
                    raise DHPError(f"{p} {where} has {len(values)} fields but the header has {len(header)}.",
                                   "quote fields that contain commas or newlines.")
                out.append((where, dict(zip(header, values))))
            start = reader.line_num + 1
    except csv.Error as e:
        raise DHPError(f"{p} line {start} is not valid CSV ({e}).", "check the quoting on that line.") from None
    return header, out


def _jsonl(p: Path, text: str) -> tuple[list[str], list[tuple[str, dict]]]:
    out, cols = [], {}
    for no, line in jsonl_lines(text):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise DHPError(f"{p} line {no} is not valid JSON ({e.msg}).", "write one JSON object per line.") from None
        if not isinstance(rec, dict):
            raise DHPError(f"{p} line {no} is a JSON {type(rec).__name__}, not an object.",
                           "write one object per line.")
        cols.update(dict.fromkeys(rec))
        out.append((f"line {no}", rec))
    return list(cols), out


def _text(p: Path, where: str, rec: dict, col: str) -> str:
    v = rec.get(col)
    if v is None:
        return ""
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise DHPError(f"{p} {where}: {col} is a {type(v).__name__}, not text.", f"make {col} a string.")
    return str(v).strip()


def _number(p: Path, where: str, rec: dict, col: str) -> float | None:
    """The field as a float, None when empty; an error when it is not a finite number."""
    v = rec.get(col)
    if v is None or (isinstance(v, str) and not v.strip()):
        return None
    try:
        x = float(v) if not isinstance(v, bool) and isinstance(v, (int, float, str)) else math.nan
    except ValueError:
        x = math.nan
    if not math.isfinite(x):
        raise DHPError(f"{p} {where}: {col} {v!r} is not a number.", f"write {col} as a number (e.g. 4 or 3.5), "
                       "or leave it empty and say why in failure.")
    return x


def _required(p: Path, columns: list[str], records, need: tuple[str, ...]) -> None:
    missing = [c for c in need if c not in columns]
    if missing and p.suffix.lower() == ".csv":
        raise DHPError(f"{p} lacks column(s) {missing} (it has {columns}).", f"add columns {list(need)}.")
    for where, rec in records:
        gone = [c for c in need if c not in rec]
        if gone:
            raise DHPError(f"{p} {where} lacks {gone}.", f"give every row the fields {list(need)}.")
        for c in need:
            if c not in ("score", "verdict") and not _text(p, where, rec, c):
                raise DHPError(f"{p} {where}: {c} is empty.", f"fill in {c} or delete the row.")


def _no_duplicates(p: Path, keys: list[tuple[str, tuple]], names: list[str]) -> None:
    seen: dict[tuple, str] = {}
    for where, k in keys:
        if k in seen:
            raise DHPError(f"{p} {where}: {dict(zip(names, k))} repeats {seen[k]}.",
                           "give each judgment one row (delete or correct the repeat).")
        seen[k] = where


# ---------------------------------------------------------------------------------------------- datasets

def _dataset_table(ctx, pairwise: bool, p: Path) -> tuple[pd.DataFrame, str]:
    """(dataset table, where it came from) that item ids are checked against (module docstring)."""
    key = "pairwise" if pairwise else "pointwise"
    if key in ctx.cache:
        return ctx.cache[key]
    need = ["item_id", "subset", "label"] if pairwise else ["dataset", "task", "item_id"]
    run_table = ctx.run_dir / "dataset.parquet"
    if ctx.dataset is not None:
        d = ctx.dataset
        if d.suffix.lower() == ".parquet":
            if not d.is_file():
                raise DHPError(f"Dataset table {d} not found.", "pass the path of the dataset table (dataset=, --dataset).")
            table = pd.read_parquet(d)
        elif pairwise:
            table = load_pairwise(d)
        else:
            table = load_custom(d)
        origin = str(d)
    elif run_table.is_file() and (not pairwise or "label" in pd.read_parquet(run_table).columns):
        table, origin = pd.read_parquet(run_table), str(run_table)
    elif pairwise:
        try:
            table = load_llmbar(list(SUBSETS), data_dir=ctx.data_dir)
        except DHPError as e:
            raise DHPError(f"Cannot check the item ids of {p} against LLMBar: {e.problem}",
                           f"{e.fix} Or pass dataset= (CLI --dataset) the pairwise dataset you judged.") from None
        origin = "LLMBar (dhp.datasets.llmbar)"
    else:
        raise DHPError(f"Cannot check the item ids of {p}: {run_table} does not exist.",
                       "import into the run folder of the items that were judged (it holds dataset.parquet), "
                       "or pass dataset= (CLI --dataset) the dataset table.")
    missing = [c for c in need if c not in table.columns]
    if missing:
        raise DHPError(f"The dataset table {origin} lacks column(s) {missing}.",
                       "pass a dataset table as dhp.datasets loaders return it.")
    table = table.astype({c: str for c in need})
    ctx.cache[key] = (table, origin)
    return ctx.cache[key]


def _perturbed_keys(ctx) -> set | None:
    if "perturbed" not in ctx.cache:
        p = ctx.run_dir / "perturbed.parquet"
        ctx.cache["perturbed"] = None if not p.is_file() else set(map(tuple, pd.read_parquet(
            p, columns=["item_id", "perturbation", "severity", "level"]).astype(str).to_numpy().tolist()))
    return ctx.cache["perturbed"]


# ---------------------------------------------------------------------------------------------- rows

def _pointwise(p: Path, columns, records, ctx, source: str) -> pd.DataFrame:
    _required(p, columns, records, POINTWISE_REQUIRED)
    lo, hi = ctx.scale or SCALE
    table, origin = _dataset_table(ctx, False, p)
    by_id: dict[str, list[tuple[str, str]]] = {}
    for ds, task, iid in table[["dataset", "task", "item_id"]].itertuples(index=False):
        by_id.setdefault(iid, []).append((ds, task))
    perturbed = _perturbed_keys(ctx)
    rows, keys = [], []
    for where, rec in records:
        t = {c: _text(p, where, rec, c) for c in ("item_id", "judge", "metric", "dataset", "task", "mode",
                                                   "perturbation", "severity", "level", "failure")}
        known = by_id.get(t["item_id"], [])
        if t["dataset"]:
            known = [k for k in known if k[0] == t["dataset"]]
        if not known:
            named = f" of dataset {t['dataset']!r}" if t["dataset"] else ""
            raise DHPError(f"{p} {where}: item_id {t['item_id']!r}{named} is not in the dataset table {origin}.",
                           "use the item ids of the items that were judged (the run's dataset.parquet), or pass "
                           "dataset= (CLI --dataset) the table they come from.")
        if len(known) > 1:
            raise DHPError(f"{p} {where}: item_id {t['item_id']!r} is in several datasets of {origin} "
                           f"({sorted(k[0] for k in known)}).", "add a dataset column naming which.")
        dataset, task = known[0]
        if t["task"] and t["task"] != task:
            raise DHPError(f"{p} {where}: task {t['task']!r} contradicts the dataset table's {task!r}.",
                           "drop the task column or correct it.")
        allowed = (*TASK_METRICS.get(task, ()), "likelihood")
        if t["metric"] not in allowed:
            raise DHPError(f"{p} {where}: metric {t['metric']!r} is not one of the {task} task's {list(allowed)}.",
                           "name the metric as dhp.schema.TASK_METRICS does.")
        pert = t["perturbation"] or ORIGINAL
        if pert != ORIGINAL and not (t["severity"] and t["level"]):
            raise DHPError(f"{p} {where}: perturbation {pert!r} needs its severity and level.",
                           "add severity and level columns (as in the run's perturbed.parquet).")
        severity, level = t["severity"] or "none", t["level"] or "none"
        if perturbed is not None and (t["item_id"], pert, severity, level) not in perturbed:
            raise DHPError(f"{p} {where}: ({t['item_id']!r}, {pert!r}, {severity!r}, {level!r}) is not a row of "
                           f"{ctx.run_dir / 'perturbed.parquet'}.",
                           "use the item_id, perturbation, severity and level of the variant that was judged.")
        score = _number(p, where, rec, "score")
        if score is None and not t["failure"]:
            raise DHPError(f"{p} {where}: score is empty and failure does not say why.",
                           "give the score, or a failure column with the reason the judge gave none.")
        if score is not None and not lo <= score <= hi:
            raise DHPError(f"{p} {where}: score {score:g} is off the {lo:g}–{hi:g} scale.",
                           "rescale the scores to the scale, or pass scale= (CLI --scale LOW HIGH) for yours.")
        ok = score is not None
        row = {"dataset": dataset, "task": task, "judge": t["judge"], "mode": t["mode"] or RECORDED_MODE,
               "item_id": t["item_id"], "perturbation": pert, "severity": severity, "level": level,
               "metric": t["metric"], "score": score if ok else math.nan, "n_valid": int(ok), "n_failed": int(not ok),
               "failure": t["failure"], "prob_mass": math.nan, "truncated": False, "fallback": False,
               "prompt_tokens": 0, "completion_tokens": 0, "source": source}
        keys.append((where, tuple(row[c] for c in TABLE_KEYS["scores.parquet"])))
        rows.append(row)
    _no_duplicates(p, keys, TABLE_KEYS["scores.parquet"])
    return pd.DataFrame(rows, columns=score_columns())


def _pairwise(p: Path, columns, records, ctx, source: str) -> pd.DataFrame:
    _required(p, columns, records, PAIRWISE_REQUIRED)
    table, origin = _dataset_table(ctx, True, p)
    items = {iid: (sub, lab) for iid, sub, lab in table[["item_id", "subset", "label"]].itertuples(index=False)}
    rows, keys = [], []
    for where, rec in records:
        t = {c: _text(p, where, rec, c) for c in ("item_id", "judge", "strategy", "order", "verdict", "subset",
                                                   "label", "mode", "failure")}
        if t["item_id"] not in items:
            raise DHPError(f"{p} {where}: item_id {t['item_id']!r} is not in the dataset table {origin}.",
                           "use the item ids of the pairs that were judged, or pass dataset= (CLI --dataset) the "
                           "pairwise table they come from.")
        subset, label = items[t["item_id"]]
        for col, want in (("subset", subset), ("label", label)):
            if t[col] and t[col].lower() != want.lower():
                raise DHPError(f"{p} {where}: {col} {t[col]!r} contradicts the dataset table's {want!r}.",
                               f"drop the {col} column or correct it.")
        if t["order"] not in ORDERS:
            raise DHPError(f"{p} {where}: order {t['order']!r} is not '12' or '21'.",
                           "write 12 when output_1 was shown first, 21 when output_2 was.")
        verdict = t["verdict"].lower()
        if verdict and verdict not in VERDICTS:
            raise DHPError(f"{p} {where}: verdict {t['verdict']!r} is not 1, 2 or tie.",
                           "give the better output in the data set's numbering (1, 2 or tie), or leave it empty "
                           "and say why in failure.")
        if not verdict and not t["failure"]:
            raise DHPError(f"{p} {where}: verdict is empty and failure does not say why.",
                           "give the verdict, or a failure column with the reason the judge gave none.")
        f1, f2 = _number(p, where, rec, "f1"), _number(p, where, rec, "f2")
        row = {"judge": t["judge"], "mode": t["mode"] or RECORDED_MODE, "item_id": t["item_id"], "subset": subset,
               "strategy": t["strategy"], "order": t["order"], "aspects": "", "aspect_scores_1": "",
               "aspect_scores_2": "", "weights": "", "f1": math.nan if f1 is None else f1,
               "f2": math.nan if f2 is None else f2, "verdict": verdict or None, "label": label,
               "failure": t["failure"], "source": source}
        keys.append((where, tuple(row[c] for c in TABLE_KEYS["pairwise_verdicts.parquet"])))
        rows.append(row)
    _no_duplicates(p, keys, TABLE_KEYS["pairwise_verdicts.parquet"])
    return pd.DataFrame(rows, columns=verdict_columns())


def read_judgments_file(f: SourceFile, ctx) -> dict[str, pd.DataFrame]:
    """The rows of one bring-your-own file, checked (module docstring): {table name: rows}."""
    columns, records = _records(f.path, f.data)
    if not records:
        raise DHPError(f"{f.path} has no data rows.", "add one row per judgment.")
    has_score, has_verdict = "score" in columns, "verdict" in columns
    if has_score and has_verdict:
        raise DHPError(f"{f.path} has both a score and a verdict column: pointwise scores and pairwise verdicts "
                       "are different tables.", "put scores and verdicts in separate files.")
    if not has_score and not has_verdict:
        raise DHPError(f"{f.path} has no score column (pointwise scores) and no verdict column (pairwise "
                       f"verdicts); it has {columns}.", "name the column score or verdict (see dhp.recorded.table).")
    if has_score:
        return {"scores.parquet": _pointwise(f.path, columns, records, ctx, f.label)}
    return {"pairwise_verdicts.parquet": _pairwise(f.path, columns, records, ctx, f.label)}


@importer("table", suffixes=(".csv", ".jsonl", ".ndjson"))
def _read(f: SourceFile, ctx) -> dict[str, pd.DataFrame]:
    """Bring-your-own CSV/JSONL scores or verdicts -> scores.parquet or pairwise_verdicts.parquet."""
    return read_judgments_file(f, ctx)
