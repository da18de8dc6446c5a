"""Datasets: the paper's seven selections, bring-your-own files, download and length statistics.

Every loader returns the *dataset table* (see `load_dataset`): one row per item, all columns str.
Selections are deterministic: the pool of eligible items is put in file order, shuffled with
`numpy.random.default_rng(seed).permutation`, and the first `n_items` are taken, so a small run is
always a prefix (subset) of the full 100-item run with the same seed. The 100 ids for seed 0 and
the sha256 of the files they were drawn from are committed in `data/selections/` (ids only, never
texts); every file read is checked against `data/checksums.json`.

Data root: explicit `data_dir` -> env `DHP_DATA_DIR` -> `<repo>/../shared/datasets`.
Story Cloze is only read from a user-supplied copy (`path=` or env `DHP_STORYCLOZE_PATH`),
Answer Equivalence from `path=`, env `DHP_AE_PATH` or `<data root>/answer_equivalence/`.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import pickle
import re
import tempfile
import urllib.error
import urllib.request
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from dhp.errors import DHPError
from dhp.io import project_root
from dhp.schema import DATASET_TASK, TASK_METRICS
from dhp.text import count_words, detokenize_ptb, split_sentences

__all__ = [
    "COLUMNS",
    "DATASETS",
    "PAPER_TABLE2",
    "DataChecksumWarning",
    "data_root",
    "dataset_files",
    "download",
    "load_custom",
    "load_dataset",
    "load_many",
    "reference_lengths",
    "select_ids",
    "table2_comparison",
    "upstream_url",
]

COLUMNS = (
    "dataset", "task", "item_id", "source", "reference", "question", "wrong_ending",
    "src_lang", "tgt_lang",
)
DATASETS = tuple(DATASET_TASK)
SELECTION_SIZE = 100  # items per dataset in the paper

STORYCLOZE_REL = "storycloze/cloze_test_val__spring2016.csv"
STORYCLOZE_FORM = "https://cs.rochester.edu/nlp/rocstories/"
AE_FILES = ("answer_equivalence/ae_dev.jsonl", "answer_equivalence/ae_test.jsonl")
AE_HOME = "https://github.com/google-research-datasets/answer-equivalence-dataset"
SUMPUBMED_POOL = range(1, 501)  # article numbers 1..500: the copy CI and the selection use
AE_MIN_CHARS = 150  # paper, Appendix A.3: reference answers longer than 150 characters
PUBMEDQA_MIN_CHARS = 150  # same rule for the PubMedQA-L stand-in
WMT_MIN_CHARS = 300  # paper, Appendix A.4: reference translations longer than 300 characters

# Paper Table 2 ("Avg NLTK statistics" of the selected references): characters, words, sentences.
PAPER_TABLE2: dict[str, tuple[float, float, float]] = {
    "summeval": (340.4, 58.3, 4.0),
    "sumpubmed": (803.5, 114.9, 5.5),
    "storycloze": (38.7, 7.4, 1.0),
    "answer_equivalence": (156.2, 23.9, 1.0),
    "wmt22_de_en": (436.8, 71.0, 3.8),
    "wmt22_zh_en": (434.1, 66.4, 1.1),
}
# PubMedQA-L stands in for Answer Equivalence (same task, same >150-character rule).
PAPER_COUNTERPART = {name: name for name in PAPER_TABLE2} | {"pubmedqa": "answer_equivalence"}

_DATA_DIR = project_root() / "data"
_RAW = "https://raw.githubusercontent.com"


class DataChecksumWarning(UserWarning):
    """A data file differs from the version the committed selections were made on."""


# --------------------------------------------------------------------------------------------
# Files, upstream URLs, checksums
# --------------------------------------------------------------------------------------------

def _wmt_files(pair: str) -> list[str]:
    src = pair.split("-")[0]
    return [
        f"wmt22/txt/generaltest2022.{pair}.src.{src}",
        f"wmt22/txt/generaltest2022.{pair}.ref.A.en",
        f"wmt22/docids/test.{pair}.docids",
    ]


def _sumpubmed_files(numbers: Iterable[int]) -> list[str]:
    out = []
    for n in numbers:
        out += [f"sumpubmed/text/text_{n}.txt", f"sumpubmed/abstract/abstract_{n}.txt"]
    return out


def dataset_files(name: str, sumpubmed: str = "all") -> list[str]:
    """Relative paths (under the data root) of the files a dataset's loader reads.

    For sumpubmed, `sumpubmed="selection"` lists only the 200 files of the committed seed-0
    selection, `"all"` the 1,000 files of the pool (articles 1..500).
    """
    _check_name(name)
    if name == "summeval":
        return ["summeval/summac_summeval.json", "summeval/bartscore_summeval.json"]
    if name == "sumpubmed":
        if sumpubmed == "selection":
            return _sumpubmed_files(int(i) for i in _committed("sumpubmed")["item_ids"])
        if sumpubmed != "all":
            raise DHPError(f"Unknown sumpubmed={sumpubmed!r}.", "use 'selection' or 'all'.")
        return _sumpubmed_files(SUMPUBMED_POOL)
    if name == "storycloze":
        return [STORYCLOZE_REL]
    if name == "answer_equivalence":
        return list(AE_FILES)
    if name == "pubmedqa":
        return ["pubmedqa/ori_pqal.json"]
    return _wmt_files("de-en" if name == "wmt22_de_en" else "zh-en")


def upstream_url(relpath: str) -> str:
    """Raw-GitHub URL (pinned commit from ../shared/datasets/SOURCES.md) of a data file.

    `summeval/bartscore_summeval.json` comes from BARTScore's `data.pkl`; `download` converts it.
    Story Cloze has no open URL (request form at cs.rochester.edu/nlp/rocstories).
    """
    name = relpath.rsplit("/", 1)[-1]
    if relpath == "summeval/summac_summeval.json":
        return f"{_RAW}/tingofurro/summac/46056e54/data/summeval.json"
    if relpath == "summeval/bartscore_summeval.json":
        return f"{_RAW}/neulab/BARTScore/248f511c/SUM/SummEval/data.pkl"
    if relpath.startswith("sumpubmed/"):
        return f"{_RAW}/vgupta123/sumpubmed/c190db23/{relpath.removeprefix('sumpubmed/')}"
    if relpath == "pubmedqa/ori_pqal.json":
        return f"{_RAW}/pubmedqa/pubmedqa/1cbae8e/data/ori_pqal.json"
    if relpath.startswith("wmt22/txt/"):
        sub = "sources" if ".src." in name else "references"
        return f"{_RAW}/wmt-conference/wmt22-news-systems/20240a2e/txt/{sub}/{name}"
    if relpath.startswith("wmt22/docids/"):
        pair = name.split(".")[1].replace("-", "")
        return f"{_RAW}/microsoft/gpt-MT/d64e21fb/evaluation/testset/wmt-testset-docids/{pair}/{name}"
    if relpath.startswith("answer_equivalence/"):
        return f"{_RAW}/google-research-datasets/answer-equivalence-dataset/main/v1/{name}"
    raise DHPError(
        f"No open upstream URL for {relpath}.",
        f"Story Cloze must be requested from its owners at {STORYCLOZE_FORM}.",
    )


@lru_cache(maxsize=1)
def _checksums() -> dict[str, dict]:
    p = _DATA_DIR / "checksums.json"
    if not p.exists():
        raise DHPError(f"Checksum registry {p} is missing.", "restore data/checksums.json from git.")
    return json.loads(p.read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def _committed(name: str) -> dict:
    p = _DATA_DIR / "selections" / f"{name}.json"
    if not p.exists():
        raise DHPError(f"Selection record {p} is missing.", "restore data/selections/ from git.")
    return json.loads(p.read_text(encoding="utf-8"))


def _sha256(path: Path) -> str:
    from dhp.io import file_sha256

    return file_sha256(path)


def _check_files(files: dict[str, Path], name: str, verify: bool) -> bool:
    """Check each file exists and matches data/checksums.json; True if all match.

    Missing file -> DHPError. Mismatch -> DHPError when verify, else a DataChecksumWarning.
    A user's Answer Equivalence file may have any name: it must match one official AE file.
    """
    registry = _checksums()
    ok = True
    for rel, p in files.items():
        if not p.is_file():
            raise DHPError(f"Data file for {name!r} not found: {p}.", _how_to_get(name))
        actual = _sha256(p)
        if name == "answer_equivalence":
            allowed = {registry[r]["sha256"]: r for r in AE_FILES}
            if actual in allowed and p.stat().st_size == registry[allowed[actual]]["bytes"]:
                continue
            expected = "; ".join(f"{Path(r).name}: {registry[r]['bytes']:,} bytes, sha256 "
                                 f"{registry[r]['sha256']}" for r in AE_FILES)
            problem = (f"{p} ({p.stat().st_size:,} bytes, sha256 {actual}) is not an official "
                       f"Answer Equivalence file ({expected}).")
        else:
            want = registry.get(rel, {})
            if want.get("sha256") == actual:
                continue
            problem = (f"{p} (for {name!r}) has sha256 {actual[:12]}…, but data/checksums.json "
                       f"expects {str(want.get('sha256'))[:12]}… (the version the committed "
                       "selection was made on).")
        ok = False
        if verify:
            raise DHPError(
                problem,
                f"{_how_to_get(name)} To use your copy anyway, pass verify=False: items are then "
                "selected from your file and may differ from the paper-rule selection recorded "
                "in data/selections/.",
            )
        warnings.warn(problem + " Using it anyway (verify=False).", DataChecksumWarning, stacklevel=3)
    return ok


def _how_to_get(name: str) -> str:
    if name == "storycloze":
        return (
            f"request the Story Cloze Test (spring 2016 validation set) at {STORYCLOZE_FORM}, then "
            "pass path='/path/to/cloze_test_val__spring2016.csv' or set DHP_STORYCLOZE_PATH."
        )
    if name == "answer_equivalence":
        return (
            f"download ae_dev.jsonl / ae_test.jsonl from {AE_HOME} (folder v1/) or run "
            "dhp.data.download(dest, ['answer_equivalence']), then pass path= (file or folder), "
            "set DHP_AE_PATH, or put them in <data root>/answer_equivalence/."
        )
    return (
        f"run dhp.data.download('/some/folder', ['{name}']) and pass data_dir='/some/folder' "
        "(or set DHP_DATA_DIR); see data/README.md for the upstream URLs."
    )


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """Folder holding the dataset files: `data_dir` -> env DHP_DATA_DIR -> <repo>/../shared/datasets."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get("DHP_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return project_root().parent / "shared" / "datasets"


