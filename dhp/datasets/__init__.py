"""Datasets, one module each: the DHP paper's seven selections (summeval, sumpubmed, storycloze,
answer_equivalence, pubmedqa, wmt22), your own files (custom), download, length statistics (lengths),
and the human ratings used by the other methods (summeval_annotators, wmt22_human, llmbar, criteria_hu2024).

Every loader returns the *dataset table* (see `load_dataset`): one row per item, all columns str.
Selections are deterministic: the pool of eligible items is put in file order, shuffled with
`numpy.random.default_rng(seed).permutation`, and the first `n_items` are taken, so a small run is
always a prefix (subset) of the full 100-item run with the same seed. The 100 ids for seed 0 and
the sha256 of the files they were drawn from are committed in `dhp/resources/selections/` (ids only, never
texts); every file read is declared, with its upstream URL, size and sha256, in
`dhp/resources/data_registry.json` (dhp.datasets.declared_files) and fetched on first need (docs/data.md).

Data root: explicit `data_dir` -> env `DHP_DATA_DIR` -> the per-user cache directory.
Story Cloze is only read from a user-supplied copy (`path=` or env `DHP_STORYCLOZE_PATH`),
Answer Equivalence from `path=`, env `DHP_AE_PATH` or `<data root>/answer_equivalence/`.
"""

from dhp.datasets import declared_files
from dhp.datasets.custom import CUSTOM_SUFFIXES, DatasetName, is_own_file, load_custom, load_items
from dhp.datasets.downloader import download
from dhp.datasets.files import (
    COLUMNS, DATASETS, PAPER_TABLE2, SELECTION_SIZE, DataChecksumWarning, data_root, dataset_files, upstream_url,
)
from dhp.datasets.lengths import reference_lengths, table2_comparison
from dhp.datasets.selection import POOLS, SELECTION_RULES, load_dataset, load_many, select_ids

__all__ = [
    "COLUMNS", "DATASETS", "PAPER_TABLE2", "POOLS", "SELECTION_RULES", "SELECTION_SIZE", "DataChecksumWarning",
    "data_root", "dataset_files", "download", "load_custom", "load_dataset", "load_items", "CUSTOM_SUFFIXES", "DatasetName", "is_own_file", "load_many", "reference_lengths",
    "declared_files", "select_ids", "table2_comparison", "upstream_url",
]
