"""LLMBar (Zeng et al. 2023): an instruction, two outputs and the gold label of the better one; 100
Natural pairs and 319 Adversarial pairs in four subsets (GPTInst 92, GPTOut 47, Manual 46, Neighbor 134),
no ties. MIT. Read at run time from ``<data root>/llmbar/<Subset>.json`` (fetched on first need: dhp.datasets.declared_files),
each file checked against its sha256; upstream:
github.com/princeton-nlp/LLMBar @ 900616b : Dataset/LLMBar/*/dataset.json.

Also a pairwise file of your own (CSV or JSONL: item_id, instruction, output_1, output_2, label with
label "1", "2" or "tie"), with the same checks as dhp.datasets.load_custom.

Table (one row per pair): dataset ("llmbar"), subset, item_id, instruction, output_1, output_2, label.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd

from dhp.errors import DHPError
from dhp.datasets import declared_files

__all__ = ["SUBSETS", "PROCESSED", "load_llmbar", "load_processed", "load_pairwise"]

#: subset -> sha256 of its dataset.json (upstream commit 900616b)
SUBSETS = {
    "Natural": "f7127b7aa78104cb8e03a2b1b3ac0077e95b125714dd441a8ee63666145a3375",
    "Adversarial_GPTInst": "1002425f73c2cf54b6e6de99bce3f6c60fa2a17d13194772e37d7481c1351d42",
    "Adversarial_GPTOut": "1ff56e520d7607750a9866a3be0f5b850392ca4477a1f69d80f32bd3e310f561",
    "Adversarial_Manual": "0d9598769a39cdbbd265778c37e49939d41d5f76dcfb17bd75dcfa07516d3837",
    "Adversarial_Neighbor": "6712c7eda6342602e0bc7c06c282fa95e2110d4e741a284026a62d937f9780a0",
}
COLUMNS = ["dataset", "subset", "item_id", "instruction", "output_1", "output_2", "label"]
LABELS = ("1", "2", "tie")


def _folder(data_dir, subsets=()) -> Path:
    """<data root>/llmbar, with the named subsets' files present (fetched when missing)."""
    return declared_files.ensure([f"llmbar/{sub}.json" for sub in subsets], data_dir) / "llmbar"


def _sample(n: int, n_items: int | None, seed: int) -> list[int]:
    """Positions 0..n-1, or a seeded sample of ``n_items`` of them, in file order (the rule of both loaders)."""
    idx = list(range(n))
    if n_items is None:
        return idx
    return sorted(pd.Series(idx).sample(n=min(int(n_items), n), random_state=seed).tolist())


def load_llmbar(subsets=("Natural",), n_items: int | None = None, seed: int = 0, data_dir=None) -> pd.DataFrame:
    """Pairs of the named subsets ("Adversarial" = all four adversarial subsets), optionally a seeded
    sample of ``n_items`` per subset. item_id is "<subset>-<index in the file>"."""
    names = []
    for sub in ([subsets] if isinstance(subsets, str) else list(subsets)):
        names += [k for k in SUBSETS if k.startswith("Adversarial_")] if sub == "Adversarial" else [sub]
    rows = []
    for sub in names:
        if sub not in SUBSETS:
            raise DHPError(f"Unknown LLMBar subset {sub!r}.", f"use one of {sorted(SUBSETS)} or 'Adversarial'.")
        path = _folder(data_dir, [sub]) / f"{sub}.json"
        if not path.is_file():
            raise DHPError(f"LLMBar file {path} not found.",
                           "pass data_dir= (or set DHP_DATA_DIR) to the folder holding llmbar/, or get the files "
                           "from github.com/princeton-nlp/LLMBar (Dataset/LLMBar/<subset>/dataset.json).")
        raw = path.read_bytes()
        if hashlib.sha256(raw).hexdigest() != SUBSETS[sub]:
            raise DHPError(f"{path} does not match the sha256 of LLMBar's {sub} file.",
                           "use the unmodified upstream file (commit 900616b).")
        recs = json.loads(raw)
        idx = _sample(len(recs), n_items, seed)
        rows += [("llmbar", sub, f"{sub}-{i}", recs[i]["input"], recs[i]["output_1"], recs[i]["output_2"],
                  str(recs[i]["label"])) for i in idx]
    return pd.DataFrame(rows, columns=COLUMNS)


