"""Paths and atomic table writes: a crash never leaves a half-written table behind."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from importlib import metadata
from pathlib import Path

import pandas as pd

from dhp.errors import DHPError


def project_root() -> Path:
    """The repository root (the folder holding pyproject.toml), whatever the current directory."""
    here = Path(__file__).resolve().parent.parent
    if (here / "pyproject.toml").exists():
        return here
    return Path.cwd()


RESOURCES = Path(__file__).resolve().parent / "resources"


def resource(name: str) -> Path:
    """A file shipped inside the package (dhp/resources/): expert weights, checksums, selections, prices.
    Package data, so a non-editable install finds it too."""
    return RESOURCES / name


def resolve(path: str | os.PathLike) -> Path:
    """Resolve a relative path against the project root, so notebooks run from any cwd agree."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else project_root() / p


def from_cwd(path: str | os.PathLike) -> str:
    """A path typed on a command line, made absolute against the user's current directory (``dhp run --run-dir
    runs/mine`` run in ~/work writes ~/work/runs/mine, as any command-line tool would). Library calls and notebooks
    keep :func:`resolve`'s project-root rule; an absolute path is returned as it is."""
    return os.path.abspath(Path(path).expanduser())


def _atomic(path: Path, write) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; an output should be readable like any other file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_parquet(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write a table as parquet atomically (temp file + rename), without the pandas index."""
    return _atomic(resolve(path), lambda t: df.to_parquet(t, index=False))


def write_csv(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write a table as CSV atomically, without the pandas index, with a stable float format."""
    return _atomic(resolve(path), lambda t: df.to_csv(t, index=False, float_format="%.10g"))


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write a UTF-8 text file atomically."""
    return _atomic(resolve(path), lambda t: Path(t).write_text(text, encoding="utf-8"))


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write a binary file atomically."""
    return _atomic(resolve(path), lambda t: Path(t).write_bytes(data))


def slug(name: str) -> str:
    """A file- and folder-safe version of a judge spec or label ('openai:gpt-4o@http://h:1/v1' ->
    'openai_gpt-4o_http_h_1_v1'): the grid's point folders and the report card's page names."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def jsonl_lines(text: str):
    """(1-based line number, line) for each non-blank line of a JSONL text."""
    # split on "\n" only: str.splitlines would also cut at U+2028 and the like, which a JSON string
    # may hold raw (json.dumps(..., ensure_ascii=False) writes them so)
    for no, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            yield no, line


def read_table(path: str | os.PathLike, what: str, producer: str) -> pd.DataFrame:
    """Read a parquet/CSV table a previous stage wrote, or say which stage to run first."""
    p = resolve(path)
    if not p.exists():
        raise DHPError(f"{what} not found at {p}.", f"run {producer} first with the same run_dir.")
    return pd.read_parquet(p) if p.suffix == ".parquet" else pd.read_csv(p)


#: Packages whose versions can change a run's numbers; recorded in every manifest.
MANIFEST_PACKAGES = ("dhp", "numpy", "pandas", "scipy", "llama_cpp_python", "openai", "typo", "spacy",
                     "scikit-learn", "vllm")


_SHA256: dict[tuple[str, int, int], str] = {}


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file, computed once per (path, size, mtime) in this process (model files are large)."""
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key not in _SHA256:
        h = hashlib.sha256()
        with open(p, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
        _SHA256[key] = h.hexdigest()
    return _SHA256[key]


def write_manifest(run_dir: str | os.PathLike, stage: str, parameters: dict, backends=(), inputs=(),
                   extra: dict | None = None) -> Path:
    """Record one stage of a run in ``<run_dir>/manifest.json`` (atomically; other stages' entries kept).

    Schema: {"stages": {stage: {"parameters": {...}, "backends": [cache identities],
    "inputs": {path: sha256}, "packages": {name: version}}}}. ``parameters`` must be JSON-serialisable
    (paths become strings); ``backends`` are :class:`dhp.backends.Backend` objects (their
    ``cache_identity()`` never holds a secret); ``inputs`` are files the stage read; ``extra``: more keys of the
    stage's entry (dhp.methods.run_stage: the code version, start and end times, the files written).
    """
    path = resolve(run_dir) / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"stages": {}}
    versions = {}
    for name in MANIFEST_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    manifest["stages"][stage] = {
        "parameters": json.loads(json.dumps(parameters, default=str)),
        "backends": [b.cache_identity() if hasattr(b, "cache_identity") else {"backend": str(b)} for b in backends],
        "inputs": {str(p): file_sha256(p) for p in inputs if Path(p).is_file()},
        "packages": versions,
        **json.loads(json.dumps(extra or {}, default=str)),
    }
    return write_text(path, json.dumps(manifest, indent=1, sort_keys=True))
