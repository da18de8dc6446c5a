"""GEMBA's recorded judges (import-judgments gemba) on the WMT22 zh-en views, against mt-metrics-eval.

Reference values: google-research/mt-metrics-eval @ 68a481aea1a787392d55af8f76ac8ef40c5f4664 run on GEMBA's files
(MicrosoftTranslator/GEMBA @ a7a7eff8) and the MQM scores of the data root: ``stats.KendallWithTiesOpt(gold, x,
"acc23", 15, "item", 1.0)`` and ``stats.Correlation(15, gold, x).Kendall(average_by="none")`` on the 15 MQM-scored
systems other than refA (data.GetCorrelations, level "seg", main_refs {"refA"}, include_human True), and
``stats.Agreement`` of the ``.sys.score`` files with the systems' mean MQM on the 14 MQM-scored systems that are not
human translations (GEMBA's evaluate.py: include_human False). The session fetches them into the data root (tests/conftest.py).
"""

from __future__ import annotations

import itertools
import shutil

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from dhp import methods
from dhp.analysis.leaderboard import seg_value
from dhp.datasets import declared_files
from dhp.errors import DHPError
from dhp.recorded import import_judgments
from dhp.recorded.gemba import PROTOCOLS

DATA = declared_files.data_root()
GEMBA = DATA / "gemba" / "mt-metrics-eval-v2" / "wmt22" / "metric-scores" / "zh-en"
MQM = DATA / "wmt22" / "mqm_zh-en" / "zh-en.mqm.seg.score"

# judge -> (acc*_eq, its epsilon, tau_b, system-level pairwise accuracy, system pairs), mt-metrics-eval @ 68a481a
MTME = {
    "GEMBA-GPT4-DA-refA": (0.526532, 4.0, 0.370410, 0.868132, 91),
    "GEMBA-GPT4-DA-src": (0.530921, 0.0, 0.393823, 0.857143, 91),
    "GEMBA-Dav3-Classes-refA": (0.471324, 0.0, 0.245363, 0.846154, 91),
    "GEMBA-Chat-Stars-src": (0.485166, 0.0, 0.338647, 0.835165, 91),
    "GEMBA-Turbo-SQM-refA": (0.498687, 5.0, 0.302631, 0.824176, 91),
}


