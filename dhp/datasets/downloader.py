"""`download()`, the DHP datasets' fetch of earlier versions (now through dhp.datasets.registry), and the
conversion of BARTScore's SummEval pickle into the JSON the data root holds."""

from __future__ import annotations

import io
import json
import os
import pickle
from pathlib import Path
from typing import Iterable


from dhp.errors import DHPError
from dhp.datasets.files import DATASETS, _check_name, _how_to_get, dataset_files


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
    # the data root's copy is json.dumps(indent=0, ensure_ascii=False) of the pickle's contents with each
    # document's "sys_summs" last (the pickle has it before "ref_summ"); checked against the upstream pickle
    data = _plain(_SafeUnpickler(io.BytesIO(blob)).load())
    if isinstance(data, dict):
        data = {k: ({a: b for a, b in v.items() if a != "sys_summs"} | {"sys_summs": v["sys_summs"]})
                if isinstance(v, dict) and "sys_summs" in v else v for k, v in data.items()}
    return json.dumps(data, indent=0, ensure_ascii=False).encode("utf-8")


def download(
    dest: str | os.PathLike,
    datasets: Iterable[str] | None = None,
    base_url: str | None = None,
    *,
    sumpubmed: str = "selection",
    timeout: float = 60.0,
) -> list[Path]:
    """Fetch the openly licensed files of the DHP datasets into `dest` (same layout as the data root).

    Kept for scripts written before `python -m dhp data fetch` (dhp.datasets.registry), which it uses.
    `datasets`: names from DATASETS (default: all but Story Cloze, which is never downloaded; Answer
    Equivalence is fetched only when named). `base_url`: fetch `<base_url>/<relative path>` from a mirror
    with the data-root layout instead of the upstream URLs. `sumpubmed`: "selection" (default) fetches the 200
    files of the committed 100-item seed-0 selection, "all" the 1,000 files of the pool.

    Each file is checked (sha256 and size) and written atomically; files already present are skipped.
    Returns the paths of the files now present.
    """
    from dhp.datasets import registry

    dest = Path(dest).expanduser().absolute()  # a relative dest means the cwd, not the repo root
    rels = _files_to_fetch(datasets, sumpubmed)
    chosen = registry.select(rels)
    registry.fetch(chosen, dest, base_url=base_url, timeout=timeout)
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
