"""The method and protocol registries: a method of your own runs on a run folder like the built-ins, the built-ins
are reachable by name, judgments already in a run folder are analysed with the judge "recorded", and a method that
breaks its declared contract is refused with nothing written."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dhp import methods
from dhp.analysis.report_card import card_row
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


@pytest.fixture
def registered():
    """Register test methods, and remove them again afterwards."""
    added = []

    def add(cls):
        methods.register(cls)
        added.append(cls.name)
        return cls

    yield add
    for name in added:
        methods._REGISTRY.pop(name, None)


def test_own_method_reads_and_writes_the_run_folder(tmp_path, registered):
    @registered
    class MeanDrop(methods.Method):
        name = "mean_drop_test"
        requires = ("dhp",)  # reads DHP's scores.parquet; a table is declared by the one method that owns it
        produces = (methods.Table("mean_drop_test.csv", ("judge", "mode", "perturbation", "drop"), "drops"),)

        def analyze(self, tables, config):
            s = tables["scores.parquet"]
            m = s.groupby(["judge", "mode", "perturbation"])["score"].mean().rename("mean").reset_index()
            orig = m[m["perturbation"] == "original"].set_index(["judge", "mode"])["mean"]
            m["drop"] = [orig[(j, md)] - v for j, md, v in zip(m["judge"], m["mode"], m["mean"])]
            return {"mean_drop_test.csv": m.drop(columns="mean")}

        def card(self, tables):
            t = tables["mean_drop_test.csv"]
            return pd.DataFrame([card_row(r["judge"], r["mode"], self.name, "drop", r["perturbation"], r["drop"])
                                 for r in t.to_dict("records")])

    write_parquet(_scores(), tmp_path / "scores.parquet")
    paths = methods.run("mean_drop_test", run_dir=str(tmp_path), judge="recorded")
    got = pd.read_csv(paths["mean_drop_test.csv"]).set_index("perturbation")["drop"]
    assert got["char_typo"] == pytest.approx(1.5) and got["control"] == 0
    card = methods.report_card(tmp_path)
    assert set(card.loc[card["method"] == "mean_drop_test", "status"]) == {"ok"}
    assert "mean_drop_test" in methods.names()


def test_dhp_on_recorded_scores_matches_the_direct_call(tmp_path):
    from dhp.analysis.discernment import discernment

    write_parquet(_scores(), tmp_path / "scores.parquet")
    paths = methods.run("dhp", run_dir=str(tmp_path), judge="recorded", n_boot=0, n_null=10, figures=False)
    disc = pd.read_csv(paths["discernment.csv"])
    direct = discernment(_scores()).table
    assert disc.set_index("perturbation")["D"].to_dict() == pytest.approx(direct.set_index("perturbation")["D"].to_dict())
    assert (tmp_path / "summary.csv").is_file()


def test_registry_errors_name_the_fix(tmp_path, registered):
    with pytest.raises(DHPError, match="Unknown method 'nope'"):
        methods.get("nope")
    with pytest.raises(DHPError, match="holds no judgments"):
        methods.run("dhp", run_dir=str(tmp_path), judge="recorded")

    @registered
    class Forgetful(methods.Method):
        name = "forgetful_test"
        collects = (methods.Table("forgetful_in.csv", ("judge", "mode", "x"), "in"),)
        produces = (methods.Table("a.csv", ("judge", "mode", "x"), "a"),)

        def analyze(self, tables, config):
            return {"a.csv": pd.DataFrame({"x": [1]}), "b.csv": pd.DataFrame({"x": [2]})}

    pd.DataFrame({"judge": ["j"], "mode": ["m"], "x": [1]}).to_csv(tmp_path / "forgetful_in.csv", index=False)
    with pytest.raises(DHPError, match=r"undeclared tables \['b.csv'\]"):
        methods.run("forgetful_test", run_dir=str(tmp_path), judge="recorded")
    assert not (tmp_path / "a.csv").exists()  # nothing half-written

    with pytest.raises(DHPError, match=r"declares \['a.csv', 'forgetful_in.csv'\], which method 'forgetful_test' "
                                       r"owns.*requires = \('forgetful_test',\)"):
        methods.register(type("Copycat", (Forgetful,), {"name": "copycat_test"}))  # one owner per table

    @registered
    class Careless(Forgetful):
        name = "careless_test"
        collects = (methods.Table("careless_in.csv", ("judge", "mode", "x"), "in"),)
        produces = (methods.Table("careless_a.csv", ("judge", "mode", "x"), "a"),)

        def analyze(self, tables, config):
            return {"careless_a.csv": pd.DataFrame({"x": [1]})}  # no judge and mode columns

    pd.DataFrame({"judge": ["j"], "mode": ["m"], "x": [1]}).to_csv(tmp_path / "careless_in.csv", index=False)
    with pytest.raises(DHPError, match=r"without columns \['judge', 'mode'\]"):
        methods.run("careless_test", run_dir=str(tmp_path), judge="recorded")
    with pytest.raises(DHPError, match="needs a name"):
        methods.register(type("Nameless", (methods.Method,), {}))


def test_collected_tables_accumulate_judges(tmp_path):
    """Writing one judge's rows keeps the other judges' rows (a run folder holds live and recorded judges)."""
    m = methods.get("dhp")
    a, b = _scores(), _scores().assign(judge="k", score=lambda d: d["score"] - 1)
    methods.write_tables(m, {"scores.parquet": a}, tmp_path)
    methods.write_tables(m, {"scores.parquet": b}, tmp_path)
    methods.write_tables(m, {"scores.parquet": a.assign(score=2.0)}, tmp_path)  # j again: replaces j only
    both = pd.read_parquet(tmp_path / "scores.parquet")
    assert sorted(set(both["judge"])) == ["j", "k"] and len(both) == 2 * len(a)
    assert (both.loc[both["judge"] == "j", "score"] == 2.0).all()
    assert both.loc[both["judge"] == "k", "score"].tolist() == b["score"].tolist()


def test_protocols_are_registered_by_name():
    from dhp.judging import PROTOCOLS, compare_pairs, protocol, score_perturbed

    assert PROTOCOLS["pointwise"] is score_perturbed and PROTOCOLS["pairwise"] is compare_pairs
    assert {"aspects", "strategies"} <= set(PROTOCOLS)
    with pytest.raises(DHPError, match="already registered"):
        protocol("pairwise")(lambda table, judge: table)


def test_dual_perspective_analyzes_judgments_in_the_run_folder(tmp_path):
    from dhp.analysis import dual_perspective as dp

    targets = pd.DataFrame({"target_id": list("abcdef"), "aspect": ["coherence"] * 4 + ["fluency"] * 2,
                            "human_rating": [1, 2, 4, 5, 3, 3], "judge_score": [1.2, 2.0, 3.9, float("nan"), 3.0, 4.0],
                            "judge_rating": [1, 2, 4, float("nan"), 3, 4], "rating_rule": "expected",
                            "failure": ["", "", "", "no score", "", ""]}).assign(judge="j:1", mode="logprobs")
    steps = pd.DataFrame({"source_id": ["s"] * 5, "aspect": ["coherence"] * 3 + ["fluency"] * 2,
                          "step": [0, 1, 2, 0, 1], "score": [4.0, 3.0, 3.0, 2.0, float("nan")],
                          "failure": ""}).assign(judge="j:1", mode="logprobs")
    write_parquet(targets, tmp_path / "global_targets.parquet")
    write_parquet(steps, tmp_path / "chain_scores.parquet")
    paths = methods.run("dual_perspective", run_dir=str(tmp_path), judge="recorded", figures=False)
    kappa = pd.read_csv(paths["global_kappa.csv"])
    local = pd.read_csv(paths["local_accuracy.csv"])
    expected = dp.global_kappa(targets)
    assert list(kappa.columns[:2]) == ["judge", "mode"] and set(kappa["judge"]) == {"j:1"}
    assert kappa["n"].tolist() == expected["n"].tolist() == [3, 2]
    assert np.allclose(kappa["kappa"], expected["kappa"], equal_nan=True)
    assert local.set_index("aspect")["accuracy"].to_dict() == {"coherence": 0.5}  # the tie counts as a miss


# ---------------------------------------------------------------- one duplicate rule (dhp.extensions), no hole


def test_a_partial_or_lambda_under_a_taken_name_is_refused_and_a_rerun_replaces_itself():
    import functools

    from dhp.judging import PROTOCOLS, gemba_score, protocol
    from dhp.judging.strategies import STRATEGIES, strategy

    before = PROTOCOLS["gemba:DA"]
    # every gemba: entry is a partial of gemba_score; one made here is another registration, not a rerun
    with pytest.raises(DHPError, match=r"'gemba:DA' is already registered .*registered in dhp\.judging\).*"
                                       r"registered in test_registries\) registers it again"):
        protocol("gemba:DA")(functools.partial(gemba_score, protocol="gemba:DA"))
    with pytest.raises(DHPError, match="already registered"):
        protocol("pointwise")(lambda table, judge: table)
    assert PROTOCOLS["gemba:DA"] is before  # nothing replaced

    def cell():  # a notebook cell run twice: the same module registers the same definition again
        return strategy("rerun_test")(lambda items, ctx: [])

    try:
        first = cell()
        second = cell()
        assert STRATEGIES["rerun_test"] is second is not first
    finally:
        STRATEGIES.remove("rerun_test")


def test_a_clash_found_while_discovering_fails_only_the_name_it_concerns(tmp_path, monkeypatch):
    from dhp.extensions import REGISTRIES, Registry

    pkg = tmp_path / "clash_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for mod in ("a", "b"):  # two files (an in-tree one and a dropped-in plug-in) take the name "same"
        (pkg / f"{mod}.py").write_text("import functools\nfrom clash_pkg_reg import REG\n"
                                       f"REG.add('same', functools.partial(print, {mod!r}))\n"
                                       f"REG.add('only_{mod}', functools.partial(print, {mod!r}))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("clash thing", "clash_pkg")
    import types
    monkeypatch.setitem(__import__("sys").modules, "clash_pkg_reg", types.SimpleNamespace(REG=reg))
    try:
        assert list(reg) == ["only_a", "only_b"]  # the other names work
        with pytest.raises(DHPError) as err:
            reg.lookup("same")
        msg = str(err.value)
        assert msg.count("Fix:") == 1 and "registered by 2 definitions" in msg
        assert "registered in clash_pkg.a" in msg and "registered in clash_pkg.b" in msg
        assert reg.conflicts() == {"same": [o for o in msg.split(": ", 1)[1].split(". Fix")[0].split("; ")]}
    finally:
        REGISTRIES.pop("clash thing", None)


def test_an_installed_plug_in_clashing_with_an_in_tree_name_breaks_only_that_name(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "clash_plugin").mkdir()
    (tmp_path / "clash_plugin" / "__init__.py").write_text("")
    (tmp_path / "clash_plugin" / "typo.py").write_text(
        "from dhp.perturb import perturbation\n"
        "perturbation('char_typo', level='character', tasks={'summarization': ('single',)})("
        "lambda text, ctx: (text.upper(), ''))\n")
    info = tmp_path / "clash_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: clash-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[dhp.perturbations]\ntypo = clash_plugin.typo\n")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{root}"}
    code = ("from dhp import methods; from dhp.perturb.catalog import get; print(len(methods.names()), "
            "get('char_deletion').name); get('char_typo')")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    from dhp import methods

    # every method still registered (their count read here, not typed: a new method is no clash)
    assert out.returncode != 0 and f"{len(methods.names())} char_deletion" in out.stdout, out.stdout + out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert "The perturbation name 'char_typo' is registered by 2 definitions" in last and last.count("Fix:") == 1


def test_help_texts_list_the_registries_and_no_family_is_special_cased_by_prefix():
    import argparse

    from dhp.backends import BACKENDS, register_backend
    from dhp.backends.base import run_options
    from dhp.config import RunParams, add_arguments
    from dhp.leaderboard import LeaderboardParams
    from dhp.recorded import IMPORTERS, importer

    @register_backend("ollama_help_test", example="ollama_help_test:<model>@<url>", accepts=("allow_insecure_key",))
    def _make(rest, **options):
        return options

    importer("json_help_test", suffixes=(".json",), default="x/y.json")(lambda f, ctx: {})
    try:
        def help_of(model, flag):
            ap = argparse.ArgumentParser()
            add_arguments(ap, model)
            return next(a.help for a in ap._actions if flag in a.option_strings)

        assert "ollama_help_test:<model>@<url>" in help_of(RunParams, "--judge")
        assert "openai:<model>[@<base_url>]" in help_of(RunParams, "--judge")
        assert "json_help_test" in help_of(LeaderboardParams, "--recorded")
        # the run-level option goes to the families that declare it, whatever their prefix
        assert run_options("ollama_help_test:m@http://h", allow_insecure_key=True) == {"allow_insecure_key": True}
        assert run_options("openai:m@http://h", allow_insecure_key=True) == {"allow_insecure_key": True}
        assert run_options("embedded", allow_insecure_key=True) == {}
        assert run_options("openai:m", allow_insecure_key=False) == {}
    finally:
        BACKENDS.remove("ollama_help_test")
        IMPORTERS.remove("json_help_test")
