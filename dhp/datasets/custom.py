"""Bring your own dataset: CSV, JSONL or JSON with item_id, source, reference."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Annotated

import pandas as pd
from pydantic import AfterValidator

from dhp.errors import DHPError
from dhp.io import decode_user_text, jsonl_lines
from dhp.schema import TASK_METRICS
from dhp.datasets.files import dataset_names
from dhp.datasets.selection import _frame, load_dataset, select_ids


_REQUIRED = ("item_id", "source", "reference")
#: File suffixes of a dataset of your own (dhp.datasets.load_custom).
CUSTOM_SUFFIXES = (".csv", ".jsonl", ".ndjson")


def is_own_file(dataset) -> bool:
    """True when ``dataset`` names a file of your own rather than a registered dataset pool."""
    return str(dataset) not in dataset_names() and Path(str(dataset)).suffix.lower() in CUSTOM_SUFFIXES


def _check_dataset(value: str) -> str:
    if value not in dataset_names() and not is_own_file(value):
        raise ValueError(f"unknown dataset; use one of {dataset_names()} or the path of a .csv/.jsonl file")
    return value


#: A method parameter naming a dataset: one of DATASETS or the path of your own .csv/.jsonl file.
DatasetName = Annotated[str, AfterValidator(_check_dataset)]
_OPTIONAL = ("question", "wrong_ending", "src_lang", "tgt_lang")


def _custom_records(p: Path) -> list[tuple[str, dict]]:
    """(where, record) pairs; `where` names the row as the user sees it in an editor."""
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise DHPError(f"Cannot read {p}: {e.strerror or e}.",
                       "check the path and that the file is readable.") from None
    text = decode_user_text(raw, str(p))  # UTF-8 only: UTF-16, other encodings and NUL bytes named and refused
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _jsonl_records(p, text)
    if suffix == ".csv":
        return _csv_records(p, text)
    raise DHPError(f"{p} has extension {p.suffix!r}; only .csv and .jsonl are supported.",
                   "save the file as CSV (with a header) or JSONL (one object per line).")


def _jsonl_records(p: Path, text: str) -> list[tuple[str, dict]]:
    out = []
    for lineno, line in jsonl_lines(text):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise DHPError(f"{p} line {lineno} is not valid JSON ({e.msg}).",
                           "write one JSON object per line.") from None
        except RecursionError:
            raise DHPError(f"{p} line {lineno} nests JSON deeper than Python's parser allows.",
                           'write one flat object per line, e.g. {"item_id": "1", "source": ..., '
                           '"reference": ...}.') from None
        if not isinstance(rec, dict):
            raise DHPError(f"{p} line {lineno} is a JSON {type(rec).__name__}, not an object.",
                           'write one object per line, e.g. {"item_id": "1", "source": ..., '
                           '"reference": ...}.')
        out.append((f"line {lineno}", rec))
    return out


def _csv_records(p: Path, text: str) -> list[tuple[str, dict]]:
    out = []
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        header = []
    except csv.Error as e:
        raise DHPError(f"{p} line 1 is not valid CSV ({e}).", "fix the header line.") from None
    header = [h.strip() for h in header]
    start = reader.line_num + 1
    row = 0
    try:
        for values in reader:
            row += 1
            where = f"row {row} (line {start} of the file)"
            if values and len(values) != len(header):
                raise DHPError(f"{p} {where} has {len(values)} fields but the header has "
                               f"{len(header)}.", "quote fields that contain commas or newlines.")
            if values:
                out.append((where, dict(zip(header, values))))
            start = reader.line_num + 1
    except csv.Error as e:
        if "field limit" in str(e):  # csv's own limit on one field, not a quoting mistake as such
            limit = csv.field_size_limit()
            raise DHPError(f"{p}: a field starting on line {start} is longer than the CSV reader's limit of "
                           f"{limit:,} characters (Python's csv.field_size_limit).",
                           "if the text really is that long, save the file as JSONL (one JSON object per line: no "
                           "field limit); if it should not be, a quote opened on that line is never closed, so the "
                           "rest of the file reads as one field: close it.") from None
        raise DHPError(f"{p} line {start} is not valid CSV ({e}).",
                       "check the quoting on that line.") from None
    if not header or header == [""]:
        raise DHPError(f"{p} is empty.", f"add a header line with {list(_REQUIRED)} and rows.")
    missing = [c for c in _REQUIRED if c not in header]
    if missing:
        raise DHPError(f"{p} lacks required columns {missing} (it has {header}).",
                       f"add columns {list(_REQUIRED)} (plus 'task' or pass task=).")
    return out


def load_custom(
    path: str | os.PathLike,
    task: str | None = None,
    dataset: str | None = None,
) -> pd.DataFrame:
    """Load your own CSV or JSONL file into the dataset table (same columns as `load_dataset`).

    Each row needs `item_id`, `source`, `reference` and a task (a `task` column, or the `task`
    argument for all rows; one of dhp.schema.TASK_METRICS). Optional columns: `question`,
    `wrong_ending`, `src_lang`, `tgt_lang`, `dataset` (else the `dataset` argument, else the
    file name without extension). Other columns are ignored. Rows keep file order.

    Raises DHPError naming the file, the row (1-based: CSV "row N (line L of the file)" where the
    header is line 1; JSONL "line L") and the fix for: unreadable/missing file, unsupported
    extension, non-UTF-8 bytes, invalid CSV/JSON, missing columns, empty item_id/source/reference,
    duplicate item_id, missing or unknown task.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise DHPError(f"Cannot read {p}: no such file.", "check the path (relative paths are "
                       "relative to the current directory).")
    if task is not None and task not in TASK_METRICS:
        raise DHPError(f"Unknown task {task!r} (argument task=).", f"use one of {sorted(TASK_METRICS)}.")
    records = _custom_records(p)
    if not records:
        raise DHPError(f"{p} has no data rows.", "add at least one row with item_id, source, reference.")
    rows, seen = [], {}
    for where, rec in records:
        rec, item_id = _checked_record(p, where, rec)
        if item_id in seen:
            raise DHPError(f"{p} {where}: item_id {item_id!r} duplicates {seen[item_id]}.",
                           "give every row a unique item_id.")
        seen[item_id] = where
        rows.append({
            "dataset": dataset or str(rec.get("dataset") or "").strip() or p.stem,
            "task": _row_task(p, where, rec, task), "item_id": item_id,
            "source": str(rec["source"]).strip(), "reference": str(rec["reference"]).strip(),
            **{c: str(rec.get(c) or "").strip() for c in _OPTIONAL},
        })
    return _frame("", rows)


