"""The notebooks' worked-by-hand cells (tag ``handcheck``) recompute each method's headline number from the raw
rows with numpy/scipy and assert that it equals the package's. Here each cell's own code runs on small synthetic
tables: it passes on the package's number, and it fails when the package function behind that number is broken
(monkeypatched with a plausible bug) — so the cells check something.
"""

from __future__ import annotations

import types
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest

from dhp import methods
from dhp.analysis import alignment as al
from dhp.analysis import confusion as cf
from dhp.analysis import decomposition as dec
from dhp.analysis import discernment as disc
from dhp.analysis import dual_perspective as dp
from dhp.stats import segment as seg

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def handcheck_cells(notebook: str) -> list[str]:
    nb = nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4)
    cells = [c.source for c in nb.cells if "handcheck" in c.metadata.get("tags", [])]
    assert cells, f"{notebook} has no worked-by-hand cell"
    return cells


def run_cell(source: str, namespace: dict) -> None:
    exec(compile(source, "<handcheck>", "exec"), {"pd": pd, **namespace})


# ---------------------------------------------------------------------------------------------- 03: DHP's D

def _dhp_scores() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for item in range(8):
        for metric in ("coherence", "fluency"):
            base = rng.uniform(3, 5)
            for pert, sev, level, drop in (("original", "", "", 0.0), ("char_typo", "minor", "character", 0.6),
                                           ("sentence_reorder", "major", "sentence", 0.3 * rng.standard_normal())):
                rows.append({"dataset": "summeval", "task": "summarization", "judge": "j", "mode": "logprobs",
                             "item_id": f"i{item}", "perturbation": pert, "severity": sev, "level": level,
                             "metric": metric, "score": base - drop - (0.1 * item if pert != "original" else 0),
                             "n_valid": 1, "n_failed": 0})
    return pd.DataFrame(rows)


def _dhp_namespace():
    m = methods.get("dhp")
    config = m.config(n_boot=0, n_null=10)
    scores = _dhp_scores()
    return {"scores": scores, "table": m.analyze({"scores.parquet": scores}, config)["discernment.csv"],
            "config": config}


def test_dhp_handcheck_passes_on_the_package_number():
    (cell,) = handcheck_cells("03_discernment")
    run_cell(cell, _dhp_namespace())


def test_dhp_handcheck_fails_when_the_combination_is_wrong(monkeypatch):
    (cell,) = handcheck_cells("03_discernment")
    real = disc.combine_rows
    # a plausible bug: Wilson's weighted mean where the paper's harmonic sum is configured
    monkeypatch.setattr(disc, "combine_rows", lambda p, weights=None, combine="paper": real(p, weights, "wilson"))
    with pytest.raises(AssertionError, match="disagree"):
        run_cell(cell, _dhp_namespace())


# ---------------------------------------------------------------------------------------------- 08: LLMBar agreement

def _verdicts() -> pd.DataFrame:
    rows = []
    verdicts = {"12": ["1", "2", None, "1"], "21": ["1", "1", "2", "tie"]}
    for order, vs in verdicts.items():
        for k, v in enumerate(vs):
            rows.append({"judge": "j", "mode": "logprobs", "source": "", "item_id": f"p{k}", "subset": "Natural",
                         "strategy": "vanilla", "order": order, "verdict": v, "label": "1" if k % 2 == 0 else "2"})
    return pd.DataFrame(rows)


def test_llmbar_handcheck_passes_and_fails_on_a_broken_agreement(monkeypatch):
    (cell,) = handcheck_cells("08_decompose_aggregate")
    verdicts = _verdicts()
    run_cell(cell, {"verdicts": verdicts, "mine": dec.agreement_table(verdicts)})
    real = dec.agreement_table
    # a plausible bug: "right in both orders" reported as LLMBar's accuracy
    monkeypatch.setattr(dec, "agreement_table",
                        lambda *a, **k: real(*a, **k).assign(agreement=lambda t: t["agreement_both"]))
    with pytest.raises(AssertionError):
        run_cell(cell, {"verdicts": verdicts, "mine": dec.agreement_table(verdicts)})


# ---------------------------------------------------------------------------------------------- 09: kappa, acc*_eq

def _targets() -> pd.DataFrame:
    human = [1, 2, 3, 4, 5, 3, 2, 4]
    judge = [2, 2, 3, 5, 4, 3, np.nan, 1]
    return pd.DataFrame({"judge": "j", "mode": "logprobs", "aspect": "coherence", "rating_rule": "expected",
                         "human_rating": human, "judge_rating": judge})


