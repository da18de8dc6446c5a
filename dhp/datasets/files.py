"""Where the data files live, their upstream URLs and committed checksums, and safe readers."""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Mapping


from dhp.errors import DHPError
from dhp.io import RESOURCES, file_sha256
from dhp.schema import DATASET_TASK, TASK_METRICS
from dhp.datasets import declared_files
from dhp.extensions import Registry, origin_of, registrar

#: dataset -> its pool reader (the eligible items in file order: item_id, source, reference, ...); found by discovery
#: (dhp.extensions): each loader module of dhp.datasets registers its pool with :func:`dataset_pool`, and the entry-point
#: group ``dhp.datasets``.
POOLS: "Registry" = Registry("dataset", "dhp.datasets",
                             fix="use one of those, or dhp.datasets.load_custom for a file of your own.")


#: The DHP paper's datasets (their tasks in dhp.schema, their files in dhp/resources/data_registry.json, their
#: seed-0 selections in dhp/resources/selections/); taken before any pool registers.
PAPER_DATASETS: tuple[str, ...] = tuple(DATASET_TASK)


@dataclass(frozen=True)
class Fetched:
    """Where a pool's file comes from when it is not already local: its URL and the sha256 (and size, if given)
    that the fetched bytes must have."""

    url: str
    sha256: str
    bytes: int | None = None


def fetched(url: str, sha256: str, bytes: int | None = None) -> Fetched:
    """A pool file fetched on first need from ``url`` and checked against ``sha256`` (``@dataset_pool(files=)``)."""
    if not (isinstance(sha256, str) and len(sha256) == 64 and all(c in "0123456789abcdef" for c in sha256)):
        raise DHPError(f"The sha256 declared for {url} is {sha256!r}, not 64 lowercase hex digits.",
                       "give the file's sha256 (python -c \"import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"
                       "'rb').read()).hexdigest())\" FILE).")
    return Fetched(url, sha256, bytes)


@dataclass(frozen=True)
class Pool:
    """A registered dataset: ``read(files) -> list of item dicts`` (item_id, source, reference, ...: the
    eligible items in file order), its task, its selection rule (said in words; the rule itself is what ``read``
    keeps), and the files it reads (path -> None for a local file, or :class:`Fetched`). The paper's datasets
    declare their files in dhp/resources/data_registry.json instead (``files`` empty)."""

    name: str
    read: Callable
    task: str
    selection: str = ""
    files: Mapping[str, Fetched | None] = field(default_factory=dict)

    def __call__(self, files):
        return self.read(files)


def dataset_pool(name: str, *, task: str | None = None, selection: str = "",
                 files: Iterable[str] | Mapping[str, Fetched | None] | None = None) -> Callable:
    """Register the decorated ``pool(files) -> list of item dicts`` as dataset ``name``, declared in one place:

    ``task``: one of dhp.schema.TASK_METRICS (the paper's datasets have theirs in dhp.schema); ``selection``: the
    eligibility rule in words (the rows ``pool`` returns are the eligible items; ``n_items`` of them are drawn
    with the seeded, prefix-stable rule); ``files``: the files ``pool`` reads, by the key it reads them with — a
    local file (a path under the data root, or an absolute path) as a plain name, a fetched one as
    ``{"path/under/data/root": fetched(url, sha256)}`` (fetched on first need, checked before use). No registry
    entry, schema or selection file is edited for a new pool."""
    paper = name in PAPER_DATASETS
    task = task or (DATASET_TASK[name] if paper else None)
    if task not in TASK_METRICS:
        raise DHPError(f"Dataset pool {name!r} declares task {task!r}.",
                       f"declare @dataset_pool({name!r}, task=...) with one of {sorted(TASK_METRICS)}.")
    declared = dict(files) if isinstance(files, Mapping) else dict.fromkeys(files or ())
    if not paper and not declared:
        raise DHPError(f"Dataset pool {name!r} declares no files.",
                       f"declare files=[\"{name}/items.jsonl\"] (a local file) or files={{path: fetched(url, sha256)}}.")
    for rel, src in declared.items():
        if src is not None and not isinstance(src, Fetched):
            raise DHPError(f"Dataset pool {name!r} declares {rel!r} as {src!r}.",
                           "give None for a local file or dhp.datasets.files.fetched(url, sha256).")

    @registrar
    def deco(fn: Callable) -> Callable:
        POOLS.add(name, Pool(name, fn, task, selection, declared), origin_of(fn))
        if POOLS.registered().get(name, None) is not None and POOLS.registered()[name].read is fn:
            DATASET_TASK.setdefault(name, task)  # every stage reads a dataset's task there
            remote = {rel: src for rel, src in declared.items() if src is not None}
            if remote:
                declared_files.declare(name, {rel: (src.url, src.sha256, src.bytes) for rel, src in remote.items()},
                                 needed_for=f"the dataset pool {name!r} ({fn.__module__})")
        return fn

    return deco


