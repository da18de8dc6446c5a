"""MkDocs hooks: the site's numbers, reference and course are read at build time, never typed.

- ``{{ result("summary.csv", "D_avg", judge="baseline:chrf_src") }}`` in a page is the one matching row's value of
  ``results/summary.csv``; ``{{ table("leaderboard.csv", [...], where={...}) }}`` a Markdown table of its rows. A file,
  column or row that is missing fails the build (``mkdocs build --strict`` in ``make test``), so a page cannot show a
  number the results no longer hold.
- ``{{ config_reference() }}`` is the CLI and grid reference, generated from the parameter models of ``dhp.config``
  (the same declarations the command line, the notebooks and the grid derive from).
- ``{{ course() }}`` lists the notebooks; the executed copies (``build/executed/`` written by ``scripts/nbval.py``
  inside ``make test``, else the newest ones ``make demo`` left under ``runs/``) become pages of the course. With
  ``DHP_DOCS_REQUIRE_EXECUTED=1`` (``make test``) a build without them fails; otherwise the course page says so.
- ``figures/*.png`` are copied into the site, so pages link ``figures/NAME.png`` (relative to the site root);
  ``{{ figures("leaderboard_hanna", "alt text") }}`` links every figure of a view, one or its ``_<part>`` splits,
  found at build time (none fails the build).
- MathJax 2.7 (the static files of the ``jupyter-server-mathjax`` package) is copied to ``assets/mathjax/``: the
  notebooks' formulas render with no request to a CDN (mkdocs.yml's ``custom_mathjax_url`` points there; a
  Markdown page with formulas gets it from ``on_post_page``).

Placeholders are Python call expressions with literal arguments only (parsed with :mod:`ast`, never evaluated).
"""

from __future__ import annotations

import ast
import datetime
import html
import json
import logging
import math
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import jupyter_server_mathjax
import pandas as pd
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
FIGURES = ROOT / "figures"
EXECUTED = ROOT / "build" / "executed"
#: the course's notebooks are staged here as course/NN_*.ipynb: mkdocs-jupyter's pages need a real source folder
STAGE = ROOT / "build" / "docs-course"
NOTEBOOKS = ROOT / "notebooks"
PLACEHOLDER = re.compile(r"\{\{\s*(.+?)\s*\}\}", re.S)
log = logging.getLogger("mkdocs.hooks.dhp")

#: where the course's executed notebooks came from (set by on_config, read by course())
_COURSE: dict[str, object] = {"dir": None, "notebooks": []}


# ------------------------------------------------------------------------------------------------ results

def _read(file: str) -> pd.DataFrame:
    path = RESULTS / file
    if not path.is_file():
        raise PluginError(f"results/{file} is missing: run `make demo` to write it, or fix the page's placeholder")
    from dhp.io import read_csv

    return read_csv(path, keep_default_na=True)  # the project's reader: a neutralised cell reads as it was written


#: Markdown's own syntax characters a cell could use to make a link, an image, attributes or math (escaped as numeric
#: character references, which Markdown shows as the character); "|" is escaped as "\|" where a row is joined.
_MARKDOWN_SYNTAX = str.maketrans({c: f"&#{ord(c)};" for c in "[]{}*`$\\"})


def cell_text(text) -> str:
    """A results value as page text: every character HTML would read as markup escaped (a model id
    ``<img src=x onerror=alert(1)>`` a server reported shows as those characters, never as a tag), and Markdown's
    link, attribute, emphasis, code and math characters too. Every cell and value the hooks put into a page goes
    through here."""
    return html.escape(str(text), quote=False).translate(_MARKDOWN_SYNTAX)


def _select(df: pd.DataFrame, file: str, where: dict) -> pd.DataFrame:
    for col, want in where.items():
        if col not in df.columns:
            raise PluginError(f"results/{file} has no column {col!r} (columns: {list(df.columns)})")
        if isinstance(want, (list, tuple)):
            df = df[df[col].astype(str).isin([str(w) for w in want])]
        elif want is None:
            df = df[df[col].isna()]
        else:
            df = df[df[col].astype(str) == str(want)]
    return df


def _fmt(value, digits: int = 2, integer: bool = False) -> str:
    """A cell as text: NaN as "—" (never 0), integer columns without decimals, others with ``digits``."""
    if isinstance(value, str):
        return value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, bool):
        return str(value)
    if integer:
        return f"{int(value):,}"
    return f"{float(value):.{digits}f}"


def _integer(values: pd.Series) -> bool:
    v = pd.to_numeric(values, errors="coerce").dropna()
    return pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values) and len(v) > 0 \
        and bool((v == v.round()).all())


def result(file: str, column: str, digits: int = 2, **where) -> str:
    """The value of ``column`` in the one row of ``results/<file>`` matching ``where``."""
    df = _select(_read(file), file, where)
    if column not in df.columns:
        raise PluginError(f"results/{file} has no column {column!r}")
    if len(df) != 1:
        raise PluginError(f"results/{file} has {len(df)} rows where {where} (a page's number needs exactly one)")
    return cell_text(_fmt(df.iloc[0][column], digits, integer=pd.api.types.is_integer_dtype(df[column])))


def count(file: str, **where) -> str:
    """How many rows of ``results/<file>`` match ``where``."""
    return f"{len(_select(_read(file), file, where)):,}"


TOO_FEW = re.compile(r"^too few units \((\d+) of (\d+)\)$")
TOO_FEW_COMMON = re.compile(r"^too few common units \((\d+)\)$")


