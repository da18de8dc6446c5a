"""issue 27: ``python -m dhp evaluate`` and LLMBar's protocol verbatim.

- the messages of a live ``llmbar:Vanilla`` call are the data root's comparison/Vanilla.txt filled in with
  str.format_map and split into roles at its ChatML markers as LLMBar's evaluate.py does, with LLMBar's decoding
  settings (GPT-4's config) and verdicts parsed by its regexes (compared against the data-root files at run time);
- a live judge through a real llama_cpp.server on loopback joins GPT-4 in the LLMBar view on the same pairs; a rerun
  makes no call; the demo's results are untouched; ``--protocol llmbar:Rating --protocol llmbar:Swap`` likewise puts
  a served judge (a loopback stub: Swap lets a model write 300 tokens a call) beside the recorded Rating and Swap
  judges (issue 35);
- ``--profile paper --dry-run`` prints per view the recorded judges' units and the call count.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pandas as pd
import pytest

from dhp.datasets.llmbar import load_llmbar
from dhp.io import resolve
from dhp.judging.strategies import (
    chatml_messages, llmbar_parse, llmbar_prompts_dir, llmbar_protocol, run_strategies,
)


def _needs_prompts():
    if not (llmbar_prompts_dir() / "prompts" / "comparison" / "Vanilla.txt").is_file():
        pytest.fail("LLMBar's templates are not in the data root: python -m dhp data fetch llmbar_prompts")


def _reference_messages(template: str, **fields) -> list[dict]:
    """LLMBar's splitting written out independently for the check: strip, split at the start marker, role = first
    line, content = up to the end marker, both stripped."""
    text = template.format_map(fields).strip()
    out = []
    for part in text.split("<|im_start|>")[1:]:
        role, content = part.split("\n", 1)
        out.append({"role": role.strip(), "content": content.split("<|im_end|>", 1)[0].strip()})
    return out


def test_live_vanilla_sends_llmbars_template_with_its_decoding_and_parsing(monkeypatch):
    _needs_prompts()
    from dhp import calls

    root = llmbar_prompts_dir()
    template = (root / "prompts" / "comparison" / "Vanilla.txt").read_text(encoding="utf-8")
    config = json.loads((root / "config" / "GPT-4" / "Vanilla.json").read_text(encoding="utf-8"))[0]
    pairs = load_llmbar(["Adversarial_Neighbor"], n_items=2, seed=0)
    sent = []

    def fake_chat(judge, requests, cache=None, **kw):
        sent.extend(requests)
        # order 12 answers (a), order 21 answers (b): both name output_1 -> verdict "1" both times
        return [type("R", (), {"text": ["Output (a)", " Output (b) is better."][i % 2], "prompt_tokens": 10})()
                for i, _ in enumerate(requests)]

    monkeypatch.setattr(calls, "chat", fake_chat)
    verdicts, costs = run_strategies(pairs, ["llmbar:Vanilla"], judge="embedded", progress=False)
    assert len(sent) == 4
    for req, (it, order) in zip(sent, [(it, o) for it in pairs.itertuples() for o in ("12", "21")]):
        o1, o2 = (it.output_1, it.output_2) if order == "12" else (it.output_2, it.output_1)
        expected = _reference_messages(template, input=it.instruction, output_1=o1, output_2=o2)
        assert req.message_dicts() == expected
        assert [m["role"] for m in expected] == ["system", "user"]
        assert req.max_tokens == config["openai_kwargs"]["max_tokens"]
        assert req.temperature == config["openai_kwargs"]["temperature"]
    # order 21 shows output_2 first: "Output (b)" there is output_1
    assert verdicts["verdict"].tolist() == ["1", "1", "1", "1"]
    assert costs["protocol"].iloc[0].startswith("llmbar/Vanilla@900616b sha256:")


def test_llmbar_parsing_rule_is_the_configs_regexes_in_order():
    _needs_prompts()
    protocol = llmbar_protocol("Vanilla")
    final = protocol.modules[-1]
    config = json.loads((llmbar_prompts_dir() / "config" / "GPT-4" / "Vanilla.json").read_text())[0]
    assert list(final.parsing) == list(config["parsing"].items())
    # LLMBar: the first label whose regex is found wins, even when the reply later names the other output
    assert llmbar_parse(final, "Output (a)\nOutput (b)")[0] == "1"
    assert llmbar_parse(final, "  Output (b)")[0] == "2"
    assert llmbar_parse(final, "I think Output (a)")[0] is None  # not at a line start
    assert "tokens_to_avoid" in final.not_applied  # tiktoken logit biases are not sent to another tokenizer


def test_chatml_split_matches_llmbar_on_the_few_shot_template():
    _needs_prompts()
    t = (llmbar_prompts_dir() / "prompts" / "comparison" / "Vanilla_2shot.txt").read_text(encoding="utf-8")
    fields = {"input": "I", "output_1": "A", "output_2": "B"}
    got = chatml_messages(t.format_map(fields))
    assert got == _reference_messages(t, **fields)
    assert [m["role"] for m in got] == ["system", "user", "assistant", "user", "assistant", "user"]


def test_protocols_join_a_view_only_when_the_template_is_upstreams():
    from dhp.analysis.decomposition import correctness_units

    rows = []
    for judge, strategy, source in (("GPT-4", "Vanilla", "LLMBar/x/result.json sha256:1"),
                                    ("live", "llmbar:Vanilla", "llmbar/Vanilla@900616b sha256:77a3a8f35447"),
                                    ("edited", "llmbar:Vanilla", "llmbar/Vanilla@900616b sha256:000000000000"),
                                    ("own", "dhp_vanilla", "")):
        for order in ("12", "21"):
            rows.append({"judge": judge, "mode": "m", "item_id": "Natural-0", "subset": "Natural",
                         "strategy": strategy, "order": order, "verdict": "1", "label": "1", "source": source})
    u = correctness_units(pd.DataFrame(rows)).set_index("judge")
    assert u.at["GPT-4", "strategy"] == u.at["live", "strategy"] == "Vanilla"
    assert u.at["GPT-4", "protocol"] == u.at["live", "protocol"]
    assert u.at["edited", "strategy"] == "llmbar:Vanilla" and u.at["own", "strategy"] == "dhp_vanilla"


def _dhp(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "dhp", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=resolve("."))


@pytest.mark.slow
def test_evaluate_quick_through_a_real_server_puts_the_judge_beside_gpt4(llama_server, tmp_path):
    _needs_prompts()
    before = {p.name: p.stat().st_mtime for p in resolve("results").glob("*")}
    run = tmp_path / "run"
    spec = f"openai:@{llama_server.base_url}"  # model name read from /v1/models
    first = _dhp("evaluate", spec, "--profile", "quick", "--yes", "--run-dir", str(run))
    assert first.returncode == 0, first.stderr
    board = pd.read_csv(run / "leaderboard.csv")
    view = board[(board["view"] == "llmbar_agreement") & (board["scope"] == "LLMBar Adversarial (4 subsets)")
                 & (board["strategy"] == "Vanilla")]
    me = view[view["judge"].str.startswith("openai:smollm2-135m@http://127.0.0.1")]
    gpt4 = view[view["judge"] == "GPT-4"]
    assert len(me) == 1 and len(gpt4) == 1 and (me["status"] == "ok").all()
    assert int(me["n"].iloc[0]) == int(gpt4["n"].iloc[0]) == 6  # the same six pairs
    # the live judge on GPT-4's protocol; PaLM2, LLaMA2 and Falcon stand in the view with their own configs
    assert set(me["protocol"]) == set(gpt4["protocol"]) == {"llmbar/Vanilla@900616b sha256:77a3a8f35447"}
    pairs = pd.read_csv(run / "leaderboard_pairs.csv")
    duel = pairs[((pairs["judge_a"] == "GPT-4") & (pairs["judge_b"] == me["judge"].iloc[0]))
                 | ((pairs["judge_b"] == "GPT-4") & (pairs["judge_a"] == me["judge"].iloc[0]))]
    assert len(duel) >= 1 and duel["p"].notna().all() and (duel["n"] == 6).all()
    assert (run / "report_card.csv").is_file()
    assert re.search(r"calls made: [1-9]", first.stdout)
    second = _dhp("evaluate", spec, "--profile", "quick", "--yes", "--run-dir", str(run))
    assert second.returncode == 0, second.stderr
    assert "calls made: 0" in second.stdout and "0 to make (12 cached)" in second.stdout
    assert {p.name: p.stat().st_mtime for p in resolve("results").glob("*")} == before


def _rating_or_comparison(path, body):
    """A served judge for Rating and Swap: a score for one output (Rating), "Output (a) is better." where the
    prompt shows two (Swap's CoT round and its second round read it; LLMBar's own regexes parse both)."""
    from servers import chat_completion

    if not path.endswith("/chat/completions"):  # no tokenizer route: the client estimates prompt lengths
        return 404, {"error": {"message": "not found"}}
    text = " ".join(m["content"] for m in body["messages"])
    return chat_completion("Output (a) is better." if "Output (b)" in text else "7", model="smollm2-135m")


@pytest.mark.slow
def test_rating_and_swap_through_a_served_judge_stand_beside_the_recorded_judges(tmp_path):
    """Through an OpenAI-compatible loopback server that answers at once (Swap's first round lets a model write 300
    tokens: two minutes of SmolLM2 on a busy core; the real server's path is the quick test's above)."""
    from servers import ScriptedOpenAI

    _needs_prompts()
    run = tmp_path / "run"
    with ScriptedOpenAI(_rating_or_comparison, model="smollm2-135m") as srv:
        out = _dhp("evaluate", f"openai:@{srv.base_url}", "--profile", "quick", "--yes", "--run-dir", str(run),
                   "--protocol", "llmbar:Rating", "--protocol", "llmbar:Swap")
        asked = [" ".join(m["content"] for m in body["messages"]) for _, body in srv.requests if "messages" in body]
    assert out.returncode == 0, out.stderr
    # both kinds of request were asked: Rating's one output at a time, Swap's pairs
    assert any("Output (b)" in t for t in asked) and any("Output (b)" not in t for t in asked)
    board = pd.read_csv(run / "leaderboard.csv")
    for strategy, recorded in (("Rating", "GPT-4"), ("Swap", "GPT-4")):
        view = board[(board["view"] == "llmbar_agreement") & (board["scope"] == "LLMBar Adversarial (4 subsets)")
                     & (board["strategy"] == strategy)]
        me = view[view["judge"].str.startswith("openai:smollm2-135m@http://127.0.0.1")]
        them = view[view["judge"] == recorded]
        assert len(me) == 1 and len(them) == 1, (strategy, view[["judge", "status"]])
        assert int(me["n"].iloc[0]) == int(them["n"].iloc[0]) == 6 and me["protocol"].iloc[0] == them["protocol"].iloc[0]
    verdicts = pd.read_parquet(run / "pairwise_verdicts.parquet")  # the recorded judges' beside the live one's
    mine = verdicts[verdicts["judge"].astype(str).str.startswith("openai:smollm2-135m@http://127.0.0.1")]
    assert set(mine["strategy"]) == {"llmbar:Rating", "llmbar:Swap"} and len(mine) == 2 * 6 * 2


@pytest.mark.slow
def test_paper_dry_run_prints_the_recorded_judges_units_and_calls(tmp_path):
    _needs_prompts()
    out = _dhp("evaluate", "openai:m@http://127.0.0.1:9/v1", "--profile", "paper", "--dry-run",
               "--run-dir", str(tmp_path / "r"))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "LLMBar Natural: 100 pairs x 2 orders" in text
    assert "LLMBar Adversarial (4 subsets): 319 pairs x 2 orders" in text
    assert re.search(r"decompose_aggregate: calls: 838 to make", text)
    assert "SummEval summary correlation: 100 documents x 12 systems x 4 aspects" in text
    # every MQM-rated segment of every MQM-rated system but the main reference: the recorded metrics' units
    assert re.search(r"WMT22 zh-en vs MQM: (\d+) of \1 MQM segments x 15 systems", text)
    assert not (tmp_path / "r" / "leaderboard.csv").exists()


def test_evaluate_refuses_the_demo_folders():
    from dhp.errors import DHPError
    from dhp.evaluate import plan

    with pytest.raises(DHPError, match="inside the demo's results"):
        plan("embedded", "quick", run_dir="results/mine")


def test_evaluate_asks_before_calling_and_a_no_runs_nothing(tmp_path, monkeypatch):
    _needs_prompts()
    import io

    from dhp import methods
    from dhp.evaluate import evaluate

    monkeypatch.setattr(methods, "run", lambda *a, **k: pytest.fail("ran without confirmation"))
    buf = io.StringIO()
    res = evaluate("openai:m@http://127.0.0.1:9/v1", "quick", run_dir=str(tmp_path / "r"), out=buf,
                   confirm=lambda prompt: "n")
    assert res["calls_made"] == 0 and "Nothing run" in buf.getvalue()
    assert "12 to make" in buf.getvalue() and "Adversarial" in buf.getvalue()
    assert not (tmp_path / "r" / "pairwise_verdicts.parquet").exists()


def test_grid_preset_writes_outside_the_demo_folders():
    from dhp.grid import load_params

    g = load_params(resolve("params/evaluate.yaml"))
    assert not g.results_dir.startswith("results") and not g.figures_dir.startswith("figures")
    assert g.method_params["decompose_aggregate"]["strategies"] == ["llmbar:Vanilla"]
    assert g.leaderboard["recorded"] == ["llmbar"]
