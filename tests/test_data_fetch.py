"""A fresh machine: every input fetched on first need from a loopback mirror of the upstream URLs.

The mirror serves the session's data root (conftest.DATA, filled by the data layer) under the upstream layout
(``/<owner>/<repo>/<commit>/<path>``; the re-serialised BARTScore file as the data root holds it, or as a pickle),
with HOME, the caches and the data root in tmp_path.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import re
import socket
import subprocess
import sys
import threading
import urllib.parse
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from dhp.cli import main as cli
from dhp.datasets import declared_files
from dhp.errors import DHPError
from dhp.io import project_root

from conftest import DATA, TEST_SETS, child_env, run_cli
from servers import free_port


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _mirror_path(f: declared_files.DataFile) -> str:
    return f"/{f.repository}/{f.commit}/{f.upstream_path}"


class Mirror:
    """Loopback HTTP server of the declared files; ``changed`` serves other bytes for a path, ``drop`` cuts the
    connection half-way through a path's body (once per listed request)."""

    def __init__(self):
        self.files = {_mirror_path(f): DATA / f.rel for f in declared_files.files().values()
                      if f.repository and (DATA / f.rel).is_file()}
        self.hits: Counter = Counter()
        self.changed: dict[str, bytes] = {}
        self.drop: Counter = Counter()
        mirror = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                path = urllib.parse.unquote(self.path)
                mirror.hits[path] += 1
                local = mirror.files.get(path)
                if local is None:
                    self.send_error(404)
                    return
                data = mirror.changed.get(path) or local.read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if mirror.drop[path] > 0:
                    mirror.drop[path] -= 1
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def path_of(self, rel: str) -> str:
        return _mirror_path(declared_files.files()[rel])

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def mirror():
    m = Mirror()
    yield m
    m.close()