def status_text(status, units: str = "units") -> str:
    """A leaderboard row's ``status`` in words a reader follows: "too few units (3 of 100)" says the judge was
    scored on 3 of the 100 ``units`` the best-covered judge of the view has, and what a judge needs to be compared
    (dhp.analysis.leaderboard: at least MIN_UNITS units and the run's min_coverage share of the best judge's)."""
    from dhp.analysis.leaderboard import MIN_UNITS

    if not isinstance(status, str):
        return _fmt(status)
    m = TOO_FEW.match(status)
    if m:
        have, best = int(m.group(1)), int(m.group(2))
        if best < MIN_UNITS:
            return (f"not compared: the best-covered judge has {best} {units}, fewer than the {MIN_UNITS} a paired "
                    f"comparison needs (this judge: {have})")
        return (f"left out: scored on {have} of the {best} {units} the best-covered judge has (a judge needs at "
                f"least {MIN_UNITS} and the run's minimum share of them); its own numbers are on its report card")
    m = TOO_FEW_COMMON.match(status)
    if m:
        return (f"not compared: the judges share only {m.group(1)} {units}, fewer than the {MIN_UNITS} a paired "
                "comparison needs")
    return status


def table(file: str, columns: list, where: dict | None = None, rename: dict | None = None, digits: int = 2,
          ci: dict | None = None, sort: list | None = None, ascending: bool = True, limit: int | None = None,
          join: dict | None = None, units: str | None = None, notes: dict | None = None,
          blank: dict | None = None) -> str:
    """A Markdown table of the rows of ``results/<file>`` matching ``where``.

    ``ci={"value": ["lo", "hi"]}`` writes a column as "value (lo–hi)"; ``rename`` gives a column its header.
    ``join={"file": F, "on": [...], "column": C}`` adds column C of ``results/F`` (its largest value per ``on``
    key): e.g. the number of items a judge's row was measured on, so the page labels its unit set in place.
    ``units="items"`` writes a leaderboard ``status`` in words (``status_text``). ``notes={"column": "text"}``
    puts a short reason beside a cell that is missing (—) or an interval of zero width, so a reader sees why;
    ``blank={"column": "text"}`` shows ``text`` instead of a missing cell (a note column that is empty).
    """
    df = _select(_read(file), file, where or {})
    if join:
        other = _read(join["file"])
        missing = [c for c in [*join["on"], join["column"]] if c not in other.columns]
        if missing:
            raise PluginError(f"results/{join['file']} has no column(s) {missing}")
        df = df.merge(other.groupby(join["on"], dropna=False)[join["column"]].max().reset_index(), on=join["on"],
                      how="left")
    if df.empty:
        raise PluginError(f"results/{file} has no rows where {where}")
    missing = [c for c in [*columns, *sum((list(v) for v in (ci or {}).values()), [])] if c not in df.columns]
    if missing:
        raise PluginError(f"results/{file} has no column(s) {missing}")
    if sort:
        df = df.sort_values(list(sort), ascending=ascending)
    if limit:
        df = df.head(limit)
    rename = rename or {}
    head = [cell_text(rename.get(c, c)).replace("|", "\\|") for c in columns]
    integer = {c: _integer(df[c]) and c not in (ci or {}) for c in columns}
    rows = []
    for _, r in df.iterrows():
        cells = []
        for c in columns:
            text = _fmt(r[c], digits, integer[c])
            if c == "status" and units:
                text = status_text(r[c], units)
            if ci and c in ci:
                lo, hi = (r[x] for x in ci[c])
                if not (pd.isna(lo) or pd.isna(hi)):
                    text += f" ({_fmt(lo, digits)}–{_fmt(hi, digits)})"
                    if float(hi) == float(lo) and notes and c in notes:
                        text += f" {notes[c]}"
                elif notes and c in notes and not pd.isna(r[c]):
                    text += f" {notes[c]}"
            if notes and c in notes and text == "—":
                text += f" {notes[c]}"
            if blank and c in blank and text == "—":
                text = blank[c]
            cells.append(cell_text(text).replace("|", "\\|"))
        rows.append("| " + " | ".join(cells) + " |")
    align = ["---:" if pd.api.types.is_numeric_dtype(df[c]) else "---" for c in columns]
    return "\n".join(["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |", *rows])


# ------------------------------------------------------------------------------------- config reference

def md_text(text: str) -> str:
    """Help text or docstring prose as Markdown: reStructuredText's ``code`` and :role:`name` as code spans, and
    ``<placeholders>`` outside code spans escaped (Markdown passes them through as HTML tags, which the browser drops:
    "openai:<model>" would read "openai:")."""
    text = re.sub(r":(?:func|mod|class|meth|attr|data|obj):`~?([^`]+)`", r"`\1`", text)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    parts = re.split(r"(`[^`]*`)", text)  # odd indices: code spans, shown as they are
    return "".join(p if i % 2 else html.escape(p, quote=False) for i, p in enumerate(parts))


def cli_commands() -> str:
    """dhp.cli's docstring as Markdown: its command lines as a code block, its prose with code spans."""
    import dhp.cli

    doc = (dhp.cli.__doc__ or "").strip("\n")
    lines = doc.splitlines()
    usage = [ln[4:] for ln in lines if ln.startswith("    ")]
    prose = [ln for ln in lines[1:] if not ln.startswith("    ")]
    return "\n".join([md_text(lines[0]), "", "```text", *usage, "```", "", md_text("\n".join(prose).strip())])


def default_text(field) -> str:
    """A parameter's default as the reference shows it: "(required)" only where pydantic requires a value; a
    ``default_factory``'s value (an empty list, a mapping) is its default, computed, not a requirement."""
    if field.is_required():
        return "(required)"
    if field.default_factory is not None:
        try:
            return f"`{field.default_factory()!r}`"
        except TypeError:  # a factory that takes the validated data: no value to show before validation
            return "(computed)"
    return f"`{field.default!r}`"