def _user_files(name: str, path, data_dir) -> dict[str, Path]:
    """Map the logical file names of Story Cloze / Answer Equivalence to the user's copy."""
    if name == "storycloze":
        given = path or os.environ.get("DHP_STORYCLOZE_PATH")
        if not given:
            raise DHPError("Story Cloze is not openly licensed, so it is never downloaded.",
                           _how_to_get(name))
        p = Path(given).expanduser()
        if p.is_dir():
            p = p / Path(STORYCLOZE_REL).name
        return {STORYCLOZE_REL: p}
    # answer_equivalence
    given = path or os.environ.get("DHP_AE_PATH")
    if given:
        p = Path(given).expanduser()
        if p.is_file():
            return {f"answer_equivalence/{p.name}": p}
        if not p.exists():
            raise DHPError(f"Answer Equivalence path {p} does not exist.", _how_to_get(name))
        folder = p
    else:
        folder = data_root(data_dir) / "answer_equivalence"
    found = {rel: folder / Path(rel).name for rel in AE_FILES if (folder / Path(rel).name).is_file()}
    if not found:
        raise DHPError(f"No ae_dev.jsonl or ae_test.jsonl found in {folder}.", _how_to_get(name))
    return found


# --------------------------------------------------------------------------------------------
# Per-dataset pools. Each returns the eligible items in file order as dicts with item_id,
# source, reference (+ question / wrong_ending where the task has them).
# --------------------------------------------------------------------------------------------

