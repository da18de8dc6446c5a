"""Where the data files live, their upstream URLs and committed checksums, and safe readers."""

from __future__ import annotations

import json
import os
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Iterable


from dhp.errors import DHPError
from dhp.io import RESOURCES, file_sha256
from dhp.schema import DATASET_TASK
from dhp.datasets import registry
from dhp.registry import Registry

#: dataset -> its pool reader (the eligible items in file order: item_id, source, reference, ...); found by discovery
#: (dhp.registry): each loader module of dhp.datasets registers its pool with :func:`dataset_pool`, and the entry-point
#: group ``dhp.datasets``.
POOLS: "Registry" = Registry("dataset", "dhp.datasets",
                             fix="use one of those, or dhp.datasets.load_custom for a file of your own.")


def dataset_pool(name: str):
    """Register the decorated ``pool(files) -> list of item dicts`` as dataset ``name``'s pool reader."""
    return POOLS.decorator(name)




COLUMNS = (
    "dataset", "task", "item_id", "source", "reference", "question", "wrong_ending",
    "src_lang", "tgt_lang",
)
DATASETS = tuple(DATASET_TASK)
SELECTION_SIZE = 100  # items per dataset in the paper

STORYCLOZE_REL = "storycloze/cloze_test_val__spring2016.csv"
STORYCLOZE_FORM = "https://cs.rochester.edu/nlp/rocstories/"
AE_FILES = ("answer_equivalence/ae_dev.jsonl", "answer_equivalence/ae_test.jsonl")
AE_HOME = "https://github.com/google-research-datasets/answer-equivalence-dataset"
SUMPUBMED_POOL = range(1, 501)  # article numbers 1..500: the copy CI and the selection use
AE_MIN_CHARS = 150  # paper, Appendix A.3: reference answers longer than 150 characters
PUBMEDQA_MIN_CHARS = 150  # same rule for the PubMedQA-L stand-in
WMT_MIN_CHARS = 300  # paper, Appendix A.4: reference translations longer than 300 characters

# Paper Table 2 ("Avg NLTK statistics" of the selected references): characters, words, sentences.
PAPER_TABLE2: dict[str, tuple[float, float, float]] = {
    "summeval": (340.4, 58.3, 4.0),
    "sumpubmed": (803.5, 114.9, 5.5),
    "storycloze": (38.7, 7.4, 1.0),
    "answer_equivalence": (156.2, 23.9, 1.0),
    "wmt22_de_en": (436.8, 71.0, 3.8),
    "wmt22_zh_en": (434.1, 66.4, 1.1),
}
# PubMedQA-L stands in for Answer Equivalence (same task, same >150-character rule).
PAPER_COUNTERPART = {name: name for name in PAPER_TABLE2} | {"pubmedqa": "answer_equivalence"}

_DATA_DIR = RESOURCES


class DataChecksumWarning(UserWarning):
    """A data file differs from the version the committed selections were made on."""


# --------------------------------------------------------------------------------------------
# Files, upstream URLs, checksums
# --------------------------------------------------------------------------------------------

def _wmt_files(pair: str) -> list[str]:
    src = pair.split("-")[0]
    return [
        f"wmt22/txt/generaltest2022.{pair}.src.{src}",
        f"wmt22/txt/generaltest2022.{pair}.ref.A.en",
        f"wmt22/docids/test.{pair}.docids",
    ]


def _sumpubmed_files(numbers: Iterable[int]) -> list[str]:
    out = []
    for n in numbers:
        out += [f"sumpubmed/text/text_{n}.txt", f"sumpubmed/abstract/abstract_{n}.txt"]
    return out


def dataset_files(name: str, sumpubmed: str = "all") -> list[str]:
    """Relative paths (under the data root) of the files a dataset's loader reads.

    For sumpubmed, `sumpubmed="selection"` lists only the 200 files of the committed seed-0
    selection, `"all"` the 1,000 files of the pool (articles 1..500).
    """
    _check_name(name)
    if name == "summeval":
        return ["summeval/summac_summeval.json", "summeval/bartscore_summeval.json"]
    if name == "sumpubmed":
        if sumpubmed == "selection":
            return _sumpubmed_files(int(i) for i in _committed("sumpubmed")["item_ids"])
        if sumpubmed != "all":
            raise DHPError(f"Unknown sumpubmed={sumpubmed!r}.", "use 'selection' or 'all'.")
        return _sumpubmed_files(SUMPUBMED_POOL)
    if name == "storycloze":
        return [STORYCLOZE_REL]
    if name == "answer_equivalence":
        return list(AE_FILES)
    if name == "pubmedqa":
        return ["pubmedqa/ori_pqal.json"]
    return _wmt_files("de-en" if name == "wmt22_de_en" else "zh-en")


def upstream_url(relpath: str) -> str:
    """Raw-GitHub URL, at the pinned commit, of a data file (declared in dhp/resources/data_registry.json).

    `summeval/bartscore_summeval.json` comes from BARTScore's `data.pkl` (re-serialised as JSON on fetch).
    Story Cloze has no open URL (request form at cs.rochester.edu/nlp/rocstories).
    """
    f = registry.files().get(relpath)
    if f is None or f.url is None or registry.sets()[f.set].fetch != "open":
        raise DHPError(
            f"No open upstream URL for {relpath}.",
            f"Story Cloze must be requested from its owners at {STORYCLOZE_FORM}." if f is not None else
            "use a path that `python -m dhp data list` declares.")
    return f.url