def _model_table(model, flags: bool) -> str:
    from dhp.config import describe

    lines = ["| " + ("option" if flags else "key") + " | type | default | meaning |", "|---|---|---|---|"]
    for name, kind, default, help_text in describe(model):
        key = f"`--{name.replace('_', '-')}`" if flags else f"`{name}`"
        default = default_text(model.model_fields[name])
        kind = str(kind).replace(" | ", " or ").replace("|", " or ")  # a \| inside `code` shows its backslash
        lines.append(f"| {key} | `{kind}` | {default.replace('|', chr(92) + '|')} | "
                     f"{md_text(help_text).replace('|', chr(92) + '|')} |")
    return "\n".join(lines)


def config_reference() -> str:
    """Every command-line option and grid key, from the parameter models (dhp.config and the methods' Params)."""
    from dhp.config import RunParams
    from dhp.grid import GridParams
    from dhp.leaderboard import LeaderboardParams
    from dhp.methods import all_methods

    shared = set(RunParams.model_fields)
    out = ["## Commands", "", cli_commands(), "",
           "## Options every method shares (`RunParams`)", "",
           "`dhp run --method NAME` takes these, and a grid's `params:` sets them for every method.", "",
           _model_table(RunParams, flags=True), ""]
    for m in all_methods():
        own = [n for n in m.Params.model_fields if n not in shared]
        out += [f"## `{m.name}` — {m.title}", "",
                f"Paper: {m.paper}. Modes: {', '.join(f'`{x}`' for x in m.modes)}. "
                f"Its own options (`dhp run --method {m.name} --help`; a grid's "
                f"`method_params: {{{m.name}: {{...}}}}`):", ""]
        if own:
            sub = m.Params.model_fields
            lines = _model_table(m.Params, flags=True).splitlines()
            keep = lines[:2] + [ln for ln, name in zip(lines[2:], sub) if name not in shared]
            out += ["\n".join(keep), ""]
        else:
            out += ["(none beyond the shared options)", ""]
    out += ["## `dhp leaderboard` (`LeaderboardParams`)", "",
            "A grid's `leaderboard:` mapping takes the same keys (except `run_dir` and `figures_dir`, set by the grid).",
            "", _model_table(LeaderboardParams, flags=True), "",
            "## Grid file keys (`python -m dhp.grid FILE.yaml`, `GridParams`)", "",
            _model_table(GridParams, flags=False), ""]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------ course

def _notebook_intro(path: Path) -> tuple[str, str]:
    """(title, first paragraph) of a notebook's first Markdown cell."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "markdown":
            continue
        text = "".join(cell.get("source", ""))
        title, para = path.stem, ""
        for block in re.split(r"\n\s*\n", text.strip()):
            block = block.strip()
            if block.startswith("#") and title == path.stem:
                title = block.lstrip("#").strip().splitlines()[0]
            elif block and not block.startswith("#"):
                para = " ".join(block.split())
                break
        return title, para
    return path.stem, ""


#: The rule that picks, among make demo's copies of a lesson under runs/ (one per judge x mode), the one its page
#: shows: the most informative LLM-judge run. Stated on the course page (``course()``) and tested.
PICK_RULE = ("an LLM judge's run before a baseline's (the course teaches the LLM judge); then the run with the most "
             "items behind a finite interval (an interval whose ends are numbers and differ, in any of its tables); "
             "then the one with the most finite intervals; then the most items scored; then the most score rows (more "
             "aspects or variants rated); ties broken by the folder's name")
#: the columns that count a table row's items, first found wins
_ITEM_COUNTS = ("n_items", "n_docs", "n_targets", "n_pairs", "n_texts", "n")


def run_evidence(folder: Path) -> dict:
    """What a run folder's own tables show: ``items`` (the most items behind one finite interval), ``intervals``
    (how many finite intervals), ``score_rows`` (rows of its score/verdict tables, ``*scores*``/``*verdicts*``
    parquet files) and ``item_ids`` (distinct items its score rows cover). Read from the files, never typed."""
    items = intervals = score_rows = 0
    ids: set = set()
    for csv in sorted(folder.glob("*.csv")):
        try:
            df = pd.read_csv(csv)
        except (OSError, ValueError):
            continue
        count = next((c for c in _ITEM_COUNTS if c in df.columns), None)
        # an interval's two columns in a method's tables: X_lo/X_hi or lo/hi
        for lo in [c for c in df.columns if c == "lo" or c.endswith("_lo")]:
            hi = lo[:-2] + "hi"
            if hi not in df.columns:
                continue
            a, b = pd.to_numeric(df[lo], errors="coerce"), pd.to_numeric(df[hi], errors="coerce")
            ok = a.notna() & b.notna() & (b > a) & a.abs().ne(float("inf")) & b.abs().ne(float("inf"))
            intervals += int(ok.sum())
            if ok.any() and count:
                items = max(items, int(pd.to_numeric(df.loc[ok, count], errors="coerce").fillna(0).max()))
    for pq in sorted(folder.glob("*.parquet")):
        if not re.search(r"scores|verdicts", pq.name):
            continue
        try:
            df = pd.read_parquet(pq)
        except (OSError, ValueError, ImportError):
            continue
        score_rows += len(df)
        for c in ("item_id", "pair_id", "source_id", "target_id"):
            if c in df.columns:
                ids |= set(df[c].astype(str))
                break
    return {"items": items, "intervals": intervals, "score_rows": score_rows, "item_ids": len(ids)}


def _rank(path: Path) -> tuple:
    """Sort key of a notebook copy under runs/ (smallest first), PICK_RULE: an LLM judge's run before a baseline's,
    then the most items behind a finite interval, the most finite intervals, the most items scored, the most score
    rows; then by path, so
    the choice never depends on which file was written last, nor on a judge's name."""
    parts = path.relative_to(ROOT).parts
    ev = run_evidence(path.parent)
    return (any(p.startswith("baseline") for p in parts), -ev["items"], -ev["intervals"], -ev["item_ids"],
            -ev["score_rows"],
            len(parts), path.as_posix())