def _read_text(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DHPError(f"{p} is not valid UTF-8 ({e.reason} at byte {e.start}).",
                       "re-download the file; it is corrupted.") from None


def _read_json(p: Path):
    try:
        return json.loads(_read_text(p))
    except json.JSONDecodeError as e:
        raise DHPError(f"{p} is not valid JSON (line {e.lineno}: {e.msg}).",
                       "re-download the file; it is truncated or corrupted.") from None


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


def _pool_summeval(files, only=None):
    summac = _read_json(files["summeval/summac_summeval.json"])
    bart = _read_json(files["summeval/bartscore_summeval.json"])
    by_text = {_norm_article(v["document"]): v for v in summac.values()}
    rows = []
    for doc_id, v in bart.items():
        if only is not None and doc_id not in only:
            continue
        art = by_text.get(_norm_article(v["src"]))
        if art is None:
            raise DHPError(f"SummEval article {doc_id} has no untokenised text in summac_summeval.json.",
                           "re-download both SummEval files (dhp.data.download).")
        refs = [detokenize_ptb(r) for r in v["ref_summs"]]
        rows.append({"item_id": doc_id, "source": art["document"].strip(),
                     "reference": refs[_pick_summeval_reference(refs)]})
    return rows


_HEADER = re.compile(r"[A-Z][A-Z &/-]+")


def sumpubmed_section(text: str, section: str = "BACKGROUND") -> str:
    """The body of an upper-case section (header on its own line) of a SumPubMed file.

    Paragraphs are joined with a newline; runs of spaces inside a line collapse to one.
    Returns "" when the section is absent.
    """
    lines = text.split("\n")
    try:
        start = [ln.strip() for ln in lines].index(section) + 1
    except ValueError:
        return ""
    body = []
    for ln in lines[start:]:
        if _HEADER.fullmatch(ln.strip()):
            break
        if ln.strip():
            body.append(" ".join(ln.split()))
    return "\n".join(body)


def _pool_sumpubmed(files, only=None):
    numbers = sorted({int(re.search(r"_(\d+)\.txt$", rel).group(1)) for rel in files})
    rows = []
    for n in numbers:
        if only is not None and str(n) not in only:
            continue
        src = sumpubmed_section(_read_text(files[f"sumpubmed/text/text_{n}.txt"]))
        ref = sumpubmed_section(_read_text(files[f"sumpubmed/abstract/abstract_{n}.txt"]))
        if src and ref:
            rows.append({"item_id": str(n), "source": src, "reference": ref})
    return rows


def _pool_storycloze(files, only=None):
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


def _pool_answer_equivalence(files, only=None):
    """AE JSONL rows (qid, gold_index, context, question, reference, candidate, score, raw_rating).

    Several rows share a question and gold answer (one per rated candidate): items are the
    distinct (qid, gold_index) pairs, in file order, whose reference exceeds 150 characters.
    """
    rows, seen = [], set()
    for rel in sorted(files):
        p = files[rel]
        for lineno, line in enumerate(_read_text(p).split("\n"), start=1):
            if not line.strip():
                continue
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


def _pool_pubmedqa(files, only=None):
    data = _read_json(files["pubmedqa/ori_pqal.json"])
    rows = []
    for pmid, d in data.items():
        ref = d["LONG_ANSWER"].strip()
        if len(ref) > PUBMEDQA_MIN_CHARS:
            rows.append({"item_id": str(pmid), "source": "\n\n".join(c.strip() for c in d["CONTEXTS"]),
                         "reference": ref, "question": d["QUESTION"].strip()})
    return rows


def _lines(p: Path) -> list[str]:
    # split on "\n" only: str.splitlines would also split on U+2028 etc. inside a segment
    text = _read_text(p)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln.rstrip("\r") for ln in lines]


