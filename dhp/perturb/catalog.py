"""The perturbation registry: one registered :class:`Perturbation` per method, holding everything about it
(level, severities per task, k per dataset, rule function, verifier, optional LLM prompts, expert-weight
defaults, survey wording). Adding a perturbation means registering one object — in
``dhp/perturb/builtin.py`` for the shipped ones, or in a notebook cell for your own::

    from dhp.perturb import perturbation

    @perturbation("shout", level="character", tasks={"summarization": ("single",)},
                  description="upper-case every letter", weights={"summarization": {"fluency": 1}},
                  verify=lambda reference, text, ctx: text == reference.upper())
    def shout(text, ctx):
        return text.upper(), "upper-cased every letter"

Rows of the perturbed table come out in registration order, so the built-ins follow the paper's Table 2.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Mapping

import pandas as pd

from dhp.errors import DHPError
from dhp.extensions import Registry, origin_of, registrar
from dhp import schema
from dhp.schema import DATASET_TASK, TASK_METRICS

LEVELS = (*schema.LEVELS, "none")  # "none": the control
MINOR_MAJOR = ("minor", "major")
SINGLE = ("single",)

# Your own dataset (dhp.datasets.load_custom) gets the k values of the paper's dataset of the same task.
TASK_DEFAULT_K_SOURCE = {
    "summarization": "summeval",
    "story_completion": "storycloze",
    "question_answering": "pubmedqa",
    "translation": "wmt22_zh_en",
}


@dataclass
class Context:
    """What a rule function or verifier may use besides the text itself.

    severity, k: the row's severity and count (k None for methods without a count); rng: a
    ``random.Random`` seeded for this row (None in verifiers); item: the dataset row (item_id, dataset,
    wrong_ending, ...); pool: item_id -> reference of every item of the same dataset; seed: the run seed.
    """

    severity: str
    k: int | str | None = None
    rng: random.Random | None = None
    item: Mapping = field(default_factory=dict)
    pool: Mapping[str, str] = field(default_factory=dict)
    seed: int = 0

    @property
    def fake(self):
        """A shared Faker; seed it from ``ctx.rng`` with ``seed_instance`` before use (its own generator,
        so global random stays untouched)."""
        return _faker()


@lru_cache(maxsize=1)
def _faker():
    from faker import Faker

    return Faker("en_US")


@dataclass(frozen=True)
class Perturbation:
    """One perturbation method.

    apply(text, ctx) -> (new_text, edits) or raises ``dhp.perturb.rules.Skip(reason)``;
    verify(reference, text, ctx) -> bool: did an ok row do what the method promises (``check`` says
    what, in words); tasks: task -> severities it runs at; k: dataset -> severity -> count;
    llm: True when LLM prompts exist in dhp/prompts/perturb/<name>_<severity>.txt, or a mapping
    severity -> prompt template (slots {unit}, {unit_title}, {context}, {text}; dhp.prompts.fill);
    llm_length: accepted output/input length ratio of an LLM rewrite; llm_check(original, output) -> reason
    or None: a method-specific validator of LLM outputs; weights: task -> metric -> votes, the default
    expert votes; quality_issue: the plain wording shown in the expert survey; family: which method's set
    it belongs to — "dhp" perturbations run by default, others (e.g. "criteria_confusion") only when named.
    """

    name: str
    level: str
    description: str
    apply: Callable
    tasks: Mapping[str, tuple[str, ...]]
    verify: Callable | None = None
    check: str = ""
    k: Mapping[str, Mapping[str, int | str]] = field(default_factory=dict)
    llm: bool | Mapping[str, str] = False
    llm_length: tuple[float, float] = (0.6, 1.6)
    weights: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    quality_issue: str = ""
    llm_check: Callable | None = None
    family: str = "dhp"
    paper: bool = False


#: Every perturbation by name, in registration order; found by discovery (dhp.extensions): the modules of dhp.perturb
#: (builtin: the DHP paper's; hu2024: the criteria-confusion attacks), a module of your own there, entry-point group
#: ``dhp.perturbations``, or a notebook cell's @perturbation.
PERTURBATIONS: "Registry[Perturbation]" = Registry(
    "perturbation", "dhp.perturb", group="dhp.perturbations",
    fix="use one of those, or register your own with dhp.perturb.perturbation (a module in dhp/perturb/ or a cell).")


@registrar
def register(p: Perturbation) -> Perturbation:
    """Add `p` to the registry (dhp.extensions's one rule: a name another definition holds is refused; the same
    definition again — a notebook cell rerun — replaces itself)."""
    if not p.name or not p.name.replace("_", "").isalnum() or p.name == "original":
        raise DHPError(f"Bad perturbation name {p.name!r}.", "use letters, digits and underscores, not 'original'.")
    if p.level not in LEVELS:
        raise DHPError(f"Perturbation {p.name!r} has unknown level {p.level!r}.", f"use one of {LEVELS}.")
    bad = sorted(set(p.tasks) - set(TASK_METRICS))
    if not p.tasks or bad:
        raise DHPError(f"Perturbation {p.name!r} names no task or unknown task(s) {bad}.",
                       f"give tasks={{task: severities}} with tasks from {sorted(TASK_METRICS)}.")
    return PERTURBATIONS.add(p.name, p, origin_of(p.apply))


def perturbation(name: str, *, level: str, tasks: Mapping[str, tuple[str, ...]], description: str = "",
                 **fields) -> Callable:
    """Decorator form of :func:`register`: the decorated function is the rule (``apply``)."""

    @registrar
    def wrap(fn: Callable) -> Callable:
        register(Perturbation(name=name, level=level, description=description or (fn.__doc__ or "").strip(),
                              apply=fn, tasks={t: tuple(s) for t, s in tasks.items()}, **fields))
        return fn

    return wrap


def get(name: str) -> Perturbation:
    if name == "placebo":
        raise DHPError("The identical-text 'placebo' was replaced by the negative control 'control' (an "
                       "identical text reuses the original's cached judge answer, so it measured nothing).",
                       "use perturbations=['control'].")
    return PERTURBATIONS.lookup(name)


def task_perturbations(task: str, family: str | None = None, paper: bool | None = None) -> list[str]:
    """The registered perturbations defined for `task`, in registration order: of one `family` (None: every family),
    those the paper's runs include (``paper=True``) or not (None: both)."""
    return [n for n, p in PERTURBATIONS.items()
            if task in p.tasks and family in (None, p.family) and paper in (None, p.paper)]


