"""Dataset loaders, selections, bring-your-own files, download and length statistics.

Reads the real files of the session's data root (conftest.DATA, filled by the data layer's fetch at session
start), and a synthetic Story Cloze file in the upstream layout (the real one is not openly licensed). Nothing
from the data files is written into this repository.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import pickle
import shutil
import threading
from pathlib import Path

import pandas as pd
import pytest

from dhp import datasets
from dhp.datasets import downloader, summeval, sumpubmed
from dhp.datasets.files import STORYCLOZE_REL
from dhp.text import detokenize_ptb, split_sentences
from dhp.errors import DHPError
from dhp.io import project_root
from dhp.schema import DATASET_TASK

from conftest import DATA, STORYCLOZE, TEST_SETS

FIXTURES = Path(__file__).parent / "fixtures"
AE_FIXTURE = FIXTURES / "ae_fixture.jsonl"
REAL = ["summeval", "sumpubmed", "storycloze", "pubmedqa", "wmt22_de_en", "wmt22_zh_en"]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for var in ("DHP_STORYCLOZE_PATH", "DHP_AE_PATH", "DHP_DATA_MIRROR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DHP_DATA_DIR", str(DATA))  # the session's data root, however the caller named it
    monkeypatch.setenv("DHP_OFFLINE", "1")  # a missing file is an error here, never a fetch


def test_the_data_root_holds_every_file_the_tests_read():
    # filled at session start (conftest); without it every loader test below is meaningless
    assert not datasets.declared_files.missing(datasets.declared_files.select(TEST_SETS), DATA, wrong_size=True)
    assert STORYCLOZE.is_file()


def _load(name, n_items=100, seed=0, **kw):
    if name == "storycloze":
        # the synthetic file is not the official one: checks off, and the loader says so
        kw.setdefault("path", STORYCLOZE)
        kw.setdefault("verify", False)
        with pytest.warns(datasets.DataChecksumWarning, match="sha256"):
            return datasets.load_dataset(name, n_items=n_items, seed=seed, **kw)
    if name == "answer_equivalence":
        # the synthetic fixture is not the official file: checks off, and the loader says so
        kw.setdefault("path", AE_FIXTURE)
        kw.setdefault("verify", False)
        with pytest.warns(datasets.DataChecksumWarning, match="not an official Answer Equivalence"):
            return datasets.load_dataset(name, n_items=n_items, seed=seed, **kw)
    return datasets.load_dataset(name, n_items=n_items, seed=seed, **kw)


def _check_schema(df, name, n, task=None):
    assert list(df.columns) == list(datasets.COLUMNS)
    assert len(df) == n
    for col in datasets.COLUMNS:
        assert all(isinstance(v, str) for v in df[col]), col
    assert df["item_id"].is_unique
    assert (df["dataset"] == name).all()
    assert (df["task"] == (task or DATASET_TASK[name])).all()
    assert (df["source"].str.strip() != "").all()
    assert (df["reference"].str.strip() != "").all()


# ----------------------------------------------------------------------------- loaders

@pytest.mark.parametrize("name", REAL)
def test_real_loaders_schema_and_rules(name):
    df = _load(name)
    _check_schema(df, name, 100)
    task = DATASET_TASK[name]
    if task == "translation":
        assert (df["src_lang"] == name.split("_")[1]).all() and (df["tgt_lang"] == "en").all()
        assert (df["reference"].str.len() > 300).all()
    else:
        assert (df["src_lang"] == "").all() and (df["tgt_lang"] == "").all()
    if task == "question_answering":
        assert (df["question"] != "").all() and (df["reference"].str.len() > 150).all()
    else:
        assert (df["question"] == "").all()
    if name == "storycloze":
        assert (df["wrong_ending"] != "").all() and (df["wrong_ending"] != df["reference"]).all()
    else:
        assert (df["wrong_ending"] == "").all()
    if name == "summeval":
        # detokenised: no PTB artefacts like " ." or " 's" or `` quotes
        assert not df["reference"].str.contains(r" [.,]| 's\b|``|''", regex=True).any()
        assert df["item_id"].str.match(r"(cnn|dm)-test-[0-9a-f]+$").all()
    if name == "wmt22_zh_en":
        assert df["item_id"].str.fullmatch(r"\d+").all()


def test_answer_equivalence_fixture():
    df = _load("answer_equivalence", n_items=5)
    _check_schema(df, "answer_equivalence", 5)
    # q3/q6 have short references, q1 appears twice (two rated candidates) -> five distinct items
    assert sorted(df["item_id"]) == ["q1_0", "q2_0", "q4_0", "q5_0", "q7_0"]
    assert (df["reference"].str.len() > 150).all() and (df["question"] != "").all()
    with pytest.raises(DHPError, match="only 5 items are eligible"):
        _load("answer_equivalence", n_items=6)


def test_answer_equivalence_checksum_enforced(tmp_path):
    # the fixture is not the official file: with verification on, it is refused
    with pytest.raises(DHPError, match=r"not an official Answer Equivalence file.*5,363,295 bytes"):
        datasets.load_dataset("answer_equivalence", n_items=2, path=AE_FIXTURE)
    # a folder is searched for the official file names
    (tmp_path / "ae_dev.jsonl").write_bytes(AE_FIXTURE.read_bytes())
    with pytest.warns(datasets.DataChecksumWarning):
        df = datasets.load_dataset("answer_equivalence", n_items=2, path=tmp_path, verify=False)
    assert len(df) == 2
    with pytest.raises(DHPError, match="No ae_dev.jsonl or ae_test.jsonl"):
        datasets.load_dataset("answer_equivalence", data_dir=tmp_path / "nothing")


# Story Cloze's record can only be checked against the official file, which no test may need (not openly
# licensed); test_an_unofficial_story_cloze_copy_is_selected_by_the_rule checks its rule on a synthetic copy.
@pytest.mark.parametrize("name", [n for n in REAL if n != "storycloze"])
def test_committed_selection_is_what_the_rule_computes(name):
    rec = json.loads((project_root() / "dhp" / "resources" / "selections" / f"{name}.json").read_text())
    assert rec["seed"] == 0 and len(rec["item_ids"]) == 100
    root = DATA
    files = {rel: root / rel for rel in datasets.dataset_files(name)}
    pool = datasets.POOLS[name](files)
    assert len(pool) == rec["pool_size"]
    assert datasets.select_ids([r["item_id"] for r in pool], 100, 0) == rec["item_ids"]
    # and the checksums recorded for the selection are those of the fetched files
    for rel, sha in rec["files"].items():
        assert hashlib.sha256((root / rel).read_bytes()).hexdigest() == sha


def test_an_unofficial_story_cloze_copy_is_selected_by_the_rule():
    # a copy that is not the official file: the recorded ids do not apply, the rule selects from the user's file
    rows = datasets.POOLS["storycloze"]({STORYCLOZE_REL: STORYCLOZE})
    assert len(rows) == len(pd.read_csv(STORYCLOZE))
    df = _load("storycloze", n_items=10, seed=3)
    assert list(df["item_id"]) == datasets.select_ids([r["item_id"] for r in rows], 10, 3)
    committed = json.loads((project_root() / "dhp" / "resources" / "selections" / "storycloze.json").read_text())
    assert not set(df["item_id"]) & set(committed["item_ids"])


def test_selection_texts_not_committed():
    # selections hold ids and hashes only (house rule): no reference text leaks into data/
    df = _load("summeval", n_items=3)
    blob = "".join(p.read_text() for p in (project_root() / "dhp" / "resources").rglob("*.json"))
    for ref in df["reference"]:
        assert ref[:40] not in blob


@pytest.mark.parametrize("name", ["summeval", "wmt22_zh_en", "pubmedqa", "answer_equivalence"])
def test_deterministic_and_prefix(name):
    small, full = _load(name, n_items=3), _load(name, n_items=5 if name == "answer_equivalence" else 100)
    pd.testing.assert_frame_equal(small, full.head(3))
    pd.testing.assert_frame_equal(_load(name, n_items=3), small)
    other = _load(name, n_items=3, seed=1)
    assert list(other["item_id"]) != list(small["item_id"])
    pd.testing.assert_frame_equal(other, _load(name, n_items=4, seed=1).head(3))


def test_pool_beyond_100_items_extends_the_selection():
    big = _load("wmt22_zh_en", n_items=150)
    assert list(big["item_id"][:100]) == list(_load("wmt22_zh_en")["item_id"])
    with pytest.raises(DHPError, match="only 224 items are eligible"):
        _load("wmt22_zh_en", n_items=225)
    for bad in (0, -1, 2.5, "10", True):
        with pytest.raises(DHPError, match="n_items"):
            _load("wmt22_zh_en", n_items=bad)


def test_unknown_dataset():
    with pytest.raises(DHPError, match="Unknown dataset 'cnn'.*load_custom"):
        datasets.load_dataset("cnn")


def test_summeval_reference_rule():
    files = {rel: DATA / rel for rel in datasets.dataset_files("summeval")}
    raw = json.loads(files["summeval/bartscore_summeval.json"].read_text())
    pool = {r["item_id"]: r for r in summeval.pool(files)}
    for doc_id, v in list(raw.items())[:20]:
        refs = [detokenize_ptb(r) for r in v["ref_summs"]]
        counts = [len(split_sentences(r)) for r in refs]
        chosen = refs.index(pool[doc_id]["reference"])
        assert counts[chosen] == max(counts) and counts.index(max(counts)) == chosen


def test_sumpubmed_section_parser():
    text = "BACKGROUND\nfirst  para .\n\nsecond para .\nRESULTS\nnot this .\n"
    assert sumpubmed.sumpubmed_section(text) == "first para .\nsecond para ."
    assert sumpubmed.sumpubmed_section(text, "RESULTS") == "not this ."
    assert sumpubmed.sumpubmed_section("RESULTS\nx\n") == ""


def test_wmt_de_en_items_are_whole_documents():
    df = _load("wmt22_de_en", n_items=5)
    docids = (DATA / "wmt22/docids/test.de-en.docids").read_text().split("\n")
    refs = (DATA / "wmt22/txt/generaltest2022.de-en.ref.A.en").read_text().split("\n")
    for doc, ref in zip(df["item_id"], df["reference"]):
        segs = [refs[i].strip() for i, d in enumerate(docids) if d == doc and refs[i].strip()]
        assert ref == " ".join(segs) and len(segs) > 1


# ----------------------------------------------------------------------------- user paths, checksums

def test_storycloze_needs_user_path(monkeypatch, tmp_path):
    with pytest.raises(DHPError, match="cs.rochester.edu/nlp/rocstories"):
        datasets.load_dataset("storycloze", n_items=2, data_dir=DATA)
    monkeypatch.setenv("DHP_STORYCLOZE_PATH", str(STORYCLOZE.parent))  # a folder holding the upstream file name
    with pytest.warns(datasets.DataChecksumWarning):
        via_env = datasets.load_dataset("storycloze", n_items=2, verify=False)
    pd.testing.assert_frame_equal(via_env, _load("storycloze", n_items=2))
    with pytest.raises(DHPError, match="not found"):
        datasets.load_dataset("storycloze", path=tmp_path / "missing.csv")


def test_storycloze_checksum_mismatch(tmp_path):
    with pytest.raises(DHPError, match="sha256.*verify=False"):  # the synthetic copy is not the official file
        datasets.load_dataset("storycloze", n_items=2, path=STORYCLOZE)
    bad = tmp_path / STORYCLOZE.name
    bad.write_bytes(STORYCLOZE.read_bytes() + b"\n")
    with pytest.raises(DHPError, match="sha256.*verify=False"):
        datasets.load_dataset("storycloze", n_items=2, path=bad)
    with pytest.warns(datasets.DataChecksumWarning):
        df = datasets.load_dataset("storycloze", n_items=2, path=bad, verify=False)
    assert len(df) == 2


def _copy_dataset(name, dest):
    for rel in datasets.dataset_files(name):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(DATA / rel, dest / rel)


def test_data_root_precedence_and_missing_files(monkeypatch, tmp_path):
    _copy_dataset("pubmedqa", tmp_path)
    monkeypatch.setenv("DHP_DATA_DIR", str(tmp_path))
    pd.testing.assert_frame_equal(datasets.load_dataset("pubmedqa", n_items=3), _load("pubmedqa", n_items=3, data_dir=DATA))
    assert datasets.data_root() == tmp_path and datasets.data_root(DATA) == DATA
    with pytest.raises(DHPError, match=r"(?s)summac_summeval\.json.*python -m dhp data fetch summeval"):
        datasets.load_dataset("summeval")  # not in DHP_DATA_DIR


def test_modified_data_file_is_detected(tmp_path):
    _copy_dataset("wmt22_zh_en", tmp_path)
    ref = tmp_path / "wmt22/txt/generaltest2022.zh-en.ref.A.en"
    ref.write_text(ref.read_text(encoding="utf-8").replace("the", "teh", 1), encoding="utf-8")
    with pytest.raises(DHPError, match="generaltest2022.zh-en.ref.A.en.*sha256"):
        datasets.load_dataset("wmt22_zh_en", data_dir=tmp_path)
    with pytest.warns(datasets.DataChecksumWarning):
        df = datasets.load_dataset("wmt22_zh_en", n_items=3, data_dir=tmp_path, verify=False)
    assert len(df) == 3


# ----------------------------------------------------------------------------- download

class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def serve():
    servers = []

    def start(directory):
        handler = functools.partial(_Quiet, directory=str(directory))
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_download_from_loopback_mirror(serve, tmp_path, monkeypatch):
    monkeypatch.delenv("DHP_OFFLINE")
    url = serve(DATA)  # the session's data root, in the data-root layout base_url expects
    names = ["summeval", "sumpubmed", "pubmedqa", "wmt22_de_en", "wmt22_zh_en"]
    got = datasets.download(tmp_path, names, base_url=url)
    assert len(got) == 2 + 200 + 1 + 3 + 3  # sumpubmed: only the committed selection's files
    for p in got:
        rel = p.relative_to(tmp_path).as_posix()
        assert p.read_bytes() == (DATA / rel).read_bytes()
    assert not list(tmp_path.rglob("*.tmp"))
    for name in names:
        pd.testing.assert_frame_equal(datasets.load_dataset(name, n_items=10, data_dir=tmp_path),
                                      datasets.load_dataset(name, n_items=10, data_dir=DATA))
    # other seeds need the whole SumPubMed pool, and the error (offline) says how to get it
    monkeypatch.setenv("DHP_OFFLINE", "1")
    with pytest.raises(DHPError, match="(?s)800 data file.*python -m dhp data fetch sumpubmed"):
        datasets.load_dataset("sumpubmed", seed=1, data_dir=tmp_path)
    monkeypatch.delenv("DHP_OFFLINE")
    # a second call finds everything in place and re-downloads nothing (server gone)
    assert datasets.download(tmp_path, names, base_url="http://127.0.0.1:9") == got


def test_download_rejects_corrupt_file(serve, tmp_path, monkeypatch):
    monkeypatch.delenv("DHP_OFFLINE")
    mirror = tmp_path / "mirror"
    _copy_dataset("pubmedqa", mirror)
    (mirror / "pubmedqa/ori_pqal.json").write_bytes(b"{}")
    dest = tmp_path / "dest"
    with pytest.raises(DHPError, match="sha256"):
        datasets.download(dest, ["pubmedqa"], base_url=serve(mirror))
    assert not (dest / "pubmedqa/ori_pqal.json").exists()
    assert not list(dest.rglob("*.tmp"))


def test_download_errors(serve, tmp_path, monkeypatch):
    monkeypatch.delenv("DHP_OFFLINE")
    with pytest.raises(DHPError, match="not openly licensed.*rocstories"):
        datasets.download(tmp_path, ["storycloze"])
    with pytest.raises(DHPError, match="404"):
        datasets.download(tmp_path, ["pubmedqa"], base_url=serve(tmp_path))
    with pytest.raises(DHPError, match="(?s)fetching .* failed.*python -m dhp data fetch pubmedqa"):
        datasets.download(tmp_path, ["pubmedqa"], base_url="http://127.0.0.1:9", timeout=5)


def test_upstream_urls_are_pinned_raw_github():
    for name in datasets.DATASETS:
        if name == "storycloze":
            with pytest.raises(DHPError, match="rocstories"):
                datasets.upstream_url(datasets.dataset_files(name)[0])
            continue
        for rel in datasets.dataset_files(name, sumpubmed="selection"):
            url = datasets.upstream_url(rel)
            assert url.startswith("https://raw.githubusercontent.com/")
            assert url.endswith(Path(rel).name) or url.endswith("data.pkl") or url.endswith("summeval.json")


def test_bartscore_pickle_conversion_reproduces_the_declared_json():
    # the fetch converts BARTScore's data.pkl to JSON; the result must hash like the declared copy
    obj = json.loads((DATA / "summeval/bartscore_summeval.json").read_text(encoding="utf-8"))
    blob = downloader._bartscore_pickle_to_json(pickle.dumps(obj))
    assert hashlib.sha256(blob).hexdigest() == datasets.declared_files.files()["summeval/bartscore_summeval.json"].sha256


def test_safe_unpickler_refuses_code():
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        downloader._bartscore_pickle_to_json(pickle.dumps({"a": Evil()}))


# ----------------------------------------------------------------------------- bring your own

def _write(tmp_path, name, content):
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content, encoding="utf-8")
    return p


def test_load_custom_csv_and_jsonl(tmp_path):
    csv_path = _write(tmp_path, "mine.csv",
                      'item_id,source,reference,task,notes\n'
                      'a,"An article,\nover two lines.",A summary.,summarization,x\n'
                      'b,Another article.,Another summary.,summarization,y\n')
    df = datasets.load_custom(csv_path)
    _check_schema(df, "mine", 2, task="summarization")
    assert df.loc[0, "source"] == "An article,\nover two lines."
    rows = [{"item_id": 1, "source": "Der Hund.", "reference": "The dog.", "src_lang": "de", "tgt_lang": "en"},
            {"item_id": 2, "source": "Die Katze.", "reference": "The cat.", "src_lang": "de", "tgt_lang": "en"}]
    jl = _write(tmp_path, "mt.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    df = datasets.load_custom(jl, task="translation", dataset="my_mt")
    assert list(df.columns) == list(datasets.COLUMNS)
    assert list(df["item_id"]) == ["1", "2"] and (df["dataset"] == "my_mt").all()
    assert (df["task"] == "translation").all() and (df["src_lang"] == "de").all()


@pytest.mark.parametrize("name,content,task,pattern", [
    ("nocol.csv", "item_id,source\n1,text\n", "summarization",
     r"nocol\.csv lacks required columns \['reference'\].*Fix: add columns"),
    ("dup.csv", "item_id,source,reference\n1,a,b\n2,c,d\n1,e,f\n", "summarization",
     r"dup\.csv row 3 \(line 4 of the file\): item_id '1' duplicates row 1 \(line 2 of the file\).*unique"),
    ("empty.csv", "item_id,source,reference\n1,a,b\n2,  ,d\n", "summarization",
     r"empty\.csv row 2 \(line 3 of the file\): source is empty.*Fix: fill in source"),
    ("multiline.csv", 'item_id,source,reference\n1,"a\nb\nc",x\n2,d,\n', "summarization",
     r"row 2 \(line 5 of the file\): reference is empty"),
    ("task.csv", "item_id,source,reference,task\n1,a,b,summarization\n2,c,d,poetry\n", None,
     r"task\.csv row 2 \(line 3 of the file\): unknown task 'poetry'.*question_answering"),
    ("notask.csv", "item_id,source,reference\n1,a,b\n", None, r"row 1 \(line 2 of the file\): no task.*task="),
    ("badtask.csv", "item_id,source,reference\n1,a,b\n", "poetry", r"Unknown task 'poetry' \(argument task=\)"),
    ("e.jsonl", '{"item_id": "1", "source": "a", "reference": "b"}\n\n{"item_id": "2", "source": null, "reference": "c"}\n',
     "summarization", r"e\.jsonl line 3: source is empty"),
    ("broken.jsonl", '{"item_id": "1", "source": "a", "reference": "b"}\n{"item_id": "2",\n', "summarization",
     r"broken\.jsonl line 2 is not valid JSON.*one JSON object per line"),
    ("arr.jsonl", '["1", "a", "b"]\n', "summarization", r"arr\.jsonl line 1 is a JSON list"),
    ("lack.jsonl", '{"item_id": "1", "source": "a"}\n', "summarization", r"lack\.jsonl line 1 lacks \['reference'\]"),
    ("data.txt", "item_id,source,reference\n", "summarization", r"data\.txt has extension '\.txt'.*CSV"),
    ("header_only.csv", "item_id,source,reference\n", "summarization", r"header_only\.csv has no data rows"),
    ("ragged.csv", "item_id,source,reference\n1,a,b,c\n", "summarization",
     r"row 1 \(line 2 of the file\) has 4 fields but the header has 3"),
])
def test_load_custom_rejects_bad_input(tmp_path, name, content, task, pattern):
    p = _write(tmp_path, name, content)
    with pytest.raises(DHPError, match=pattern):
        datasets.load_custom(p, task=task)


def test_load_custom_rejects_non_utf8_and_unreadable(tmp_path):
    p = _write(tmp_path, "latin.csv", "item_id,source,reference\n1,ok,ok\n2,caf".encode() + b"\xe9,x\n")
    with pytest.raises(DHPError, match=r"latin\.csv line 3 contains bytes that are not UTF-8.*iconv"):
        datasets.load_custom(p, task="summarization")
    with pytest.raises(DHPError, match=r"Cannot read .*nope\.csv: no such file"):
        datasets.load_custom(tmp_path / "nope.csv", task="summarization")
    with pytest.raises(DHPError, match="Cannot read"):
        datasets.load_custom(tmp_path, task="summarization")  # a folder, not a file


# ----------------------------------------------------------------------------- Table 2

def test_reference_lengths_and_comparison_arithmetic():
    table = pd.DataFrame([
        {**dict.fromkeys(datasets.COLUMNS, ""), "dataset": "storycloze", "item_id": "1",
         "reference": "He smiled. Then he left."},
        {**dict.fromkeys(datasets.COLUMNS, ""), "dataset": "storycloze", "item_id": "2",
         "reference": "She won the match."},
    ])
    lengths = datasets.reference_lengths(table)
    assert list(lengths.columns) == ["dataset", "item_id", "characters", "words", "sentences"]
    assert lengths["characters"].tolist() == [24, 18]
    assert lengths["words"].tolist() == [5, 4] and lengths["sentences"].tolist() == [2, 1]
    comp = datasets.table2_comparison(table).set_index("measure")
    assert comp.loc["characters", "ours"] == 21.0 and comp.loc["characters", "paper"] == 38.7
    assert comp.loc["sentences", "rel_diff"] == pytest.approx((1.5 - 1.0) / 1.0)
    assert (comp["n_items"] == 2).all() and (comp["paper_dataset"] == "storycloze").all()


def test_table2_on_real_selections():
    # four openly licensed selections, one per task but story completion (Story Cloze is user-supplied)
    table, skipped = datasets.load_many(["summeval", "sumpubmed", "wmt22_zh_en", "pubmedqa"])
    assert skipped == {}
    comp = datasets.table2_comparison(table)
    assert list(comp.columns) == ["dataset", "paper_dataset", "n_items", "measure", "ours", "paper", "rel_diff"]
    assert len(comp) == 12 and (comp["n_items"] == 100).all()
    assert comp.loc[comp["dataset"] == "pubmedqa", "paper_dataset"].eq("answer_equivalence").all()
    # the SummEval rule (most sentences, first on ties, detokenised) reproduces the paper's row
    se = comp[comp["dataset"] == "summeval"]
    assert (se["rel_diff"].abs() < 0.02).all(), se
    recomputed = datasets.reference_lengths(table).groupby("dataset")["characters"].mean()
    assert comp.set_index(["dataset", "measure"]).loc[("summeval", "characters"), "ours"] == recomputed["summeval"]


def test_load_many_reports_unavailable():
    table, skipped = datasets.load_many(["pubmedqa", "storycloze"], n_items=2)
    assert list(table["dataset"].unique()) == ["pubmedqa"]
    assert "rocstories" in skipped["storycloze"]
