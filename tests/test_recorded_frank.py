"""FRANK (the data root's frank/) imported and its leaderboard views against upstream's evaluation/evaluate.py:
an independent re-implementation of its definition (residuals of a least-squares regression on the one-hot system
with an intercept, dense numpy lstsq; scipy's pearsonr/spearmanr on the residuals; Williams' formula) to 1e-9, and
upstream's code itself (scikit-learn's OneHotEncoder + LinearRegression) — whose sparse solver (lsqr) leaves
residual errors up to 3e-7, so its Spearman differs where near-equal residuals swap ranks (Dep Entail: 4e-6)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dhp.errors import DHPError
from dhp.recorded import import_judgments
from conftest import DATA

FOLDER = DATA / "frank"
METRICS = ["Rouge 1", "Rouge 2", "Rouge L", "Bleu", "Meteor", "BertScore P", "BertScore R", "BertScore F1",
           "BertScore P Art", "BertScore R Art", "BertScore F1 Art", "FactCC", "FEQA", "Dep Entail", "QAGS"]


def upstream_data(split="test") -> pd.DataFrame:
    """evaluate.py main(): human annotations merged one-to-one with the baseline outputs, then the split."""
    data = pd.read_json(FOLDER / "human_annotations.json")
    metric = pd.read_json(FOLDER / "baseline_factuality_metrics_outputs.json")
    data = data.merge(metric[["hash", "model_name", *METRICS]], on=["hash", "model_name"], validate="one_to_one")
    return data[data["split"] == split]


def upstream_partial(data: pd.DataFrame, metric: str) -> tuple[float, float]:
    """evaluate.py human_metric_correlation with partial_correlation_variable='model_name' (its code path)."""
    from sklearn.linear_model import LinearRegression
    from sklearn.preprocessing import OneHotEncoder

    mask = (data[metric].isnull() == False) & (data["Factuality"].isnull() == False)  # noqa: E712 (upstream's)
    x, y = data[metric][mask], data["Factuality"][mask]
    q = OneHotEncoder(handle_unknown="ignore").fit_transform(np.array(data[mask]["model_name"]).reshape(-1, 1))
    x = x - LinearRegression().fit(q, x).predict(q)
    y = y - LinearRegression().fit(q, y).predict(q)
    return stats.pearsonr(x, y)[0], stats.spearmanr(x, y)[0]


def exact_partial(data: pd.DataFrame, metric: str, human: str = "Factuality") -> tuple[float, float]:
    """The same definition solved exactly: dense one-hot design with an intercept, numpy's lstsq."""
    d = data[data[metric].notna() & data[human].notna()]
    res = [_lstsq_residuals(d[c].to_numpy(float), d["model_name"].to_numpy()) for c in (metric, human)]
    return stats.pearsonr(*res)[0], stats.spearmanr(*res)[0]


def _lstsq_residuals(v, groups):
    names = sorted(set(groups))
    design = np.column_stack([np.ones(len(v))] + [(groups == n).astype(float) for n in names])
    coef = np.linalg.lstsq(design, v, rcond=None)[0]
    return v - design @ coef


def upstream_williams(r12, r13, r23, n):
    k = 1 - r12 ** 2 - r13 ** 2 - r23 ** 2 + 2 * r12 * r13 * r23
    den = np.sqrt(2 * k * (n - 1) / (n - 3) + (((r12 + r13) ** 2) / 4) * ((1 - r23) ** 3))
    t = (r12 - r13) * np.sqrt((n - 1) * (1 + r23)) / den
    return 1 - stats.t.cdf(t, df=n - 3)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    r = tmp_path_factory.mktemp("frank")
    report = import_judgments("frank", FOLDER, r)
    return r, report


@pytest.fixture(scope="module")
def views(run):
    from dhp.analysis.recorded_views import frank_views

    r, _ = run
    return frank_views(pd.read_parquet(r / "item_scores.parquet"), pd.read_parquet(r / "item_human.parquet"))