def llm_methods() -> frozenset[str]:
    """Perturbations that have an LLM variant (the paper ran them with GPT-4-Turbo)."""
    return frozenset(n for n, p in PERTURBATIONS.items() if p.llm)


@dataclass(frozen=True)
class Table2Cell:
    """One cell of the paper's Table 2 for one dataset: a (perturbation, severity) with its level and k (not a
    meta-evaluation method: those are dhp.methods.Method)."""

    perturbation: str
    level: str
    severity: str
    k: int | str | None  # None where the method has no count (entities, grammar, rewrite, ...)


def task_of(dataset: str) -> str:
    try:
        return DATASET_TASK[dataset]
    except KeyError:
        raise DHPError(f"Unknown dataset {dataset!r}.", f"use one of {sorted(DATASET_TASK)}.") from None


def k_for(dataset: str, task: str | None, perturbation: str, severity: str) -> int | str | None:
    """The k of one (dataset, perturbation, severity); datasets of your own use their task's default."""
    p = PERTURBATIONS.get(perturbation)
    if p is None:
        return None
    source = dataset if dataset in p.k else TASK_DEFAULT_K_SOURCE.get(task or DATASET_TASK.get(dataset, ""), "")
    return p.k.get(source, {}).get(severity)


def methods_for(dataset: str, perturbations: list[str] | None = None, task: str | None = None) -> list[Table2Cell]:
    """The methods that apply to `dataset`, optionally restricted to the named `perturbations`.

    `task` is needed only for a dataset of your own (not one of the paper's); its k values are those
    of the paper's dataset of the same task (`TASK_DEFAULT_K_SOURCE`).
    Raises DHPError for an unknown dataset without a task, an unknown task or perturbation name, or
    a perturbation that is not defined for this dataset's task.
    """
    if dataset in DATASET_TASK or task is None:
        task = task_of(dataset)
    elif task not in TASK_DEFAULT_K_SOURCE:
        raise DHPError(f"Unknown task {task!r} for dataset {dataset!r}.", f"use one of {sorted(TASK_DEFAULT_K_SOURCE)}.")
    available = task_perturbations(task, family=None)
    if perturbations is None:  # the default set: what the paper's runs include (the others run when named)
        perturbations = task_perturbations(task, paper=True)
    else:
        for name in dict.fromkeys(perturbations):
            get(name)
            if name not in available:
                raise DHPError(f"Perturbation {name!r} is not defined for dataset {dataset!r} (task {task}).",
                               f"use one of {available} for this dataset.")
    return [Table2Cell(n, PERTURBATIONS[n].level, sev, k_for(dataset, task, n, sev))
            for n in available if n in perturbations for sev in PERTURBATIONS[n].tasks[task]]


def methods_table(dataset: str | None = None):
    """Table 2 as a tidy DataFrame.

    Columns: dataset, task, perturbation, level, severity, k (int, "all" or None),
    llm_method (bool: an LLM variant exists), description.
    """
    rows = [{"dataset": ds, "task": task_of(ds), "perturbation": m.perturbation, "level": m.level,
             "severity": m.severity, "k": m.k, "llm_method": bool(PERTURBATIONS[m.perturbation].llm),
             "description": PERTURBATIONS[m.perturbation].description}
            for ds in ([dataset] if dataset else sorted(DATASET_TASK)) for m in methods_for(ds)]
    return pd.DataFrame(rows)
