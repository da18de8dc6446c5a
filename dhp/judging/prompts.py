"""Judge prompts: the G-Eval templates of dhp/prompts/judge/ filled with one item and one candidate."""

from __future__ import annotations



from dhp import prompts
from dhp.errors import DHPError
from dhp.schema import metrics_for

_CUT_MARK = " [...]"
_LANG_NAMES = {"de": "German", "zh": "Chinese", "en": "English", "fr": "French", "ru": "Russian",
               "ja": "Japanese", "cs": "Czech", "uk": "Ukrainian"}

def load_prompt(task: str, metric: str) -> str:
    """The G-Eval template for (task, metric), from ``dhp/prompts/judge/<task>_<metric>.txt``."""
    if metric not in metrics_for(task):
        raise DHPError(f"Metric {metric!r} is not defined for task {task!r}.",
                       f"use one of {list(metrics_for(task))}.")
    return prompts.load("judge", f"{task}_{metric}")


def _slots(item: dict, candidate: str) -> dict[str, str]:
    return {"source": item.get("source", "") or "", "candidate": candidate,
            "question": item.get("question", "") or "",
            "src_lang": _LANG_NAMES.get(item.get("src_lang") or "", item.get("src_lang") or "the source language"),
            "tgt_lang": _LANG_NAMES.get(item.get("tgt_lang") or "", item.get("tgt_lang") or "the target language")}


def build_prompt(task: str, metric: str, item: dict, candidate: str) -> str:
    """The user message for one judge call: instructions, then the source, then the candidate (so that
    variants of one item share the longest possible prefix)."""
    return prompts.fill(load_prompt(task, metric), _slots(item, candidate))


def likelihood_prefix(task: str, item: dict) -> str:
    """Text the candidate is scored after in likelihood mode (instruction + source)."""
    metrics_for(task)
    return prompts.fill(prompts.load("judge", f"likelihood_{task}"), _slots(item, ""))