def course_sources() -> dict[str, Path]:
    """One executed copy per numbered notebook (name -> path): the notebook check's (build/executed/) where it ran,
    else make demo's representative run in runs/ (``_rank``). A notebook that neither executed is absent
    (scripts/course_copies.py executes those at their defaults before `make docs` builds)."""
    chosen = os.environ.get("DHP_DOCS_NOTEBOOKS")
    if chosen:
        return {p.name: p for p in sorted(Path(chosen).resolve().glob("[0-9][0-9]_*.ipynb"))}
    out: dict[str, Path] = {}
    runs = ROOT / "runs"
    ranks: dict[Path, tuple] = {}
    for p in sorted(runs.rglob("[0-9][0-9]_*.ipynb") if runs.is_dir() else []):
        if ".ipynb_checkpoints" in p.parts:
            continue
        ranks[p] = _rank(p)
        if p.name not in out or ranks[p] < ranks[out[p.name]]:
            out[p.name] = p
    for p in sorted(EXECUTED.glob("[0-9][0-9]_*.ipynb")) if EXECUTED.is_dir() else []:
        out[p.name] = p  # the notebook check's run: the one `make test` checked
    return {k: out[k] for k in sorted(out)}


def _executed_notebooks() -> tuple[Path | None, list[Path]]:
    """The folder the course's copies come from (for the course page's note) and the copies, in order."""
    found = list(course_sources().values())
    if not found:
        return None, []
    folders = {p.parent for p in found}
    common = Path(os.path.commonpath([str(f) for f in folders]))
    return common, found


def _lesson_box(para: str) -> dict[str, str]:
    """A notebook's opening box ("> **This lesson teaches** ...  > **It needs** ...  > **At its defaults it takes**
    ...") by label; {} when the paragraph is not such a box."""
    parts = re.split(r"(?:^|\s)>?\s*\*\*(This lesson teaches|It needs|At its defaults it takes)\*\*\s*", para.lstrip("> "))
    return {label: text.strip() for label, text in zip(parts[1::2], parts[2::2])}


def course() -> str:
    """The course table: every numbered notebook, what it teaches, and a link to its executed page."""
    executed = {p.name: p for p in _COURSE["notebooks"]}
    lines = ["| notebook | what it teaches | the run on its page |", "|---|---|---|"]
    for src in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        title, para = _notebook_intro(src)
        box = _lesson_box(para)
        name = f"[{title}]({src.stem}.ipynb)" if src.name in executed else f"**{title}**"
        teaches = box.get("This lesson teaches", para)
        if box.get("It needs"):
            teaches += f"<br>*Needs:* {box['It needs']}"
        # the run the page shows, read from its files; a notebook without a page: its cost at its defaults, as
        # the notebook states it
        takes = _run_facts(executed[src.name]) if src.name in executed else ""
        if not takes:
            takes = "at its defaults: " + re.sub(r";?\s*notebooks run in order\.?$", "",
                                                 box.get("At its defaults it takes", ""))
        lines.append(f"| {name} | {teaches} | {takes} |".replace("\n", " "))
    if executed:
        note = ("Each lesson page is one executed copy of its notebook, with its outputs (figures, tables and the "
                "assert cells that check them): the notebook check's (`build/executed/`, `make test`) where it ran, "
                "else one of `make demo`'s runs (`runs/`), else the copy `make docs` executed at the notebook's "
                "defaults. Where the demo ran a lesson for several judges, the page shows the most informative "
                f"run, by this rule: {PICK_RULE}. The top of each page names its run and what it holds, read from "
                "that run's own files: the time it took to execute, its settings where they differ from the "
                "notebook's defaults, and, where the run's tables are kept beside it, the items and score rows they "
                "hold and their finite intervals. The column *the run on its page* "
                "is read from the same files: items, finite intervals, the seconds it took when this site's copy "
                "ran, and any setting that differs from the notebook's defaults.")
    else:
        note = ("!!! note \"No executed notebooks in this build\"\n    This site was built without executed "
                "notebooks, so the course lists them without their pages. `make test` executes every notebook "
                "(keeping the copies in `build/executed/`) before it builds the site; `make demo` leaves them in "
                "`runs/`. Then run `make docs` again.")
    return note + "\n\n" + "\n".join(lines)


#: the page (or pages) of the site each lesson belongs to: the lesson page links there, the page back with lesson()
LESSON_PAGES = {"00": ["data.md"], "01": ["methods/dhp.md"], "02": ["methods/dhp.md"], "03": ["methods/dhp.md"],
                "04": ["methods/dhp.md"], "05": ["methods/dhp.md"], "06": ["methods/dhp.md"],
                "07": ["methods/criteria_confusion.md"], "08": ["methods/decompose_aggregate.md"],
                "09": ["methods/dual_perspective.md", "methods/human_alignment.md"], "10": ["leaderboard.md"],
                "11": ["leaderboard.md"], "12": ["your-judge.md"]}
_PAGE: dict[str, str] = {"src": ""}  # the page whose placeholders are being filled (on_page_markdown sets it)


def lesson(*numbers: str) -> str:
    """Links to the lessons ``numbers`` ("07", ...) from the current page: their executed page in the course, or
    their notebook's name where this build has no executed copy (a link to a page that is not built would fail)."""
    executed = {p.name[:2]: p.name for p in _COURSE["notebooks"]}
    up = "../" * _PAGE["src"].count("/")
    out = []
    for n in numbers:
        src = next(iter(sorted(NOTEBOOKS.glob(f"{n}_*.ipynb"))), None)
        if src is None:
            raise PluginError(f"lesson({n!r}): no notebook notebooks/{n}_*.ipynb")
        title = re.sub(r"[*_`]{1,2}(\S[^*_`]*?)[*_`]{1,2}", r"\1", _notebook_intro(src)[0])
        out.append(f"[{title}]({up}course/{src.name})" if executed.get(n) == src.name else f"`notebooks/{src.name}`")
    return ", ".join(out)


