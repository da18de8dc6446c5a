"""dhp.stats on the real WMT22 zh-en MQM data against google-research/mt-metrics-eval's numbers.

Reference values: mt-metrics-eval @ 68a481aea1a787392d55af8f76ac8ef40c5f4664 (stats.KendallVariants
variant "acc23" and stats.KendallWithTiesOpt variant "acc23", sample_rate 1.0, average_by "item"; Kendall
tau-b average_by "none") on the 15 MQM-scored systems other than the reference refA (refB included), with
the refA / src metric variants — the settings of data.GetCorrelations(level "seg", main_refs {"refA"},
include_human True). Regenerate with:
    python benchmarks/leaderboard_stats.py --mtme /path/to/mt-metrics-eval --skip-leaderboard
(columns "acc_eq mtme", "acc*_eq mtme", "epsilon mtme", "tau_b mtme").
The files come from the session's data root (conftest.DATA, filled by the data layer).
"""


from pathlib import Path

import numpy as np
import pytest

from dhp.stats.segment import kendall_tau_b, pairwise_accuracy, tie_calibrated_accuracy
from conftest import DATA

ROOT = DATA / "wmt22"
MQM = ROOT / "mqm_zh-en" / "zh-en.mqm.seg.score"
METRICS = ROOT / "metric-scores_zh-en"

# metric file -> (acc_eq exact ties, acc*_eq, its epsilon, tau_b), mt-metrics-eval @ 68a481a
MTME = {
    "BLEU-refA": (0.376549, 0.415797, 93.4938759104217, 0.143444),
    "chrF-refA": (0.381867, 0.420526, 25.60855239465934, 0.145931),
    "BERTScore-refA": (0.385488, 0.461440, 0.013565123081207275, 0.306668),
    "BLEURT-20-refA": (0.416295, 0.489458, 0.05232423543930054, 0.352445),
    "COMET-22-refA": (0.391934, 0.535589, 0.1472126013044195, 0.419567),
    "metricx_xxl_MQM_2020-refA": (0.389227, 0.543980, 0.05766797065734863, 0.420627),
    "COMETKiwi-src": (0.372348, 0.509029, 0.16107909002892007, 0.351966),
}



def _read(path: Path) -> dict[str, np.ndarray]:
    out: dict[str, list[float]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        system, score = line.split("\t")
        out.setdefault(system, []).append(np.nan if score == "None" else float(score))
    return {s: np.array(v) for s, v in out.items()}


@pytest.fixture(scope="module")
def data():
    mqm = _read(MQM)
    systems = sorted(s for s, v in mqm.items() if np.isfinite(v).any() and s != "refA")
    n_seg = len(mqm[systems[0]])
    human = np.concatenate([mqm[s] for s in systems])
    groups = np.tile(np.arange(n_seg), len(systems))
    metrics = {}
    for name in MTME:
        scores = _read(METRICS / f"{name}.seg.score")
        metrics[name] = np.concatenate([scores[s] for s in systems])
    return systems, human, groups, metrics


def test_the_systems_are_the_15_mqm_scored_ones_with_refb(data):
    systems, human, _, _ = data
    assert len(systems) == 15 and "refB" in systems and np.isfinite(human).all() and len(human) == 28125


def test_acc_star_acc_eq_and_tau_b_equal_mt_metrics_eval(data):
    _, human, groups, metrics = data
    for name, (acc, star, eps, tau) in MTME.items():
        x = metrics[name]
        got_star, got_eps = tie_calibrated_accuracy(human, x, groups)
        assert got_star == pytest.approx(star, abs=2e-6), name
        assert got_eps == pytest.approx(eps, rel=1e-9), name
        assert pairwise_accuracy(human, x, groups) == pytest.approx(acc, abs=2e-6), name
        assert kendall_tau_b(human, x) == pytest.approx(tau, abs=2e-6), name
    # the finding: exact ties put COMET-22 below BLEURT-20; calibrated ties reverse it
    order = sorted(MTME, key=lambda n: -tie_calibrated_accuracy(human, metrics[n], groups)[0])
    assert order == sorted(MTME, key=lambda n: -MTME[n][1])
    assert order[:2] == ["metricx_xxl_MQM_2020-refA", "COMET-22-refA"] and order[-1] == "BLEU-refA"
