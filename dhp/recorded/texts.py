"""The texts behind the HANNA and FRANK views, for live judges (and the no-LLM baselines) to score the same outputs
the recorded judges scored. The files are large (optional sets of the data registry), so they are downloaded by the user
(or the data layer) from upstream, and checked here against upstream's git blob ids before use:

- HANNA ``hanna_stories_annotations.csv`` (github.com/dig-team/hanna-benchmark-asg @ 282f275): one row per
  annotation (3 per story): ``Story ID`` (0..1055, grouped by system in the order of hanna_metric_scores_llm.csv's
  rows: 0–95 Human, 96–191 BertGeneration, ...), ``Prompt``, ``Human`` (the human story of the prompt), ``Story``,
  ``Model``, the six criteria, worker fields. -> one row per story: system, item (the prompt, ``Story ID`` mod 96,
  as dhp.recorded.hanna numbers it), story_id, prompt, story, and the raters' mean per criterion (so a caller can
  check the join against item_human.parquet: :func:`check_hanna_join`).
- FRANK ``benchmark_data.json`` (github.com/artidoro/frank @ 80a88fb, data/): a list of records with ``hash``,
  ``model_name``, ``article``, ``summary``, ``reference`` and ``split``. -> system, item (the hash), split, article,
  summary, reference.

Nothing read here is written into the repository or results/ (texts stay in the run folder's text tables).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from dhp.errors import DHPError

__all__ = ["TEXT_FILES", "load_hanna_stories", "load_frank_texts", "check_hanna_join", "git_blob_id"]

#: upstream URL and git blob id (``git hash-object``) of each text file, from the upstream trees at the commits
#: the recorded scores come from
TEXT_FILES = {
    "hanna_stories_annotations.csv": {
        "url": "https://raw.githubusercontent.com/dig-team/hanna-benchmark-asg/"
               "282f27536a5d05ad4ce14298abcd70c45668fed2/hanna_stories_annotations.csv",
        "git_blob": "2eec3bbf5b1363a998dbf73199228e4fe13405ca"},
    "benchmark_data.json": {
        "url": "https://raw.githubusercontent.com/artidoro/frank/80a88fb12cc0bfc17ff6ee2c5ebb0c4f4dd8a5f4/data/"
               "benchmark_data.json",
        "git_blob": "b468e2ef48f0a98b4d793ff8730d648d6b3c657c"},
}
HANNA_SYSTEMS = ("Human", "BertGeneration", "CTRL", "GPT", "GPT-2 (tag)", "GPT-2", "RoBERTa", "XLNet", "Fusion",
                 "HINT", "TD-VAE")
N_PROMPTS = 96
HANNA_NEEDED = ("Story ID", "Prompt", "Story", "Model")
FRANK_NEEDED = ("hash", "model_name", "article", "summary")


def git_blob_id(data: bytes) -> str:
    """The id git gives a file's bytes (``git hash-object``): upstream's trees list it for every file."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _read(path, name: str, verify: bool) -> bytes:
    p = Path(os.fspath(path)).expanduser()
    if not p.is_file():
        raise DHPError(f"{p} not found.", f"download {name} from {TEXT_FILES[name]['url']} and pass its path.")
    data = p.read_bytes()
    if verify and git_blob_id(data) != TEXT_FILES[name]["git_blob"]:
        raise DHPError(f"{p} is not upstream's {name} (git blob {git_blob_id(data)[:12]}…, upstream "
                       f"{TEXT_FILES[name]['git_blob'][:12]}…).",
                       f"download it again from {TEXT_FILES[name]['url']}, or pass verify=False for your own copy.")
    return data


