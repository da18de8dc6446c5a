"""A dataset pool is one file: its task, its selection rule and its files are declared on the pool
(``@dataset_pool(name, task=..., selection=..., files=...)``), with no edit to dhp.schema, the data registry or
the selections folder; a fetched file is declared with its URL and sha256 on the pool and checked; an unknown
dataset name is an error, never another dataset's files. Data: a small synthetic JSONL written here."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import threading

import pytest

from dhp.datasets import declared_files as data_registry
from dhp.datasets import load_dataset, load_items
from dhp.datasets.files import POOLS, dataset_files, dataset_pool, fetched
from dhp.datasets.selection import selection_rule
from dhp.errors import DHPError
from dhp.schema import DATASET_TASK

ROWS = [{"id": f"n{i}", "story": f"Story number {i} happened on a quiet street. " * 3, "gist": f"Gist {i} " * (i + 1)}
        for i in range(6)]


def _pool(files):
    key = next(iter(files))
    rows = [json.loads(line) for line in files[key].read_text().splitlines()]
    return [{"item_id": r["id"], "source": r["story"], "reference": r["gist"]} for r in rows if len(r["gist"]) > 10]


@pytest.fixture
def jsonl(tmp_path):
    p = tmp_path / "newsbites.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return p


def _register(name, **kw):
    dataset_pool(name, **kw)(_pool)
    return name


def test_a_local_pool_is_one_declaration(jsonl):
    name = _register("newsbites_test", task="summarization", selection="gists over 10 characters",
                     files=[str(jsonl)])
    try:
        table = load_dataset(name, n_items=3, seed=0)
        assert len(table) == 3 and set(table["task"]) == {"summarization"} and set(table["dataset"]) == {name}
        assert set(table["item_id"]) <= {f"n{i}" for i in range(1, 6)}  # n0's gist is too short: not eligible
        assert load_dataset(name, n_items=2, seed=0)["item_id"].tolist() == table["item_id"].tolist()[:2]
        assert DATASET_TASK[name] == "summarization" and selection_rule(name) == "gists over 10 characters"
        assert load_items(name, 2, 0)["item_id"].tolist() == table["item_id"].tolist()[:2]  # a run's route
    finally:
        POOLS.remove(name)
        DATASET_TASK.pop(name, None)


def test_a_pool_must_declare_its_task_and_files():
    with pytest.raises(DHPError, match=r"declares task None.*task=\.\.\.\) with one of"):
        dataset_pool("taskless_test", files=["x.jsonl"])
    with pytest.raises(DHPError, match="declares no files"):
        dataset_pool("fileless_test", task="summarization")
    with pytest.raises(DHPError, match="not 64 lowercase hex digits"):
        fetched("http://127.0.0.1/x", "abc")


def test_an_unknown_dataset_is_an_error_not_another_datasets_files():
    for call in (lambda: dataset_files("newsbites_nope"), lambda: load_dataset("newsbites_nope", n_items=2)):
        with pytest.raises(DHPError, match=r"Unknown dataset 'newsbites_nope'.*@dataset_pool"):
            call()


@pytest.fixture
def served(jsonl):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(jsonl.parent))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/{jsonl.name}", hashlib.sha256(jsonl.read_bytes()).hexdigest()
    server.shutdown()


def test_a_fetched_pool_file_is_declared_on_the_pool_and_checked(served, tmp_path, monkeypatch):
    url, sha = served
    monkeypatch.delenv("DHP_OFFLINE", raising=False)
    root = tmp_path / "root"
    name = _register("fetched_test", task="summarization", files={"fetched_test/items.jsonl": fetched(url, sha)})
    wrong = _register("wrong_test", task="summarization", files={"wrong_test/items.jsonl": fetched(url, "0" * 64)})
    try:
        table = load_dataset(name, n_items=2, data_dir=root)
        assert len(table) == 2 and (root / "fetched_test" / "items.jsonl").is_file()
        with pytest.raises(DHPError, match=r"expected sha256 0{64} \(its dataset pool\). Nothing was written"):
            load_dataset(wrong, n_items=2, data_dir=root)
        assert not (root / "wrong_test" / "items.jsonl").exists()
    finally:
        for n in (name, wrong):
            POOLS.remove(n)
            DATASET_TASK.pop(n, None)
            data_registry.sets().pop(n, None)
