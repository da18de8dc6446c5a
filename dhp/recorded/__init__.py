"""Recorded judgments as a collect source: verdicts and scores that judges gave elsewhere, imported into a
run folder as the same tables the methods read, so a published judge is analysed like a live one.

    python -m dhp import-judgments llmbar --run-dir runs/llmbar     # LLMBar's verdicts, from the data root
    python -m dhp import-judgments mtme --run-dir runs/mt           # the WMT22 zh-en metric scores
    python -m dhp import-judgments table my_scores.csv --run-dir runs/try

One importer per format, registered with :func:`importer` in :mod:`dhp.recorded.importers`, the registry below the
importers (``llmbar`` in :mod:`dhp.recorded.llmbar`, ``mtme`` in :mod:`dhp.recorded.mtme`, ``table`` — bring your
own — in :mod:`dhp.recorded.table`; found by discovery, dhp.extensions: a new source is one module here). Each
declares its own default files, companions, language pair and the views it feeds (:class:`Importer`), and reads
one file at a time and returns rows for one or more of the run-folder tables in :data:`TABLE_KEYS`:

- ``pairwise_verdicts.parquet``: judge, mode, then ``dhp.judging.strategies.VERDICT_COLUMNS``, then source;
- ``segment_scores.parquet``: :data:`SEGMENT_COLUMNS` (one row per metric × reference × system × segment);
- ``scores.parquet``: ``dhp.schema.SCORE_COLUMNS + SCORE_EXTRA_COLUMNS`` and source.

``mode`` is "recorded" unless a bring-your-own file says otherwise; ``source`` is
``<file path>#sha256=<hex>`` (see each importer for how the path is written), "" for rows a live run wrote.

An imported file is data only: it is size-checked (:data:`MAX_FILE_BYTES`) before it is read, then parsed as
JSON, CSV or text — never unpickled or executed. All files are parsed and checked before anything is
written; each table is then upserted by its key (a row with the key of an existing row replaces it) and
written sorted by that key, atomically, so importing the same files again gives the same bytes. Each
imported file is recorded in ``manifest.json`` under the stage ``import_judgments`` (path, sha256, bytes,
rows, and the upstream repository @ commit : path when its sha256 is a known upstream file).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dhp.datasets import declared_files
from dhp.errors import DHPError
from dhp.io import resolve, write_manifest, write_parquet
# the registry and the names importers share, re-exported: dhp.recorded.<name> stays their public name
from dhp.recorded.importers import (IMPORTERS, ITEM_COLUMNS, ITEM_HUMAN_COLUMNS, MAX_FILE_BYTES, RECORDED_MODE,
                                    SEGMENT_COLUMNS, SEGMENT_HUMAN_COLUMNS, TABLE_KEYS, ImportContext, Importer,
                                    SourceFile, importer, read_source, score_columns, source_label, verdict_columns)

__all__ = ["IMPORTERS", "importer", "import_judgments", "ImportReport", "SourceFile", "TABLE_KEYS",
           "SEGMENT_COLUMNS", "SEGMENT_HUMAN_COLUMNS", "ITEM_COLUMNS", "ITEM_HUMAN_COLUMNS",
           "default_path", "MAX_FILE_BYTES", "known_upstream", "RECORDED_MODE", "source_label"]

MANIFEST_STAGE = "import_judgments"


def default_path(kind: str, data_dir: str | os.PathLike | None = None) -> Path:
    """The data-root path of a recorded source (its importer's ``default``: the one place that resolves it), fetched
    with the companion data sets its views need when missing (dhp.datasets.declared_files)."""
    imp = IMPORTERS.lookup(kind)
    if imp.default is None:
        raise DHPError(f"The {kind!r} importer has no default path.", "pass the file or folder to import.")
    declared_files.ensure(list(imp.companions), data_dir)
    return declared_files.path(imp.default, data_dir)


# ---------------------------------------------------------------------------------------------- files

def _files(imp: Importer, path: Path) -> list[Path]:
    if path.is_file():
        if not path.name.endswith(imp.suffixes):
            raise DHPError(f"{path} is not a file the {imp.name!r} importer reads (names ending {list(imp.suffixes)}).",
                           f"pass such a file, or a folder holding them, or use another kind of {sorted(IMPORTERS)}.")
        return [path]
    if path.is_dir():
        found = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(imp.suffixes))
        if not found:
            raise DHPError(f"{path} holds no file the {imp.name!r} importer reads (names ending {list(imp.suffixes)}).",
                           "pass the folder that holds them (searched recursively) or one such file.")
        return found
    raise DHPError(f"Cannot import {path}: no such file or folder.", "check the path (relative paths are "
                   "relative to the current directory).")


def _read_file(imp: Importer, p: Path, root: Path, max_bytes: int) -> SourceFile:
    size = p.stat().st_size
    if size > max_bytes:  # checked before reading: a wrong path must not fill the memory
        raise DHPError(f"{p} is {size:,} bytes, over the {max_bytes:,}-byte limit for one imported file.",
                       "check it is the file you meant; if it is, split it or raise the limit (max_bytes=, "
                       "--max-mb).")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise DHPError(f"Cannot read {p}: {e.strerror or e}.", "check the path and that the file is readable.") from None
    return SourceFile(p, imp.relative_path(p, root), data, hashlib.sha256(data).hexdigest())


def known_upstream(sha256: str) -> str | None:
    """``<repository>@<commit>:<path>`` of a file whose sha256 is a declared upstream file
    (dhp/resources/data_registry.json), else None."""
    f = declared_files.by_sha256(sha256)
    return None if f is None else f.upstream


# ---------------------------------------------------------------------------------------------- tables

def _runs(df: pd.DataFrame, key: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(the stable order sorting ``df`` by ``key``, and for each sorted row but the last whether the next
    row has the same key). Integer codes per column keep this fast on million-row tables."""
    codes = [pd.factorize(df[c], sort=True)[0] for c in key]
    order = np.lexsort(codes[::-1])  # stable: rows with equal keys keep their order
    same_next = np.ones(max(len(df) - 1, 0), dtype=bool)
    for c in codes:
        cs = c[order]
        same_next &= cs[1:] == cs[:-1]
    return order, same_next


def _check_unique(df: pd.DataFrame, key: list[str], table: str) -> None:
    order, same_next = _runs(df, key)
    if same_next.any():
        i = int(np.argmax(same_next))
        rows = df.iloc[order[i:i + 2]]
        where = " and ".join(dict.fromkeys(rows["source"])) if "source" in rows else table
        raise DHPError(f"Two imported rows of {table} have the same key "
                       f"{dict(zip(key, rows.iloc[0][key].tolist()))} (from {where}).",
                       "import each judgment once: remove the duplicate file or row.")


def _typed(df: pd.DataFrame, table: str) -> pd.DataFrame:
    """One dtype per column whatever mix of old and new rows made the table, so the bytes written depend
    on the rows alone."""
    floats = {"pairwise_verdicts.parquet": ("f1", "f2"), "segment_scores.parquet": ("score",),
              "scores.parquet": ("score", "prob_mass"), "segment_human.parquet": ("mqm", "da_z"),
              "item_scores.parquet": ("score",), "item_human.parquet": ("human",)}[table]
    ints = {"segment_scores.parquet": ("seg_id",), "segment_human.parquet": ("seg_id",),
            "scores.parquet": ("n_valid", "n_failed", "prompt_tokens", "completion_tokens")}.get(table, ())
    bools = ("truncated", "fallback") if table == "scores.parquet" else ()
    out = df.copy(deep=False)
    if "source" in out:
        out["source"] = out["source"].fillna("")  # rows a live run wrote have no source file
    for c in out.columns:
        want = "float64" if c in floats else "int64" if c in ints else "bool" if c in bools else None
        if want is not None and out[c].dtype != want:
            out[c] = out[c].astype(want)
        elif want is None and out[c].dtype == object:  # text mixed with None/NaN: text, missing stays NaN
            out[c] = out[c].astype("str")
    return out


def _upsert(run: Path, table: str, new: pd.DataFrame) -> pd.DataFrame:
    """The table ``run/table`` with ``new``'s rows replacing those of the same key, sorted by the key."""
    key = TABLE_KEYS[table]
    path = run / table
    if path.exists():
        old = pd.read_parquet(path)
        missing = [c for c in key if c not in old.columns]
        if missing:
            raise DHPError(f"{path} lacks the key column(s) {missing}, so imported rows cannot be merged into it "
                           "(a live run wrote it without naming its judge).",
                           "import into another run folder (--run-dir), or add the columns to that table first.")
        cols = list(old.columns) + [c for c in new.columns if c not in old.columns]
        both = pd.concat([old.reindex(columns=cols), new.reindex(columns=cols)], ignore_index=True)
    else:
        both = new
    both = _typed(both, table)
    order, same_next = _runs(both, key)
    keep = order[~np.append(same_next, False)]  # of rows with one key the last, i.e. the new one, stays
    if len(keep) == len(both) and (keep == np.arange(len(both))).all():
        return both.reset_index(drop=True)  # already in key order: skip a costly take
    return both.take(keep).reset_index(drop=True)


# ---------------------------------------------------------------------------------------------- parsing, kept rows

#: what an import with ``keep_segments`` keeps of segment_scores.parquet (recorded in the manifest)
KEPT_RULE = ("the rows on the segments (lp, seg_id) the run's own judges scored, and every unscored row; the files "
             "(sha256 above) hold the rest")
SEGMENTS_TABLE = "segment_scores.parquet"


def _parse(imp: Importer, kind: str, files: list[Path], src: Path, ctx: ImportContext, max_bytes: int,
           keep: pd.DataFrame | None = None, sink=None) -> tuple[dict[str, pd.DataFrame], dict, dict] | None:
    """Every file parsed by its importer and checked: ({table: its new rows}, the manifest's file records, {table: rows
    before the cut}). With ``keep`` the segment rows are cut file by file (:func:`_keep_mask`), so the others are never
    held together; ``sink`` (:class:`_StoreWriter`) receives every file's full rows. Key uniqueness of cut rows is
    checked on 64-bit hashes of every row's key; None when two hashes are equal (the caller parses again in full, which
    names the duplicate rows or, on a mere hash collision, goes on)."""
    parts: dict[str, list[pd.DataFrame]] = {}
    hashes: dict[str, list[np.ndarray]] = {}
    totals: dict[str, int] = {}
    records = {}
    for p in files:
        f = _read_file(imp, p, src if src.is_dir() else p, max_bytes)
        produced = imp.read(f, ctx)
        for table, df in produced.items():
            if sink is not None:
                sink.add(table, df)
            if keep is not None and table == SEGMENTS_TABLE:
                hashes.setdefault(table, []).append(
                    pd.util.hash_pandas_object(df[TABLE_KEYS[table]], index=False).to_numpy())
                totals[table] = totals.get(table, 0) + int(len(df))
                df = df[_keep_mask(df["lp"].to_numpy(), df["seg_id"].to_numpy(), df["score"].to_numpy(), keep)]
            parts.setdefault(table, []).append(df)
        records[f"{kind}:{f.rel}"] = {"kind": kind, "path": str(p), "sha256": f.sha256, "bytes": len(f.data),
                                      "rows": {t: int(len(df)) for t, df in produced.items()},
                                      "upstream": known_upstream(f.sha256)}
    for f, rows in ctx.companions:
        records[f"{kind}:{f.rel}"] = {"kind": kind, "path": str(f.path), "sha256": f.sha256, "bytes": len(f.data),
                                      "rows": rows, "upstream": known_upstream(f.sha256), "companion": True}
    news = {}
    for table, dfs in parts.items():
        new = pd.concat(dfs, ignore_index=True) if len(dfs) > 1 else dfs[0].reset_index(drop=True)
        if table in hashes:
            h = np.concatenate(hashes[table])
            if len(np.unique(h)) != len(h):
                return None
        else:
            _check_unique(new, TABLE_KEYS[table], table)
        news[table] = new
    return news, records, totals


def _keep_mask(lp: np.ndarray, seg_id: np.ndarray, score: np.ndarray, keep: pd.DataFrame) -> np.ndarray:
    """Rows on a kept (lp, seg_id), or unscored (NaN): an unscored row decides which view its judge stands in
    (dhp.methods.human_alignment: a recorded judge with unscored outputs has a view of its own)."""
    wanted = pd.MultiIndex.from_frame(keep[["lp", "seg_id"]].astype({"lp": str, "seg_id": "int64"}))
    on = pd.MultiIndex.from_arrays([pd.Index(lp).astype(str), pd.Index(seg_id).astype("int64")]).isin(wanted)
    return np.asarray(on) | ~np.isfinite(np.asarray(score, dtype=float))


@functools.lru_cache(maxsize=None)
def _code_digest(module_file: str) -> str:
    """sha256 of the code that turns files into rows: dhp/recorded's modules and the importer's own module (a plug-in
    importer lives elsewhere)."""
    files = sorted(Path(__file__).parent.glob("*.py")) + [Path(module_file)]
    h = hashlib.sha256(f"v{PARSED_STORE_VERSION}".encode())
    for f in files:
        h.update(f.name.encode() + b"\0" + (f.read_bytes() if f.is_file() else b"") + b"\0")
    return h.hexdigest()


#: raised when the stored form of parsed rows changes (the code digest covers the importers' source)
PARSED_STORE_VERSION = 1


class ParsedStore:
    """The parsed, checked rows of a registered source's files, per input version: ``<folder>/<key>/`` holds one
    parquet file per table and ``records.json`` (the manifest's file records), written into a temporary folder and
    renamed into place, so a key is present only when complete. The key: sha256 of the source's name, its options
    (lp, data_dir) and every imported file's path and sha256, and of the importers' code (:func:`_code_digest`). A
    companion file (found while parsing, e.g. the MQM scores) is checked against its recorded sha256 when the rows are
    reused: a changed one counts as absent. Reading keeps only the rows ``keep_segments`` asks for, without
    materialising the others (pyarrow reads the columns, the mask picks rows, then the text columns are decoded)."""

    def __init__(self, folder):
        self.folder = Path(folder)

    def key(self, imp: Importer, files: list[Path], src: Path, ctx: ImportContext, max_bytes: int) -> str:
        h = hashlib.sha256()
        module = sys.modules.get(imp.read.__module__)
        h.update(_code_digest(str(getattr(module, "__file__", "") or "")).encode())
        h.update(repr((imp.name, ctx.lp, str(ctx.data_dir or ""), str(src))).encode())
        for p in files:
            f = _read_file(imp, p, src if src.is_dir() else p, max_bytes)
            h.update(f"{f.rel}\0{f.sha256}\0".encode())
        return h.hexdigest()

    def get(self, key: str, keep: pd.DataFrame | None):
        """(file records, {table: rows kept}, {table: rows before the cut}) or None when absent or stale."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        folder = self.folder / key
        if not (folder / "records.json").is_file():
            return None
        try:
            records = json.loads((folder / "records.json").read_text(encoding="utf-8"))
            for r in records.values():
                if r.get("companion") and hashlib.sha256(Path(r["path"]).read_bytes()).hexdigest() != r["sha256"]:
                    return None
            news, totals = {}, {}
            for path in sorted(folder.glob("*.parquet")):
                if keep is not None and path.name == SEGMENTS_TABLE:
                    pf = pq.ParquetFile(path)
                    strings = [f.name for f in pf.schema_arrow if str(f.type) in ("string", "large_string")]
                    pf = pq.ParquetFile(path, read_dictionary=strings)  # text dictionary-coded until cut
                    kept, total = [], 0
                    for i in range(pf.num_row_groups):  # one stored file's rows at a time (_StoreWriter)
                        part = pf.read_row_group(i)
                        total += part.num_rows
                        kept.append(part.filter(_keep_mask(
                            part["lp"].to_numpy(zero_copy_only=False), part["seg_id"].to_numpy(),
                            part["score"].to_numpy(zero_copy_only=False), keep)))
                    table = pa.concat_tables(kept, promote_options="permissive") if kept else pf.schema_arrow.empty_table()
                    table = table.from_arrays([pa.chunked_array([ch.dictionary_decode() for ch in col.chunks],
                                                                type=col.type.value_type)
                                               if pa.types.is_dictionary(col.type) else col
                                               for col in table.columns], names=table.column_names)
                    news[path.name] = table.to_pandas()
                    totals[path.name] = total
                else:
                    news[path.name] = pd.read_parquet(path)
        except (OSError, ValueError, KeyError) as e:  # unreadable: parsed again (and stored again)
            print(f"[import] stored rows {folder} unreadable ({e}); parsing the files", file=sys.stderr)
            return None
        return records, news, totals

    def writer(self, key: str) -> "_StoreWriter | None":
        """A writer that stores the rows of ``key`` as they are parsed (None when they are stored already or the
        folder cannot be written)."""
        if (self.folder / key / "records.json").is_file():
            return None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            return _StoreWriter(self.folder / key, Path(tempfile.mkdtemp(prefix=f".{key}.", dir=self.folder)))
        except OSError as e:  # a read-only or full cache: the import goes on, only the rows are not kept
            print(f"[import] could not store the parsed rows in {self.folder}: {e}", file=sys.stderr)
            return None


class _StoreWriter:
    """Each file's rows appended to one parquet file per table in a temporary folder (only one file's rows in memory
    at a time), renamed into place by :meth:`commit`. A part whose columns do not fit the first one's types, or a
    write error, gives up storing (the import goes on)."""

    def __init__(self, final: Path, tmp: Path):
        self.final, self.tmp, self.writers, self.broken = final, tmp, {}, False

    def add(self, table: str, df: pd.DataFrame) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.broken:
            return
        try:
            t = pa.Table.from_pandas(df, preserve_index=False)
            w = self.writers.get(table)
            if w is None:
                w = self.writers[table] = pq.ParquetWriter(self.tmp / table, t.schema)
            elif not t.schema.equals(w.schema, check_metadata=False):
                t = t.cast(w.schema)
            w.write_table(t)
        except (pa.ArrowException, OSError, ValueError, TypeError) as e:
            print(f"[import] not storing the parsed rows ({e})", file=sys.stderr)
            self.broken = True

    def commit(self, records: dict) -> None:
        try:
            for w in self.writers.values():
                w.close()
            if not self.broken:
                (self.tmp / "records.json").write_text(json.dumps(records), encoding="utf-8")
                os.replace(self.tmp, self.final)
        except OSError as e:
            print(f"[import] could not store the parsed rows in {self.final.parent}: {e}", file=sys.stderr)
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def abort(self) -> None:
        for w in self.writers.values():
            try:
                w.close()
            except Exception:  # noqa: BLE001 - closing a half-written temporary file: it is removed next
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- import

@dataclass
class ImportReport:
    """What one import did: the files read (path, sha256, bytes, rows, upstream), rows per table (new
    rows of this import / rows in the table after it) and the seconds it took."""

    kind: str
    run_dir: Path
    files: list[dict]
    rows: dict[str, int]
    table_rows: dict[str, int]
    seconds: float

    def describe(self) -> str:
        tables = ", ".join(f"{t}: {n:,} rows imported ({self.table_rows[t]:,} in the table)" for t, n in self.rows.items())
        return (f"imported {len(self.files)} {self.kind} file(s) into {self.run_dir} in {self.seconds:.1f} s — "
                f"{tables}")


def import_judgments(kind: str, path: str | os.PathLike | None, run_dir: str | os.PathLike, *,
                     dataset: str | os.PathLike | None = None, scale: tuple[float, float] | None = None,
                     lp: str | None = None, data_dir: str | os.PathLike | None = None,
                     max_bytes: int = MAX_FILE_BYTES, keep_segments: pd.DataFrame | None = None,
                     store: str | os.PathLike | None = None) -> ImportReport:
    """Import recorded judgments of ``kind`` (a registered importer: "llmbar", "mtme", "table") from
    ``path`` (a file, or a folder searched recursively; None: the source's place under the data root,
    :func:`default_path`) into ``run_dir``.

    Options: ``dataset`` — the dataset table the ``table`` importer checks item ids against (.parquet, or a
    CSV/JSONL file as dhp.datasets.load_custom / dhp.datasets.llmbar.load_pairwise read; default: the run's
    dataset.parquet, and for pairwise rows LLMBar); ``scale`` — (low, high) of bring-your-own pointwise
    scores (default dhp.judging.parsing.SCALE, 1–5); ``lp`` — language pair of mt-metrics-eval files
    (default: read from the folder names, e.g. "zh-en"); ``data_dir`` — where LLMBar is read from for the id
    check; ``max_bytes`` — the size limit of one file; ``keep_segments`` — (lp, seg_id) rows: of the imported
    segment_scores rows only those on these segments are kept, and every unscored one (so a judge that left an
    output unscored is still known as one; the manifest says how many rows were kept of how many, the files' sha256
    and rows stay recorded in full); ``store`` — a folder where the parsed rows of a registered source are kept per
    input version (:class:`ParsedStore`: keyed by the files' sha256 and the importers' code), so a later import of
    the same files reads them instead of parsing the files again. Raises DHPError, writing nothing, on any problem."""
    t0 = time.perf_counter()
    imp = IMPORTERS.lookup(kind)
    if path is None:
        path = default_path(kind, data_dir)
    src = Path(os.path.abspath(Path(path).expanduser()))  # ".." removed: folder names carry meaning here
    run = resolve(run_dir)
    ctx = ImportContext(run, Path(dataset).expanduser() if dataset else None,
                        tuple(float(x) for x in scale) if scale is not None else None, lp,
                        Path(data_dir) if data_dir else None)
    files = _files(imp, src)
    parsed = ParsedStore(store) if store is not None and kind != "table" and imp.default is not None else None
    key = None if parsed is None else parsed.key(imp, files, src, ctx, max_bytes)
    hit = None if key is None else parsed.get(key, keep_segments)
    if hit is not None:
        records, news, totals = hit
    else:
        sink = None if key is None else parsed.writer(key)
        try:
            got = _parse(imp, kind, files, src, ctx, max_bytes, keep_segments, sink)
            if got is None:  # two cut rows' key hashes equal: parse in full, where the check names the rows
                ctx.cache.clear()
                ctx.companions.clear()
                news, records, _ = _parse(imp, kind, files, src, ctx, max_bytes)
                seg = news.get(SEGMENTS_TABLE)
                totals = {} if seg is None else {SEGMENTS_TABLE: int(len(seg))}
                if seg is not None and keep_segments is not None:
                    news[SEGMENTS_TABLE] = seg[_keep_mask(seg["lp"].to_numpy(), seg["seg_id"].to_numpy(),
                                                          seg["score"].to_numpy(), keep_segments)].reset_index(drop=True)
                else:
                    totals = {}
            else:
                news, records, totals = got
        except BaseException:
            if sink is not None:
                sink.abort()
            raise
        if sink is not None:
            sink.commit(records)
    new_rows, merged = {}, {}
    for table, new in news.items():
        new_rows[table] = int(len(new))
        merged[table] = _upsert(run, table, new)
    # everything parsed and checked: only now is anything written (each write atomic)
    for table, df in merged.items():
        write_parquet(df, run / table)
    manifest = run / "manifest.json"
    previous, stage = {}, {}
    if manifest.exists():
        stage = json.loads(manifest.read_text(encoding="utf-8")).get("stages", {}).get(MANIFEST_STAGE, {})
        previous = stage.get("parameters", {}).get("files", {})
    params = {"files": {**previous, **records}}
    if totals:  # the run folder holds part of the files' rows: the manifest says which
        kept = dict(stage.get("parameters", {}).get("kept", {})) if previous else {}
        kept[kind] = {t: {"rows": new_rows[t], "of": totals[t], "rule": KEPT_RULE} for t in totals}
        params["kept"] = kept
    elif {k: v for k, v in stage.get("parameters", {}).get("kept", {}).items() if k != kind}:
        # this source's rows are now all in the folder; another source's may still be cut
        params["kept"] = {k: v for k, v in stage["parameters"]["kept"].items() if k != kind}
    write_manifest(run, MANIFEST_STAGE, params)
    return ImportReport(kind, run, list(records.values()), new_rows, {t: int(len(d)) for t, d in merged.items()},
                        time.perf_counter() - t0)

