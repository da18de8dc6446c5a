"""Execute, at their defaults, the notebooks the course has no executed copy of: `make docs` runs this first.

    python scripts/course_copies.py          (what `make docs` runs; prints what it executes, or that none is missing)

The course's pages are executed copies (docs/hooks.py ``course_sources``): the notebook check's in build/executed/,
else make demo's LLM-judge run in runs/. The demo does not execute every notebook (00, 06 and 12 are no step of its
grid), so after `make demo` alone this runs the missing ones through the notebook check (scripts/nbval.py ``--add``:
a temporary folder, nothing written into runs/, figures/ or results/), and the site has every lesson. A notebook that
reads what an earlier one wrote (02 reads 01's tables, 03 both) is run after them.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the notebooks whose inputs earlier notebooks write (into the notebook check's temporary run folder)
_METHODS = ("01", "02", "03", "07", "08", "09")
NEEDS = {"02": ("01",), "03": ("01", "02"), "04": ("01", "02", "03"), "05": ("01", "02"), "10": _METHODS,
         "11": _METHODS}


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def missing() -> list[str]:
    """Number prefixes of the notebooks the course has no executed copy of, with what they need, in order."""
    have = _load("dhp_docs_hooks", ROOT / "docs" / "hooks.py").course_sources()
    lack = [p.name[:2] for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) if p.name not in have]
    return sorted({n for x in lack for n in (x, *NEEDS.get(x, ()))})


def main() -> int:
    todo = missing()
    if not todo:
        print("course: every notebook has an executed copy")
        return 0
    print(f"course: executing at their defaults the notebooks with no executed copy: {' '.join(todo)}", flush=True)
    return _load("dhp_nbval", ROOT / "scripts" / "nbval.py").main(["--add", *todo])


if __name__ == "__main__":
    raise SystemExit(main())
