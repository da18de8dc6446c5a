"""A protocol identity that means it (issue 35 item 4): an LLMBar identity covers the template, the message format,
the decoding and the answer rule. Each recorded judge's rows get the identity of ITS config (config/<judge>/...):
PaLM2's CoT has its own answer rule, LLaMA2 and Falcon got their own text formats and no temperature, PaLM2 one
text prompt; a live judge (GPT-4's config) is "the same protocol" only as GPT-4, ChatGPT and ChatGPT-0301."""

from __future__ import annotations

import io

import pandas as pd

from dhp.analysis.decomposition import correctness_units, llmbar_differences, protocol_of
from dhp.evaluate import _print_board
from dhp.judging.strategies import LLMBAR_CONFIG_JUDGE, llmbar_prompts_dir, llmbar_protocol
from dhp.plots.leaderboard import _protocol_note


def _configs():
    root = llmbar_prompts_dir() / "config"
    return [(j.name, f.stem) for j in sorted(root.iterdir()) if j.is_dir() for f in sorted(j.glob("*.json"))]


def test_every_recorded_judges_identity_is_its_configs():
    configs = _configs()
    assert len(configs) == 65
    for judge, strategy in configs:
        derived = llmbar_protocol(strategy, judge_config=judge).identity  # read from the data root's config
        recorded = protocol_of(strategy, f"LLMBar/Natural/evaluators/{judge}/{strategy}/result.json", judge)
        assert derived == recorded, (judge, strategy)
    same = {j for j, s in configs if protocol_of(s, f"LLMBar/Natural/evaluators/{j}/{s}/result.json", j)
            == llmbar_protocol(s).identity}
    assert same == {"GPT-4", "ChatGPT", "ChatGPT-0301"}


def test_palm2_cot_llama2_and_falcon_say_how_they_differ():
    assert "own answer rule" in llmbar_differences("PaLM2", "CoT")[0]
    assert not any("answer rule" in d for d in llmbar_differences("PaLM2", "Vanilla"))
    for judge in ("LLaMA2", "Falcon"):
        d = llmbar_differences(judge, "Vanilla")
        assert any("message format" in x for x in d) and any("no temperature" in x for x in d)
    assert llmbar_differences(LLMBAR_CONFIG_JUDGE, "CoT") == () == llmbar_differences("ChatGPT", "CoT")


def test_a_live_judge_shares_a_view_but_not_a_protocol_with_palm2(tmp_path):
    live = llmbar_protocol("CoT").identity
    rows = []
    for judge, source in (("live", live), ("GPT-4", "LLMBar/Natural/evaluators/GPT-4/CoT/result.json"),
                          ("PaLM2", "LLMBar/Natural/evaluators/PaLM2/CoT/result.json")):
        strategy = "llmbar:CoT" if judge == "live" else "CoT"
        rows += [{"judge": judge, "mode": "m", "item_id": f"Natural-{i}", "subset": "Natural", "strategy": strategy,
                  "order": o, "verdict": "1", "label": "1", "source": source} for i in range(3) for o in ("12", "21")]
    u = correctness_units(pd.DataFrame(rows)).drop_duplicates("judge").set_index("judge")
    assert set(u["strategy"]) == {"CoT"}  # one view
    assert u.at["live", "protocol"] == u.at["GPT-4", "protocol"] != u.at["PaLM2", "protocol"]
    note = _protocol_note(pd.DataFrame({"protocol": list(u["protocol"]), "recorded": [False, True, True]}))
    flat = " ".join(note.split())  # the note is wrapped to the panel's width
    assert "not the same protocol" in flat and "PaLM2: own answer rule" in flat
    # short enough for a panel's title: the details stay in leaderboard.csv
    assert "(" not in note.split("—", 1)[1] and max(map(len, note.splitlines())) <= 80


def test_evaluate_prints_which_judges_of_its_views_are_on_another_protocol(tmp_path):
    live = llmbar_protocol("CoT").identity
    palm = protocol_of("CoT", "LLMBar/Natural/evaluators/PaLM2/CoT/result.json", "PaLM2")
    board = pd.DataFrame([{"view": "llmbar_agreement", "scope": "LLMBar Natural", "measure": "agreement",
                           "strategy": "CoT", "judge": j, "mode": m, "value": 0.5, "lo": 0.4, "hi": 0.6, "n": 6,
                           "cluster": 1, "status": "ok", "protocol": p}
                          for j, m, p in (("me", "logprobs", live), ("GPT-4", "recorded", live),
                                          ("PaLM2", "recorded", palm))])
    board.to_csv(tmp_path / "leaderboard.csv", index=False)
    out = io.StringIO()
    _print_board(str(tmp_path), "me", out)
    lines = out.getvalue().splitlines()
    assert lines[1].endswith(f"protocol: {live}")
    assert [ln.split()[-1] for ln in lines if ln.strip().startswith(("me", "GPT-4"))] == ["same", "same"]
    assert "PaLM2: own answer rule" in next(ln for ln in lines if ln.strip().startswith("PaLM2"))
