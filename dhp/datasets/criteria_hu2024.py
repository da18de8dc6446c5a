"""Criteria descriptions and expectation matrix for the criteria-confusion method of Hu et al. (2024).

Two tables live here:

* `load_criteria()` reads ``aspect_criteria.json`` (the authors' release, Apache-2.0, kept under
  the data root, fetched on first need, never committed) into a tidy table with one row per (aspect, description type).
* `load_expectations()` reads ``dhp/resources/hu2024_expectations.csv``: for each of the 18 attacks and
  11 aspects, whether human annotators and the paper's classification tree expect the score to drop.
  Cells where both say "drops" form S_T, cells where both say "unchanged" form S_F, the rest are excluded.

The parent links in `ASPECT_TREE` are our transcription of the paper's classification tree (Figure 3):
overall quality splits into readability (the text on its own) and adequacy (the text against its source).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd

from dhp.errors import DHPError
from dhp.datasets import declared_files

__all__ = ["ASPECT_TREE", "ASPECTS", "DESCRIPTION_TYPES", "aspect_tree", "default_criteria_path", "description", "load_criteria",
           "load_expectations"]

# child -> parent ("" marks the root).
ASPECT_TREE: dict[str, str] = {
    "overall_quality": "",
    "readability": "overall_quality",
    "adequacy": "overall_quality",
    "fluency": "readability",
    "coherence": "readability",
    "simplicity": "readability",
    "grammaticality": "fluency",
    "faithfulness": "adequacy",
    "informativeness": "adequacy",
    "non_hallucination": "faithfulness",
    "non_contradiction": "faithfulness",
}
ASPECTS: tuple[str, ...] = (
    "fluency", "coherence", "grammaticality", "simplicity", "readability", "faithfulness",
    "non_contradiction", "non_hallucination", "informativeness", "adequacy", "overall_quality",
)
#: The description types of the released aspect_criteria.json (snake_cased keys); "detailed" is the paper's main
#: setting (§5), the others are compared in §6 (Figures 14-18).
DESCRIPTION_TYPES: tuple[str, ...] = ("gold", "simplified", "term", "detailed", "list", "selection1", "selection2",
                                      "selection3")
CRITERIA_COLUMNS = ["aspect", "parent", "description_type", "description"]
_EXPECTATIONS = Path(__file__).resolve().parents[1] / "resources" / "hu2024_expectations.csv"


def _snake(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", str(name).strip().lower()).strip("_")


def aspect_tree() -> dict[str, str]:
    """Return a copy of the classification tree as {child aspect: parent aspect} ("" for the root)."""
    return dict(ASPECT_TREE)


def default_criteria_path(data_dir: str | os.PathLike | None = None) -> Path:
    """``<data root>/criteria_hu2024/aspect_criteria.json``, fetched when missing (dhp.datasets.declared_files, as for
    every loader)."""
    return declared_files.path("criteria_hu2024/aspect_criteria.json", data_dir)


def load_criteria(path: str | os.PathLike | None = None, data_dir: str | os.PathLike | None = None) -> pd.DataFrame:
    """Read the criteria JSON into a tidy table.

    Columns: aspect (snake_case, one of `ASPECTS`), parent (snake_case, "" for overall_quality),
    description_type (snake_case file key: gold, simplified, term, detailed, list, selection1, ...),
    description (str, placeholders such as ``{T}``/``{S}`` left as in the file).
    Rows are sorted by aspect order in `ASPECTS`, then description_type.
    """
    p = Path(path) if path is not None else default_criteria_path(data_dir)
    fix = ("pass path=... to the aspect_criteria.json file (upstream: github.com/PKU-ONELab/LLM-evaluator-reliability), "
           "or data_dir= / DHP_DATA_DIR to the folder holding criteria_hu2024/.")
    if not p.is_file():
        raise DHPError(f"Hu et al. 2024 criteria file not found at {p}.", fix)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DHPError(f"Could not read {p} as JSON ({exc}).", "replace it with the released aspect_criteria.json.") from exc
    if not isinstance(raw, dict) or not raw:
        raise DHPError(f"{p} should hold an object keyed by aspect name.", "replace it with the released aspect_criteria.json.")
    rows = []
    for aspect_key, types in raw.items():
        aspect = _snake(aspect_key)
        if aspect not in ASPECT_TREE or not isinstance(types, dict):
            raise DHPError(f"{p}: unexpected aspect entry {aspect_key!r}.",
                           f"use the released file; known aspects are {', '.join(ASPECTS)}.")
        for type_key, text in types.items():
            if not isinstance(text, str) or not text.strip():
                raise DHPError(f"{p}: description {aspect_key}/{type_key} is not a non-empty string.",
                               "use the released aspect_criteria.json.")
            rows.append((aspect, ASPECT_TREE[aspect], _snake(type_key), text))
    missing = set(ASPECTS) - {r[0] for r in rows}
    if missing:
        raise DHPError(f"{p} lacks aspects: {', '.join(sorted(missing))}.", "use the complete released aspect_criteria.json.")
    table = pd.DataFrame(rows, columns=CRITERIA_COLUMNS)
    order = {a: i for i, a in enumerate(ASPECTS)}
    table = table.sort_values(["aspect", "description_type"], key=lambda s: s.map(order) if s.name == "aspect" else s)
    return table.reset_index(drop=True)


def description(aspect: str, description_type: str = "detailed", table: pd.DataFrame | None = None) -> str:
    """Return the description text for one aspect and description type (names are snake_cased first)."""
    table = load_criteria() if table is None else table
    a, t = _snake(aspect), _snake(description_type)
    hit = table[(table["aspect"] == a) & (table["description_type"] == t)]
    if hit.empty:
        types = sorted(table.loc[table["aspect"] == a, "description_type"].unique())
        raise DHPError(f"No description of type {t!r} for aspect {a!r}.",
                       f"choose one of: {', '.join(types) if types else 'aspects ' + ', '.join(ASPECTS)}.")
    return str(hit["description"].iloc[0])


def load_expectations() -> pd.DataFrame:
    """The paper's attack x aspect expectation matrix (Table 19, detailed descriptions).

    Columns: attack, target_aspect, aspect (snake_case), human (bool), system (bool),
    set ("S_T" when both expect a drop, "S_F" when both expect no change, "excluded" otherwise).
    198 rows (18 attacks x 11 aspects); 57 cells in S_T, 130 in S_F, 11 excluded.
    """
    if not _EXPECTATIONS.is_file():
        raise DHPError(f"Expectation table missing at {_EXPECTATIONS}.", "restore dhp/resources/hu2024_expectations.csv from git.")
    table = pd.read_csv(_EXPECTATIONS, dtype={"attack": str, "target_aspect": str, "aspect": str})
    for col in ("human", "system"):
        table[col] = table[col].astype(str).str.strip().str.lower().map({"true": True, "false": False})
        if table[col].isna().any():
            raise DHPError(f"Column {col!r} of {_EXPECTATIONS.name} holds non-boolean values.", "restore the file from git.")
        table[col] = table[col].astype(bool)
    table["set"] = "excluded"
    table.loc[table["human"] & table["system"], "set"] = "S_T"
    table.loc[~table["human"] & ~table["system"], "set"] = "S_F"
    return table
