"""Grid runner: YAML validated against the methods' parameter models, failure reporting, aggregation (with tiny
throw-away notebooks and a method registered by the test)."""

import json
import os
import threading
import time
from pathlib import Path

import nbformat as nbf
import pandas as pd
import pytest
import yaml

from dhp import grid, methods
from dhp.config import RunParams
from dhp.errors import DHPError
from dhp.io import resolve

BASE = {"judges": ["embedded"], "modes": ["logprobs"], "datasets": ["summeval"]}


@pytest.mark.parametrize(
    "change, match",
    [
        ({"n_itmes": 5}, "unknown parameter 'n_itmes'"),
        ({"datasets": ["imdb"]}, "dataset = 'imdb' is invalid"),
        ({"modes": ["telepathy"]}, "unknown mode"),
        ({"method_params": {"dhp": {"n_items": "ten"}}}, "n_items = 'ten' is invalid"),
        ({"method_params": {"dhp": {"n_items": True}}}, "n_items = True is invalid"),
        ({"method_params": {"dhp": {"n_items": 0}}}, "n_items = 0 is invalid"),
        ({"method_params": {"dhp": {"n_itmes": 3}}}, "unknown parameter 'n_itmes'"),
        ({"method_params": {"criteria": {}}}, "not in methods"),
        ({"params": {"n_bot": 3}}, r"\['n_bot'\] is no parameter"),
        ({"judges": []}, "judges = \\[\\] is invalid"),
        ({"params": {"combine": "fisher"}}, "combine = 'fisher' is invalid"),
        ({"run_id": "../x"}, "unsafe"),
        ({"methods": ["dhp", "vibes"]}, "unknown method"),
        ({"overrides": [{"judges": ["embedded"], "params": {"n_items": -1}}]}, "n_items = -1 is invalid"),
    ],
)
def test_bad_params_are_rejected(change, match):
    with pytest.raises(DHPError, match=match):
        grid.validate_params({**BASE, **change})


def test_missing_required_key():
    with pytest.raises(DHPError, match="modes"):
        grid.validate_params({"judges": ["embedded"]})


def test_points_take_params_then_method_params_then_overrides():
    g = grid.validate_params({**BASE, "judges": ["embedded", "other"], "params": {"n_boot": 7, "seed": 3},
                              "method_params": {"dhp": {"n_items": 4}},
                              "overrides": [{"judges": ["other"], "params": {"n_items": 9}}]})
    pts, skipped = grid.points(g)
    by_judge = {p.judge: p.config for p in pts}
    assert (by_judge["embedded"].n_items, by_judge["other"].n_items) == (4, 9)
    assert by_judge["other"].n_boot == 7 and by_judge["other"].seed == 3
    assert pts[0].folder.parts[-3:] == ("dhp", "summeval", "embedded-logprobs")
    assert by_judge["embedded"].run_dir == str(pts[0].folder) and skipped == []


def test_the_grid_runs_published_protocols_as_evaluate_does():
    g = grid.validate_params({"judges": ["embedded"], "modes": ["sample"], "methods": ["decompose_aggregate"],
                              "protocols": ["llmbar:Rating", "llmbar:Swap"],
                              "overrides": [{"judges": ["embedded"], "params": {"n_pairs": 2}}]})
    (pt,), _ = grid.points(g)
    # the protocols' strategies and the quick profile's units, as evaluate --protocol; the grid's own params win
    assert pt.config.strategies == ["llmbar:Rating", "llmbar:Swap"] and pt.config.n_pairs == 2
    assert pt.config.subsets == methods.get("decompose_aggregate").profile_params("quick")["subsets"]
    with pytest.raises(DHPError, match="unknown judge protocol"):
        grid.points(grid.validate_params({**g.model_dump(), "protocols": ["llmbar:Ratting"]}))
    with pytest.raises(DHPError, match="no method of"):
        grid.points(grid.validate_params({**g.model_dump(), "protocols": ["gemba:DA"]}))


def test_shipped_yamls_are_valid():
    for name in ("demo", "paper", "dhp_three_datasets"):
        g = grid.load_params(f"params/{name}.yaml")
        assert g.methods and grid.points(g)[0]
    demo = grid.load_params("params/demo.yaml")
    assert set(demo.methods) == set(methods.names()) and demo.report_card  # the demo runs every method


def test_slug_is_folder_safe():
    assert grid.slug("openai:gpt-4o@http://h:1/v1") == "openai_gpt-4o_http_h_1_v1"


