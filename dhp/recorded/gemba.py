"""GEMBA's recorded judges (Kocmi & Federmann 2023, github.com/MicrosoftTranslator/GEMBA @ a7a7eff8, CC BY-SA 4.0):
seven LLMs (GPT4, Turbo, Chat, Dav3, Dav2, Curie, Bab) × four prompt styles (DA, SQM, Stars, Classes) × with the
human reference (``refA``) or the source only (``src``) on WMT22 zh-en, in the mt-metrics-eval layout
(``mt-metrics-eval-v2/wmt22/metric-scores/zh-en/GEMBA-<LLM>-<style>-<refA|src>.{seg,sys}.score``).

    python -m dhp import-judgments gemba --run-dir runs/gemba     # all 112 files from the data root

Rows: the ``.seg.score`` files as the ``mtme`` importer reads them (segment_scores.parquet: judge
``GEMBA-<LLM>-<style>``, reference ``refA`` or ``src``, ``None`` -> NaN with the failure "unscored (None in the
file)": GEMBA found no valid answer even at raised temperatures), with the MQM scores of WMT22 zh-en beside them
(segment_human.parquet; from the data root when no ``zh-en.mqm.seg.score`` lies near the imported folder). Each
``.sys.score`` file is checked to be what GEMBA's ``scores.py`` wrote: per system the mean of that judge's
segment scores over the segments with an answer (``None`` left out) — so the system-level view computes system
scores from the segments, by the same rule, and can resample them. A file that differs stops the import.

Protocol of every row (its ``protocol`` column, and the leaderboard's): :data:`PROTOCOLS` — GEMBA's prompt name in
``gemba/prompt.py`` (``GEMBA-DA`` / ``GEMBA-DA_ref`` ...), the commit that recorded the file (3dd2c49 or d942a90;
prompt.py is the same there as at a7a7eff8), the LLM behind the short name (the paper's Table 1), the decoding of
that commit's ``gpt_api.py`` (:data:`dhp.judging.gemba.RECORDED_DECODING`: the Completion API, max_tokens 20 raised
by 200 up to 500, n=10 at raised temperatures — not a7a7eff8's, which a live ``gemba:<name>`` run follows), and the
reference variant.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from dhp.datasets import declared_files
from dhp.errors import DHPError
from dhp.judging.gemba import RECORDED_DECODING
from dhp.recorded import mtme
from dhp.recorded.importers import SourceFile, importer, read_source

__all__ = ["PROTOCOLS", "LLMS", "STYLES", "protocol_of", "SYS_SUFFIX"]

SYS_SUFFIX = ".sys.score"
#: short name in GEMBA's file names -> the model as the data root's SOURCES.md names it (the paper has the details)
LLMS = {"GPT4": "GPT-4", "Turbo": "ChatGPT (Turbo)", "Chat": "ChatGPT (Chat)", "Dav3": "text-davinci-003",
        "Dav2": "text-davinci-002", "Curie": "GPT-3 Curie", "Bab": "GPT-3 Babbage"}
#: prompt style in the file names -> GEMBA's prompt name in gemba/prompt.py (the ``_ref`` one with the reference)
STYLES = {"DA": "GEMBA-DA", "SQM": "GEMBA-SQM", "Stars": "GEMBA-stars", "Classes": "GEMBA-classes"}
_NAME = re.compile(r"GEMBA-(?P<llm>[A-Za-z0-9]+)-(?P<style>DA|SQM|Stars|Classes)")
COMMIT = "a7a7eff8"  # the data root's snapshot
#: the files GEMBA committed in 3dd2c49 ("GEMBA scores", 2023-02-28); the other zh-en files were last written by
#: d942a90 ("EAMT scores, added GPT4 and Turbo", 2023-05-05) — both with the same gpt_api.py (git log of the repo)
FIRST_COMMIT, SECOND_COMMIT = "3dd2c49", "d942a90"
_FIRST = {f"GEMBA-{n}" for n in (
    "Bab-Classes-refA", "Bab-Classes-src", "Bab-DA-refA", "Bab-DA-src", "Chat-Classes-refA", "Chat-Classes-src",
    "Chat-DA-refA", "Chat-DA-src", "Chat-SQM-refA", "Chat-SQM-src", "Curie-Classes-refA", "Curie-Classes-src",
    "Curie-SQM-refA", "Curie-SQM-src", "Dav2-Classes-refA", "Dav2-Classes-src", "Dav2-DA-refA", "Dav2-DA-src",
    "Dav2-SQM-refA", "Dav2-SQM-src", "Dav3-Classes-refA", "Dav3-Classes-src", "Dav3-DA-refA", "Dav3-DA-src",
    "Dav3-SQM-src")}


def protocol_of(judge: str, reference: str) -> str:
    """The protocol a recorded GEMBA judge was run with: ``gemba/<prompt name>@<recording commit> <model>, <that
    commit's decoding>, reference <variant>`` (module docstring)."""
    m = _NAME.fullmatch(judge)
    if m is None or m["llm"] not in LLMS:
        raise DHPError(f"{judge!r} is not a GEMBA judge name (GEMBA-<LLM>-<style>).",
                       f"use GEMBA's file names: LLMs {sorted(LLMS)}, styles {sorted(STYLES)}.")
    prompt = STYLES[m["style"]] + ("_ref" if reference != "src" else "")
    commit = FIRST_COMMIT if f"{judge}-{reference}" in _FIRST else SECOND_COMMIT
    return (f"gemba/{prompt}@{commit} {LLMS[m['llm']]}, {RECORDED_DECODING}, "
            f"reference {reference if reference != 'src' else 'none (src)'}")


