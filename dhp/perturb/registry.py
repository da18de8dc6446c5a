"""The perturbation methods of the DHP paper (Table 2), as data: which task gets which method,
at which level and severities, and the per-dataset k values.

This module is the single place where k values live; everything else reads them from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from dhp.errors import DHPError
from dhp.schema import DATASET_TASK, CONTROL

# Methods that the paper ran with an LLM (GPT-4-Turbo). With perturber="rule" they use the
# rule-based counterparts in entities.py / grammar.py / paraphrase.py.
LLM_METHODS = frozenset({"fictional_entities", "grammatical_errors", "rewrite_insert"})

# perturbation -> (level, what it does). Order here is the order of rows in the output table.
DESCRIPTIONS: dict[str, tuple[str, str]] = {
    "char_deletion": ("character", "delete k random alphanumeric characters"),
    "char_typo": ("character", "add k typographical errors with the `typo` package"),
    "word_deletion": ("word", "delete k contiguous words"),
    "fictional_entities": ("word", "replace named entities / numbers / terms with fictional ones"),
    "grammatical_errors": ("word", "introduce grammatical errors (agreement, tense, article, ...)"),
    "sentence_reorder": ("sentence", "shuffle k sentences (k=2 minor, all major); never the original order"),
    "rewrite_insert": ("sentence", "rephrase sentence(s) and insert each rewrite right after its original"),
    "random_ending": ("sentence", "replace the ending with the ending of another story"),
    "wrong_ending": ("sentence", "replace the ending with the dataset's wrong ending"),
    "random_answer": ("sentence", "replace the answer with the answer to another question"),
    CONTROL: ("none", "negative control: the same words, one sentence per line, scored by its own call"),
}

MINOR_MAJOR = ("minor", "major")
SINGLE = ("single",)

# task -> [(perturbation, severities)] (paper Table 2; the negative control added for the statistics).
TASK_METHODS: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "summarization": [
        ("char_deletion", MINOR_MAJOR),
        ("char_typo", MINOR_MAJOR),
        ("fictional_entities", MINOR_MAJOR),
        ("grammatical_errors", MINOR_MAJOR),
        ("sentence_reorder", MINOR_MAJOR),
        ("rewrite_insert", MINOR_MAJOR),
        (CONTROL, SINGLE),
    ],
    "story_completion": [
        ("char_deletion", SINGLE),
        ("char_typo", SINGLE),
        ("fictional_entities", SINGLE),
        ("grammatical_errors", SINGLE),
        ("random_ending", SINGLE),
        ("wrong_ending", SINGLE),
        (CONTROL, SINGLE),
    ],
    "question_answering": [
        ("char_deletion", MINOR_MAJOR),
        ("char_typo", MINOR_MAJOR),
        ("fictional_entities", MINOR_MAJOR),
        ("grammatical_errors", MINOR_MAJOR),
        ("random_answer", SINGLE),
        (CONTROL, SINGLE),
    ],
    "translation": [
        ("char_deletion", MINOR_MAJOR),
        ("char_typo", MINOR_MAJOR),
        ("word_deletion", MINOR_MAJOR),
        ("fictional_entities", MINOR_MAJOR),
        ("grammatical_errors", MINOR_MAJOR),
        (CONTROL, SINGLE),
    ],
}

_CHAR_10_50 = {"minor": 10, "major": 50}
_CHAR_20_100 = {"minor": 20, "major": 100}
_CHAR_5_25 = {"minor": 5, "major": 25}

# dataset -> perturbation -> severity -> k (paper Table 2). "all" = every sentence.
K_TABLE: dict[str, dict[str, dict[str, int | str]]] = {
    "summeval": {
        "char_deletion": _CHAR_10_50,
        "char_typo": _CHAR_10_50,
        "sentence_reorder": {"minor": 2, "major": "all"},
    },
    "sumpubmed": {
        "char_deletion": _CHAR_20_100,
        "char_typo": _CHAR_20_100,
        "sentence_reorder": {"minor": 2, "major": "all"},
    },
    "storycloze": {"char_deletion": {"single": 5}, "char_typo": {"single": 5}},
    "answer_equivalence": {"char_deletion": _CHAR_5_25, "char_typo": _CHAR_5_25},
    "pubmedqa": {"char_deletion": _CHAR_5_25, "char_typo": _CHAR_5_25},
    "wmt22_de_en": {"char_deletion": _CHAR_10_50, "char_typo": _CHAR_10_50, "word_deletion": _CHAR_5_25},
    "wmt22_zh_en": {"char_deletion": _CHAR_10_50, "char_typo": _CHAR_10_50, "word_deletion": _CHAR_5_25},
}

@dataclass(frozen=True)
class Method:
    """One cell of Table 2 for one dataset: a (perturbation, severity) with its level and k."""

    perturbation: str
    level: str
    severity: str
    k: int | str | None  # None where the method has no count (entities, grammar, rewrite, ...)


def task_of(dataset: str) -> str:
    try:
        return DATASET_TASK[dataset]
    except KeyError:
        raise DHPError(
            f"Unknown dataset {dataset!r}.", f"use one of {sorted(DATASET_TASK)}."
        ) from None


# Your own dataset (dhp.data.load_custom) gets the k values of the paper's dataset of the same task.
TASK_DEFAULT_K_SOURCE = {
    "summarization": "summeval",
    "story_completion": "storycloze",
    "question_answering": "pubmedqa",
    "translation": "wmt22_zh_en",
}


def methods_for(dataset: str, perturbations: list[str] | None = None, task: str | None = None) -> list[Method]:
    """The methods that apply to `dataset`, optionally restricted to the named `perturbations`.

    `task` is needed only for a dataset of your own (not one of the paper's); its k values are those
    of the paper's dataset of the same task (`TASK_DEFAULT_K_SOURCE`).
    Raises DHPError for an unknown dataset without a task, an unknown task or perturbation name, or
    a perturbation that the paper does not define for this dataset's task.
    """
    if dataset in DATASET_TASK or task is None:
        task = task_of(dataset)
    elif task not in TASK_METHODS:
        raise DHPError(f"Unknown task {task!r} for dataset {dataset!r}.", f"use one of {sorted(TASK_METHODS)}.")
    k_source = dataset if dataset in K_TABLE else TASK_DEFAULT_K_SOURCE[task]
    table = TASK_METHODS[task]
    available = [p for p, _ in table]
    if perturbations is not None:
        wanted = list(dict.fromkeys(perturbations))
        for p in wanted:
            if p == "placebo":
                raise DHPError("The identical-text 'placebo' was replaced by the negative control 'control' "
                               "(an identical text reuses the original's cached judge answer, so it measured "
                               "nothing).", "use perturbations=['control'].")
            if p not in DESCRIPTIONS:
                raise DHPError(
                    f"Unknown perturbation {p!r}.", f"use one of {sorted(DESCRIPTIONS)}."
                )
            if p not in available:
                raise DHPError(
                    f"Perturbation {p!r} is not defined for dataset {dataset!r} (task {task}).",
                    f"use one of {available} for this dataset.",
                )
    out = []
    for p, severities in table:
        if perturbations is not None and p not in perturbations:
            continue
        for sev in severities:
            k = K_TABLE.get(k_source, {}).get(p, {}).get(sev)
            out.append(Method(p, DESCRIPTIONS[p][0], sev, k))
    return out


def k_for(dataset: str, task: str | None, perturbation: str, severity: str) -> int | str | None:
    """The k of one (dataset, perturbation, severity); datasets of your own use their task's default."""
    source = dataset if dataset in K_TABLE else TASK_DEFAULT_K_SOURCE.get(task or "", "")
    return K_TABLE.get(source, {}).get(perturbation, {}).get(severity)


def methods_table(dataset: str | None = None):
    """Table 2 as a tidy DataFrame.

    Columns: dataset, task, perturbation, level, severity, k (int, "all" or None),
    llm_method (bool: the paper used an LLM for it), description.
    """
    import pandas as pd

    rows = []
    for ds in [dataset] if dataset else sorted(DATASET_TASK):
        for m in methods_for(ds):
            rows.append(
                {
                    "dataset": ds,
                    "task": task_of(ds),
                    "perturbation": m.perturbation,
                    "level": m.level,
                    "severity": m.severity,
                    "k": m.k,
                    "llm_method": m.perturbation in LLM_METHODS,
                    "description": DESCRIPTIONS[m.perturbation][1],
                }
            )
    return pd.DataFrame(rows)
