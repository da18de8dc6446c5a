"""HANNA's per-story scores (Chhun et al., COLING 2022; TACL 2024; github.com/dig-team/hanna-benchmark-asg @
282f275 : hanna_metric_scores_llm.csv, MIT): one CSV row per story-generating system (``Model``: ``Human`` and 10
generators), every other cell a JSON list of 96 numbers, story i of a row being the system's story for prompt i.

Rows:

- item_human.parquet — the columns ``Relevance``, ``Coherence``, ``Empathy``, ``Surprise``, ``Engagement``,
  ``Complexity`` (the mean of the 3 raters): dataset "hanna", criterion, system, item = the prompt (0..95), human.
- item_scores.parquet — the LLM judges' ratings ``<judge> <RE|CH|EM|SU|EG|CX> <setting>`` (Beluga-13B,
  OrcaPlatypus, Mistral-7B, Llama-13B, ChatGPT; prompt settings 1–4) as judge ``<judge> (setting <k>)`` with the
  criterion the rating is of; the 72 automatic metrics (the columns from ``BLEU`` to ``BARTScore-SP``) as judge =
  the column name without upstream's trailing family tag (``BLEU Ξ§`` -> ``BLEU``), criterion "" (one score per
  story, compared with every criterion). Not imported: the per-rater columns ``Human k XX`` and ``Human Avg k XX``
  (raters, not judges: a rater correlated with a mean that contains their own rating is no fair comparison) and the
  LLM judges' ``AVG`` (there is no human criterion "average").

A metric where higher means worse keeps its sign as upstream gives it (HANNA's correlations are signed: e.g. the
Repetition metrics correlate negatively); the leaderboard ranks by the signed correlation, as the paper's tables.
"""

from __future__ import annotations

import csv
import io
import json
import re

import numpy as np
import pandas as pd

from dhp.errors import DHPError
from dhp.recorded.importers import ITEM_COLUMNS, ITEM_HUMAN_COLUMNS, RECORDED_MODE, SourceFile, importer

__all__ = ["CRITERIA", "CODES", "N_PROMPTS", "read_hanna", "judge_name"]

CRITERIA = ("Relevance", "Coherence", "Empathy", "Surprise", "Engagement", "Complexity")
CODES = dict(zip(("RE", "CH", "EM", "SU", "EG", "CX"), CRITERIA))
N_PROMPTS = 96
DATASET = "hanna"
_LLM = re.compile(r"^(?P<judge>.+) (?P<code>RE|CH|EM|SU|EG|CX|AVG) (?P<setting>\d+)$")
_RATER = re.compile(r"^Human (?:Avg )?\d+ (?:RE|CH|EM|SU|EG|CX)$")


def judge_name(column: str) -> str:
    """A metric column's judge id: the name without upstream's trailing family tag (non-ASCII symbols)."""
    head, sep, tail = column.rpartition(" ")
    return head if sep and tail and not tail.isascii() else column


def _cells(f: SourceFile, text: str) -> tuple[list[str], list[list[str]]]:
    csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as e:
        raise DHPError(f"{f.path} is not valid CSV ({e}).", "use the unmodified hanna_metric_scores_llm.csv.") from None
    rows = [r for r in rows if r]
    if not rows or rows[0][:1] != ["Model"] or any(c not in rows[0] for c in CRITERIA):
        raise DHPError(f"{f.path} line 1 is not HANNA's header (Model, {', '.join(CRITERIA)}, metrics ...).",
                       "pass hanna_metric_scores_llm.csv from github.com/dig-team/hanna-benchmark-asg.")
    return rows[0], rows[1:]


