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

import pandas as pd

from dhp.errors import DHPError
from dhp.recorded import RECORDED_MODE, SEGMENT_COLUMNS, SourceFile, importer

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
    systems, segs, scores, failures = [], [], [], []
    count: dict[str, int] = {}
    for no, line in enumerate(lines, start=1):
        system, tab, value = line.rstrip("\r").partition("\t")
        if not tab or not system or "\t" in value:
            raise DHPError(f"{f.path} line {no} is not 'SYSTEM<TAB>SCORE'.", "use the unmodified score file.")
        count[system] = count.get(system, 0) + 1
        value = value.strip()
        if value == "None":
            score, why = math.nan, UNSCORED
        else:
            try:
                score = float(value)
            except ValueError:
                score = math.nan
            if not math.isfinite(score):
                raise DHPError(f"{f.path} line {no}: score {value!r} is not a finite number or None.",
                               "use the unmodified score file.")
            why = ""
        systems.append(system)
        segs.append(count[system])
        scores.append(score)
        failures.append(why)
    if len(set(count.values())) > 1:
        lo, hi = min(count, key=count.get), max(count, key=count.get)
        raise DHPError(f"{f.path}: systems have different numbers of segments ({lo}: {count[lo]}, {hi}: "
                       f"{count[hi]}).", "use the unmodified score file (every system scores every segment).")
    n = len(systems)
    return pd.DataFrame({"judge": [metric] * n, "mode": [RECORDED_MODE] * n, "lp": [pair] * n,
                         "reference": [ref] * n, "system": systems, "seg_id": segs, "score": scores,
                         "failure": failures, "source": [f.label] * n}, columns=SEGMENT_COLUMNS)


@importer("mtme", suffixes=(SUFFIX,))
def _read(f: SourceFile, ctx) -> dict[str, pd.DataFrame]:
    """mt-metrics-eval <metric>-<reference>.seg.score files -> segment_scores.parquet."""
    return {"segment_scores.parquet": read_seg_scores(f, ctx.lp)}
