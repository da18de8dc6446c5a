"""Untrusted text stays text (issue 50, items 8-10): CSV cells a spreadsheet would run as formulas are neutralised
(numbers kept, read back as written), names become file names only through dhp.io.slug, docs table cells are
escaped; every bad file a user can give a reader is one DHPError naming the fix (a property test feeds random bytes
to each reader); a data file altered after its check is checked again before use."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dhp import batch, grid
from dhp.backends.openai_server import OpenAIBackend
from dhp.datasets import declared_files
from dhp.datasets.custom import load_custom
from dhp.errors import DHPError
from dhp.io import neutralise_cell, project_root, read_csv, restore_cell, slug, write_csv
from conftest import DATA, child_env, run_cli

EVIL = '=HYPERLINK("a/b")'
GOOD_CSV = "item_id,source,reference,task\n1,A text.,A reference.,summarization\n"


# ------------------------------------------------------------------------------------------------ CSV cells

def test_text_cells_are_neutralised_numbers_are_not_and_the_reader_gives_them_back(tmp_path):
    df = pd.DataFrame({"dataset": [EVIL, "+cmd", "-2+3", "@SUM(A1)", "\tx", "plain", "'=x", "-0.5"],
                       "value": [-0.5, 1.0, -2.0, 3.5, 0.0, -1e-12, 2.0, 4.0], "n": [-1, 2, 3, 4, 5, 6, 7, 8]})
    df[EVIL] = "col"  # a column name is a cell of the header row
    path = write_csv(df, tmp_path / "t.csv")
    text = path.read_text(encoding="utf-8")
    for line in text.splitlines()[1:-1]:  # the last row's "-0.5" is a number, kept as it is
        assert line.split(",")[0].lstrip('"')[:1] not in "=+-@\t", line  # no text cell starts a formula
    assert text.splitlines()[0].endswith(",\"'=HYPERLINK(\"\"a/b\"\")\"")
    raw = pd.read_csv(path)  # what a spreadsheet-like reader sees
    assert raw["dataset"].tolist()[:5] == ["'" + EVIL, "'+cmd", "'-2+3", "'@SUM(A1)", "'\tx"]
    assert raw["dataset"].iloc[6] == "''=x" and raw["dataset"].iloc[7] == "-0.5"  # a number as text: kept
    assert raw["value"].tolist() == df["value"].tolist() and raw["n"].tolist() == df["n"].tolist()  # numbers
    back = read_csv(path)
    pd.testing.assert_frame_equal(back.drop(columns="dataset"), df.drop(columns="dataset"))
    assert back["dataset"].tolist()[:7] == df["dataset"].tolist()[:7]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=12))
def test_neutralising_is_undone_exactly_and_leaves_no_formula(value):
    written = neutralise_cell(value)
    assert restore_cell(written) == value
    assert written[:1] not in ("=", "+", "-", "@", "\t", "\r") or re.fullmatch(r"[+-][\d.][\d.eE+-]*", written)


# ------------------------------------------------------------------------------------------------ file names

@pytest.mark.parametrize("name", [EVIL, "../../etc/passwd", "..", ".", "", "a\0b", "ä/ö", "x" * 500, ".hidden"])
def test_slug_is_one_safe_file_name(name, tmp_path):
    s = slug(name)
    assert s and len(s) <= 120 and "/" not in s and "\0" not in s and not s.startswith(".")
    assert slug(s) == s
    assert (tmp_path / f"heatmap_D_{s}.png").parent == tmp_path


def test_long_names_differ_by_their_hash():
    assert slug("x" * 200 + "a") != slug("x" * 200 + "b")


@pytest.mark.slow
def test_a_formula_dataset_name_runs_to_the_end_with_the_cell_neutralised(tmp_path):
    """`dhp run` on an own file whose dataset is =HYPERLINK("a/b") (a baseline judge: no model). Before: every call
    made, then a traceback at the figures (the "/" made a folder) and the raw formula in summary.csv."""
    rows = [{"item_id": f"a{i}", "task": "summarization", "dataset": EVIL,
             "source": f"The council met on day {i} to discuss the park. Residents asked for trees. It agreed.",
             "reference": f"On day {i} the council agreed to plant trees."} for i in range(3)]
    own = tmp_path / "mine.jsonl"
    own.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    run = tmp_path / "run"
    out = run_cli(["--dataset", str(own), "--n-items", "3", "--perturbations", "char_typo,control", "--judge",
                   "baseline:chrf_src", "--mode", "metric", "--n-null", "50", "--n-boot", "0", "--run-dir", str(run)],
                  prefix=["-m", "dhp", "run"])
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    for table in ("summary.csv", "discernment.csv"):
        text = (run / table).read_text(encoding="utf-8")
        assert '"\'=HYPERLINK(""a/b"")"' in text and '\n"=HYPERLINK' not in text
        assert set(read_csv(run / table)["dataset"]) == {EVIL}  # the project's reader gives the name back
    figures = sorted(p.name for p in (run / "figures").iterdir())
    assert "discernment__HYPERLINK_a_b_.png" in figures and "heatmap_D__HYPERLINK_a_b_.pdf" in figures
    assert all(p.is_file() for p in (run / "figures").rglob("*"))  # no folder made from the name


# ------------------------------------------------------------------------------------------------ docs tables

def _hooks():
    sys.path.insert(0, str(project_root() / "docs"))
    try:
        import hooks
    finally:
        sys.path.pop(0)
    return hooks


@pytest.mark.parametrize("judge", ["<img src=x onerror=alert(1)>", "<script>alert(1)</script>",
                                   "[click](javascript:alert(1))", "a|b & c"])
def test_docs_table_cells_are_text(tmp_path, monkeypatch, judge):
    import markdown

    hooks = _hooks()
    monkeypatch.setattr(hooks, "RESULTS", tmp_path)
    write_csv(pd.DataFrame({"judge": [judge], "value": [0.5], "view": ["dhp"]}), tmp_path / "leaderboard.csv")
    md = hooks.table("leaderboard.csv", ["judge", "value"], where={"view": "dhp"}, rename={"judge": "<b>judge</b>"})
    page = markdown.markdown(md, extensions=["tables", "attr_list"])
    assert "<img" not in page and "<script" not in page and "<a " not in page and "<b>" not in page
    assert ">0.50</td>" in page and page.count("<td") == 2  # one row of two cells: "|" stayed in its cell
    assert hooks.result("leaderboard.csv", "judge", view="dhp").startswith(("&lt;", "&#91;", "a|b &amp;"))
    import html as h
    cell = page.split("<td>")[1].split("</td>")[0]
    assert h.unescape(cell).replace("\\|", "|") == judge  # shown as the text it is


# ------------------------------------------------------------------------------------------------ own files

@pytest.mark.parametrize("raw,pattern", [
    ((GOOD_CSV).encode("utf-16"), r"is UTF-16 LE text .*byte-order mark.*iconv -f UTF-16 -t UTF-8"),
    ((GOOD_CSV).encode("utf-16-le"), r"looks like UTF-16 LE text without a byte-order mark"),
    ((GOOD_CSV).encode("utf-32"), r"is UTF-32 LE text"),
    ((GOOD_CSV + "2,Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e,ok,summarization\n").encode("latin-1"),
     r"line 3 contains bytes that are not UTF-8.*looks like cp1252.*iconv -f CP1252"),
    ((GOOD_CSV + "2,a\0b,ok,summarization\n").encode(), r"line 3 contains a NUL byte \(character 4"),
    ((GOOD_CSV + '2,"' + "x" * 200_000 + '",ok,summarization\n').encode(),
     r"line 3 is longer than the CSV reader's limit of 131,072 characters.*JSONL"),
])
def test_own_file_mistakes_name_the_right_fix(tmp_path, raw, pattern):
    p = tmp_path / "mine.csv"
    p.write_bytes(raw)
    with pytest.raises(DHPError, match=pattern) as e:
        load_custom(p)
    assert "latin1" not in str(e.value) or "cp1252" in pattern  # UTF-16 is never told to convert from latin-1
    assert "check the quoting" not in str(e.value)


# ------------------------------------------------------------------------------------------------ batch import

def _backend():
    return OpenAIBackend("smollm2-135m", "http://127.0.0.1:9/v1")


def _body(model="smollm2-135m"):
    return {"model": model, "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"},
                                         "finish_reason": "stop"}], "usage": {}}


def _read(tmp_path, lines, raw: bytes | None = None):
    p = tmp_path / "out.jsonl"
    p.write_bytes(raw if raw is not None else "".join(json.dumps(x) + "\n" for x in lines).encode())
    call = SimpleNamespace(keys=("k1",))
    return batch._read_results(p, _backend(), {"k1": call})


@pytest.mark.parametrize("line,problem", [
    ({"custom_id": ["k1"], "response": {"status_code": 200, "body": _body()}}, r"custom_id is a JSON list"),
    ({"custom_id": "k1", "response": "ok"}, r"response is a JSON str"),
    ({"custom_id": "k1", "response": {"status_code": 200, "body": "hi"}}, r"body is a JSON str"),
    ({"custom_id": "k1", "response": {"status_code": 200, "body": _body("gpt-4o")}},
     r"line 1: answered by model 'gpt-4o', not this run's judge model 'smollm2-135m'"),
])
def test_batch_lines_a_user_got_wrong_are_refused_naming_the_line(tmp_path, line, problem):
    problems, answers, _ = _read(tmp_path, [line])
    assert not answers and len(problems) == 1
    assert re.search(problem, problems[0]), problems


def test_batch_answers_of_the_model_and_its_dated_snapshot_are_kept(tmp_path):
    for model in ("smollm2-135m", "smollm2-135m-2024-08-06"):
        problems, answers, _ = _read(tmp_path, [{"custom_id": "k1",
                                                 "response": {"status_code": 200, "body": _body(model)}}])
        assert not problems and len(answers) == 1
    problems, _, _ = _read(tmp_path, [{"custom_id": "k1", "response": {"status_code": 200,
                                                                      "body": _body("smollm2-135m-instruct")}}])
    assert problems


def test_batch_file_in_latin1_is_one_clear_error(tmp_path):
    raw = (json.dumps({"custom_id": "k1", "response": {"status_code": 200, "body": _body()}})[:-2]
           + ', "note": "caf\u00e9"}}\n').encode("latin-1")
    with pytest.raises(DHPError, match=r"line 1 contains bytes that are not UTF-8"):
        _read(tmp_path, [], raw)


# ------------------------------------------------------------------------------------------------ grid YAML

def test_latin1_grid_yaml_is_one_clear_error(tmp_path):
    p = tmp_path / "g.yaml"
    p.write_bytes("methods: [dhp]\nrun_id: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(DHPError, match=r"line 2 contains bytes that are not UTF-8.*iconv"):
        grid.load_params(p)


# ------------------------------------------------------------------------------------------------ property test
# Random bad bytes to each reader: it loads or raises DHPError, never another exception type.

_SEEDS = [GOOD_CSV.encode(), b'{"item_id": "1", "source": "s", "reference": "r", "task": "summarization"}\n',
          b"methods: [dhp]\nrun_id: x\n", b'{"custom_id": "k1", "response": {"status_code": 200, "body": {}}}\n']
_bad_bytes = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda seed, cut, junk: seed[:cut] + junk + seed[cut:], st.sampled_from(_SEEDS),
              st.integers(0, 120), st.binary(max_size=8)),
    st.builds(lambda t: t.encode("utf-8", "surrogatepass"), st.text(max_size=120)),
    st.sampled_from([b"\xff\xfe" + x for x in _SEEDS] + [b"[" * 5000, b'{"a":' * 3000, b"- " * 3000,
                                                        b"x: 2024-13-01\n", b"\xef\xbb\xbf", b"\0" * 10]),
)
_FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_FAST
@given(raw=_bad_bytes, suffix=st.sampled_from([".csv", ".jsonl"]))
def test_own_file_reader_loads_or_raises_dhperror(tmp_path, raw, suffix):
    p = tmp_path / f"mine{suffix}"
    p.write_bytes(raw)
    try:
        load_custom(p, task="summarization")
    except DHPError:
        pass


@_FAST
@given(raw=_bad_bytes)
def test_batch_import_reader_loads_or_raises_dhperror(tmp_path, raw):
    try:
        _read(tmp_path, [], raw)
    except DHPError:
        pass


@_FAST
@given(raw=_bad_bytes)
def test_grid_yaml_reader_loads_or_raises_dhperror(tmp_path, raw):
    p = tmp_path / "g.yaml"
    p.write_bytes(raw)
    try:
        grid.load_params(p)
    except DHPError:
        pass


@pytest.mark.parametrize("text", ["?", "1: 2", "null: x"])
def test_a_grid_key_that_is_no_name_is_a_dhperror_naming_it(tmp_path, text):
    """Hypothesis found `?` (YAML's explicit key, parsed as {None: None}) reaching the model as a keyword: TypeError."""
    p = tmp_path / "g.yaml"
    p.write_text(text)
    with pytest.raises(DHPError, match="is not a parameter name"):
        grid.load_params(p)


# ------------------------------------------------------------------------------------------------ data files

REL = "criteria_hu2024/aspect_criteria.json"


@pytest.fixture
def own_root(tmp_path, monkeypatch):
    """A data root holding one declared file (a copy), and a per-user cache of its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("DHP_OFFLINE", "1")
    root = tmp_path / "root"
    (root / REL).parent.mkdir(parents=True)
    shutil.copy2(DATA / REL, root / REL)
    return root


def test_a_data_file_altered_after_its_check_is_checked_again_before_use(own_root):
    from dhp.datasets.criteria_hu2024 import load_criteria

    f = declared_files.files()[REL]
    assert len(load_criteria(data_dir=own_root)) > 0  # checked once, its size and mtime recorded
    p = own_root / REL
    data = p.read_bytes()
    i = data.index(b"Fluency")
    p.write_bytes(data[:i] + b"Fluentcy" + data[i + 8:])  # the same size, another mtime
    assert p.stat().st_size == f.bytes
    with pytest.raises(DHPError, match=rf"{REL}: .* sha256 [0-9a-f]{{64}}; expected .*sha256 {f.sha256}.*"
                                       r"changed after it was checked.*data fetch"):
        load_criteria(data_dir=own_root)
    with pytest.raises(DHPError, match="changed after it was checked"):
        declared_files.path(REL, own_root)  # every loader's route, not one loader's
    p.write_bytes(data)  # restored: used again
    assert len(load_criteria(data_dir=own_root)) > 0


def test_an_unchanged_data_file_is_not_read_again(own_root, monkeypatch):
    declared_files.path(REL, own_root)
    hashed = []
    monkeypatch.setattr(declared_files, "file_sha256", lambda p: hashed.append(p) or "x")
    declared_files._RECORDS.clear()  # a new process: the record is read from the per-user cache
    declared_files.path(REL, own_root)
    assert not hashed
    os.utime(own_root / REL, ns=(1, 1))  # touched: checked again (and the fake hash refuses it)
    with pytest.raises(DHPError, match="changed after it was checked"):
        declared_files.path(REL, own_root)
    assert hashed == [own_root / REL]
