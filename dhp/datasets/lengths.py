"""Reference length statistics next to the paper's Table 2."""

from __future__ import annotations


import numpy as np
import pandas as pd

from dhp.text import count_words, split_sentences
from dhp.datasets.files import PAPER_COUNTERPART, PAPER_TABLE2


def reference_lengths(df: pd.DataFrame) -> pd.DataFrame:
    """Per-item length of the reference text.

    Columns: dataset, item_id, characters (Unicode code points), words (dhp.text.count_words:
    alphanumeric runs, punctuation not counted), sentences (dhp.text.split_sentences, pysbd,
    in the reference language = tgt_lang or English).
    """
    recs = []
    for r in df.itertuples(index=False):
        ref = r.reference
        recs.append({"dataset": r.dataset, "item_id": r.item_id, "characters": len(ref),
                     "words": count_words(ref),
                     "sentences": len(split_sentences(ref, r.tgt_lang or "en"))})
    return pd.DataFrame.from_records(
        recs, columns=["dataset", "item_id", "characters", "words", "sentences"])


def table2_comparison(df: pd.DataFrame) -> pd.DataFrame:
    """Mean reference length per dataset next to the paper's Table 2, one row per measure.

    Input: one or more dataset tables concatenated. Columns of the result (tidy, long):
      dataset        our dataset
      paper_dataset  the paper's row it is compared to (pubmedqa -> answer_equivalence; "" if none)
      n_items        number of items averaged
      measure        characters | words | sentences
      ours           our mean
      paper          the paper's mean (NaN if no counterpart)
      rel_diff       (ours - paper) / paper
    """
    lengths = reference_lengths(df)
    recs = []
    for name, g in lengths.groupby("dataset", sort=False):
        counterpart = PAPER_COUNTERPART.get(name, "")
        paper = PAPER_TABLE2.get(counterpart, (np.nan,) * 3)
        for k, measure in enumerate(("characters", "words", "sentences")):
            ours = float(g[measure].mean())
            recs.append({"dataset": name, "paper_dataset": counterpart, "n_items": len(g),
                         "measure": measure, "ours": ours, "paper": paper[k],
                         "rel_diff": (ours - paper[k]) / paper[k]})
    return pd.DataFrame.from_records(
        recs, columns=["dataset", "paper_dataset", "n_items", "measure", "ours", "paper", "rel_diff"])
