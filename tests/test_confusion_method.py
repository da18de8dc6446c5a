"""Criteria confusion as a registered method (dhp.methods.criteria_confusion): one run end to end with a scripted
judge, several judges and both instructions in one run folder (each analysed on its own), judge ``recorded``
(analyze what is in the folder, no model), the card's statuses, the parameters, and a bring-your-own file through
the command line and notebook 07 (slow: the embedded judge)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from conftest import ROOT, run_clis_together
from test_confusion_pipeline import TEXTS, AspectJudge

from dhp import methods
from dhp.analysis import confusion as cf
from dhp.analysis.report_card import confusion_rows
from dhp.backends import Completion
from dhp.config import notebook_defaults
from dhp.errors import DHPError

NAME = "criteria_confusion"
SMALL = {"n_items": 10, "attacks": ["negation", "sentence_deletion"],
         "aspects": ["fluency", "informativeness", "non_contradiction"], "mode": "sample", "n_samples": 2}


def _write_items(folder, n=len(TEXTS)):
    """A small synthetic CSV of one's own (item_id, source, reference, task)."""
    path = folder / "my_items.csv"
    pd.DataFrame({"item_id": [f"i{i}" for i in range(n)], "task": "summarization",
                  "source": [f"Article: {t} More background follows." for t in TEXTS[:n]],
                  "reference": TEXTS[:n]}).to_csv(path, index=False)
    return path


class ConfusedJudge(AspectJudge):
    """Lowers every aspect of any damaged text: the judge the method is meant to catch."""

    identity = "scripted:confused"

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            prompt = r.messages[0][1]
            candidate = prompt.split("\nSummary:\n", 1)[1].split("\n\nHow to answer", 1)[0]
            article = prompt.split("\nSource:\n", 1)[1].split("\n\nCriterion:", 1)[0]
            reference = article.removeprefix("Article: ").removesuffix(" More background follows.")
            damaged = candidate.strip() != reference.strip()
            reply = f"Analysis: {'damaged' if damaged else 'fine'}.\nRating: {2 if damaged else 5}"
            c = Completion(text=reply, top_logprobs=None, prompt_tokens=5, completion_tokens=8, texts=[reply] * r.n)
            out.append(c)
            if on_result:
                on_result(i, c)
        return out


@pytest.fixture(scope="module")
def items_csv(tmp_path_factory):
    return _write_items(tmp_path_factory.mktemp("byo"))


def _run(run_dir, items_csv, judge, **values):
    return methods.run(NAME, judge=judge, run_dir=str(run_dir), dataset=str(items_csv), **{**SMALL, **values})


def test_run_end_to_end_with_a_scripted_judge(tmp_path, items_csv):
    m = methods.get(NAME)
    judge = AspectJudge()
    paths = _run(tmp_path, items_csv, judge)
    for t in (*m.collects, *m.produces):
        assert t.name in paths and (tmp_path / t.name).is_file(), t.name
    # the paper's sampling: one request per prompt with n replies at temperature 1.0
    assert {(r.n, r.temperature) for r in judge.requests} == {(2, 1.0)}
    scores = pd.read_parquet(tmp_path / "confusion_scores.parquet")
    assert set(scores["judge"]) == {"scripted:aspects"} and set(scores["mode"]) == {"sample"}
    assert set(scores["dataset"]) == {"my_items"} and scores["item_id"].nunique() == 10
    assert len(scores) == 10 * 3 * 3  # items x (original + 2 attacks) x aspects
    cells = pd.read_csv(tmp_path / "confusion_cells.csv").set_index(["attack", "aspect"])
    assert cells.loc[("negation", "non_contradiction"), "set"] == "S_T"
    assert cells.loc[("negation", "non_contradiction"), "D"] > 1 and cells["n_pairs"].eq(10).all()
    assert bool(cells.loc[("negation", "fluency"), "invariant"])  # 10 equal zero drops: p = 0.5**10, adjusted
    summary = pd.read_csv(tmp_path / "confusion_summary.csv")
    assert list(summary.columns) == cf.RUN_KEYS + cf.SUMMARY_COLUMNS and len(summary) == 1
    row = summary.iloc[0]
    assert row["confusion_index"] == 0 and row["share_SF_invariant"] == 1 and row["n_SF_tested"] == row["n_S_F"] == 3
    corr = pd.read_csv(tmp_path / "confusion_correlations.csv")
    assert len(corr) == 9 and corr["n_texts"].eq(30).all()  # 3 x 3 aspect pairs over 30 texts
    card = m.card(methods.read_tables(m, tmp_path, m.produces)).set_index("measure")
    assert card.loc["share_SF_invariant", "n"] == 3 and (card["status"] == "ok").all()
    assert {p for p in paths if p.endswith(".png")} == {
        f"confusion_{k}_scripted-aspects_sample_paper_detailed.png" for k in ("drops", "correlations", "directional")}
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert str(items_csv) in manifest["stages"][NAME]["inputs"]
    expectations = pd.read_csv(tmp_path / "confusion_expectations.csv")
    assert expectations.groupby("set").size().to_dict() == {"S_F": 130, "S_T": 57, "excluded": 11}