#: every recorded GEMBA judge × variant -> its protocol
PROTOCOLS = {(f"GEMBA-{llm}-{style}", ref): protocol_of(f"GEMBA-{llm}-{style}", ref)
             for llm in LLMS for style in STYLES for ref in ("refA", "src")}


def _mqm_file(path, lp: str, data_dir):
    found = mtme.find_mqm(path, lp)
    if found is not None:
        return found
    return declared_files.path("wmt22_mqm_zh_en", data_dir) / f"{lp}.mqm.seg.score" if lp == "zh-en" else None


def _system_means(rows: pd.DataFrame) -> dict[str, float]:
    """GEMBA scores.py: per system the mean over the segments with an answer."""
    return rows.groupby("system", sort=False)["score"].mean().to_dict()


def _check_sys(f: SourceFile, ctx) -> None:
    stem = f.path.name[: -len(SYS_SUFFIX)]
    seg = ctx.cache.get(f"gemba-seg:{f.path.parent / stem}")
    if seg is None:
        raise DHPError(f"{f.path}: its segment scores ({stem}.seg.score) are not beside it.",
                       "import the folder holding both (the system scores are checked against the segments).")
    text = f.data.decode("utf-8", errors="replace")
    for no, line in enumerate(text.splitlines(), start=1):
        system, _, value = line.partition("\t")
        want = seg.get(system)
        got = float("nan") if value.strip() == "None" else float(value)
        if want is None or not (np.isclose(got, want, rtol=0, atol=1e-9) or (np.isnan(got) and np.isnan(want))):
            raise DHPError(f"{f.path} line {no}: system score {value!r} of {system!r} is not the mean of its segment "
                           f"scores ({want}).", "use GEMBA's unmodified files.")


@importer("gemba", suffixes=(mtme.SUFFIX, SYS_SUFFIX), default="gemba/mt-metrics-eval-v2/wmt22/metric-scores/zh-en",
          companions=("wmt22_mqm_zh_en",), lp="zh-en", reference_method="human_alignment",
          # imported by evaluate only with a gemba:<name> protocol run (its 56 judges would double a segment view)
          views="WMT22 zh-en segments vs MQM, and systems (pairwise accuracy), beside the WMT22 metrics")
def _read(f: SourceFile, ctx) -> dict[str, pd.DataFrame]:
    """GEMBA's GEMBA-<LLM>-<style>-<refA|src>.seg.score files -> segment_scores.parquet, with WMT22 zh-en's MQM
    scores -> segment_human.parquet; the .sys.score files are checked against the segment scores."""
    if f.path.name.endswith(SYS_SUFFIX):
        _check_sys(f, ctx)
        return {}
    rows = mtme.read_seg_scores(f, ctx.lp)
    judge, ref = rows["judge"].iloc[0], rows["reference"].iloc[0]
    rows = rows.assign(protocol=protocol_of(judge, ref))  # a file that is not GEMBA's: stop with the reason
    # the .sys.score file (sorted after it) is checked against these means
    ctx.cache[f"gemba-seg:{f.path.parent / f.path.name[: -len(mtme.SUFFIX)]}"] = _system_means(rows)
    out = {"segment_scores.parquet": rows}
    lp = rows["lp"].iloc[0]
    key = f"mqm:{lp}"
    if key not in ctx.cache:
        found = _mqm_file(f.path, lp, ctx.data_dir)
        ctx.cache[key] = found
        if found is not None:
            src = read_source(found, f"{found.parent.name}/{found.name}")
            human = mtme.read_mqm(src, lp)
            ctx.companions.append((src, {"segment_human.parquet": int(len(human))}))
            out["segment_human.parquet"] = human
    return out
