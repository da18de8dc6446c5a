"""HANNA (the data root's hanna/hanna_metric_scores_llm.csv) imported and its leaderboard views against an
independent re-implementation of upstream's data_visualization.ipynb (get_overall_correlation,
get_system_level_correlation: the Human row dropped, stories pooled or per-system means), to 1e-9."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dhp.errors import DHPError
from dhp.recorded import import_judgments
from conftest import DATA

FILE = DATA / "hanna" / "hanna_metric_scores_llm.csv"
CRITERIA = ["Relevance", "Coherence", "Empathy", "Surprise", "Engagement", "Complexity"]
CODES = dict(zip(CRITERIA, ["RE", "CH", "EM", "SU", "EG", "CX"]))


# ------------------------------------------------------------------ independent definitions (not dhp.stats)

def _tau_b(x, y) -> float:
    """Kendall τ_b by counting every pair."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    i, j = np.triu_indices(len(x), 1)
    s, t = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    return float((s * t).sum() / np.sqrt(np.abs(s).sum() * np.abs(t).sum()))


def _ranks(v) -> np.ndarray:
    v = np.asarray(v, float)
    order = np.argsort(v, kind="mergesort")
    r = np.empty(len(v))
    r[order] = np.arange(1, len(v) + 1)
    for u in np.unique(v):  # ties: the mean of their ranks
        r[v == u] = r[v == u].mean()
    return r


def _corr(x, y, method: str) -> float:
    if method == "kendall":
        return _tau_b(x, y)
    if method == "spearman":
        x, y = _ranks(x), _ranks(y)
    return float(np.corrcoef(np.asarray(x, float), np.asarray(y, float))[0, 1])


@pytest.fixture(scope="module")
def upstream():
    """The notebook's METRICS_DF_NO_HUMAN: one row per system but Human, every cell a JSON list."""
    df = pd.read_csv(FILE, index_col="Model")
    return df.drop(["Human"])


def upstream_overall(df, col, criterion, method):
    a = np.concatenate([json.loads(c) for c in df[col].tolist()])
    b = np.concatenate([json.loads(c) for c in df[criterion].tolist()])
    return _corr(a, b, method)


def upstream_system(df, col, criterion, method):
    a = np.array([json.loads(c) for c in df[col].tolist()]).T.mean(axis=0)
    b = np.array([json.loads(c) for c in df[criterion].tolist()]).T.mean(axis=0)
    return _corr(a, b, method)


# ------------------------------------------------------------------ import

@pytest.fixture(scope="module")
def run(tmp_path_factory):
    r = tmp_path_factory.mktemp("hanna")
    report = import_judgments("hanna", FILE, r)
    return r, report


def test_import_round_trips_every_number_with_provenance(run, upstream):
    r, report = run
    assert report.files[0]["upstream"].startswith("github.com/dig-team/hanna-benchmark-asg@282f2753")
    s = pd.read_parquet(r / "item_scores.parquet")
    h = pd.read_parquet(r / "item_human.parquet")
    assert s["judge"].nunique() == 92 and (s["mode"] == "recorded").all()
    assert s["source"].str.startswith("hanna_metric_scores_llm.csv#sha256=d0ce43f9").all()
    full = pd.read_csv(FILE, index_col="Model")
    # an LLM judge's setting is its own judge, rating one criterion per column
    got = s[(s["judge"] == "ChatGPT (setting 3)") & (s["criterion"] == "Surprise") & (s["system"] == "GPT-2")]
    want = json.loads(full.loc["GPT-2", "ChatGPT SU 3"])
    assert got.sort_values("item", key=lambda c: c.astype(int))["score"].tolist() == want
    # a metric: one score per story, criterion "" (compared with every criterion), tag removed from its name
    got = s[(s["judge"] == "BLEU") & (s["system"] == "Fusion")]
    assert set(got["criterion"]) == {""}
    want = json.loads(full.loc["Fusion", "BLEU Ξ§"])
    assert got.sort_values("item", key=lambda c: c.astype(int))["score"].tolist() == want
    got = h[(h["criterion"] == "Empathy") & (h["system"] == "Human")]
    want = json.loads(full.loc["Human", "Empathy"])
    assert got.sort_values("item", key=lambda c: c.astype(int))["human"].tolist() == want
    assert len(h) == 6 * 11 * 96
    assert not s["judge"].str.contains("AVG|Human").any()


def test_import_is_idempotent(run):
    r, _ = run
    before = {p.name: p.read_bytes() for p in r.glob("*.parquet")}
    import_judgments("hanna", FILE, r)
    assert {p.name: p.read_bytes() for p in r.glob("*.parquet")} == before


def test_a_malformed_file_is_refused_with_row_and_fix_and_nothing_written(tmp_path):
    lines = FILE.read_text(encoding="utf-8").split("\n")
    bad = tmp_path / "hanna_metric_scores_llm.csv"
    row = lines[3].split(",", 1)
    bad.write_text("\n".join([*lines[:3], row[0] + ',"[1, 2]"' + row[1][row[1].index('",') + 1:], *lines[4:]]),
                   encoding="utf-8")
    out = tmp_path / "run"
    with pytest.raises(DHPError) as e:
        import_judgments("hanna", bad, out)
    assert "row 3 (line 4" in e.value.problem and "96 numbers" in e.value.problem and e.value.fix
    assert not out.exists() or not any(out.iterdir())


