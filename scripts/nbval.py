"""Run every numbered notebook under nbval in a temporary copy, writing only under a temporary folder.

    python scripts/nbval.py            (what `make test` runs)

Each `notebooks/NN_*.ipynb` is copied with its `parameters` cell overridden (papermill's parameterize,
the same mechanism as a papermill batch) so that `run_dir`, `cache_path`, `figures_dir` and `output_path`
— whichever the notebook declares — point into a temporary folder (and, for the notebooks in ``COURSE``, with
the settings the course's pages show instead of the notebook's defaults, recorded in the copy); the copies are run in numeric order
(notebook 02 reads what 01 wrote) by `pytest --nbval-lax`, whose exit status is returned. The notebooks end
with `assert` cells on their own outputs, so nbval checks results, not only that cells ran. The script
fails if the run wrote anything into the repository's runs/, figures/ or results/.

The executed copies, outputs included, are kept in build/executed/ (ignored by git; emptied first) by the
plugin scripts/keep_executed.py (the temporary folder's conftest.py): `make docs` builds the course pages from
them, so the notebooks are executed once, by this check, and never committed with outputs. The same plugin prints
a table at the end: each notebook's wall time, its kernel's CPU seconds and its cell count (issue 28: every
notebook runs in at most 3 minutes at its defaults, timings listed).

    python scripts/nbval.py 00 04      only the notebooks whose names start with these (a quick check)
    python scripts/nbval.py --add 06   the same, keeping the other copies in build/executed/ (scripts/course_copies.py)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
from papermill.iorw import load_notebook_node
from papermill.parameterize import parameterize_notebook

ROOT = Path(__file__).resolve().parents[1]
KEEP = ROOT / "build" / "executed"
PATH_PARAMETERS = ("run_dir", "cache_path", "figures_dir", "output_path")
#: Where the course's page needs another setting than the notebook's defaults, the values nbval runs it with instead
#: (written into the executed copy's metadata, ``dhp.parameters``; the lesson page names them). The DHP lessons must
#: show a judge's D with finite intervals, which needs >= 10 items (docs/methods/dhp.md); 10 items with one metric are
#: 140 judge calls, about the cost of the defaults' 2 items x 4 metrics (112). Every other default (the parameters
#: cells equal DHPParams', tests/test_config.py) runs in at most 3 minutes on two cores.
COURSE: dict[str, dict] = {"01_perturb": {"n_items": 10},
                           "02_judge": {"n_items": 10, "metrics": ["coherence"]}}


def declared(nb) -> set[str]:
    """Names the notebook's `parameters` cell assigns."""
    import ast

    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    return {t.id for node in ast.parse(cell.source).body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)}


def snapshot() -> dict[str, float]:
    out = {}
    for d in ("runs", "figures", "results"):
        for p in (ROOT / d).rglob("*") if (ROOT / d).exists() else []:
            if p.is_file():
                out[str(p)] = p.stat().st_mtime_ns
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    add = "--add" in argv  # keep build/executed/'s other copies (the course's missing lessons only)
    only = tuple(a for a in argv if a != "--add")
    before = snapshot()
    with tempfile.TemporaryDirectory(prefix="dhp-nbval-") as tmp:
        tmp = Path(tmp)
        values = {"run_dir": str(tmp / "runs" / "nb"), "cache_path": str(tmp / "runs" / "cache.sqlite"),
                  "figures_dir": str(tmp / "figures"), "output_path": str(tmp / "runs" / "expert_weights.csv")}
        copies = []
        for src in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
            if only and not src.name.startswith(only):
                continue
            nb = load_notebook_node(str(src))  # papermill's loader gives every cell a tags list
            params = {k: values[k] for k in PATH_PARAMETERS if k in declared(nb)}
            params.update(COURSE.get(src.stem, {}))
            nb = parameterize_notebook(nb, params)
            if src.stem in COURSE:
                nb.metadata.setdefault("dhp", {})["parameters"] = COURSE[src.stem]
            dst = tmp / src.name
            nbformat.write(nb, dst)
            copies.append(str(dst))
        if not add:
            shutil.rmtree(KEEP, ignore_errors=True)  # no stale page survives a notebook that was renamed or failed
        # the plugin as the temporary folder's conftest.py (a folder of scripts on sys.path would shadow nbval)
        shutil.copy(ROOT / "scripts" / "keep_executed.py", tmp / "conftest.py")
        env = {**os.environ, "DHP_NBVAL_KEEP": str(KEEP), "DHP_NBVAL_TMP": str(tmp)}
        cmd = [sys.executable, "-m", "pytest", "--nbval-lax", "-p", "no:cacheprovider", "-q", *copies]
        code = subprocess.call(cmd, cwd=tmp, env=env)
        if code != 0:
            # A kernel can die before replying to kernel_info when many start at once on a loaded machine (seen
            # once in five `bash .ci/run`, 2026-11-28: notebook 03's kernel, then 04 without its tables): every
            # notebook runs once more, in order, with what the first pass cached; a real failure fails again.
            print(f"nbval: exit {code}; running every notebook once more", flush=True)
            code = subprocess.call(cmd, cwd=tmp, env=env)
    changed = sorted(set(snapshot().items()) - set(before.items()))
    if changed:
        print(f"nbval wrote into the repository: {[p for p, _ in changed][:5]}", file=sys.stderr)
        return code or 1
    return code


if __name__ == "__main__":
    raise SystemExit(main())
