"""Meta-evaluation methods as registered objects: one file per method in this package, found automatically.

A method (think inspect_ai's ``@task``) is a :class:`Method` subclass decorated with :func:`register`. It declares

- ``name``, ``title``, ``paper``, the ``modes`` it supports and its ``notebooks`` (the numbered notebooks that teach it);
- ``Params``: its parameter model (dhp.config: :class:`~dhp.config.RunParams` plus its own fields, each declared once
  with default, type, range and help text — the CLI, the notebooks' parameters cells and the grid derive from it);
- ``collects`` / ``produces``: the run-folder tables it writes, with their columns (:class:`Table`);

and implements four stages (each a :class:`Stage`: what it reads, whether it calls a model, what it writes):

- ``collect(config) -> {table name: DataFrame}``: the only stage that calls a model (through dhp.calls: cached);
  recorded judges enter here too, imported instead of called (``python -m dhp import-judgments``); it returns a
  :class:`StageResult` (the tables, ``stats=`` the run statistics of their calls) when it has statistics to report;
- ``analyze(tables, config) -> {table name: DataFrame}``: pure — tables in, tables out (the functions of
  dhp.analysis; no model, no file I/O, no plotting); it sees every judge in the run folder;
- ``card(tables) -> DataFrame``: its rows of the judge report card (dhp.analysis.report_card.CARD_COLUMNS);
- ``figures(tables, config) -> {name: matplotlib Figure}``.

One runner executes a stage: :func:`run_stage` (method, stage name, config) reads the stage's tables from the run
folder, calls it, writes what it declares and records the stage in the run folder's manifest.json (parameters, code
version, input checksums, times). A method may declare sub-stages of its collect (``extra_stages``: e.g. dhp's
``perturb`` and ``judge``, which notebooks 01 and 02 run one by one); :meth:`Method.stages` lists them all.
``run(name, config)`` runs collect → analyze → figures through it in one call (the CLI ``python -m dhp run
--method NAME``); a notebook calls :func:`run_stage` stage by stage. Collected tables
accumulate judges: writing one judge's rows replaces that judge's earlier rows only (``Table.partition``), so
live and recorded judges share a run folder and the analyses compare them.

Adding a method: put a module in dhp/methods/ with one registered class (and its notebook); it then appears in
the CLI, the grid, the report card and notebook 10 with no other file edited. Packages outside dhp can register
methods through the ``dhp.methods`` entry-point group.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable

import pandas as pd

from dhp.analysis.leaderboard import LEADERBOARD_COLUMNS, leaderboard
from dhp.analysis.report_card import CARD_COLUMNS, not_run_row, with_kind
from dhp.backends import Backend, get_backend
from dhp.backends.base import run_options
from dhp.config import Params, RunParams, validate
from dhp.controls import is_control, judge_kind
from dhp.errors import DHPError
from dhp.io import read_table, resolve, write_csv, write_manifest, write_parquet, write_text
from dhp.plots import save_figure
from dhp.extensions import Registry, origin_of, registrar
from dhp import runlock, weights
from dhp.judging import PROTOCOLS
from dhp.judging.strategies import STRATEGIES

__all__ = ["Method", "Table", "Stage", "StageResult", "Plan", "register", "get", "names", "all_methods", "run", "run_stage",
           "read_tables", "write_tables", "report_card", "judge_modes", "controls_scale", "controls_board",
           "lesson_scale", "controls_apart", "LESSON_CONTROLS", "LEANING_MEASURES"]


@dataclass(frozen=True)
class Table:
    """A table a method writes into the run folder.

    ``name``: the file (``.parquet`` for row tables that may hold texts, ``.csv`` for results); ``columns``: the
    columns it always has, in order (its schema; ``doc`` says what one row is); ``partition``: the columns that say
    whose rows these are — writing collected rows replaces the existing rows with the same partition values and
    keeps the others; ``results``: what the grid copies into results/ (which holds numbers, never texts): "all",
    "numbers" (the declared columns and numeric extras) or "none" (a table with texts).
    """

    name: str
    columns: tuple[str, ...]
    doc: str
    partition: tuple[str, ...] = ("judge", "mode")
    results: str = "all"

    def check(self, df: pd.DataFrame, method: str) -> None:
        missing = [c for c in self.columns if c not in df.columns]
        if missing:
            raise DHPError(f"Method {method!r} produced {self.name} without columns {missing}.",
                           f"return every column of its schema: {list(self.columns)}.")


@dataclass(frozen=True)
class Stage:
    """One stage of a method, executed by :func:`run_stage`.

    ``reads``: the run folder's tables it reads (those present are read; the method's ``uses`` count too);
    ``calls``: the models it may call — "judge" (the run's judge: the runner builds it, checks the mode and records
    its identity) and/or "perturber" (an LLM perturber named by the parameters); () for a stage that calls none;
    ``writes``: the tables it writes (declared in the method's collects/produces; a stage that writes nothing
    returns tables to look at only); ``call(method, config, tables, judge) -> {name: DataFrame}`` does the work
    (``tables``: what was read; ``judge``: the Backend, or None)."""

    name: str
    reads: tuple[str, ...]
    calls: tuple[str, ...]
    writes: tuple[str, ...]
    doc: str
    call: Callable = field(repr=False, compare=False)

    @property
    def calls_model(self) -> bool:
        return bool(self.calls)


@dataclass
class Plan:
    """What ``python -m dhp evaluate`` says of a method before running it (:meth:`Method.evaluate_plan`): the units it
    puts the judge on, per leaderboard view (``units``, in words), the dhp.calls.Estimate of its calls
    (``estimates``), or a bare count of calls where no estimate is made (``calls``), and a ``note``."""

    units: list[str] = field(default_factory=list)
    estimates: list = field(default_factory=list)
    calls: int | None = None
    note: str = ""


class Method:
    """Base class of a meta-evaluation method (see the module docstring)."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    notebooks: ClassVar[tuple[str, ...]] = ()
    #: notebooks of ``notebooks`` that do not depend on the judge: the grid runs them once per dataset and hands
    #: their ``shared_tables`` to every judge's run folder (dhp: 01_perturb writes dataset and perturbed tables)
    shared_notebooks: ClassVar[tuple[str, ...]] = ()
    shared_tables: ClassVar[tuple[str, ...]] = ()
    #: notebooks that read the aggregated results/ only (figures of every judge together): run by the grid last
    result_notebooks: ClassVar[tuple[str, ...]] = ()
    modes: ClassVar[tuple[str, ...]] = ("logprobs", "sample")
    #: the card measure that stands for the method in one-number summaries (or measures, in order of preference)
    headline: ClassVar[str | tuple[str, ...]] = ""
    Params: ClassVar[type[RunParams]] = RunParams
    collects: ClassVar[tuple[Table, ...]] = ()
    produces: ClassVar[tuple[Table, ...]] = ()
    #: tables of other methods that ``analyze`` also reads when they are in the run folder (e.g. a joint view)
    uses: ClassVar[tuple[str, ...]] = ()
    #: the method's sub-stages of collect (a notebook runs them one by one), besides the stages every method has
    extra_stages: ClassVar[tuple[Stage, ...]] = ()
    #: methods whose tables this one reads as its inputs (their collected and produced tables: ``analyze`` and
    #: ``collect`` see them, read from the run folder); the grid runs this method where those tables are, after them.
    #: A table name is owned by one method: a method declares only its own tables.
    requires: ClassVar[tuple[str, ...]] = ()
    #: how its headline tells a judge from chance (dhp.analysis.power): (kind "agreement" | "correlation", the
    #: parameter that sets its units, what a unit is) — its docs page's power table and evaluate's plan line
    power: ClassVar[tuple[str, str, str] | None] = None
    #: ``python -m dhp evaluate``'s parameters of this method per profile ("quick", "standard", "paper"; on top of
    #: judge, mode, run_dir, data_dir, seed); a profile not listed leaves the method out (:meth:`profile_params`)
    profiles: ClassVar[dict[str, dict[str, Any]]] = {}

    def stages(self) -> dict[str, Stage]:
        """Every stage :func:`run_stage` can run, by name: the method's ``extra_stages``, then ``reference`` (the
        judge-independent tables, no model call), ``collect`` (every model call), ``analyze`` (pure) and ``figures``
        (saved under ``config.figures``)."""
        collected = tuple(t.name for t in self.collects)
        inputs = tuple(dict.fromkeys((*self.uses, *(t.name for t in self.required_tables()))))
        every = (*collected, *(t.name for t in self.produces), *inputs)
        standard = (
            Stage("reference", (), (), tuple(t.name for t in self.collects if "judge" not in t.columns),
                  "the judge-independent tables analyze needs (what a run with judge 'recorded' collects)",
                  lambda m, c, t, j: m.collect_reference(c)),
            Stage("collect", (), ("judge", "perturber"), collected, "every table the method collects",
                  lambda m, c, t, j: m.collect(c, j)),
            Stage("analyze", (*collected, *inputs), (), tuple(t.name for t in self.produces),
                  "the results of every judge in the run folder (pure: tables in, tables out)",
                  lambda m, c, t, j: m.analyze(t, c)),
            Stage("figures", every, (), (), "the method's figures, saved under the run's figures folder",
                  lambda m, c, t, j: m.figures(t, c)),
        )
        return {s.name: s for s in (*self.extra_stages, *standard)}

    # ------------------------------------------------------------------ configuration
    def config(self, values: dict[str, Any] | None = None, **more) -> RunParams:
        """This method's validated parameters (defaults from ``Params``); a DHPError names a bad one."""
        if isinstance(values, Params) and not more:
            return values
        return validate(self.Params, values, source=f"{self.name} parameters", **more)

    def config_from(self, namespace: dict[str, Any]) -> RunParams:
        """The parameters found in ``namespace`` (a notebook's globals after its parameters cell), validated."""
        return self.config({k: namespace[k] for k in self.Params.model_fields if k in namespace})

    @property
    def judged(self) -> tuple[str, ...]:
        """The collected tables that hold judges' outputs (those with a judge column in their schema)."""
        return tuple(t.name for t in self.collects if "judge" in t.columns)

    def tables(self) -> dict[str, Table]:
        return {t.name: t for t in (*self.collects, *self.produces)}

    def backend(self, config: RunParams, judge=None):
        """The judge backend of this run: ``judge`` when it is a Backend object, else built from the spec (a bad
        spec, a missing or exposed key fails here, before anything is collected); None for ``recorded``."""
        if isinstance(judge, Backend):
            return judge
        spec = judge or config.judge
        if spec == RECORDED:
            return None
        return get_backend(spec, **run_options(spec, allow_insecure_key=config.allow_insecure_key))

    # ------------------------------------------------------------------ stages (override)
    def collect(self, config: RunParams, judge=None) -> "dict[str, pd.DataFrame] | StageResult":
        raise NotImplementedError(f"{type(self).__name__}.collect")

    def collect_reference(self, config: RunParams) -> dict[str, pd.DataFrame]:
        """The judge-independent tables ``analyze`` needs beside the judges' (e.g. human ratings), without any
        model call: what a run with judge ``recorded`` collects, to analyze judgments imported with
        ``python -m dhp import-judgments``. Default: none."""
        return {}

    def analyze(self, tables: dict[str, pd.DataFrame], config: RunParams) -> dict[str, pd.DataFrame]:
        raise NotImplementedError(f"{type(self).__name__}.analyze")

    def card(self, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
        raise NotImplementedError(f"{type(self).__name__}.card")

    def figures(self, tables: dict[str, pd.DataFrame], config: RunParams) -> dict[str, Any]:
        return {}

    def views(self, tables: dict[str, pd.DataFrame]) -> list:
        """The leaderboard's views of this method (dhp.analysis.leaderboard.View: unit-level rows of every judge in
        the tables; the collected and the produced ones are given). Default: none."""
        return []

    def profile_params(self, profile: str, data_dir=None) -> dict[str, Any] | None:
        """The parameters ``python -m dhp evaluate --profile PROFILE`` runs this method with (None: not run)."""
        values = self.profiles.get(profile)
        return None if values is None else dict(values)

    def protocol_params(self, profile: str, protocols: list[str], data_dir=None) -> dict[str, Any] | None:
        """``python -m dhp evaluate --protocol P``: the parameters this method runs the judge protocols ``protocols``
        with in ``profile`` (None: it runs none of them; the default). A method that runs a published judge protocol
        on its task says so here: the protocol's name is the only place the orchestrator meets it."""
        return None

    def evaluate_plan(self, config: RunParams, backend=None) -> Plan:
        """The units and calls of this method in ``python -m dhp evaluate``'s plan, without calling a model. Default:
        its own tables, and its ``estimate`` when it has one."""
        plan = Plan(["its own tables (no recorded judge to stand beside)"])
        if type(self).estimate is not Method.estimate:  # the method has a dry run
            plan.estimates = [e for e in self.estimate(config, backend).values() if e is not None]
        return plan

    def required_tables(self) -> tuple[Table, ...]:
        """The tables of the methods in ``requires`` (what this method reads besides its own)."""
        return tuple(t for name in self.requires for t in (*get(name).collects, *get(name).produces))

    def inputs(self, config: RunParams) -> list:
        """Files of the user's that the run read (checksummed in the manifest)."""
        return []

    def estimate(self, config: RunParams, judge=None) -> dict:
        """What collecting would cost ({stage: dhp.calls.Estimate}) without calling a model; optional."""
        raise DHPError(f"Method {self.name!r} has no dry run.", "run it with a small n first, or use --method dhp.")

    #: Why a baseline cannot run here in mode "metric" where controls can ("": any metric judge can): a method that
    #: hands controls its gold but has no use for a baseline's one surface statistic per text says so here
    metric_controls_only: str = ""
    #: Why mode "metric" runs controls and baselines only here, not a language model that also serves it ("": any
    #: judge that serves mode metric): a method whose prompts a model answers in mode logprobs or sample
    metric_no_model: str = ""

    #: The size and data a lesson runs the controls at beside its judge (:func:`controls_scale`): the method's own
    #: data (whatever the lesson's data set is) at a size where its scale tells a good judge from a useless one, in
    #: seconds (a control calls no model). {}: none run
    control_params: ClassVar[dict[str, Any]] = {}

    def refuses(self, judge: str, mode: str) -> str:
        """Why this method cannot run ``judge`` in ``mode`` though it runs that mode ("" when it can): e.g. mode "metric"
        for a control but not a baseline. The grid leaves such a combination out ("not run" on the card)."""
        if mode == "metric" and self.metric_controls_only and not is_control(judge):
            return f"mode metric runs controls only here: {self.metric_controls_only}"
        if mode == "metric" and self.metric_no_model and judge_kind(judge) not in ("control", "baseline"):
            return f"mode metric runs controls and baselines only here: {self.metric_no_model}"
        return ""

    def check_mode(self, config: RunParams) -> None:
        if config.mode not in self.modes:
            raise DHPError(f"Method {self.name!r} does not run in {config.mode!r} mode.",
                           f"use mode {' or '.join(self.modes)}.")

    def __repr__(self) -> str:
        return f"<method {self.name}: {self.title}>"


#: Every method by name; found by discovery (dhp.extensions): the modules of this package and the entry-point group
#: ``dhp.methods``.
_REGISTRY: "Registry[Method]" = Registry(
    "method", "dhp.methods", fix="use one of those (python -m dhp methods), or add a module with a @register class "
                                 "to dhp/methods/.")


@registrar
def register(cls: type[Method]) -> type[Method]:
    """Class decorator: register one instance of a Method subclass under its ``name``."""
    if not cls.name or not cls.name.isidentifier():
        raise DHPError(f"Method class {cls.__name__} needs a name that is an identifier, got {cls.name!r}.",
                       "set name = 'my_method' on the class.")
    for t in (*cls.collects, *cls.produces):
        if not isinstance(t, Table):
            raise DHPError(f"Method {cls.name!r} declares {t!r}, which is not a dhp.methods.Table.",
                           "declare its tables as Table(name, columns, doc).")
    owned = {t.name for t in (*cls.collects, *cls.produces)}
    for other in _REGISTRY.registered().values():
        clash = sorted(owned & {t.name for t in (*other.collects, *other.produces)})
        if clash and other.name != cls.name:
            raise DHPError(f"Method {cls.name!r} declares {clash}, which method {other.name!r} owns.",
                           f"read them with requires = ({other.name!r},) instead of declaring them again.")
    _REGISTRY.add(cls.name, cls(), origin_of(cls))
    return cls


def all_methods() -> list[Method]:
    """Every registered method, in a fixed order (the order of ``ORDER`` where listed, then by name)."""
    rank = {n: i for i, n in enumerate(ORDER)}
    return sorted(_REGISTRY.values(), key=lambda m: (rank.get(m.name, len(rank)), m.name))


def names() -> list[str]:
    return [m.name for m in all_methods()]


def get(name: str) -> Method:
    """The registered method called ``name``."""
    return _REGISTRY.lookup(name)


def judge_protocol_names() -> list[str]:
    """Every judge protocol a run can name (``evaluate --protocol``, the grid's ``protocols``): the registered pairwise
    strategies and judge protocols, by their registered names (a ``source:`` prefix is a naming habit, not a rule)."""
    return list(dict.fromkeys([*STRATEGIES, *PROTOCOLS]))


def check_protocol_names(protocols, where: str = "") -> None:
    """An unknown judge protocol is refused with the registered names."""
    known = judge_protocol_names()
    unknown = [p for p in protocols if p not in known]
    if unknown:
        raise DHPError(f"{where}{'u' if where else 'U'}nknown judge protocol(s) {unknown}; registered: {', '.join(known)}.",
                       "use a registered name, or register yours (@strategy / @protocol in a module of "
                       "dhp/judging/; python -m dhp extensions lists them).")


def protocol_refusal(unclaimed, profile: str, mode: str | None = None, candidates=None, data_dir=None,
                     where: str = "", judge: str | None = None) -> DHPError:
    """Why no method ran the registered judge protocols ``unclaimed``: no method runs it at all, the method that
    runs it is not among ``candidates`` (method names), or it does not run in ``mode`` — the real reason, with its
    fix."""
    p = sorted(unclaimed)[0]
    owners = [m for m in all_methods() if m.protocol_params(profile, [p], data_dir)]
    origin = STRATEGIES.origin(p) if p in STRATEGIES else PROTOCOLS.origin(p)
    if not owners:
        return DHPError(f"{where}No method runs the judge protocol {p!r} ({origin}): pairwise strategies run through "
                        "decompose_aggregate, GEMBA's protocols through human_alignment; others only where a "
                        "method's protocol_params names them.",
                        "name a pairwise strategy or a gemba: protocol, or give the method that should run it a "
                        "protocol_params (dhp.methods.Method).")
    if candidates is not None and not any(m.name in candidates for m in owners):
        return DHPError(f"{where}no method of {list(candidates)} runs {p!r}; {owners[0].name} does.",
                        f"add {owners[0].name} to methods.")
    m = owners[0]
    # the modes it runs for this judge (mode metric runs controls only on some methods: Method.refuses)
    modes = [md for md in m.modes if judge is None or not m.refuses(judge, md)] or list(m.modes)
    return DHPError(f"{where}{m.name} runs the judge protocol {p!r} in mode(s) {', '.join(modes)}, not {mode!r}.",
                    f"use --mode {modes[0]} (the modes {m.name} runs).")


#: The judge spec of a run that calls no model: it analyzes the judgments imported into the run folder.
RECORDED = "recorded"

#: Display order of the built-in methods (the card and the CLI list them so); a new method comes after them.
ORDER = ("dhp", "criteria_confusion", "decompose_aggregate", "dual_perspective", "human_alignment")


# ---------------------------------------------------------------------------------------------- run folder

def read_tables(method: Method, folder, which: Iterable[Table] | None = None) -> dict[str, pd.DataFrame]:
    """The method's tables present in ``folder`` (all it declares, or ``which``), by file name."""
    root = resolve(folder)
    out = {}
    for t in (which if which is not None else (*method.collects, *method.produces)):
        path = root / t.name
        if path.is_file():
            out[t.name] = read_table(path, t.name, f"the {method.name} method")
    return out


def read_uses(method: Method, folder) -> dict[str, pd.DataFrame]:
    """The other methods' tables that ``method`` reads and that are in ``folder``: those named in ``uses`` and every
    table of the methods it ``requires``."""
    root = resolve(folder)
    names = dict.fromkeys((*method.uses, *(t.name for t in method.required_tables())))
    return {n: read_table(root / n, n, "another method") for n in names if (root / n).is_file()}


def run_rows(items: pd.DataFrame, rows: pd.DataFrame, dataset: str, n_items: int | None,
             where: str = "the run folder") -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of one run among a run folder's collected ones: ``dataset``'s (the folder's first dataset when the
    name is not there: your own file) first ``n_items`` items in the order of ``rows``, and those items — what a
    judging stage reads from what the stage before it wrote."""
    names = list(dict.fromkeys(rows["dataset"].astype(str)))
    name = dataset if dataset in names else (names[0] if names else dataset)
    rows = rows[rows["dataset"].astype(str) == name]
    if rows.empty:
        raise DHPError(f"{where} has no rows of dataset {dataset!r}.", "run the stage before with the same dataset "
                                                                        "and run_dir.")
    ids = list(dict.fromkeys(rows["item_id"].astype(str)))[: None if n_items is None else int(n_items)]
    rows = rows[rows["item_id"].astype(str).isin(ids)].reset_index(drop=True)
    items = items[(items["dataset"].astype(str) == name) & items["item_id"].astype(str).isin(ids)]
    if len(items) != len(ids):
        raise DHPError(f"{where} lacks {len(ids) - len(items)} of the items of its rows.",
                       "rerun the stage before so that both tables come from the same run.")
    return items.reset_index(drop=True), rows


def _upsert(new: pd.DataFrame, old: pd.DataFrame | None, table: Table) -> pd.DataFrame:
    """``old`` without the rows whose partition values occur in ``new``, then ``new`` appended."""
    part = [c for c in table.partition if c in new.columns]
    if old is None or old.empty or not part or not set(part) <= set(old.columns):
        return new
    key = lambda df: pd.MultiIndex.from_frame(df[part].astype(str))  # noqa: E731 - local helper
    keep = old[~key(old).isin(key(new).unique())]
    return pd.concat([keep, new], ignore_index=True) if len(keep) else new


def write_tables(method: Method, tables: dict[str, pd.DataFrame], folder, replace: bool = False,
                 merge_all: bool = False) -> dict[str, Path]:
    """Write the method's ``tables`` into ``folder`` (each atomically, after all were checked): collected tables
    are merged into what is there (:class:`Table` ``partition``) unless ``replace``; produced tables replace the
    file (``merge_all``: merged too — gathering several runs' results into one folder). A table the method does not
    declare is an error (every table a method writes is declared)."""
    root = resolve(folder)
    declared = method.tables()
    unknown = sorted(set(tables) - set(declared))
    if unknown:
        raise DHPError(f"Method {method.name!r} returned undeclared tables {unknown}.",
                       "declare them in its collects/produces.")
    for name, df in tables.items():
        declared[name].check(df, method.name)
    collected = {t.name for t in method.collects}
    final = {}
    for name, df in tables.items():
        old = None
        if (name in collected or merge_all) and not replace and (root / name).is_file():
            old = read_table(root / name, name, f"the {method.name} method")
        final[name] = _upsert(df, old, declared[name])
    paths = {name: (write_parquet if name.endswith(".parquet") else write_csv)(df, root / name)
             for name, df in final.items()}
    return paths


class StageResult(dict):
    """What :func:`run_stage` returns: the stage's tables by name (a dict), ``paths`` (file name -> path of every
    file it wrote besides manifest.json), ``figures`` (name -> matplotlib Figure, the figures stage) and ``stats`` (table name -> run
    statistics of its model calls: calls made, cache hits, time; they vary between runs, so no table holds them —
    the runner writes them to judge_stats.json)."""

    def __init__(self, tables: dict, paths: dict | None = None, figures: dict | None = None,
                 stats: dict | None = None):
        super().__init__(tables)
        self.paths, self.figures, self.stats = paths or {}, figures or {}, stats or {}


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """dhp's version and a hash of its code, prompts and resources (what the manifest records as the code)."""
    from importlib import metadata

    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    try:
        version = metadata.version("dhp")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return f"dhp {version} sha256:{h.hexdigest()[:16]}"


def run_stage(method: "Method | str", stage: str, config: RunParams | dict | None = None, *, judge=None,
              tables: dict[str, pd.DataFrame] | None = None, write: bool = True, **values) -> StageResult:
    """Run one stage of ``method`` (see :meth:`Method.stages`) in ``config.run_dir``: read the tables it reads from
    the run folder (``tables``: given instead, in memory), call it (``judge``: a Backend object, or None for the
    one ``config.judge`` names), write the tables it declares (each atomically, collected rows merged), save its
    figures, and record it in manifest.json under "<method>.<stage>". ``write=False``: nothing is written and
    nothing recorded (a look at the result). ``values``: parameters beside ``config``. Every route — the CLI,
    :func:`run`, the notebooks, the grid (which runs the notebooks) — executes stages through here."""
    method = get(method) if isinstance(method, str) else method
    stages = method.stages()
    if stage not in stages:
        raise DHPError(f"Method {method.name!r} has no stage {stage!r}.", f"use one of {list(stages)}.")
    st = stages[stage]
    if isinstance(values.get("judge"), Backend):  # a Backend object given as the judge: use it, record its id
        judge = values["judge"]
        values["judge"] = judge.identity
    config = method.config(config, **values)
    backend = None
    if "judge" in st.calls:
        backend = method.backend(config, judge)  # a bad spec or an exposed key fails before any work
        if backend is not None:
            method.check_mode(config)
    if not (write or st.calls_model):  # a look at a pure stage: nothing written, nothing to guard
        return _run_stage(method, stage, st, stages, config, backend, tables, write)
    if write and stage == "figures":
        runlock.check_run_dir(config.figures, "figures_dir")  # never the published figures/
    # one writer per run folder (re-entrant: run() holds it around its stages); refused before any call
    with runlock.hold(config.run_dir), runlock.hold_cache(config.cache_path, config.run_dir):
        return _run_stage(method, stage, st, stages, config, backend, tables, write)


def _run_stage(method: "Method", stage: str, st: Stage, stages: dict, config: RunParams, backend, tables,
               write: bool) -> StageResult:
    """The body of :func:`run_stage`, in its run folder (held when it writes or calls a model)."""
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    read: dict[str, pd.DataFrame] = {}
    read_files: list[Path] = []
    if st.reads:
        root = resolve(config.run_dir)
        declared = method.tables()
        if tables is None:
            read = read_tables(method, root, [declared[n] for n in st.reads if n in declared])
            read.update({n: df for n, df in read_uses(method, root).items() if n in st.reads})
            read_files = [root / n for n in read]
        else:
            read = {n: df for n, df in tables.items() if n in st.reads}
    missing = [n for n in st.reads if n not in read]
    if missing and any(st is e for e in method.extra_stages):  # a sub-stage needs what the one before it wrote
        before = [s.name for s in stages.values() if set(missing) & set(s.writes)]
        raise DHPError(f"Stage {method.name}.{stage} reads {missing}, which {config.run_dir} does not hold.",
                       f"run stage {before[0] if before else 'collect'} first with the same run_dir.")
    judged = (*method.judged, *(t.name for t in method.required_tables() if "judge" in t.columns))
    if stage == "analyze" and not any(n in read for n in judged):
        raise DHPError(f"The run folder {config.run_dir} holds no judgments for method {method.name!r}.",
                       "run it with a live judge, or import recorded judgments (python -m dhp import-judgments).")
    out = st.call(method, config, read, backend)
    # a stage that made model calls returns a StageResult whose stats hold their run statistics per table
    stats = {name: dict(s) for name, s in out.stats.items() if s} if isinstance(out, StageResult) else {}
    out = dict(out)
    if stage == "figures":
        figures, out = out, {}
    else:
        figures = {}
    stray = sorted(n for n in out if n in method.tables() and n not in st.writes)
    if stray:
        raise DHPError(f"Stage {method.name}.{stage} returned {stray}, which it does not declare it writes.",
                       "add them to the stage's writes.")
    result = StageResult(out, figures=figures, stats=stats)
    if not write:
        return result
    # a stage that writes tables writes all it returns (an undeclared one is an error); one that writes none
    # returns tables to look at only
    paths = write_tables(method, out, config.run_dir) if st.writes else {}
    if stats:  # the last table's statistics (a stage's calls are counted once, on the table they made)
        paths["judge_stats.json"] = write_text(resolve(config.run_dir) / "judge_stats.json",
                                               json.dumps(list(stats.values())[-1], indent=1, sort_keys=True,
                                                          default=str))
    for fig_name, fig in figures.items():
        for p in save_figure(fig, config.figures, fig_name):
            paths[p.name] = p
    inputs = [*method.inputs(config), *read_files]
    write_manifest(config.run_dir, f"{method.name}.{stage}", config.model_dump(),
                   [b for b in (backend,) if b is not None], inputs,
                   extra={"code": code_version(), "started": started, "wrote": sorted(paths),
                          "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})
    result.paths = paths
    return result


def run(name: str, config: RunParams | dict | None = None, figures: bool = True, backend=None,
        **values) -> dict[str, Path]:
    """Run one method end to end into ``config.run_dir`` through :func:`run_stage`: collect (the model calls; with
    judge ``recorded``: the reference tables only), analyze every judge in the run folder, save the figures, and
    record the run in manifest.json (under the method's name; each stage under "<method>.<stage>"). Nothing is
    written unless collecting succeeded. ``backend`` (or ``judge=`` given a Backend object): the backend to use
    instead of building one from ``config.judge``. Returns file name -> path."""
    method = get(name)
    if isinstance(values.get("judge"), Backend):  # a Backend object given as the judge: use it, record its id
        backend = values["judge"]
        values["judge"] = backend.identity
    config = method.config(config, **values)
    recorded = config.judge == RECORDED and backend is None
    if not recorded:
        method.check_mode(config)
    backend = method.backend(config, backend)
    if not recorded and isinstance(backend, Backend):
        backend.check_mode(config.mode)  # a mode the backend cannot serve: refused before any call
    # the whole run is one writer's (its folder, and a --cache-path outside it): no other run between its stages
    with runlock.hold(config.run_dir), runlock.hold_cache(config.cache_path, config.run_dir):
        return _run(method, config, figures, backend, recorded)


def _run(method: Method, config: RunParams, figures: bool, backend, recorded: bool) -> dict[str, Path]:
    paths = dict(run_stage(method, "reference" if recorded else "collect", config, judge=backend).paths)
    paths.update(run_stage(method, "analyze", config).paths)
    if figures:
        paths.update(run_stage(method, "figures", config).paths)
    paths["manifest.json"] = record(method, config, [b for b in (backend,) if b is not None], method.inputs(config))
    return paths


def record(method: Method, config: RunParams, backends: Iterable = (), inputs: Iterable = ()) -> Path:
    """Add this method's run (its parameters, the judge's identity, the user files it read) to manifest.json; a
    run on the default expert weights also says, once, which of its perturbations got the default rule
    (dhp.weights: not in the shipped file)."""
    extra: dict[str, Any] = {"code": code_version()}
    if "expert_weights" in type(config).model_fields and getattr(config, "expert_weights") is None:
        named = getattr(config, "perturbations", None)
        defaulted = [d for d in weights.defaulted_weights() if named is None or d["perturbation"] in named]
        if defaulted:
            extra["expert_weights_defaults"] = defaulted
    return write_manifest(config.run_dir, method.name, config.model_dump(), list(backends), inputs, extra=extra)


# ---------------------------------------------------------------------------------------------- controls

#: The controls a lesson sets beside its judge: a good one (reads the gold, errs on 20 % of units) and a useless one
LESSON_CONTROLS = ("control:oracle@0.2", "control:chance")


def controls_scale(method: "Method | str", config: RunParams | dict, controls=LESSON_CONTROLS, n_resamples: int = 200,
                   **values) -> pd.DataFrame:
    """Where judges of known quality land on ``method``'s scale: each of ``controls`` run at the method's
    :attr:`Method.control_params` (``values`` beside them) into ``<run_dir>/controls/<method>``, then the method's
    leaderboard views of those controls alone (dhp.analysis.leaderboard: value, lo, hi, n; seeded by config.seed).
    A control calls no model: this takes seconds, at a size the lesson's model run could not afford."""
    method = get(method) if isinstance(method, str) else method
    if not method.control_params:
        raise DHPError(f"Method {method.name!r} declares no control size.", "set its control_params.")
    config = method.config(config)
    folder = str(Path(config.run_dir) / "controls" / method.name)
    for judge in controls:
        run(method.name, method.config(config.model_dump(), **{**method.control_params, **values}, judge=judge,
                                       mode="metric", run_dir=folder, cache_path=None, figures_dir=None),
            figures=False)
    return controls_board(method, folder, controls, n_resamples, config.seed)


def controls_board(method: "Method | str", folder, controls=LESSON_CONTROLS, n_resamples: int = 200,
                   seed: int = 0) -> pd.DataFrame:
    """The leaderboard rows of ``controls`` on ``method``'s views of the tables in ``folder`` (where
    :func:`controls_scale` ran them, or any run folder holding them beside other judges): no run, seconds."""
    method = get(method) if isinstance(method, str) else method
    views = []
    for v in method.views({**read_tables(method, folder), **read_uses(method, folder)}):
        data = v.data[v.data["judge"].isin(controls)]
        if data[["judge", "mode"]].drop_duplicates().shape[0] >= 2:
            views.append(dataclasses.replace(v, data=data.reset_index(drop=True)))
    if not views:
        return pd.DataFrame(columns=LEADERBOARD_COLUMNS)
    return leaderboard(views, n_resamples=n_resamples, seed=seed)["leaderboard.csv"]


#: Leaderboard measures that read a bias, not quality: a good control need not beat chance on them (chance is
#: balanced and unmoved by a cue by construction)
LEANING_MEASURES = ("position_balance", "length_neutrality", "cue_robustness")


def lesson_scale(board: pd.DataFrame | None, run_dir, controls=LESSON_CONTROLS, seed: int = 0) -> pd.DataFrame:
    """The ``controls``' rows with a number (status ok) that a lesson shows as the scale: from ``board`` (a
    leaderboard where they ran beside the judges, as in the demo), else from the controls folders lessons 07–09 left
    under ``<run_dir>/controls/<method>`` (:func:`controls_board` on each, seconds); empty, with the leaderboard's
    columns, where neither holds them."""
    scale = board[board["judge"].isin(controls)] if board is not None else pd.DataFrame(columns=LEADERBOARD_COLUMNS)
    if scale.empty:
        run_dir = Path(run_dir)
        found = [m for m in names() if (run_dir / "controls" / m).is_dir()]
        scale = pd.concat([controls_board(m, run_dir / "controls" / m, controls, seed=seed) for m in found]
                          or [pd.DataFrame(columns=LEADERBOARD_COLUMNS)], ignore_index=True)
    return scale[scale["status"] == "ok"].reset_index(drop=True)


def controls_apart(scale: pd.DataFrame, controls=LESSON_CONTROLS) -> pd.DataFrame:
    """The good and the useless control (``controls``) side by side on every view × scope × measure × strategy of
    ``scale`` where both have a number: value, lo, hi, n of the first ("_good"), value, lo, hi of the second
    ("_chance"), ``apart`` (their intervals do not overlap) and ``leaning`` (a measure of :data:`LEANING_MEASURES`)."""
    good, useless = controls
    keys = ["view", "scope", "measure", "strategy"]
    scale = scale.assign(strategy=scale["strategy"].fillna("")) if len(scale) else scale
    side = lambda j, cols: scale.loc[scale["judge"] == j, keys + cols]  # noqa: E731
    out = side(good, ["value", "lo", "hi", "n"]).merge(side(useless, ["value", "lo", "hi"]), on=keys,
                                                       suffixes=("_good", "_chance"))
    out["apart"] = ((out["lo_good"] > out["hi_chance"]) | (out["hi_good"] < out["lo_chance"])).astype(bool)
    out["leaning"] = out["measure"].isin(LEANING_MEASURES).astype(bool)
    return out.reset_index(drop=True)


# ---------------------------------------------------------------------------------------------- report card

def judge_modes(tables: Iterable[pd.DataFrame]) -> list[tuple[str, str]]:
    """The (judge, mode) pairs named in the tables, sorted."""
    return sorted({(str(j), str(m)) for t in tables if t is not None and {"judge", "mode"} <= set(t.columns)
                   for j, m in zip(t["judge"], t["mode"])})


def report_card(folders, judge: str | None = None, mode: str | None = None) -> pd.DataFrame:
    """The report card of every judge × mode found in the methods' tables (or only ``judge`` / ``mode``).

    ``folders``: one folder holding every method's tables (a run folder, or results/), or a dict method name ->
    folder. Each registered method contributes its ``card`` rows; a method with no rows for a judge × mode gets one
    row with status "not run" (never a number). Columns: dhp.analysis.report_card.CARD_COLUMNS."""
    parts, seen = [], []
    for m in all_methods():
        folder = folders.get(m.name) if isinstance(folders, dict) else folders
        tables = read_tables(m, folder, m.produces) if folder is not None else {}
        rows = m.card(tables) if tables else pd.DataFrame(columns=CARD_COLUMNS)
        seen += list(tables.values())
        parts.append((m, rows))
    carded = {(str(j), str(md)) for _, rows in parts for j, md in zip(rows["judge"], rows["mode"])}
    # a recorded judge (imported beside the run's: the bias lesson imports LLMBar's) gets a card only where a
    # method gives it rows, not a card of "not run" rows
    pairs = [(j, md) for j, md in judge_modes(seen) if (judge is None or j == judge) and (mode is None or md == mode)
             and (md != "recorded" or (j, md) in carded)]
    if judge is not None and mode is not None and not pairs:
        pairs = [(judge, mode)]  # asked for explicitly: its card says what was not run
    out = []
    for j, md in pairs:
        for m, rows in parts:
            mine = rows[(rows["judge"] == j) & (rows["mode"] == md)] if len(rows) else rows
            out.append(mine if len(mine) else pd.DataFrame([not_run_row(j, md, m.name)], columns=CARD_COLUMNS))
    return with_kind(pd.concat(out, ignore_index=True))[CARD_COLUMNS] if out else pd.DataFrame(columns=CARD_COLUMNS)


def describe_methods() -> str:
    """Two lines per registered method: name, modes, notebooks, title; its stages (``python -m dhp methods``)."""
    return "\n".join(f"{m.name:20s} modes: {', '.join(m.modes):28s} notebooks: {', '.join(m.notebooks) or '-':40s} "
                     f"{m.title}\n{'':20s} stages: {', '.join(m.stages())}" for m in all_methods())