def read_hanna(f: SourceFile) -> dict[str, pd.DataFrame]:
    """The human and judge rows of hanna_metric_scores_llm.csv (module docstring)."""
    try:
        text = f.data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = f.data[:e.start].count(b"\n") + 1
        raise DHPError(f"{f.path} line {line} is not UTF-8.",
                       "use the unmodified hanna_metric_scores_llm.csv.") from None
    header, rows = _cells(f, text)
    if len(set(header)) != len(header):
        raise DHPError(f"{f.path}: the header names a column twice.", "use the unmodified file.")
    systems = []
    values: dict[str, list[np.ndarray]] = {c: [] for c in header[1:]}
    for no, r in enumerate(rows, start=2):  # data rows hold no newlines: row k is line k + 1
        if len(r) != len(header):
            raise DHPError(f"{f.path} row {no - 1} (line {no}) has {len(r)} fields but the header has {len(header)}.",
                           "use the unmodified file (cells are quoted JSON lists).")
        if not r[0] or r[0] in systems:
            raise DHPError(f"{f.path} row {no - 1} (line {no}): system {r[0]!r} is empty or repeated.",
                           "give each system one row.")
        systems.append(r[0])
        for col, cell in zip(header[1:], r[1:]):
            try:
                v = np.array(json.loads(cell), dtype=float)
            except (ValueError, TypeError):
                v = None
            if v is None or v.shape != (N_PROMPTS,):
                raise DHPError(f"{f.path} row {no - 1} (line {no}, system {r[0]!r}), column {col!r}: not a JSON "
                               f"list of {N_PROMPTS} numbers.", "use the unmodified file.")
            values[col].append(v)
    if not systems:
        raise DHPError(f"{f.path} has no data rows.", "use the unmodified file.")
    n = len(systems) * N_PROMPTS
    system = np.repeat(np.array(systems, dtype=object), N_PROMPTS)
    item = np.tile(np.arange(N_PROMPTS).astype(str).astype(object), len(systems))

    def block(value_col: str, **const) -> pd.DataFrame:
        x = np.concatenate(values[value_col])
        return pd.DataFrame({**{k: np.full(n, v, dtype=object) for k, v in const.items()},
                             "system": system, "item": item, "_v": x})

    human = pd.concat([block(c, criterion=c) for c in CRITERIA], ignore_index=True)
    human = human.rename(columns={"_v": "human"}).assign(dataset=DATASET, subset="", split="", source=f.label)
    parts = []
    for col in header[1:]:
        if col in CRITERIA or _RATER.match(col):
            continue
        m = _LLM.match(col)
        if m:
            if m["code"] == "AVG":
                continue
            parts.append(block(col, judge=f"{m['judge']} (setting {m['setting']})", criterion=CODES[m["code"]]))
        else:
            parts.append(block(col, judge=judge_name(col), criterion=""))
    scores = pd.concat(parts, ignore_index=True).rename(columns={"_v": "score"})
    bad = ~np.isfinite(scores["score"].to_numpy())
    scores = scores.assign(dataset=DATASET, mode=RECORDED_MODE, subset="", split="",
                           failure=np.where(bad, "no score in the file", ""), source=f.label)
    dup = scores.duplicated(["judge", "criterion", "system", "item"])
    if dup.any():
        j = scores.loc[dup.idxmax(), "judge"]
        raise DHPError(f"{f.path}: two columns give judge {j!r} (after removing the family tag).",
                       "use the unmodified file.")
    if not np.isfinite(human["human"].to_numpy()).all():
        raise DHPError(f"{f.path}: a human criterion column holds a non-number.", "use the unmodified file.")
    return {"item_scores.parquet": scores[ITEM_COLUMNS], "item_human.parquet": human[ITEM_HUMAN_COLUMNS]}


@importer("hanna", suffixes=(".csv",), default="hanna/hanna_metric_scores_llm.csv",
          views="HANNA story ratings: Kendall of each LLM judge and metric with the human criteria")
def _read(f: SourceFile, ctx) -> dict[str, pd.DataFrame]:
    """HANNA's hanna_metric_scores_llm.csv -> item_scores.parquet (LLM judges per setting, 72 metrics) and
    item_human.parquet (the raters' mean per criterion)."""
    return read_hanna(f)
