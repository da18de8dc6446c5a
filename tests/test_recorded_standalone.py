"""A recorded source stands on its own: importing it into a fresh run folder brings the human scores its views need,
so ``leaderboard`` alone ranks its judges; a view that cannot be built is named with its reason (printed, and as a
row of leaderboard.csv)."""

from __future__ import annotations

import shutil

import pandas as pd

from dhp.recorded import import_judgments
from conftest import DATA

WMT = DATA / "wmt22"
FOLDER = WMT / "metric-scores_zh-en"
METRICS = ("COMET-22-refA.seg.score", "BLEU-refA.seg.score", "chrF-refA.seg.score", "BERTScore-refA.seg.score")


def _mtme_layout(tmp_path, with_mqm: bool):
    """A copy of four metrics in the mt-metrics-eval layout (the MQM scores beside them when asked)."""
    root = tmp_path / "wmt22"
    (root / "metric-scores_zh-en").mkdir(parents=True)
    for name in METRICS:
        shutil.copy(FOLDER / name, root / "metric-scores_zh-en" / name)
    if with_mqm:
        (root / "mqm_zh-en").mkdir()
        shutil.copy(WMT / "mqm_zh-en" / "zh-en.mqm.seg.score", root / "mqm_zh-en" / "zh-en.mqm.seg.score")
    return root / "metric-scores_zh-en"


def test_mtme_import_then_leaderboard_alone_ranks_the_metrics(tmp_path):
    from dhp.leaderboard import run_leaderboard

    run = tmp_path / "R"
    report = import_judgments("mtme", _mtme_layout(tmp_path, True), run)
    assert report.table_rows["segment_human.parquet"] > 10_000
    human = pd.read_parquet(run / "segment_human.parquet")
    assert (human["mqm"] <= 0).all() and set(human["lp"]) == {"zh-en"}
    run_leaderboard(run_dir=str(run), recorded=[], n_resamples=20, early_stop=True)
    board = pd.read_csv(run / "leaderboard.csv")
    seg = board[(board["view"] == "segment") & (board["status"] == "ok")]
    assert set(seg["measure"]) == {"acc_eq_calibrated", "tau_b"}
    for measure, g in seg.groupby("measure"):
        assert set(g["judge"]) == {"COMET-22-refA", "BLEU-refA", "chrF-refA", "BERTScore-refA"}
        # COMET-22 tracks MQM far better than BLEU (WMT22 findings): ranked above it on both measures
        rank = g.set_index("judge")["rank"]
        assert rank["COMET-22-refA"] < rank["BLEU-refA"], measure
    assert (run / "figures" / "leaderboard_segment.png").is_file()


def test_a_view_without_its_human_scores_is_reported_with_the_reason(tmp_path, capsys):
    from dhp.leaderboard import collect_views
    from dhp.analysis.leaderboard import leaderboard

    run = tmp_path / "R"
    import_judgments("mtme", _mtme_layout(tmp_path, False), run)
    assert not (run / "segment_human.parquet").exists()
    views = collect_views(run)
    assert "segment_human.parquet" in capsys.readouterr().out
    board = leaderboard(views, n_resamples=10)["leaderboard.csv"]
    row = board[board["view"] == "segment"]
    assert len(row) == 1 and row["judge"].iloc[0] == "" and row["status"].iloc[0].startswith("not built:")
    assert "mqm.seg.score" in row["status"].iloc[0]


def test_hanna_scores_without_human_ratings_are_reported(tmp_path):
    from dhp.analysis.recorded_views import item_views

    scores = pd.DataFrame({"judge": ["a", "b"], "mode": "recorded", "dataset": "hanna", "criterion": "",
                           "subset": "", "split": "", "system": "GPT", "item": ["0", "1"], "score": [1.0, 2.0],
                           "failure": "", "source": ""})
    views, missing = item_views(scores, None)
    assert views == [] and "no hanna human scores" in missing[0]["status"]
