"""Expert weights (paper §4.3.2, Appendix C): which metric a quality issue should hurt most.

For each task and perturbation, experts vote for the metric they think the quality issue affects most;
the vote shares are the weights EW_j used in p^EW = 1 / Σ_j (EW_j / p_j).

The paper's survey numbers are only shown in a figure, so `dhp/resources/expert_weights.csv` ships the project's
OWN default mapping (votes reasoned from the metric definitions), not the paper's survey. Run notebook
06_expert_survey.ipynb to collect your own votes and write a replacement file.

The shipped file covers the shipped perturbations (those registered by ``SHIPPED_MODULES``). Any other registered
perturbation (a module of your own, a plug-in, a notebook cell) gets the DEFAULT RULE when the default weights are
used: its own ``weights=`` votes, or, with none declared, equal weights over its task's metrics (as for the
control). A run says once, in its manifest (``expert_weights_defaults``), which perturbations got that rule.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dhp.errors import DHPError
from dhp.io import csv_text, read_csv, resolve, resource, write_text
from dhp.perturb import catalog
from dhp.schema import TASK_METRICS

WEIGHT_COLUMNS = ("task", "perturbation", "metric", "votes", "weight")
DEFAULT_PATH = resource("expert_weights.csv")

#: The modules whose perturbations the shipped file covers (``python -m dhp weights`` writes their votes).
SHIPPED_MODULES = ("dhp.perturb.builtin", "dhp.perturb.hu2024")


def shipped_perturbations() -> dict[str, tuple[str, ...]]:
    """task -> the shipped perturbations of that task (registered by ``SHIPPED_MODULES``), in registry order."""
    reg = catalog.PERTURBATIONS
    return {t: tuple(p for p in ps if reg.registrant(p) in SHIPPED_MODULES) for t, ps in task_perturbations().items()}


def defaulted_weights() -> list[dict]:
    """The registered perturbations the shipped file does not cover, each with the default rule it gets:
    ``{"task", "perturbation", "rule"}`` (rule: "its own weights= votes" or "equal weights (no votes declared)")."""
    shipped = load_expert_weights(DEFAULT_PATH)
    have = set(zip(shipped["task"], shipped["perturbation"]))
    return [{"task": t, "perturbation": p,
             "rule": "its own weights= votes" if catalog.get(p).weights.get(t) else "equal weights (no votes declared)"}
            for t, ps in task_perturbations().items() for p in ps if (t, p) not in have]


def task_perturbations() -> dict[str, tuple[str, ...]]:
    """task -> every registered perturbation of that task (dhp.perturb.catalog: every family, the paper's and the
    others, control included): the expert weights cover them all."""
    return {t: tuple(catalog.task_perturbations(t)) for t in TASK_METRICS}


def quality_issue(perturbation: str) -> str:
    """The plain wording of a perturbation's quality issue, as shown in the survey."""
    return catalog.get(perturbation).quality_issue


#: Short metric definitions in our own words (after Appendix A of the paper), shown in the survey.
METRIC_DEFINITIONS: dict[str, dict[str, str]] = {
    "summarization": {
        "coherence": "the summary is well organised: sentences follow logically and build a whole.",
        "consistency": "every fact in the summary is supported by the article (no invented facts).",
        "fluency": "each sentence is well formed: spelling, grammar, word choice.",
        "relevance": "the summary keeps the important content of the article and nothing superfluous.",
    },
    "story_completion": {
        "coherence": "the story with its ending reads as one connected narrative.",
        "consistency": "the ending fits the characters, setting, tone and facts established earlier.",
        "fluency": "the ending is well written: spelling, grammar, style.",
    },
    "question_answering": {
        "answer_quality": "the answer responds to the question fully and correctly, given the context.",
    },
    "translation": {
        "accuracy": "the translation conveys the source meaning without additions, omissions or mistranslations.",
        "fluency": "the translation follows the norms of the target language: spelling, grammar, consistency.",
    },
}


