"""PubMedQA-L: long answers over 150 characters, our stand-in for Answer Equivalence."""

from __future__ import annotations



from dhp.datasets.files import PUBMEDQA_MIN_CHARS, _read_json, dataset_pool


@dataset_pool("pubmedqa")
def pool(files):
    data = _read_json(files["pubmedqa/ori_pqal.json"])
    rows = []
    for pmid, d in data.items():
        ref = d["LONG_ANSWER"].strip()
        if len(ref) > PUBMEDQA_MIN_CHARS:
            rows.append({"item_id": str(pmid), "source": "\n\n".join(c.strip() for c in d["CONTEXTS"]),
                         "reference": ref, "question": d["QUESTION"].strip()})
    return rows
