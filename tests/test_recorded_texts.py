"""The text loaders of the HANNA and FRANK views, on small files in the upstream formats made here (the real files
are large optional sets of the data registry; they are checked against upstream's git blob ids)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dhp.errors import DHPError
from dhp.recorded.texts import TEXT_FILES, check_hanna_join, git_blob_id, load_frank_texts, load_hanna_stories


def _hanna_csv(path, rows):
    header = ["Story ID", "Prompt", "Human", "Story", "Model", "Relevance", "Coherence", "Empathy", "Surprise",
              "Engagement", "Complexity", "Worker ID", "Assignment ID", "Work time in seconds", "Name"]
    pd.DataFrame(rows, columns=header).to_csv(path, index=False)


def _annotation(sid, model, rel, prompt="P, with a comma", story='He said "hi".\nThen left.'):
    return [sid, prompt, "human story", story, model, rel, 3, 3, 3, 3, 3, "W", "A", 10, "N"]


def test_hanna_stories_one_row_per_story_with_the_item_numbering_of_the_scores(tmp_path):
    p = tmp_path / "hanna_stories_annotations.csv"
    _hanna_csv(p, [_annotation(96 + 5, "BertGeneration", r) for r in (1, 2, 4)] +
               [_annotation(3, "Human", 5, prompt="Q")] * 3)
    with pytest.raises(DHPError) as e:  # not upstream's bytes
        load_hanna_stories(p)
    assert TEXT_FILES["hanna_stories_annotations.csv"]["url"] in e.value.fix
    s = load_hanna_stories(p, verify=False)
    assert s[["system", "item", "story_id"]].values.tolist() == [["Human", "3", 3], ["BertGeneration", "5", 101]]
    assert s.loc[1, "story"] == 'He said "hi".\nThen left.' and s.loc[1, "prompt"] == "P, with a comma"
    assert s.loc[1, "Relevance"] == pytest.approx(7 / 3)
    human = pd.DataFrame({"dataset": "hanna", "criterion": "Relevance", "system": ["BertGeneration", "Human"],
                          "item": ["5", "3"], "human": [7 / 3, 5.0]})
    assert check_hanna_join(s, human) == 2
    with pytest.raises(DHPError, match="differs"):
        check_hanna_join(s, human.assign(item=["3", "5"], system=["Human", "BertGeneration"]))


def test_hanna_story_id_of_another_system_is_refused(tmp_path):
    p = tmp_path / "hanna_stories_annotations.csv"
    _hanna_csv(p, [_annotation(300, "CTRL", 3)])  # 288..383 are GPT's stories (192..287 CTRL's)
    with pytest.raises(DHPError) as e:
        load_hanna_stories(p, verify=False)
    assert "row 1" in e.value.problem and "GPT" in e.value.problem


def test_frank_texts(tmp_path):
    p = tmp_path / "benchmark_data.json"
    recs = [{"hash": "h1", "model_name": "bart", "article": "A.", "summary": "S.", "reference": "R.", "split": "test"},
            {"hash": "h1", "model_name": "pgn", "article": "A.", "summary": "T.", "reference": "R.", "split": "valid"}]
    p.write_text(json.dumps(recs))
    t = load_frank_texts(p, verify=False)
    assert t[["system", "item", "split", "summary"]].values.tolist() == [["bart", "h1", "test", "S."],
                                                                       ["pgn", "h1", "valid", "T."]]
    p.write_text(json.dumps(recs + [{"hash": "h2", "model_name": "bart"}]))
    with pytest.raises(DHPError, match="record 3"):
        load_frank_texts(p, verify=False)


def test_git_blob_id_is_gits():
    assert git_blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"  # git hash-object of "hello\n"
