"""Paths and atomic table writes: a crash never leaves a half-written table behind."""

from __future__ import annotations

import codecs
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


# ---------------------------------------------------------------------------------------------- CSV cells
# A CSV is opened in spreadsheets, where a cell starting with = + - @ (or a tab / carriage return, OWASP's list) is
# read as a formula: a dataset name or model id of a user's file (=HYPERLINK(...)) would run as one. The rule, one
# place for every CSV the project writes (write_csv, csv_text) and reads back (read_csv):
# - a TEXT cell (or column name) that starts with one of those characters after any number of apostrophes gets one
#   apostrophe in front ("=1+1" -> "'=1+1", "'=x" -> "''=x"); a spreadsheet shows the apostrophe-led cell as text;
# - numbers are never touched (a float column's -0.5 stays -0.5), nor is a text cell that is a plain decimal number
#   ("-0.5" as text: a spreadsheet reads it as that number, not a formula);
# - read_csv removes exactly one leading apostrophe from a text cell that matches the same pattern, so every value
#   written reads back as it was (the apostrophes before the dangerous character are counted, so "'=x" survives).
_FORMULA = re.compile(r"'*[=+\-@\t\r]")
_WRITTEN = re.compile(r"'+[=+\-@\t\r]")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def neutralise_cell(value):
    """``value`` as written into a CSV: a text cell a spreadsheet would read as a formula gets a leading
    apostrophe (module comment above); anything else is returned unchanged."""
    if isinstance(value, str) and _FORMULA.match(value) and not _PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value


def restore_cell(value):
    """The inverse of :func:`neutralise_cell` for a cell read back from a CSV the project wrote."""
    if isinstance(value, str) and _WRITTEN.match(value):
        return value[1:]
    return value


def _map_text(df: pd.DataFrame, fn) -> pd.DataFrame:
    """``fn`` applied to every text cell and column name (numbers, booleans, dates untouched); a copy when changed."""
    out = None
    for i, col in enumerate(df.columns):
        s = df.iloc[:, i]
        if isinstance(s.dtype, pd.CategoricalDtype):
            s = s.astype(object)
        if not (pd.api.types.is_object_dtype(s.dtype) or pd.api.types.is_string_dtype(s.dtype)):
            continue
        if all(fn(v) is v for v in s):  # fn returns the very object it was given when it changes nothing
            continue
        mapped = s.map(fn, na_action="ignore")
        out = df.copy() if out is None else out
        out.isetitem(i, mapped if pd.api.types.is_object_dtype(s.dtype) else mapped.astype(s.dtype))
    names = [fn(c) for c in df.columns]
    if names != list(df.columns):
        out = df.copy() if out is None else out
        out.columns = names
    return df if out is None else out