def _read(path) -> dict[str, list]:
    out: dict[str, list] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        system, score = line.split("\t")
        out.setdefault(system, []).append(None if score == "None" else float(score))
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Every GEMBA file imported once (the data root's copy, as import-judgments gemba without PATH)."""
    folder = tmp_path_factory.mktemp("gemba")
    report = import_judgments("gemba", None, folder)
    return folder, report


@pytest.fixture(scope="module")
def views(run):
    m = methods.get("human_alignment")
    tables = methods.read_tables(m, run[0])
    return {(v.view, v.scope, v.measure): v for v in m.views(tables)}


def test_every_gemba_file_is_imported_as_56_judges_with_their_protocol(run):
    folder, report = run
    paths = [f["path"] for f in report.files if "gemba" in f["path"]]
    assert len(paths) == 112 and len({p.rsplit("/", 1)[-1] for p in paths}) == 112
    # every file is a declared upstream file (the data registry's gemba set)
    assert all(f["upstream"] and "MicrosoftTranslator/GEMBA@a7a7eff8" in f["upstream"] for f in report.files
               if "gemba" in f["path"])
    s = pd.read_parquet(folder / "segment_scores.parquet")
    judges = s[["judge", "reference"]].drop_duplicates()
    assert len(judges) == 56 and set(judges["reference"]) == {"refA", "src"}
    assert {tuple(r) for r in judges.to_numpy()} == set(PROTOCOLS)
    # each row names the decoding that made it (GEMBA's gpt_api.py when the file was committed: the Completion API
    # with max_tokens 20 and n=10, not a7a7eff8's chat call) and its reference variant
    assert PROTOCOLS[("GEMBA-GPT4-DA", "refA")].startswith("gemba/GEMBA-DA_ref@d942a90 GPT-4, Completion API")
    assert PROTOCOLS[("GEMBA-Dav3-DA", "src")].startswith("gemba/GEMBA-DA@3dd2c49 text-davinci-003, Completion API")
    assert sum("@3dd2c49" in p for p in PROTOCOLS.values()) == 25 and not any("a7a7eff8" in p for p in
                                                                               PROTOCOLS.values())
    assert all("max_tokens 20" in p and "n=10" in p and p.endswith(f"reference {'refA' if r == 'refA' else 'none (src)'}")
               for (_, r), p in PROTOCOLS.items())
    named = s.groupby(["judge", "reference"])["protocol"].unique()
    assert all(list(v) == [PROTOCOLS[k]] for k, v in named.items())
    # None (no valid answer) is NaN with its reason, never 0
    bab = s[(s["judge"] == "GEMBA-Bab-SQM") & (s["reference"] == "refA")]
    assert bab["score"].isna().sum() == 3826 and set(bab.loc[bab["score"].isna(), "failure"]) == {
        "unscored (None in the file)"}


def test_segment_views_equal_mt_metrics_eval(views):
    acc = views[("segment", "WMT22 zh-en vs MQM", "acc_eq_calibrated")]
    tau = views[("segment", "WMT22 zh-en vs MQM", "tau_b")]
    assert acc.data["judge"].nunique() == 45  # 56 less the 11 with unscored outputs
    # every GEMBA judge of every view carries its own protocol (leaderboard.csv's protocol column)
    for v in views.values():
        if v.view == "segment":
            gemba = {(j, m) for j, m in zip(v.data["judge"], v.data["mode"]) if j.startswith("GEMBA-")}
            assert gemba and all(v.notes["protocols"][k] == PROTOCOLS[(k[0].rsplit("-", 1)[0], k[0].rsplit("-", 1)[1])]
                                 for k in gemba), v.scope
    mqm = _read(MQM)
    systems = sorted(s for s, v in mqm.items() if any(x is not None for x in v) and s != "refA")
    gold = np.array([x for s in systems for x in mqm[s]], dtype=float)
    for judge, (want_acc, _, want_tau, _, _) in MTME.items():
        for view, want in ((acc, want_acc), (tau, want_tau)):
            d = view.data[view.data["judge"] == judge].sort_values(["system", "unit"])
            assert sorted(d["system"].unique()) == systems
            groups = d["unit"].to_numpy()
            assert seg_value(d["human"].to_numpy(float), d["score"].to_numpy(float), groups,
                             view.measure) == pytest.approx(want, abs=1e-6), (judge, view.measure)
        # tau_b independently: scipy's kendalltau (variant b) on the files themselves
        ref = "refA" if judge.endswith("refA") else "src"
        x = np.array([v for s in systems for v in _read(GEMBA / f"{judge}.seg.score")[s]], dtype=float)
        assert sps.kendalltau(gold, x, variant="b").statistic == pytest.approx(want_tau, abs=1e-6), ref


def test_system_level_accuracy_equals_mt_metrics_eval_with_its_n(views):
    (key,) = [k for k in views if k[0] == "system"]
    view = views[key]
    assert key[1] == "WMT22 zh-en vs MQM (14 systems, 91 pairs)" and view.notes["n_pairs"] == 91
    assert view.data["judge"].nunique() == 56  # every judge: a None segment is left out of its system's mean
    mqm = _read(MQM)
    systems = sorted(s for s, v in mqm.items() if any(x is not None for x in v) and not s.startswith("ref"))
    gold = {s: np.mean(mqm[s]) for s in systems}
    for judge in [*MTME, "GEMBA-Bab-SQM-refA", "GEMBA-Curie-Stars-refA"]:
        got = view.statistic(view.data[view.data["judge"] == judge])
        # independently: the sign agreement of GEMBA's own .sys.score files, pair by pair
        sys_scores = {k: v[0] for k, v in _read(GEMBA / f"{judge}.sys.score").items()}
        agree = [np.sign(gold[a] - gold[b]) == np.sign(sys_scores[a] - sys_scores[b])
                 for a, b in itertools.combinations(systems, 2)]
        assert len(agree) == 91
        assert got == pytest.approx(np.mean(agree), abs=1e-12), judge
        if judge in MTME:
            assert got == pytest.approx(MTME[judge][3], abs=1e-6)


def test_judges_with_unscored_outputs_stand_in_a_view_of_their_own(views):
    main = views[("segment", "WMT22 zh-en vs MQM", "tau_b")].data
    partial = views[("segment", "WMT22 zh-en vs MQM, unscored outputs", "tau_b")].data
    assert "GEMBA-Bab-SQM-refA" in set(partial["judge"]) and "GEMBA-Bab-SQM-refA" not in set(main["judge"])
    assert set(partial["judge"]) & set(main["judge"]) == set()
    assert len(set(partial["judge"])) == 11


def test_a_system_score_file_that_is_not_the_mean_of_its_segments_stops_the_import(tmp_path):
    src = tmp_path / "zh-en"
    src.mkdir()
    name = "GEMBA-GPT4-DA-refA"
    shutil.copy(GEMBA / f"{name}.seg.score", src / f"{name}.seg.score")
    lines = (GEMBA / f"{name}.sys.score").read_text(encoding="utf-8").splitlines()
    system, value = lines[0].split("\t")
    (src / f"{name}.sys.score").write_text("\n".join([f"{system}\t{float(value) + 0.01}", *lines[1:]]) + "\n",
                                           encoding="utf-8")
    with pytest.raises(DHPError, match="not the mean of its segment scores"):
        import_judgments("gemba", src, tmp_path / "run", data_dir=DATA)
    assert not (tmp_path / "run" / "segment_scores.parquet").exists()  # nothing written


def test_two_reference_variants_of_one_metric_are_two_judges(tmp_path):
    """Issue 35 item 6: GEMBA-GPT4-DA with and without the reference through import-judgments mtme, and a WMT22
    metric's refA and refB variants: distinct judges, each named with its variant; refB in its own view."""
    wmt = DATA / "wmt22"
    src = tmp_path / "zh-en"
    src.mkdir()
    for f in (GEMBA / "GEMBA-GPT4-DA-refA.seg.score", GEMBA / "GEMBA-GPT4-DA-src.seg.score",
              wmt / "metric-scores_zh-en" / "BERTScore-refA.seg.score",
              wmt / "metric-scores_zh-en" / "BERTScore-refB.seg.score"):
        shutil.copy(f, src / f.name)
    (tmp_path / "human-scores").mkdir()
    shutil.copy(MQM, tmp_path / "human-scores" / MQM.name)
    import_judgments("mtme", src, tmp_path / "run")
    m = methods.get("human_alignment")
    got = {(v.scope, v.measure): set(v.data["judge"]) for v in m.views(methods.read_tables(m, tmp_path / "run"))}
    assert got[("WMT22 zh-en vs MQM", "tau_b")] == {"GEMBA-GPT4-DA-refA", "GEMBA-GPT4-DA-src", "BERTScore-refA"}
    assert got[("WMT22 zh-en vs MQM, reference refB", "tau_b")] == {"BERTScore-refB"}
    refb = [v for v in m.views(methods.read_tables(m, tmp_path / "run"))
            if v.scope == "WMT22 zh-en vs MQM, reference refB"][0]
    assert "refB" not in set(refb.data["system"]) and "refA" in set(refb.data["system"])
