"""The decompose_aggregate method (dhp.methods.decompose_aggregate): its stages end to end with a scripted judge on
files of one's own (no downloaded data needed), live and recorded judges stacked in one run folder, ``--judge
recorded``, and the agreement of imported real LLMBar verdicts (from the session's data root, conftest.DATA)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from dhp import methods
from dhp.analysis.report_card import CARD_COLUMNS, agreement_rows
from dhp.cli import main as cli_main
from dhp.errors import DHPError
from dhp.recorded import import_judgments, verdict_columns
from conftest import DATA
from test_dna import Scripted

FIX_LLMBAR = Path(__file__).parent / "fixtures" / "recorded" / "llmbar" / "Dataset"
REAL_LLMBAR = DATA / "llmbar_judgments"

REFERENCES = {
    "a1": "The council approved the new park budget on Monday. Work on the playground starts in spring and "
          "should be finished before the summer holidays begin.",
    "a2": "Heavy rain flooded several streets in the old town overnight. Firefighters pumped out cellars and "
          "the river is expected to fall again by Thursday afternoon.",
    "a3": "The museum reopened after two years of renovation. Visitors can now see the restored ceiling "
          "paintings and a new wing devoted to local craftsmanship.",
}


class BridgeJudge(Scripted):
    """The strategies' scripted judge (tests/test_dna.py), which also discerns in the DHP bridge: it scores a text
    that is one of the original references 5 and any other 2, and compared side by side it names the original."""

    identity = "scripted:bridge"

    def reply(self, prompt: str) -> str:
        if "Candidate 1:" in prompt:
            first = re.search(r"Candidate 1:\n\n(.*?)\n\nCandidate 2:", prompt, re.S).group(1).strip()
            return "1" if first in REFERENCES.values() else "2"
        if "council" in prompt or "rain" in prompt or "museum" in prompt:  # a bridge item's pointwise prompt
            return "5" if any(ref in prompt for ref in REFERENCES.values()) else "2"
        return super().reply(prompt)


def write_inputs(folder: Path) -> dict:
    """A pairwise file (4 pairs, GOOD output first in two, second in two) and a DHP dataset file (3 items)."""
    folder.mkdir(parents=True, exist_ok=True)
    pairs = pd.DataFrame({"item_id": ["p1", "p2", "p3", "p4"], "instruction": ["Say hi.", "Count.", "Name a colour.",
                                                                                "Greet."],
                          "output_1": ["GOOD one", "bad one", "GOOD two", "bad two"],
                          "output_2": ["bad one", "GOOD one", "bad two", "GOOD two"], "label": ["1", "2", "1", "2"]})
    pairs.to_csv(folder / "pairs.csv", index=False)
    items = pd.DataFrame({"item_id": list(REFERENCES), "task": "summarization",
                          "source": [f"Article {k}: " + "Local news in full. " * 5 for k in REFERENCES],
                          "reference": list(REFERENCES.values())})
    items.to_csv(folder / "news.csv", index=False)
    return {"pairs_path": str(folder / "pairs.csv"), "dhp_dataset": str(folder / "news.csv"), "dhp_items": 3,
            "n_pairs": None, "strategies": ["dhp_vanilla", "direct", "dna"]}


def test_run_end_to_end_with_a_scripted_judge(tmp_path):
    values = write_inputs(tmp_path / "in")
    run_dir = tmp_path / "run"
    judge = BridgeJudge()
    paths = methods.run("decompose_aggregate", judge=judge, run_dir=str(run_dir), **values)
    m = methods.get("decompose_aggregate")
    assert {t.name for t in (*m.collects, *m.produces)} <= set(paths)
    assert {"dna_agreement.png", "dna_agreement.pdf", "manifest.json"} <= set(paths)

    v = pd.read_parquet(run_dir / "pairwise_verdicts.parquet")
    assert list(v.columns) == verdict_columns()  # the table the LLMBar importer writes
    assert set(v["judge"]) == {"scripted:bridge"} and set(v["mode"]) == {"logprobs"} and set(v["source"]) == {""}
    assert len(v) == 4 * 3 * 2
    costs = pd.read_csv(run_dir / "pairwise_costs.csv").set_index("strategy")
    assert costs.loc["dhp_vanilla", "calls"] == 8 and costs.loc["dna", "calls"] == 4 + 4 * 3 * 2 + 4
    assert costs.loc["dhp_vanilla", "prompt_tokens"] == 8 * 20  # the scripted judge reports 20 per call

    a = pd.read_csv(run_dir / "pairwise_agreement.csv")
    assert list(a.columns) == list(m.tables()["pairwise_agreement.csv"].columns)
    a = a.set_index("strategy")
    assert (a["agreement"] == 1.0).all() and (a["position_consistency"] == 1.0).all() and (a["n"] == 4).all()
    assert a.loc["dna", "calls"] == costs.loc["dna", "calls"]  # the costs table reaches the agreement table

    comparisons = pd.read_parquet(run_dir / "bridge_comparisons.parquet")
    assert set(comparisons["order"]) == {"op", "po"} and (comparisons["winner"] == "original").all()
    assert set(comparisons["judge"]) == {"scripted:bridge"} and set(comparisons["mode"]) == {"logprobs"}
    pw = pd.read_csv(run_dir / "pairwise_discernment.csv")
    n_variants = comparisons.groupby(["perturbation", "severity"])["item_id"].nunique()
    assert (pw["original_wins"] == pw["n_items"]).all() and (pw["n_items"] == n_variants.max()).all()
    assert pw["p"].tolist() == pytest.approx([0.5 ** 3] * len(pw))  # 3 items won in both orders: 3 trials
    bridge = pd.read_csv(run_dir / "dna_bridge.csv")
    assert set(bridge["kind"]) == {"direct", "dna", "pairwise"} and set(bridge["judge"]) == {"scripted:bridge"}
    # originals 5, copies 2 on every metric: every D of the pointwise kinds is the Wilcoxon's smallest p's
    scores = pd.read_parquet(run_dir / "bridge_scores.parquet")
    assert set(scores.loc[scores["perturbation"] == "original", "score"]) == {5.0}
    assert (bridge.loc[bridge["kind"] != "pairwise", "D"] > 0).all()
    dna_d = bridge[bridge["kind"] == "dna"].set_index(["perturbation", "severity"])["D"]
    direct_d = bridge[bridge["kind"] == "direct"].set_index(["perturbation", "severity"])["D"]
    assert (dna_d.reindex(direct_d.index) <= direct_d + 1e-12).all()  # one test vs four metrics' combined p

    tables = methods.read_tables(m, run_dir, m.produces)
    card = m.card(tables)
    assert list(card.columns) == CARD_COLUMNS and len(card) == 2 * 3
    pd.testing.assert_frame_equal(card, agreement_rows(tables["pairwise_agreement.csv"]))
    stage = json.loads((run_dir / "manifest.json").read_text())["stages"]["decompose_aggregate"]
    assert stage["parameters"]["strategies"] == ["dhp_vanilla", "direct", "dna"]
    assert set(stage["inputs"]) == {values["pairs_path"], values["dhp_dataset"]}  # your files, checksummed


def test_stages_one_by_one_equal_the_run_and_dhp_items_zero_skips_the_bridge(tmp_path):
    values = write_inputs(tmp_path / "in")
    m = methods.get("decompose_aggregate")
    config = m.config(values, run_dir=str(tmp_path / "run"), dhp_items=0)
    collected = m.collect(config, BridgeJudge())
    assert set(collected) == {"pairwise_verdicts.parquet", "pairwise_costs.csv"}
    methods.write_tables(m, collected, config.run_dir)
    results = m.analyze(methods.read_tables(m, config.run_dir, m.collects), config)
    assert results["dna_bridge.csv"].empty and results["pairwise_discernment.csv"].empty
    assert len(results["pairwise_agreement.csv"]) == 3


@pytest.mark.parametrize("values, match", [
    ({"strategies": ["dhp_vanilla", "magic"]}, r"strategies = \['dhp_vanilla', 'magic'\] is invalid"),
    ({"strategies": []}, "strategies = \\[\\] is invalid"),
    ({"strategies": ["vanilla"]}, "'vanilla' was renamed: use 'llmbar:Vanilla'"),
    ({"subsets": ["Natural", "Nope"]}, "unknown LLMBar subset"),
    ({"n_pairs": 0}, "n_pairs = 0 is invalid"),
    ({"n_items": 3}, "unknown parameter 'n_items'"),  # one name, one meaning: n_items is DHP's
    ({"dhp_dataset": "imdb"}, "dhp_dataset = 'imdb' is invalid"),
    ({"pairs_path": "pairs.txt"}, "pairs_path = 'pairs.txt' is invalid"),
    ({"dna_weights": "learned"}, "dna_weights = 'learned' is invalid"),
    ({"strategies": "dhp_vanilla"}, "not -p"),
])
def test_bad_parameters_get_one_message(values, match):
    with pytest.raises(DHPError, match=match):
        methods.get("decompose_aggregate").config(values)


def test_bad_bridge_input_fails_before_any_judge_call(tmp_path):
    values = write_inputs(tmp_path / "in")
    judge = BridgeJudge()
    with pytest.raises(DHPError, match="not defined for dataset"):
        methods.run("decompose_aggregate", judge=judge, run_dir=str(tmp_path / "run"),
                    **{**values, "dhp_dataset": "summeval", "dhp_perturbations": ["random_ending"]})
    with pytest.raises(DHPError, match="does not run in 'likelihood' mode"):
        methods.run("decompose_aggregate", judge=judge, run_dir=str(tmp_path / "run"), mode="likelihood", **values)
    assert judge.prompts == [] and not (tmp_path / "run").exists()


def _live(run_dir: Path, tmp_path: Path):
    return methods.run("decompose_aggregate", judge=BridgeJudge(), run_dir=str(run_dir),
                       **{**write_inputs(tmp_path / "in"), "dhp_items": 0})


@pytest.mark.parametrize("live_first", [False, True])
def test_recorded_and_live_judges_stack_in_one_run_folder(tmp_path, live_first):
    run_dir = tmp_path / "run"
    if live_first:  # an import writes the verdicts only: the analysis after it is `run --judge recorded`
        _live(run_dir, tmp_path)
        import_judgments("llmbar", FIX_LLMBAR, run_dir)
        methods.run("decompose_aggregate", {"judge": "recorded", "run_dir": str(run_dir)})
    else:
        import_judgments("llmbar", FIX_LLMBAR, run_dir)
        _live(run_dir, tmp_path)
    v = pd.read_parquet(run_dir / "pairwise_verdicts.parquet")
    assert set(zip(v["judge"], v["mode"])) == {("scripted:bridge", "logprobs"), ("ToyJudge", "recorded"),
                                               ("OtherJudge", "recorded")}
    assert len(v) == 2 * (3 + 3 + 3 + 2) + 4 * 3 * 2  # the import's rows and the live run's, none lost
    a = pd.read_csv(run_dir / "pairwise_agreement.csv")
    assert set(a["judge"]) == {"scripted:bridge", "ToyJudge", "OtherJudge"}
    # a recorded judge's cost is unknown: NaN, never 0
    assert a.loc[a["mode"] == "recorded", "calls"].isna().all() and (a.loc[a["mode"] != "recorded", "calls"] > 0).all()
    # a second live run replaces that judge's rows only
    _live(run_dir, tmp_path)
    assert len(pd.read_parquet(run_dir / "pairwise_verdicts.parquet")) == len(v)


def test_judge_recorded_analyzes_the_imported_judges_only(tmp_path, capsys):
    run_dir = tmp_path / "run"
    import_judgments("llmbar", FIX_LLMBAR, run_dir)
    assert cli_main(["run", "--method", "decompose_aggregate", "--judge", "recorded", "--run-dir", str(run_dir)]) == 0
    assert "pairwise_agreement.csv" in capsys.readouterr().out
    a = pd.read_csv(run_dir / "pairwise_agreement.csv")
    assert set(a["judge"]) == {"ToyJudge", "OtherJudge"} and set(a["mode"]) == {"recorded"}
    assert set(a["strategy"]) == {"Swap", "Rating", "Metrics", "Vanilla"}
    assert set(a["source"].str.split("#").str[0]) == {
        "LLMBar/Natural/evaluators/ToyJudge/Swap/result.json", "LLMBar/Natural/evaluators/ToyJudge/Rating/result.json",
        "LLMBar/Natural/evaluators/ToyJudge/Metrics/result.json",
        "Processed/ToySet/evaluators/OtherJudge/Vanilla/result.json"}
    v = pd.read_parquet(run_dir / "pairwise_verdicts.parquet")
    right = (v["verdict"] == v["label"]).groupby([v["judge"], v["strategy"]]).mean()  # LLMBar's correct_average
    got = a.set_index(["judge", "strategy"])["agreement"]
    assert got.reindex(right.index).tolist() == pytest.approx(right.tolist())
    for name in ("pairwise_discernment.csv", "dna_bridge.csv"):  # no bridge was collected: empty, not zeros
        assert pd.read_csv(run_dir / name).empty
    assert not (run_dir / "pairwise_costs.csv").exists()
    card = methods.report_card(run_dir)
    da = card[card["method"] == "decompose_aggregate"]
    assert set(da["judge"]) == {"ToyJudge", "OtherJudge"} and (da["status"] != "not run").all()


def test_judge_recorded_on_an_empty_folder_says_what_to_do(tmp_path):
    with pytest.raises(DHPError, match="holds no judgments"):
        methods.run("decompose_aggregate", {"judge": "recorded", "run_dir": str(tmp_path / "run")})


def test_analyze_reproduces_llmbar_statistics_of_imported_real_verdicts(tmp_path):
    """Two judges' recorded verdicts on LLMBar Natural, imported and analysed by ``run --judge recorded``: every
    strategy's row equals LLMBar evaluate.py's statistics recomputed from the raw result.json files (with the
    import's documented departure R1: a non-integer Rating reply has no verdict), and PaLM2 / Vanilla_NoRules
    equals its published statistics.json (correct_False 77, correct_True 87, average 82.0, both 74, equal 84)."""
    from test_recorded_llmbar import evaluate_py

    run_dir = tmp_path / "run"
    for judge in ("PaLM2", "GPT-4"):
        import_judgments("llmbar", REAL_LLMBAR / "LLMBar" / "Natural" / "evaluators" / judge, run_dir)
    methods.run("decompose_aggregate", {"judge": "recorded", "run_dir": str(run_dir)})
    a = pd.read_csv(run_dir / "pairwise_agreement.csv").set_index(["judge", "strategy"])
    files = sorted((REAL_LLMBAR / "LLMBar" / "Natural" / "evaluators").glob("*/*/result.json"))
    files = [f for f in files if f.parts[-3] in ("PaLM2", "GPT-4")]
    assert len(a) == len(files) > 10 and set(a["subset"]) == {"Natural"}
    for f in files:
        want = evaluate_py(json.loads(f.read_text(encoding="utf-8")), rating_fallback_as_none=True)
        row, n = a.loc[(f.parts[-3], f.parts[-2])], want["n"]
        assert row["n"] == n
        assert row["agreement_order_12"] == pytest.approx(want["correct_False"] / n, abs=1e-12)
        assert row["agreement_order_21"] == pytest.approx(want["correct_True"] / n, abs=1e-12)
        assert row["agreement"] == pytest.approx((want["correct_False"] + want["correct_True"]) / (2 * n), abs=1e-12)
        assert row["agreement_both"] == pytest.approx(want["correct_both"] / n, abs=1e-12)
        assert row["equal_llmbar"] == pytest.approx(want["equal"] / n, abs=1e-12)
        assert math.isnan(row["calls"])
    published = a.loc[("PaLM2", "Vanilla_NoRules")]
    assert published[["agreement_order_12", "agreement_order_21", "agreement", "agreement_both",
                      "equal_llmbar"]].tolist() == pytest.approx([0.77, 0.87, 0.82, 0.74, 0.84])
    assert (run_dir / "figures" / "dna_agreement.png").stat().st_size > 1000