def figure_files(name: str) -> list[Path]:
    """The PNGs of ``figures/`` that draw ``name`` (a figure or a leaderboard view): ``NAME.png``, or, where the
    plotting split a tall view into one figure per panel, its parts ``NAME_<part>.png``. Parts win over a whole
    figure (a whole one beside them is left over from an older layout)."""
    parts = sorted(FIGURES.glob(f"{name}_*.png"))  # view names are no prefix of one another (dhp, hanna, ...)
    return parts or ([FIGURES / f"{name}.png"] if (FIGURES / f"{name}.png").is_file() else [])


def figures(name: str, alt: str) -> str:
    """The image links of the figure or view ``name`` (see :func:`figure_files`), found in ``figures/`` at build
    time, so a view that is split into parts needs no page edit. None there fails the build (make demo draws them)."""
    found = figure_files(name)
    if not found:
        raise PluginError(f"figures({name!r}): no figures/{name}.png nor figures/{name}_<part>.png "
                          "(make demo draws them)")
    up = "../" * _PAGE["src"].count("/")
    if len(found) == 1 and found[0].stem == name:
        return f"![{alt}]({up}figures/{name}.png)"
    return "\n\n".join(f"![{alt}: {p.stem[len(name) + 1:].replace('_', ' ')}]({up}figures/{p.name})" for p in found)


# --------------------------------------------------------------------------------------------- the events

def power_table(method: str) -> str:
    """A method's power table (dhp.analysis.power), computed at build time: the units at which a judge of each quality
    is told from chance, and the demo's n (params/demo.yaml) beside it — never typed by hand."""
    import yaml

    from dhp import methods
    from dhp.analysis import power as pw

    m = methods.get(method)
    if not m.power:
        raise PluginError(f"method {method!r} states no power (Method.power)")
    kind, field_name, units = m.power
    grid = ROOT / "params" / "demo.yaml"  # a site built from docs/ alone (no params/): the method's default n
    demo = (yaml.safe_load(grid.read_text()).get("method_params", {}).get(method, {}) if grid.is_file() else {})
    n = demo.get(field_name, m.Params.model_fields[field_name].default)
    where = "the demo's" if field_name in demo else "the default"
    what = "agreement with the gold" if kind == "agreement" else "rank correlation with the humans"
    rows = ["| judge's " + what + " | " + units + " needed (α = 0.05, 80% power) | the control of that quality |",
            "|---|---|---|"]
    for r in pw.power_table(kind).itertuples():
        need = "—" if not math.isfinite(r.units_needed) else f"{int(r.units_needed)}"
        rows.append(f"| ≥ {r.quality:g} | {need} | {('`' + r.oracle + '`') if r.oracle else '—'} |")
    rows.append("")
    rows.append(f"At {where} {field_name} = {n}: {pw.power_line(kind, int(n), units)}.")
    return "\n".join(rows)


FUNCTIONS = {"result": result, "power_table": power_table, "table": table, "count": count, "config_reference": config_reference,
             "course": course, "lesson": lesson, "figures": figures}


def _call(expr: str, where: str) -> str:
    try:
        node = ast.parse(expr, mode="eval").body
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS):
            raise ValueError(f"use one of {sorted(FUNCTIONS)}")
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except (SyntaxError, ValueError) as e:
        raise PluginError(f"{where}: placeholder {{{{ {expr} }}}} is not valid: {e}") from None
    try:
        return str(FUNCTIONS[node.func.id](*args, **kwargs))
    except PluginError as e:
        raise PluginError(f"{where}: {e}") from None


def build_stamp() -> str:
    """The footer's version line: the package version, the commit the site was built from and the build date."""
    from dhp import __version__

    try:
        commit = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=10"], cwd=ROOT, text=True,
                                capture_output=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    built = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"DHP workbench {__version__} · commit {commit or 'unknown (not a git checkout)'} · built {built} · "
            "numbers read from results/ at build time")


def on_config(config, **_):
    config["copyright"] = build_stamp()
    folder, notebooks = _executed_notebooks()
    if not notebooks and os.environ.get("DHP_DOCS_REQUIRE_EXECUTED") == "1":
        raise PluginError("no executed notebooks in build/executed/: run `python scripts/nbval.py` first "
                          "(make test runs it before the docs)")
    _COURSE.update(dir=folder, notebooks=notebooks)
    # nav titles are plain text: Markdown emphasis and code marks would show as characters
    pages = [{re.sub(r"[*_`]{1,2}(\S[^*_`]*?)[*_`]{1,2}", r"\1", _notebook_intro(p)[0]) or p.stem:
              f"course/{p.stem}.ipynb"} for p in notebooks]
    for entry in config["nav"] or []:
        if isinstance(entry, dict) and "Course" in entry:
            entry["Course"] = [*entry["Course"], *pages]
    if not notebooks:
        log.info("no executed notebooks found: the course page lists the notebooks without their pages")
    return config