def _wmt_columns(files, pair):
    src_rel, ref_rel, doc_rel = _wmt_files(pair)
    src, ref, doc = (_lines(files[r]) for r in (src_rel, ref_rel, doc_rel))
    if not len(src) == len(ref) == len(doc):
        raise DHPError(f"WMT22 {pair} files have different line counts "
                       f"({len(src)}, {len(ref)}, {len(doc)}).", _how_to_get("wmt22_" + pair.replace("-", "_")))
    return src, ref, doc


def _pool_wmt22_de_en(files, only=None):
    """Document level: a document's segments joined by a space; reference A > 300 characters."""
    src, ref, doc = _wmt_columns(files, "de-en")
    docs: dict[str, list[int]] = {}
    for i, d in enumerate(doc):
        docs.setdefault(d.strip(), []).append(i)
    rows = []
    for d, idx in docs.items():
        reference = " ".join(ref[i].strip() for i in idx if ref[i].strip())
        if len(reference) > WMT_MIN_CHARS:
            rows.append({"item_id": d, "reference": reference,
                         "source": " ".join(src[i].strip() for i in idx if src[i].strip())})
    return rows


def _pool_wmt22_zh_en(files, only=None):
    """Segment level: item_id is the 1-based line number (= SID in the WMT22 human scores)."""
    src, ref, _ = _wmt_columns(files, "zh-en")
    return [{"item_id": str(i + 1), "source": src[i].strip(), "reference": ref[i].strip()}
            for i in range(len(ref)) if len(ref[i].strip()) > WMT_MIN_CHARS]


_POOLS = {
    "summeval": _pool_summeval,
    "sumpubmed": _pool_sumpubmed,
    "storycloze": _pool_storycloze,
    "answer_equivalence": _pool_answer_equivalence,
    "pubmedqa": _pool_pubmedqa,
    "wmt22_de_en": _pool_wmt22_de_en,
    "wmt22_zh_en": _pool_wmt22_zh_en,
}
_LANGS = {"wmt22_de_en": ("de", "en"), "wmt22_zh_en": ("zh", "en")}

