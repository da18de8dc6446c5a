"""The bias method in ``python -m dhp evaluate`` and the demo: it runs in the standard and paper profiles, its plan
prices the exact LLMBar requests (plain pairs and every cue's), and its plain requests are the very requests
decompose_aggregate asks of the same pairs — so on one cache (the demo's, evaluate's) they are asked once."""

from __future__ import annotations

import pytest

from dhp import calls, methods
from dhp.grid import load_params
from dhp.io import resolve
from dhp.judging.strategies import llmbar_prompts_dir

JUDGE = "openai:m@http://127.0.0.1:9/v1"  # never reached: the calls are recorded, not sent


def _needs_prompts():
    if not (llmbar_prompts_dir() / "prompts" / "comparison" / "Vanilla.txt").is_file():
        pytest.fail("LLMBar's templates are not in the data root: python -m dhp data fetch llmbar_prompts")


def test_bias_runs_in_the_standard_and_paper_profiles_on_decompose_aggregates_pairs():
    bias, dna = methods.get("bias"), methods.get("decompose_aggregate")
    for profile in ("standard", "paper"):
        b, d = bias.profile_params(profile), dna.profile_params(profile)
        assert b is not None, profile
        # the same pairs (subsets, n_pairs, seed) and strategy: the plain requests are shared through the cache
        assert (b["subsets"], b["n_pairs"], b["strategies"]) == (d["subsets"], d["n_pairs"], d["strategies"])


def test_plan_prices_plain_and_cued_requests(tmp_path):
    _needs_prompts()
    bias = methods.get("bias")
    config = bias.config({"judge": JUDGE, "subsets": ["Natural"], "n_pairs": 3, "run_dir": str(tmp_path),
                          "cues": ["verbosity", "control"]})
    plan = bias.evaluate_plan(config)
    (est,) = plan.estimates
    # 3 pairs x 2 orders x (plain + 2 cues), one Vanilla request each, none cached yet
    assert (est.calls, est.cached_calls) == (18, 0) and est.prompt_tokens > 0
    assert "decompose_aggregate" in plan.note


def _recorded_requests(monkeypatch):
    """Replace dhp.calls.chat: record (scope, messages, max_tokens, seed) of every request, answer 'Output (a)'."""
    sent = []

    def fake_chat(judge, requests, cache=None, *, scopes=None, **kw):
        scopes = scopes if scopes is not None else [None] * len(requests)
        sent.extend((s, repr(r.messages), r.max_tokens, r.seed, r.temperature) for s, r in zip(scopes, requests))
        return [type("R", (), {"text": "Output (a)", "prompt_tokens": 10})() for _ in requests]

    monkeypatch.setattr(calls, "chat", fake_chat)
    return sent


def test_plain_requests_are_decompose_aggregates_requests(monkeypatch, tmp_path):
    """What the demo relies on: bias's plain pairs send byte-identical requests under the same cache scopes as
    decompose_aggregate with the same pairs and strategy (so the shared cache answers them); the cued ones differ."""
    _needs_prompts()
    sent = _recorded_requests(monkeypatch)
    common = {"judge": JUDGE, "subsets": ["Natural", "Adversarial_Neighbor"], "n_pairs": 2,
              "strategies": ["llmbar:Vanilla"], "run_dir": str(tmp_path)}
    dna = methods.get("decompose_aggregate")
    dconf = dna.config({**common, "dhp_items": 0})
    dna.collect_verdicts(dconf, dna.load_pairs(dconf))
    theirs, _ = set(sent), sent.clear()
    bias = methods.get("bias")
    res = bias.collect(bias.config({**common, "cues": ["authority"]}))
    mine = set(sent)
    assert len(theirs) == 8 and theirs <= mine  # 2 subsets x 2 pairs x 2 orders, every one asked again
    assert len(mine - theirs) == 8  # the cued pairs: new requests
    v = res["bias_verdicts.parquet"]
    assert set(v["cue"]) == {"none", "authority"} and len(v) == 16


def test_the_demo_runs_bias_on_decompose_aggregates_pairs():
    g = load_params(resolve("params/demo.yaml"))
    b, d = g.method_params["bias"], g.method_params["decompose_aggregate"]
    bias, dna = methods.get("bias"), methods.get("decompose_aggregate")
    bc, dc = bias.config({**b, "judge": "embedded"}), dna.config({**d, "judge": "embedded"})
    # decompose_aggregate's pairs among bias's (a selection of more pairs keeps the fewer: seeded, nested), and
    # strategies decompose_aggregate runs: the demo's plain bias calls on those pairs are cache hits
    assert (bc.subsets, bc.seed) == (dc.subsets, dc.seed) and bc.n_pairs >= dc.n_pairs
    theirs, mine = set(dna.load_pairs(dc)["item_id"]), set(bias.load_pairs(bc)["item_id"])
    assert theirs and theirs <= mine
    assert set(bc.strategies) <= set(dc.strategies)


def test_repeats_with_an_unseeded_llmbar_strategy_are_refused():
    """LLMBar's requests carry no seed: a repeat is the same request, answered by the cache (a kappa of 1 that
    measures nothing). A strategy whose requests carry the seed is accepted."""
    from dhp.errors import DHPError

    bias = methods.get("bias")
    with pytest.raises(DHPError, match="carry no seed"):
        bias.config({"repeats": 3, "strategies": ["llmbar:Vanilla"]})
    assert bias.config({"repeats": 3, "strategies": ["dhp_vanilla"]}).repeats == 3


def test_evaluate_standard_dry_run_prices_bias(tmp_path, monkeypatch):
    """``python -m dhp evaluate JUDGE --profile standard --dry-run``'s plan has a bias step with LLMBar's exact
    requests priced: 20 pairs per subset (Natural + 4 Adversarial) x 2 orders x (plain + 4 cues)."""
    _needs_prompts()
    from dhp import evaluate as ev

    monkeypatch.setattr(ev.methods, "all_methods", lambda: [methods.get("bias")])  # the other methods: their tests
    steps = ev.plan(JUDGE, "standard", run_dir=str(tmp_path / "r"))
    text = ev.describe(steps, JUDGE, "standard")
    (step,) = steps
    assert (step.method, step.calls, step.cached) == ("bias", 100 * 2 * 5, 0) and step.prompt_tokens > 0
    assert "bias: calls: 1000 to make (0 cached)" in text and "planted cues" in text
    assert not (tmp_path / "r").exists()  # a plan writes nothing