# ------------------------------------------------------------------ views = upstream

@pytest.fixture(scope="module")
def views(run):
    from dhp.analysis.recorded_views import hanna_views

    r, _ = run
    return hanna_views(pd.read_parquet(r / "item_scores.parquet"), pd.read_parquet(r / "item_human.parquet"), "all")


def test_the_papers_example_overall_kendall_bleu_relevance(views, upstream):
    v = next(v for v in views if v.scope == "HANNA Relevance" and v.measure == "overall_kendall")
    value = v.statistic(v.data[v.data["judge"] == "BLEU"])
    assert round(value, 4) == 0.0738  # SOURCES.md / the notebook's printed example
    assert abs(value - upstream_overall(upstream, "BLEU Ξ§", "Relevance", "kendall")) < 1e-9


def test_every_view_equals_upstreams_definition(views, upstream):
    """Every view and every judge against upstream's definition: of the 36 x 92 (view, judge) values, a sixth (each
    view with every sixth judge, shifted view by view, so each judge is checked in six views of different criteria,
    levels and statistics; all 3,312 took a minute of the test suite)."""
    cols = {c.rpartition(" ")[0] if not c.rpartition(" ")[2].isascii() else c: c for c in upstream.columns}
    assert len(views) == 6 * 2 * 3
    checked, per_judge = 0, {}
    for i, v in enumerate(views):
        criterion = v.scope.removeprefix("HANNA ")
        level, method = v.measure.split("_")
        assert v.data["system"].ne("Human").all()
        for j, (judge, rows) in enumerate(v.data.groupby("judge")):
            if (i + j) % 6:
                continue
            per_judge[judge] = per_judge.get(judge, 0) + 1
            if judge.endswith(")"):  # "<LLM> (setting k)" rates this criterion in "<LLM> <CODE> <k>"
                name, k = judge[:-1].split(" (setting ")
                col = f"{name} {CODES[criterion]} {k}"
            else:
                col = cols[judge]
            want = (upstream_overall if level == "overall" else upstream_system)(upstream, col, criterion, method)
            got = v.statistic(rows)
            assert abs(got - want) < 1e-9, (v.scope, v.measure, judge, got, want)
            checked += 1
    assert len(per_judge) == 92 and min(per_judge.values()) == 6 and checked == 6 * 92


def test_leaderboard_values_are_the_view_statistics(views, upstream):
    from dhp.analysis.leaderboard import leaderboard

    headline = [v for v in views if v.scope == "HANNA Coherence" and v.measure in ("overall_kendall",
                                                                                   "system_pearson")]
    out = leaderboard(headline, n_resamples=20, n_resamples_statistic=20, seed=1)
    board = out["leaderboard.csv"]
    assert (board["status"] == "ok").all() and (board["lo"] < board["hi"]).all()
    overall = board[board["measure"] == "overall_kendall"]
    assert overall["lo"].le(overall["value"]).all() and overall["hi"].ge(overall["value"]).all()
    for r in board[board["judge"].isin(["BLEU", "ChatGPT (setting 1)"])].itertuples():
        col = "BLEU Ξ§" if r.judge == "BLEU" else "ChatGPT CH 1"
        level, method = r.measure.split("_")
        want = (upstream_overall if level == "overall" else upstream_system)(upstream, col, "Coherence", method)
        assert abs(r.value - want) < 1e-9
    # system level: 96 prompts are the resampled units, overall: 960 stories
    assert set(board.loc[board["measure"] == "system_pearson", "n"]) == {96}
    assert set(board.loc[board["measure"] == "overall_kendall", "n"]) == {960}
    assert out["leaderboard_pairs.csv"]["p"].between(0, 1).all()


def test_resampled_draws_equal_the_statistic_of_the_resampled_stories(views):
    """The vectorised bootstrap of each level is the statistic of the stories (prompts) drawn, copies included."""
    rng = np.random.default_rng(0)
    for measure in ("overall_kendall", "overall_spearman", "system_kendall"):
        v = next(v for v in views if v.scope == "HANNA Surprise" and v.measure == measure)
        rows = v.data[v.data["judge"] == "Llama-13B (setting 2)"]
        units = sorted(rows["unit"].unique())
        idx = rng.integers(0, len(units), size=(3, len(units)))
        got = v.draws(rows, units, idx)
        for d in range(3):
            picked = [units[i] for i in idx[d]]
            copies = pd.concat([rows[rows["unit"] == u].assign(unit=f"{u}#{c}") for c, u in enumerate(picked)])
            if measure.startswith("system"):
                want = _corr(*copies.groupby("system")[["score", "human"]].mean().to_numpy().T, "kendall")
            else:
                want = _corr(copies["score"], copies["human"], measure.split("_")[1])
            assert abs(got[d] - want) < 1e-9, (measure, d)
