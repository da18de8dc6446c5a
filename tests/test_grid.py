"""Grid runner: YAML validation and failure reporting (with tiny throw-away notebooks)."""

import nbformat as nbf
import pandas as pd
import pytest
import yaml

from dhp import grid
from dhp.errors import DHPError
from dhp.io import resolve

BASE = {"judges": ["embedded"], "modes": ["logprobs"], "datasets": ["summeval"]}


@pytest.mark.parametrize(
    "change, match",
    [
        ({"n_itmes": 5}, "unknown key"),
        ({"datasets": ["imdb"]}, "unknown dataset"),
        ({"modes": ["telepathy"]}, "unknown mode"),
        ({"n_items": "ten"}, "'n_items' should be int"),
        ({"n_items": True}, "'n_items' should be int"),
        ({"n_items": 0}, "n_items must be >= 1"),
        ({"judges": []}, "non-empty list"),
        ({"combine": "fisher"}, "combine must be"),
        ({"run_id": "../x"}, "unsafe"),
        ({"datasets": ["storycloze"], "storycloze_path": None}, "storycloze_path"),
    ],
)
def test_bad_params_are_rejected(change, match, monkeypatch):
    monkeypatch.delenv("DHP_STORYCLOZE_PATH", raising=False)
    with pytest.raises(DHPError, match=match):
        grid.validate_params({**BASE, **change})


def test_missing_required_key():
    with pytest.raises(DHPError, match="missing key"):
        grid.validate_params({"judges": ["embedded"]})


def test_shipped_yamls_are_valid(monkeypatch):
    monkeypatch.setenv("DHP_STORYCLOZE_PATH", "/nonexistent/only-for-validation.csv")
    demo = grid.load_params("params/demo.yaml")
    paper = grid.load_params("params/paper.yaml")
    three = grid.load_params("params/dhp_three_datasets.yaml")
    assert set(demo["methods"]) == set(grid.METHODS) and demo["report_card"] and demo["cache"]
    # every method notebook of the demo runs in the demo's modes
    assert all(m in grid.METHOD_NOTEBOOKS[x][2] for x in demo["methods"] if x != "dhp" for m in demo["modes"])
    assert {"logprobs", "likelihood"} <= set(three["modes"]) and "storycloze" in three["datasets"]
    assert three["results_dir"] != demo["results_dir"]
    assert paper["n_items"] == 100 and len(paper["datasets"]) >= 6


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
    _nb(nbs / "01_perturb.ipynb", 'run_dir = "x"\ndataset = "summeval"',
        "from pathlib import Path\nPath(run_dir).mkdir(parents=True, exist_ok=True)\nPath(run_dir, 'perturbed.parquet').write_text('p')")
    _nb(nbs / "02_judge.ipynb", 'run_dir = "x"\njudge = "embedded"\nmode = "logprobs"',
        "import pandas as pd\nfrom pathlib import Path\n"
        "assert Path(run_dir, 'perturbed.parquet').exists()\n"
        "if judge == 'bad':\n    raise RuntimeError('judge exploded')\n"
        "pd.DataFrame({'dataset': ['summeval'], 'judge': [judge], 'mode': [mode], 'item_id': ['1'], 'perturbation': ['original'],"
        " 'severity': ['none'], 'level': ['none'], 'metric': ['fluency'], 'score': [3.0], 'n_valid': [1], 'n_failed': [0],"
        " 'text': ['never copied']}).to_parquet(Path(run_dir, 'scores.parquet'))")
    _nb(nbs / "03_discernment.ipynb", 'run_dir = "x"\njudge = "embedded"',
        "import pandas as pd\nfrom pathlib import Path\n"
        "pd.DataFrame({'dataset': ['summeval'], 'judge': [judge], 'mode': ['logprobs'], 'D_avg': [1.5]}).to_csv(Path(run_dir, 'summary.csv'), index=False)")
    for name in ("04_figures", "05_response_styles"):
        _nb(nbs / f"{name}.ipynb", 'run_dir = "x"\nresults_dir = None\nfigures_dir = None',
            "from pathlib import Path\nPath(figures_dir).mkdir(parents=True, exist_ok=True)\n"
            f"Path(figures_dir, '{name}.txt').write_text(results_dir or run_dir)")
    cfg = {**BASE, "judges": ["bad", "good"], "run_id": "t", "notebooks_dir": str(nbs), "runs_dir": str(tmp_path / "runs"),
           "results_dir": str(tmp_path / "results"), "figures_dir": str(tmp_path / "figures"), "per_point_figures": False,
           "report_card": False}
    f = tmp_path / "grid.yaml"
    f.write_text(yaml.safe_dump(cfg))

    # Tables left by an earlier run of the failing point must not reach results/ (issue 9).
    stale = tmp_path / "runs" / "t" / "summeval" / "bad-logprobs"
    stale.mkdir(parents=True)
    pd.DataFrame({"dataset": ["summeval"], "judge": ["bad"], "mode": ["logprobs"], "D_avg": [9.0]}).to_csv(
        stale / "summary.csv", index=False)
    pd.DataFrame({"dataset": ["summeval"], "judge": ["bad"], "mode": ["logprobs"], "item_id": ["1"],
                  "perturbation": ["original"], "severity": ["none"], "level": ["none"], "metric": ["fluency"],
                  "score": [1.0], "n_valid": [1], "n_failed": [0]}).to_parquet(stale / "scores.parquet")

    assert grid.main([str(f)]) == 1
    text = capsys.readouterr().out
    assert not (stale / "summary.csv").exists() and not (stale / "scores.parquet").exists()
    assert "1 FAILED" in text and "02_judge.ipynb" in text and "judge exploded" in text and "cell 3 of the executed notebook" in text  # papermill adds a cell
    assert "'judge': 'bad'" in text
    point = tmp_path / "runs" / "t" / "summeval"
    assert (point / "good-logprobs" / "03_discernment.ipynb").exists()  # the other point went on
    assert not (point / "bad-logprobs" / "03_discernment.ipynb").exists()
    scores = pd.read_csv(tmp_path / "results" / "scores.csv")
    assert list(scores["judge"]) == ["good"] and "text" not in scores.columns  # numbers only
    assert pd.read_csv(tmp_path / "results" / "summary.csv")["judge"].tolist() == ["good"]
    assert (tmp_path / "figures" / "04_figures.txt").read_text() == str(resolve(tmp_path / "results"))