def test_dry_run_counts_the_calls_and_calls_nothing(tmp_path, items_csv):
    m = methods.get(NAME)
    judge = AspectJudge()
    config = m.config(run_dir=str(tmp_path), dataset=str(items_csv), **SMALL)
    est = m.estimate(config, judge)
    assert est["perturber"] is None and est["judge"].calls == 10 * 3 * 3 and est["judge"].cached_calls == 0
    assert judge.requests == [] and not list(tmp_path.glob("confusion_*"))
    _run(tmp_path, items_csv, judge)
    again = m.estimate(config, AspectJudge())
    assert again["judge"].calls == 0 and again["judge"].cached_calls == 90  # everything is in the run's cache


def test_tables_that_hold_texts_stay_out_of_results():
    m = methods.get(NAME)
    kinds = {t.name: t.results for t in (*m.collects, *m.produces)}
    assert kinds["confusion_items.parquet"] == kinds["confusion_variants.parquet"] == "none"
    scores = next(t for t in m.collects if t.name == "confusion_scores.parquet")
    # failure quotes the judge's reply (which may quote the text): a "numbers" table must not declare it
    assert scores.results == "numbers" and "failure" not in scores.columns
    assert {"judge", "mode", "instruction"} <= set(scores.partition)


def test_two_judges_in_one_run_folder_are_both_analyzed(tmp_path, items_csv):
    _run(tmp_path, items_csv, AspectJudge())
    _run(tmp_path, items_csv, ConfusedJudge())
    n_rows = len(pd.read_parquet(tmp_path / "confusion_scores.parquet"))
    _run(tmp_path, items_csv, AspectJudge())  # a rerun replaces that judge's rows, it does not add to them
    scores = pd.read_parquet(tmp_path / "confusion_scores.parquet")
    assert len(scores) == n_rows == 2 * 90 and scores.groupby("judge").size().eq(90).all()
    summary = pd.read_csv(tmp_path / "confusion_summary.csv").set_index("judge")
    assert set(summary.index) == {"scripted:aspects", "scripted:confused"}
    assert summary.loc["scripted:aspects", "confusion_index"] == 0
    # the confused judge drops the S_F cells too: half or more of its significant drops are on S_F
    assert summary.loc["scripted:confused", "confusion_index"] >= 0.5
    assert summary.loc["scripted:confused", "share_SF_invariant"] == 0
    cells = pd.read_csv(tmp_path / "confusion_cells.csv")
    assert cells.groupby("judge").size().eq(6).all()  # each judge's cells adjusted in its own family
    figures = sorted(p.name for p in (tmp_path / "figures").glob("confusion_drops_*.png"))
    assert figures == ["confusion_drops_scripted-aspects_sample_paper_detailed.png",
                       "confusion_drops_scripted-confused_sample_paper_detailed.png"]


def test_paper_and_mitigated_runs_share_a_folder_and_the_card(tmp_path, items_csv):
    _run(tmp_path, items_csv, AspectJudge())
    judge = AspectJudge()
    _run(tmp_path, items_csv, judge, instruction="mitigated")
    assert all("must not change" in r.messages[0][1] for r in judge.requests)
    summary = pd.read_csv(tmp_path / "confusion_summary.csv")
    assert sorted(summary["instruction"]) == ["mitigated", "paper"]
    m = methods.get(NAME)
    card = m.card(methods.read_tables(m, tmp_path, m.produces))
    assert sorted(set(card["scope"])) == ["detailed", "detailed/mitigated"]


def test_recorded_judge_analyzes_what_the_run_folder_holds(tmp_path, items_csv):
    _run(tmp_path, items_csv, AspectJudge())
    live = pd.read_csv(tmp_path / "confusion_summary.csv")
    (tmp_path / "confusion_summary.csv").unlink()
    (tmp_path / "confusion_expectations.csv").unlink()  # collected again, without a model
    methods.run(NAME, {"judge": "recorded", "run_dir": str(tmp_path)})
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "confusion_summary.csv"), live)
    with pytest.raises(DHPError, match="holds no judgments"):
        methods.run(NAME, {"judge": "recorded", "run_dir": str(tmp_path / "empty")})
    with pytest.raises(DHPError, match="calls no model"):
        methods.get(NAME).collect(methods.get(NAME).config(judge="recorded"))