def validate_expert_weights(df: pd.DataFrame, source: str = "expert weights") -> pd.DataFrame:
    """Check an expert-weights table and return a clean copy.

    Columns: task, perturbation, metric, votes (non-negative number), weight (in [0, 1]).
    Rules: columns present; tasks known; metrics known to their task; no duplicate
    (task, perturbation, metric); weights non-negative and summing to 1 (±1e-6) per task × perturbation.
    Raises DHPError naming the first problem found.
    """
    missing = [c for c in WEIGHT_COLUMNS if c not in df.columns]
    if missing:
        raise DHPError(f"{source}: missing columns {missing}.", f"use the columns {list(WEIGHT_COLUMNS)}.")
    w = df[list(WEIGHT_COLUMNS)].copy()
    for c in ("task", "perturbation", "metric"):
        w[c] = w[c].astype(str).str.strip()
    for c in ("votes", "weight"):
        num = pd.to_numeric(w[c], errors="coerce")
        if num.isna().any():
            bad = w.loc[num.isna()].iloc[0].to_dict()
            raise DHPError(f"{source}: column {c!r} is not a number in row {bad}.", f"write a number in {c!r}.")
        if (num < 0).any():
            bad = w.loc[num < 0].iloc[0].to_dict()
            raise DHPError(f"{source}: negative {c} in row {bad}.", f"{c} must be >= 0.")
        w[c] = num.astype(float)
    unknown = sorted(set(w["task"]) - set(TASK_METRICS))
    if unknown:
        raise DHPError(f"{source}: unknown task(s) {unknown}.", f"use tasks from {sorted(TASK_METRICS)}.")
    for task, g in w.groupby("task"):
        bad = sorted(set(g["metric"]) - set(TASK_METRICS[task]))
        if bad:
            raise DHPError(
                f"{source}: metric(s) {bad} are not metrics of task {task!r}.",
                f"use metrics from {list(TASK_METRICS[task])}.",
            )
    dup = w.duplicated(["task", "perturbation", "metric"])
    if dup.any():
        raise DHPError(f"{source}: duplicate row {w.loc[dup].iloc[0].to_dict()}.", "keep one row per task, perturbation and metric.")
    sums = w.groupby(["task", "perturbation"])["weight"].sum()
    off = sums[(sums - 1.0).abs() > 1e-6]
    if len(off):
        (task, pert), total = off.index[0], off.iloc[0]
        raise DHPError(
            f"{source}: weights for task {task!r}, perturbation {pert!r} sum to {total:.6g}, not 1.",
            "make the weights of each task × perturbation sum to 1 (weight = votes / total votes).",
        )
    return w.reset_index(drop=True)


def load_expert_weights(path=None) -> pd.DataFrame:
    """Read and validate an expert-weights CSV (default: the shipped `dhp/resources/expert_weights.csv`).

    Lines starting with '#' are comments. Returns the validated table (see validate_expert_weights).
    """
    p = resolve(path if path is not None else DEFAULT_PATH)
    if path is None:  # the defaults: the shipped file plus registered perturbations' own default votes
        shipped = load_expert_weights(DEFAULT_PATH)
        extra = _registered_defaults(set(zip(shipped["task"], shipped["perturbation"])))
        return shipped if extra.empty else validate_expert_weights(pd.concat([shipped, extra], ignore_index=True))
    if not p.exists():
        raise DHPError(f"Expert weights file not found: {p}.", "pass an existing CSV or run notebook 06 to write one.")
    try:
        df = read_csv(p, comment="#")
    except Exception as e:  # parser errors name the line; keep that detail
        raise DHPError(f"Cannot read expert weights {p}: {e}.", "fix the CSV (columns task,perturbation,metric,votes,weight).") from e
    return validate_expert_weights(df, source=str(p))


def weights_for(ew: pd.DataFrame, task: str, perturbation: str, metrics) -> np.ndarray:
    """Weights for `metrics` (in that order) of a task and a perturbation.

    Weights belong to the TASK of the items (a dataset of your own is named after its file but has a
    task column). Metrics the table does not list get weight 0. Raises DHPError if the task ×
    perturbation is missing.
    """
    g = ew[(ew["task"] == task) & (ew["perturbation"] == perturbation)]
    if g.empty:
        raise DHPError(
            f"No expert weights for task {task!r}, perturbation {perturbation!r}.",
            "add rows for it to the expert-weights CSV (notebook 06 writes a complete file), or register the "
            "perturbation with weights={task: {metric: votes}} and use the default weights.",
        )
    m = dict(zip(g["metric"], g["weight"]))
    return np.array([m.get(x, 0.0) for x in metrics], dtype=float)


def _registered_defaults(have: set) -> pd.DataFrame:
    """Weight rows for registered perturbations (e.g. your own, of any family) that the shipped file does not cover,
    from their default votes (none: equal weights, as for the control)."""
    votes: dict[str, dict[str, dict]] = {}
    for t, ps in task_perturbations().items():
        for p in ps:
            if (t, p) not in have:  # every missing perturbation of the task, not only the last one
                votes.setdefault(t, {})[p] = dict(catalog.get(p).weights.get(t, {}))
    return weights_from_votes(votes) if votes else pd.DataFrame(columns=list(WEIGHT_COLUMNS))


def check_weights_cover(ew: pd.DataFrame, task: str, perturbations, metrics) -> None:
    """Fail before any judge call when expert weights are missing for a (task, perturbation) that the
    statistics will need (tasks with one metric need none: its weight is 1)."""
    if len(list(metrics)) <= 1:
        return
    have = set(zip(ew["task"], ew["perturbation"]))
    missing = sorted(p for p in set(perturbations) if (task, p) not in have)
    if missing:
        raise DHPError(f"The expert weights have no rows for task {task!r}, perturbation(s) {missing}; the "
                       "statistics would fail after every judge call was paid.",
                       "add those rows to the expert-weights CSV (notebook 06 writes a complete file), or "
                       "leave those perturbations out.")