def dataset_names() -> list[str]:
    """Every dataset a run can name: the registered pools (the paper's and yours), in registry order."""
    return list(POOLS)


def pool_of(name: str) -> Pool:
    """The registered pool ``name``; an unknown name is the one error (never another dataset's files)."""
    _check_name(name)
    return POOLS.lookup(name)




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
    declared = getattr(POOLS[name], "files", {})
    if declared:
        return list(declared)
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
    if name in ("wmt22_de_en", "wmt22_zh_en"):
        return _wmt_files("de-en" if name == "wmt22_de_en" else "zh-en")
    raise DHPError(f"Dataset {name!r} declares no files.",
                   f"declare them on its pool: @dataset_pool({name!r}, task=..., files=[...]).")


def upstream_url(relpath: str) -> str:
    """Raw-GitHub URL, at the pinned commit, of a data file (declared in dhp/resources/data_registry.json).

    `summeval/bartscore_summeval.json` comes from BARTScore's `data.pkl` (re-serialised as JSON on fetch).
    Story Cloze has no open URL (request form at cs.rochester.edu/nlp/rocstories).
    """
    f = declared_files.files().get(relpath)
    if f is None or f.url is None or declared_files.sets()[f.set].fetch != "open":
        raise DHPError(
            f"No open upstream URL for {relpath}.",
            f"Story Cloze must be requested from its owners at {STORYCLOZE_FORM}." if f is not None else
            "use a path that `python -m dhp data list` declares.")
    return f.url


def _checksums() -> dict[str, dict]:
    """relative path -> {bytes, sha256} of every declared file (dhp/resources/data_registry.json)."""
    return {rel: {"bytes": f.bytes, "sha256": f.sha256} for rel, f in declared_files.files().items()}


@lru_cache(maxsize=None)
def _committed(name: str) -> dict:
    p = _DATA_DIR / "selections" / f"{name}.json"
    if not p.exists() and name not in PAPER_DATASETS:
        return {}  # a pool of your own: no recorded selection, the seeded rule draws from its pool
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
    own = getattr(POOLS[name], "files", {}) if name not in PAPER_DATASETS else {}
    ok = True
    for rel, p in files.items():
        if not p.is_file():
            raise DHPError(f"Data file for {name!r} not found: {p}.", _how_to_get(name))
        if rel in own and own[rel] is None:
            continue  # a local file of a pool of your own: used as it is, nothing to check it against
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
    own = getattr(POOLS.registered().get(name), "files", {}) if name not in PAPER_DATASETS else {}
    if own and all(src is None for src in own.values()):
        return (f"put the file(s) of the dataset pool {name!r} where it declares them ({', '.join(own)}: a relative "
                "path is under the data root, DHP_DATA_DIR).")
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
    (dhp.datasets.declared_files.data_root)."""
    return declared_files.data_root(data_dir)


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
    if name in POOLS.conflicts():
        POOLS.lookup(name)  # the one clash error
    if name not in POOLS:
        raise DHPError(f"Unknown dataset {name!r}.",
                       f"use one of {dataset_names()}, a file of your own (.csv/.jsonl: dhp.datasets.load_custom), or register a pool with "
                       "@dataset_pool(name, task=..., files=[...]) in a module of dhp/datasets/.")