def _checksums() -> dict[str, dict]:
    """relative path -> {bytes, sha256} of every declared file (dhp/resources/data_registry.json)."""
    return {rel: {"bytes": f.bytes, "sha256": f.sha256} for rel, f in registry.files().items()}


@lru_cache(maxsize=None)
def _committed(name: str) -> dict:
    p = _DATA_DIR / "selections" / f"{name}.json"
    if not p.exists():
        raise DHPError(f"Selection record {p} is missing.", "restore dhp/resources/selections/ from git.")
    return json.loads(p.read_text(encoding="utf-8"))


def _sha256(path: Path) -> str:
    return file_sha256(path)


def _check_files(files: dict[str, Path], name: str, verify: bool) -> bool:
    """Check each file exists and matches dhp/resources/data_registry.json; True if all match.

    Missing file -> DHPError. Mismatch -> DHPError when verify, else a DataChecksumWarning.
    A user's Answer Equivalence file may have any name: it must match one official AE file.
    """
    declared = _checksums()
    ok = True
    for rel, p in files.items():
        if not p.is_file():
            raise DHPError(f"Data file for {name!r} not found: {p}.", _how_to_get(name))
        actual = _sha256(p)
        if name == "answer_equivalence":
            allowed = {declared[r]["sha256"]: r for r in AE_FILES}
            if actual in allowed and p.stat().st_size == declared[allowed[actual]]["bytes"]:
                continue
            expected = "; ".join(f"{Path(r).name}: {declared[r]['bytes']:,} bytes, sha256 "
                                 f"{declared[r]['sha256']}" for r in AE_FILES)
            problem = (f"{p} ({p.stat().st_size:,} bytes, sha256 {actual}) is not an official "
                       f"Answer Equivalence file ({expected}).")
        else:
            want = declared.get(rel, {})
            if want.get("sha256") == actual:
                continue
            problem = (f"{p} (for {name!r}) has sha256 {actual[:12]}…, but dhp/resources/data_registry.json "
                       f"expects {str(want.get('sha256'))[:12]}… (the version the committed "
                       "selection was made on).")
        ok = False
        if verify:
            raise DHPError(
                problem,
                f"{_how_to_get(name)} To use your copy anyway, pass verify=False: items are then "
                "selected from your file and may differ from the paper-rule selection recorded "
                "in dhp/resources/selections/.",
            )
        warnings.warn(problem + " Using it anyway (verify=False).", DataChecksumWarning, stacklevel=3)
    return ok


def _how_to_get(name: str) -> str:
    if name == "storycloze":
        return (
            f"request the Story Cloze Test (spring 2016 validation set) at {STORYCLOZE_FORM}, then "
            "pass path='/path/to/cloze_test_val__spring2016.csv' or set DHP_STORYCLOZE_PATH."
        )
    if name == "answer_equivalence":
        return (
            "run `python -m dhp data fetch answer_equivalence` (into the data root's answer_equivalence/), or "
            f"download ae_dev.jsonl / ae_test.jsonl from {AE_HOME} (folder v1/) and pass path= (file or "
            "folder) or set DHP_AE_PATH."
        )
    return (
        f"run `python -m dhp data fetch {name}` (or set DHP_DATA_DIR / data_dir= to a folder that holds its "
        "files); docs/data.md lists the upstream URLs."
    )


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """Folder holding the dataset files: `data_dir` -> env DHP_DATA_DIR -> the per-user cache
    (dhp.datasets.registry.data_root)."""
    return registry.data_root(data_dir)


def _user_files(name: str, path, data_dir) -> dict[str, Path]:
    """Map the logical file names of Story Cloze / Answer Equivalence to the user's copy."""
    if name == "storycloze":
        given = path or os.environ.get("DHP_STORYCLOZE_PATH")
        if not given:
            raise DHPError("Story Cloze is not openly licensed, so it is never downloaded.",
                           _how_to_get(name))
        p = Path(given).expanduser()
        if p.is_dir():
            p = p / Path(STORYCLOZE_REL).name
        return {STORYCLOZE_REL: p}
    # answer_equivalence
    given = path or os.environ.get("DHP_AE_PATH")
    if given:
        p = Path(given).expanduser()
        if p.is_file():
            return {f"answer_equivalence/{p.name}": p}
        if not p.exists():
            raise DHPError(f"Answer Equivalence path {p} does not exist.", _how_to_get(name))
        folder = p
    else:
        folder = data_root(data_dir) / "answer_equivalence"
    found = {rel: folder / Path(rel).name for rel in AE_FILES if (folder / Path(rel).name).is_file()}
    if not found:
        raise DHPError(f"No ae_dev.jsonl or ae_test.jsonl found in {folder}.", _how_to_get(name))
    return found



def _read_text(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DHPError(f"{p} is not valid UTF-8 ({e.reason} at byte {e.start}).",
                       "re-download the file; it is corrupted.") from None


def _read_json(p: Path):
    try:
        return json.loads(_read_text(p))
    except json.JSONDecodeError as e:
        raise DHPError(f"{p} is not valid JSON (line {e.lineno}: {e.msg}).",
                       "re-download the file; it is truncated or corrupted.") from None

def _lines(p: Path) -> list[str]:
    # split on "\n" only: str.splitlines would also split on U+2028 etc. inside a segment
    text = _read_text(p)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln.rstrip("\r") for ln in lines]

def _check_name(name: str) -> None:
    if name not in DATASET_TASK:
        raise DHPError(f"Unknown dataset {name!r}.",
                       f"use one of {list(DATASETS)}, or dhp.datasets.load_custom for your own file.")
