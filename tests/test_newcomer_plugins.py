"""A newcomer's six extensions, one per kind, written here and NOT taken from docs/extending.md (so this test cannot
be tuned to the page): a judge backend that chats (``tally_nc:``), a perturbation of its own family WITHOUT weights,
a recorded source in a JSON layout, a pairwise strategy built from dhp.judging.blocks, a method over DHP's scores,
and a dataset pool over a local JSONL. They live in an installed-style plug-in package outside dhp (entry points of
each kind's group), so no file of dhp is edited. With them loaded:

- the registry-sensitive tests (test_weights, test_registries) pass beside them, in a subprocess pytest;
- ``extensions`` lists them; ``evaluate embedded --protocol checklist_nc --dry-run`` plans the strategy;
  ``run --method dhp --dataset nbites_nc`` runs on the pool, with the backend and the perturbation (default
  weights said in the manifest); ``import-judgments`` reads the source; the method runs on DHP's folder;
- a functools.partial registered under a taken name is refused.

The controls: the same commands with one kind's entry point left out each fail, naming what is unknown.
Data: a small synthetic JSONL (numbers in every summary), two recorded verdicts, written here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]

PLUGINS = {
    "dhp.backends": ("tally", '''
from dhp.backends.base import Backend, Completion, register_backend


class Tally(Backend):
    """Replies 1..5 from the prompt's length (a chat-only judge: no log-probabilities)."""

    supports_logprobs = False
    supports_loglikelihood = False
    deterministic = True

    def __init__(self, rest):
        self.identity, self.model = f"tally_nc:{rest}", "tally"

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            text = str(1 + len(r.messages[-1][1]) % 5)
            out.append(Completion(text, texts=[text] * r.n if r.n > 1 else None))
            if on_result:
                on_result(i, out[-1])
        return out


@register_backend("tally_nc", example="tally_nc:<anything>")
def make(rest, **options):
    return Tally(rest)
'''),
    "dhp.perturbations": ("swap", '''
import re

from dhp.perturb.catalog import perturbation


@perturbation("swap_numbers_nc", level="word", family="numbers_nc", tasks={"summarization": ("single",)},
              description="replace every number by another one")
def swap(text, ctx):
    return re.sub(r"\\d+", lambda m: str(int(m.group()) + 7), text), "numbers shifted by 7"
'''),
    "dhp.recorded": ("verdicts_json", '''
import json

import pandas as pd

from dhp.recorded.importers import RECORDED_MODE, importer, verdict_columns


@importer("verdicts_json_nc", suffixes=(".verdicts.json",), feeds=("decompose_aggregate",))
def read(f, ctx):
    t = pd.DataFrame(json.loads(f.data))
    t = t.assign(mode=RECORDED_MODE, strategy="json", aspects="", aspect_scores_1="", aspect_scores_2="",
                 weights="", f1=float("nan"), f2=float("nan"), failure="", source=f.label)
    return {"pairwise_verdicts.parquet": t[verdict_columns()]}
'''),
    "dhp.strategies": ("checklist", '''
from dhp.judging.blocks import ORDERS, chat, oriented, verdict_row
from dhp.judging.strategies import strategy


@strategy("checklist_nc")
def checklist(items, ctx):
    jobs = [(it, o) for it in items.itertuples() for o in ORDERS]
    replies = chat(ctx, [f"Checklist for: {it.instruction}\\nA: {oriented(it, o)[0]}\\nB: {oriented(it, o)[1]}\\n"
                         "Which passes more checks? Reply 1 or 2." for it, o in jobs], max_tokens=2)
    rows = []
    for (it, o), (text, why) in zip(jobs, replies):
        shown = "1" if text and int(text) % 2 else "2"
        verdict = shown if o == "12" else {"1": "2", "2": "1"}[shown]
        rows.append(verdict_row(it, "checklist_nc", o, verdict=verdict if text else None, failure=why))
    return rows
'''),
    "dhp.methods": ("drop_rate", '''
import pandas as pd

from dhp.methods import Method, Table, register


