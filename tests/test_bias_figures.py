"""The bias method's figure (dhp.plots.bias) and its place on the report card: every judge of the strategy on the
pooled pairs with its interval and n, the baselines beside them, a missing number shown with its reason; figures for
the live judges' strategies and LLMBar's Vanilla only; a recorded judge imported beside the run's gets no card of
"not run" rows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dhp import methods
from dhp.analysis import bias as ba
from dhp.plots.bias import plot_bias


def _lengths(n=30, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    w1 = rng.integers(10, 200, n)
    w2 = np.maximum(w1 + rng.integers(1, 40, n) * rng.choice([-1, 1], n), 1)
    w2[w2 == w1] += 1
    return pd.DataFrame({"subset": "Natural", "item_id": [f"Natural-{i}" for i in range(n)],
                         "label": rng.choice(["1", "2"], n), "words_1": w1, "words_2": w2,
                         "longer": np.where(w1 > w2, "1", "2")})


def _verdicts(lengths, judge, mode, strategy, pick, source="") -> pd.DataFrame:
    return pd.DataFrame([{"judge": judge, "mode": mode, "item_id": r.item_id, "subset": r.subset,
                          "strategy": strategy, "order": o, "verdict": pick(r, o), "label": r.label, "failure": "",
                          "source": source} for r in lengths.itertuples(index=False) for o in ("12", "21")])


def _tables():
    L = _lengths()
    gold = lambda r, o: r.label  # noqa: E731
    first = lambda r, o: ba.FIRST[o]  # noqa: E731
    v = pd.concat([_verdicts(L, "GPT-4", "recorded", "Vanilla", gold),
                   _verdicts(L, "Falcon", "recorded", "Vanilla", first),
                   _verdicts(L, "GPT-4", "recorded", "Swap", gold),
                   _verdicts(L.head(3), "embedded:tiny", "logprobs", "dhp_vanilla", first)], ignore_index=True)
    return L, v


def test_plot_shows_every_judge_of_the_strategy_with_interval_and_the_reason_of_a_missing_number():
    L, v = _tables()
    pos = pd.concat([ba.position_table(v, 100), ba.position_table(ba.baseline_verdicts(L, "Vanilla"), 100)])
    ln = pd.concat([ba.length_table(v, L, 100), ba.length_table(ba.baseline_verdicts(L, "Vanilla"), L, 100)])
    fig = plot_bias(pos, ln, "Vanilla")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    # the Vanilla judges and both baselines, each with its n; not the Swap rows, not the live judge's strategy
    assert sorted(lab.split(" (")[0] for lab in labels) == ["Falcon", "GPT-4", "baseline:always_first",
                                                             "baseline:always_longer"]
    assert all(", n=30" in lab for lab in labels if not lab.startswith("baseline:always_longer"))
    assert len(fig.axes) == 3  # prefer-first, flip rate, length bias
    # Falcon always names the first shown: prefer-first 1, flip rate 1 — drawn at those x values
    row = labels.index(next(lab for lab in labels if lab.startswith("Falcon")))
    xs = {tuple(np.round(p, 6)) for c in ax.collections for p in c.get_offsets()} if ax.collections else set()
    dots = [(line.get_xdata(), line.get_ydata()) for line in ax.lines if len(line.get_xdata())]
    assert any(np.isclose(x, 1.0).any() and np.isclose(y, row).any() for x, y in dots), (dots, xs)
    # the live judge on 3 pairs: too few units, its reason written where the dot would be
    small = plot_bias(ba.position_table(v, 100), None, "dhp_vanilla")
    texts = [t.get_text() for t in small.axes[0].texts]
    assert any("too few units" in t for t in texts)


def test_figures_stage_draws_the_live_strategies_and_vanilla_only():
    L, v = _tables()
    m = methods.get("bias")
    config = m.config({"n_boot": 50})
    tables = {"bias_pairs.parquet": L, "pairwise_verdicts.parquet": v}
    out = m.figures({**tables, **m.analyze(tables, config)}, config)
    assert sorted(out) == ["bias_Vanilla", "bias_dhp_vanilla"]  # not Swap: 15 recorded strategies would be 15 figures


def test_report_card_has_the_bias_column_and_no_card_for_an_imported_judge(tmp_path):
    L, v = _tables()
    live = _verdicts(L, "embedded:tiny", "logprobs", "dhp_vanilla", lambda r, o: ba.FIRST[o])
    v = pd.concat([v[v["mode"] == "recorded"], live], ignore_index=True)
    m = methods.get("bias")
    config = m.config({"n_boot": 50, "run_dir": str(tmp_path)})
    tables = {"bias_pairs.parquet": L, "pairwise_verdicts.parquet": v}
    methods.write_tables(m, m.analyze(tables, config), tmp_path)
    card = methods.report_card(tmp_path)
    assert set(zip(card["judge"], card["mode"])) == {("embedded:tiny", "logprobs")}
    mine = card[card["method"] == "bias"].set_index("measure")
    assert mine.loc["prefer_first", "value"] == 1.0 and mine.loc["flip_rate", "value"] == 1.0
    assert (mine["status"] == "ok").all() and (mine["n"] == 30).all()


def test_position_views_keep_the_pairs_of_equal_length():
    """'Always the longer' has no verdict on a pair of equal length; on the position views it would take those pairs
    from every judge (a view compares on the units all share): it stands on the length view only."""
    from dhp.analysis.leaderboard import leaderboard

    L = _lengths()
    L.loc[:4, "words_2"] = L.loc[:4, "words_1"]
    L.loc[:4, "longer"] = ""  # 5 pairs of equal length
    v = pd.concat([_verdicts(L, "GPT-4", "recorded", "Vanilla", lambda r, o: r.label),
                   _verdicts(L, "Falcon", "recorded", "Vanilla", lambda r, o: ba.FIRST[o])], ignore_index=True)
    views = methods.get("bias").views({"pairwise_verdicts.parquet": v, "bias_pairs.parquet": L})
    board = leaderboard(views, n_resamples=50)["leaderboard.csv"].set_index(["view", "judge"])
    assert (board.loc["bias_position", "n"] == 30).all()  # every pair
    assert "baseline:always_longer" not in board.loc["bias_position"].index
    assert board.loc[("bias_length", "baseline:always_longer"), "n"] == 25
