"""One new file per kind of extension, and nothing else edited: a judge backend (``echo:``), a perturbation of a new
family, a recorded source in a new layout, a judge protocol (pairwise strategy) and a method that reads DHP's tables
each work from the command line (``methods``, ``run``, ``import-judgments``, ``leaderboard``, ``evaluate
--dry-run``) and in the grid's plan, found by the registries' package scan (dhp.extensions).

The five files are the worked examples of docs/extending.md, read from that page. The test writes them into a copy of the package and runs ``python -m dhp`` from there (PYTHONPATH points
at the copy). The control: a copy without one of the files fails the command that file serves, with the registry's
unknown-name error. A second definition of a name already taken is refused for every kind, with one message.
Data: small synthetic files written here (a dataset of four short texts, two pairs, four recorded verdicts)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dhp import methods
from dhp.backends import register_backend
from dhp.datasets.files import dataset_pool
from dhp.errors import DHPError
from dhp.judging import protocol
from dhp.judging.strategies import strategy
from dhp.perturb import perturbation
from dhp.recorded import importer
from dhp.extensions import REGISTRIES, Registry
from test_import_placement import late_dhp_imports, nested_dhp_imports

ROOT = Path(__file__).resolve().parents[1]

DOCS = ROOT / "docs" / "extending.md"


def docs_files() -> dict[str, str]:
    """The worked examples of docs/extending.md: each code block under a ``<!-- file: PATH -->`` line, by PATH."""
    found = re.findall(r"<!-- file: (\S+) -->\n```python\n(.*?)\n```", DOCS.read_text(encoding="utf-8"), re.S)
    return {path: text + "\n" for path, text in found}


FILES = docs_files()

TEXTS = ["The council approved the budget. Schools get more money.",
         "A storm closed the harbour on Monday. Fishing boats stayed in port until the wind dropped at night.",
         "Researchers found a frog in the forest. It is small.",
         "The museum opened a new wing for modern art last week. Visitors queued for hours on the first day, and "
         "many came back the next morning."]


def _write_inputs(tmp: Path) -> dict[str, Path]:
    data = tmp / "inputs"
    data.mkdir()
    pd.DataFrame({"item_id": [f"d{i}" for i in range(4)], "source": [t + " More context here." for t in TEXTS],
                  "reference": TEXTS, "task": "summarization"}).to_csv(data / "mine.csv", index=False)
    pd.DataFrame({"item_id": ["p1", "p2"], "instruction": ["Say hello.", "Name a colour."],
                  "output_1": ["Hello there, friend.", "Blue."], "output_2": ["Hi.", "Red is a colour I like."],
                  "label": ["1", "2"]}).to_csv(data / "pairs.csv", index=False)
    rows = [(j, "Natural", f"n{i}", o, v, "1") for j, vs in (("tsv:a", "1122"), ("tsv:b", "1211"))
            for i, v in enumerate(vs) for o in ("12", "21")]
    pd.DataFrame(rows, columns=["judge", "subset", "item_id", "order", "verdict", "label"]).to_csv(
        data / "two.verdicts.tsv", sep="\t", index=False)
    return {"dataset": data / "mine.csv", "pairs": data / "pairs.csv", "verdicts": data / "two.verdicts.tsv"}


def _copy(tmp: Path, name: str, leave_out: str | None = None) -> Path:
    repo = tmp / name
    shutil.copytree(ROOT / "dhp", repo / "dhp", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", repo / "pyproject.toml")
    for rel, text in FILES.items():
        if rel != leave_out:
            (repo / rel).write_text(text)  # the one new file of its kind
    return repo


def _start(repo: Path, *args: str, path: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": path or str(repo), "DHP_N_THREADS": "1", "MPLBACKEND": "Agg"}
    return subprocess.Popen([sys.executable, *args], cwd=repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait(*procs: subprocess.Popen) -> list[tuple[int, str, str]]:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        out.append((p.returncode, stdout, stderr))
    return out


def _dhp_run(repo, inputs, run_dir):
    return _start(repo, "-m", "dhp", "run", "--method", "dhp", "--dataset", str(inputs["dataset"]), "--n-items", "4",
                  "--judge", "echo:1", "--mode", "metric", "--perturbations", "shout,control", "--n-boot", "0",
                  "--n-null", "20", "--run-dir", str(run_dir))


def _pairwise_run(repo, inputs, run_dir):
    return _start(repo, "-m", "dhp", "run", "--method", "decompose_aggregate", "--pairs-path", str(inputs["pairs"]),
                  "--strategies", "echo_compare", "--dhp-items", "0", "--judge", "echo:1", "--mode", "sample",
                  "--run-dir", str(run_dir))


def _import(repo, inputs, run_dir):
    return _start(repo, "-m", "dhp", "import-judgments", "verdict_tsv", str(inputs["verdicts"]), "--run-dir",
                  str(run_dir))


@pytest.mark.slow
def test_one_new_file_per_kind_works_from_the_command_line_and_each_fails_without_it(tmp_path):
    inputs = _write_inputs(tmp_path)
    repo = _copy(tmp_path, "with")
    runs = tmp_path / "runs"
    # first wave: every command that needs nothing before it, side by side
    listed, dhp_run, pairwise, imported, dry, contracts = _wait(
        _start(repo, "-m", "dhp", "methods"),
        _dhp_run(repo, inputs, runs / "dhp"),
        _pairwise_run(repo, inputs, runs / "pairwise"),
        _import(repo, inputs, runs / "recorded"),
        _start(repo, "-m", "dhp", "evaluate", "echo:1", "--mode", "metric", "--profile", "quick", "--dry-run",
               "--run-dir", str(runs / "evaluate")),
        _start(repo, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
               "--no-cache"))
    for rc, out, err in (listed, dhp_run, pairwise, imported, dry, contracts):
        assert rc == 0, out + err
    assert "0 broken" in contracts[1]  # the new files keep the project's import contracts
    assert "length_bias" in listed[1]
    # the backend and the perturbation of a new family: DHP judged the shouted texts, with expert weights for them
    disc = pd.read_csv(runs / "dhp" / "discernment.csv")
    assert "shout" in set(disc["perturbation"]) and set(disc["judge"]) == {"echo:1"}
    # the judge protocol: its verdicts, from the judge's scores (the longer response wins)
    verdicts = pd.read_parquet(runs / "pairwise" / "pairwise_verdicts.parquet")
    assert set(verdicts["strategy"]) == {"echo_compare"} and verdicts["verdict"].tolist() == ["1", "1", "2", "2"]
    # the recorded source in its own layout, imported as the table the methods read
    rec = pd.read_parquet(runs / "recorded" / "pairwise_verdicts.parquet")
    assert sorted(set(rec["judge"])) == ["tsv:a", "tsv:b"] and len(rec) == 16
    # the method: evaluate plans it (its profile), with no name of it anywhere but its file
    assert "- length_bias:" in dry[1] and "its own tables" in dry[1]

    # second wave: what reads the first wave's folders
    method_run, board, extensions, grid_plan = _wait(
        _start(repo, "-m", "dhp", "run", "--method", "length_bias", "--judge", "recorded", "--run-dir",
               str(runs / "dhp")),
        _start(repo, "-m", "dhp", "leaderboard", "--run-dir", str(runs / "recorded"), "--recorded", "",
               "--n-resamples", "20", "--n-resamples-statistic", "10"),
        _start(repo, "-m", "dhp", "extensions"),
        _start(repo, "-c", "from dhp import grid, methods; g = grid.validate_params({'judges': ['echo:1'], "
                           "'modes': ['metric'], 'methods': 'all', 'leaderboard': None}); pts, _ = grid.points(g); "
                           "f = {p.method: p.folder for p in pts}; print(g.methods[-1], f['length_bias'] == f['dhp'])"))
    for rc, out, err in (method_run, board, extensions, grid_plan):
        assert rc == 0, out + err
    bias = pd.read_csv(runs / "dhp" / "length_bias.csv")
    assert bias["judge"].tolist() == ["echo:1"] and bias["length_corr"].iloc[0] > 0.9  # echo scores the length
    lb = pd.read_csv(runs / "recorded" / "leaderboard.csv")
    assert set(lb.loc[lb["view"] == "llmbar_agreement", "judge"]) == {"tsv:a", "tsv:b"}
    for name in ("echo", "shout", "verdict_tsv", "echo_compare", "length_bias"):
        assert name in extensions[1]
    # the grid: every registered method ('all'), the one reading DHP's tables after it, in DHP's folders
    assert grid_plan[1].split() == ["length_bias", "True"]

    # the control: a copy without one file fails the command that file serves, naming what is unknown
    without = {rel: _copy(tmp_path, f"without_{Path(rel).stem}", leave_out=rel) for rel in FILES}
    results = dict(zip(FILES, _wait(
        _dhp_run(without["dhp/backends/echo.py"], inputs, tmp_path / "c1"),
        _dhp_run(without["dhp/perturb/shout.py"], inputs, tmp_path / "c2"),
        _import(without["dhp/recorded/verdict_tsv.py"], inputs, tmp_path / "c3"),
        _pairwise_run(without["dhp/judging/echo_compare.py"], inputs, tmp_path / "c4"),
        _start(without["dhp/methods/length_bias.py"], "-m", "dhp", "run", "--method", "length_bias", "--judge",
               "recorded", "--run-dir", str(runs / "dhp")))))
    expected = {"dhp/backends/echo.py": "Unknown judge backend 'echo'",
                "dhp/perturb/shout.py": "Unknown perturbation 'shout'",
                "dhp/recorded/verdict_tsv.py": "invalid choice: 'verdict_tsv'",
                "dhp/judging/echo_compare.py": "echo_compare",
                "dhp/methods/length_bias.py": "Unknown method 'length_bias'"}
    for rel, (rc, out, err) in results.items():
        assert rc != 0 and expected[rel] in err, (rel, out, err)


def test_the_docs_give_one_worked_example_per_kind_each_passing_the_import_checks():
    kinds = {Path(rel).parent.name for rel in FILES}
    assert kinds == {"backends", "perturb", "recorded", "judging", "methods", "datasets"}
    for rel, text in FILES.items():
        assert nested_dhp_imports(text, rel) == [] and late_dhp_imports(text, rel) == [], rel
        compile(text, rel, "exec")


def test_a_name_already_taken_is_refused_for_every_kind():
    # one rule, one message, every registry: a second definition of a taken name is refused (dhp.extensions)
    attempts = {
        "judge backend": lambda: register_backend("embedded", "embedded")(lambda rest, **o: None),
        "perturbation": lambda: perturbation("char_typo", level="character", tasks={"summarization": ("single",)})(
            lambda text, ctx: (text, "")),
        "recorded source": lambda: importer("llmbar", suffixes=(".json",))(lambda f, ctx: {}),
        "pairwise strategy": lambda: strategy("direct")(lambda items, ctx: []),
        "judge protocol": lambda: protocol("pointwise")(lambda table, judge: table),
        "method": lambda: methods.register(type("Again", (methods.Method,), {"name": "dhp"})),
        "dataset": lambda: dataset_pool("summeval")(lambda files: []),
    }
    assert set(attempts) <= set(REGISTRIES)
    for kind, attempt in attempts.items():
        before = dict(REGISTRIES[kind])
        with pytest.raises(DHPError, match=rf"A {kind} named '\w+' is already registered \(by .*\); .* registers it "
                                           rf"again\. Fix: give the new {kind} another name"):
            attempt()
        assert dict(REGISTRIES[kind]) == before  # nothing replaced


def test_an_installed_plug_in_package_is_found_through_its_entry_point(tmp_path):
    # a package outside dhp, "installed" as a distribution on the path: its module names itself in the group
    # dhp.backends (importlib.metadata reads the .dist-info), and get_backend finds it with no dhp file touched
    (tmp_path / "loud_plugin").mkdir()
    (tmp_path / "loud_plugin" / "__init__.py").write_text("")
    (tmp_path / "loud_plugin" / "echo.py").write_text(FILES["dhp/backends/echo.py"].replace('"echo"', '"loud"'))
    info = tmp_path / "loud_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: loud-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[dhp.backends]\nloud = loud_plugin.echo\n")
    code = "from dhp.backends import get_backend; print(get_backend('loud:2').metric_many([('s', 'a b c', 't')]))"
    with_it, without = _wait(_start(ROOT, "-c", code, path=f"{tmp_path}{os.pathsep}{ROOT}"),
                             _start(ROOT, "-c", code, path=str(ROOT)))
    assert with_it[0] == 0 and "value=6.0" in with_it[1], with_it
    assert without[0] != 0 and "Unknown judge backend 'loud'" in without[2]  # the control: not installed


def test_a_broken_extension_file_names_itself(tmp_path, monkeypatch):
    pkg = tmp_path / "thing_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "good.py").write_text("")
    (pkg / "bad.py").write_text("raise ValueError('half-written')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("test thing", "thing_pkg")
    try:
        with pytest.raises(DHPError, match=r"thing_pkg\.bad \(a test thing module\) fails to import: ValueError: "
                                           r"half-written\. Fix: fix that file or remove it"):
            reg.lookup("x")
        (pkg / "bad.py").unlink()  # fixed: the next read discovers again
        with pytest.raises(DHPError, match=r"Unknown test thing 'x'; registered: none"):
            reg.lookup("x")
    finally:
        REGISTRIES.pop("test thing", None)
