"""Synthetic scores tables (numpy only) in the contract's schema, for the stats/plots tests."""

import numpy as np
import pandas as pd

from dhp.schema import DATASET_TASK, TASK_METRICS

COLUMNS = ["dataset", "task", "judge", "mode", "item_id", "perturbation", "severity", "level", "metric", "score", "n_valid", "n_failed"]

# (perturbation, severity, level, effect size in score points)
PERTURBATIONS = [
    ("char_typo", "minor", "character", 1.0),
    ("char_typo", "major", "character", 2.0),
    ("char_deletion", "minor", "character", 1.0),
    ("fictional_entities", "minor", "word", 0.5),
    ("sentence_reorder", "minor", "sentence", 0.3),
    ("control", "single", "none", 0.0),
]


def synth_scores(n=20, seed=0, dataset="summeval", judge="j1", mode="logprobs", perturbations=PERTURBATIONS):
    rng = np.random.default_rng(seed)
    task = DATASET_TASK[dataset]
    metrics = ("likelihood",) if mode == "likelihood" else TASK_METRICS[DATASET_TASK[dataset]]
    base = {m: rng.integers(2, 6, n).astype(float) for m in metrics}
    rows = []
    for m in metrics:
        for i in range(n):
            rows.append((dataset, task, judge, mode, f"i{i}", "original", "none", "none", m, base[m][i], 1, 0))
    for pert, sev, lvl, eff in perturbations:
        for m in metrics:
            # effect 0 (the control): symmetric test-retest noise, never a systematic drop
            noise = rng.integers(-1, 2, n) if eff == 0 else rng.normal(0, 0.5, n)
            sc = np.round(base[m] - eff + noise)
            for i in range(n):
                rows.append((dataset, task, judge, mode, f"i{i}", pert, sev, lvl, m, float(sc[i]), 1, 0))
    return pd.DataFrame(rows, columns=COLUMNS)