def _relative_paths(text: str) -> str:
    """A notebook's JSON text with the build machine's paths made relative: the project's own folder is dropped
    (``runs/demo/...``, as a reader's clone has it), the data root is ``$DHP_DATA_DIR``, a temporary file keeps its
    name under ``$TMPDIR``, the home folder is ``~``."""
    text = text.replace(str(ROOT) + "/", "").replace(str(ROOT), ".")
    data = os.environ.get("DHP_DATA_DIR", "").rstrip("/")
    if data.startswith("/") and len(data) > 1:  # the data root a reader sets for themselves
        text = text.replace(data, "$DHP_DATA_DIR")
    tmp = re.escape(tempfile.gettempdir().rstrip("/"))
    text = re.sub(tmp + r"/(?:[^\s\"'\\/,;)]+/)*([^\s\"'\\/,;)]+)", r"$TMPDIR/\1", text)
    home = str(Path.home())
    return text.replace(home + "/", "~/") if home not in ("/", "") else text


def _page_title(src: str) -> str:
    """A Markdown page's title (its first heading, code marks dropped)."""
    text = (ROOT / "docs" / src).read_text(encoding="utf-8").lstrip()
    if text.startswith("---"):  # YAML front matter (a search boost) before the title
        text = text.split("\n---", 2)[-1] if text.count("\n---") else text
    first = next(ln for ln in text.splitlines() if ln.startswith("#"))
    return re.sub(r"\s*\(`[^`]*`\)", "", first.lstrip("# ")).replace("`", "").strip()


def _run_facts(path: Path) -> str:
    """What the run a lesson page shows holds, read from its own files: the items and score rows of its tables, its
    finite intervals and its wall time (papermill's record in the notebook, or the notebook check's,
    scripts/keep_executed.py). Empty where the copy's folder holds no tables and no time was recorded."""
    try:
        meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
    except (OSError, ValueError):
        meta = {}
    seconds = (meta.get("papermill") or {}).get("duration") or (meta.get("dhp") or {}).get("wall_seconds")
    facts = []
    folder = path.parent
    if any(folder.glob("*.csv")) or any(folder.glob("*.parquet")):
        ev = run_evidence(folder)
        if ev["item_ids"]:
            facts.append(f"{ev['item_ids']:,} item{'s' if ev['item_ids'] != 1 else ''} scored "
                         f"({ev['score_rows']:,} score rows)")
        facts.append(f"{ev['intervals']:,} finite interval{'s' if ev['intervals'] != 1 else ''} in its tables"
                     + (f", on up to {ev['items']:,} items each" if ev["items"] else
                        " (too few items for one: its intervals are shown as —)"))
    if seconds:
        facts.append(f"{float(seconds):,.0f} s to execute when it ran")
    changed = (meta.get("dhp") or {}).get("parameters")
    if changed:  # the notebook check ran this lesson with other settings than its defaults (scripts/nbval.py COURSE)
        facts.append("run with " + ", ".join(f"{k} = {v!r}" for k, v in changed.items())
                     + " instead of the notebook's defaults")
    return "; ".join(facts)


#: the folder (under course/) of the notebooks the download buttons give: each lesson as executed, without the
#: site's header cell; beside each a script defining it, so the button downloads from a page opened from disk too
DOWNLOADS = "download"


def _lesson_header(path: Path, facts: bool = True) -> str:
    """The Markdown cell each lesson page opens with: which run it shows (with what it holds, read from it) and
    the download of the notebook (the lesson as executed, without this header: ``on_post_build`` writes it)."""
    try:
        where = path.relative_to(ROOT).as_posix()
    except ValueError:
        where = path.name
    pages = LESSON_PAGES.get(path.name[:2], [])
    about = ", ".join(f'<a href="../{p.removesuffix(".md")}.html">{html.escape(_page_title(p))}</a>' for p in pages)
    facts = _run_facts(path) if facts else ""
    # raw HTML: a notebook's Markdown cells are rendered by nbconvert, without the site's Markdown extensions
    return ((f'<p class="dhp-lesson-source">The method behind this lesson: {about}.</p>' if about else "")
            + f'<p class="dhp-lesson-source"><a class="md-button md-button--primary dhp-download" '
            f'href="{DOWNLOADS}/{path.name}" download="{path.name}" data-script="{DOWNLOADS}/{path.name}.js">'
            f"Download this notebook</a> <small>the executed copy shown on this page, from <code>{html.escape(where)}"
            f"</code>" + (f" ({html.escape(facts)})" if facts else "") + f"; without outputs it is "
            f"<code>notebooks/{path.name}</code> (open it with <code>make lab</code>).</small></p>")


_DEFAULTS_LINE = re.compile(r"^>\s*\*\*At its defaults it takes\*\*.*$", re.M)


def _this_run_box(nb: dict, facts: str) -> bool:
    """On a lesson page, the opening box's cost line (measured at the notebook's defaults, typed in the notebook)
    becomes what the run shown holds and took, read from it (``_run_facts``): the page describes the run it shows.
    The course page keeps the defaults' line; the downloaded notebook is unchanged."""
    if not facts or not nb.get("cells") or nb["cells"][0].get("cell_type") != "markdown":
        return False
    text = "".join(nb["cells"][0].get("source", ""))
    new = _DEFAULTS_LINE.sub(lambda m: "> **The run on this page** " + facts + ".", text, count=1)
    nb["cells"][0]["source"] = new
    return new != text


#: every relative link in a lesson's Markdown cells must name a file of the site (the strict build's rule for pages)
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|href=[\"']([^\"']+)[\"']")


def lesson_links(nb: dict) -> list[str]:
    """The relative link targets of a notebook's Markdown cells (web, mail and in-page links aside)."""
    out = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "markdown":
            continue
        text = re.sub(r"```.*?```|`[^`]*`", "", "".join(cell.get("source", "")), flags=re.S)  # code is no link
        for a, b in LINK.findall(text):
            target = (a or b).split("#")[0].split("?")[0]
            if target and not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) and not target.startswith("/"):
                out.append(target)
    return out


