"""Answer Equivalence: distinct (question, gold answer) pairs with long references (paper App. A.3)."""

from __future__ import annotations

import json


from dhp.errors import DHPError
from dhp.io import jsonl_lines
from dhp.datasets.files import AE_MIN_CHARS, _read_text, dataset_pool


@dataset_pool("answer_equivalence")
def pool(files):
    """AE JSONL rows (qid, gold_index, context, question, reference, candidate, score, raw_rating).

    Several rows share a question and gold answer (one per rated candidate): items are the
    distinct (qid, gold_index) pairs, in file order, whose reference exceeds 150 characters.
    """
    rows, seen = [], set()
    for rel in sorted(files):
        p = files[rel]
        for lineno, line in jsonl_lines(_read_text(p)):
            try:
                d = json.loads(line)
                ref = d["reference"]
                if isinstance(ref, list):  # tolerate a list of gold answers
                    ref = ref[int(d.get("gold_index", 0))]
                item_id = f"{d['qid']}_{d.get('gold_index', 0)}"
                context, question = d["context"], d["question"]
            except (json.JSONDecodeError, KeyError, TypeError, IndexError, ValueError) as e:
                raise DHPError(f"{p} line {lineno} is not an Answer Equivalence record ({e!r}).",
                               "use the upstream ae_dev.jsonl / ae_test.jsonl files.") from None
            ref = str(ref).strip()
            if item_id in seen or len(ref) <= AE_MIN_CHARS:
                continue
            seen.add(item_id)
            rows.append({"item_id": item_id, "source": str(context).strip(), "reference": ref,
                         "question": str(question).strip()})
    return rows
