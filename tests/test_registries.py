"""The analysis and protocol registries: your own analysis runs on a run folder like the built-ins, and
the built-in ones are reachable by name."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dhp.analysis import ANALYSES, analysis, run_analysis
from dhp.errors import DHPError
from dhp.io import write_parquet


def _scores():
    rows = []
    for i in range(6):
        for p, s in (("original", 5.0), ("char_typo", 3.0 + i % 2), ("control", 5.0)):
            rows.append({"dataset": "summeval", "task": "summarization", "judge": "j", "mode": "sample",
                         "item_id": str(i), "perturbation": p, "severity": "single" if p != "original" else "none",
                         "level": {"original": "none", "char_typo": "character", "control": "none"}[p],
                         "metric": "fluency", "score": s, "n_valid": 1, "n_failed": 0})
    return pd.DataFrame(rows)


def test_own_analysis_reads_and_writes_the_run_folder(tmp_path):
    write_parquet(_scores(), tmp_path / "scores.parquet")

    @analysis("mean_drop_test", reads=("scores.parquet",), writes=("mean_drop_test.csv",))
    def mean_drop(scores):
        m = scores.groupby("perturbation")["score"].mean()
        return {"mean_drop_test.csv": (m["original"] - m).rename("drop").reset_index()}

    try:
        paths = run_analysis("mean_drop_test", tmp_path)
        got = pd.read_csv(paths["mean_drop_test.csv"]).set_index("perturbation")["drop"]
        assert got["char_typo"] == pytest.approx(1.5) and got["control"] == 0
    finally:
        ANALYSES.pop("mean_drop_test")


def test_builtin_discernment_through_the_registry_matches_the_direct_call(tmp_path):
    from dhp.analysis.discernment import discernment

    write_parquet(_scores(), tmp_path / "scores.parquet")
    paths = run_analysis("discernment", tmp_path, n_boot=0, n_null=10)
    disc = pd.read_csv(paths["discernment.csv"])
    direct = discernment(_scores())
    assert disc.set_index("perturbation")["D"].to_dict() == pytest.approx(direct.set_index("perturbation")["D"].to_dict())
    assert (tmp_path / "summary.csv").is_file()


def test_registry_errors_name_the_fix(tmp_path):
    with pytest.raises(DHPError, match="Unknown analysis"):
        run_analysis("nope", tmp_path)
    with pytest.raises(DHPError, match="scores.parquet not found"):
        run_analysis("discernment", tmp_path)

    @analysis("forgetful_test", reads=(), writes=("a.csv", "b.csv"))
    def forgetful():
        return {"a.csv": pd.DataFrame({"x": [1]})}

    try:
        with pytest.raises(DHPError, match="did not return"):
            run_analysis("forgetful_test", tmp_path)
        assert not (tmp_path / "a.csv").exists()  # nothing half-written
    finally:
        ANALYSES.pop("forgetful_test")


def test_protocols_are_registered_by_name():
    from dhp.judging import PROTOCOLS, compare_pairs, protocol, score_perturbed

    assert PROTOCOLS["pointwise"] is score_perturbed and PROTOCOLS["pairwise"] is compare_pairs
    assert {"aspects", "strategies"} <= set(PROTOCOLS)
    with pytest.raises(DHPError, match="already registered"):
        protocol("pairwise", replace=False)(lambda table, judge: table)


def test_dual_perspective_analysis_runs_from_the_run_folder(tmp_path):
    from dhp.analysis import run_analysis
    from dhp.analysis import dual_perspective as dp

    targets = pd.DataFrame({"target_id": list("abcdef"), "aspect": ["coherence"] * 4 + ["fluency"] * 2,
                            "human_rating": [1, 2, 4, 5, 3, 3], "judge_score": [1.2, 2.0, 3.9, float("nan"), 3.0, 4.0],
                            "judge_rating": [1, 2, 4, float("nan"), 3, 4]}).assign(judge="j:1", mode="logprobs")
    pairs = pd.DataFrame({"source_id": ["s"] * 3, "aspect": ["coherence", "coherence", "fluency"], "step": [0, 1, 0],
                          "score_step": [4.0, 3.0, 2.0], "score_next": [3.0, 3.0, float("nan")]}).assign(judge="j:1", mode="logprobs")
    targets.to_parquet(tmp_path / "global_targets.parquet")
    pairs.to_parquet(tmp_path / "local_pairs.parquet")
    paths = run_analysis("dual_perspective", tmp_path)
    kappa = pd.read_csv(paths["global_kappa.csv"])
    local = pd.read_csv(paths["local_accuracy.csv"])
    expected = dp.global_kappa(targets)
    assert list(kappa.columns[:2]) == ["judge", "mode"] and set(kappa["judge"]) == {"j:1"}
    assert kappa["n"].tolist() == expected["n"].tolist() == [3, 2]
    assert np.allclose(kappa["kappa"], expected["kappa"], equal_nan=True)
    assert local.set_index("aspect")["accuracy"].to_dict() == {"coherence": 0.5}  # the tie counts as a miss
