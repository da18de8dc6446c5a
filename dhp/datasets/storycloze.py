"""Story Cloze (spring 2016 validation): read only from a copy the user supplies (paper App. A.2)."""

from __future__ import annotations


import pandas as pd

from dhp.errors import DHPError
from dhp.datasets.files import STORYCLOZE_REL, _how_to_get, dataset_pool


@dataset_pool("storycloze")
def pool(files):
    p = files[STORYCLOZE_REL]
    df = pd.read_csv(p, dtype=str, keep_default_na=False, encoding="utf-8")
    need = ["InputStoryid", *(f"InputSentence{i}" for i in range(1, 5)),
            "RandomFifthSentenceQuiz1", "RandomFifthSentenceQuiz2", "AnswerRightEnding"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise DHPError(f"{p} lacks columns {missing}; is it the spring 2016 validation CSV?",
                       _how_to_get("storycloze"))
    rows = []
    for r in df.itertuples(index=False):
        r = r._asdict()
        right = r["AnswerRightEnding"].strip()
        if right not in ("1", "2"):
            raise DHPError(f"{p}: story {r['InputStoryid']} has AnswerRightEnding={right!r}.",
                           _how_to_get("storycloze"))
        wrong = "2" if right == "1" else "1"
        rows.append({
            "item_id": r["InputStoryid"],
            "source": " ".join(r[f"InputSentence{i}"].strip() for i in range(1, 5)),
            "reference": r[f"RandomFifthSentenceQuiz{right}"].strip(),
            "wrong_ending": r[f"RandomFifthSentenceQuiz{wrong}"].strip(),
        })
    return rows