def _checked_record(p: Path, where: str, rec: dict) -> tuple[dict, str]:
    """The record with JSON nulls as "" and its stripped item_id, after checking that the required
    fields are present, non-empty and text."""
    missing = [c for c in _REQUIRED if c not in rec]
    if missing:
        raise DHPError(f"{p} {where} lacks {missing}.",
                       f"give every row the fields {list(_REQUIRED)}.")
    for col in (*_REQUIRED, *_OPTIONAL, "task", "dataset"):
        v = rec.get(col)
        if (v is not None and not isinstance(v, (str, int))) or isinstance(v, bool):
            raise DHPError(f"{p} {where}: {col} is a {type(v).__name__}, not text.",
                           f"make {col} a string.")
    rec = {k: ("" if v is None else v) for k, v in rec.items()}  # JSON null = empty
    item_id = str(rec["item_id"]).strip()
    for col, value in (("item_id", item_id), ("source", rec["source"]),
                       ("reference", rec["reference"])):
        if not str(value).strip():
            raise DHPError(f"{p} {where}: {col} is empty.", f"fill in {col} or delete the row.")
    return rec, item_id


def _row_task(p: Path, where: str, rec: dict, task: str | None) -> str:
    """The row's task: its `task` column, or the `task` argument (which must not contradict it)."""
    row_task = str(rec.get("task") or "").strip()
    if task is not None:
        if row_task and row_task != task:
            raise DHPError(f"{p} {where}: task {row_task!r} contradicts task={task!r}.",
                           "drop the argument or fix the column.")
        row_task = task
    if not row_task:
        raise DHPError(f"{p} {where}: no task.",
                       f"add a 'task' column or pass task= (one of {sorted(TASK_METRICS)}).")
    if row_task not in TASK_METRICS:
        raise DHPError(f"{p} {where}: unknown task {row_task!r}.",
                       f"use one of {sorted(TASK_METRICS)}.")
    return row_task


def load_items(dataset: str | os.PathLike, n_items: int, seed: int = 0, data_dir: str | os.PathLike | None = None,
               path: str | os.PathLike | None = None) -> pd.DataFrame:
    """The items of a run: ``dataset`` is one of DATASETS (loaded with its selection rule) or the path of your own
    CSV/JSONL file (dhp.datasets.load_custom), from which ``n_items`` are drawn with the same seeded rule. Every
    method that takes a dataset loads it here, so a bring-your-own file works on every route."""
    if str(dataset) in dataset_names():
        return load_dataset(str(dataset), n_items=n_items, seed=seed, data_dir=data_dir, path=path)
    table = load_custom(dataset)
    ids = select_ids(list(table["item_id"]), n_items, seed)
    return table.set_index("item_id", drop=False).loc[ids].reset_index(drop=True)