SELECTION_RULES = {
    "summeval": "all 100 articles; per article the reference (of 11) with the most sentences "
                "(pysbd, after PTB detokenisation); ties -> lowest index in ref_summs",
    "sumpubmed": "articles 1..500 whose text and abstract both have a BACKGROUND section; "
                 "source = text BACKGROUND, reference = abstract BACKGROUND",
    "storycloze": "all 1,871 spring-2016 validation stories; source = 4 sentences, "
                  "reference = right ending, wrong_ending = the other ending",
    "answer_equivalence": "distinct (qid, gold_index) with reference > 150 characters",
    "pubmedqa": "PubMedQA-L questions with LONG_ANSWER > 150 characters; source = contexts",
    "wmt22_de_en": "documents (segments joined) whose reference A > 300 characters",
    "wmt22_zh_en": "segments whose reference A > 300 characters",
}


def _check_name(name: str) -> None:
    if name not in DATASET_TASK:
        raise DHPError(f"Unknown dataset {name!r}.",
                       f"use one of {list(DATASETS)}, or dhp.data.load_custom for your own file.")


def select_ids(pool_ids: list[str], n_items: int, seed: int) -> list[str]:
    """The seeded selection: `pool_ids` shuffled by default_rng(seed).permutation, first n_items.

    Because the permutation does not depend on n_items, smaller selections are prefixes of
    larger ones with the same seed.
    """
    if not isinstance(n_items, (int, np.integer)) or isinstance(n_items, bool) or n_items < 1:
        raise DHPError(f"n_items must be a positive integer, got {n_items!r}.", "pass e.g. n_items=100.")
    if n_items > len(pool_ids):
        raise DHPError(f"n_items={n_items} but only {len(pool_ids)} items are eligible.",
                       f"pass n_items <= {len(pool_ids)}.")
    order = np.random.default_rng(seed).permutation(len(pool_ids))
    return [pool_ids[i] for i in order[:n_items]]


def _frame(name: str, rows: list[dict]) -> pd.DataFrame:
    src_lang, tgt_lang = _LANGS.get(name, ("", ""))
    records = [{
        "dataset": name, "task": DATASET_TASK.get(name, ""), "item_id": str(r["item_id"]),
        "source": r.get("source", ""), "reference": r.get("reference", ""),
        "question": r.get("question", ""), "wrong_ending": r.get("wrong_ending", ""),
        "src_lang": src_lang, "tgt_lang": tgt_lang,
    } | {k: r[k] for k in ("dataset", "task", "src_lang", "tgt_lang") if k in r} for r in rows]
    return pd.DataFrame.from_records(records, columns=list(COLUMNS)).astype(object)