def test_analyze_needs_the_expectations_and_keeps_datasets_apart():
    m = methods.get(NAME)
    config = m.config()
    drops = {"negation": {"non_contradiction": 2.0}}
    rows = []
    for dataset in ("a", "b"):  # the same item ids in two datasets: 10 pairs per cell, not 5 averaged ones
        for i in range(5):
            for aspect in ("fluency", "non_contradiction"):
                base = {"dataset": dataset, "item_id": f"i{i}", "aspect": aspect, "description_type": "detailed",
                        "judge": "j", "mode": "sample", "instruction": "paper", "method": "rule"}
                rows.append({**base, "attack": "", "variant": "original", "score": 5.0 + (dataset == "b")})
                rows.append({**base, "attack": "negation", "variant": "perturbed",
                             "score": 5.0 + (dataset == "b") - drops["negation"].get(aspect, 0.0) - 0.1 * i})
    scores = pd.DataFrame(rows)
    with pytest.raises(DHPError, match="confusion_expectations.csv"):
        m.analyze({"confusion_scores.parquet": scores}, config)
    out = m.analyze({"confusion_scores.parquet": scores, **m.collect_reference(config)}, config)
    cells = out["confusion_cells.csv"].set_index("aspect")
    assert cells["n_pairs"].eq(10).all()
    assert cells.loc["non_contradiction", "mean_drop"] == pytest.approx(2.0 + 0.2)


@pytest.mark.parametrize("values, match", [
    ({"aspects": ["fluency", "fluenccy"]}, r"aspects = .* unknown aspect \['fluenccy'\]"),
    ({"attacks": ["negation", "negation"]}, "attack is named twice"),
    ({"description_types": ["golden"]}, "unknown description type"),
    ({"instruction": "strict"}, "instruction = 'strict' is invalid"),
    ({"adjust_method": "bonferroni"}, "adjust_method = 'bonferroni' is invalid"),
    ({"aspects": "fluency"}, "pass lists with -y"),
    ({"dataset": "imdb"}, "dataset = 'imdb' is invalid"),
    ({"delta": 0}, "delta = 0 is invalid"),
    ({"mode": "greedy"}, "mode = 'greedy' is invalid"),  # no such mode
])
def test_bad_parameters_get_one_message(values, match):
    m = methods.get(NAME)
    with pytest.raises(DHPError, match=match):
        m.config(values)


def test_nothing_to_ask_is_an_error_before_any_call():
    m = methods.get(NAME)
    items = pd.DataFrame({"dataset": "d", "task": "summarization", "item_id": ["1"], "source": [""],
                          "reference": [TEXTS[0]]})
    variants = pd.DataFrame({"dataset": "d", "task": "summarization", "item_id": ["1"], "perturbation": "original",
                             "level": "none", "severity": "none", "method": "none", "text": [TEXTS[0]],
                             "edits": "", "status": "ok", "reason": ""})
    with pytest.raises(DHPError, match="Nothing to ask"):
        m.prompts(m.config(aspects=["faithfulness"]), items, variants)


def test_card_says_why_a_share_is_missing_and_counts_the_tested_cells():
    base = {"judge": "j", "mode": "sample", "instruction": "paper", "description_type": "detailed",
            "share_ST_D_gt_1": 0.0, "share_ST_dropped": 0.0, "share_SF_dropped": 0.0}
    summary = pd.DataFrame([
        {**base, "n_S_T": 4, "n_S_F": 6, "n_SF_tested": 0, "share_SF_invariant": math.nan,
         "confusion_index": math.nan},  # two items: no S_F cell had 5 pairs
        {**base, "description_type": "gold", "n_S_T": 4, "n_S_F": 6, "n_SF_tested": 2, "share_SF_invariant": 0.5,
         "confusion_index": 0.25},
        {**base, "description_type": "term", "n_S_T": 0, "n_S_F": 0, "n_SF_tested": 0, "share_ST_D_gt_1": math.nan,
         "share_SF_invariant": math.nan, "confusion_index": math.nan},  # no usable pair at all
    ])
    card = confusion_rows(summary).set_index(["scope", "measure"])
    assert card.loc[("detailed", "share_SF_invariant"), "status"] == "too few pairs (< 5)"
    assert card.loc[("detailed", "share_SF_invariant"), "n"] == 0
    assert card.loc[("detailed", "confusion_index"), "status"] == "no significant drop"
    assert card.loc[("gold", "share_SF_invariant"), "n"] == 2  # the tested S_F cells, not the 6 S_F cells
    assert card.loc[("gold", "share_ST_D_gt_1"), "n"] == 4
    assert (card.loc["term", "status"] == "no usable scores").all()


