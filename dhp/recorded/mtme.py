"""Segment scores of MT metrics in the mt-metrics-eval layout (google-research/mt-metrics-eval; the WMT22
Metrics Shared Task submissions, e.g. github.com/florethsong/mtme-zh-mwe @ 78ea1631 :
raw_wmt22/metric-scores/zh-en_all/): one file ``<metric>-<reference>.seg.score`` per metric and reference
variant (``refA``, ``refB``, ``src`` for reference-free metrics; a comma-joined list such as ``refA,refB``
for multi-reference scores), each line ``SYSTEM<TAB>SCORE``, the segments of each system in test-set order,
``None`` where a segment was not scored.

Rows (segment_scores.parquet, :data:`dhp.recorded.SEGMENT_COLUMNS`): judge = the metric name (the file
name without ``-<reference>.seg.score``), reference, lp (the language pair: ``lp=``, else the nearest folder
name holding one, e.g. ``zh-en_all`` -> zh-en), system, seg_id (the system's 1-based line count: the
1-based line of the test set, the seg_id of dhp.datasets.wmt22_human), score (the number as written; NaN
with failure "unscored (None in the file)"), source = the path below the folder imported (the file's name
when a single file is imported) and the sha256.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from dhp.errors import DHPError
from dhp.recorded.importers import (RECORDED_MODE, SEGMENT_COLUMNS, SEGMENT_HUMAN_COLUMNS, SourceFile, importer,
                                    read_source)

__all__ = ["read_seg_scores", "split_name", "language_pair"]

SUFFIX = ".seg.score"
_REF = re.compile(r"(?:src|ref[A-Za-z0-9]*)(?:,(?:src|ref[A-Za-z0-9]*))*")
_LP = re.compile(r"(?<![A-Za-z])([a-z]{2,3}-[a-z]{2,3})(?![A-Za-z])")
UNSCORED = "unscored (None in the file)"


def split_name(name: str) -> tuple[str, str]:
    """(metric, reference) of ``<metric>-<reference>.seg.score``; metric names may hold hyphens."""
    stem = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name
    metric, sep, ref = stem.rpartition("-")
    if not sep or not metric or not _REF.fullmatch(ref):
        raise DHPError(f"{name}: cannot tell the metric and its reference from the name.",
                       "name it <metric>-<refA|refB|src>.seg.score, as mt-metrics-eval does.")
    return metric, ref


def language_pair(path, lp: str | None = None) -> str:
    """``lp`` when given, else the language pair in the nearest folder name above ``path``."""
    if lp:
        return lp
    for folder in path.parents:
        m = _LP.search(folder.name)
        if m:
            return m.group(1)
    raise DHPError(f"Cannot tell the language pair of {path}: no folder above it is named like 'zh-en'.",
                   "pass lp= (CLI: --lp zh-en).")


def read_seg_scores(f: SourceFile, lp: str | None = None) -> pd.DataFrame:
    """The segment scores of one ``.seg.score`` file (module docstring)."""
    metric, ref = split_name(f.path.name)
    pair = language_pair(f.path, lp)
    try:
        text = f.data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = f.data[:e.start].count(b"\n") + 1
        raise DHPError(f"{f.path} line {line} is not UTF-8.",
                       "use the unmodified score file.") from None
    lines = text.split("\n")  # "\n" only: no other character ends a line of this format
    if lines and lines[-1] == "":
        lines.pop()
    parts = [ln.rstrip("\r").split("\t") for ln in lines]
    for no, pr in enumerate(parts, start=1):
        if len(pr) != 2 or not pr[0]:
            raise DHPError(f"{f.path} line {no} is not 'SYSTEM<TAB>SCORE'.", "use the unmodified score file.")
    systems = pd.Series([pr[0] for pr in parts], dtype="str")
    values = [pr[1].strip() for pr in parts]
    unscored = np.array([v == "None" for v in values], dtype=bool)
    try:  # numpy parses each string as Python's float() does: the number as written, exactly
        scores = np.array([("nan" if u else v) for u, v in zip(unscored, values)], dtype="float64")
        bad = ~np.isfinite(scores) & ~unscored
    except ValueError:
        bad = None
    if bad is None or bad.any():
        no = next(i for i, (u, v) in enumerate(zip(unscored, values), start=1) if not u and not _finite(v))
        raise DHPError(f"{f.path} line {no}: score {values[no - 1]!r} is not a finite number or None.",
                       "use the unmodified score file.")
    counts = systems.value_counts()
    if counts.nunique() > 1:
        lo, hi = counts.idxmin(), counts.idxmax()
        raise DHPError(f"{f.path}: systems have different numbers of segments ({lo}: {counts[lo]}, {hi}: "
                       f"{counts[hi]}).", "use the unmodified score file (every system scores every segment).")
    n = len(systems)
    const = {c: pd.Series([v], dtype="str").repeat(n).reset_index(drop=True)  # no per-row string conversion
             for c, v in (("judge", metric), ("mode", RECORDED_MODE), ("lp", pair), ("reference", ref),
                          ("source", f.label))}
    return pd.DataFrame({**const, "system": systems,
                         "seg_id": systems.groupby(systems, sort=False).cumcount().to_numpy() + 1,
                         "score": scores, "failure": pd.Series(np.where(unscored, UNSCORED, ""), dtype="str")},
                        columns=SEGMENT_COLUMNS)


def _finite(v: str) -> bool:
    try:
        return math.isfinite(float(v))
    except ValueError:
        return False


def find_mqm(path, lp: str):
    """The MQM file of ``lp`` beside the metric scores in the mt-metrics-eval layout
    (``<root>/human-scores/<lp>.mqm.seg.score``, or ``<lp>.mqm.seg.score`` in a sibling folder, as the data
    root's wmt22/mqm_zh-en/), searched up to three folders above ``path``; None when absent."""
    name = f"{lp}.mqm.seg.score"
    for folder in list(path.parents)[:3]:
        for cand in [folder / "human-scores" / name, *sorted(folder.glob(f"*/{name}"))]:
            if cand.is_file():
                return cand
    return None


def read_mqm(f: SourceFile, lp: str) -> pd.DataFrame:
    """segment_human.parquet rows (dhp.recorded.SEGMENT_HUMAN_COLUMNS) of an MQM ``.seg.score`` file: mt-metrics-eval
    writes MQM as a score (higher is better, 0 = no error), ``None`` where a segment was not rated (dropped)."""
    fake = SourceFile(f.path.with_name("MQM-refA.seg.score"), f.rel, f.data, f.sha256)  # same format, named as one
    rows = read_seg_scores(fake, lp)
    rows = rows[rows["failure"] == ""]
    return (rows.rename(columns={"score": "mqm"}).assign(da_z=np.nan)[SEGMENT_HUMAN_COLUMNS]
            .reset_index(drop=True))


@importer("mtme", suffixes=(SUFFIX,), default="wmt22/metric-scores_zh-en", companions=("wmt22_mqm_zh_en",),
          lp="zh-en", reference_method="human_alignment", feeds=("human_alignment",),
          views="WMT22 zh-en segments vs MQM (human_alignment's segment views)")
def _read(f: SourceFile, ctx) -> dict[str, pd.DataFrame]:
    """mt-metrics-eval <metric>-<reference>.seg.score files -> segment_scores.parquet, with the MQM human scores
    found beside them (:func:`find_mqm`) -> segment_human.parquet, so the segment view can be built."""
    if f.path.name.endswith(".mqm.seg.score"):  # a human score file inside the imported folder: brought below
        return {}
    out = {"segment_scores.parquet": read_seg_scores(f, ctx.lp)}
    pair = language_pair(f.path, ctx.lp)
    key = f"mqm:{pair}"
    if key not in ctx.cache:
        found = find_mqm(f.path, pair)
        ctx.cache[key] = found
        if found is not None:
            src = read_source(found, f"{found.parent.name}/{found.name}")
            human = read_mqm(src, pair)
            ctx.companions.append((src, {"segment_human.parquet": int(len(human))}))
            out["segment_human.parquet"] = human
    return out
