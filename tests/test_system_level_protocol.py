"""The system-level view names each judge's protocol, as the segment view of the same rows does (issue 50: the GEMBA
rows and a live run's row of leaderboard.csv had none at the system level)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dhp.analysis.leaderboard import View, leaderboard
from dhp.analysis.system_level import system_accuracy_view


def _rows(n_seg: int = 12) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    systems = list("ABCD")
    human = rng.normal(size=(n_seg, len(systems)))
    rows = []
    for judge, mode, noise in (("GEMBA-GPT4-DA-refA", "recorded", 0.3), ("openai:stub@http://h/v1", "sample", 0.8),
                               ("BLEU", "recorded", 1.0)):
        score = human + rng.normal(scale=noise, size=human.shape)
        rows += [{"judge": judge, "mode": mode, "unit": s, "system": systems[k], "score": score[s, k],
                  "human": human[s, k]} for s in range(n_seg) for k in range(len(systems))]
    return pd.DataFrame(rows)


def test_every_system_row_carries_the_protocol_its_segment_row_carries():
    rows = _rows()
    protocols = {("GEMBA-GPT4-DA-refA", "recorded"): "gemba/GEMBA-DA_ref@a7a7eff8 [recorded decoding]",
                 ("openai:stub@http://h/v1", "sample"): "gemba/GEMBA-DA_ref@a7a7eff8 sha256:x no max_tokens",
                 ("someone-else", "recorded"): "not in these rows"}
    seg = View("segment", "s", "tau_b", "segment", rows, notes={"protocols": protocols})
    board = leaderboard([seg, system_accuracy_view(rows, "s", protocols)], n_resamples=20)["leaderboard.csv"]
    by_view = {v: dict(zip(g["judge"], g["protocol"].fillna(""))) for v, g in board.groupby("view")}
    assert by_view["system"] == by_view["segment"]
    assert by_view["system"]["GEMBA-GPT4-DA-refA"].startswith("gemba/") and \
        by_view["system"]["openai:stub@http://h/v1"].endswith("no max_tokens") and by_view["system"]["BLEU"] == ""
    # control: without the protocols the system rows name none (what leaderboard.csv had)
    bare = leaderboard([system_accuracy_view(rows, "s")], n_resamples=20)["leaderboard.csv"]
    assert (bare["protocol"].fillna("") == "").all()