def load_dataset(
    name: str,
    n_items: int = SELECTION_SIZE,
    seed: int = 0,
    data_dir: str | os.PathLike | None = None,
    path: str | os.PathLike | None = None,
    *,
    verify: bool = True,
) -> pd.DataFrame:
    """Load one of the paper's datasets with its selection rule, as the dataset table.

    Parameters: `name` in DATASETS; `n_items` items (the paper uses 100; any n up to the pool
    size; n <= 100 is a prefix of the 100-item selection for the same seed); `seed` for the
    selection; `data_dir` overrides the data root; `path` is the user's copy of Story Cloze (CSV
    or its folder) or Answer Equivalence (a JSONL or a folder with ae_dev/ae_test.jsonl);
    `verify=False` turns a checksum mismatch from an error into a warning (for your own copies
    or test fixtures).

    Returns a DataFrame with exactly these str columns ("" where not applicable), one row per
    item, in selection order:
      dataset       dataset name (e.g. "summeval")
      task          summarization | story_completion | question_answering | translation
      item_id       id unique within the dataset (CNN/DM id, article number, story id, qid_goldindex,
                    PMID, WMT document id, or 1-based WMT line number)
      source        what a candidate is judged against: article / 4-sentence story /
                    QA contexts / source-language text
      reference     the high-quality text that gets perturbed: summary / right ending /
                    long answer / reference translation (A)
      question      the question (QA datasets)
      wrong_ending  the incorrect fifth sentence (Story Cloze)
      src_lang, tgt_lang  ISO codes for translation ("de"/"zh" -> "en")
    """
    _check_name(name)
    if name in ("storycloze", "answer_equivalence"):
        files = _user_files(name, path, data_dir)
    else:
        root = data_root(data_dir)
        if not root.is_dir():
            raise DHPError(f"Data folder {root} does not exist.", _how_to_get(name))
        rels = dataset_files(name, sumpubmed="all")
        files = {rel: root / rel for rel in rels}

    committed = _committed(name)
    use_committed = bool(committed.get("item_ids")) and committed.get("seed") == seed and (
        isinstance(n_items, (int, np.integer)) and not isinstance(n_items, bool)
        and 0 < n_items <= len(committed["item_ids"]))
    if name == "sumpubmed" and use_committed:
        # only the 200 files of the recorded selection are needed (download's default subset)
        ids = committed["item_ids"][:n_items]
        needed = {rel: files[rel] for rel in _sumpubmed_files(int(i) for i in ids)}
        if _check_files(needed, name, verify):
            rows = {r["item_id"]: r for r in _pool_sumpubmed(needed)}
            return _frame(name, [rows[i] for i in ids if i in rows])
        use_committed = False  # user's files differ: select from what they have
    if name == "sumpubmed":
        missing = [p for p in files.values() if not p.is_file()]
        if missing:
            raise DHPError(
                f"SumPubMed with seed={seed}, n_items={n_items} needs the full pool "
                f"(articles 1..500); {len(missing)} files are missing, e.g. {missing[0]}.",
                "run dhp.data.download(dest, ['sumpubmed'], sumpubmed='all') and pass data_dir=dest.")
    ok = _check_files(files, name, verify)
    pool = _POOLS[name](files)
    by_id = {r["item_id"]: r for r in pool}
    if use_committed and ok:
        ids = committed["item_ids"][:n_items]
        if any(i not in by_id for i in ids):
            raise DHPError(f"data/selections/{name}.json lists ids that the files do not contain.",
                           "regenerate it with scripts/make_selections.py.")
    else:
        ids = select_ids(list(by_id), n_items, seed)
    return _frame(name, [by_id[i] for i in ids])


# --------------------------------------------------------------------------------------------
# Bring your own dataset
# --------------------------------------------------------------------------------------------

_REQUIRED = ("item_id", "source", "reference")
_OPTIONAL = ("question", "wrong_ending", "src_lang", "tgt_lang")


def _custom_records(p: Path) -> list[tuple[str, dict]]:
    """(where, record) pairs; `where` names the row as the user sees it in an editor."""
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise DHPError(f"Cannot read {p}: {e.strerror or e}.",
                       "check the path and that the file is readable.") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        offset = e.start + (3 if raw.startswith(b"\xef\xbb\xbf") else 0)
        line = raw[:offset].count(b"\n") + 1
        raise DHPError(
            f"{p} line {line} contains bytes that are not UTF-8 (byte {raw[offset:offset + 1]!r} "
            f"at offset {offset}).",
            "save the file as UTF-8 (e.g. in your editor choose 'UTF-8', or "
            "`iconv -f latin1 -t utf-8 in.csv > out.csv`).") from None
    suffix = p.suffix.lower()
    out = []
    if suffix in (".jsonl", ".ndjson"):
        for lineno, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DHPError(f"{p} line {lineno} is not valid JSON ({e.msg}).",
                               "write one JSON object per line.") from None
            if not isinstance(rec, dict):
                raise DHPError(f"{p} line {lineno} is a JSON {type(rec).__name__}, not an object.",
                               'write one object per line, e.g. {"item_id": "1", "source": ..., '
                               '"reference": ...}.')
            out.append((f"line {lineno}", rec))
    elif suffix == ".csv":
        reader = csv.reader(io.StringIO(text, newline=""))
        try:
            header = next(reader)
        except StopIteration:
            header = []
        except csv.Error as e:
            raise DHPError(f"{p} line 1 is not valid CSV ({e}).", "fix the header line.") from None
        header = [h.strip() for h in header]
        start = reader.line_num + 1
        row = 0
        try:
            for values in reader:
                row += 1
                where = f"row {row} (line {start} of the file)"
                if values and len(values) != len(header):
                    raise DHPError(f"{p} {where} has {len(values)} fields but the header has "
                                   f"{len(header)}.", "quote fields that contain commas or newlines.")
                if values:
                    out.append((where, dict(zip(header, values))))
                start = reader.line_num + 1
        except csv.Error as e:
            raise DHPError(f"{p} line {start} is not valid CSV ({e}).",
                           "check the quoting on that line.") from None
        if not header or header == [""]:
            raise DHPError(f"{p} is empty.", f"add a header line with {list(_REQUIRED)} and rows.")
        missing = [c for c in _REQUIRED if c not in header]
        if missing:
            raise DHPError(f"{p} lacks required columns {missing} (it has {header}).",
                           f"add columns {list(_REQUIRED)} (plus 'task' or pass task=).")
    else:
        raise DHPError(f"{p} has extension {p.suffix!r}; only .csv and .jsonl are supported.",
                       "save the file as CSV (with a header) or JSONL (one object per line).")
    return out