def dead_lesson_links(nb: dict, name: str, known: set[str]) -> list[str]:
    """Links of lesson ``name`` (course/NAME) that resolve to no file of the site: ``known`` holds the site's source
    paths (docs/, the staged course) and their output paths (.md as .html)."""
    dead = []
    for target in lesson_links(nb):
        resolved = os.path.normpath(os.path.join("course", target)).replace(os.sep, "/")
        if resolved not in known:
            dead.append(f"course/{name}: the link '{target}' names no page or file of the site")
    return dead


@event_priority(100)  # before mkdocs-jupyter's on_files, so the notebooks added here become its pages
def on_files(files, config, **_):
    shutil.rmtree(STAGE, ignore_errors=True)
    (STAGE / "course").mkdir(parents=True)
    for p in _COURSE["notebooks"]:
        nb = json.loads(_relative_paths(p.read_text(encoding="utf-8")))
        in_box = _this_run_box(nb, _run_facts(p))
        nb["cells"].insert(1 if nb["cells"] and nb["cells"][0].get("cell_type") == "markdown" else 0,
                           {"cell_type": "markdown", "metadata": {}, "source": _lesson_header(p, not in_box)})
        (STAGE / "course" / p.name).write_text(json.dumps(nb, indent=1), encoding="utf-8")
        files.append(File(f"course/{p.name}", str(STAGE), config["site_dir"], config["use_directory_urls"]))
    for p in sorted(FIGURES.glob("*.png")):
        files.append(File.generated(config, f"figures/{p.name}", abs_src_path=str(p)))
    # the strict build checks the links of Markdown pages; a lesson's cells are rendered by nbconvert, unchecked:
    # a dead link there fails the build here (strict or not)
    known = {f.src_uri for f in files} | {f.dest_uri for f in files}
    dead = [d for p in _COURSE["notebooks"]
            for d in dead_lesson_links(json.loads(p.read_text(encoding="utf-8")), p.name, known)]
    if dead:
        raise PluginError("dead link(s) in the course's lessons (fix the notebook's Markdown cell):\n  "
                          + "\n  ".join(dead))
    return files


#: the download button from a page opened from disk: Chromium ignores ``download`` on a file:// link and shows the
#: JSON; the page loads the notebook's script (a <script> loads from disk) and saves it as a file (a Blob)
DOWNLOAD_JS = """<script>
document.addEventListener("click", function (e) {
  var a = e.target.closest && e.target.closest("a.dhp-download");
  if (!a || location.protocol !== "file:") return;
  e.preventDefault();
  var save = function () {
    var url = URL.createObjectURL(new Blob([window.DHP_NOTEBOOK], {type: "application/x-ipynb+json"}));
    var link = document.createElement("a");
    link.href = url; link.download = a.getAttribute("download"); document.body.appendChild(link); link.click();
    setTimeout(function () { URL.revokeObjectURL(url); link.remove(); }, 1000);
  };
  if (window.DHP_NOTEBOOK) return save();
  var s = document.createElement("script");
  s.src = a.getAttribute("data-script"); s.onload = save; document.head.appendChild(s);
});
</script>
"""


def download_copy(path: Path) -> str:
    """The notebook a lesson's download button gives: the executed copy with the build machine's paths made
    relative, without the site's header cell (the staged page's copy has it)."""
    return json.dumps(json.loads(_relative_paths(path.read_text(encoding="utf-8"))), indent=1, ensure_ascii=False)


#: a formula in a search snippet: $D$ -> D, $\\log_{0.05} p$ -> log_0.05 p (the snippets are plain text; MathJax
#: does not run there)
_MATH = re.compile(r"\$\$?([^$]{1,200}?)\$\$?")


def plain_formula(tex: str) -> str:
    """A TeX formula as plain text for a search snippet: commands lose their backslash, braces go."""
    text = re.sub(r"\\(?:mathrm|text|mathbf|mathit|operatorname)\s*", "", tex)
    text = re.sub(r"\\([A-Za-z]+)", r"\1", text).replace("{", "").replace("}", "")
    return re.sub(r"\s+", " ", text.replace("\\", "")).strip()


def plain_search_text(text: str) -> str:
    """A page's search text with its $...$ formulas as plain text."""
    return _MATH.sub(lambda m: plain_formula(m.group(1)), text)


def _search_index(site: Path) -> None:
    """The search index (search_index.json, or the offline plugin's search_index.js) with formulas as plain text."""
    for path in (site / "search" / "search_index.json", site / "search" / "search_index.js"):
        if not path.is_file():
            continue
        raw = path.read_text(encoding="utf-8")
        prefix = raw[:raw.index("{")]
        suffix = raw[raw.rindex("}") + 1:]
        index = json.loads(raw[len(prefix):len(raw) - len(suffix)])
        for doc in index.get("docs", []):
            doc["text"] = plain_search_text(doc.get("text", ""))
            doc["title"] = plain_search_text(doc.get("title", ""))
        path.write_text(prefix + json.dumps(index, ensure_ascii=False, separators=(",", ":")) + suffix,
                        encoding="utf-8")


@event_priority(-100)  # after the search and offline plugins have written the index
def on_post_build(config, **_):
    _search_index(Path(config["site_dir"]))
    out = Path(config["site_dir"]) / "course" / DOWNLOADS
    shutil.rmtree(out, ignore_errors=True)
    if _COURSE["notebooks"]:
        out.mkdir(parents=True)
    for p in _COURSE["notebooks"]:
        text = download_copy(p)
        (out / p.name).write_text(text, encoding="utf-8")
        (out / f"{p.name}.js").write_text(f"window.DHP_NOTEBOOK = {json.dumps(text)};\n", encoding="utf-8")
    # mkdocs-jupyter's own default URL is empty (no formula would render); a CDN would fail offline
    static = Path(jupyter_server_mathjax.__file__).parent / "static"
    dest = Path(config["site_dir"]) / "assets" / "mathjax"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(static, dest)