@pytest.mark.slow
def test_methods_run_per_judge_and_mode_and_their_tables_reach_results_and_the_card(tmp_path, capsys):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    write = ("import pandas as pd\nfrom pathlib import Path\nPath(run_dir).mkdir(parents=True, exist_ok=True)\n"
             "row = {'judge': judge + ':id', 'mode': mode, 'value': 1.0}\n")
    params = 'run_dir = "x"\njudge = "j"\nmode = "m"\nseed = 0\ncache_path = None\nfigures_dir = None\nn_items = 9'
    _nb(nbs / "07_criteria_confusion.ipynb", params,
        write + "assert n_items == 2 and cache_path.endswith('shared.sqlite')\n"
        # what dhp.calls.run writes: the grid must hand the file to the kernel and show what it reads there
        "import json, os\njson.dump({'run': 1, 'desc': 'score x', 'done': 2, 'total': 3}, open(os.environ['DHP_PROGRESS_FILE'], 'w'))\n"
        "for name in ('confusion_summary.csv', 'confusion_cells.csv'):\n"
        "    pd.DataFrame([row]).to_csv(Path(run_dir, name), index=False)")
    _nb(nbs / "09_dual_perspective.ipynb", params,
        write + "if judge == 'bad':\n    raise RuntimeError('dual exploded')\n"
        "pd.DataFrame([row]).to_csv(Path(run_dir, 'global_kappa.csv'), index=False)\n"
        "pd.DataFrame([{'value': 2.0}]).to_csv(Path(run_dir, 'alignment.csv'), index=False)  # no judge column")
    _nb(nbs / "10_report_card.ipynb", 'run_dir = "x"\nfigures_dir = None',
        "from pathlib import Path\nPath(run_dir, 'report_card.csv').write_text(','.join(sorted(p.name for p in Path(run_dir).iterdir())))")
    results = tmp_path / "results"
    results.mkdir()
    (results / "pairwise_agreement.csv").write_text("judge,mode\nstale,stale\n")  # from an earlier run
    cfg = {**BASE, "judges": ["good", "bad"], "modes": ["logprobs", "likelihood"],
           "methods": ["criteria_confusion", "dual_perspective"], "run_id": "t",
           "notebooks_dir": str(nbs), "runs_dir": str(tmp_path / "runs"), "results_dir": str(results),
           "figures_dir": str(tmp_path / "figures"), "cache": str(tmp_path / "shared.sqlite"),
           "notebook_params": {"07_criteria_confusion": {"n_items": 2}}}
    f = tmp_path / "grid.yaml"
    f.write_text(yaml.safe_dump(cfg))

    assert grid.main([str(f)]) == 1
    text = capsys.readouterr().out
    assert "dual exploded" in text and "no judge/mode columns" in text
    assert "[grid] done" in text and " in " in text  # a line per notebook with its elapsed time
    assert "07_criteria_confusion: score x: 2/3 calls" in text  # the kernel's call progress reached the grid
    assert "not run: criteria_confusion for good in likelihood mode" in text  # asks for a 1-5 score
    assert not (tmp_path / "runs" / "t" / "good-likelihood").exists()
    conf = pd.read_csv(results / "confusion_summary.csv")
    assert sorted(conf["judge"]) == ["bad:id", "good:id"] and set(conf["mode"]) == {"logprobs"}
    assert pd.read_csv(results / "global_kappa.csv")["judge"].tolist() == ["good:id"]
    assert not (results / "alignment.csv").exists() and not (results / "pairwise_agreement.csv").exists()
    assert (tmp_path / "runs" / "t" / "good-logprobs" / "criteria_confusion" / "07_criteria_confusion.ipynb").exists()
    # the card ran last, on results/, after the tables were collected
    assert (results / "report_card.csv").read_text() == "confusion_cells.csv,confusion_summary.csv,global_kappa.csv"


def test_unknown_method_is_rejected():
    with pytest.raises(DHPError, match="unknown or no method"):
        grid.validate_params({**BASE, "methods": ["dhp", "vibes"]})