def neutralise(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every text cell and column name a spreadsheet would run as a formula neutralised."""
    return _map_text(df, neutralise_cell)


def restore(df: pd.DataFrame) -> pd.DataFrame:
    """A table read from a CSV the project wrote, with :func:`neutralise`'s apostrophes removed."""
    return _map_text(df, restore_cell)


def csv_text(df: pd.DataFrame) -> str:
    """``df`` as CSV text (no index, stable float format), its text cells neutralised."""
    return neutralise(df).to_csv(index=False, float_format="%.10g")


def write_csv(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write a table as CSV atomically, without the pandas index, with a stable float format; text cells that a
    spreadsheet would read as formulas are neutralised (see :func:`neutralise`)."""
    safe = neutralise(df)
    return _atomic(resolve(path), lambda t: safe.to_csv(t, index=False, float_format="%.10g"))


def read_csv(path, **kwargs) -> pd.DataFrame:
    """``pd.read_csv`` of a CSV the project wrote, with :func:`write_csv`'s neutralising undone."""
    return restore(pd.read_csv(path, **kwargs))


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write a UTF-8 text file atomically."""
    return _atomic(resolve(path), lambda t: Path(t).write_text(text, encoding="utf-8"))


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write a binary file atomically."""
    return _atomic(resolve(path), lambda t: Path(t).write_bytes(data))


#: Longest slug: with a prefix ("report_card_") and a suffix (".png") a file name stays far below 255 bytes.
SLUG_MAX = 120


def slug(name) -> str:
    """The one way a name (a judge spec, a dataset name of a user's file, a label) becomes part of a file or folder
    name ('openai:gpt-4o@http://h:1/v1' -> 'openai_gpt-4o_http_h_1_v1'): every run of characters other than
    letters, digits, '.', '_', '-' becomes '_' (so no '/', '..' path or NUL survives), a leading '.' becomes '_' (no
    hidden file), an empty name is '_', and a name longer than SLUG_MAX keeps its first 100 characters plus a hash
    of the whole name. A slug's slug is itself."""
    text = str(name)
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", text)
    if s.startswith("."):
        s = "_" + s[1:]
    if len(s) > SLUG_MAX:
        s = f"{s[:100]}-{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"
    return s or "_"


# ------------------------------------------------------------------------------------- a user's text files

#: Byte-order marks of the encodings a spreadsheet or editor saves instead of UTF-8 (UTF-32 first: its little-endian
#: mark starts with UTF-16's).
_BOMS = ((b"\x00\x00\xfe\xff", "UTF-32 BE", "UTF-32"), (b"\xff\xfe\x00\x00", "UTF-32 LE", "UTF-32"),
         (b"\xfe\xff", "UTF-16 BE", "UTF-16"), (b"\xff\xfe", "UTF-16 LE", "UTF-16"))
_ICONV = {"iso8859-1": "ISO-8859-1", "latin-1": "ISO-8859-1", "utf-16": "UTF-16", "utf-16-le": "UTF-16LE",
          "utf-16-be": "UTF-16BE", "utf-32": "UTF-32"}


def _utf16_without_bom(raw: bytes) -> str | None:
    """"UTF-16 LE"/"UTF-16 BE" when the first bytes look like UTF-16 text without a byte-order mark (ASCII-range
    text: every other byte NUL), else None."""
    head = raw[:4096]
    half = len(head) // 2
    if half < 2:
        return None
    odd, even = head[1::2].count(0), head[0::2].count(0)
    if odd >= 0.4 * half and even <= 0.05 * half:
        return "UTF-16 LE"
    if even >= 0.4 * half and odd <= 0.05 * half:
        return "UTF-16 BE"
    return None


#: Encodings named first when the bytes fit several (the commonest a spreadsheet saves in)
_COMMON = ("cp1252", "iso8859-1")


def _guess_encodings(raw: bytes) -> list[str]:
    """The encodings ``raw`` reads as with the fewest oddities (charset_normalizer; a guess from the bytes, up to
    three, the commonest first); [] when none fits. A short text fits several: each is named."""
    from charset_normalizer import from_bytes

    found = from_bytes(raw[:1 << 16])
    best = found.best()
    if best is None:
        return []
    names = []
    for m in found:
        if m.chaos <= best.chaos + 0.01:
            names += [codecs.lookup(c).name for c in (m.encoding, *m.could_be_from_charset)]
    names = list(dict.fromkeys(n for n in names if not n.startswith("utf")))
    names.sort(key=lambda n: _COMMON.index(n) if n in _COMMON else len(_COMMON))
    return names[:3]


def decode_user_text(raw: bytes, source: str) -> str:
    """The text of a user's file, which must be UTF-8 (a UTF-8 byte-order mark is allowed and dropped), or one
    DHPError naming what it is instead and how to save it as UTF-8: UTF-16/UTF-32 named from their byte-order mark
    (or from their NUL bytes when it has none), other encodings as detected (charset_normalizer's guess), a NUL byte
    in otherwise UTF-8 text with its line. ``source`` names the file in the message."""
    for bom, name, codec in _BOMS:
        if raw.startswith(bom):
            raise DHPError(f"{source} is {name} text (it starts with the {name} byte-order mark), not UTF-8.",
                           "save it as UTF-8 (Excel: 'CSV UTF-8 (Comma delimited)', not 'Unicode Text'; an "
                           f"editor: encoding 'UTF-8'; or `iconv -f {codec} -t UTF-8 in > out`).")
    utf16 = _utf16_without_bom(raw)
    if utf16:
        raise DHPError(f"{source} looks like {utf16} text without a byte-order mark (every other byte is NUL), "
                       "not UTF-8.",
                       f"save it as UTF-8 (an editor: encoding 'UTF-8'; or `iconv -f {utf16.replace(' ', '')} -t UTF-8 "
                       "in > out`).")
    body = raw[3:] if raw.startswith(b"\xef\xbb\xbf") else raw
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        offset = e.start + len(raw) - len(body)
        line = raw[:offset].count(b"\n") + 1
        guesses = _guess_encodings(raw)
        iconv = _ICONV.get(guesses[0], guesses[0].upper()) if guesses else None
        looks = (f"; it looks like {' or '.join(guesses)} (a guess from its bytes)" if guesses else
                 "; its encoding could not be recognised")
        raise DHPError(
            f"{source} line {line} contains bytes that are not UTF-8 (byte {raw[offset:offset + 1]!r} at offset "
            f"{offset}){looks}.",
            "save the file as UTF-8 (in your editor choose 'UTF-8'"
            + (f", or `iconv -f {iconv} -t UTF-8 in > out`" if iconv else
               ", or with iconv from the encoding it was saved in: `iconv -f <encoding> -t UTF-8 in > out`")
            + ").") from None
    nul = text.find("\0")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        column = nul - (text.rfind("\n", 0, nul) + 1) + 1
        raise DHPError(f"{source} line {line} contains a NUL byte (character {column} of the line): not a text "
                       "a judge can read.",
                       "remove the NUL bytes (e.g. `tr -d '\\000' < in > out`); if the file is full of them, it was "
                       "saved as UTF-16 or is not a text file: save it as UTF-8 text.")
    return text


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
    return pd.read_parquet(p) if p.suffix == ".parquet" else read_csv(p)


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


#: ``scheme://user:password@`` in any text: the credentials part of a URL (a judge spec's server URL may carry them).
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@\"']+@")


def redact_credentials(text: str) -> str:
    """``text`` with the ``user:password@`` of every URL in it removed: credentials are never stored."""
    return _URL_CREDENTIALS.sub(r"\1", text)


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
        "parameters": json.loads(redact_credentials(json.dumps(parameters, default=str))),
        "backends": [b.cache_identity() if hasattr(b, "cache_identity") else {"backend": str(b)} for b in backends],
        "inputs": {str(p): file_sha256(p) for p in inputs if Path(p).is_file()},
        "packages": versions,
        **json.loads(redact_credentials(json.dumps(extra or {}, default=str))),
    }
    return write_text(path, json.dumps(manifest, indent=1, sort_keys=True))
