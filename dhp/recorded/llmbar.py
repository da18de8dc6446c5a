"""LLMBar's recorded verdicts (Zeng et al. 2023; github.com/princeton-nlp/LLMBar @ 900616b, MIT): the
``result.json`` files its LLMEvaluator/evaluate.py wrote, one per data set × judge × prompting strategy, at
``<Dataset>/{LLMBar/<subset path>|Processed/<name>}/evaluators/<judge>/<strategy>/result.json``.

Each file is a list of ``{input, output_1, output_2, label, results}``; the last entry of ``results`` holds
``"swap = False"`` (output_1 shown first) and ``"swap = True"`` (the two swapped), each with ``winner``: "1",
"2" in the data set's own numbering (evaluate.py already mapped the swapped answer back) or null when the
reply matched none of the strategy's answer patterns. Earlier entries are a strategy's generated questions
or reference answer (Metrics, Reference) or, for Swap strategies, the first round (the judge is asked again
when the two orders disagree, and evaluate.py scores the last round). Rating strategies score each output
alone (``score_1``, ``score_2``: the reply, an integer 1–10) and evaluate.py derives the winners: order 12
"1" when score_1 > score_2 else "2", order 21 "2" when score_2 > score_1 else "1" — so a tie counts as two
different verdicts; those verdicts are kept as recorded.

Rows (pairwise_verdicts.parquet): judge = the evaluator folder's name (GPT-4, ChatGPT, ChatGPT-0301, PaLM2,
LLaMA2, Falcon); strategy = the strategy folder's name (Vanilla, Swap_CoT, ...); subset = the name
dhp.datasets.llmbar uses (Natural, Adversarial_GPTInst, ...; the re-processed sets as Processed_FairEval,
Processed_LLMEval^2, Processed_MT-Bench); item_id = ``<subset>-<index in the file>`` (the index in the
data set's dataset.json too: every result.json lists the items in that order, the same ids as
dhp.datasets.llmbar.load_llmbar); order "12" (swap = False) / "21" (swap = True); verdict; label; f1/f2 =
the Rating scores (NaN elsewhere); source = the path from ``LLMBar/`` or ``Processed/`` on (upstream's path
without its leading ``Dataset/``) and the sha256.

No verdict is made up: a null winner is None with failure "no verdict: ..." (the reply's start); where a
Rating reply is not an integer, evaluate.py's fallback ("1" in order 12, "2" in order 21) is not kept —
the verdict is None and the score NaN, with the reason.

Each row's protocol is its judge's own config (dhp.analysis.decomposition.protocol_of, from the judge and the
source): GPT-4's, ChatGPT's and ChatGPT-0301's are the live protocol; PaLM2's, LLaMA2's and Falcon's say how
they differ (message format, decoding, PaLM2's CoT answer rule).
"""

from __future__ import annotations

import json
import math
import re

import pandas as pd

from dhp.errors import DHPError
from dhp.recorded.importers import RECORDED_MODE, SourceFile, importer, verdict_columns

__all__ = ["read_result_json", "subset_id", "layout"]

ANCHORS = ("LLMBar", "Processed")
ORDERS = (("12", "swap = False"), ("21", "swap = True"))
_INT = re.compile(r"\s*[+-]?\d+\s*")  # what Python's int() accepts from a reply, as evaluate.py calls it


def layout(path) -> tuple[list[str], str, str, str]:
    """(subset path parts, judge, strategy, path from the anchor on) of a result.json, from its folders."""
    parts = list(path.parts)
    if len(parts) < 5 or parts[-1] != "result.json" or parts[-4] != "evaluators":
        raise DHPError(f"{path} is not at <data set>/evaluators/<judge>/<strategy>/result.json.",
                       "import LLMBar's Dataset folder (or a part of it) as upstream lays it out.")
    anchor = max((i for i, x in enumerate(parts[:-4]) if x in ANCHORS), default=None)
    if anchor is None:
        raise DHPError(f"Cannot tell which LLMBar data set {path} belongs to: none of its folders is "
                       f"{' or '.join(ANCHORS)}.", "keep upstream's folders: Dataset/LLMBar/<subset>/... or "
                       "Dataset/Processed/<name>/... .")
    subset = parts[anchor:-4]
    if len(subset) < 2:
        raise DHPError(f"{path} names no data set under {parts[anchor]}/.", "keep upstream's folders.")
    return subset, parts[-3], parts[-2], "/".join(parts[anchor:])


