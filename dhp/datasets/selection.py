"""The seeded, prefix-stable selection of items and `load_dataset`, the one loader of the paper's datasets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from dhp.errors import DHPError
from dhp.schema import DATASET_TASK
from dhp.datasets import declared_files
from dhp.datasets.files import (
    COLUMNS, PAPER_DATASETS, POOLS, SELECTION_SIZE, _check_files, _check_name, _committed,
    _sumpubmed_files, _user_files, data_root, dataset_files,
)
from dhp.datasets import sumpubmed

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



def selection_rule(name: str) -> str:
    """The eligibility rule of dataset ``name`` in words: the paper's (above) or the one its pool declares."""
    _check_name(name)
    return SELECTION_RULES.get(name) or POOLS[name].selection


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
    files = _dataset_paths(name, path, data_dir)
    committed = _committed(name)
    use_committed = bool(committed.get("item_ids")) and committed.get("seed") == seed and (
        isinstance(n_items, (int, np.integer)) and not isinstance(n_items, bool)
        and 0 < n_items <= len(committed["item_ids"]))
    if name == "sumpubmed":
        if use_committed:
            table = _recorded_sumpubmed(files, committed["item_ids"][:n_items], verify, data_dir)
            if table is not None:
                return table
            use_committed = False  # user's files differ: select from what they have
        _require_sumpubmed_pool(files, seed, n_items, data_dir)
    ok = _check_files(files, name, verify)
    pool = POOLS.lookup(name)(files)
    by_id = {r["item_id"]: r for r in pool}
    if use_committed and ok:
        ids = committed["item_ids"][:n_items]
        if any(i not in by_id for i in ids):
            raise DHPError(f"dhp/resources/selections/{name}.json lists ids that the files do not contain.",
                           "regenerate it with scripts/make_selections.py.")
    else:
        ids = select_ids(list(by_id), n_items, seed)
    return _frame(name, [by_id[i] for i in ids])


def _dataset_paths(name: str, path, data_dir) -> dict:
    """relative path -> file of the dataset: the user's copy (Story Cloze, Answer Equivalence) or the
    files under the data root."""
    if name in ("storycloze", "answer_equivalence"):
        return _user_files(name, path, data_dir)
    if name not in PAPER_DATASETS:  # a pool of your own: its declared files, the fetched ones fetched if missing
        own = POOLS[name].files
        declared_files.ensure([rel for rel, src in own.items() if src is not None], data_dir, verify=False)
        root = data_root(data_dir)
        return {rel: Path(rel).expanduser() if Path(rel).expanduser().is_absolute() else root / rel for rel in own}
    rels = dataset_files(name, sumpubmed="all")
    if name != "sumpubmed":  # SumPubMed's recorded selection needs 200 of its 1,000 files: fetched below
        declared_files.ensure(rels, data_dir, verify=False)
    root = data_root(data_dir)
    return {rel: root / rel for rel in rels}


def _recorded_sumpubmed(files: dict, ids: list[str], verify: bool, data_dir) -> pd.DataFrame | None:
    """The recorded SumPubMed selection read from its files only (fetched when missing), or None when the
    user's files differ from the recorded ones."""
    needed = {rel: files[rel] for rel in _sumpubmed_files(int(i) for i in ids)}
    declared_files.ensure(list(needed), data_dir, verify=False)
    if not _check_files(needed, "sumpubmed", verify):
        return None
    rows = {r["item_id"]: r for r in sumpubmed.pool(needed)}
    return _frame("sumpubmed", [rows[i] for i in ids if i in rows])


def _require_sumpubmed_pool(files: dict, seed: int, n_items, data_dir) -> None:
    """Any selection other than the recorded one draws from the full pool (articles 1..500): all its files
    must be present (fetched when missing)."""
    declared_files.ensure(list(files), data_dir, verify=False)


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
    for name in names or PAPER_DATASETS:
        try:
            frames.append(load_dataset(name, n_items, seed, data_dir, (paths or {}).get(name)))
        except DHPError as e:
            skipped[name] = str(e)
    table = pd.concat(frames, ignore_index=True) if frames else _frame("", [])
    return table, skipped
