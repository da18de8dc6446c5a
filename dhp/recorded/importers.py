"""The registry of recorded-judgment importers and what they share: :func:`importer` registers one in
:data:`IMPORTERS`; :class:`SourceFile` is the file it reads, :class:`ImportContext` the import's options; the
column lists and upsert keys of the run-folder tables it writes. It sits below the importers (dhp.recorded.frank,
hanna, llmbar, mtme, table), which register themselves here, and below :mod:`dhp.recorded`, which imports them
all and runs an import."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from dhp.errors import DHPError
from dhp.extensions import Registry, origin_of, registrar
from dhp.judging.strategies import VERDICT_COLUMNS
from dhp.schema import SCORE_COLUMNS, SCORE_EXTRA_COLUMNS

#: The largest file an importer reads (the biggest upstream file, an LLMBar result.json, is 1.4 MB).
MAX_FILE_BYTES = 64 * 2**20
RECORDED_MODE = "recorded"


#: segment_scores.parquet: judge (metric name), mode, lp (language pair), reference (refA, refB, src, ...:
#: what the metric compared against), system, seg_id (1-based line of the test set, as in
#: dhp.datasets.wmt22_human), score (NaN when unscored), failure (why it is NaN, else ""), source.
SEGMENT_COLUMNS = ["judge", "mode", "lp", "reference", "system", "seg_id", "score", "failure", "source"]

#: segment_human.parquet as an importer brings it (the human_alignment method's table): the MQM score of every
#: system × segment (higher is better), da_z NaN unless the data layer adds the DA scores.
SEGMENT_HUMAN_COLUMNS = ["lp", "system", "seg_id", "mqm", "da_z"]

#: item_scores.parquet: a judge's score of one rated output — dataset (hanna, frank), criterion (the human
#: criterion the score rates; "" for a judge with one score per output, compared with every criterion), subset
#: (FRANK: cnndm or bbc), split (FRANK: test or valid), system, item (HANNA: the prompt, 0..95, the story's
#: position in its system's row; FRANK: the article hash), score, failure (why it is NaN), source.
ITEM_COLUMNS = ["judge", "mode", "dataset", "criterion", "subset", "split", "system", "item", "score", "failure",
                "source"]
#: item_human.parquet: the human score of one rated output on one criterion (HANNA: the mean of 3 raters; FRANK:
#: Factuality, the share of sentences without a factual error).
ITEM_HUMAN_COLUMNS = ["dataset", "criterion", "subset", "split", "system", "item", "human", "source"]


def _score_key() -> list[str]:
    return [c for c in SCORE_COLUMNS if c not in ("score", "n_valid", "n_failed")]


#: run-folder table -> the columns that identify a row (the upsert key).
TABLE_KEYS: dict[str, list[str]] = {
    "pairwise_verdicts.parquet": ["judge", "mode", "subset", "strategy", "item_id", "order"],
    "segment_scores.parquet": ["judge", "mode", "lp", "reference", "system", "seg_id"],
    "scores.parquet": _score_key(),
    "segment_human.parquet": ["lp", "system", "seg_id"],
    "item_scores.parquet": ["judge", "mode", "dataset", "criterion", "system", "item"],
    "item_human.parquet": ["dataset", "criterion", "system", "item"],
}


def verdict_columns() -> list[str]:
    """Columns of an imported pairwise_verdicts table: read at call time, so strategies that add columns to
    VERDICT_COLUMNS are followed."""
    return ["judge", "mode", *VERDICT_COLUMNS, "source"]


def score_columns() -> list[str]:
    return [*SCORE_COLUMNS, *SCORE_EXTRA_COLUMNS, "source"]


@dataclass(frozen=True)
class SourceFile:
    """One file to import: where it is, the path recorded for it (``rel``), its bytes and their sha256."""

    path: Path
    rel: str
    data: bytes
    sha256: str

    @property
    def label(self) -> str:
        return source_label(self.rel, self.sha256)


def source_label(rel: str, sha256: str) -> str:
    """The ``source`` value of a row imported from a file."""
    return f"{rel}#sha256={sha256}"


@dataclass
class ImportContext:
    """What an importer may need besides the file: the run folder and the import's options."""

    run_dir: Path
    dataset: Path | None = None
    scale: tuple[float, float] | None = None
    lp: str | None = None
    data_dir: Path | None = None
    cache: dict = field(default_factory=dict)  # tables an importer loads once per import (dataset ids)
    #: files an importer read besides the ones imported (mtme: the MQM scores beside them): recorded in the manifest
    companions: list = field(default_factory=list)


@dataclass(frozen=True)
class Importer:
    """``read(file: SourceFile, ctx: ImportContext) -> {table name: DataFrame}``; a folder walk picks the
    files whose name ends with one of ``suffixes``; ``relative_path(path, root)`` names a file in ``source``.

    What the source says about itself (no table elsewhere keyed by its name): ``default`` — its declared path under
    the data root (dhp/resources/data_registry.json), what an import reads when no path is given (None: the user
    names the file); ``companions`` — declared data sets fetched with it (mtme: the MQM scores beside the metric
    scores); ``lp`` — the language pair of its default files; ``reference_method`` — the method whose judge-independent
    tables its views need besides the import (mtme: human_alignment's MQM and DA); ``views`` — the leaderboard views
    it feeds, in words; ``feeds`` — the methods whose leaderboard views its judges join (``python -m dhp evaluate``
    imports it when it runs one of them)."""

    name: str
    read: Callable
    suffixes: tuple[str, ...]
    relative_path: Callable
    description: str = ""
    default: str | None = None
    companions: tuple[str, ...] = ()
    lp: str | None = None
    reference_method: str | None = None
    views: str = ""
    feeds: tuple[str, ...] = ()


#: Every recorded-judgment source by name; found by discovery (dhp.extensions): the modules of dhp.recorded and the
#: entry-point group ``dhp.recorded``.
IMPORTERS: "Registry[Importer]" = Registry(
    "recorded source", "dhp.recorded",
    fix="use one of those kinds, or add a module to dhp/recorded/ with @importer(name, suffixes=...).")


def _relative_to_root(path: Path, root: Path) -> str:
    return path.name if path == root else path.relative_to(root).as_posix()


def importer(name: str, *, suffixes: tuple[str, ...], relative_path: Callable | None = None, default: str | None = None,
             companions: tuple[str, ...] = (), lp: str | None = None, reference_method: str | None = None,
             views: str = "", feeds: tuple[str, ...] = ()) -> Callable:
    """Register the decorated ``read(file, ctx)`` as the importer ``name``. ``relative_path(path, root)``:
    the path written into ``source`` (default: relative to the folder imported, or the file's name); the other
    arguments are the source's facts (:class:`Importer`)."""

    @registrar
    def wrap(fn: Callable) -> Callable:
        IMPORTERS.add(name, Importer(name, fn, tuple(suffixes), relative_path or _relative_to_root,
                                     (fn.__doc__ or "").strip(), default, tuple(companions), lp, reference_method,
                                     views, tuple(feeds)), origin_of(fn))
        return fn

    return wrap


def read_source(p: Path, rel: str, max_bytes: int = MAX_FILE_BYTES) -> SourceFile:
    """A file an importer reads, size-checked before reading (as every imported file is), named ``rel`` in
    ``source``."""
    size = p.stat().st_size
    if size > max_bytes:
        raise DHPError(f"{p} is {size:,} bytes, over the {max_bytes:,}-byte limit for one imported file.",
                       "check it is the file you meant.")
    data = p.read_bytes()
    return SourceFile(p, rel, data, hashlib.sha256(data).hexdigest())