def load_custom(
    path: str | os.PathLike,
    task: str | None = None,
    dataset: str | None = None,
) -> pd.DataFrame:
    """Load your own CSV or JSONL file into the dataset table (same columns as `load_dataset`).

    Each row needs `item_id`, `source`, `reference` and a task (a `task` column, or the `task`
    argument for all rows; one of dhp.schema.TASK_METRICS). Optional columns: `question`,
    `wrong_ending`, `src_lang`, `tgt_lang`, `dataset` (else the `dataset` argument, else the
    file name without extension). Other columns are ignored. Rows keep file order.

    Raises DHPError naming the file, the row (1-based: CSV "row N (line L of the file)" where the
    header is line 1; JSONL "line L") and the fix for: unreadable/missing file, unsupported
    extension, non-UTF-8 bytes, invalid CSV/JSON, missing columns, empty item_id/source/reference,
    duplicate item_id, missing or unknown task.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise DHPError(f"Cannot read {p}: no such file.", "check the path (relative paths are "
                       "relative to the current directory).")
    if task is not None and task not in TASK_METRICS:
        raise DHPError(f"Unknown task {task!r} (argument task=).", f"use one of {sorted(TASK_METRICS)}.")
    records = _custom_records(p)
    if not records:
        raise DHPError(f"{p} has no data rows.", "add at least one row with item_id, source, reference.")
    rows, seen = [], {}
    for where, rec in records:
        missing = [c for c in _REQUIRED if c not in rec]
        if missing:
            raise DHPError(f"{p} {where} lacks {missing}.",
                           f"give every row the fields {list(_REQUIRED)}.")
        for col in (*_REQUIRED, *_OPTIONAL, "task", "dataset"):
            v = rec.get(col)
            if (v is not None and not isinstance(v, (str, int))) or isinstance(v, bool):
                raise DHPError(f"{p} {where}: {col} is a {type(v).__name__}, not text.",
                               f"make {col} a string.")
        rec = {k: ("" if v is None else v) for k, v in rec.items()}  # JSON null = empty
        item_id = str(rec["item_id"]).strip()
        for col, value in (("item_id", item_id), ("source", rec["source"]),
                           ("reference", rec["reference"])):
            if not str(value).strip():
                raise DHPError(f"{p} {where}: {col} is empty.", f"fill in {col} or delete the row.")
        if item_id in seen:
            raise DHPError(f"{p} {where}: item_id {item_id!r} duplicates {seen[item_id]}.",
                           "give every row a unique item_id.")
        seen[item_id] = where
        row_task = str(rec.get("task") or "").strip()
        if task is not None:
            if row_task and row_task != task:
                raise DHPError(f"{p} {where}: task {row_task!r} contradicts task={task!r}.",
                               "drop the argument or fix the column.")
            row_task = task
        if not row_task:
            raise DHPError(f"{p} {where}: no task.",
                           f"add a 'task' column or pass task= (one of {sorted(TASK_METRICS)}).")
        if row_task not in TASK_METRICS:
            raise DHPError(f"{p} {where}: unknown task {row_task!r}.",
                           f"use one of {sorted(TASK_METRICS)}.")
        rows.append({
            "dataset": dataset or str(rec.get("dataset") or "").strip() or p.stem,
            "task": row_task, "item_id": item_id,
            "source": str(rec["source"]).strip(), "reference": str(rec["reference"]).strip(),
            **{c: str(rec.get(c) or "").strip() for c in _OPTIONAL},
        })
    return _frame("", rows)


# --------------------------------------------------------------------------------------------
# Download
# --------------------------------------------------------------------------------------------

class _SafeUnpickler(pickle.Unpickler):
    """Unpickle plain containers only: a downloaded pickle must not run code."""

    _ALLOWED = {("collections", "OrderedDict"), ("numpy", "dtype"),
                ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar")}

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a downloaded pickle")


def _plain(obj):
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        return obj.item()  # numpy scalar
    return obj


def _bartscore_pickle_to_json(blob: bytes) -> bytes:
    # the shared copy is json.dumps(indent=0, ensure_ascii=False) of the pickle's contents
    data = _plain(_SafeUnpickler(io.BytesIO(blob)).load())
    return json.dumps(data, indent=0, ensure_ascii=False).encode("utf-8")


def _fetch(url: str, timeout: float) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        raise DHPError(f"Download of {url} failed: HTTP {e.code} {e.reason}.",
                       "check the URL / base_url, or fetch the file by hand (see data/README.md).") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise DHPError(f"Download of {url} failed: {reason}.",
                       "check your internet connection or base_url, then retry.") from None


def download(
    dest: str | os.PathLike,
    datasets: Iterable[str] | None = None,
    base_url: str | None = None,
    *,
    sumpubmed: str = "selection",
    timeout: float = 60.0,
) -> list[Path]:
    """Fetch the openly licensed dataset files into `dest` (same layout as the data root).

    `datasets`: names from DATASETS (default: all but Story Cloze, which is never downloaded).
    `base_url`: fetch `<base_url>/<relative path>` from a mirror with the data-root layout
    instead of the upstream URLs (used by the tests with a loopback server). `sumpubmed`:
    "selection" (default) fetches the 200 files of the committed 100-item seed-0 selection,
    "all" the 1,000 files of the pool (needed for other seeds or n_items > 100).

    Each file is checked against data/checksums.json (sha256 and size) and written atomically
    (temporary file + rename); files already present with the right checksum are skipped.
    Returns the paths of the files now present. Raises DHPError on network errors or checksum
    mismatch (nothing is written for that file).
    """
    dest = Path(dest).expanduser()
    names = [n for n in DATASETS if n != "storycloze"] if datasets is None else list(datasets)
    for n in names:
        _check_name(n)
        if n == "storycloze":
            raise DHPError("Story Cloze is not openly licensed and cannot be downloaded.",
                           _how_to_get("storycloze"))
    rels: list[str] = []
    for n in names:
        for rel in dataset_files(n, sumpubmed=sumpubmed):
            if rel not in rels:
                rels.append(rel)
    registry = _checksums()
    out = []
    for rel in rels:
        target = dest / rel
        expected = registry[rel]
        if target.is_file() and _sha256(target) == expected["sha256"]:
            out.append(target)
            continue
        if base_url:
            url = base_url.rstrip("/") + "/" + rel
            blob = _fetch(url, timeout)
        else:
            url = upstream_url(rel)
            blob = _fetch(url, timeout)
            if url.endswith(".pkl"):
                try:
                    blob = _bartscore_pickle_to_json(blob)
                except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
                    raise DHPError(f"{url} is not the expected BARTScore pickle ({e}).",
                                   "retry later or fetch the file by hand (see data/README.md).") from None
        actual = hashlib.sha256(blob).hexdigest()
        if actual != expected["sha256"] or len(blob) != expected["bytes"]:
            raise DHPError(
                f"{url} gave {len(blob)} bytes with sha256 {actual[:12]}…; expected "
                f"{expected['bytes']} bytes, {expected['sha256'][:12]}… (data/checksums.json).",
                "the upstream file changed or the transfer was cut: retry, or fetch the pinned "
                "version by hand (see data/README.md).")
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.chmod(tmp, 0o644)  # mkstemp creates 0600; data files should be readable like any download
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        out.append(target)
    return out


# --------------------------------------------------------------------------------------------
# Length statistics (paper Table 2)
# --------------------------------------------------------------------------------------------

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


def load_many(
    names: Iterable[str] | None = None,
    n_items: int = SELECTION_SIZE,
    seed: int = 0,
    data_dir: str | os.PathLike | None = None,
    paths: dict[str, str | os.PathLike] | None = None,
) -> tuple[pd.DataFrame, dict[str, str]]:
    """Load several datasets (default: all seven) into one dataset table, skipping unavailable ones.

    `paths` maps a dataset name to its `path=` (Story Cloze, Answer Equivalence). Returns
    (table with the `load_dataset` columns, {skipped dataset: the DHPError message}).
    """
    frames, skipped = [], {}
    for name in names or DATASETS:
        try:
            frames.append(load_dataset(name, n_items, seed, data_dir, (paths or {}).get(name)))
        except DHPError as e:
            skipped[name] = str(e)
    table = pd.concat(frames, ignore_index=True) if frames else _frame("", [])
    return table, skipped
