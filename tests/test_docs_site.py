"""The documentation site's machinery: README as a front page, numbers read from results/, the generated reference,
and the notebook check keeping its executed copies for the site (the build itself and the browser check run in
`make test` after pytest: `make docs`, scripts/check_site.py)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jupyter_server_mathjax
import nbformat
import pandas as pd
import pytest

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
    # the per-notebook timing table (issue 28: timings listed): one row with the notebook's two code cells
    row = next(line for line in out.stdout.splitlines() if line.startswith("01_t.ipynb"))
    assert float(row.split()[1]) > 0 and float(row.split()[2]) > 0 and row.split()[3] == "2"


@pytest.fixture
def chromium():
    # part of make test, which installs it before pytest: missing, the check fails with the fix rather than skips
    assert shutil.which("chromium") or shutil.which("chromium-browser"), \
        "the browser check needs Debian's chromium: apt-get install -y chromium (make test installs it)"


@pytest.mark.usefixtures("chromium")
def test_browser_check_sees_a_broken_figure(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import check_site
    finally:
        sys.path.pop(0)
    shutil.copy(next((ROOT / "figures").glob("*.png")), tmp_path / "ok.png")
    (tmp_path / "index.html").write_text('<html><head><title>t</title></head><body><img src="ok.png"></body></html>')
    (tmp_path / "broken.html").write_text('<html><body><img src="ok.png"><img src="gone.png"></body></html>')
    assert check_site.check(tmp_path, ["index.html"]) == []
    assert check_site.check(tmp_path, ["broken.html"]) == ["broken.html: image gone.png did not load"]


@pytest.mark.usefixtures("chromium")
def test_browser_check_sees_formulas_typeset_by_the_bundled_mathjax_and_their_absence(tmp_path):
    """A notebook page's formulas are typeset by the MathJax the site carries (docs/hooks.py copies it to
    assets/mathjax/, as mkdocs.yml's custom_mathjax_url expects); without those files the check fails."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import check_site
    finally:
        sys.path.pop(0)
    config = ('<script type="text/x-mathjax-config">MathJax.Hub.Config({tex2jax: {inlineMath: [["$", "$"]]}});'
              "</script>")
    (tmp_path / "course").mkdir()
    (tmp_path / "course" / "01_m.html").write_text(
        '<html><head><title>m</title><script src="../assets/mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,'
        f'Safe"></script>{config}</head><body><p>D = $\\log_{{0.05}} p$</p></body></html>')
    assert check_site.formula_page(tmp_path) == "course/01_m.html"
    problems = check_site.check(tmp_path, ["course/01_m.html"], formula_pages=["course/01_m.html"])
    assert problems == ["course/01_m.html: no formula was typeset (MathJax None: is site/assets/mathjax/ there? "
                        "docs/hooks.py copies it)"]
    shutil.copytree(Path(jupyter_server_mathjax.__file__).parent / "static", tmp_path / "assets" / "mathjax")
    assert check_site.check(tmp_path, ["course/01_m.html"], formula_pages=["course/01_m.html"]) == []