@pytest.fixture
def fresh(monkeypatch, tmp_path, mirror):
    """A machine with nothing: HOME and caches in tmp_path, the loopback mirror."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("DHP_DATA_MIRROR", mirror.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    for var in ("DHP_DATA_DIR", "DHP_OFFLINE", "DHP_STORYCLOZE_PATH", "DHP_AE_PATH"):
        monkeypatch.delenv(var, raising=False)
    return home


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(declared_files._TMP_PREFIX) or p.suffix in (".tmp", ".part")]


def test_demo_files_fetched_once_into_the_user_cache_then_never_again(fresh, mirror, capsys):
    root = declared_files.data_root()
    assert root.is_relative_to(fresh / ".cache")  # the per-user cache, inside the temporary HOME
    demo = declared_files.select(declared_files.demo_sets())
    assert {"summeval", "summeval_annotators", "llmbar", "llmbar_judgments", "llmbar_prompts", "wmt22_mqm_zh_en",
            "wmt22_metric_scores_zh_en", "criteria_hu2024", "hanna", "frank"} <= {f.set for f in demo}
    assert not {f.set for f in demo} & {"storycloze", "sumpubmed", "hanna_texts", "frank_texts"}

    assert cli(["data", "fetch", "--for", "demo"]) == 0
    assert f"fetched {len(demo)} file(s)" in capsys.readouterr().out
    for f in demo:
        assert _sha(root / f.rel) == f.sha256, f.rel
    # each declared file fetched once (three data-root files are copies of LLMBar's one LICENSE)
    assert mirror.hits == Counter(mirror.path_of(f.rel) for f in demo)
    assert not _leftovers(root)

    before = sum(mirror.hits.values())
    assert cli(["data", "fetch", "--for", "demo"]) == 0
    assert "fetched 0 file(s)" in capsys.readouterr().out
    assert sum(mirror.hits.values()) == before  # nothing fetched the second time
    assert cli(["data", "list"]) == 0
    listed = capsys.readouterr().out
    assert f"data root: {root}" in listed and "llmbar_judgments" in listed and "353/353" in listed
    assert cli(["data", "list", "--verify"]) == 0 and "all present files match" in capsys.readouterr().out
    (root / "hanna/LICENSE").write_bytes((root / "hanna/LICENSE").read_bytes().replace(b"MIT", b"XYZ", 1))
    assert cli(["data", "list", "--verify"]) == 1 and "1 differ: hanna/LICENSE" in capsys.readouterr().out


def test_a_changed_file_is_refused_and_nothing_is_written(fresh, mirror, tmp_path, monkeypatch):
    monkeypatch.setenv("DHP_DATA_DIR", str(tmp_path / "root"))
    rel = "criteria_hu2024/aspect_criteria.json"
    f = declared_files.files()[rel]
    changed = (DATA / rel).read_bytes().replace(b"Fluency", b"Fluentness", 1)
    mirror.changed[mirror.path_of(rel)] = changed
    with pytest.raises(DHPError) as e:
        declared_files.path(rel)
    msg = str(e.value)
    assert rel in msg and f.sha256 in msg and hashlib.sha256(changed).hexdigest() in msg
    root = tmp_path / "root"
    assert not (root / rel).exists() and not _leftovers(root)
    # the unchanged mirror gives the file
    del mirror.changed[mirror.path_of(rel)]
    assert _sha(declared_files.path(rel)) == f.sha256


def test_a_connection_dropped_mid_file_leaves_no_partial_file_and_a_rerun_completes(fresh, mirror, tmp_path,
                                                                                    monkeypatch):
    root = tmp_path / "root"
    monkeypatch.setenv("DHP_DATA_DIR", str(root))
    rels = ["summeval_annotators/M11_outputs_annotations.jsonl", "summeval_annotators/M8_outputs_annotations.jsonl"]
    mirror.drop[mirror.path_of(rels[0])] = 1
    with pytest.raises(DHPError) as e:
        declared_files.ensure(["summeval_annotators"])
    msg = str(e.value)
    assert "python -m dhp data fetch summeval_annotators" in msg and rels[0] in msg
    assert not (root / rels[0]).exists() and not _leftovers(root)
    assert all(_sha(p) == declared_files.files()[p.relative_to(root).as_posix()].sha256
               for p in root.rglob("*") if p.is_file())  # whatever is there is complete
    declared_files.ensure(["summeval_annotators"])
    for f in declared_files.sets()["summeval_annotators"].files:
        assert _sha(root / f.rel) == f.sha256


def test_offline_is_one_error_listing_every_missing_file_and_the_command(fresh, mirror, tmp_path, monkeypatch):
    monkeypatch.setenv("DHP_DATA_DIR", str(tmp_path / "root"))
    monkeypatch.setenv("DHP_OFFLINE", "1")
    with pytest.raises(DHPError) as e:
        declared_files.ensure(["wmt22_zh_en", "criteria_hu2024/aspect_criteria.json", "llmbar_judgments"])
    msg = str(e.value)
    for f in declared_files.sets()["wmt22_zh_en"].files:
        assert f.rel in msg
    assert "criteria_hu2024/aspect_criteria.json" in msg
    assert "llmbar_judgments/ (353 files, all of set llmbar_judgments)" in msg
    assert "python -m dhp data fetch wmt22_zh_en criteria_hu2024 llmbar_judgments" in msg
    assert not mirror.hits and not (tmp_path / "root").exists()


def test_data_fetch_names_sets_paths_and_folders(fresh, mirror, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DHP_DATA_DIR", str(tmp_path / "root"))
    assert cli(["data", "fetch", "criteria_hu2024", "llmbar/Natural.json", "wmt22/mqm_zh-en/system-outputs"]) == 0
    got = sorted(p.relative_to(tmp_path / "root").as_posix() for p in (tmp_path / "root").rglob("*") if p.is_file())
    assert got == sorted(["criteria_hu2024/LICENSE", "criteria_hu2024/aspect_criteria.json", "llmbar/Natural.json"]
                         + [r for r in declared_files.files() if r.startswith("wmt22/mqm_zh-en/system-outputs/")])
    assert cli(["data", "fetch", "no_such_set"]) == 2
    assert "No declared data file or set is named 'no_such_set'" in capsys.readouterr().err


def test_a_users_changed_file_is_reported_not_replaced_until_data_fetch(fresh, mirror, tmp_path, monkeypatch):
    from dhp.datasets.llmbar import load_llmbar

    root = tmp_path / "root"
    monkeypatch.setenv("DHP_DATA_DIR", str(root))
    (root / "llmbar").mkdir(parents=True)
    (root / "llmbar" / "Natural.json").write_text('[{"input": "x", "output_1": "a", "output_2": "b", "label": "1"}]')
    with pytest.raises(DHPError, match="sha256"):
        load_llmbar("Natural")
    assert not mirror.hits  # the loader never overwrites what is there
    assert cli(["data", "fetch", "llmbar/Natural.json"]) == 0  # the explicit command replaces a wrong size
    assert _sha(root / "llmbar" / "Natural.json") == declared_files.files()["llmbar/Natural.json"].sha256
    assert len(load_llmbar("Natural")) == 100


def test_story_cloze_is_never_fetched(fresh):
    with pytest.raises(DHPError, match="not openly licensed.*DHP_STORYCLOZE_PATH"):
        declared_files.ensure(["storycloze"])


def test_each_methods_loaders_run_from_a_fresh_data_root(fresh, mirror, tmp_path, monkeypatch):
    """The demo's loaders and imports, each fetching what it reads, give the tables the session's data root gives."""
    from dhp.datasets import criteria_hu2024, llmbar, load_dataset, summeval_annotators, wmt22_human
    from dhp.recorded import import_judgments

    root = tmp_path / "root"
    monkeypatch.setenv("DHP_DATA_DIR", str(root))
    got = {
        "summeval": lambda d: load_dataset("summeval", n_items=3, data_dir=d),
        "llmbar": lambda d: llmbar.load_llmbar(["Natural", "Adversarial"], n_items=2, data_dir=d),
        "ratings": lambda d: summeval_annotators.load_ratings(d),
        "means": lambda d: summeval_annotators.load_expert_means(d),
        "mqm": lambda d: wmt22_human.load_mqm_zh_en(d, systems=["refB"]),
        "da": lambda d: wmt22_human.load_da("zh-en", d),
        "criteria": lambda d: criteria_hu2024.load_criteria(data_dir=d),
    }
    for name, load in got.items():
        pd.testing.assert_frame_equal(load(None), load(DATA), obj=name)
    # the recorded judgments the leaderboard imports, from the fetched folders (one subset / one metric here)
    natural = declared_files.path("llmbar_judgments/LLMBar/Natural/evaluators/GPT-4")
    report = import_judgments("llmbar", natural, tmp_path / "run")
    assert report.files and all(f["upstream"].startswith("github.com/princeton-nlp/LLMBar@900616b")
                                for f in report.files)
    bleu = declared_files.path("wmt22/metric-scores_zh-en/BLEU-refA.seg.score")
    assert import_judgments("mtme", bleu, tmp_path / "run", lp="zh-en").files
    # LLMBar's prompt templates are read at run time from the data root
    assert declared_files.path("llmbar_prompts").joinpath("prompts").is_dir()
    assert mirror.hits == Counter(mirror.path_of(p.relative_to(root).as_posix())
                                  for p in root.rglob("*") if p.is_file())  # each file once
    assert not _leftovers(root)


def test_data_root_order(fresh, tmp_path, monkeypatch):
    cache = Path(os.environ["XDG_CACHE_HOME"]) / "dhp" / "datasets"
    assert declared_files.data_root() == cache
    # no folder beside the project is looked at, whatever it holds (the development machines' copy was, once)
    assert not hasattr(declared_files, "_dev_root") and "shared" not in Path(declared_files.__file__).read_text()
    monkeypatch.setenv("DHP_DATA_DIR", str(tmp_path / "mine"))
    assert declared_files.data_root() == tmp_path / "mine"
    assert declared_files.data_root(tmp_path / "arg") == tmp_path / "arg"


def test_the_data_root_holds_each_declared_file_with_its_size_and_sha256():
    declared = declared_files.files()
    present = {rel: DATA / rel for rel in declared if (DATA / rel).is_file()}
    for rel, p in present.items():
        assert (p.stat().st_size, _sha(p)) == (declared[rel].bytes, declared[rel].sha256), rel
    absent = {rel for rel in declared if rel not in present}
    # what the tests read is there (conftest fetched it); only user-supplied and optional sets may be absent
    assert not {declared[r].set for r in absent} & set(TEST_SETS)
    assert {declared[r].set for r in absent} <= {n for n, s in declared_files.sets().items() if s.optional}
    for f in declared.values():  # pinned to full commit hashes
        assert f.repository is None or len(f.commit) == 40, f.rel


def test_the_upstream_pickle_order_converts_to_the_declared_json():
    import json
    import pickle

    from dhp.datasets.downloader import _bartscore_pickle_to_json

    rel = "summeval/bartscore_summeval.json"
    data = json.loads((DATA / rel).read_text(encoding="utf-8"))
    # upstream's data.pkl holds "sys_summs" before "ref_summ"
    upstream = {k: {a: v[a] for a in ("src", "ref_summs", "sys_summs", "ref_summ")} for k, v in data.items()}
    assert hashlib.sha256(_bartscore_pickle_to_json(pickle.dumps(upstream))).hexdigest() == \
        declared_files.files()[rel].sha256


def test_the_upstream_pickle_is_checked_then_re_serialised(fresh, mirror, tmp_path, monkeypatch):
    import dataclasses
    import json
    import pickle

    root = tmp_path / "root"
    monkeypatch.setenv("DHP_DATA_DIR", str(root))
    rel = "summeval/bartscore_summeval.json"
    f = declared_files.files()[rel]
    data = json.loads((DATA / rel).read_text(encoding="utf-8"))
    blob = pickle.dumps({k: {a: v[a] for a in ("src", "ref_summs", "sys_summs", "ref_summ")} for k, v in data.items()})
    mirror.changed[mirror.path_of(rel)] = blob
    # not the declared upstream pickle (a stand-in built from the data root's copy): refused, nothing written
    with pytest.raises(DHPError) as e:
        declared_files.path(rel)
    assert f.upstream_sha256 in str(e.value) and hashlib.sha256(blob).hexdigest() in str(e.value)
    assert not (root / rel).exists() and not _leftovers(root)
    # declared as the upstream pickle, it is converted into the data root's exact bytes
    monkeypatch.setitem(declared_files.files(), rel, dataclasses.replace(
        f, upstream_sha256=hashlib.sha256(blob).hexdigest(), upstream_bytes=len(blob)))
    assert _sha(declared_files.path(rel)) == f.sha256


def test_docs_data_md_is_generated_from_the_registry():
    page = (project_root() / "docs" / "data.md").read_text(encoding="utf-8")
    assert page == declared_files.markdown(), "docs/data.md is stale: run `python -m dhp data doc`"


# ------------------------------------------------------------------------------------------------ a user's CLI run

def _serve_mirror(root: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """scripts/serve_data_mirror.py on a free loopback port, serving ``root`` in the upstream layout; its request
    log goes to ``log``."""
    proc = subprocess.Popen([sys.executable, str(project_root() / "scripts" / "serve_data_mirror.py"), str(root),
                             "--port", "0"], stdout=subprocess.PIPE, stderr=log.open("w"), text=True,
                            env=child_env())
    line = proc.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:\d+", line)
    if found is None:
        proc.kill()
        raise AssertionError(f"the mirror did not start: {line!r} {log.read_text()}")
    return proc, found.group(0)


def test_child_processes_keep_the_callers_home_data_root_mirror_and_offline(tmp_path, monkeypatch):
    """conftest.child_env, the environment of every CLI, pipeline and notebook process the tests start: the child
    reads the caller's data root and fetches from the caller's source (`data list` prints the root it uses)."""
    settings = {"HOME": str(tmp_path / "home"), "DHP_DATA_DIR": str(tmp_path / "root"),
                "DHP_DATA_MIRROR": "http://127.0.0.1:9", "DHP_OFFLINE": "1"}
    for k, v in settings.items():
        monkeypatch.setenv(k, v)
    env = child_env()
    assert {k: env.get(k) for k in settings} == settings
    r = run_cli(["data", "list"], env=env, prefix=["-m", "dhp"])
    assert r.returncode == 0 and f"data root: {tmp_path / 'root'}" in r.stdout, r.stdout + r.stderr


RUN = ["run", "--method", "dhp", "--dataset", "summeval", "--n-items", "2", "--judge", "baseline:rouge_l_src",
       "--mode", "metric", "--perturbations", "char_typo", "--n-boot", "0"]


@pytest.mark.slow
def test_a_cli_run_in_an_empty_home_sends_requests_only_to_the_loopback_mirror(tmp_path):
    """`python -m dhp` as a user runs it: HOME and the data root empty, the inputs served by a loopback mirror of
    the session's data root. Every request reaches the mirror (its log); any other would go to a proxy that is a
    closed loopback port, and fail the run (shown below with the mirror unset)."""
    home, root, log = tmp_path / "home", tmp_path / "data", tmp_path / "mirror.log"
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there: a request beyond loopback fails at once
    base = {k: v for k, v in child_env().items() if k not in ("XDG_CACHE_HOME", "DHP_OFFLINE", "DHP_DATA_MIRROR")}
    base |= {"HOME": str(home), "DHP_DATA_DIR": str(root), "DHP_DATA_TIMEOUT": "10", "no_proxy": "127.0.0.1",
             "NO_PROXY": "127.0.0.1", **{k: dead for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}}
    proc, url = _serve_mirror(DATA, log)
    try:
        env = {**base, "DHP_DATA_MIRROR": url}
        r = run_cli(["data", "fetch", "criteria_hu2024"], env=env, prefix=["-m", "dhp"])
        assert r.returncode == 0, r.stderr[-2000:]
        r = run_cli([*RUN, "--run-dir", str(tmp_path / "run")], env=env, prefix=["-m", "dhp"])  # fetches summeval
        assert r.returncode == 0, r.stderr[-2000:]
        assert (tmp_path / "run" / "scores.parquet").is_file()
        served = log.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    fetched = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    want = {f.rel for f in declared_files.select(["criteria_hu2024", "summeval/summac_summeval.json",
                                            "summeval/bartscore_summeval.json"])}
    assert set(fetched) == want
    requests = re.findall(r"^GET (\S+) 200$", served, flags=re.M)
    assert sorted(requests) == sorted(_mirror_path(declared_files.files()[rel]) for rel in fetched)  # each once
    assert not (home / ".cache" / "dhp" / "datasets").exists()  # the data root named, not the per-user cache

    # the control: without the mirror the same run goes for raw.githubusercontent.com, and the dead proxy stops it
    r = run_cli([*RUN, "--run-dir", str(tmp_path / "upstream")], prefix=["-m", "dhp"],
                env={**base, "DHP_DATA_DIR": str(tmp_path / "data2")})
    assert r.returncode != 0 and "raw.githubusercontent.com" in r.stderr
    assert "python -m dhp data fetch summeval" in r.stderr
    # offline, no mirror: the fetch command, no request at all
    r = run_cli([*RUN, "--run-dir", str(tmp_path / "offline")], prefix=["-m", "dhp"],
                env={**base, "DHP_DATA_DIR": str(tmp_path / "data3"), "DHP_OFFLINE": "1"})
    assert r.returncode != 0 and "DHP_OFFLINE is set" in r.stderr and "python -m dhp data fetch summeval" in r.stderr
    assert not (tmp_path / "data3").exists() and log.read_text() == served


def _peak_downloads(src: Path, dest: Path, meet_s: float) -> tuple[list, int]:
    """Fetch LLMBar's six files from a loopback server with ``src``'s layout; the first two requests wait (up to
    ``meet_s``) until both are in flight. Returns (files fetched, most requests in flight at once)."""
    import functools

    chosen = declared_files.select(["llmbar"])
    state = {"now": 0, "peak": 0, "n": 0}
    lock, both = threading.Lock(), threading.Barrier(2, timeout=meet_s)

    class Counting(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802 (http.server's name)
            with lock:
                state["now"] += 1
                state["n"] += 1
                state["peak"] = max(state["peak"], state["now"])
                first_two = state["n"] <= 2
            try:
                if first_two:
                    try:
                        both.wait()
                    except threading.BrokenBarrierError:  # one download at a time: the other never came
                        pass
                super().do_GET()
            finally:
                with lock:
                    state["now"] -= 1

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Counting, directory=str(src)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        got = declared_files.fetch(chosen, dest, base_url=f"http://127.0.0.1:{server.server_address[1]}",
                                   progress=False)
    finally:
        server.shutdown()
        server.server_close()
    return got, state["peak"]


def test_files_are_downloaded_several_at_a_time(tmp_path, monkeypatch):
    """A data set is hundreds of small files: they are fetched FETCH_THREADS at a time, each still checked and
    placed whole. Control: one thread at a time never has two requests in flight."""
    src = declared_files.data_root()
    declared_files.fetch(declared_files.select(["llmbar"]), src)  # the tests' data root, from the mirror
    got, peak = _peak_downloads(src, tmp_path / "a", meet_s=120)
    assert len(got) == 6 and peak >= 2
    assert not declared_files.missing(declared_files.select(["llmbar"]), tmp_path / "a")
    monkeypatch.setattr(declared_files, "FETCH_THREADS", 1)
    got, peak = _peak_downloads(src, tmp_path / "b", meet_s=1)
    assert len(got) == 6 and peak == 1
