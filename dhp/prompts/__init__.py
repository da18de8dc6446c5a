"""Prompts are text files in this folder (judge/, perturb/, dna/, pairwise/); one syntax fills them all:
``{slot}`` is replaced by the slot's text in a single pass, so braces inside the inserted texts (an
article quoting code, a candidate containing "{source}") are never filled again."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from dhp.errors import DHPError

PROMPT_DIR = Path(__file__).resolve().parent


@lru_cache(maxsize=None)
def load(kind: str, name: str) -> str:
    """The template ``dhp/prompts/<kind>/<name>.txt``."""
    path = PROMPT_DIR / kind / f"{name}.txt"
    if not path.is_file():
        raise DHPError(f"No prompt file {path}.", f"add it, or use one of {sorted(p.stem for p in path.parent.glob('*.txt'))}.")
    return path.read_text(encoding="utf-8")


def fill(template: str, slots: dict[str, str]) -> str:
    """Replace each ``{name}`` whose name is in ``slots``; other braces are left as they are."""
    return re.sub(r"\{(\w+)\}", lambda m: str(slots[m.group(1)]) if m.group(1) in slots else m.group(0), template)