def weights_from_votes(votes: dict) -> pd.DataFrame:
    """Turn votes {task: {perturbation: {metric: count}}} into a validated expert-weights table.

    Every metric of the task gets a row (0 votes if absent). A perturbation with no votes at all
    (e.g. the control) gets equal weights, since no metric is singled out.
    """
    rows = []
    for task, perts in votes.items():
        if task not in TASK_METRICS:
            raise DHPError(f"Unknown task {task!r} in votes.", f"use tasks from {sorted(TASK_METRICS)}.")
        metrics = TASK_METRICS[task]
        for pert, counts in perts.items():
            bad = sorted(set(counts) - set(metrics))
            if bad:
                raise DHPError(f"Votes name metric(s) {bad} for task {task!r}.", f"use metrics from {list(metrics)}.")
            total = float(sum(counts.values()))
            for m in metrics:
                v = float(counts.get(m, 0))
                rows.append(
                    dict(task=task, perturbation=pert, metric=m, votes=v,
                         weight=(v / total) if total > 0 else 1.0 / len(metrics))
                )  # fmt: skip
    return validate_expert_weights(pd.DataFrame(rows, columns=list(WEIGHT_COLUMNS)), source="votes")


HEADER = (
    "# DHP workbench expert weights. {label}\n"
    "# weight = votes / total votes per task x perturbation; no votes -> equal weights (control).\n"
)


def write_expert_weights(df: pd.DataFrame, path, label: str, overwrite: bool = False) -> Path:
    """Validate and write an expert-weights CSV atomically, with a '#' header line saying what it is.

    Refuses to replace an existing file unless overwrite=True (the shipped default lives in dhp/resources/).
    """
    w = validate_expert_weights(df)
    p = resolve(path)
    if p.exists() and not overwrite:
        raise DHPError(f"{p} already exists.", "choose another output path or pass overwrite=True.")
    votes_are_int = all(float(v).is_integer() for v in w["votes"])
    body = w.assign(votes=w["votes"].astype(int) if votes_are_int else w["votes"])
    text = HEADER.format(label=label.replace("\n", " ")) + csv_text(body)
    return write_text(p, text)


def default_votes() -> dict[str, dict[str, dict[str, int]]]:
    """{task: {perturbation: {metric: votes}}} from the shipped perturbations' ``weights`` (the project's own
    default votes, NOT the paper's survey: the paper only shows its numbers in a figure). Other registered
    perturbations are not part of the shipped file: they get the default rule (module docstring)."""
    return {t: {p: dict(catalog.get(p).weights.get(t, {})) for p in ps} for t, ps in shipped_perturbations().items()}


#: The label of the shipped file (its first line says what it is: the project's votes, not the paper's survey).
DEFAULT_LABEL = ("PROJECT DEFAULT MAPPING - not the paper's expert survey (the paper shows its numbers only in a "
                 "figure); votes reasoned by the project from the metric definitions. Replace via notebook 06.")


def write_default_weights(path=None) -> Path:
    """Regenerate the shipped expert weights (``python -m dhp weights``): every shipped perturbation of every
    family and task (``SHIPPED_MODULES``), from its declared ``weights=`` votes (none: equal weights). ``path``: where to write (default
    dhp/resources/expert_weights.csv, replaced)."""
    out = resolve(path) if path is not None else resolve(DEFAULT_PATH)
    return write_expert_weights(weights_from_votes(default_votes()), out, DEFAULT_LABEL, overwrite=True)


def coverage_gaps(ew: pd.DataFrame) -> list[tuple[str, str]]:
    """(task, perturbation) pairs of the registered perturbations that the table does not cover."""
    have = set(zip(ew["task"], ew["perturbation"]))
    return [(t, p) for t, ps in task_perturbations().items() for p in ps if (t, p) not in have]


def save_survey(votes: dict, run_dir: str, output_path=None, replace_default: bool = False,
                label: str = "votes collected with notebook 06_expert_survey") -> Path:  # fmt: skip
    """Write survey votes as an expert-weights CSV (default `<run_dir>/expert_weights.csv`).

    Files under the run folder are replaced freely; the shipped `dhp/resources/expert_weights.csv` only with
    replace_default=True, and any other existing file is never replaced.
    """
    out = resolve(output_path) if output_path else resolve(run_dir) / "expert_weights.csv"
    is_default = out.resolve() == resolve(DEFAULT_PATH).resolve()
    if is_default and not replace_default:
        raise DHPError(f"{out} is the shipped default weights file.", "pass replace_default=True to replace it on purpose.")
    inside_run = resolve(run_dir).resolve() in out.resolve().parents
    return write_expert_weights(weights_from_votes(votes), out, label, overwrite=inside_run or is_default)