def subset_id(subset_parts: list[str]) -> str:
    """dhp.datasets.llmbar's subset name: LLMBar/Adversarial/GPTInst -> Adversarial_GPTInst,
    Processed/FairEval -> Processed_FairEval."""
    rest = subset_parts[1:] if subset_parts[0] == "LLMBar" else subset_parts
    return "_".join(rest)


def _rating_score(reply) -> tuple[float, str]:
    text = reply[0] if isinstance(reply, list) and reply else reply
    if isinstance(text, str) and _INT.fullmatch(text):
        return float(int(text)), ""
    return math.nan, f"not an integer: {str(text)[:40]!r}"


def _reply_start(entry: dict) -> str:
    c = entry.get("completion")
    text, finish = (c[0], c[1] if len(c) > 1 else "") if isinstance(c, list) and c else (c, "")
    why = f" (finish reason {finish!r})" if finish else ""
    return f"{str(text or '')[:60]!r}{why}"


def read_result_json(f: SourceFile) -> pd.DataFrame:
    """The pairwise verdicts of one result.json (module docstring)."""
    subset_parts, judge, strategy, _ = layout(f.path)
    sub = subset_id(subset_parts)
    try:
        items = json.loads(f.data)
    except UnicodeDecodeError:
        raise DHPError(f"{f.path} is not UTF-8 text.", "use the unmodified upstream result.json.") from None
    except json.JSONDecodeError as e:
        raise DHPError(f"{f.path} is not valid JSON ({e.msg}, line {e.lineno}).",
                       "use the unmodified upstream result.json.") from None
    if not isinstance(items, list):
        raise DHPError(f"{f.path} holds a JSON {type(items).__name__}, not a list of items.",
                       "use the unmodified upstream result.json.")
    rows = []
    source = f.label
    for i, it in enumerate(items):
        where = f"{f.path} item {i}"
        results = it.get("results") if isinstance(it, dict) else None
        if not isinstance(results, list) or not results or not isinstance(results[-1], dict):
            raise DHPError(f"{where} has no results whose last entry is a verdict dict.",
                           "use the unmodified upstream result.json.")
        last = results[-1]
        label = str(it.get("label"))
        if label not in ("1", "2"):
            raise DHPError(f"{where}: label {it.get('label')!r} is not 1 or 2.", "use the unmodified upstream result.json.")
        f1 = f2 = math.nan
        rating_failure = ""
        if "score_1" in last or "score_2" in last:
            (f1, why1), (f2, why2) = _rating_score(last.get("score_1")), _rating_score(last.get("score_2"))
            if why1 or why2:
                rating_failure = "; ".join(f"score_{k} {w}" for k, w in ((1, why1), (2, why2)) if w) + \
                    " (evaluate.py's fallback verdict not kept)"
        for order, key in ORDERS:
            entry = last.get(key)
            if not isinstance(entry, dict) or "winner" not in entry:
                raise DHPError(f"{where} lacks {key!r} with a winner.", "use the unmodified upstream result.json.")
            winner = entry["winner"]
            if winner not in (None, "1", "2"):
                raise DHPError(f"{where} {key}: winner {winner!r} is not '1', '2' or null.",
                               "use the unmodified upstream result.json.")
            failure = ""
            if rating_failure:
                winner, failure = None, rating_failure
            elif winner is None:
                failure = f"no verdict: the reply matches none of the strategy's answer patterns: {_reply_start(entry)}"
            rows.append({"judge": judge, "mode": RECORDED_MODE, "item_id": f"{sub}-{i}", "subset": sub,
                         "strategy": strategy, "order": order, "aspects": "", "aspect_scores_1": "",
                         "aspect_scores_2": "", "weights": "", "f1": f1, "f2": f2, "verdict": winner,
                         "label": label, "failure": failure, "source": source})
    return pd.DataFrame(rows, columns=verdict_columns())


def _upstream_path(path, root) -> str:
    return layout(path)[3]


@importer("llmbar", suffixes=("result.json",), relative_path=_upstream_path, default="llmbar_judgments",
          feeds=("decompose_aggregate", "bias"),
          views="LLMBar agreement with the gold preference (decompose_aggregate's pairwise view); position and length "
                "bias (the bias views)")
def _read(f: SourceFile, ctx) -> dict[str, pd.DataFrame]:
    """LLMBar result.json files -> pairwise_verdicts.parquet."""
    return {"pairwise_verdicts.parquet": read_result_json(f)}