def load_hanna_stories(path, verify: bool = True) -> pd.DataFrame:
    """One row per HANNA story (module docstring): system, item, story_id, prompt, story and the mean of the
    annotations per criterion present."""
    data = _read(path, "hanna_stories_annotations.csv", verify)
    try:
        df = pd.read_csv(io.BytesIO(data), dtype={"Story ID": "Int64"}, keep_default_na=False,
                         quoting=csv.QUOTE_MINIMAL)
    except (ValueError, pd.errors.ParserError) as e:
        raise DHPError(f"{path} is not a readable CSV ({e}).", "use the unmodified upstream file.") from None
    missing = [c for c in HANNA_NEEDED if c not in df.columns]
    if missing:
        raise DHPError(f"{path} lacks column(s) {missing}.",
                       f"use upstream's file (columns {list(HANNA_NEEDED)}, ...).")
    sid = df["Story ID"].astype("int64")
    block = sid // N_PROMPTS
    bad = (block >= len(HANNA_SYSTEMS)) | (sid < 0)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        last = len(HANNA_SYSTEMS) * N_PROMPTS - 1
        raise DHPError(f"{path} row {i + 1}: Story ID {sid.iloc[i]} is outside 0..{last}.",
                       "use the unmodified upstream file.")
    expected = np.array(HANNA_SYSTEMS, dtype=object)[block.to_numpy()]
    wrong = df["Model"].astype(str).to_numpy() != expected
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        raise DHPError(f"{path} row {i + 1}: Story ID {sid.iloc[i]} belongs to {expected[i]!r} (ids are grouped by "
                       f"system) but Model says {df['Model'].iloc[i]!r}.", "use the unmodified upstream file.")
    criteria = [c for c in ("Relevance", "Coherence", "Empathy", "Surprise", "Engagement", "Complexity")
                if c in df.columns]
    df = df.assign(story_id=sid, system=df["Model"].astype(str), item=(sid % N_PROMPTS).astype(str))
    agg = {"prompt": ("Prompt", "first"), "story": ("Story", "first"), **{c: (c, "mean") for c in criteria}}
    out = df.groupby(["system", "item", "story_id"], sort=False).agg(**agg).reset_index()
    dup = out.duplicated(["system", "item"])
    if dup.any():
        raise DHPError(f"{path}: two Story IDs for system {out.loc[dup.idxmax(), 'system']!r}, item "
                       f"{out.loc[dup.idxmax(), 'item']}.", "use the unmodified upstream file.")
    return out.sort_values("story_id").reset_index(drop=True)


def check_hanna_join(stories: pd.DataFrame, human: pd.DataFrame, tol: float = 1e-6) -> int:
    """That the stories' annotation means equal item_human.parquet's HANNA scores on (system, item, criterion): the
    join of texts and recorded scores is right. Returns the number of values compared; raises on a mismatch."""
    h = human[human["dataset"] == "hanna"]
    long = stories.melt(id_vars=["system", "item"], value_vars=[c for c in h["criterion"].unique()
                                                                 if c in stories.columns],
                        var_name="criterion", value_name="mean")
    m = long.merge(h, on=["system", "item", "criterion"], how="inner")
    off = (m["mean"] - m["human"]).abs() > tol
    if off.any():
        r = m[off].iloc[0]
        raise DHPError(f"HANNA story {r['system']}/{r['item']}: the annotations' mean {r['criterion']} "
                       f"{r['mean']:.4f} differs from the imported {r['human']:.4f}.",
                       "use upstream's files from the same commit (the stories csv and hanna_metric_scores_llm.csv).")
    return int(len(m))


def load_frank_texts(path, verify: bool = True) -> pd.DataFrame:
    """One row per FRANK summary (module docstring)."""
    data = _read(path, "benchmark_data.json", verify)
    try:
        records = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DHPError(f"{path} is not valid JSON ({e}).", "use the unmodified upstream file.") from None
    if not isinstance(records, list):
        raise DHPError(f"{path} is not a JSON list of records.", "use the unmodified upstream file.")
    rows = []
    for i, r in enumerate(records, start=1):
        if not isinstance(r, dict) or any(not isinstance(r.get(k), str) for k in FRANK_NEEDED):
            raise DHPError(f"{path} record {i} lacks a text field of {list(FRANK_NEEDED)}.",
                           "use the unmodified upstream file.")
        rows.append({"system": r["model_name"], "item": r["hash"], "split": str(r.get("split", "")),
                     "article": r["article"], "summary": r["summary"], "reference": str(r.get("reference", ""))})
    out = pd.DataFrame(rows, columns=["system", "item", "split", "article", "summary", "reference"])
    dup = out.duplicated(["system", "item"])
    if dup.any():
        raise DHPError(f"{path}: summary ({out.loc[dup.idxmax(), 'item']}, {out.loc[dup.idxmax(), 'system']}) is "
                       "listed twice.", "use the unmodified upstream file.")
    return out
