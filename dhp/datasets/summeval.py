"""SummEval (CNN/DM summaries): per article, the reference with the most sentences (paper App. A.1)."""

from __future__ import annotations

import re
from functools import lru_cache


from dhp.errors import DHPError
from dhp.text import detokenize_ptb, split_sentences
from dhp.datasets.files import _read_json, dataset_pool


def _norm_article(text: str) -> str:
    # PTB tokenisation only changes spacing, quotes and brackets: comparing the lower-cased
    # letters and digits matches a tokenised article to its raw original.
    return re.sub(r"[^0-9a-z]", "", text.lower().replace("-lrb-", "").replace("-rrb-", ""))


@lru_cache(maxsize=4096)
def _n_sentences(text: str) -> int:
    return len(split_sentences(text))


def _pick_summeval_reference(refs: list[str]) -> int:
    """Index of the reference with the most sentences; ties -> the lowest index.

    The lowest index is what a plain argmax gives; it reproduces the paper's Table 2 SummEval
    lengths (341.2 chars / 58.5 words / 4.03 sentences vs 340.4 / 58.3 / 4.0), while "longest
    wins" would give 384.6 characters.
    """
    counts = [_n_sentences(r) for r in refs]
    return counts.index(max(counts))


@dataset_pool("summeval")
def pool(files):
    summac = _read_json(files["summeval/summac_summeval.json"])
    bart = _read_json(files["summeval/bartscore_summeval.json"])
    by_text = {_norm_article(v["document"]): v for v in summac.values()}
    rows = []
    for doc_id, v in bart.items():
        art = by_text.get(_norm_article(v["src"]))
        if art is None:
            raise DHPError(f"SummEval article {doc_id} has no untokenised text in summac_summeval.json.",
                           "re-download both SummEval files (dhp.datasets.download).")
        refs = [detokenize_ptb(r) for r in v["ref_summs"]]
        rows.append({"item_id": doc_id, "source": art["document"].strip(),
                     "reference": refs[_pick_summeval_reference(refs)]})
    return rows
