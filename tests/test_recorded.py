"""Recorded judgments (dhp.recorded) on small synthetic fixtures (tests/fixtures/recorded/): how LLMBar
result.json files and mt-metrics-eval score files become table rows, bring-your-own files and each of their
errors, and the import's guarantees (idempotent bytes, upsert by key, nothing written on an error)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from dhp.cli import main as cli_main
from dhp.errors import DHPError
from dhp.io import write_parquet
from dhp.judging.strategies import VERDICT_COLUMNS
from dhp.recorded import import_judgments

FIX = Path(__file__).parent / "fixtures" / "recorded"
LLMBAR = FIX / "llmbar" / "Dataset"
MTME = FIX / "mtme" / "metric-scores"


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def verdicts_of(run: Path) -> pd.DataFrame:
    return pd.read_parquet(run / "pairwise_verdicts.parquet")


def row(v: pd.DataFrame, strategy: str, item: str, order: str) -> pd.Series:
    got = v[(v["strategy"] == strategy) & (v["item_id"] == item) & (v["order"] == order)]
    assert len(got) == 1
    return got.iloc[0]


# ---------------------------------------------------------------------------------------------- LLMBar

@pytest.fixture()
def llmbar_run(tmp_path):
    run = tmp_path / "run"
    report = import_judgments("llmbar", LLMBAR, run)
    return run, report


def test_llmbar_rows_keep_the_recorded_verdicts_in_the_original_numbering(llmbar_run):
    run, report = llmbar_run
    v = verdicts_of(run)
    assert list(v.columns) == ["judge", "mode", *VERDICT_COLUMNS, "source"]
    assert len(v) == 2 * (3 + 3 + 3 + 2) and set(v["mode"]) == {"recorded"}
    assert set(v["judge"]) == {"ToyJudge", "OtherJudge"}
    assert set(v["subset"]) == {"Natural", "Processed_ToySet"}  # dhp.datasets.llmbar's names
    # Metrics: the generated questions before the verdict dict are skipped
    assert [row(v, "Metrics", "Natural-0", o)["verdict"] for o in ("12", "21")] == ["1", "1"]
    assert [row(v, "Metrics", "Natural-2", o)["verdict"] for o in ("12", "21")] == ["2", "1"]
    assert row(v, "Metrics", "Natural-2", "12")["label"] == "1"
    null = row(v, "Metrics", "Natural-1", "12")
    assert pd.isna(null["verdict"]) and null["failure"].startswith("no verdict")
    assert "I cannot decide" in null["failure"] and row(v, "Metrics", "Natural-1", "21")["verdict"] == "2"
    # Swap asked again after disagreeing orders: the last round is the verdict
    assert [row(v, "Swap", "Natural-0", o)["verdict"] for o in ("12", "21")] == ["2", "2"]
    assert [row(v, "Swap", "Natural-1", o)["verdict"] for o in ("12", "21")] == ["1", "1"]
    assert all(pd.isna(row(v, "Swap", "Natural-2", o)["verdict"]) for o in ("12", "21"))
    # Processed sets: ids <subset>-<index>, label from the file
    assert row(v, "Vanilla", "Processed_ToySet-1", "21")["verdict"] == "1"
    assert row(v, "Vanilla", "Processed_ToySet-1", "21")["label"] == "1"
    # every row names its file (upstream path without Dataset/) and that file's sha256
    f = LLMBAR / "LLMBar/Natural/evaluators/ToyJudge/Swap/result.json"
    assert row(v, "Swap", "Natural-0", "12")["source"] == f"LLMBar/Natural/evaluators/ToyJudge/Swap/result.json#sha256={sha(f)}"
    rated = v["strategy"] == "Rating"  # only Rating rows carry scores (one empty reply: f1 NaN)
    assert v.loc[~rated, ["f1", "f2"]].isna().all().all() and v.loc[rated, "f2"].notna().all()
    assert report.rows == {"pairwise_verdicts.parquet": 22}


def test_llmbar_rating_scores_are_kept_and_a_fallback_verdict_is_not(llmbar_run):
    v = verdicts_of(llmbar_run[0])
    r0 = row(v, "Rating", "Natural-0", "12")
    assert (r0["f1"], r0["f2"], r0["verdict"]) == (8.0, 6.0, "1")
    # a tie: evaluate.py's rule gives "2" in order 12 and "1" in order 21, kept as recorded
    assert [row(v, "Rating", "Natural-1", o)["verdict"] for o in ("12", "21")] == ["2", "1"]
    assert row(v, "Rating", "Natural-1", "21")["f1"] == row(v, "Rating", "Natural-1", "21")["f2"] == 5.0
    # an empty reply: upstream wrote fallback winners "1"/"2"; here no verdict, NaN score, and why
    for o in ("12", "21"):
        r = row(v, "Rating", "Natural-2", o)
        assert pd.isna(r["verdict"]) and math.isnan(r["f1"]) and r["f2"] == 7.0
        assert "score_1 not an integer" in r["failure"] and "fallback" in r["failure"]


def test_import_twice_gives_the_same_bytes_and_records_each_file(tmp_path):
    run = tmp_path / "run"
    import_judgments("llmbar", LLMBAR, run)
    first = snapshot(run)
    import_judgments("llmbar", LLMBAR, run)
    assert snapshot(run) == first
    files = json.loads((run / "manifest.json").read_text())["stages"]["import_judgments"]["parameters"]["files"]
    f = LLMBAR / "LLMBar/Natural/evaluators/ToyJudge/Rating/result.json"
    rec = files["llmbar:LLMBar/Natural/evaluators/ToyJudge/Rating/result.json"]
    assert (rec["sha256"], rec["bytes"], rec["upstream"]) == (sha(f), f.stat().st_size, None)
    assert len(files) == 4
    # one file at a time, in either order, ends in the same table
    other = tmp_path / "other"
    for sub in ("Processed", "LLMBar/Natural/evaluators/ToyJudge/Swap", "LLMBar"):
        import_judgments("llmbar", LLMBAR / sub, other)
    assert (other / "pairwise_verdicts.parquet").read_bytes() == first["pairwise_verdicts.parquet"]


def test_llmbar_file_outside_the_layout_is_refused(tmp_path):
    bad = tmp_path / "copy" / "evaluators" / "J" / "Vanilla" / "result.json"
    bad.parent.mkdir(parents=True)
    bad.write_bytes((LLMBAR / "Processed/ToySet/evaluators/OtherJudge/Vanilla/result.json").read_bytes())
    with pytest.raises(DHPError, match="Cannot tell which LLMBar data set"):
        import_judgments("llmbar", bad, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_size_limit_is_checked_before_reading_and_nothing_is_written(tmp_path):
    run = tmp_path / "run"
    import_judgments("mtme", MTME, run)
    before = snapshot(run)
    with pytest.raises(DHPError, match="over the 100-byte limit"):
        import_judgments("llmbar", LLMBAR, run, max_bytes=100)
    assert snapshot(run) == before


# ---------------------------------------------------------------------------------------------- mt-metrics-eval

def test_mtme_rows_round_trip_the_numbers_and_count_segments_per_system(tmp_path):
    run = tmp_path / "run"
    import_judgments("mtme", MTME, run)
    s = pd.read_parquet(run / "segment_scores.parquet")
    bleu = s[s["judge"] == "Toy-BLEU"].set_index(["system", "seg_id"])
    assert set(bleu["reference"]) == {"refA"} and set(s["lp"]) == {"zh-en"} and set(s["mode"]) == {"recorded"}
    assert bleu.loc[("sysA", 2), "score"] == float("1e-3") and bleu.loc[("sysA", 3), "score"] == -2.25
    assert bleu.loc[("sysB", 1), "score"] == 12.0 and math.isnan(bleu.loc[("sysB", 2), "score"])
    assert bleu.loc[("sysB", 2), "failure"] == "unscored (None in the file)" and bleu.loc[("sysB", 3), "failure"] == ""
    qe = s[s["judge"] == "ToyQE"].set_index(["system", "seg_id"])["score"]
    # systems interleaved in the file: each system's own line count is its segment id
    assert qe.to_dict() == {("sysA", 1): 0.7, ("sysA", 2): 0.9, ("sysB", 1): 0.2, ("sysB", 2): 0.4}
    assert set(s.loc[s["judge"] == "ToyQE", "reference"]) == {"src"}
    f = MTME / "zh-en" / "ToyQE-src.seg.score"
    assert set(s.loc[s["judge"] == "ToyQE", "source"]) == {f"zh-en/ToyQE-src.seg.score#sha256={sha(f)}"}


@pytest.mark.parametrize("name, text, lp, message", [
    ("BLEU.seg.score", "s\t1\n", "zh-en", "cannot tell the metric and its reference"),
    ("BLEU-refA.seg.score", "s 1\n", "zh-en", "line 1 is not 'SYSTEM<TAB>SCORE'"),
    ("BLEU-refA.seg.score", "s\t1\ns\tbig\n", "zh-en", "line 2: score 'big' is not a finite number"),
    ("BLEU-refA.seg.score", "s\t1\ns\t2\nt\t1\n", "zh-en", "different numbers of segments"),
    ("BLEU-refA.seg.score", "s\t1\n", None, "Cannot tell the language pair"),
])
def test_mtme_bad_files_are_refused_with_the_line(tmp_path, name, text, lp, message):
    (tmp_path / "scores").mkdir()
    (tmp_path / "scores" / name).write_text(text)
    with pytest.raises(DHPError, match=message):
        import_judgments("mtme", tmp_path / "scores" / name, tmp_path / "run", lp=lp)
    assert not (tmp_path / "run").exists()


def test_mtme_language_pair_can_be_given(tmp_path):
    (tmp_path / "scores").mkdir()
    (tmp_path / "scores" / "BLEU-refB.seg.score").write_text("s\t1.5\n")
    import_judgments("mtme", tmp_path / "scores", tmp_path / "run", lp="de-en")
    s = pd.read_parquet(tmp_path / "run" / "segment_scores.parquet")
    assert s[["judge", "reference", "lp", "seg_id", "score"]].values.tolist() == [["BLEU", "refB", "de-en", 1, 1.5]]


# ---------------------------------------------------------------------------------------------- bring your own

@pytest.fixture()
def run(tmp_path):
    """A run folder whose dataset.parquet holds two toy summarisation items."""
    run = tmp_path / "run"
    ds = pd.DataFrame({"dataset": ["toy", "toy"], "task": ["summarization"] * 2, "item_id": ["a1", "a2"],
                       "source": ["s1", "s2"], "reference": ["r1", "r2"]})
    write_parquet(ds, run / "dataset.parquet")
    return run


GOOD_CSV = ("item_id,judge,metric,score,failure\n"
            "a1,my-judge,coherence,4,\n"
            "a2,my-judge,coherence,,refused to answer\n"
            "a1,my-judge,fluency,2.5,\n")


def test_byo_scores_import_into_the_scores_table(run, tmp_path):
    f = tmp_path / "mine.csv"
    f.write_text(GOOD_CSV)
    import_judgments("table", f, run)
    s = pd.read_parquet(run / "scores.parquet").set_index(["item_id", "metric"])
    assert s.loc[("a1", "coherence"), "score"] == 4.0 and s.loc[("a1", "fluency"), "score"] == 2.5
    assert math.isnan(s.loc[("a2", "coherence"), "score"]) and s.loc[("a2", "coherence"), "failure"] == "refused to answer"
    assert s["n_valid"].tolist() == [1, 1, 0] and s["n_failed"].tolist() == [0, 0, 1]
    assert set(s["dataset"]) == {"toy"} and set(s["task"]) == {"summarization"}  # from dataset.parquet
    assert set(s["perturbation"]) == {"original"} and set(s["mode"]) == {"recorded"}
    assert set(s["source"]) == {f"mine.csv#sha256={sha(f)}"}
    # an edited file replaces rows by key: one row per key, the new score
    f.write_text(GOOD_CSV.replace("a1,my-judge,coherence,4,", "a1,my-judge,coherence,5,"))
    import_judgments("table", f, run)
    s = pd.read_parquet(run / "scores.parquet")
    assert len(s) == 3 and s.loc[(s["item_id"] == "a1") & (s["metric"] == "coherence"), "score"].tolist() == [5.0]


def test_byo_jsonl_verdicts_import_with_labels_from_the_dataset(tmp_path):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("item_id,instruction,output_1,output_2,label\np1,Say hi,hi,bye,1\np2,Count,1 2,2 1,2\n")
    f = tmp_path / "verdicts.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in [
        {"item_id": "p1", "judge": "j", "strategy": "direct", "order": "12", "verdict": "1"},
        {"item_id": "p1", "judge": "j", "strategy": "direct", "order": "21", "verdict": "2", "f1": 3, "f2": 4},
        {"item_id": "p2", "judge": "j", "strategy": "direct", "order": "12", "verdict": None, "failure": "timeout"},
    ]) + "\n")
    run = tmp_path / "run"
    import_judgments("table", f, run, dataset=pairs)
    v = verdicts_of(run).set_index(["item_id", "order"])
    assert v.loc[("p1", "12"), "label"] == "1" and v.loc[("p2", "12"), "label"] == "2"
    assert v.loc[("p1", "21"), "verdict"] == "2" and (v.loc[("p1", "21"), "f1"], v.loc[("p1", "21"), "f2"]) == (3.0, 4.0)
    assert pd.isna(v.loc[("p2", "12"), "verdict"]) and v.loc[("p2", "12"), "failure"] == "timeout"
    assert set(v["subset"]) == {"mine"}


POINTWISE_ERRORS = [
    ("missing column", "item_id,judge,score\na1,j,4\n", r"lacks column\(s\) \['metric'\]"),
    ("unknown item", "item_id,judge,metric,score\nzz,j,coherence,4\n", r"row 1 \(line 2 of the file\): item_id 'zz'"),
    ("duplicate key", "item_id,judge,metric,score\na1,j,coherence,4\na1,j,coherence,3\n", "row 2 .* repeats row 1"),
    ("off scale", "item_id,judge,metric,score\na1,j,coherence,4\na2,j,coherence,7\n", "row 2 .*score 7 is off the 1–5 scale"),
    ("not a number", "item_id,judge,metric,score\na1,j,coherence,four\n", "score 'four' is not a number"),
    ("empty score", "item_id,judge,metric,score\na1,j,coherence,\n", "score is empty and failure does not say why"),
    ("unknown metric", "item_id,judge,metric,score\na1,j,tastiness,4\n", "metric 'tastiness' is not one of"),
    ("task contradicts", "item_id,judge,metric,score,task\na1,j,coherence,4,translation\n", "task 'translation' contradicts"),
    ("score and verdict", "item_id,judge,metric,score,verdict\na1,j,coherence,4,1\n", "both a score and a verdict column"),
    ("empty judge", "item_id,judge,metric,score\na1,,coherence,4\n", "row 1 .*: judge is empty"),
    ("ragged row", "item_id,judge,metric,score\na1,j,coherence,4,9\n", "row 1 .* has 5 fields"),
    ("perturbation without severity", "item_id,judge,metric,score,perturbation\na1,j,coherence,4,char_typo\n",
     "needs its severity and level"),
]


@pytest.mark.parametrize("case, text, message", POINTWISE_ERRORS, ids=[c[0] for c in POINTWISE_ERRORS])
def test_byo_errors_name_file_row_and_fix_and_change_nothing(run, tmp_path, case, text, message):
    good = tmp_path / "good.csv"
    good.write_text(GOOD_CSV)
    import_judgments("table", good, run)
    before = snapshot(run)
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    with pytest.raises(DHPError, match=message) as e:
        import_judgments("table", bad, run)
    assert str(bad) in str(e.value) and "Fix:" in str(e.value)
    assert snapshot(run) == before


@pytest.mark.parametrize("line, message", [
    ('{"item_id": "p9", "judge": "j", "strategy": "s", "order": "12", "verdict": "1"}', "item_id 'p9' is not in"),
    ('{"item_id": "p1", "judge": "j", "strategy": "s", "order": "1", "verdict": "1"}', "order '1' is not '12' or '21'"),
    ('{"item_id": "p1", "judge": "j", "strategy": "s", "order": "12", "verdict": "A"}', "verdict 'A' is not 1, 2 or tie"),
    ('{"item_id": "p1", "judge": "j", "strategy": "s", "order": "12", "verdict": "1", "label": "2"}',
     "label '2' contradicts the dataset table's '1'"),
    ('{"item_id": "p1", "judge": "j", "strategy": "s", "order": "21", "verdict": "1"}\n'
     '{"item_id": "p1", "judge": "j", "strategy": "s", "order": "12"}', r"line 2 lacks \['verdict'\]"),
    ('{"item_id": "p1", "judge": "j", "strategy": "s", "order": "12", "verdict": "1"', "line 1 is not valid JSON"),
    ('{"item_id": "p1", "judge": "j", "strategy": "s", "order": "12", "verdict": "1", "f1": "high"}',
     "f1 'high' is not a number"),
])
def test_byo_verdict_errors(tmp_path, line, message):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("item_id,instruction,output_1,output_2,label\np1,Say hi,hi,bye,1\n")
    run = tmp_path / "run"
    run.mkdir()
    f = tmp_path / "v.jsonl"
    f.write_text(line + "\n")
    with pytest.raises(DHPError, match=message):
        import_judgments("table", f, run, dataset=pairs)
    assert snapshot(run) == {}


def test_byo_duplicate_across_files_and_non_utf8_are_refused(run, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "a.csv").write_text("item_id,judge,metric,score\na1,j,coherence,4\n")
    (folder / "b.csv").write_text("item_id,judge,metric,score\na1,j,coherence,3\n")
    before = snapshot(run)
    with pytest.raises(DHPError, match="same key .* a.csv#sha256=.* and b.csv#sha256="):
        import_judgments("table", folder, run)
    (folder / "b.csv").write_bytes(b"item_id,judge,metric,score\na2,j,coh\xe9rence,4\n")
    with pytest.raises(DHPError, match="line 2 contains bytes that are not UTF-8"):
        import_judgments("table", folder, run)
    assert snapshot(run) == before


def test_byo_scores_need_a_dataset_to_check_ids(tmp_path):
    f = tmp_path / "s.csv"
    f.write_text("item_id,judge,metric,score\na1,j,coherence,4\n")
    with pytest.raises(DHPError, match=r"Cannot check the item ids of .*s\.csv: .*empty_run/dataset\.parquet does not exist"):
        import_judgments("table", f, tmp_path / "empty_run")


def test_scores_are_checked_against_the_runs_perturbations(run, tmp_path):
    write_parquet(pd.DataFrame({"item_id": ["a1", "a1"], "perturbation": ["original", "char_typo"],
                                "severity": ["none", "minor"], "level": ["none", "character"]}),
                  run / "perturbed.parquet")
    f = tmp_path / "s.csv"
    f.write_text("item_id,judge,metric,score,perturbation,severity,level\n"
                 "a1,j,coherence,4,original,,\na1,j,coherence,3,char_typo,minor,character\n")
    import_judgments("table", f, run)
    assert len(pd.read_parquet(run / "scores.parquet")) == 2
    f.write_text("item_id,judge,metric,score,perturbation,severity,level\na1,j,coherence,3,char_typo,major,character\n")
    with pytest.raises(DHPError, match=r"\('a1', 'char_typo', 'major', 'character'\) is not a row of"):
        import_judgments("table", f, run)


def test_a_live_verdict_table_without_judges_is_not_merged_into(tmp_path):
    run = tmp_path / "run"
    live = pd.DataFrame([{c: "" for c in VERDICT_COLUMNS}])
    write_parquet(live, run / "pairwise_verdicts.parquet")
    before = snapshot(run)
    with pytest.raises(DHPError, match="lacks the key column"):
        import_judgments("llmbar", LLMBAR, run)
    assert snapshot(run) == before


def test_cli_imports_and_reports_errors(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli_main(["import-judgments", "mtme", str(MTME), "--run-dir", str(run)]) == 0
    assert "imported 2 mtme file(s)" in capsys.readouterr().out
    assert len(pd.read_parquet(run / "segment_scores.parquet")) == 10
    assert cli_main(["import-judgments", "llmbar", str(tmp_path / "nothing"), "--run-dir", str(run)]) == 2
    assert "no such file or folder" in capsys.readouterr().err
