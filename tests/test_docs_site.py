"""The documentation site's machinery: README as a front page, numbers read from results/, the generated reference,
and the notebook check keeping its executed copies for the site (the build itself and the browser check run in
`make test` after pytest: `make docs`, scripts/check_site.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jupyter_server_mathjax
import nbformat
import pandas as pd
import pytest

from dhp import plots
from dhp.plots import decomposition as decomposition_plots

ROOT = Path(__file__).resolve().parents[1]
import mkdocs  # noqa: F401,E402 - a test dependency: missing, the module fails rather than skips


def _hooks():
    spec = importlib.util.spec_from_file_location("dhp_docs_hooks", ROOT / "docs" / "hooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_is_a_front_page():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    for needed in ("make demo", "make test", "make docs", "site/index.html", "CHANGELOG.md",
                   "figures/report_card_comparison.png"):
        assert needed in text, needed
    assert "../shared" not in text  # a path that exists only on development machines
    assert (ROOT / "CHANGELOG.md").is_file()
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert (ROOT / image).is_file(), image


def test_readme_headline_table_is_the_results():
    hooks = _hooks()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert hooks.readme_block(text) == text, (
        "README.md's headline table differs from results/leaderboard.csv: run `python docs/hooks.py --readme`")


def test_placeholders_read_results_and_refuse_what_is_missing(tmp_path, monkeypatch):
    hooks = _hooks()
    pd.DataFrame({"judge": ["a", "b"], "value": [0.5, float("nan")], "lo": [0.25, 1.0], "hi": [0.75, 2.0],
                  "n": [10, 3]}).to_csv(tmp_path / "t.csv", index=False)
    monkeypatch.setattr(hooks, "RESULTS", tmp_path)
    assert hooks.result("t.csv", "value", judge="a") == "0.50"
    assert hooks.result("t.csv", "value", judge="b") == "—"  # NaN is shown as missing, never as 0
    assert hooks.count("t.csv", judge="a") == "1"
    md = hooks.table("t.csv", ["judge", "value", "n"], ci={"value": ["lo", "hi"]})
    assert "| a | 0.50 (0.25–0.75) | 10 |" in md and "| b | — (1.00–2.00) | 3 |" in md
    page = "x {{ result('t.csv', 'n', judge='b') }} y"
    assert hooks.PLACEHOLDER.sub(lambda m: hooks._call(m.group(1), "p.md"), page) == "x 3 y"
    from mkdocs.exceptions import PluginError

    for bad in ("result('t.csv', 'value', judge='zzz')", "result('t.csv', 'nope', judge='a')",
                "table('missing.csv', ['judge'])", "__import__('os').system('true')", "result(open('x'))"):
        with pytest.raises(PluginError):
            hooks._call(bad, "p.md")


def test_a_pages_figures_of_a_view_are_found_at_build_time_whole_or_split(tmp_path, monkeypatch):
    """{{ figures(view, alt) }} links the view's one figure, or every part of a view the plotting split
    (<view>_<part>.png), from the page's folder; none fails the build (issue 41: the split renamed the leaderboard's
    figures and the page linked the old names). Control: the old page's fixed link to leaderboard_hanna.png has no
    file once the view is split."""
    from mkdocs.exceptions import PluginError

    hooks = _hooks()
    monkeypatch.setattr(hooks, "FIGURES", tmp_path)
    for name in ("leaderboard_dhp.png", "leaderboard_hanna_relevance.png", "leaderboard_hanna_coherence.png"):
        (tmp_path / name).write_bytes(b"png")
    hooks._PAGE["src"] = "leaderboard.md"
    assert hooks._call("figures('leaderboard_dhp', 'The DHP view')", "p.md") == \
        "![The DHP view](figures/leaderboard_dhp.png)"
    md = hooks._call("figures('leaderboard_hanna', 'The HANNA views')", "p.md")
    assert md == ("![The HANNA views: coherence](figures/leaderboard_hanna_coherence.png)\n\n"
                  "![The HANNA views: relevance](figures/leaderboard_hanna_relevance.png)")
    assert not (tmp_path / "leaderboard_hanna.png").exists()  # the control: the old fixed link is dead
    hooks._PAGE["src"] = "methods/dhp.md"
    assert "](../figures/leaderboard_dhp.png)" in hooks._call("figures('leaderboard_dhp', 'x')", "methods/dhp.md")
    with pytest.raises(PluginError, match="leaderboard_frank"):
        hooks._call("figures('leaderboard_frank', 'The FRANK views')", "p.md")
    page = (ROOT / "docs" / "leaderboard.md").read_text(encoding="utf-8")
    assert not re.search(r"\]\(figures/leaderboard_\w+\.png\)", page), "leaderboard.md links a view's figure by name"


def test_every_notebook_opens_with_its_lesson_box_and_the_course_table_shows_it():
    """Issue 28: each notebook opens with what it teaches, what it needs and how long it takes at its defaults;
    the course page's table is built from those boxes (a notebook without one would show a blank row)."""
    hooks = _hooks()
    labels = {"This lesson teaches", "It needs", "At its defaults it takes"}
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        box = hooks._lesson_box(hooks._notebook_intro(path)[1])
        assert set(box) == labels and all(box.values()), (path.name, sorted(box))
    # the control: a paragraph that is not a box gives no labels
    assert hooks._lesson_box("One call puts your judge beside the published ones.") == {}
    rows = [r for r in hooks.course().splitlines() if r.startswith("| ") and "notebook |" not in r]
    assert len(rows) == len(list((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")))
    assert not any("run in order" in r or "**This lesson" in r for r in rows)


def test_reference_lists_every_parameter_of_every_method():
    from dhp.config import RunParams
    from dhp.grid import GridParams
    from dhp.methods import all_methods

    ref = _hooks().config_reference()
    for m in all_methods():
        assert f"`{m.name}`" in ref
        for name in m.Params.model_fields:
            assert f"`--{name.replace('_', '-')}`" in ref, (m.name, name)
    for name in RunParams.model_fields:
        assert f"`--{name.replace('_', '-')}`" in ref, name
    for name in GridParams.model_fields:  # grid keys keep their YAML spelling
        assert f"| `{name}` |" in ref, name


def test_nbval_keeps_the_executed_notebook(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# T\n\nA lesson."),
                                         nbformat.v4.new_code_cell(f"print('{tmp_path}/runs/nb')"),
                                         nbformat.v4.new_code_cell("6 * 7")])
    nb.metadata["dhp"] = {"parameters": {"n_items": 10}}  # what scripts/nbval.py writes for a COURSE notebook
    nbformat.write(nb, tmp_path / "01_t.ipynb")
    shutil.copy(ROOT / "scripts" / "keep_executed.py", tmp_path / "conftest.py")
    keep = tmp_path / "kept"
    env = {**os.environ, "DHP_NBVAL_KEEP": str(keep), "DHP_NBVAL_TMP": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "-p", "no:cacheprovider", "-q",
                          "01_t.ipynb"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    kept = nbformat.read(keep / "01_t.ipynb", as_version=4)
    assert kept.cells[1].outputs[0]["text"].strip() == "runs/nb"  # the temporary folder's path made relative
    assert kept.cells[2].outputs[0]["data"]["text/plain"] == "42"
    assert (kept.cells[1].execution_count, kept.cells[2].execution_count) == (1, 2)
    # the settings it ran with survive beside the timing the page reads (docs/hooks.py _run_facts)
    assert kept.metadata["dhp"]["parameters"] == {"n_items": 10} and kept.metadata["dhp"]["wall_seconds"] > 0
    # the per-notebook timing table (issue 28: timings listed): one row with the notebook's two code cells
    row = next(line for line in out.stdout.splitlines() if line.startswith("01_t.ipynb"))
    assert float(row.split()[1]) > 0 and float(row.split()[2]) > 0 and row.split()[3] == "2"


def test_the_course_settings_are_the_notebooks_parameters_and_give_dhp_intervals():
    """Issue 41: the DHP lessons the notebook check executes (and the site shows) judge >= 10 items, so D has finite
    intervals; each setting scripts/nbval.py overrides must be a name the notebook's parameters cell declares
    (papermill would inject an unknown name silently, and the lesson would run at its defaults)."""
    # by path: "nbval" is also the pytest plugin's package name
    spec = importlib.util.spec_from_file_location("dhp_nbval_script", ROOT / "scripts" / "nbval.py")
    nbval = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nbval)
    from papermill.iorw import load_notebook_node

    assert nbval.COURSE["01_perturb"]["n_items"] >= 10 and nbval.COURSE["02_judge"]["n_items"] >= 10
    for stem, values in nbval.COURSE.items():
        declared = nbval.declared(load_notebook_node(str(ROOT / "notebooks" / f"{stem}.ipynb")))
        assert set(values) <= declared, (stem, set(values) - declared)
    # the page names a setting that is not the notebook's default
    path = tempfile.mkdtemp()
    nbfile = Path(path) / "02_judge.ipynb"
    nbfile.write_text(json.dumps({"metadata": {"dhp": {"wall_seconds": 150.0, "parameters":
                                                       {"n_items": 10, "metrics": ["coherence"]}}}}))
    facts = _hooks()._run_facts(nbfile)
    assert facts == ("150 s to execute when it ran; run with n_items = 10, metrics = ['coherence'] instead of the "
                     "notebook's defaults"), facts
    shutil.rmtree(path)


def _check_site():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import check_site
    finally:
        sys.path.pop(0)
    return check_site


def test_the_search_check_fails_when_a_lesson_outranks_its_method_page():
    """Issue 41: search ranks a method's page first for its name. scripts/check_site.py reads the live result list in
    Chromium (make test runs it on the built site); here its rule, on the lists the site gave without the method
    pages' search boost (a lesson first) and with it."""
    cs = _check_site()
    without_boost = {"discernment": ["course/04_figures.html", "course/03_discernment.html", "methods/dhp.html"]}
    with_boost = {"discernment": ["methods/dhp.html#what-it-measures", "course/04_figures.html"]}
    expected = {"discernment": "methods/dhp.html"}
    assert cs.search_problems(without_boost, expected) == [
        "search for 'discernment' lists course/04_figures.html first, not methods/dhp.html (the first three: "
        "['course/04_figures.html', 'course/03_discernment.html', 'methods/dhp.html'])"]
    assert cs.search_problems(with_boost, expected) == []
    assert cs.search_problems({}, expected)  # nothing listed (search never ran) is a problem, not a pass
    # every method of the registry has its name searched
    from dhp.methods import all_methods
    pages = set(cs.SEARCHES.values())
    named = {f"methods/{m.name}.html" for m in all_methods() if (ROOT / "docs" / "methods" / f"{m.name}.md").exists()}
    assert named <= pages and len(pages) == len(list((ROOT / "docs" / "methods").glob("*.md")))


def _site_tree(tmp_path: Path) -> Path:
    """A copy of the site's sources (docs/, mkdocs.yml) beside the real results/, figures/ and notebooks/."""
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copytree(ROOT / "docs", tree / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", tree / "mkdocs.yml")
    for d in ("results", "figures", "notebooks"):
        (tree / d).symlink_to(ROOT / d)
    return tree


def _make_docs(tree: Path, tmp_path: Path, notebooks: Path | None = None) -> subprocess.CompletedProcess:
    """The Makefile's `docs` recipe's mkdocs command, run on ``tree`` (the course without executed notebooks, or
    with the executed copies in ``notebooks``)."""
    recipe = re.search(r"^docs:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    line = next(ln.strip() for ln in recipe.splitlines() if "mkdocs build" in ln)
    command = line.replace("$(BIN)/", str(Path(sys.executable).parent) + "/") + f" -d {tmp_path / 'site'}"
    empty = tmp_path / "no-notebooks"
    empty.mkdir(exist_ok=True)
    env = {**os.environ, "DHP_DOCS_NOTEBOOKS": str(notebooks or empty), "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, shell=True, cwd=tree, env=env, capture_output=True, text=True, timeout=600)


def test_make_docs_fails_on_a_broken_link_or_a_page_missing_from_nav(tmp_path):
    """Issue 36: `make docs` is a strict build that really fails (no --quiet hiding the warnings from strict mode);
    the tree passes it with every page in nav. Controls: a link to a page that does not exist, a page not in nav."""
    tree = _site_tree(tmp_path)
    ok = _make_docs(tree, tmp_path)
    assert ok.returncode == 0, ok.stderr[-3000:]
    with open(tree / "docs" / "index.md", "a", encoding="utf-8") as f:
        f.write("\nSee [a page that does not exist](no-such-page.md).\n")
    (tree / "docs" / "orphan.md").write_text("# A page nobody put in nav\n", encoding="utf-8")
    bad = _make_docs(tree, tmp_path)
    assert bad.returncode != 0
    assert "no-such-page.md" in bad.stderr and "orphan.md" in bad.stderr, bad.stderr[-3000:]


def test_make_docs_fails_on_a_dead_link_inside_a_lesson_and_downloads_the_lesson_without_its_header(tmp_path):
    """Issue 41: a lesson's Markdown cells are rendered by nbconvert, which the strict build did not check: a dead
    link built with exit 0. Now the build fails naming it; a link to a page of the site builds (and points to its
    HTML page). The download button gives the lesson as executed, without the site's header cell, beside a script
    that lets it download from a page opened from disk."""
    tree = _site_tree(tmp_path)
    lessons = tmp_path / "lessons"
    lessons.mkdir()
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# 99 · A lesson\n\nSee [the method](../methods/dhp.md#what-it-measures) and "
                                      "[the data](../data.md); `[not a link](nowhere.md)`; [web](https://example.org)."),
        nbformat.v4.new_code_cell("6 * 7")])
    nbformat.write(nb, lessons / "99_lesson.ipynb")
    ok = _make_docs(tree, tmp_path, lessons)
    assert ok.returncode == 0, ok.stderr[-3000:]
    site = tmp_path / "site"
    page = (site / "course" / "99_lesson.html").read_text(encoding="utf-8")
    assert 'href="../methods/dhp.html#what-it-measures"' in page and 'href="../data.html"' in page
    button = re.search(r'<a class="[^"]*dhp-download"[^>]*>', page).group(0)  # nbconvert sorts the attributes
    assert 'href="download/99_lesson.ipynb"' in button and 'data-script="download/99_lesson.ipynb.js"' in button
    got = json.loads((site / "course" / "download" / "99_lesson.ipynb").read_text(encoding="utf-8"))
    assert ["".join(c["source"]) for c in got["cells"]] == [c["source"] for c in nb.cells]  # no header cell
    script = (site / "course" / "download" / "99_lesson.ipynb.js").read_text(encoding="utf-8")
    assert json.loads(json.loads(script.removeprefix("window.DHP_NOTEBOOK = ").rstrip(";\n"))) == got
    if shutil.which("chromium"):  # from file://: the click saves the notebook through a Blob (a download), not JSON
        probe = ("<script>window.addEventListener('load', function () { var click = HTMLAnchorElement.prototype.click;"
                 "HTMLAnchorElement.prototype.click = function () { var a = this; if (a.href.indexOf('blob:') !== 0) "
                 "return click.call(this); var x = new XMLHttpRequest(); x.open('GET', a.href); x.onload = function () {"
                 "document.body.insertAdjacentHTML('beforeend', '<pre id=dbg>' + JSON.stringify([a.download, "
                 "JSON.parse(x.responseText).cells.length]) + '</pre>'); }; x.send(); };"
                 "document.querySelector('a.dhp-download').click(); });</script>")
        (site / "course" / "probe.html").write_text(page.replace("</body>", probe + "</body>"), encoding="utf-8")
        out = subprocess.run([_check_site().chromium(), *_check_site().FLAGS, "--dump-dom",
                              (site / "course" / "probe.html").as_uri()], capture_output=True, text=True, timeout=180)
        assert '<pre id="dbg">["99_lesson.ipynb",2]</pre>' in out.stdout, out.stdout[-500:]
    # the control: a dead link in the lesson fails the build, naming the lesson and the link
    nb.cells[0].source += " Then [the next step](../no-such-page.md)."
    nbformat.write(nb, lessons / "99_lesson.ipynb")
    bad = _make_docs(tree, tmp_path, lessons)
    assert bad.returncode != 0
    assert "course/99_lesson.ipynb: the link '../no-such-page.md' names no page" in bad.stderr, bad.stderr[-3000:]


def test_search_ranks_a_method_page_first_and_shows_no_raw_formula(tmp_path):
    """Issue 41: "discernment" found lesson 08 above the DHP method page, and snippets showed raw `$D$`. The method
    pages carry a search boost (front matter), and the index's text has formulas as plain text."""
    hooks = _hooks()
    for page in sorted((ROOT / "docs" / "methods").glob("*.md")):
        front = page.read_text(encoding="utf-8").split("\n---", 1)[0]
        assert front.startswith("---") and re.search(r"search:\s*\n\s+boost: [2-9]", front), page.name
    assert hooks.plain_search_text(r"the score $D$ is $\log_{0.05} p$, $$\mathrm{D}_{avg}$$") == \
        "the score D is log_0.05 p, D_avg"
    site = tmp_path / "site"
    (site / "search").mkdir(parents=True)
    index = {"config": {}, "docs": [{"location": "a.html", "title": "$D$ per item", "text": "so $D > 1$ here"}]}
    (site / "search" / "search_index.js").write_text("var __index = " + json.dumps(index) + ";")
    hooks._search_index(site)
    text = (site / "search" / "search_index.js").read_text()
    assert text.startswith("var __index = ") and text.endswith(";")
    doc = json.loads(text.removeprefix("var __index = ").rstrip(";"))["docs"][0]
    assert (doc["title"], doc["text"]) == ("D per item", "so D > 1 here")


def _demo_run(folder: Path, items: int, metrics: int, finite: bool = True) -> None:
    """A run folder as make demo leaves it for DHP: discernment.csv (intervals, n_items) and scores.parquet."""
    folder.mkdir(parents=True, exist_ok=True)
    nan = float("nan")
    pd.DataFrame({"perturbation": ["a", "b"], "D": [1.5, 2.0], "D_lo": [1.2, 1.8] if finite else [nan, nan],
                  "D_hi": [1.7, 2.2] if finite else [nan, nan], "n_items": [items, items]}
                 ).to_csv(folder / "discernment.csv", index=False)
    pd.DataFrame({"item_id": [f"i{i}" for i in range(items) for _ in range(14 * metrics)],
                  "score": 1.0}).to_parquet(folder / "scores.parquet")


def test_the_course_shows_the_most_informative_llm_judge_run_by_its_stated_rule(tmp_path, monkeypatch):
    """Issue 41: make demo leaves one copy of 02/03 per judge x mode; the course shows, by the rule the course page
    states (hooks.PICK_RULE), an LLM judge's run before a baseline's, then the one with the most items behind a
    finite interval, then the most finite intervals, the most score rows, the name: never the newest file, and no
    judge named in the code. The notebook check's copy wins where there is one."""
    hooks = _hooks()
    monkeypatch.setattr(hooks, "ROOT", tmp_path)
    monkeypatch.setattr(hooks, "EXECUTED", tmp_path / "build" / "executed")
    monkeypatch.delenv("DHP_DOCS_NOTEBOOKS", raising=False)
    base = tmp_path / "runs" / "demo" / "dhp" / "summeval"
    # today's demo: SmolLM2 asked for a score on 1 item (no interval), its likelihood on 10, Gemma on 3, the
    # baselines on 100 items (the newest files)
    runs = {"embedded-logprobs": (1, 4, False), "embedded-likelihood": (10, 1, True),
            "embedded_gemma-3-270m-likelihood": (3, 1, True), "baseline_chrf_src-metric": (100, 1, True),
            "baseline_length_ratio-metric": (100, 1, True)}
    for i, (judge, (items, metrics, finite)) in enumerate(runs.items()):
        _demo_run(base / judge, items, metrics, finite)
        for name in ("02_judge.ipynb", "03_discernment.ipynb"):
            (base / judge / name).write_text("{}")
            os.utime(base / judge / name, (1e9 + i, 1e9 + i))
    (base / "01_perturb.ipynb").write_text("{}")
    chosen = hooks.course_sources()
    assert chosen["02_judge.ipynb"] == base / "embedded-likelihood" / "02_judge.ipynb"
    assert chosen["03_discernment.ipynb"] == base / "embedded-likelihood" / "03_discernment.ipynb"
    assert chosen["01_perturb.ipynb"] == base / "01_perturb.ipynb"
    assert hooks.run_evidence(base / "embedded-logprobs") == {"items": 0, "intervals": 0, "score_rows": 56,
                                                              "item_ids": 1}
    # the rating judge on 10 items (issue 41's demo): as many items as its likelihood, more score rows: it wins
    _demo_run(base / "embedded-logprobs", 10, 4)
    assert hooks.course_sources()["03_discernment.ipynb"].parent.name == "embedded-logprobs"
    # no LLM judge with an interval: still an LLM judge's run (the most items scored), never a baseline's
    for judge in ("embedded-logprobs", "embedded-likelihood", "embedded_gemma-3-270m-likelihood"):
        _demo_run(base / judge, runs[judge][0], runs[judge][1], finite=False)
    assert hooks.course_sources()["02_judge.ipynb"].parent.name == "embedded-likelihood"
    # the page states what the run holds, read from its files (and the time papermill recorded)
    (base / "embedded-logprobs" / "02_judge.ipynb").write_text(json.dumps({"metadata": {"papermill":
                                                                                        {"duration": 152.6}}}))
    facts = hooks._run_facts(base / "embedded-logprobs" / "02_judge.ipynb")
    assert facts == ("1 item scored (56 score rows); 0 finite intervals in its tables (too few items for one: its "
                     "intervals are shown as —); 153 s to execute when it ran"), facts
    # the lesson page's opening box says what this run holds and took, not the notebook's typed defaults
    box = {"cells": [{"cell_type": "markdown", "source": "# 02 · Judge\n\n> **It needs** 01.  \n> **At its defaults "
                      "it takes** about 2 minutes (its 112 judge calls, 2 items; 128 s wall).\n\nText."}]}
    assert hooks._this_run_box(box, facts)
    assert box["cells"][0]["source"] == ("# 02 · Judge\n\n> **It needs** 01.  \n> **The run on this page** "
                                         + facts + ".\n\nText.")
    assert "112" not in box["cells"][0]["source"] and not hooks._this_run_box(box, facts)
    monkeypatch.setitem(hooks._COURSE, "notebooks", [base / "embedded-logprobs" / "02_judge.ipynb"])
    assert "most items behind a finite interval" in hooks.PICK_RULE and hooks.PICK_RULE in hooks.course()
    (tmp_path / "build" / "executed").mkdir(parents=True)
    (tmp_path / "build" / "executed" / "02_judge.ipynb").write_text("{}")
    assert hooks.course_sources()["02_judge.ipynb"] == tmp_path / "build" / "executed" / "02_judge.ipynb"


def test_make_docs_executes_the_lessons_no_run_left(tmp_path, monkeypatch):
    """After make demo alone (no 00, 06, 12 in runs/), scripts/course_copies.py names the notebooks to execute, with
    the ones they read from."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import course_copies
    finally:
        sys.path.pop(0)
    hooks = _hooks()
    names = [p.name for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))]
    have = {n: tmp_path / n for n in names if n[:2] not in ("00", "06", "12")}
    monkeypatch.setattr(course_copies, "_load", lambda name, path: type("H", (), {"course_sources": lambda: have}))
    assert course_copies.missing() == ["00", "06", "12"]
    del have["03_discernment.ipynb"]
    assert course_copies.missing() == ["00", "01", "02", "03", "06", "12"]
    assert hooks  # the hooks module itself imports (course_copies loads it the same way)


def test_lesson_pages_show_paths_relative_to_the_project(tmp_path, monkeypatch):
    """Issue 36: no page shows the build machine's paths: the project folder is dropped, a temporary file keeps only
    its name, the data root is $DHP_DATA_DIR, the home folder is ~."""
    hooks = _hooks()
    tmp = tempfile.gettempdir()
    monkeypatch.setenv("DHP_DATA_DIR", "/srv/data/dhp")
    text = json.dumps({"source": [f'run_dir = "{hooks.ROOT}/runs/demo/dhp/summeval/embedded-logprobs"\n',
                                  f'progress = "{tmp}/dhp-progress-x1y2.json"\n', f"root = '{hooks.ROOT}'\n",
                                  "No ae_dev.jsonl found in /srv/data/dhp/answer_equivalence."]})
    out = hooks._relative_paths(text)
    assert str(hooks.ROOT) not in out and tmp + "/" not in out and "/srv/data" not in out
    assert "$DHP_DATA_DIR/answer_equivalence" in out
    assert '"run_dir = \\"runs/demo/dhp/summeval/embedded-logprobs\\"\\n"' in out
    assert "$TMPDIR/dhp-progress-x1y2.json" in out and "root = '.'" in out
    assert json.loads(out)  # still a notebook's JSON


def test_reference_is_markdown_with_its_placeholders_escaped():
    """Issue 36: "<model>", "<run_dir>" would be read as HTML tags and vanish; reStructuredText roles showed raw."""
    hooks = _hooks()
    assert hooks.md_text("openai:<model>[@<url>] (None: <run_dir>/cache.sqlite)") == \
        "openai:&lt;model&gt;[@&lt;url&gt;] (None: &lt;run_dir&gt;/cache.sqlite)"
    assert hooks.md_text("``python -m dhp <command>`` is :func:`dhp.methods.run`") == \
        "`python -m dhp <command>` is `dhp.methods.run`"
    ref = hooks.config_reference()
    prose = re.sub(r"```.*?```", "", ref, flags=re.S)
    assert "``" not in prose and ":func:" not in prose
    prose = re.sub(r"`[^`]*`", "", prose)
    assert "``" not in prose and ":func:" not in prose and ":mod:" not in prose
    assert not re.search(r"<[a-z_]+>", prose), re.findall(r".{30}<[a-z_]+>.{10}", prose)[:3]
    assert "openai:&lt;model&gt;" in ref


def test_long_tables_of_a_lesson_are_trimmed_with_the_whole_table_one_click_away():
    hooks = _hooks()
    rows = "".join(f"<tr><th>{i}</th><td>{i * 2}</td></tr>" for i in range(40))
    page = f'<p>x</p><table border="1" class="dataframe"><thead><tr><th>a</th></tr></thead><tbody>{rows}</tbody></table>'
    out = hooks.trim_long_tables(page)
    shown, hidden = out.split("<details", 1)
    assert shown.count("<tr>") == 1 + hooks.SHORT_TABLE and "<th>39</th>" not in shown
    assert "show all 40 rows" in hidden and hidden.count("<tr>") == 41
    short = page.replace(rows, rows[: rows.index("<tr><th>5</th>")])
    assert hooks.trim_long_tables(short) == short  # a short table is left as it is


@pytest.fixture
def chromium():
    # part of make test, which installs it before pytest: missing, the check fails with the fix rather than skips
    assert shutil.which("chromium") or shutil.which("chromium-browser"), \
        "the browser check needs Debian's chromium: apt-get install -y chromium (make test installs it)"


@pytest.mark.usefixtures("chromium")
def test_browser_check_sees_a_broken_figure(tmp_path):
    check_site = _check_site()
    shutil.copy(next((ROOT / "figures").glob("*.png")), tmp_path / "ok.png")
    # shown at the page's width: legible (a figure shrunk to 100 px would fail the label check)
    img = '<img src="ok.png" style="max-width:100%">'
    (tmp_path / "index.html").write_text(f'<html><head><title>t</title></head><body>{img}</body></html>')
    (tmp_path / "broken.html").write_text(f'<html><body>{img}<img src="gone.png"></body></html>')
    assert check_site.check(tmp_path, ["index.html"]) == []
    assert check_site.check(tmp_path, ["broken.html"]) == ["broken.html: /gone.png is missing (404)",
                                                           "broken.html: image gone.png did not load"]


@pytest.mark.usefixtures("chromium")
def test_browser_check_sees_a_missing_font_an_absolute_path_and_a_page_wider_than_a_phone(tmp_path):
    """Issue 36: every page is checked for 404s (a web font included), the build machine's paths and sideways
    scrolling at 390 px; each control page fails for its one reason, the good page passes."""
    check_site = _check_site()
    (tmp_path / "fonts").mkdir()
    shutil.copy(next((Path(jupyter_server_mathjax.__file__).parent / "static").rglob("*.woff")),
                tmp_path / "fonts" / "ok.woff")
    style = ("<style>@font-face {{font-family: F; src: url(fonts/{0}.woff) format('woff');}} "
             "p {{font-family: F;}}</style>")
    (tmp_path / "good.html").write_text(f"<html><head>{style.format('ok')}</head><body><p>text</p></body></html>")
    (tmp_path / "font.html").write_text(f"<html><head>{style.format('gone')}</head><body><p>text</p></body></html>")
    (tmp_path / "path.html").write_text(f"<html><body><pre>{ROOT}/runs/demo</pre></body></html>")
    (tmp_path / "wide.html").write_text('<html><head><meta name="viewport" content="width=device-width"></head>'
                                        '<body><div style="width:900px">wide</div></body></html>')
    assert check_site.check(tmp_path, ["good.html"]) == []
    assert check_site.check(tmp_path, ["font.html"]) == ["font.html: /fonts/gone.woff is missing (404)"]
    assert check_site.check(tmp_path, ["path.html"]) == [f"path.html: shows the build machine's path {ROOT}"]
    wide = check_site.check(tmp_path, ["wide.html"])
    assert len(wide) == 1 and wide[0].startswith("wide.html: scrolls sideways at 390 px"), wide


@pytest.mark.usefixtures("chromium")
def test_browser_check_sees_formulas_typeset_by_the_bundled_mathjax_and_their_absence(tmp_path):
    """A notebook page's formulas are typeset by the MathJax the site carries (docs/hooks.py copies it to
    assets/mathjax/, as mkdocs.yml's custom_mathjax_url expects), with its STIX-Web fonts (hooks.FONTS: MathJax's
    default TeX fonts are not in the bundle, a 404); without those files the check fails."""
    check_site = _check_site()
    hooks = _hooks()
    config = ('<script type="text/x-mathjax-config">MathJax.Hub.Config({tex2jax: {inlineMath: [["$", "$"]]}});'
              "</script>")
    page = ('<html><head><title>m</title>FONTS<script src="../assets/mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-'
            'full,Safe"></script>' + config + '</head><body><p>D = $\\log_{0.05} p$ and $\\sum_i x_i$</p></body></html>')
    (tmp_path / "course").mkdir()
    (tmp_path / "index.html").write_text("<html><body>x</body></html>")
    (tmp_path / "course" / "01_m.html").write_text(page.replace("FONTS", ""))
    assert check_site.formula_pages(tmp_path, check_site.all_pages(tmp_path)) == ["course/01_m.html"]
    problems = check_site.check(tmp_path, ["course/01_m.html"], formula_pages=["course/01_m.html"])
    assert "course/01_m.html: /assets/mathjax/MathJax.js is missing (404)" in problems
    assert any("no formula was typeset" in p for p in problems)
    shutil.copytree(Path(jupyter_server_mathjax.__file__).parent / "static", tmp_path / "assets" / "mathjax")
    # MathJax's own default (TeX fonts) asks for a font data file the bundle lacks: a 404
    problems = check_site.check(tmp_path, ["course/01_m.html"], formula_pages=["course/01_m.html"])
    assert any("fonts/TeX" in p and "404" in p for p in problems), problems
    (tmp_path / "course" / "01_m.html").write_text(
        page.replace("FONTS", "<script>window.MathJax = {" + hooks.FONTS + "};</script>"))
    assert check_site.check(tmp_path, ["course/01_m.html"], formula_pages=["course/01_m.html"]) == []


def test_a_figure_of_many_judges_stays_legible_at_a_page_width():
    """Issue 36: notebook 05's figure put six judges in one row (3044 x 448 px, shown at 584 x 86): at most three
    panels a row now, one judge each."""
    rows = [{"dataset": "summeval", "judge": f"j{j}", "mode": "logprobs", "item_id": f"i{i}", "perturbation": p,
             "severity": "" if p == "original" else "minor", "metric": "coherence", "score": 3.0 + (i % 3) - (p != "original")}
            for j in range(6) for i in range(6) for p in ("original", "char_typo")]
    fig = plots.plot_response_styles(pd.DataFrame(rows), "summeval", "char_typo")
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    width, height = fig.get_size_inches()
    assert len(panels) == 6 and width / height < 3, (width, height)


def test_a_panel_of_zero_shares_shows_its_values():
    """Issue 36: two of notebook 08's three panels looked empty: the judge's shares were 0, which draws no bar. Every
    bar now carries its value (n/a where the share could not be computed)."""
    agreement = pd.DataFrame({"judge": ["embedded:smollm2-135m"] * 2, "mode": ["logprobs"] * 2,
                              "strategy": ["direct", "dna"], "subset": ["Natural"] * 2, "n": [2, 2],
                              "agreement": [0.5, 0.25], "agreement_both": [0.0, 0.0],
                              "position_consistency": [0.0, float("nan")]})
    fig = decomposition_plots.plot_agreement(agreement)
    labels = [[t.get_text() for t in ax.texts] for ax in fig.axes]
    assert labels == [["0.50", "0.25"], ["0.00", "0.00"], ["0.00", "n/a"]], labels


def test_method_pages_link_their_lessons_where_the_course_has_them(monkeypatch):
    """A method page links its lesson's executed page; without one (a build with no executed notebooks) it names the
    notebook instead of linking a page that was not built (a strict build would fail on it)."""
    hooks = _hooks()
    monkeypatch.setitem(hooks._PAGE, "src", "methods/dhp.md")
    monkeypatch.setitem(hooks._COURSE, "notebooks", [Path("/x/03_discernment.ipynb")])
    linked, named = hooks.lesson("03", "07").split(", ")
    assert linked.startswith("[03 · Discernment") and linked.endswith("](../course/03_discernment.ipynb)")
    assert named == "`notebooks/07_criteria_confusion.ipynb`"


def test_reference_marks_required_only_what_pydantic_requires():
    """Issue 41: the reference marked five optional grid keys "(required)": every default_factory (methods: ['dhp'],
    params: {}, ...) read as PydanticUndefined. A key is "(required)" exactly when its model requires it."""
    from dhp.config import RunParams
    from dhp.grid import GridParams
    from dhp.leaderboard import LeaderboardParams

    hooks = _hooks()
    for model, flags in ((GridParams, False), (RunParams, True), (LeaderboardParams, True)):
        rows = hooks._model_table(model, flags=flags).splitlines()[2:]
        for (name, field), row in zip(model.model_fields.items(), rows):
            assert ("| (required) |" in row) == field.is_required(), (model.__name__, name, row)
    factories = [n for n, f in GridParams.model_fields.items() if f.default_factory is not None]
    assert {"params", "method_params", "overrides"} <= set(factories)  # the keys the old reference called required
    ref = hooks.config_reference()
    assert "| `params` | `dict` | `{}` |" in ref and "| `overrides` | `list` | `[]` |" in ref


@pytest.mark.usefixtures("chromium")
def test_browser_check_sees_a_table_cut_off_or_scrolling_without_a_sign(tmp_path):
    """Issue 41: tables clipped their columns at 1280 px with no visible scroll (data.html hid 542 px). A table wider
    than its box must sit in a box that scrolls and shows it (the site's dhp.js marks it dhp-scrolls); the controls:
    one cut by overflow: hidden, one scrolling in an unmarked box, one wider than the window."""
    check_site = _check_site()
    row = "<tr>" + "".join(f"<td>column_{i}_with_a_long_value</td>" for i in range(12)) + "</tr>"
    table = f"<table>{row}</table>"
    page = '<html><head><meta name="viewport" content="width=device-width"></head><body>{}</body></html>'
    (tmp_path / "marked.html").write_text(page.format(
        f'<div class="dhp-scrolls" style="max-width:600px;overflow-x:auto">{table}</div>'))
    (tmp_path / "narrow.html").write_text(page.format(f'<div style="max-width:600px">{table.replace("long_", "")[:60]}'
                                                      "</td></tr></table></div>"))
    (tmp_path / "cut.html").write_text(page.format(f'<div style="max-width:600px;overflow:hidden">{table}</div>'))
    (tmp_path / "unmarked.html").write_text(page.format(f'<div style="max-width:600px;overflow-x:auto">{table}</div>'))
    (tmp_path / "window.html").write_text(page.format(f'<div style="width:3000px">{table}</div>'))
    assert check_site.check(tmp_path, ["marked.html", "narrow.html"]) == []
    cut = check_site.check(tmp_path, ["cut.html"])
    assert len(cut) == 1 and "a table is cut off by" in cut[0] and "at 1280 px" in cut[0], cut
    unmarked = check_site.check(tmp_path, ["unmarked.html"])
    assert len(unmarked) == 1 and "with no visible sign" in unmarked[0], unmarked
    window = [p for p in check_site.check(tmp_path, ["window.html"]) if "table" in p]
    assert len(window) == 1 and "cut off" in window[0], window


@pytest.mark.usefixtures("chromium")
def test_browser_check_sees_a_figure_shown_too_small_to_read(tmp_path):
    """Issue 41: wide figures were shown at 0.25-0.37 of their size (labels ~5 px). The check computes the smallest
    label's rendered size from the PNG (dhp.plots.save's dhp:min_font_px chunk, else 6 pt at its dpi) and the width
    the page shows it at; under 9 px fails. Controls: the same figure at a legible and at a too-small width."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    check_site = _check_site()
    fig, ax = plt.subplots(figsize=(4, 2))
    ax.set_title("t", fontsize=9.6)
    fig.savefig(tmp_path / "meta.png", dpi=150, metadata={check_site.MIN_FONT_KEY: "20"})  # 20 px in the PNG
    fig.savefig(tmp_path / "plain.png", dpi=150)  # no chunk: 6 pt at 150 dpi = 12.5 px
    plt.close(fig)
    font, width = check_site.png_font_px((tmp_path / "meta.png").read_bytes())
    assert (font, width) == (20.0, 600)
    assert check_site.png_font_px((tmp_path / "plain.png").read_bytes()) == (12.5, 600)
    for name, shown in (("ok", 300), ("small", 240), ("plain_ok", 600), ("plain_small", 300)):
        src = "plain.png" if name.startswith("plain") else "meta.png"
        (tmp_path / f"{name}.html").write_text(f'<html><body><img src="{src}" style="width:{shown}px;max-width:100%"></body></html>')
    assert check_site.check(tmp_path, ["ok.html", "plain_ok.html"]) == []  # 20 x 300/600 = 10 px; 12.5 px
    small = check_site.check(tmp_path, ["small.html", "plain_small.html"])
    assert small == ["small.html: meta.png is shown at 240 of its 600 px at 1280 px: its smallest label renders "
                     "at 8.0 px (under 9)",
                     "plain_small.html: plain.png is shown at 300 of its 600 px at 1280 px: its smallest label renders "
                     "at 6.2 px (under 9)"], small


def test_tables_say_why_a_value_is_missing_and_what_too_few_units_means(tmp_path, monkeypatch):
    """Issue 41: "too few units (2 of 2)" / "(1 of 100)" was opaque, NaN and empty note cells unexplained. A page's
    table writes the leaderboard's status in words (the judge's units, the best-covered judge's, what a judge
    needs), a reason beside a missing value, and its own text for an empty note cell."""
    from dhp.analysis.leaderboard import MIN_UNITS

    hooks = _hooks()
    assert hooks.status_text("too few units (1 of 100)", "SummEval items") == (
        f"left out: scored on 1 of the 100 SummEval items the best-covered judge has (a judge needs at least "
        f"{MIN_UNITS} and the run's minimum share of them); its own numbers are on its report card")
    assert hooks.status_text("too few units (2 of 2)", "systems").startswith(
        f"not compared: the best-covered judge has 2 systems, fewer than the {MIN_UNITS}")
    assert hooks.status_text("ok") == "ok" and hooks.status_text("not compared: one judge") == "not compared: one judge"
    pd.DataFrame({"judge": ["a", "b"], "v": [0.5, float("nan")], "note": [float("nan"), "too few"],
                  "status": ["ok", "too few units (3 of 100)"]}).to_csv(tmp_path / "t.csv", index=False)
    monkeypatch.setattr(hooks, "RESULTS", tmp_path)
    md = hooks.table("t.csv", ["judge", "v", "note", "status"], units="items", notes={"v": "(no pair)"},
                     blank={"note": "(none needed)"})
    assert "| a | 0.50 | (none needed) | ok |" in md
    assert "| b | — (no pair) | too few | left out: scored on 3 of the 100 items" in md
    # the control: without the options the table shows the raw codes
    assert "| b | — | too few | too few units (3 of 100) |" in hooks.table("t.csv", ["judge", "v", "note", "status"])
