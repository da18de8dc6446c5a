"""SummEval expert ratings per annotator (Fabbri et al. 2021): 12 abstractive systems x 100 CNN/DM
articles, 3 experts x 4 aspects (coherence, consistency, fluency, relevance), integers 1-5.

Read at run time from ``<data root>/summeval_annotators/M*_outputs_annotations.jsonl`` (fetched on first need:
dhp.datasets.declared_files); no text of it is stored in this repository.
Position i of ``expert_annotations`` is the same expert for every summary, so annotators can be compared.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from dhp.errors import DHPError
from dhp.io import jsonl_lines
from dhp.text import detokenize_ptb
from dhp.datasets import declared_files

__all__ = ["ASPECTS", "load_ratings", "load_targets", "agreed_targets"]

ASPECTS = ("coherence", "consistency", "fluency", "relevance")
RATING_COLUMNS = ["target_id", "doc_id", "system", "aspect", "annotator", "rating"]


def _folder(data_dir) -> Path:
    folder = declared_files.path("summeval_annotators", data_dir)
    if not sorted(folder.glob("M*_outputs_annotations.jsonl")):
        raise DHPError(f"No SummEval annotation files (M*_outputs_annotations.jsonl) in {folder}.",
                       "pass data_dir= (or set DHP_DATA_DIR) to the folder holding summeval_annotators/.")
    return folder


def _records(data_dir):
    for path in sorted(_folder(data_dir).glob("M*_outputs_annotations.jsonl")):
        for no, line in jsonl_lines(path.read_text(encoding="utf-8")):
            try:
                rec = json.loads(line)
                experts = rec["expert_annotations"]
                doc, system = str(rec["id"]), str(rec["model_id"])
            except (ValueError, KeyError, TypeError) as e:
                raise DHPError(f"{path.name} line {no} is not a SummEval annotation record ({e}).",
                               "use the unmodified SummEval model_output_annotations files.") from None
            yield path, no, doc, system, experts, rec


def load_ratings(data_dir=None) -> pd.DataFrame:
    """One row per (summary, aspect, expert). Columns: target_id ("<doc_id>|<system>"), doc_id, system,
    aspect, annotator (0, 1, 2), rating (int 1-5)."""
    rows = []
    for path, no, doc, system, experts, _ in _records(data_dir):
        for k, ann in enumerate(experts):
            for aspect in ASPECTS:
                r = ann.get(aspect)
                if not isinstance(r, int) or not 1 <= r <= 5:
                    raise DHPError(f"{path.name} line {no}: expert {k} {aspect} rating {r!r} is not an integer 1-5.",
                                   "use the unmodified SummEval model_output_annotations files.")
                rows.append((f"{doc}|{system}", doc, system, aspect, k, r))
    return pd.DataFrame(rows, columns=RATING_COLUMNS)


def load_targets(data_dir=None) -> pd.DataFrame:
    """The rated summaries with their articles, for judging. Columns: target_id, doc_id, system, source
    (the article), candidate (the system summary, detokenised from SummEval's lower-cased PTB tokens)."""
    rows = [(f"{doc}|{system}", doc, system, rec.get("text", ""), detokenize_ptb(rec.get("decoded", "")))
            for _, _, doc, system, _, rec in _records(data_dir)]
    return pd.DataFrame(rows, columns=["target_id", "doc_id", "system", "source", "candidate"])


def agreed_targets(ratings: pd.DataFrame) -> pd.DataFrame:
    """Targets on which every annotator gave the same rating, per aspect (the global perspective's
    filter, Hu et al. 2025). Columns: target_id, aspect, human_rating."""
    g = ratings.groupby(["target_id", "aspect"])["rating"]
    agree = g.nunique() == 1
    out = g.first()[agree].rename("human_rating").reset_index()
    return out.sort_values(["aspect", "target_id"]).reset_index(drop=True)


def load_expert_means(data_dir=None) -> pd.DataFrame:
    """The 3-expert MEAN ratings of all 16 SummEval systems (4 extractive + 12 abstractive), from the
    BARTScore copy (``<data_dir>/summeval/bartscore_summeval.json``). Columns: target_id
    ("<doc_id>|<system>"), doc_id, system, aspect, human (mean of the experts, 1-5), candidate (the
    system summary, detokenised). For per-annotator ratings (12 systems) use :func:`load_ratings`."""
    path = declared_files.path("summeval/bartscore_summeval.json", data_dir)
    if not path.is_file():
        raise DHPError(f"{path} not found.", "pass data_dir= (or set DHP_DATA_DIR) to the folder holding summeval/.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        rows = [(f"{doc}|{system}", str(doc), system, aspect, float(v["scores"][aspect]), detokenize_ptb(v["sys_summ"]))
                for doc, rec in data.items() for system, v in rec["sys_summs"].items() for aspect in ASPECTS]
    except (ValueError, KeyError, TypeError) as e:
        raise DHPError(f"{path.name} is not the BARTScore SummEval file ({e}).", "use the unmodified file.") from None
    return pd.DataFrame(rows, columns=["target_id", "doc_id", "system", "aspect", "human", "candidate"])
