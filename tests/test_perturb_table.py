"""The perturbed table: schema, original rows, determinism (also across processes), stability
under n_items, audit, and bad inputs. Uses the synthetic items in tests/fixtures/perturb."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dhp.errors import DHPError
from dhp.perturb import COLUMNS, audit, diff_html, examples_html, methods_table, perturb, verify

MM, S = ("minor", "major"), ("single",)
# The paper's Table 2 written out here (not read from the registry), plus the negative control.
TABLE2 = {
    "summarization": {"char_deletion": MM, "char_typo": MM, "fictional_entities": MM, "grammatical_errors": MM,
                      "sentence_reorder": MM, "rewrite_insert": MM, "control": S},
    "story_completion": {"char_deletion": S, "char_typo": S, "fictional_entities": S, "grammatical_errors": S,
                         "random_ending": S, "wrong_ending": S, "control": S},
    "question_answering": {"char_deletion": MM, "char_typo": MM, "fictional_entities": MM,
                           "grammatical_errors": MM, "random_answer": S, "control": S},
    "translation": {"char_deletion": MM, "char_typo": MM, "word_deletion": MM, "fictional_entities": MM,
                    "grammatical_errors": MM, "control": S},
}
from dhp.schema import DATASET_TASK

FIXTURE = Path(__file__).parent / "fixtures" / "perturb" / "synthetic_items.json"


def items(name: str) -> pd.DataFrame:
    rows = json.loads(FIXTURE.read_text())[name]
    lang = {"wmt22_de_en": ("de", "en")}.get(name, ("", ""))
    return pd.DataFrame(
        [
            {"dataset": name, "task": DATASET_TASK[name], "item_id": r["item_id"], "source": "",
             "reference": r["reference"], "question": "", "wrong_ending": r.get("wrong_ending", ""),
             "src_lang": lang[0], "tgt_lang": lang[1]}
            for r in rows
        ]
    )


ALL = pd.concat([items(n) for n in ("summeval", "storycloze", "pubmedqa", "wmt22_de_en")], ignore_index=True)


@pytest.fixture(scope="module")
def table():
    return perturb(ALL, seed=0)


def test_schema_and_one_row_per_item_method_severity(table):
    assert list(table.columns) == COLUMNS
    assert not table.duplicated(["dataset", "item_id", "perturbation", "severity"]).any()
    for ds, g in table.groupby("dataset"):
        expected = 1 + sum(len(sev) for sev in TABLE2[DATASET_TASK[ds]].values())
        assert (g.groupby("item_id").size() == expected).all()
    assert set(table["status"]) <= {"ok", "skipped", "failed"}
    assert set(table["level"]) <= {"character", "word", "sentence", "none"}
    assert set(table["severity"]) <= {"minor", "major", "single", "none"}
    assert table.loc[table.status != "ok", "text"].isna().all()
    assert (table.loc[table.status != "ok", "reason"] != "").all()
    assert (table.loc[table.status == "ok", "reason"] == "").all()


def test_original_and_control_rows(table):
    ref = dict(zip(ALL.item_id, ALL.reference))
    orig = table[table.perturbation == "original"]
    assert len(orig) == len(ALL)
    assert (orig[["level", "severity", "method", "status"]] == ["none", "none", "none", "ok"]).all().all()
    assert all(t == ref[i] for i, t in zip(orig.item_id, orig.text))
    ctrl = table[(table.perturbation == "control") & (table.status == "ok")]
    assert len(ctrl) == len(ALL)
    assert (ctrl.level == "none").all() and (ctrl.severity == "single").all()
    for i, t in zip(ctrl.item_id, ctrl.text):  # same words and punctuation, other layout: its own judge call
        assert t != ref[i] and t.split() == ref[i].split()
        assert "\n" in t


def test_every_method_of_table2_is_produced(table):
    for ds in ALL.dataset.unique():
        got = set(zip(table[table.dataset == ds].perturbation, table[table.dataset == ds].severity))
        want = {(p, s) for p, sevs in TABLE2[DATASET_TASK[ds]].items() for s in sevs}
        assert got - {("original", "none")} == want
        assert want <= got
        for (p, s) in want:
            ok = table[(table.dataset == ds) & (table.perturbation == p) & (table.severity == s)]
            assert (ok.status == "ok").any(), (ds, p, s)


def test_audit_verifies_every_rule_row(table):
    a = audit(table, ALL)
    assert (a.n_rows == a.n_ok + a.n_skipped + a.n_failed).all()
    assert (a.n_failed == 0).all()
    ok = a[a.n_ok > 0]
    assert (ok.pct_verified == 100.0).all(), ok[ok.pct_verified < 100]
    # k comes from the single k table.
    row = a[(a.dataset == "summeval") & (a.perturbation == "char_deletion") & (a.severity == "major")]
    assert row.k.item() == "50"
    assert row.mean_edit_distance.item() == 50.0


def test_verify_catches_a_wrong_row(table):
    bad = table.copy()
    i = bad.index[(bad.perturbation == "char_deletion") & (bad.status == "ok")][0]
    bad.loc[i, "text"] = bad.loc[i, "text"][:-3]  # deleting more than k
    v = verify(bad, ALL)
    assert not v.loc[i, "verified"]
    assert v.drop(index=i).query("status == 'ok'").verified.all()


def test_random_and_wrong_endings(table):
    ref = dict(zip(ALL.item_id, ALL.reference))
    wrong = dict(zip(ALL.item_id, ALL.wrong_ending))
    r = table[table.perturbation == "random_ending"]
    assert all(t != ref[i] and t in ref.values() for i, t in zip(r.item_id, r.text))
    w = table[table.perturbation == "wrong_ending"]
    assert all(t == wrong[i] for i, t in zip(w.item_id, w.text))


def test_same_seed_same_table_other_seed_differs(table):
    again = perturb(ALL, seed=0)
    pd.testing.assert_frame_equal(table, again)
    other = perturb(ALL, seed=1)
    assert not other.text.equals(table.text)


def test_rows_do_not_depend_on_n_items(table):
    small = perturb(ALL[ALL.dataset == "summeval"].head(2), seed=0)
    key = ["dataset", "item_id", "perturbation", "severity"]
    merged = small.merge(table, on=key, suffixes=("_small", "_all"))
    assert len(merged) == len(small)
    assert (merged.text_small.fillna("") == merged.text_all.fillna("")).all()


def test_global_random_is_untouched():
    random.seed(1)
    a = random.random()
    random.seed(1)
    perturb(ALL.head(3), seed=0)
    assert random.random() == a


def test_byte_identical_parquet_across_processes(tmp_path):
    code = (
        "import sys, json, pandas as pd\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_perturb_table import ALL\n"
        "from dhp.perturb import perturb\n"
        "from dhp.io import write_parquet\n"
        "write_parquet(perturb(ALL, seed=3), sys.argv[1])\n"
    )
    paths = [tmp_path / "a.parquet", tmp_path / "b.parquet"]
    for n, p in enumerate(paths):
        # Different hash salts: nothing may depend on Python's hash().
        subprocess.run([sys.executable, "-c", code, str(p)], check=True, timeout=120,
                       env={**os.environ, "PYTHONHASHSEED": str(n + 1)})
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_restricting_perturbations():
    t = perturb(items("summeval"), perturbations=["char_typo"])
    assert set(t.perturbation) == {"original", "char_typo"}


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"perturbations": ["char_teleport"]}, "Unknown perturbation"),
        ({"perturbations": ["wrong_ending"]}, "not defined for dataset"),
        ({"perturber": 42}, "perturber must be"),
        ({"perturber": ""}, "Empty perturber"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, match):
    with pytest.raises(DHPError, match=match) as e:
        perturb(items("summeval"), **kwargs)
    assert "Fix:" in str(e.value)


def test_bad_tables_raise_clear_errors():
    df = items("summeval")
    with pytest.raises(DHPError, match="Unknown dataset"):
        perturb(df.assign(dataset="imaginary_set").drop(columns=["task"]))
    with pytest.raises(DHPError, match="Unknown task"):
        perturb(df.assign(dataset="imaginary_set", task="poetry"))
    with pytest.raises(DHPError, match="lacks column"):
        perturb(df.drop(columns=["reference"]))
    with pytest.raises(DHPError, match="no rows"):
        perturb(df.iloc[0:0])
    with pytest.raises(DHPError, match="duplicate"):
        perturb(pd.concat([df, df]))
    with pytest.raises(DHPError, match="DataFrame"):
        perturb([{"dataset": "summeval"}])


def test_own_dataset_uses_its_task_and_that_tasks_k():
    own = perturb(items("summeval").assign(dataset="my_news"), perturbations=["char_deletion"])
    ref = perturb(items("summeval"), perturbations=["char_deletion"])
    assert set(own["dataset"]) == {"my_news"}
    # Same task -> same methods and k (summeval's), so the edit summaries agree row for row.
    assert own["edits"].tolist() == ref["edits"].tolist()
    assert (audit(own)["pct_verified"].dropna() == 100).all()


def test_empty_text_and_short_texts_are_recorded_skips():
    df = items("summeval").head(2).copy()
    df.loc[0, "reference"] = "   "
    df.loc[1, "reference"] = "Tiny."
    t = perturb(df)
    empty = t[t.item_id == df.item_id[0]]
    assert (empty.status == "skipped").all() and (empty.reason == "empty reference text").all()
    tiny = t[(t.item_id == df.item_id[1]) & ~t.perturbation.isin(["original", "control"])]
    # A one-sentence, four-letter text can only be rewritten-and-inserted once.
    ok = tiny[tiny.status == "ok"]
    assert list(zip(ok.perturbation, ok.severity)) == [("rewrite_insert", "minor")]
    skipped = tiny[tiny.status == "skipped"]
    assert len(skipped) == len(tiny) - 1 and skipped.reason.str.len().gt(10).all()


def test_methods_table_matches_registry():
    m = methods_table()
    assert set(m.dataset) == set(DATASET_TASK)
    assert m[(m.dataset == "sumpubmed") & (m.perturbation == "char_typo")].k.tolist() == [20, 100]
    assert m[(m.dataset == "storycloze") & (m.perturbation == "char_deletion")].severity.tolist() == ["single"]


def test_diff_html_marks_changes(table):
    h = diff_html("the cat sat", "the dog sat")
    assert "<del" in h and "cat" in h and "<ins" in h and "dog" in h
    assert "&lt;b&gt;" in diff_html("<b>", "<i>")  # escaped
    page = examples_html(table)
    shown = table[(table.status == "ok") & (table.perturbation != "original")]
    n_methods = len(shown.groupby(["perturbation", "severity", "method"]))
    assert page.count("<tr>") == 1 + n_methods  # a header row plus one example per method
