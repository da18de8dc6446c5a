"""WMT22 human judgements for meta-evaluation: zh-en MQM segment scores (Google's annotations, with the
system outputs they rate) and crowd DA segment scores into English.

Read at run time from ``<data root>/wmt22/`` (fetched on first need: dhp.datasets.declared_files); no text of it is
stored in this repository. Segment ids are 1-based line numbers
of the WMT22 general test set (``txt/generaltest2022.<pair>.src.<lang>``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from dhp.errors import DHPError
from dhp.datasets import declared_files

__all__ = ["load_mqm_zh_en", "load_da"]


def _root(data_dir, sets=()) -> Path:
    """<data root>/wmt22, with the named data sets present (fetched when missing)."""
    return declared_files.ensure(sets, data_dir) / "wmt22"


def _lines(path: Path) -> list[str]:
    """Lines split on "\\n" only: segments may contain other Unicode line separators, which
    str.splitlines would split on, shifting every later segment id."""
    if not path.is_file():
        raise DHPError(f"WMT22 file {path} not found.",
                       "pass data_dir= (or set DHP_DATA_DIR) to the folder holding wmt22/.")
    text = path.read_text(encoding="utf-8")
    return text[:-1].split("\n") if text.endswith("\n") else text.split("\n")


def load_mqm_zh_en(data_dir=None, systems: list[str] | None = None) -> pd.DataFrame:
    """One row per (segment, system) with an MQM score. Columns: seg_id (1-based), system, doc_id, domain,
    source (Chinese segment), target (the system's English output), reference (reference A), mqm (higher
    is better: 0 = no error found; NaN rows — unscored — are dropped). Reference translations scored as
    systems (refA, refB) are kept under their names; ``systems`` restricts the systems."""
    root = _root(data_dir, ["wmt22_zh_en", "wmt22_mqm_zh_en"])
    mqm_dir = root / "mqm_zh-en"
    src = _lines(root / "txt" / "generaltest2022.zh-en.src.zh")
    ref = _lines(root / "txt" / "generaltest2022.zh-en.ref.A.en")
    docs = [ln.split("\t") for ln in _lines(mqm_dir / "zh-en.docs")]
    rows = []
    per_system: dict[str, int] = {}
    for no, ln in enumerate(_lines(mqm_dir / "zh-en.mqm.seg.score"), start=1):
        parts = ln.split("\t")
        if len(parts) != 2:
            raise DHPError(f"zh-en.mqm.seg.score line {no} is not 'SYSTEM<TAB>SCORE'.", "use the unmodified file.")
        system, score = parts
        seg = per_system[system] = per_system.get(system, 0) + 1
        if systems is not None and system not in systems:
            continue
        value = math.nan if score.strip() == "None" else float(score)
        if math.isnan(value):
            continue
        rows.append((seg, system, value))
    df = pd.DataFrame(rows, columns=["seg_id", "system", "mqm"])
    if (df["seg_id"] > len(src)).any():
        raise DHPError("MQM scores have more segments than the WMT22 zh-en source.", "use the unmodified files.")
    outputs = {}
    for system in df["system"].unique():
        f = mqm_dir / "system-outputs" / f"{system}.txt"
        outputs[system] = _lines(f) if f.is_file() else (ref if system == "refA" else None)
    df = df[[outputs[s] is not None for s in df["system"]]].copy()
    df["target"] = [outputs[s][i - 1] for s, i in zip(df["system"], df["seg_id"])]
    df["source"] = [src[i - 1] for i in df["seg_id"]]
    df["reference"] = [ref[i - 1] for i in df["seg_id"]]
    df["domain"] = [docs[i - 1][0] for i in df["seg_id"]]
    df["doc_id"] = [docs[i - 1][1] for i in df["seg_id"]]
    return df[["seg_id", "system", "doc_id", "domain", "source", "target", "reference", "mqm"]].reset_index(drop=True)


def load_da(pair: str = "zh-en", data_dir=None) -> pd.DataFrame:
    """Crowd DA segment scores into English (WMT22). Columns: seg_id (SID, 1-based), system (the ".N"
    run suffix removed), raw (0-100), z (z-normalised per annotator), n (annotations averaged)."""
    if pair not in ("zh-en", "de-en"):
        raise DHPError(f"No WMT22 DA file for {pair!r}.", "use pair='zh-en' or 'de-en'.")
    path = _root(data_dir, [f"wmt22/humaneval_da/ad-seg-scores-{pair}.csv"]) / "humaneval_da" / f"ad-seg-scores-{pair}.csv"
    if not path.is_file():
        raise DHPError(f"WMT22 DA file {path} not found.", "pass data_dir= (or set DHP_DATA_DIR).")
    df = pd.read_csv(path, sep=r"\s+")
    missing = {"SYS", "SID", "RAW.SCR", "Z.SCR", "N"} - set(df.columns)
    if missing:
        raise DHPError(f"{path.name} lacks columns {sorted(missing)}.", "use the unmodified WMT22 DA file.")
    out = pd.DataFrame({"seg_id": df["SID"].astype(int), "system": df["SYS"].str.replace(r"\.\d+$", "", regex=True),
                        "raw": df["RAW.SCR"].astype(float), "z": df["Z.SCR"].astype(float), "n": df["N"].astype(int)})
    return out
