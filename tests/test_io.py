"""dhp.io: the one atomic writer and the JSONL line reader every stage shares."""

from __future__ import annotations

import json
import stat

from dhp import batch
from dhp.io import jsonl_lines, write_bytes, write_text


def test_atomic_writes_leave_no_temporary_file_and_a_readable_result(tmp_path):
    text_path = write_text(tmp_path / "sub" / "a.json", "{}\n")
    bytes_path = write_bytes(tmp_path / "b.bin", b"\x00\x01")
    assert text_path.read_text(encoding="utf-8") == "{}\n" and bytes_path.read_bytes() == b"\x00\x01"
    assert stat.S_IMODE(text_path.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["a.json", "b.bin"]


def test_jsonl_lines_keep_unicode_line_separators_inside_records(tmp_path):
    records = [{"custom_id": "a", "text": "one\u2028two\u0085three"}, {"custom_id": "b", "text": "x"}]
    body = "\n".join(json.dumps(r, ensure_ascii=False) for r in records[:1]) + "\n\n" + json.dumps(records[1]) + "\n"
    assert [no for no, _ in jsonl_lines(body)] == [1, 3]
    path = tmp_path / "calls.jsonl"
    path.write_text(body, encoding="utf-8")
    assert batch.read_lines(path) == records


def test_command_line_paths_are_relative_to_the_current_directory(tmp_path, monkeypatch):
    """issue 41: `dhp ... --run-dir runs/mine` typed in another folder means that folder's runs/mine; a dataset
    named by its registered name stays a name, one given as a file becomes a path. Library calls keep resolve()'s
    project-root rule (notebooks run from notebooks/ and mean the project's runs/)."""
    from dhp.cli import _paths_from_cwd
    from dhp.io import from_cwd, project_root, resolve

    monkeypatch.chdir(tmp_path)
    assert from_cwd("runs/mine") == str(tmp_path / "runs" / "mine")
    assert from_cwd("/abs/x") == "/abs/x"
    assert resolve("runs/mine") == project_root() / "runs" / "mine"
    argv = ["run", "--dataset", "my_texts.csv", "--run-dir", "runs/mine", "--figures-dir=figs", "--n-items", "6"]
    assert _paths_from_cwd(argv) == ["run", "--dataset", str(tmp_path / "my_texts.csv"), "--run-dir",
                                     str(tmp_path / "runs" / "mine"), f"--figures-dir={tmp_path / 'figs'}",
                                     "--n-items", "6"]
    assert _paths_from_cwd(["run", "--dataset", "summeval"]) == ["run", "--dataset", "summeval"]
