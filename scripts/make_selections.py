"""Regenerate dhp/resources/selections/*.json from a data root.

Usage: .venv/bin/python scripts/make_selections.py [DATA_ROOT]
    (default: the data root, DHP_DATA_DIR else the per-user cache; on the development machines pass their
    complete copy, ../shared/datasets, which alone holds Story Cloze)

Writes ids and sha256 only, never texts. Story Cloze is read from DATA_ROOT/storycloze/ (a copy from its
owners: it is never fetched) to record its ids; Answer Equivalence cannot be obtained here, so its record holds
the official checksums and no ids (its selection is computed at load time from the user's file).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dhp import datasets  # noqa: E402
from dhp.datasets import files as datafiles  # noqa: E402
from dhp.io import _atomic  # noqa: E402

def _write_json(obj, path: Path) -> None:
    text = json.dumps(obj, indent=1, ensure_ascii=False) + "\n"
    _atomic(path, lambda t: Path(t).write_text(text, encoding="utf-8"))


def main(root: Path) -> None:
    # sizes and sha256 come from the one declaration of every input (scripts/make_data_registry.py)
    registry = datafiles._checksums()
    for name in datasets.DATASETS:
        if name == "answer_equivalence":
            continue
        for rel in datasets.dataset_files(name, sumpubmed="all"):
            if hashlib.sha256((root / rel).read_bytes()).hexdigest() != registry[rel]["sha256"]:
                raise SystemExit(f"{root / rel} differs from dhp/resources/data_registry.json: "
                                 "regenerate it first (scripts/make_data_registry.py)")

    for name in datasets.DATASETS:
        rels = datasets.dataset_files(name, sumpubmed="all")
        record = {
            "dataset": name,
            "seed": 0,
            "rule": datasets.SELECTION_RULES[name],
            "ordering": "pool in file order, numpy.random.default_rng(seed).permutation, "
                        "first n_items (n_items <= 100 is a prefix of this list)",
        }
        if name == "answer_equivalence":
            record |= {"pool_size": None, "item_ids": [],
                       "files": {rel: registry[rel]["sha256"] for rel in rels},
                       "note": "files not obtainable on the development machines; the selection "
                               "is computed at load time from the user's verified copy"}
        else:
            files = {rel: root / rel for rel in rels}
            pool = datasets.POOLS[name](files)
            ids = datasets.select_ids([r["item_id"] for r in pool], datasets.SELECTION_SIZE, 0)
            if name == "sumpubmed":
                used = datafiles._sumpubmed_files(int(i) for i in ids)
            else:
                used = rels
            digest = hashlib.sha256("".join(
                f"{rel} {registry[rel]['sha256']}\n" for rel in sorted(rels)).encode()).hexdigest()
            record |= {"pool_size": len(pool), "item_ids": ids,
                       "files": {rel: registry[rel]["sha256"] for rel in used},
                       "pool_files": len(rels), "pool_digest": digest}
        _write_json(record, ROOT / "dhp" / "resources" / "selections" / f"{name}.json")
        print(f"{name}: pool {record['pool_size']}, {len(record['item_ids'])} ids")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else datasets.data_root())
