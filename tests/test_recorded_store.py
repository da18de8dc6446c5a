"""Recorded rows parsed once per input version and reused (dhp.recorded.ParsedStore), and an import that keeps only
the segments a run's own judges scored (keep_segments; ``evaluate``'s leaderboard: recorded_units="judged"): the run
folder's tables are byte-identical to a fresh parse, the live judge's leaderboard rows are those of a full import, the
manifest says what was kept of which files, and ``leaderboard`` on such a folder later still works. Synthetic files in
the mt-metrics-eval layout (no data root needed)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest

import dhp.recorded as rec
from dhp.leaderboard import LeaderboardParams, collect_views, judged_segments, run_leaderboard
from dhp.analysis.leaderboard import leaderboard
from dhp.recorded import import_judgments

SYSTEMS = ["sysA", "sysB", "sysC", "sysD", "refA"]
N_SEG = 40
MINE = "me:judge"
ROW = ["value", "lo", "hi", "n", "rank", "cluster", "status"]


def _write(folder, metrics=None, seed=0):
    """<folder>/zh-en/<metric>-<ref>.seg.score (systems in blocks, segments in order) and
    <folder>/human-scores/zh-en.mqm.seg.score; M3 leaves one output unscored (None) on segment 35."""
    rng = np.random.default_rng(seed)
    human = rng.normal(size=(len(SYSTEMS), N_SEG))
    (folder / "zh-en").mkdir(parents=True, exist_ok=True)
    (folder / "human-scores").mkdir(exist_ok=True)
    (folder / "human-scores" / "zh-en.mqm.seg.score").write_text(
        "".join(f"{s}\t{float(human[i, k])!r}\n" for i, s in enumerate(SYSTEMS) for k in range(N_SEG)))
    for name, noise in (metrics or {"M1-refA": 0.3, "M2-src": 1.0, "M3-refA": 0.5, "M4-refB": 0.7}).items():
        score = human + rng.normal(scale=noise, size=human.shape)
        lines = [f"{s}\t{'None' if (name.startswith('M3') and k == 34 and i == 1) else repr(float(score[i, k]))}\n"
                 for i, s in enumerate(SYSTEMS) for k in range(N_SEG)]
        (folder / "zh-en" / f"{name}.seg.score").write_text("".join(lines))
    return human


def _live(run, human):
    """A live judge's segment rows on segments 1..12 of every system but refA (what human_alignment writes)."""
    rng = np.random.default_rng(7)
    rows = [{"judge": MINE, "mode": "sample", "lp": "zh-en", "reference": "refA", "system": s, "seg_id": k + 1,
             "score": float(human[i, k] + rng.normal(scale=0.6)), "failure": "", "source": ""}
            for i, s in enumerate(SYSTEMS[:-1]) for k in range(12)]
    run.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(run / "segment_scores.parquet", index=False)


def _board(run):
    out = leaderboard(collect_views(run, report=False), n_resamples=60, seed=0, min_coverage=1e-6)
    return out["leaderboard.csv"]


def _mine(board):
    return board[board["judge"] == MINE].sort_values(["view", "scope", "measure"]).reset_index(drop=True)


@pytest.fixture
def files(tmp_path):
    src = tmp_path / "files"
    return src, _write(src)


def test_stored_rows_give_the_bytes_a_fresh_parse_gives(tmp_path, files, monkeypatch):
    root, _ = files
    src = root / "zh-en"  # the metric files; the MQM scores beside them are a companion, found while parsing
    store = tmp_path / "store"
    first = import_judgments("mtme", src, tmp_path / "a", store=store)
    assert [f["path"] for f in first.files if f.get("companion")] == [str(root / "human-scores" / "zh-en.mqm.seg.score")]
    parsed = []
    real = rec._parse
    monkeypatch.setattr(rec, "_parse", lambda *a, **k: parsed.append(1) or real(*a, **k))
    again = import_judgments("mtme", src, tmp_path / "b", store=store)
    assert parsed == []  # read from the store, not parsed
    for t in ("segment_scores.parquet", "segment_human.parquet"):
        assert (tmp_path / "a" / t).read_bytes() == (tmp_path / "b" / t).read_bytes(), t
    assert first.files == again.files and first.rows == again.rows
    # an edited file is another input version: parsed again, its new number imported
    f = src / "M1-refA.seg.score"
    f.write_text("sysA\t123.0\n" + f.read_text().split("\n", 1)[1])  # sysA's segment 1
    import_judgments("mtme", src, tmp_path / "c", store=store)
    assert parsed == [1]
    s = pd.read_parquet(tmp_path / "c" / "segment_scores.parquet")
    assert s[(s["judge"] == "M1") & (s["system"] == "sysA") & (s["seg_id"] == 1)]["score"].tolist() == [123.0]
    # a changed companion (the MQM scores found beside the files) is not reused either
    h = root / "human-scores" / "zh-en.mqm.seg.score"
    h.write_text(h.read_text().replace("sysA\t", "sysA\t1", 1))
    import_judgments("mtme", src, tmp_path / "d", store=store)
    assert parsed == [1, 1]