@register
class DropRate(Method):
    name, title, paper = "drop_rate_nc", "How often does a perturbation lower the score?", "none"
    modes = ("logprobs", "sample", "likelihood", "metric")
    requires = ("dhp",)
    produces = (Table("drop_rate_nc.csv", ("judge", "mode", "rate", "n"), "one row per judge and mode"),)

    def collect(self, config, judge=None):
        return {}

    def analyze(self, tables, config):
        s = tables["scores.parquet"]
        keys = ["judge", "mode", "item_id", "metric"]
        orig = s[s["perturbation"] == "original"].set_index(keys)["score"]
        pert = s[s["perturbation"] != "original"].join(orig.rename("orig"), on=keys).dropna(subset=["score", "orig"])
        out = [{"judge": j, "mode": m, "rate": float((g["score"] < g["orig"]).mean()), "n": len(g)}
               for (j, m), g in pert.groupby(["judge", "mode"])]
        return {"drop_rate_nc.csv": pd.DataFrame(out, columns=["judge", "mode", "rate", "n"])}
'''),
    "dhp.datasets": ("nbites", '''
import json

from dhp.datasets.files import dataset_pool

FILE = {path!r}


@dataset_pool("nbites_nc", task="summarization", files=[FILE], selection="every bite with a number in its gist")
def pool(files):
    rows = [json.loads(line) for line in files[FILE].read_text(encoding="utf-8").splitlines()]
    return [{{"item_id": r["id"], "source": r["text"], "reference": r["gist"]}} for r in rows
            if any(c.isdigit() for c in r["gist"])]
