"""FRANK's human factuality labels and its metrics' outputs (Pagnoni et al., NAACL 2021; github.com/artidoro/frank
@ 80a88fb : data/, MIT): two JSON lists of records keyed by (``hash``, ``model_name``) — the article and the
summarising system —, each with ``dataset`` (cnndm, bbc) and ``split`` (test, valid).

- ``human_annotations.json`` -> item_human.parquet: dataset "frank", criterion "Factuality" (the share of the
  summary's sentences without a factual error, 0–1), subset = upstream's ``dataset``, split, system =
  ``model_name``, item = ``hash``, human.
- ``baseline_factuality_metrics_outputs.json`` -> item_scores.parquet: one judge per metric key (Rouge 1, Rouge 2,
  Rouge L, Bleu, Meteor, BertScore P/R/F1 against the reference and ``Art`` against the article, FactCC, FEQA,
  Dep Entail, QAGS), criterion "Factuality"; a null output is a NaN score with its failure.

Other files of the folder (the splits' hash lists, ``benchmark_data.json`` with the texts) are not read here: the
split is a field of every record, and the texts are loaded by dhp.recorded.texts.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from dhp.errors import DHPError
from dhp.recorded.importers import ITEM_COLUMNS, ITEM_HUMAN_COLUMNS, RECORDED_MODE, SourceFile, importer

__all__ = ["read_frank", "HUMAN_FILE", "METRICS_FILE", "CRITERION"]

HUMAN_FILE = "human_annotations.json"
METRICS_FILE = "baseline_factuality_metrics_outputs.json"
CRITERION = "Factuality"
DATASET = "frank"
KEYS = ("hash", "model_name", "dataset", "split")


def _records(f: SourceFile) -> list[dict]:
    try:
        data = json.loads(f.data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DHPError(f"{f.path} is not valid JSON ({e}).", f"use the unmodified {f.path.name} from "
                       "github.com/artidoro/frank (data/).") from None
    if not isinstance(data, list) or not data:
        raise DHPError(f"{f.path} is not a non-empty JSON list of records.", "use the unmodified file.")
    for i, rec in enumerate(data, start=1):
        if not isinstance(rec, dict):
            raise DHPError(f"{f.path} record {i} is a JSON {type(rec).__name__}, not an object.",
                           "use the unmodified file.")
        for k in KEYS:
            if not isinstance(rec.get(k), str) or not rec[k]:
                raise DHPError(f"{f.path} record {i} has no text field {k!r}.",
                               f"give every record {list(KEYS)} (upstream's keys).")
    seen = {}
    for i, rec in enumerate(data, start=1):
        key = (rec["hash"], rec["model_name"])
        if key in seen:
            raise DHPError(f"{f.path} record {i} repeats (hash, model_name) of record {seen[key]}.",
                           "give each summary one record.")
        seen[key] = i
    return data


def _number(f: SourceFile, i: int, rec: dict, k: str) -> float:
    v = rec.get(k)
    if v is None:
        return math.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise DHPError(f"{f.path} record {i} ({rec['hash'][:12]}…, {rec['model_name']}): {k} {v!r} is not a number.",
                       "use the unmodified file (a missing output is null).")
    return float(v)


def read_frank(f: SourceFile) -> dict[str, pd.DataFrame]:
    """The rows of one FRANK file (module docstring)."""
    data = _records(f)
    base = pd.DataFrame({"dataset": DATASET, "criterion": CRITERION,
                         "subset": [r["dataset"] for r in data], "split": [r["split"] for r in data],
                         "system": [r["model_name"] for r in data], "item": [r["hash"] for r in data],
                         "source": f.label})
    if f.path.name == HUMAN_FILE:
        human = np.array([_number(f, i, r, CRITERION) for i, r in enumerate(data, start=1)])
        if np.isnan(human).any():
            i = int(np.flatnonzero(np.isnan(human))[0]) + 1
            raise DHPError(f"{f.path} record {i} has no {CRITERION}.", "use the unmodified file.")
        return {"item_human.parquet": base.assign(human=human)[ITEM_HUMAN_COLUMNS]}
    metrics = [k for k in data[0] if k not in KEYS]
    if not metrics:
        raise DHPError(f"{f.path} records hold no metric output besides {list(KEYS)}.", "use the unmodified file.")
    parts = []
    for m in metrics:
        x = np.array([_number(f, i, r, m) for i, r in enumerate(data, start=1)])
        parts.append(base.assign(judge=m, mode=RECORDED_MODE, score=x,
                                 failure=np.where(np.isnan(x), "no output in the file", "")))
    return {"item_scores.parquet": pd.concat(parts, ignore_index=True)[ITEM_COLUMNS]}


@importer("frank", suffixes=(HUMAN_FILE, METRICS_FILE), default="frank",
          views="FRANK factuality: partial Pearson and Spearman of each metric with the human Factuality")
def _read(f: SourceFile, ctx) -> dict[str, pd.DataFrame]:
    """FRANK's human_annotations.json -> item_human.parquet; baseline_factuality_metrics_outputs.json ->
    item_scores.parquet (15 metrics)."""
    return read_frank(f)