def test_kept_rows_are_the_judged_segments_and_every_unscored_row(tmp_path, files):
    src, human = files
    full = tmp_path / "full"
    import_judgments("mtme", src, full)
    all_rows = pd.read_parquet(full / "segment_scores.parquet")
    keep = pd.DataFrame({"lp": ["zh-en", "zh-en"], "seg_id": [3, 9]})
    want = all_rows[all_rows["seg_id"].isin([3, 9]) | all_rows["score"].isna()].reset_index(drop=True)
    assert all_rows["score"].isna().sum() == 1 and len(want) == 4 * 5 * 2 + 1
    store = tmp_path / "store"
    for name, st in (("parsed", None), ("first", store), ("stored", store)):
        run = tmp_path / name
        report = import_judgments("mtme", src, run, keep_segments=keep, store=st)
        got = pd.read_parquet(run / "segment_scores.parquet")
        pd.testing.assert_frame_equal(got, want)
        assert report.rows["segment_scores.parquet"] == len(want)
        stage = json.loads((run / "manifest.json").read_text())["stages"]["import_judgments"]["parameters"]
        assert stage["kept"] == {"mtme": {"segment_scores.parquet": {"rows": len(want), "of": len(all_rows),
                                                                     "rule": rec.KEPT_RULE}}}
        f = src / "zh-en" / "M4-refB.seg.score"
        rec_f = stage["files"]["mtme:zh-en/M4-refB.seg.score"]
        assert rec_f["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest() and rec_f["rows"] == {
            "segment_scores.parquet": 5 * N_SEG}  # the file's rows, in full
    # a full import into the same folder afterwards: the folder holds every row, the manifest no longer says "kept"
    import_judgments("mtme", src, tmp_path / "stored")
    stage = json.loads((tmp_path / "stored" / "manifest.json").read_text())["stages"]["import_judgments"]
    assert "kept" not in stage["parameters"]
    assert len(pd.read_parquet(tmp_path / "stored" / "segment_scores.parquet")) == len(all_rows)


def test_the_live_judges_rows_equal_a_full_imports_and_leaderboard_reruns_on_the_kept_folder(tmp_path, files):
    src, human = files
    full, kept = tmp_path / "full", tmp_path / "kept"
    _live(full, human)
    _live(kept, human)
    assert judged_segments(kept)["seg_id"].tolist() == list(range(1, 13))
    import_judgments("mtme", src, full)
    import_judgments("mtme", src, kept, keep_segments=judged_segments(kept), store=tmp_path / "store")
    a, b = _board(full), _board(kept)
    mine_a, mine_b = _mine(a), _mine(b)
    assert len(mine_a) == 3 and set(mine_a["view"]) == {"segment", "system"}  # acc*_eq, tau_b, system accuracy
    pd.testing.assert_frame_equal(mine_a[["view", "scope", "measure", *ROW]], mine_b[["view", "scope", "measure", *ROW]])
    # 4 metrics x 5 systems x 12 segments + M3's unscored output + the live judge's 48 (of 4 x 5 x 40 + 48)
    assert len(pd.read_parquet(kept / "segment_scores.parquet")) == 4 * 5 * 12 + 1 + 48
    assert len(pd.read_parquet(full / "segment_scores.parquet")) == 4 * 5 * N_SEG + 48
    # M3 left segment 35 unscored: kept, so M3 still stands in its own view, not beside the live judge
    main = b[(b["scope"] == "WMT22 zh-en vs MQM") & (b["measure"] == "tau_b")]
    assert "M3-refA" not in set(main["judge"]) and MINE in set(main["judge"])
    # leaderboard on the kept folder later (nothing imported): works, the live judge's rows the same
    run_leaderboard(LeaderboardParams(run_dir=str(kept), recorded=[], n_resamples=60, min_coverage=1e-6,
                                      views_cache=""))
    again = _mine(pd.read_csv(kept / "leaderboard.csv"))
    for c in ("value", "lo", "hi", "n", "rank", "cluster"):
        np.testing.assert_allclose(again[c].to_numpy(float), mine_b[c].to_numpy(float), rtol=0, atol=1e-9)  # leaderboard.csv: 10 decimals
    assert again["status"].tolist() == mine_b["status"].tolist()


def test_a_key_twice_across_files_is_refused_when_rows_are_cut_too(tmp_path, files):
    """Cut rows are checked for duplicate keys over every file's rows (hashes), not only the kept ones: the same
    metric file in two folders stops the import, naming both, and nothing is written or stored."""
    root, _ = files
    twin = root / "zh-en" / "again"
    twin.mkdir()
    (twin / "M1-refA.seg.score").write_text((root / "zh-en" / "M1-refA.seg.score").read_text())
    keep = pd.DataFrame({"lp": ["zh-en"], "seg_id": [3]})
    for store in (None, tmp_path / "store"):
        with pytest.raises(rec.DHPError, match=r"same key .*M1-refA.seg.score#sha256=.* and zh-en/again/M1-refA"):
            import_judgments("mtme", root, tmp_path / "run", keep_segments=keep, store=store)
        assert not (tmp_path / "run" / "segment_scores.parquet").exists()
    assert not any((tmp_path / "store").iterdir())  # no entry, no temporary folder left