'''),
}

SOURCES = ["The council met on 3 May and approved 12 new schools for 2025 after a long debate about costs.",
           "A storm with winds of 90 km/h closed 4 harbours; 31 boats stayed in port until Monday evening.",
           "Researchers counted 250 frogs in 6 ponds, twice as many as in 2019, and 3 species were new.",
           "The museum sold 4000 tickets on its first day; 15 rooms show 300 paintings from 8 countries.",
           "Trains ran 20 minutes late on 2 lines as 5 signals failed near the station before 9 am."]


def _plugin(tmp: Path, name: str, leave_out: str | None = None) -> Path:
    """An installed-style plug-in package (module per kind + a .dist-info naming each in its entry-point group)."""
    base = tmp / name
    pkg = base / f"{name}_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    data = tmp / "nbites.jsonl"
    lines = []
    for group, (mod, code) in PLUGINS.items():
        text = code.format(path=str(data)) if group == "dhp.datasets" else code
        (pkg / f"{mod}.py").write_text(text.lstrip())
        if group != leave_out:
            lines.append(f"[{group}]\n{mod}_nc = {name}_pkg.{mod}\n")
    info = base / f"{name}_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("\n".join(lines))
    return base


def _inputs(tmp: Path) -> dict[str, Path]:
    (tmp / "nbites.jsonl").write_text("".join(json.dumps({"id": f"b{i}", "text": s, "gist": " ".join(s.split()[:9])})
                                              + "\n" for i, s in enumerate(SOURCES)))
    verdicts = tmp / "two.verdicts.json"
    verdicts.write_text(json.dumps([{"judge": "json:a", "subset": "Natural", "item_id": f"n{i}", "order": o,
                                     "verdict": v, "label": "1"} for i, v in enumerate("12") for o in ("12", "21")]))
    return {"verdicts": verdicts}


def _start(plugin: Path | None, *args: str) -> subprocess.Popen:
    path = os.pathsep.join([str(plugin)] * (plugin is not None) + [str(ROOT / "tests"), str(ROOT)])
    env = {**os.environ, "PYTHONPATH": path, "DHP_N_THREADS": "1", "MPLBACKEND": "Agg"}
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait(*procs):
    return [_done(p) for p in procs]


def _done(p):
    out, err = p.communicate(timeout=900)
    return p.returncode, out, err


def _run_dhp(plugin, run_dir):
    return _start(plugin, "-m", "dhp", "run", "--method", "dhp", "--dataset", "nbites_nc", "--n-items", "4",
                  "--judge", "tally_nc:1", "--mode", "sample", "--perturbations", "swap_numbers_nc,control",
                  "--n-boot", "0", "--n-null", "20", "--run-dir", str(run_dir))


def _plan(plugin, run_dir):
    return _start(plugin, "-m", "dhp", "evaluate", "embedded", "--protocol", "checklist_nc", "--dry-run",
                  "--run-dir", str(run_dir))


def _import(plugin, inputs, run_dir):
    return _start(plugin, "-m", "dhp", "import-judgments", "verdicts_json_nc", str(inputs["verdicts"]),
                  "--run-dir", str(run_dir))


PARTIAL = ("import functools\nfrom dhp.errors import DHPError\nfrom dhp.judging.strategies import STRATEGIES, strategy\n"
           "try:\n    strategy('checklist_nc')(functools.partial(STRATEGIES['checklist_nc']))\n"
           "except DHPError as e:\n    print('REFUSED', e)\n")


@pytest.mark.slow
def test_a_newcomers_six_plugins_work_beside_the_suite_and_each_fails_without_its_entry_point(tmp_path):
    inputs = _inputs(tmp_path)
    plugin = _plugin(tmp_path, "newcomer")
    runs = tmp_path / "runs"
    suite, listed, planned, dhp_run, imported, partial = _wait(
        _start(plugin, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", "-k",
               "not installed_plug_in", str(ROOT / "tests" / "test_weights.py"),
               str(ROOT / "tests" / "test_registries.py")),
        _start(plugin, "-m", "dhp", "extensions"),
        _plan(plugin, runs / "evaluate"),
        _run_dhp(plugin, runs / "dhp"),
        _import(plugin, inputs, runs / "recorded"),
        _start(plugin, "-c", PARTIAL))
    for rc, out, err in (suite, listed, planned, dhp_run, imported, partial):
        assert rc == 0, out[-3000:] + err[-3000:]
    assert " passed" in suite[1] and "failed" not in suite[1]
    for name in ("tally_nc", "swap_numbers_nc", "verdicts_json_nc", "checklist_nc", "drop_rate_nc", "nbites_nc"):
        assert name in listed[1], name
    assert "decompose_aggregate" in planned[1] and "LLMBar" in planned[1]
    disc = pd.read_csv(runs / "dhp" / "discernment.csv")
    assert "swap_numbers_nc" in set(disc["perturbation"]) and set(disc["judge"]) == {"tally_nc:1"}
    assert set(pd.read_parquet(runs / "dhp" / "dataset.parquet")["dataset"]) == {"nbites_nc"}
    manifest = json.loads((runs / "dhp" / "manifest.json").read_text())
    assert manifest["stages"]["dhp"]["expert_weights_defaults"] == [
        {"task": "summarization", "perturbation": "swap_numbers_nc", "rule": "equal weights (no votes declared)"}]
    assert set(pd.read_parquet(runs / "recorded" / "pairwise_verdicts.parquet")["judge"]) == {"json:a"}
    assert partial[1].startswith("REFUSED A pairwise strategy named 'checklist_nc' is already registered")

    (rc, out, err), = _wait(_start(plugin, "-m", "dhp", "run", "--method", "drop_rate_nc", "--judge", "recorded",
                                   "--run-dir", str(runs / "dhp")))
    assert rc == 0, out + err
    assert pd.read_csv(runs / "dhp" / "drop_rate_nc.csv")["judge"].tolist() == ["tally_nc:1"]

    # the controls: one kind's entry point left out, the command that kind serves fails, naming what is unknown
    without = {g: _plugin(tmp_path, f"no_{PLUGINS[g][0]}", leave_out=g) for g in PLUGINS}
    got = dict(zip(PLUGINS, _wait(
        _run_dhp(without["dhp.backends"], tmp_path / "c1"),
        _run_dhp(without["dhp.perturbations"], tmp_path / "c2"),
        _import(without["dhp.recorded"], inputs, tmp_path / "c3"),
        _plan(without["dhp.strategies"], tmp_path / "c4"),
        _start(without["dhp.methods"], "-m", "dhp", "run", "--method", "drop_rate_nc", "--judge", "recorded",
               "--run-dir", str(runs / "dhp")),
        _run_dhp(without["dhp.datasets"], tmp_path / "c6"))))
    expected = {"dhp.backends": "Unknown judge backend 'tally_nc'",
                "dhp.perturbations": "Unknown perturbation 'swap_numbers_nc'",
                "dhp.recorded": "invalid choice: 'verdicts_json_nc'",
                "dhp.strategies": "Unknown judge protocol(s) ['checklist_nc']",
                "dhp.methods": "Unknown method 'drop_rate_nc'",
                "dhp.datasets": "unknown dataset"}
    for group, (rc, out, err) in got.items():
        assert rc != 0 and expected[group] in err, (group, out[-2000:], err[-2000:])