def test_kappa_handcheck_passes_and_fails_on_an_unweighted_kappa(monkeypatch):
    kappa_cell = handcheck_cells("09_dual_perspective")[0]
    gt = _targets()
    ns = {"gt": gt, "mine": lambda t: t, "run_dual": True}
    run_cell(kappa_cell, {**ns, "kappa": dp.global_kappa(gt)})
    real = dp.cohen_kappa_score
    # the package's kappa made unweighted, on both of its routes (its own arithmetic for 1-5 ratings, sklearn's else)
    monkeypatch.setattr(dp, "cohen_kappa_score", lambda h, j, weights=None, labels=None: real(h, j, labels=labels))
    monkeypatch.setattr(dp, "_linear_kappa_1_to_5", lambda h, j: float(real(h, j, labels=dp.LABELS)))
    with pytest.raises(AssertionError):
        run_cell(kappa_cell, {**ns, "kappa": dp.global_kappa(gt)})


def _segments():
    systems = ["A", "B", "C", "D"]
    mqm = {"s1": [0, -1, -1, -5], "s2": [-2, -2, 0, -1], "s3": [0, -3, -4, -4]}
    judge = {"s1": [4.0, 3.9, 3.95, 2.0], "s2": [3.0, 3.05, 4.0, 3.5], "s3": [4.5, 3.0, 2.0, 2.1]}
    scores = pd.DataFrame([{"judge": "j", "mode": "logprobs", "lp": "zh-en", "reference": "src", "system": s,
                            "seg_id": g, "score": judge[g][k]} for g in mqm for k, s in enumerate(systems)])
    human = pd.DataFrame([{"lp": "zh-en", "system": s, "seg_id": g, "mqm": float(mqm[g][k]), "da_z": 0.0}
                          for g in mqm for k, s in enumerate(systems)])
    return {"segment_scores.parquet": scores, "segment_human.parquet": human}


def test_acc_eq_handcheck_passes_and_fails_without_tie_calibration(monkeypatch):
    acc_cell = handcheck_cells("09_dual_perspective")[1]
    tables = _segments()
    ns = {"collected_h": tables, "backend": types.SimpleNamespace(identity="j"), "main_reference": "refA",
          "run_human": True}

    def alignment():
        return al.alignment_tables(None, tables["segment_scores.parquet"], tables["segment_human.parquet"], n_boot=0)

    run_cell(acc_cell, {**ns, "alignment": alignment()})
    # a plausible bug: the judge's ties left uncalibrated (epsilon fixed at 0); the data need a threshold > 0
    monkeypatch.setattr(seg, "tie_calibrated_accuracy", lambda h, m, g: (seg.pairwise_accuracy(h, m, g), 0.0))
    with pytest.raises(AssertionError):
        run_cell(acc_cell, {**ns, "alignment": alignment()})


# ---------------------------------------------------------------------------------------------- 07: confusion index

def _confusion():
    expectations = pd.DataFrame({"attack": ["repetition", "repetition", "passive_voice"],
                                 "aspect": ["fluency", "coherence", "fluency"], "set": ["S_T", "S_F", "excluded"]})
    drops = {("repetition", "fluency"): [1, 2, 3, 4, 5, 6],          # raw p = 1/64
             ("repetition", "coherence"): [1, 2, 3, 4, 5, -0.5],     # raw p = 2/64: Holm over 3 cells keeps it > 0.05
             ("passive_voice", "fluency"): [0, 0, 0, 0, 0, 0]}       # p = 1
    base = {"judge": "j", "mode": "logprobs", "instruction": "paper", "description_type": "detailed",
            "dataset": "summeval", "method": "rule", "n_valid": 1, "n_failed": 0, "failure": ""}
    rows = []
    for item in range(6):
        for aspect in ("fluency", "coherence"):
            rows.append({**base, "item_id": f"i{item}", "attack": "", "variant": "original", "aspect": aspect,
                         "score": 4.0})
        for (attack, aspect), d in drops.items():
            rows.append({**base, "item_id": f"i{item}", "attack": attack, "variant": "perturbed", "aspect": aspect,
                         "score": 4.0 - d[item]})
    return pd.DataFrame(rows), expectations


def _confusion_namespace():
    scores, expectations = _confusion()
    cells, summary, _ = cf.confusion_tables(scores, expectations)
    return {"scores": scores, "expectations": expectations, "cells": cells, "summary": summary,
            "who": {"judge": "j", "mode": "logprobs", "instruction": "paper"}, "description_types": ["detailed"],
            "alpha": 0.05, "adjust_method": "holm"}


def test_confusion_handcheck_passes_and_fails_without_the_adjustment(monkeypatch):
    (cell,) = handcheck_cells("07_criteria_confusion")
    ns = _confusion_namespace()
    assert ns["summary"]["confusion_index"].item() == 0  # the S_F drop does not survive Holm's adjustment
    run_cell(cell, ns)
    # a plausible bug: decisions read on raw p (the adjustment skipped): the S_F cell turns significant
    monkeypatch.setattr(cf, "adjust", lambda p, method="holm": np.asarray(p, dtype=float))
    with pytest.raises(AssertionError, match="disagree"):
        run_cell(cell, _confusion_namespace())