#: The bundled MathJax (jupyter-server-mathjax) carries only the STIX-Web fonts: MathJax's HTML-CSS output defaults to
#: its TeX fonts, whose fontdata.js is not there (a 404 on every page with formulas, then a fallback font). Read by
#: MathJax.js when it loads (window.MathJax set before it), so this one setting serves every page.
FONTS = '"HTML-CSS": {availableFonts: ["STIX-Web"], preferredFont: "STIX-Web", webFont: "STIX-Web", imageFont: null}'
#: MathJax for a Markdown page with formulas (pymdownx.arithmatex writes them as MathJax 2's own math/tex scripts)
MATHJAX = ('<script>window.MathJax = {{config: ["TeX-AMS-MML_HTMLorMML-full.js", "Safe.js"], messageStyle: "none", '
           + FONTS.replace("{", "{{").replace("}", "}}") +
           '}};</script>\n<script src="{root}assets/mathjax/MathJax.js"></script>\n')
#: the same font setting for a notebook page, which loads MathJax itself (mkdocs.yml's custom_mathjax_url)
NOTEBOOK_MATHJAX = re.compile(r'<script src="[^"]*assets/mathjax/MathJax\.js[^"]*">')
#: a table in a notebook's output (pandas' HTML): longer than LONG_TABLE rows, the page shows its first SHORT_TABLE
#: rows and the whole table one click away
DATAFRAME = re.compile(r'<table[^>]*class="dataframe"[^>]*>.*?</table>', re.S)
LONG_TABLE, SHORT_TABLE = 15, 10


def trim_long_tables(output: str) -> str:
    """Every pandas table of more than LONG_TABLE body rows as its first SHORT_TABLE rows, then the whole table
    inside a <details> element ("all N rows"): a reader sees what the lesson discusses without scrolling past it."""
    def trim(m: re.Match) -> str:
        table = m.group(0)
        body = re.search(r"<tbody>(.*)</tbody>", table, re.S)
        rows = re.findall(r"<tr.*?</tr>", body.group(1), re.S) if body else []
        if len(rows) <= LONG_TABLE:
            return table
        head = table[:body.start(1)] + "".join(rows[:SHORT_TABLE]) + table[body.end(1):]
        return (f'{head}<details class="dhp-long-table"><summary>The first {SHORT_TABLE} of {len(rows)} rows '
                f"above: show all {len(rows)} rows</summary>{table}</details>")
    return DATAFRAME.sub(trim, output)


def on_post_page(output, page, config, **_):
    if page.file.src_uri.endswith(".ipynb"):
        output = trim_long_tables(output)
        # a lesson's link to a Markdown page (checked by on_files) goes to its HTML page, as on the Markdown pages
        output = re.sub(r'(<a href="(?![a-z]+:)[^"#]*?)\.md([#"])', r"\1.html\2", output)
        output = output.replace("</body>", DOWNLOAD_JS + "</body>", 1)
        m = NOTEBOOK_MATHJAX.search(output)
        if m:
            output = output[:m.start()] + "<script>window.MathJax = {" + FONTS + "};</script>" + output[m.start():]
        return output
    if 'class="arithmatex"' not in output:
        return output  # a page without formulas needs no MathJax
    root = "../" * page.file.dest_uri.count("/")
    return output.replace("</body>", MATHJAX.format(root=root) + "</body>", 1)


def on_page_markdown(markdown, page, **_):
    _PAGE["src"] = page.file.src_uri
    return PLACEHOLDER.sub(lambda m: _call(m.group(1), page.file.src_uri), markdown)


# ------------------------------------------------------------------------------------ README's headline table

README = ROOT / "README.md"
README_START, README_END = "<!-- headline table: python docs/hooks.py --readme -->", "<!-- end of headline table -->"


def readme_table() -> str:
    """README's small headline table: the leaderboard's DHP view, from results/leaderboard.csv."""
    return table("leaderboard.csv", ["rank", "judge", "mode", "value", "n", "cluster"],
                 where={"view": "dhp", "measure": "D_avg", "status": "ok"}, ci={"value": ["lo", "hi"]},
                 rename={"value": "D_avg (95% CI)", "n": "items"}, sort=["rank"])


DATA_START, DATA_END = "<!-- data table: python docs/hooks.py --readme -->", "<!-- end of data table -->"


def readme_data_table() -> str:
    """README's data table: one row per declared data set (dhp/resources/data_registry.json)."""
    from dhp.datasets import declared_files

    rows = ["| data set | size | licence | source | in the demo |", "|---|---:|---|---|---|"]
    for name, s in declared_files.sets().items():
        repos = sorted({f"{f.repository}@{f.commit[:8]}" for f in s.files if f.repository}) or ["user-supplied"]
        size = declared_files._size(s.bytes) if s.bytes else "not declared"
        licence = s.licence if s.fetch == "open" else "not openly licensed"
        rows.append(f"| `{name}` | {size} | {licence.split(';')[0]} | {', '.join(repos)} | {'yes' if s.demo else ''} |")
    return "\n".join(rows)


def _replace(text: str, start_mark: str, end_mark: str, body: str) -> str:
    start, end = text.index(start_mark) + len(start_mark), text.index(end_mark)
    return text[:start] + "\n" + body + "\n" + text[end:]


def readme_block(text: str) -> str:
    """``text`` (README.md) with its headline table rewritten from results/ and its data table from the registry."""
    text = _replace(text, README_START, README_END, readme_table())
    return _replace(text, DATA_START, DATA_END, readme_data_table())


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--readme"]:
        raise SystemExit("usage: python docs/hooks.py --readme   (rewrite README.md's headline table from results/ and its data table from the registry)")
    README.write_text(readme_block(README.read_text(encoding="utf-8")), encoding="utf-8")