def test_the_old_registry_entry_is_gone_and_the_method_is_listed():
    import dhp.analysis

    assert not hasattr(dhp.analysis, "ANALYSES")  # the method is the one place
    assert NAME in methods.names() and methods.get(NAME).notebooks == ("07_criteria_confusion",)


def _parameters_cell() -> dict:
    import ast

    nb = json.loads((ROOT / "notebooks" / "07_criteria_confusion.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
    return {t.id: ast.literal_eval(node.value) for node in ast.parse("".join(cell["source"])).body
            if isinstance(node, ast.Assign) for t in node.targets}


def test_notebook_declares_every_parameter_of_the_method_with_the_papers_defaults():
    """Notebook 07's parameters cell names every parameter the method adds to the shared ones, with its default:
    the paper's description type and prompt; a quick greedy look by default, the paper's sampling (10 replies, room
    for the analysis) one parameter away (paper_setting)."""
    import yaml

    from dhp.config import RunParams

    m = methods.get(NAME)
    params = _parameters_cell()
    own = set(m.Params.model_fields) - set(RunParams.model_fields)
    assert own <= set(params), own - set(params)
    assert {k: params[k] for k in params} == {k: notebook_defaults(m.Params)[k] for k in params}
    assert params["description_types"] == ["detailed"] and params["instruction"] == "paper"
    assert params["n_samples"] == 10 and params["temperature"] is None and params["paper_setting"] is False
    paper = m.config({**params, "paper_setting": True})
    assert (paper.mode, paper.n_samples, paper.max_tokens) == ("sample", 10, 256)
    demo = yaml.safe_load((ROOT / "params" / "demo.yaml").read_text())
    m.config(demo.get("method_params", {}).get(NAME, {}))  # the demo's values are valid parameters


# ---------------------------------------------------------------------------------------------- embedded judge

TINY = {"n_items": 2, "attacks": ["negation"], "aspects": ["fluency"], "max_tokens": 8}


@pytest.fixture(scope="module")
def own_file_runs(items_csv, tmp_path_factory):
    """The file through the command line and through notebook 07 (papermill), two processes started together (one
    llama.cpp thread each): {"cli"/"notebook": (folder, completed process)}."""
    cli, nb = tmp_path_factory.mktemp("own_cli"), tmp_path_factory.mktemp("own_nb")
    params = {"dataset": str(items_csv), **TINY, "run_dir": str(nb / "run"), "figures_dir": str(nb / "figures")}
    done = run_clis_together([
        {"args": ["--method", NAME, "--dataset", str(items_csv), "--n-items", "2", "--attacks", "negation",
                  "--aspects", "fluency", "--max-tokens", "8", "--run-dir", str(cli / "run")],
         "prefix": ["-m", "dhp", "run"]},
        {"args": [str(ROOT / "notebooks" / "07_criteria_confusion.ipynb"), str(nb / "07.ipynb"), "-y",
                  json.dumps(params), "--cwd", str(ROOT / "notebooks"), "-k", "python3", "--no-progress-bar"],
         "prefix": ["-m", "papermill"]}])
    return {"cli": (cli, done[0]), "notebook": (nb, done[1])}


@pytest.mark.slow
def test_own_file_through_the_command_line(items_csv, own_file_runs):
    tmp_path, out = own_file_runs["cli"]
    run = tmp_path / "run"
    assert out.returncode == 0, out.stderr
    scores = pd.read_parquet(run / "confusion_scores.parquet")
    assert set(scores["dataset"]) == {"my_items"} and scores["item_id"].nunique() == 2
    assert set(scores["judge"]) == {"embedded:smollm2-135m"} and set(scores["aspect"]) == {"fluency"}
    summary = pd.read_csv(run / "confusion_summary.csv")
    assert len(summary) == 1 and summary["n_SF_tested"].iloc[0] == 0  # 2 items: nothing to test invariance on
    assert str(items_csv) in json.loads((run / "manifest.json").read_text())["stages"][NAME]["inputs"]


@pytest.mark.slow
def test_own_file_through_notebook_07(own_file_runs):
    tmp_path, out = own_file_runs["notebook"]
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / "run"
    scores = pd.read_parquet(run / "confusion_scores.parquet")
    assert set(scores["dataset"]) == {"my_items"} and len(scores) == 2 * 2  # 2 items x (original + negation)
    assert (run / "confusion_summary.csv").is_file()
    cells = pd.read_csv(run / "confusion_cells.csv")
    drawn = list((tmp_path / "figures").glob("confusion_drops_*.png")) if (tmp_path / "figures").is_dir() else []
    assert bool(drawn) == (not cells.empty)  # a heat-map exactly when some original/attacked pair was scored
