"""Names shared by every stage: tasks, their quality metrics, levels and the scores table's columns."""

from dhp.errors import DHPError

TASK_METRICS: dict[str, tuple[str, ...]] = {
    "summarization": ("coherence", "consistency", "fluency", "relevance"),
    "story_completion": ("coherence", "consistency", "fluency"),
    "question_answering": ("answer_quality",),
    "translation": ("accuracy", "fluency"),
}

#: Each dataset's task: the paper's seven here; a pool of your own declares its task on the pool
#: (``@dataset_pool(name, task=...)``, dhp.datasets.files), which adds it here when it registers.
DATASET_TASK: dict[str, str] = {
    "summeval": "summarization",
    "sumpubmed": "summarization",
    "storycloze": "story_completion",
    "answer_equivalence": "question_answering",
    "pubmedqa": "question_answering",
    "wmt22_de_en": "translation",
    "wmt22_zh_en": "translation",
}

LEVELS = ("character", "word", "sentence")
ORIGINAL = "original"


def metrics_for(task: str) -> tuple[str, ...]:
    try:
        return TASK_METRICS[task]
    except KeyError:
        raise DHPError(
            f"Unknown task {task!r}.", f"use one of {sorted(TASK_METRICS)}."
        ) from None

#: The negative control: the original re-scored through a separate judge call (a formatting-only
#: variant whose cache key differs), so its D measures the judge's test-retest noise.
CONTROL = "control"

#: The scores table (dhp.judging.score_perturbed): the contract the analyses read, then the judge's extras.
SCORE_COLUMNS = ["dataset", "task", "judge", "mode", "item_id", "perturbation", "severity", "level", "metric",
                 "score", "n_valid", "n_failed"]
SCORE_EXTRA_COLUMNS = ["failure", "prob_mass", "truncated", "fallback", "prompt_tokens", "completion_tokens"]
