"""Views of recorded judges only are computed once and reused (dhp.analysis.leaderboard.view_key, stored=; on disk:
dhp.leaderboard.StoredViews), a live judge's views always fresh; a view on too few units says so in its status."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dhp.analysis.leaderboard as lbmod
from dhp.analysis.leaderboard import View, leaderboard, view_key
from dhp.analysis.system_level import system_accuracy_view
from dhp.leaderboard import StoredViews


def _rows(n_seg: int, judges, seed: int = 1, mode: str = "recorded") -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    systems = list("ABCDE")
    human = rng.normal(size=(n_seg, len(systems)))
    rows = []
    for j, noise in judges:
        score = human + rng.normal(scale=noise, size=human.shape)
        rows += [{"judge": j, "mode": mode, "unit": s, "system": systems[k], "score": score[s, k],
                  "human": human[s, k]} for s in range(n_seg) for k in range(len(systems))]
    return pd.DataFrame(rows)


def _views():
    recorded = _rows(40, [("good", 0.3), ("fair", 1.0), ("poor", 3.0)])
    live = pd.concat([recorded, _rows(40, [("mine", 0.8)], mode="live")], ignore_index=True)
    return [View("segment", "recorded only", "acc_eq_calibrated", "segment", recorded),
            View("segment", "with mine", "tau_b", "segment", live)]


def _counting(monkeypatch):
    calls = []
    real = lbmod._one_view

    def one_view(v, *a, **k):
        calls.append(v.scope)
        return real(v, *a, **k)

    monkeypatch.setattr(lbmod, "_one_view", one_view)
    return calls


def test_a_recorded_only_view_is_computed_once_and_reused_with_equal_numbers(monkeypatch, tmp_path):
    views = _views()
    fresh = leaderboard(views, n_resamples=100)
    calls = _counting(monkeypatch)
    store = StoredViews(tmp_path)
    first = leaderboard(views, n_resamples=100, stored=store)
    assert calls == ["recorded only", "with mine"] and len(store) == 1  # the live judge's view is not stored
    again = leaderboard(views, n_resamples=100, stored=StoredViews(tmp_path))
    assert calls == ["recorded only", "with mine", "with mine"]  # reused: only the live judge's view recomputed
    for name in ("leaderboard.csv", "leaderboard_pairs.csv"):
        pd.testing.assert_frame_equal(first[name], fresh[name])
        pd.testing.assert_frame_equal(again[name], fresh[name])
        assert again[name].to_csv(index=False) == fresh[name].to_csv(index=False)


def test_the_key_changes_with_the_inputs_and_the_settings():
    v = _views()[0]
    key = view_key(v, k=100, seed=0)
    assert key == view_key(View(v.view, v.scope, v.measure, v.kind, v.data.copy()), k=100, seed=0)
    changed = v.data.copy()
    changed.loc[7, "score"] += 1e-9  # one score in its last digits
    assert view_key(View(v.view, v.scope, v.measure, v.kind, changed), k=100, seed=0) != key
    assert view_key(v, k=100, seed=1) != key and view_key(v, k=200, seed=0) != key
    assert view_key(_views()[1], k=100, seed=0) is None  # a live judge: never stored


def test_a_failed_write_leaves_no_entry_and_no_partial_file(monkeypatch, tmp_path):
    board = pd.DataFrame({"judge": ["a"], "value": [0.5]})
    pairs = pd.DataFrame({"judge_a": ["a"], "p": [0.1]})
    store = StoredViews(tmp_path)

    def broken(self, path, **kw):
        with open(path, "wb") as f:
            f.write(b"PAR1 half")  # a partial file, then the failure
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", broken)
    store["k1"] = (board, pairs)
    assert "k1" not in store and [p for p in tmp_path.rglob("*") if p.is_file()] == []
    monkeypatch.undo()
    store["k1"] = (board, pairs)
    got = store["k1"]
    pd.testing.assert_frame_equal(got[0], board) and pd.testing.assert_frame_equal(got[1], pairs)
    store._paths("k1")[0].write_bytes(b"garbage")  # unreadable: counts as absent
    with pytest.raises(KeyError):
        store["k1"]


def test_a_view_on_too_few_units_is_not_ranked_ok():
    few = _rows(6, [("good", 0.3), ("fair", 1.0)])
    many = _rows(120, [("good", 0.3), ("fair", 1.0)])
    for rows, n in ((few, 6), (many, 120)):
        seg_board = leaderboard([View("segment", "s", "tau_b", "segment", rows)], n_resamples=50)["leaderboard.csv"]
        sysview = system_accuracy_view(rows, "toy")
        sys_board = leaderboard([sysview], n_resamples=50)["leaderboard.csv"]
        assert (seg_board["n"] == n).all() and (sys_board["n"] == n).all()
        if n == 6:
            assert seg_board["status"].str.startswith("too few units for a ranking: 6 items (< 30)").all()
            assert sys_board["status"].str.startswith("too few units for a ranking: 6 segments (< 100)").all()
            assert sys_board["rank"].notna().all()  # still placed, as indicative
        else:
            assert (seg_board["status"] == "ok").all() and (sys_board["status"] == "ok").all()


def test_a_stored_result_is_not_reused_by_other_statistics_code(monkeypatch, tmp_path):
    """The store keeps each version of the statistics code's results apart (dhp.leaderboard.code_digest): an edit of
    dhp/stats that forgot to raise STATS_VERSION never reads an older result. Control: the same digest reads it."""
    import dhp.leaderboard as lb

    store = StoredViews(tmp_path)
    store["k1"] = (pd.DataFrame({"judge": ["a"], "value": [0.5]}), pd.DataFrame({"judge_a": ["a"], "p": [0.1]}))
    assert "k1" in store and list(store) == ["k1"]
    monkeypatch.setattr(lb, "code_digest", lambda: "0" * 64)
    assert "k1" not in store and list(store) == []
    monkeypatch.undo()
    assert "k1" in store


def test_large_views_computed_side_by_side_in_worker_processes_give_the_same_tables(monkeypatch):
    # every view "heavy": the segment and statistic views go to forked worker processes (two cores or more), the
    # mean view stays here;
    # the tables must equal the one-process run's exactly, in the same order, and the stored mapping gets them too
    views = _views() + [View("segment", "third", "tau_b", "segment", _rows(30, [("a", 0.5), ("b", 2.0)], seed=3)),
                        View("toy", "s", "m", "mean", pd.DataFrame(
                            [{"judge": j, "mode": "recorded", "unit": u, "value": float((u + i) % 3 == 0)}
                             for i, j in enumerate("xy") for u in range(20)])),
                        View("toy", "s", "mean_x", "statistic", pd.DataFrame(
                            [{"judge": j, "mode": "recorded", "unit": u, "x": float((u * (i + 2)) % 7)}
                             for i, j in enumerate("pq") for u in range(15)]),
                             statistic=lambda r: float(r["x"].mean()))]
    monkeypatch.setattr(lbmod, "PARALLEL_VIEW_ROWS", float("inf"))
    monkeypatch.setattr(lbmod, "PARALLEL_STATISTIC_ROWS", float("inf"))
    alone = leaderboard(views, n_resamples=200)
    monkeypatch.setattr(lbmod, "PARALLEL_VIEW_ROWS", 0)
    monkeypatch.setattr(lbmod, "PARALLEL_STATISTIC_ROWS", 0)
    monkeypatch.setattr(lbmod.os, "cpu_count", lambda: 2)
    lines, stored = [], {}
    side = leaderboard(views, n_resamples=200, progress=lines.append, stored=stored)
    assert sum("in a worker process" in line for line in lines) == 4, lines  # 3 segment views, 1 statistic view
    for name in ("leaderboard.csv", "leaderboard_pairs.csv"):
        pd.testing.assert_frame_equal(side[name], alone[name])
    assert len(stored) == 4  # the views of recorded judges only (one holds a live judge)
