"""pytest plugin for scripts/nbval.py: keep the notebooks nbval executed, outputs included, for the docs site.

nbval runs every cell in a kernel and holds what it printed and drew (``item.test_outputs``) but writes nothing;
this plugin puts those outputs into the notebook's cells and writes each notebook to ``DHP_NBVAL_KEEP`` when the
session ends, so the site is built from the very run `make test` checked (executed once, not twice). The
temporary folder's path (``DHP_NBVAL_TMP``) is written as a relative one, so the pages show ``runs/nb``, not
``/tmp/dhp-nbval-…/runs/nb``. The copies go to an ignored folder (build/executed/), never into notebooks/.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat

_NOTEBOOKS: dict[str, object] = {}


def pytest_runtest_teardown(item):
    cell, outputs = getattr(item, "cell", None), getattr(item, "test_outputs", None)
    if cell is None or getattr(item, "parent", None) is None or not hasattr(item.parent, "nb"):
        return
    if outputs is not None:
        cell.outputs = [o for o in outputs]
        count = getattr(item.parent, "_keep_count", 0) + 1
        item.parent._keep_count = count
        cell.execution_count = count
        for o in cell.outputs:
            if o.get("output_type") == "execute_result":
                o["execution_count"] = count
    _NOTEBOOKS[str(item.parent.fspath)] = item.parent.nb


def pytest_sessionfinish(session):
    dest, tmp = os.environ.get("DHP_NBVAL_KEEP"), os.environ.get("DHP_NBVAL_TMP")
    if not dest:
        return
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for path, nb in _NOTEBOOKS.items():
        text = nbformat.writes(nb)
        if tmp:
            text = text.replace(tmp.rstrip("/") + "/", "")
        (dest / Path(path).name).write_text(text, encoding="utf-8")