#: LLMBar's re-processed earlier meta-evaluation sets (FairEval 66 pairs, LLMEval^2 200, MT-Bench 200: human
#: preferences, no ties), whose pairs its recorded judges also ran: ``Dataset/Processed/<name>/dataset.json`` in the
#: llmbar_judgments set (declared with its sha256, fetched on first need). Subset ids as dhp.recorded.llmbar names them.
PROCESSED = ("FairEval", "LLMEval^2", "MT-Bench")


def load_processed(names=PROCESSED, data_dir=None) -> pd.DataFrame:
    """Pairs of LLMBar's re-processed sets (:data:`PROCESSED`): subset ``Processed_<name>``, item_id
    ``Processed_<name>-<index in the file>`` (the ids of the recorded verdicts), the same columns as load_llmbar."""
    rows = []
    for name in ([names] if isinstance(names, str) else list(names)):
        if name not in PROCESSED:
            raise DHPError(f"Unknown re-processed LLMBar set {name!r}.", f"use one of {list(PROCESSED)}.")
        rel = f"llmbar_judgments/Processed/{name}/dataset.json"
        recs = json.loads((declared_files.ensure([rel], data_dir) / rel).read_bytes())  # checked by its sha256
        sub = f"Processed_{name}"
        rows += [("llmbar", sub, f"{sub}-{i}", r["input"], r["output_1"], r["output_2"], str(r["label"]))
                 for i, r in enumerate(recs)]
    return pd.DataFrame(rows, columns=COLUMNS)


def load_pairwise(path, subset: str = "mine", n_items: int | None = None, seed: int = 0) -> pd.DataFrame:
    """A pairwise file of your own (.csv with header, or .jsonl): item_id, instruction, output_1, output_2,
    label ("1", "2" or "tie"); optionally a seeded sample of ``n_items`` pairs (the rule of load_llmbar). Bad
    input — unreadable file, missing column, duplicate id, empty text, bad label — raises one DHPError naming
    the file, the row and the fix."""
    p = Path(path)
    if not p.is_file():
        raise DHPError(f"Pairwise file {p} not found.", "pass the path of a .csv or .jsonl file.")
    try:
        if p.suffix.lower() == ".csv":
            df = pd.read_csv(p, dtype=str, keep_default_na=False)
        elif p.suffix.lower() in (".jsonl", ".ndjson"):
            df = pd.read_json(p, lines=True, dtype=False)
        else:
            raise DHPError(f"{p.name}: unknown file type {p.suffix!r}.", "use a .csv or .jsonl file.")
    except UnicodeDecodeError:
        raise DHPError(f"{p.name} is not UTF-8 text.", "save the file as UTF-8.") from None
    except ValueError as e:
        raise DHPError(f"{p.name} cannot be read ({e}).", "check it is valid CSV/JSONL.") from None
    need = ["item_id", "instruction", "output_1", "output_2", "label"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise DHPError(f"{p.name} lacks column(s) {missing}.", f"give every row {need}.")
    df = df.astype({c: str for c in need})
    dup = df["item_id"].duplicated()
    if dup.any():
        raise DHPError(f"{p.name} row {int(dup.idxmax()) + 1}: duplicate item_id {df['item_id'][dup].iloc[0]!r}.",
                       "make item_id unique.")
    for c in ("instruction", "output_1", "output_2"):
        empty = df[c].str.strip() == ""
        if empty.any():
            raise DHPError(f"{p.name} row {int(empty.idxmax()) + 1}: empty {c}.", f"fill in {c} for every row.")
    bad = ~df["label"].str.strip().str.lower().isin(LABELS)
    if bad.any():
        raise DHPError(f"{p.name} row {int(bad.idxmax()) + 1}: label {df['label'][bad].iloc[0]!r} is not 1, 2 or tie.",
                       "label each row with the better output: 1, 2 or tie.")
    df["label"] = df["label"].str.strip().str.lower()
    df = df.iloc[_sample(len(df), n_items, seed)].reset_index(drop=True)
    return df.assign(dataset="llmbar-custom", subset=subset)[COLUMNS]