def _nb(path, params_src, body_src):
    nb = nbf.v4.new_notebook()
    p = nbf.v4.new_code_cell(params_src)
    p.metadata["tags"] = ["parameters"]
    nb.cells = [nbf.v4.new_markdown_cell("tiny test notebook"), p, nbf.v4.new_code_cell(body_src)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbf.write(nb, path)


@pytest.mark.slow
def test_failed_cell_is_reported_and_other_points_go_on(tmp_path, capsys):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    _nb(nbs / "01_perturb.ipynb", 'run_dir = "x"\ndataset = "summeval"\nn_items = 1',
        "import pandas as pd\nfrom pathlib import Path\nPath(run_dir).mkdir(parents=True, exist_ok=True)\n"
        "pd.DataFrame({'dataset': ['summeval'], 'item_id': ['1'], 'perturbation': ['original'], 'severity': ['none'],"
        " 'level': ['none'], 'text': ['t'], 'status': ['ok'], 'n': [n_items]}).to_parquet(Path(run_dir, 'perturbed.parquet'))")
    _nb(nbs / "02_judge.ipynb", 'run_dir = "x"\njudge = "embedded"\nmode = "logprobs"',
        "import pandas as pd\nfrom pathlib import Path\n"
        "assert Path(run_dir, 'perturbed.parquet').exists()\n"
        "if judge == 'bad':\n    raise RuntimeError('judge exploded')\n"
        "pd.DataFrame({'dataset': ['summeval'], 'task': ['summarization'], 'judge': [judge], 'mode': [mode], 'item_id': ['1'],"
        " 'perturbation': ['original'], 'severity': ['none'], 'level': ['none'], 'metric': ['fluency'], 'score': [3.0],"
        " 'n_valid': [1], 'n_failed': [0], 'text': ['never copied']}).to_parquet(Path(run_dir, 'scores.parquet'))")
    _nb(nbs / "03_discernment.ipynb", 'run_dir = "x"\njudge = "embedded"',
        "import pandas as pd\nfrom pathlib import Path\n"
        "pd.DataFrame({'dataset': ['summeval'], 'judge': [judge], 'mode': ['logprobs'], 'D_avg': [1.5], 'D_min': [1.0]})"
        ".to_csv(Path(run_dir, 'summary.csv'), index=False)")
    for name in ("04_figures", "05_response_styles"):
        _nb(nbs / f"{name}.ipynb", 'run_dir = "x"\nresults_dir = None\nfigures_dir = None',
            "from pathlib import Path\nPath(figures_dir).mkdir(parents=True, exist_ok=True)\n"
            f"Path(figures_dir, '{name}.txt').write_text(results_dir or run_dir)")
    cfg = {**BASE, "judges": ["bad", "good"], "run_id": "t", "notebooks_dir": str(nbs), "runs_dir": str(tmp_path / "runs"),
           "results_dir": str(tmp_path / "results"), "figures_dir": str(tmp_path / "figures"), "report_card": False, "leaderboard": None,
           "method_params": {"dhp": {"n_items": 1}}, "overrides": [{"judges": ["good"], "params": {"n_items": 2}}]}
    f = tmp_path / "grid.yaml"
    f.write_text(yaml.safe_dump(cfg))

    # Tables left by an earlier run of the failing point must not reach results/.
    stale = tmp_path / "runs" / "t" / "dhp" / "summeval" / "bad-logprobs"
    stale.mkdir(parents=True)
    pd.DataFrame({"dataset": ["summeval"], "judge": ["bad"], "mode": ["logprobs"], "D_avg": [9.0]}).to_csv(
        stale / "summary.csv", index=False)

    assert grid.main([str(f)]) == 1
    text = capsys.readouterr().out
    assert not (stale / "summary.csv").exists()
    assert "1 FAILED" in text and "02_judge.ipynb" in text and "judge exploded" in text and "cell 3 of the executed notebook" in text  # papermill adds a cell
    assert "'judge': 'bad'" in text
    # the closing table: every notebook and grid step with its seconds, and the slowest named again
    table = text[text.index("time per notebook and step"):]
    assert "02_judge.ipynb" in table and "(aggregate tables)" in table and "CPU s" in table
    assert "[grid] slowest:" in table
    point = tmp_path / "runs" / "t" / "dhp" / "summeval"
    # the shared stage ran once, for the largest n_items any judge asks for
    assert pd.read_parquet(point / "perturbed.parquet")["n"].tolist() == [2]
    assert (point / "good-logprobs" / "perturbed.parquet").exists()
    assert (point / "good-logprobs" / "03_discernment.ipynb").exists()  # the other point went on
    assert not (point / "bad-logprobs" / "03_discernment.ipynb").exists()
    # a failed run publishes nothing; what it made waits in the staging folder
    assert not (tmp_path / "results").exists() and not (tmp_path / "figures").exists()
    staged = tmp_path / "runs" / "t" / "staging"
    assert "left as they were" in text and "runs/t/staging" in text
    scores = pd.read_csv(staged / "results" / "scores.csv")
    assert list(scores["judge"]) == ["good"] and "text" not in scores.columns  # numbers only
    assert pd.read_csv(staged / "results" / "summary.csv")["judge"].tolist() == ["good"]
    assert (staged / "figures" / "04_figures.txt").read_text() == str(resolve(staged / "results"))


class _ToyParams(RunParams):
    n_things: int = 9


@pytest.fixture
def toy_method():
    @methods.register
    class GridToy(methods.Method):
        name = "grid_toy"
        title = "a method the grid test registers"
        notebooks = ("91_grid_toy",)
        modes = ("logprobs",)
        headline = "value"
        Params = _ToyParams
        produces = (methods.Table("grid_toy.csv", ("judge", "mode", "value"), "one row per judge"),
                    methods.Table("grid_toy_unlabelled.csv", ("value",), "a table without judge columns"))

        def card(self, tables):
            from dhp.analysis.report_card import card_row

            return pd.DataFrame([card_row(r["judge"], r["mode"], "grid_toy", "value", "", r["value"])
                                 for r in tables["grid_toy.csv"].to_dict("records")])

    yield GridToy
    methods._REGISTRY.pop("grid_toy", None)


@pytest.mark.slow
def test_a_registered_method_runs_per_judge_and_its_tables_reach_results_and_the_card(tmp_path, capsys, toy_method):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    params = 'run_dir = "x"\njudge = "j"\nmode = "m"\nseed = 0\ncache_path = None\nn_things = 9\nprogress = False'
    _nb(nbs / "91_grid_toy.ipynb", params,
        "import json, os\nimport pandas as pd\nfrom pathlib import Path\nPath(run_dir).mkdir(parents=True, exist_ok=True)\n"
        "assert n_things == 2 and cache_path.endswith('shared.sqlite')\n"
        # what dhp.calls.run writes: the grid must hand the file to the kernel (its progress parameter) and show
        # what it reads there
        "json.dump({'run': 1, 'desc': 'score x', 'done': 2, 'total': 3}, open(progress, 'w'))\n"
        "if judge == 'bad':\n    raise RuntimeError('toy exploded')\n"
        "pd.DataFrame([{'judge': judge + ':id', 'mode': mode, 'value': 1.0}]).to_csv(Path(run_dir, 'grid_toy.csv'), index=False)\n"
        "pd.DataFrame([{'value': 2.0}]).to_csv(Path(run_dir, 'grid_toy_unlabelled.csv'), index=False)")
    _nb(nbs / "10_report_card.ipynb", 'run_dir = "x"\nfigures_dir = None',
        "from pathlib import Path\nPath(run_dir, 'report_card.csv').write_text(','.join(sorted(p.name for p in Path(run_dir).iterdir())))")
    results = tmp_path / "results"
    results.mkdir()
    (results / "grid_toy.csv").write_text("judge,mode,value\nstale,stale,0\n")  # from an earlier run
    cfg = {**BASE, "judges": ["good", "bad"], "modes": ["logprobs", "likelihood"], "methods": ["grid_toy"],
           "run_id": "t", "notebooks_dir": str(nbs), "runs_dir": str(tmp_path / "runs"), "results_dir": str(results),
           "figures_dir": str(tmp_path / "figures"), "params": {"cache_path": str(tmp_path / "shared.sqlite")},
           "method_params": {"grid_toy": {"n_things": 2}}, "leaderboard": None}
    f = tmp_path / "grid.yaml"
    f.write_text(yaml.safe_dump(cfg))

    assert grid.main([str(f)]) == 1
    text = capsys.readouterr().out
    assert "toy exploded" in text and "no judge/mode columns" in text
    assert "[grid] done" in text and " in " in text  # a line per notebook with its elapsed time
    assert "91_grid_toy: score x: 2/3 calls" in text  # the kernel's call progress reached the grid
    assert "not run: grid_toy for good in likelihood mode" in text
    assert not (tmp_path / "runs" / "t" / "grid_toy" / "good-likelihood").exists()
    staged = tmp_path / "runs" / "t" / "staging" / "results"
    toy = pd.read_csv(staged / "grid_toy.csv")
    assert toy["judge"].tolist() == ["good:id"]  # the failed point and the stale row are not in the tables
    assert not (staged / "grid_toy_unlabelled.csv").exists()
    assert (tmp_path / "runs" / "t" / "grid_toy" / "good-logprobs" / "91_grid_toy.ipynb").exists()
    # the card ran last, on the collected tables
    assert (staged / "report_card.csv").read_text() == "grid_toy.csv"
    # the aggregate folder is a run folder with its manifest: which points it gathered, the tables it wrote
    agg = json.loads((tmp_path / "runs" / "t" / "aggregate" / "manifest.json").read_text())["stages"]["aggregate"]
    assert [Path(p).name for p in agg["parameters"]["points"]] == ["good-logprobs"]
    assert [Path(p).name for p in agg["inputs"]] == ["grid_toy.csv"]
    # the run failed: results/ is as it was
    assert [f.name for f in results.iterdir()] == ["grid_toy.csv"]
    assert (results / "grid_toy.csv").read_text() == "judge,mode,value\nstale,stale,0\n"


@pytest.mark.slow
def test_a_rerun_skips_up_to_date_notebooks_and_runs_what_changed(tmp_path, capsys, caplog):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    log = tmp_path / "executions.txt"
    body = ("import pandas as pd\nfrom pathlib import Path\nPath(run_dir).mkdir(parents=True, exist_ok=True)\n"
            f"open({str(log)!r}, 'a').write(NAME + ' ' + str(judge) + '\\n')\n")
    _nb(nbs / "01_perturb.ipynb", 'run_dir = "x"\ndataset = "summeval"\nn_items = 1\njudge = None',
        body.replace("NAME + ' ' + str(judge)", "'01 shared'") + "pd.DataFrame({'dataset': ['summeval'], 'item_id': ['1'], 'perturbation': "
        "['original'], 'severity': ['none'], 'level': ['none'], 'text': ['t'], 'status': ['ok']})"
        ".to_parquet(Path(run_dir, 'perturbed.parquet'))")
    _nb(nbs / "02_judge.ipynb", 'run_dir = "x"\njudge = "embedded"\nmode = "logprobs"\nn_items = 1\nseed = 0',
        body.replace("NAME", "'02'") + f"if judge == 'bad' and Path({str(tmp_path / 'fail')!r}).exists():\n"
        "    raise RuntimeError('judge exploded')\n"
        "pd.DataFrame({'dataset': ['summeval'], 'task': ['summarization'], 'judge': [judge], 'mode': [mode], "
        "'item_id': ['1'], 'perturbation': ['original'], 'severity': ['none'], 'level': ['none'], 'metric': ['f'], "
        "'score': [3.0], 'n_valid': [1], 'n_failed': [0]}).to_parquet(Path(run_dir, 'scores.parquet'))")
    _nb(nbs / "03_discernment.ipynb", 'run_dir = "x"\njudge = "embedded"',
        body.replace("NAME", "'03'") + "pd.DataFrame({'dataset': ['summeval'], 'judge': [judge], 'mode': ['logprobs'], "
        "'D_avg': [1.5], 'D_min': [1.0]}).to_csv(Path(run_dir, 'summary.csv'), index=False)")
    _nb(nbs / "10_report_card.ipynb", 'run_dir = "x"\nfigures_dir = None',
        body.replace("NAME + ' ' + str(judge)", "'10 card'") + "Path(run_dir, 'report_card.csv').write_text('card')")
    cfg = {**BASE, "judges": ["good", "bad"], "run_id": "t", "notebooks_dir": str(nbs),
           "runs_dir": str(tmp_path / "runs"), "results_dir": str(tmp_path / "results"),
           "figures_dir": str(tmp_path / "figures"), "report_card": True, "result_notebooks": False,
           "leaderboard": None, "method_params": {"dhp": {"n_items": 1}}}
    f = tmp_path / "grid.yaml"

    def run(change: dict | None = None, *extra: str, rc: int = 0) -> list[str]:
        f.write_text(yaml.safe_dump({**cfg, **(change or {})}))
        log.write_text("")
        assert grid.main([str(f), *extra]) == rc
        return sorted(log.read_text().split("\n")[:-1])

    (tmp_path / "fail").touch()  # "bad" fails until the file goes
    assert run(rc=1) == ["01 shared", "02 bad", "02 good", "03 good", "10 card"]
    # the failed point has no stamp: it runs again; so does the card, whose output was never published
    assert run(rc=1) == ["02 bad", "10 card"]
    assert not (tmp_path / "results").exists()
    (tmp_path / "fail").unlink()
    assert run() == ["02 bad", "03 bad", "10 card"]
    assert run() == []  # everything up to date
    assert (tmp_path / "results" / "report_card.csv").read_text() == "card"  # an up-to-date card stays
    assert "up to date" in capsys.readouterr().out
    assert pd.read_csv(tmp_path / "results" / "summary.csv")["judge"].tolist() == ["bad", "good"]  # still gathered
    # a changed parameter of one judge runs that judge's notebooks (and nothing upstream of them)
    assert run({"overrides": [{"judges": ["good"], "methods": ["dhp"], "params": {"seed": 3}}]}) == [
        "02 good", "03 good", "10 card"]  # the card reads what changed
    assert run(None, "--rerun") == ["01 shared", "02 bad", "02 good", "03 bad", "03 good", "10 card"]
    # these notebooks declare no `progress`: the grid's call watcher is not passed to them (papermill would warn)
    assert "Passed unknown parameter" not in caplog.text


def _git(cwd, *args) -> str:
    import subprocess

    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout


@pytest.mark.slow
def test_a_failing_or_killed_run_leaves_committed_results_and_figures_as_they_were(tmp_path):
    """The committed results survive a run that fails at a point's notebook, at the leaderboard, at the report card
    or is killed (git status stays clean); a run that succeeds publishes its tables and figures."""
    import os
    import subprocess
    import sys

    nbs, flags = tmp_path / "nbs", tmp_path / "flags"
    nbs.mkdir()
    flags.mkdir()
    flag = f"from pathlib import Path\nflag = lambda name: Path({str(flags)!r}, name).exists()\n"
    _nb(nbs / "01_perturb.ipynb", 'run_dir = "x"\ndataset = "summeval"\nn_items = 1',
        "import pandas as pd\nfrom pathlib import Path\nPath(run_dir).mkdir(parents=True, exist_ok=True)\n"
        "pd.DataFrame({'dataset': ['summeval'], 'item_id': ['1'], 'perturbation': ['original'], 'severity': ['none'],"
        " 'level': ['none'], 'text': ['t'], 'status': ['ok']}).to_parquet(Path(run_dir, 'perturbed.parquet'))")
    _nb(nbs / "02_judge.ipynb", 'run_dir = "x"\njudge = "embedded"\nmode = "logprobs"',
        flag + "import pandas as pd\nif judge == 'bad' and flag('point'):\n    raise RuntimeError('judge exploded')\n"
        "pd.DataFrame({'dataset': ['summeval'], 'task': ['summarization'], 'judge': [judge], 'mode': [mode], "
        "'item_id': ['1'], 'perturbation': ['original'], 'severity': ['none'], 'level': ['none'], 'metric': ['f'], "
        "'score': [3.0], 'n_valid': [1], 'n_failed': [0]}).to_parquet(Path(run_dir, 'scores.parquet'))")
    _nb(nbs / "03_discernment.ipynb", 'run_dir = "x"\njudge = "embedded"',
        "import pandas as pd\nfrom pathlib import Path\npd.DataFrame({'dataset': ['summeval'], 'judge': [judge], "
        "'mode': ['logprobs'], 'D_avg': [1.5], 'D_min': [1.0]}).to_csv(Path(run_dir, 'summary.csv'), index=False)")
    _nb(nbs / "11_leaderboard.ipynb", 'run_dir = "x"\nfigures_dir = None',
        flag + "Path(figures_dir).mkdir(parents=True, exist_ok=True)\nPath(figures_dir, 'leaderboard_x.png').write_bytes(b'lb')\n"
        "if flag('leaderboard'):\n    raise RuntimeError('leaderboard exploded')\n"
        "Path(run_dir, 'leaderboard.csv').write_text('judge,rank\\ngood,1\\n')")
    _nb(nbs / "10_report_card.ipynb", 'run_dir = "x"\nfigures_dir = None',
        flag + "import os, signal\nPath(figures_dir, 'report_card_x.png').write_bytes(b'new card')\n"
        "Path(run_dir, 'report_card.csv').write_text('new card')\n"
        "if flag('kill'):\n    os.kill(os.getppid(), signal.SIGKILL)  # the grid, mid-run\n"
        "if flag('card'):\n    raise RuntimeError('card exploded')")
    repo = tmp_path / "repo"
    results, figures = repo / "results", repo / "figures"
    results.mkdir(parents=True)
    figures.mkdir()
    committed = {"summary.csv": "dataset,judge,mode,D_avg\nsummeval,old,logprobs,7.87\n", "report_card.csv": "old card",
                 "scores.csv": "judge,mode,score\nold,logprobs,1\n", "leaderboard.csv": "judge,rank\nold,1\n",
                 "confusion_cells.csv": "judge,mode\nold,logprobs\n",  # a method this grid does not run
                 "README.txt": "not the grid's"}
    for name, text in committed.items():
        (results / name).write_text(text)
    (figures / "report_card_x.png").write_bytes(b"\x89PNG old card")
    (figures / "kept.pdf").write_bytes(b"%PDF old figure")
    (repo / ".gitignore").write_text("runs/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "committed results")
    cfg = {**BASE, "judges": ["good", "bad"], "run_id": "t", "notebooks_dir": str(nbs), "runs_dir": str(repo / "runs"),
           "results_dir": str(results), "figures_dir": str(figures), "result_notebooks": False,
           "method_params": {"dhp": {"n_items": 1}}}
    f = tmp_path / "grid.yaml"
    f.write_text(yaml.safe_dump(cfg))

    def fails_at(name: str) -> None:
        for old in flags.iterdir():
            old.unlink()
        (flags / name).touch()
        if name == "kill":  # a grid process of its own, killed by its report card notebook
            env = {**os.environ, "PYTHONPATH": str(resolve("."))}
            rc = subprocess.run([sys.executable, "-m", "dhp.grid", str(f)], env=env, capture_output=True).returncode
            assert rc == -9
        else:
            assert grid.main([str(f)]) == 1
        assert _git(repo, "status", "--porcelain") == "", name
        assert (repo / "runs" / "t" / "staging" / "figures" / "report_card_x.png").exists() or name != "kill"

    fails_at("point")
    fails_at("leaderboard")
    fails_at("card")
    fails_at("kill")
    assert (repo / "runs" / "t" / "staging" / "results" / "report_card.csv").read_text() == "new card"

    for old in flags.iterdir():
        old.unlink()
    assert grid.main([str(f)]) == 0
    status = sorted(_git(repo, "status", "--porcelain").splitlines())
    assert status == [" D results/confusion_cells.csv", " M figures/report_card_x.png", " M results/leaderboard.csv",
                      " M results/report_card.csv", " M results/scores.csv", " M results/summary.csv",
                      "?? figures/leaderboard_x.png"]
    assert pd.read_csv(results / "summary.csv")["judge"].tolist() == ["bad", "good"]
    assert (results / "README.txt").read_text() == "not the grid's" and (figures / "kept.pdf").exists()
    assert not (repo / "runs" / "t" / "staging").exists()


class _StageToyParams(RunParams):
    fail: bool = False


@pytest.fixture
def notebookless_method():
    @methods.register
    class StageToy(methods.Method):
        name = "stage_toy"
        title = "a method with no notebook"
        modes = ("metric",)
        Params = _StageToyParams
        collects = (methods.Table("stage_toy_items.csv", ("judge", "mode", "value"), "one row per judge"),)

        def collect(self, config, judge=None):
            if config.fail:
                raise RuntimeError("stage toy exploded")
            return {"stage_toy_items.csv": pd.DataFrame([{"judge": self.backend(config, judge).identity,
                                                          "mode": config.mode, "value": 1.0}])}

        def analyze(self, tables, config):
            return {}

        def card(self, tables):
            return pd.DataFrame()

    yield StageToy
    methods._REGISTRY.pop("stage_toy", None)


@pytest.mark.parametrize("fail", [False, True])
def test_a_method_without_a_notebook_runs_through_the_stage_runner(tmp_path, capsys, notebookless_method, fail):
    cfg = {"judges": ["baseline:length_ratio"], "modes": ["metric"], "methods": ["stage_toy"], "run_id": "s",
           "runs_dir": str(tmp_path / "runs"), "results_dir": str(tmp_path / "results"),
           "figures_dir": str(tmp_path / "figures"), "method_params": {"stage_toy": {"fail": fail}},
           "leaderboard": None, "report_card": False, "result_notebooks": False}
    f = tmp_path / "grid.yaml"
    f.write_text(yaml.safe_dump(cfg))
    rc = grid.main([str(f)])
    text = capsys.readouterr().out
    assert "stage_toy (stage runner)" in text
    if fail:  # never "all notebooks succeeded" over a method that did not run
        assert rc == 1 and "stage toy exploded" in text and not (tmp_path / "results").exists()
    else:
        assert rc == 0
        assert pd.read_csv(tmp_path / "results" / "stage_toy_items.csv")["judge"].tolist() == ["baseline:length_ratio"]


def test_a_method_that_requires_another_runs_after_it_in_its_folders(notebookless_method):
    class Reader(methods.Method):
        name = "reads_dhp_test"
        modes = ("metric",)
        requires = ("dhp",)

    methods.register(Reader)
    try:
        g = grid.validate_params({**BASE, "judges": ["baseline:length_ratio"], "modes": ["metric"],
                                  "methods": ["reads_dhp_test", "dhp"]})
        assert g.methods == ["dhp", "reads_dhp_test"]
        pts, _ = grid.points(g)
        folders = {p.method: p.folder for p in pts}
        assert folders["reads_dhp_test"] == folders["dhp"]
        with pytest.raises(DHPError, match=r"reads the tables of \['dhp'\], which the grid does not run"):
            grid.validate_params({**BASE, "methods": ["reads_dhp_test"]})
        assert set(grid.validate_params({**BASE, "methods": "all"}).methods) == set(methods.names())
    finally:
        methods._REGISTRY.pop("reads_dhp_test", None)


def _jobs_that_meet(n_meeting: int, timeout: float = 5.0):
    """Two jobs that succeed only if both run at the same time (a barrier), and a third that must wait for the first."""
    barrier, log = threading.Barrier(n_meeting, timeout=timeout), []

    def meet(name):
        def run():
            log.append(f"start {name}")
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                return False
            log.append(f"end {name}")
            return True
        return run

    a = grid._Job("a", meet("a"))
    b = grid._Job("b", meet("b"))
    c = grid._Job("c", lambda: log.append("c") or True, after=(a,))
    return [a, b, c], log


def test_grid_jobs_run_side_by_side_and_wait_for_what_they_need():
    jobs, log = _jobs_that_meet(2)
    grid._run_jobs(jobs, workers=2)
    assert [j.ok for j in jobs] == [True, True, True]
    assert log.index("c") > log.index("end a")  # after its dependency, never before
    # control: one worker cannot run the two jobs at once, so they never meet (the check above can fail)
    jobs, log = _jobs_that_meet(2, timeout=0.5)
    grid._run_jobs(jobs, workers=1)
    assert [j.ok for j in jobs] == [False, False, False]  # c is skipped: its dependency did not succeed
    assert "c" not in log


def test_grid_workers_give_each_embedded_judge_one_thread_unless_set(monkeypatch):
    seen = []
    monkeypatch.delenv("DHP_N_THREADS", raising=False)
    grid._run_jobs([grid._Job("x", lambda: seen.append(os.environ.get("DHP_N_THREADS")) or True)], workers=2)
    assert seen == ["1"] and "DHP_N_THREADS" not in os.environ  # restored afterwards
    monkeypatch.setenv("DHP_N_THREADS", "2")
    grid._run_jobs([grid._Job("x", lambda: seen.append(os.environ.get("DHP_N_THREADS")) or True)], workers=2)
    assert seen[-1] == "2"


@pytest.mark.slow
def test_notebooks_run_side_by_side_start_in_their_folders_and_leave_the_working_directory(tmp_path):
    # papermill's cwd= chdirs the whole process: A enters a/, B enters b/ (remembering a/), A restores the start, B
    # restores a/ -- the process was left in a/. The kernel's folder now travels as nbclient's resources path.
    for name, wait in (("a", 1.0), ("b", 4.0)):
        (tmp_path / name).mkdir()
        _nb(tmp_path / name / f"{name}.ipynb", 'run_dir = "x"',
            f"import os, time\ntime.sleep({wait})\nopen(os.path.join(run_dir, 'cwd.txt'), 'w').write(os.getcwd())")
    g = grid.GridParams(**{**BASE, "run_id": "t", "runs_dir": str(tmp_path / "runs"), "leaderboard": None})
    report, start = grid.Report(), os.getcwd()

    def run(name):
        out = tmp_path / "out" / name
        out.mkdir(parents=True)
        grid._execute(tmp_path / name / f"{name}.ipynb", out / f"{name}.ipynb", {"run_dir": str(out)}, g, report,
                      watch_calls=False)

    threads = [threading.Thread(target=run, args=(n,)) for n in "ab"]
    threads[0].start()
    time.sleep(0.5)
    threads[1].start()
    for t in threads:
        t.join()
    assert not report.failures, report.failures
    assert os.getcwd() == start
    for name in "ab":
        assert Path((tmp_path / "out" / name / "cwd.txt").read_text()).resolve() == (tmp_path / name).resolve()


def test_publishing_a_view_drawn_in_parts_removes_its_old_whole_figure_only(tmp_path):
    # the demo's DHP view grew too tall with the controls and was drawn as leaderboard_dhp_d_avg/_d_min: the old
    # leaderboard_dhp.png would stay beside them, a figure no run draws any more; other grids' figures stay
    from dhp.grid import publish

    staged_r, staged_f, results, figures = (tmp_path / n for n in ("sr", "sf", "results", "figures"))
    for d in (staged_r, staged_f, results, figures):
        d.mkdir()
    for name in ("leaderboard_dhp_d_avg.png", "leaderboard_dhp_d_min.png", "leaderboard_hanna.png"):
        (staged_f / name).write_bytes(b"new")
    for name in ("leaderboard_dhp.png", "leaderboard_dhp.pdf", "leaderboard_hanna_coherence.png",
                 "discernment_pubmedqa.png", "leaderboard_frank.png"):
        (figures / name).write_bytes(b"old")
    changed = publish(staged_r, staged_f, results, figures)
    assert sorted(p.name for p in figures.iterdir()) == [
        "discernment_pubmedqa.png", "leaderboard_dhp.pdf", "leaderboard_dhp_d_avg.png", "leaderboard_dhp_d_min.png",
        "leaderboard_frank.png", "leaderboard_hanna.png"]  # (the .pdf: no staged .pdf of that view here)
    assert any(c.endswith("leaderboard_dhp.png") for c in changed)


def test_results_hold_a_recorded_judges_rows_once_however_many_points_set_it_beside_theirs(tmp_path):
    """Every bias point analyses its folder's judges with LLMBar's recorded judges beside them: the same recorded rows
    come out of each point. results/ keeps them once (the demo's bias_position.csv held each six times); a live
    judge's rows and a repeat within one point's own table stay."""
    recorded = {"judge": "GPT-4", "mode": "recorded", "strategy": "Vanilla", "subset": "Natural", "prefer_first": 0.51}
    points = []
    for i, judge in enumerate(["embedded:a", "control:first", "control:chance"]):
        folder = tmp_path / f"p{i}"
        folder.mkdir()
        own = {"judge": judge, "mode": "logprobs" if i == 0 else "metric", "strategy": "Vanilla", "subset": "Natural",
               "prefer_first": 0.1 * (i + 1)}
        rows = [recorded, own] + ([own] if i == 0 else [])  # point 0 repeats its own row: kept as it is
        pd.DataFrame(rows).to_csv(folder / "bias_position.csv", index=False)
        points.append(grid.Point("bias", judge, own["mode"], "summeval", folder, None))
    report = grid.Report()
    out = grid.aggregate(points, tmp_path / "results", report)
    got = pd.read_csv(out["bias_position"])
    assert not report.failures
    assert (got["judge"] == "GPT-4").sum() == 1
    assert got["judge"].value_counts().to_dict() == {"embedded:a": 2, "GPT-4": 1, "control:first": 1,
                                                     "control:chance": 1}


def test_a_judge_run_without_notebooks_gives_the_tables_of_its_methods_in_their_order(tmp_path, capsys):
    """``notebooks: false``: a control's points run through the stage runner inside the grid, no kernel. Dual
    perspective and human alignment share notebook 09's folder; dual perspective's Table 1 reads human alignment's
    alignment.csv, so human alignment runs first there (as the notebook orders them): the grid's tables equal those of
    the two methods run by hand in that order (dual perspective first leaves Table 1's dataset correlation NaN). A
    rerun finds them up to date; no executed notebook is written."""
    judge = "control:oracle@0.2"
    sizes = {"dual_perspective": {"n_targets": 6, "n_sources": 2, "chain_length": 2, "aspects": ["coherence"]},
             "human_alignment": {"n_docs": 4, "n_segments": 6, "aspects": ["coherence"]}}
    cfg = {"judges": [{"judge": judge, "modes": ["metric"], "notebooks": False}], "modes": ["metric"],
           "methods": ["dual_perspective", "human_alignment"], "run_id": "bare", "runs_dir": str(tmp_path / "runs"),
           "results_dir": str(tmp_path / "results"), "figures_dir": str(tmp_path / "figures"),
           "method_params": sizes, "leaderboard": None, "report_card": False, "result_notebooks": False}
    f = tmp_path / "grid.yaml"
    f.write_text(yaml.safe_dump(cfg))
    assert grid.main([str(f)]) == 0
    out = capsys.readouterr().out
    assert out.index("human_alignment (stage runner)") < out.index("dual_perspective (stage runner)")
    folder = tmp_path / "runs" / "bare" / "dual_perspective" / "control_oracle_0.2-metric"
    assert not list(folder.rglob("*.ipynb")) and not (folder / "figures").exists()

    by_hand = tmp_path / "by_hand"
    for name in ("human_alignment", "dual_perspective"):
        methods.run(name, methods.get(name).config(judge=judge, mode="metric", run_dir=str(by_hand),
                                                    **sizes[name]), figures=False)
    table1 = pd.read_csv(tmp_path / "results" / "table1.csv")
    pd.testing.assert_frame_equal(table1, pd.read_csv(by_hand / "table1.csv"))
    assert table1["dataset_pearson"].notna().all()
    for name in ("alignment.csv", "global_kappa.csv", "local_accuracy.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "results" / name), pd.read_csv(by_hand / name))

    assert grid.main([str(f)]) == 0
    again = capsys.readouterr().out
    assert "up to date" in again and not [line for line in again.splitlines() if line.startswith("[grid] done")]


def test_a_judge_entry_names_its_methods_and_the_others_read_not_run():
    g = grid.validate_params({**BASE, "methods": "all", "judges": [
        {"judge": "embedded", "modes": ["logprobs"], "methods": ["decompose_aggregate", "bias"]},
        {"judge": "control:chance", "modes": ["metric"]}]})
    pts, not_run = grid.points(g)
    assert sorted(p.method for p in pts if p.judge == "embedded") == ["bias", "decompose_aggregate"]
    assert {p.method for p in pts if p.judge == "control:chance"} >= {"dhp", "criteria_confusion", "bias"}
    assert "dhp for embedded in logprobs mode (not among the methods the grid gives it)" in not_run
    with pytest.raises(DHPError, match=r"'embedded' names methods \['dhp'\], which are not in methods \['bias'\]"):
        grid.validate_params({**BASE, "methods": ["bias"],
                              "judges": [{"judge": "embedded", "modes": ["logprobs"], "methods": ["dhp"]}]})


def test_points_run_without_notebooks_wait_until_no_model_point_is_ready():
    """A point the grid runs without notebooks takes seconds: on one worker the model points, listed after it, run
    first (the slow ones start early; these fill the cores while the last runs). A job's ``after`` still holds."""
    log = []
    filler = grid._Job("control", lambda: log.append("control") or True, filler=True)
    model = grid._Job("model", lambda: log.append("model") or True)
    later = grid._Job("model after control", lambda: log.append("model after control") or True, after=(filler,))
    grid._run_jobs([filler, model, later], workers=1)
    assert log == ["model", "control", "model after control"]


def test_with_two_workers_a_lane_of_its_own_runs_fillers_beside_the_model_points():
    """Two model points that must meet (both running at once) and a filler that must run while they do: only a
    third lane, taking fillers, can run it then (the two workers are held by the model points)."""
    both_running, filler_ran = threading.Barrier(3, timeout=5), []

    def model():
        try:
            both_running.wait()
        except threading.BrokenBarrierError:
            return False
        return True

    def filler():
        try:
            both_running.wait()
        except threading.BrokenBarrierError:
            return False
        filler_ran.append(True)
        return True

    jobs = [grid._Job("m1", model), grid._Job("m2", model), grid._Job("f", filler, filler=True)]
    grid._run_jobs(jobs, workers=2)
    assert [j.ok for j in jobs] == [True, True, True] and filler_ran
