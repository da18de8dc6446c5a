"""Download the public datasets from their upstream URLs, checked against committed sha256s."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterable


from dhp.errors import DHPError
from dhp.io import write_bytes
from dhp.datasets.files import (
    DATASETS, _check_name, _checksums, _how_to_get, _sha256, dataset_files, upstream_url,
)


class _SafeUnpickler(pickle.Unpickler):
    """Unpickle plain containers only: a downloaded pickle must not run code."""

    _ALLOWED = {("collections", "OrderedDict"), ("numpy", "dtype"),
                ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar")}

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a downloaded pickle")


def _plain(obj):
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        return obj.item()  # numpy scalar
    return obj


def _bartscore_pickle_to_json(blob: bytes) -> bytes:
    # the shared copy is json.dumps(indent=0, ensure_ascii=False) of the pickle's contents
    data = _plain(_SafeUnpickler(io.BytesIO(blob)).load())
    return json.dumps(data, indent=0, ensure_ascii=False).encode("utf-8")


def _fetch(url: str, timeout: float) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        raise DHPError(f"Download of {url} failed: HTTP {e.code} {e.reason}.",
                       "check the URL / base_url, or fetch the file by hand (see data/README.md).") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise DHPError(f"Download of {url} failed: {reason}.",
                       "check your internet connection or base_url, then retry.") from None


def download(
    dest: str | os.PathLike,
    datasets: Iterable[str] | None = None,
    base_url: str | None = None,
    *,
    sumpubmed: str = "selection",
    timeout: float = 60.0,
) -> list[Path]:
    """Fetch the openly licensed dataset files into `dest` (same layout as the data root).

    `datasets`: names from DATASETS (default: all but Story Cloze, which is never downloaded).
    `base_url`: fetch `<base_url>/<relative path>` from a mirror with the data-root layout
    instead of the upstream URLs (used by the tests with a loopback server). `sumpubmed`:
    "selection" (default) fetches the 200 files of the committed 100-item seed-0 selection,
    "all" the 1,000 files of the pool (needed for other seeds or n_items > 100).

    Each file is checked against dhp/resources/checksums.json (sha256 and size) and written atomically
    (temporary file + rename); files already present with the right checksum are skipped.
    Returns the paths of the files now present. Raises DHPError on network errors or checksum
    mismatch (nothing is written for that file).
    """
    dest = Path(dest).expanduser()
    rels = _files_to_fetch(datasets, sumpubmed)
    registry = _checksums()
    out = []
    for rel in rels:
        target = dest / rel
        expected = registry[rel]
        if not (target.is_file() and _sha256(target) == expected["sha256"]):
            url, blob = _fetch_file(rel, base_url, timeout)
            actual = hashlib.sha256(blob).hexdigest()
            if actual != expected["sha256"] or len(blob) != expected["bytes"]:
                raise DHPError(
                    f"{url} gave {len(blob)} bytes with sha256 {actual[:12]}…; expected "
                    f"{expected['bytes']} bytes, {expected['sha256'][:12]}… (dhp/resources/checksums.json).",
                    "the upstream file changed or the transfer was cut: retry, or fetch the pinned "
                    "version by hand (see data/README.md).")
            write_bytes(target.absolute(), blob)  # a relative dest means the cwd, not the repo root
        out.append(target)
    return out


def _files_to_fetch(datasets: Iterable[str] | None, sumpubmed: str) -> list[str]:
    """The relative paths of the named datasets' files, each once, in dataset order."""
    names = [n for n in DATASETS if n != "storycloze"] if datasets is None else list(datasets)
    for n in names:
        _check_name(n)
        if n == "storycloze":
            raise DHPError("Story Cloze is not openly licensed and cannot be downloaded.",
                           _how_to_get("storycloze"))
    return list(dict.fromkeys(rel for n in names for rel in dataset_files(n, sumpubmed=sumpubmed)))


def _fetch_file(rel: str, base_url: str | None, timeout: float) -> tuple[str, bytes]:
    """(url, content) of one file, from the mirror at `base_url` or upstream (BARTScore's pickle
    converted to the JSON the data root holds)."""
    if base_url:
        url = base_url.rstrip("/") + "/" + rel
        return url, _fetch(url, timeout)
    url = upstream_url(rel)
    blob = _fetch(url, timeout)
    if url.endswith(".pkl"):
        try:
            blob = _bartscore_pickle_to_json(blob)
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
            raise DHPError(f"{url} is not the expected BARTScore pickle ({e}).",
                           "retry later or fetch the file by hand (see data/README.md).") from None
    return url, blob
