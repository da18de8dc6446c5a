"""The WMT22 zh-en metric submissions (the data root's wmt22/metric-scores_zh-en/, 52 mt-metrics-eval
score files) imported as segment_scores.parquet: every number of every file round-trips exactly, and the
segment ids join the MQM human scores of dhp.datasets.wmt22_human on (system, seg_id)."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from dhp.recorded import import_judgments
from conftest import DATA

WMT = DATA / "wmt22"
FOLDER = WMT / "metric-scores_zh-en"


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    run = tmp_path_factory.mktemp("mtme_recorded")
    t0 = time.perf_counter()
    report = import_judgments("mtme", FOLDER, run)
    print(f"\nimported {len(report.files)} files, {report.rows['segment_scores.parquet']:,} rows in "
          f"{time.perf_counter() - t0:.1f} s")
    return run, report, pd.read_parquet(run / "segment_scores.parquet")


def test_every_score_round_trips_exactly(imported):
    run, report, s = imported
    files = sorted(FOLDER.glob("*.seg.score"))
    scored = [f for f in report.files if not f["path"].endswith(".mqm.seg.score")]
    assert len(scored) == len(files) == 52
    assert all(f["upstream"].startswith("github.com/florethsong/mtme-zh-mwe@78ea1631") for f in scored)
    # the MQM scores beside them come too (mt-metrics-eval layout), so the segment view can be built
    assert [f["rows"] for f in report.files if f not in scored] == [{"segment_human.parquet": 30_000}]
    by_file = {src.split("#")[0]: g for src, g in s.groupby("source", sort=False)}
    total = 0
    for f in files:
        got = by_file[f.name]
        metric, ref = f.name[: -len(".seg.score")].rsplit("-", 1)
        assert got["judge"].unique().tolist() == [metric] and got["reference"].unique().tolist() == [ref], f.name
        lines = [ln.split("\t") for ln in f.read_text(encoding="utf-8").splitlines()]
        system = np.array([x[0] for x in lines])
        score = np.array([np.nan if x[1] == "None" else float(x[1]) for x in lines])
        seg = pd.Series(system).groupby(system).cumcount().to_numpy() + 1  # each system's own line count
        o = np.lexsort((seg, system))  # the table is sorted by its key: system, then seg_id
        assert (got["system"].to_numpy(dtype=str) == system[o]).all(), f.name
        assert (got["seg_id"].to_numpy() == seg[o]).all(), f.name
        # exact: the same float64 (NaN where the file says None), not approximately
        assert np.array_equal(got["score"].to_numpy(), score[o], equal_nan=True), f.name
        total += len(lines)
    assert total == len(s)
    assert set(s["lp"]) == {"zh-en"} and set(s["mode"]) == {"recorded"}


def test_segment_ids_join_the_mqm_human_scores(imported):
    from dhp.datasets.wmt22_human import load_mqm_zh_en

    mqm = load_mqm_zh_en()
    s = imported[2]
    comet = s[(s["judge"] == "COMET-22") & (s["reference"] == "refA")]
    joined = mqm.merge(comet, on=["system", "seg_id"], how="inner")
    systems = set(mqm["system"]) & set(comet["system"])
    assert len(joined) == int(mqm["system"].isin(systems).sum()) > 10_000
    # the join is right, not just complete: COMET-22 tracks MQM far better on the same segment than on
    # its neighbour (measured: Kendall tau 0.42 aligned, 0.15 shifted by one segment either way)
    tau = joined[["mqm", "score"]].corr(method="kendall").iloc[0, 1]
    for shift in (1, -1):
        shifted = mqm.assign(seg_id=mqm["seg_id"] + shift).merge(comet, on=["system", "seg_id"])
        assert tau > 2 * abs(shifted[["mqm", "score"]].corr(method="kendall").iloc[0, 1])
