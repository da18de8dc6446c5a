"""`download()`, the DHP datasets' fetch of earlier versions, now through dhp.datasets.declared_files (the BARTScore
pickle conversion lives in dhp.datasets.transforms)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable


from dhp.errors import DHPError
from dhp.datasets.files import DATASETS, _check_name, _how_to_get, dataset_files
from dhp.datasets.transforms import _SafeUnpickler, _bartscore_pickle_to_json, _plain  # noqa: F401 (kept here)
from dhp.datasets import declared_files


def download(
    dest: str | os.PathLike,
    datasets: Iterable[str] | None = None,
    base_url: str | None = None,
    *,
    sumpubmed: str = "selection",
    timeout: float = 60.0,
) -> list[Path]:
    """Fetch the openly licensed files of the DHP datasets into `dest` (same layout as the data root).

    Kept for scripts written before `python -m dhp data fetch` (dhp.datasets.declared_files), which it uses.
    `datasets`: names from DATASETS (default: all but Story Cloze, which is never downloaded; Answer
    Equivalence is fetched only when named). `base_url`: fetch `<base_url>/<relative path>` from a mirror
    with the data-root layout instead of the upstream URLs. `sumpubmed`: "selection" (default) fetches the 200
    files of the committed 100-item seed-0 selection, "all" the 1,000 files of the pool.

    Each file is checked (sha256 and size) and written atomically; files already present are skipped.
    Returns the paths of the files now present.
    """
    dest = Path(dest).expanduser().absolute()  # a relative dest means the cwd, not the repo root
    rels = _files_to_fetch(datasets, sumpubmed)
    chosen = declared_files.select(rels)
    declared_files.fetch(chosen, dest, base_url=base_url, timeout=timeout)
    return [dest / rel for rel in rels]


def _files_to_fetch(datasets: Iterable[str] | None, sumpubmed: str) -> list[str]:
    """The relative paths of the named datasets' files, each once, in dataset order."""
    names = [n for n in DATASETS if n not in ("storycloze", "answer_equivalence")] if datasets is None \
        else list(datasets)
    for n in names:
        _check_name(n)
        if n == "storycloze":
            raise DHPError("Story Cloze is not openly licensed and cannot be downloaded.",
                           _how_to_get("storycloze"))
    return list(dict.fromkeys(rel for n in names for rel in dataset_files(n, sumpubmed=sumpubmed)))