def test_import_round_trips_with_provenance(run):
    r, report = run
    assert len(report.files) == 2 and all(f["upstream"].startswith("github.com/artidoro/frank@80a88fb1")
                                          for f in report.files)
    s, h = pd.read_parquet(r / "item_scores.parquet"), pd.read_parquet(r / "item_human.parquet")
    assert sorted(s["judge"].unique()) == sorted(METRICS) and len(h) == 2246
    raw = json.loads((FOLDER / "baseline_factuality_metrics_outputs.json").read_text())
    want = {(x["hash"], x["model_name"]): x["Dep Entail"] for x in raw}
    got = s[s["judge"] == "Dep Entail"]
    for row in got.itertuples():
        w = want[(row.item, row.system)]
        assert (math.isnan(row.score) and w is None and row.failure) or row.score == w
    assert h.groupby("split").size().to_dict() == {"test": 1575, "valid": 671}
    before = {p.name: p.read_bytes() for p in r.glob("*.parquet")}
    import_judgments("frank", FOLDER, r)  # idempotent
    assert {p.name: p.read_bytes() for p in r.glob("*.parquet")} == before


def test_a_malformed_record_is_refused_and_nothing_written(tmp_path):
    data = json.loads((FOLDER / "human_annotations.json").read_text())
    data[6]["Factuality"] = "high"
    bad = tmp_path / "in" / "human_annotations.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps(data))
    with pytest.raises(DHPError) as e:
        import_judgments("frank", bad.parent, tmp_path / "run")
    assert "record 7" in e.value.problem and "Factuality" in e.value.problem and e.value.fix
    assert not (tmp_path / "run" / "item_human.parquet").exists()


def test_partial_correlations_equal_upstream_per_metric(views):
    data = upstream_data()
    by = {v.measure: v for v in views}
    assert set(by) == {"partial_pearson", "partial_spearman"} and all(v.scope == "FRANK test Factuality" for v in views)
    for metric in METRICS:
        exact = exact_partial(data, metric)
        code = upstream_partial(data, metric)
        for i, measure in enumerate(("partial_pearson", "partial_spearman")):
            v = by[measure]
            got = v.statistic(v.data[v.data["judge"] == metric])  # each metric on the summaries it scored
            assert abs(got - exact[i]) < 1e-9, (metric, measure, got, exact[i])
            # upstream's own code: Pearson to 1e-9; Spearman within its solver's noise
            assert abs(got - code[i]) < (1e-9 if i == 0 else 1e-5), (metric, measure, got, code[i])


def test_leaderboard_compares_on_shared_summaries_with_upstreams_williams_beside(views):
    """The leaderboard compares every metric on the summaries all of them scored (Dep Entail and FEQA lack 45):
    its values are upstream's definition on those summaries, and each pair carries upstream's Williams p."""
    from dhp.analysis.leaderboard import leaderboard

    out = leaderboard(views, n_resamples=20, n_resamples_statistic=20, seed=0)
    board, pairs = out["leaderboard.csv"], out["leaderboard_pairs.csv"]
    data = upstream_data()
    shared = data.dropna(subset=METRICS)
    assert set(board["n"]) == {len(shared)} == {1530}
    for r in board.itertuples():
        want = exact_partial(shared, r.judge)[0 if r.measure == "partial_pearson" else 1]
        assert abs(r.value - want) < 1e-9
    p = pairs[pairs["measure"] == "partial_pearson"]
    assert len(p) == 105 and (p["test_upstream"] == "Williams (FRANK evaluate.py)").all()
    assert pairs.loc[pairs["measure"] == "partial_spearman", "p_upstream"].isna().all()
    res = {c: _lstsq_residuals(shared[c].to_numpy(float), shared["model_name"].to_numpy())
           for c in [*METRICS, "Factuality"]}
    for r in p.head(20).itertuples():  # upstream metric_metric_correlation's Williams p
        r12 = stats.pearsonr(res[r.judge_a], res["Factuality"])[0]
        r13 = stats.pearsonr(res[r.judge_b], res["Factuality"])[0]
        r23 = stats.pearsonr(res[r.judge_a], res[r.judge_b])[0]
        if r12 < r13:
            r12, r13 = r13, r12
        assert abs(r.p_upstream - upstream_williams(r12, r13, r23, len(shared))) < 1e-9
