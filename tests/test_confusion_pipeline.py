"""Criteria confusion end to end: the 18 attacks as registered perturbations (a family that never runs by
default), LLM-output validators per attack, aspect-targeted judging through the shared cache, the
statistics on a scripted judge, the LLM path against a real llama_cpp.server, and spaCy entity detection."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from dhp.backends import Backend, Completion
from dhp.perturb import audit, perturb
from dhp.perturb.hu2024 import CHECKS, CONFUSION_ATTACKS, RULE_BASED
from dhp.perturb.catalog import methods_for

TEXTS = [
    "The council approved the budget on Monday. However, the mayor said the plan was too expensive. "
    "Officials in Boston will meet again next week.",
    "Maria Lopez won the race in Chicago. She trained for two years with her coach. The team celebrated "
    "because the victory was close.",
    "The company opened a new factory in Ohio. Workers started production in March. Sales rose quickly, "
    "so the firm hired more staff.",
    "Scientists at Oxford found a new species of frog. The animal lives in wet forests. The discovery "
    "surprised many experts because the area was well studied.",
    "The river flooded the town after heavy rain. Residents moved to a school on the hill. Rescue teams "
    "from Denver arrived on Tuesday.",
    "The museum bought a painting by Claude Monet. It will be shown in Paris next spring. Visitors have "
    "waited for years to see it.",
    "The school board hired a new principal in May. Parents welcomed the choice. Classes will start earlier "
    "because the district changed its schedule.",
    "A storm closed the airport in Dallas. Hundreds of flights were cancelled. Airlines offered hotel rooms "
    "to stranded passengers.",
    "The farmers planted wheat in April. The harvest was larger than expected. Prices fell, but exports grew "
    "during the summer.",
    "The orchestra played a concert in Vienna. The hall was full. Critics praised the young conductor, who "
    "had replaced a sick colleague.",
]


def _items(n=len(TEXTS)):
    return pd.DataFrame({"dataset": "mine", "task": "summarization", "item_id": [f"i{i}" for i in range(n)],
                         "source": [f"Article: {t} More background follows." for t in TEXTS[:n]],
                         "reference": TEXTS[:n]})


def test_attacks_are_a_family_that_runs_only_when_named():
    default = {m.perturbation for m in methods_for("summeval")}
    assert not default & set(CONFUSION_ATTACKS) and "char_typo" in default
    named = {m.perturbation for m in methods_for("summeval", ["negation", "hypernym"])}
    assert named == {"negation", "hypernym"}
    table = perturb(_items(2), perturbations=list(CONFUSION_ATTACKS))
    rows = table[table["perturbation"] != "original"]
    assert set(rows["perturbation"]) == set(CONFUSION_ATTACKS) and (rows["method"] == "rule").all()
    ok = set(rows.loc[rows["status"] == "ok", "perturbation"])
    assert ok == set(RULE_BASED)  # the nine with honest rules; the other nine say why they skipped
    skipped = rows[~rows["perturbation"].isin(RULE_BASED)]
    assert skipped["reason"].str.contains("no rule-based version").all()
    a = audit(table, _items(2))
    assert (a.loc[a["n_ok"] > 0, "pct_verified"] == 100).all()


@pytest.mark.parametrize("attack,original,good,bad", [
    ("negation", TEXTS[0], TEXTS[0].replace("approved", "did not approve"), TEXTS[0].replace("Monday", "Friday")),
    ("sentence_deletion", TEXTS[0], TEXTS[0].split(". ", 1)[1], TEXTS[0] + " Extra."),
    ("continuation", TEXTS[0], TEXTS[0] + " The mayor later resigned.", TEXTS[0].replace("budget", "plan")),
    ("sentence_exchange", "A cat sat. A dog ran. A bird sang.", "A dog ran. A cat sat. A bird sang.",
     "A cat sat. A dog ran."),
    ("word_exchange", TEXTS[0], TEXTS[0].replace("the budget", "budget the"), TEXTS[0].replace("budget", "plan")),
    ("abbreviation", TEXTS[0], TEXTS[0].replace("Monday", "Mon."), TEXTS[0] + " More text."),
    ("repetition", TEXTS[0], TEXTS[0].replace("on Monday.", "on Monday, on Monday."), TEXTS[0].replace("budget", "plan")),
    # restated, not repeated word for word (as in the paper's example); a lone "not" is the negation attack
    ("repetition", TEXTS[0], TEXTS[0].replace("too expensive", "too expensive and cost too much"),
     TEXTS[0].replace("approved", "did not approve")),
    ("passive_voice", TEXTS[0],
     TEXTS[0].replace("The council approved the budget", "The budget was approved by the council"),
     TEXTS[0].replace("The council approved the budget", "The council approved it")),
    ("inversion", TEXTS[0], TEXTS[0].replace("Officials in Boston will meet again next week.",
                                             "Next week, officials in Boston will meet again."),
     TEXTS[0].replace("However, the", "Therefore, the")),
    ("incorrect_verb_form", TEXTS[0], TEXTS[0].replace("approved", "approving").replace("said", "say"),
     TEXTS[0].replace("approved", "aproved")),
    ("spelling_mistake", TEXTS[0], TEXTS[0].replace("approved", "aproved").replace("budget", "budgte")
     .replace("expensive", "expensiv").replace("Officials", "Oficials"), TEXTS[0].replace("approved", "rejected")),
    ("uncommon_phrase", TEXTS[0], TEXTS[0].replace("approved", "ratified").replace("too expensive", "exorbitant"),
     TEXTS[0].replace("Boston", "Denver")),
    ("complex_sentence", TEXTS[0],
     TEXTS[0].replace("The council approved", "The council, which had met for hours, approved"),
     TEXTS[0].replace("The council approved the budget on Monday. ", "")),
    ("conflicting_fact", TEXTS[0], TEXTS[0].replace("said the plan was too expensive", "praised the plan as cheap"),
     TEXTS[0] + " The mayor later resigned."),
])
def test_each_llm_check_accepts_its_edit_and_rejects_another(attack, original, good, bad):
    assert CHECKS[attack](original, good) is None
    assert isinstance(CHECKS[attack](original, bad), str)


class AspectJudge(Backend):
    """Drops the rating only on the aspect an attack targets (negation -> non-contradiction, sentence
    deletion -> informativeness): a judge without confusion. It answers in the paper's format, an analysis
    that itself holds a digit, then "Rating:"; and records the requests it was sent."""

    identity = "scripted:aspects"
    model = "scripted"
    deterministic = True

    def __init__(self):
        self.requests = []

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            self.requests.append(r)
            prompt = r.messages[0][1]
            criterion = re.search(r"Criterion:\n(\w[\w -]*):", prompt).group(1).lower()
            candidate = prompt.split("\nSummary:\n", 1)[1].split("\n\nHow to answer", 1)[0]
            article = prompt.split("\nSource:\n", 1)[1].split("\n\nCriterion:", 1)[0]
            reference = article.removeprefix("Article: ").removesuffix(" More background follows.")
            damaged = candidate.strip() != reference.strip()
            low = damaged and (("not" in candidate.split() or "n't" in candidate) and "contradiction" in criterion
                               or len(candidate) < len(reference) - 20 and "informativeness" in criterion)
            reply = f"Analysis: 3 sentences read; {'a problem' if low else 'fine'}.\nRating: {2 if low else 5}"
            c = Completion(text=reply, top_logprobs=None, prompt_tokens=5, completion_tokens=12,
                           texts=[reply] * r.n)
            out.append(c)
            if on_result:
                on_result(i, c)
        return out


def test_scripted_judge_without_confusion_gets_index_zero(tmp_path):
    from dhp.analysis import confusion as cf
    from dhp.datasets import criteria_hu2024 as crit
    from dhp.judging.aspects import aspect_prompts, score_aspects

    items = _items()
    variants = perturb(items, perturbations=["negation", "sentence_deletion"])
    criteria = crit.load_criteria()
    prompts = aspect_prompts(variants, items, criteria)
    assert set(prompts["description_type"]) == {"detailed"}  # the paper's main results use "detailed"
    assert set(prompts["aspect"]) == set(crit.ASPECTS) and len(prompts) == len(items) * 3 * 11
    judge = AspectJudge()
    scores = score_aspects(prompts, judge, cache=tmp_path / "c.sqlite").table
    # the paper's setting: one request per prompt asking for 10 replies at temperature 1.0
    assert len(judge.requests) == len(prompts)
    assert {(r.n, r.temperature) for r in judge.requests} == {(10, 1.0)}
    assert scores["score"].notna().all() and (scores["n_valid"] == 10).all()
    assert set(scores["score"]) == {2.0, 5.0}  # the rating after the analysis, never the analysis' "3"
    cells = cf.confusion_cells(scores, crit.load_expectations())
    neg = cells.set_index(["attack", "aspect"])
    assert neg.loc[("negation", "non_contradiction"), "D"] > 1  # 10 pairs, all dropped: p = 1/1024, x 22 cells
    assert neg.loc[("negation", "fluency"), "mean_drop"] == 0
    summary = cf.confusion_summary(cells).iloc[0]
    assert summary["confusion_index"] == 0 and summary["share_ST_D_gt_1"] > 0


def test_default_prompt_is_the_papers_and_mitigation_is_an_option():
    """Default: analyse, then rate, and no instruction to ignore what the criterion does not mention (the
    paper's setting); instruction="mitigated" adds that sentence and nothing else (Hu et al. 2024, §6)."""
    from dhp.datasets import criteria_hu2024 as crit
    from dhp.errors import DHPError
    from dhp.judging.aspects import INSTRUCTIONS, aspect_prompts

    items = _items(1)
    variants = perturb(items, perturbations=["negation"])
    criteria = crit.load_criteria()
    paper = aspect_prompts(variants, items, criteria, aspects=["fluency"])
    mitigated = aspect_prompts(variants, items, criteria, aspects=["fluency"], instruction="mitigated")
    sentence = INSTRUCTIONS["mitigated"].strip()
    for p in paper["prompt"]:
        assert "must not change" not in p and "criterion only" not in p
        assert p.index('"Analysis:"') < p.index('"Rating:"') and p.rstrip().endswith("Answer:")
    assert (paper["instruction"] == "paper").all() and (mitigated["instruction"] == "mitigated").all()
    for a, b in zip(paper["prompt"], mitigated["prompt"]):
        assert sentence in b and b.replace(" " + sentence, "") == a
    with pytest.raises(DHPError, match="instruction"):
        aspect_prompts(variants, items, criteria, instruction="strict")


class EchoRewriter(Backend):
    """Answers every rewrite request with the reference unchanged (a rewrite no validator may accept); records the
    prompts."""

    identity = "scripted:echo"
    model = "scripted"
    deterministic = True

    def __init__(self):
        self.prompts = []

    def chat_many(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            self.prompts.append(r.messages[-1][1])
            c = Completion(text=TEXTS[0], top_logprobs=None, prompt_tokens=5, completion_tokens=30,
                           texts=[TEXTS[0]] * r.n)
            out.append(c)
            if on_result:
                on_result(i, c)
        return out


def test_every_llm_attack_asks_its_own_prompt_and_checks_the_answer():
    """All 18 attacks through the LLM path (the real server below gets one per aspect): each asks with a prompt of
    its own, and an unchanged text is never kept — every row failed, with the reason of its one attempt."""
    echo = EchoRewriter()
    table = perturb(_items(1), perturber=echo, perturbations=list(CONFUSION_ATTACKS), max_attempts=1)
    rows = table[table["perturbation"] != "original"]
    assert len(rows) == 18 and set(rows["perturbation"]) == set(CONFUSION_ATTACKS)
    assert len(echo.prompts) == 18 and len(set(echo.prompts)) == 18
    assert (rows["status"] == "failed").all() and rows["reason"].str.startswith("no valid output in 1 attempt: ").all()


@pytest.mark.slow
def test_llm_attacks_against_llama_cpp_server(llama_server):
    """The LLM path: an attack of each targeted aspect asks the server with its own prompt; each row is ok (and
    passes its validators) or failed with the reason of its attempt — never an unchecked text. (One attempt each: a
    retry's reasons are tested on a stub, tests/test_perturb_llm.py, and all 18 attacks' requests just above; the
    135M model's rewrites cost ~2 s each, so the real server gets the first attack of each of the 7 aspects.)"""
    from dhp.backends import OpenAIBackend
    from dhp.perturb.hu2024 import TARGET
    from dhp.perturb.llm import validate

    one_per_aspect = list({aspect: attack for attack, aspect in reversed(TARGET.items())}.values())
    assert len(one_per_aspect) == 7 and set(one_per_aspect) <= set(CONFUSION_ATTACKS)
    backend = OpenAIBackend("smollm2-135m", llama_server.base_url, concurrency=1)
    table = perturb(_items(1), perturber=backend, perturbations=one_per_aspect, max_attempts=1)
    rows = table[table["perturbation"] != "original"]
    assert len(rows) == 7 and rows["method"].str.startswith("llm:openai:smollm2-135m").all()
    assert set(rows["status"]) <= {"ok", "failed"}
    for r in rows.itertuples():
        if r.status == "ok":
            assert validate(r.perturbation, TEXTS[0], r.text) is None
        else:
            assert r.reason.startswith("no valid output in 1 attempt: ")


def test_spacy_entities_with_rule_fallback():
    from dhp.perturb.entities import find_entities

    text = "Maria Lopez met officials from Acme Corporation in Boston on Monday to discuss 1,200 jobs."
    kinds = {e.text: e.kind for e in find_entities(text)}
    assert kinds.get("Maria Lopez") == "person" and kinds.get("Boston") == "place"
    assert kinds.get("Acme Corporation") == "organisation"
    assert kinds.get("1,200") == "number" and kinds.get("Monday") == "day"  # rules keep numbers and dates
    lower = text.lower()  # no capitals: NER finds nothing, the rules stand in
    assert find_entities(lower) == find_entities(lower, use_ner=False)


@pytest.mark.parametrize("reply,want", [
    ("Analysis: 2 of the 3 sentences are fluent.\nRating: 4", 4.0),
    ("Analysis: fine.\n**Rating:** 5", 5.0),
    ("Analysis: fine.\nRating (1-5): 3 out of 5", 3.0),
    ("Rating: 2\nAnalysis: many errors.", 2.0),  # the first "Rating:" is the answer
    ("Analysis: fine.\nRating: 4/10", None),  # another scale
    ("Analysis: fine.\nRating: 6", None),  # out of scale
    ("Analysis: it deserves a 4.", None),  # no rating line: the analysis' numbers are never read
    ("Analysis: a good rating overall, 4", None),
])
def test_rating_is_read_after_the_analysis(reply, want):
    import math

    from dhp.judging.parsing import parse_rating

    score, why = parse_rating(reply, "fluency")
    if want is None:
        assert math.isnan(score) and why
    else:
        assert score == want and why == ""


class LogprobJudge(Backend):
    """Greedy replies with per-token logprobs: the analysis holds a chosen "3", the rating position has
    P(4) = 0.6, P(5) = 0.4 (expected 4.4)."""

    identity = "scripted:logprobs"
    model = "scripted"
    deterministic = True

    def chat_many(self, requests, on_result=None):
        toks = [("Analysis", {}), (":", {}), (" 3", {" 2": -2.0}), (" errors", {}), (".\n", {}), ("Rating", {}),
                (":", {}), (" 4", {" 5": math.log(0.4) - 0.01}), ("", {})]
        tops = [{t: -0.01, **alts} for t, alts in toks]
        tops[7] = {" 4": math.log(0.6), " 5": math.log(0.4)}
        text = "".join(t for t, _ in toks)
        out = []
        for i, r in enumerate(requests):
            c = Completion(text=text, top_logprobs=tops, prompt_tokens=5, completion_tokens=len(toks))
            out.append(c)
            if on_result:
                on_result(i, c)
        return out


def test_logprobs_mode_reads_the_rating_position_not_a_digit_of_the_analysis(tmp_path):
    from dhp.judging.aspects import score_aspects
    from dhp.judging.parsing import rating_logprobs, score_from_logprobs

    prompts = pd.DataFrame({"dataset": "d", "item_id": "1", "attack": "", "variant": "original", "method": "",
                            "aspect": "fluency", "description_type": "detailed", "instruction": "paper",
                            "prompt": ["Rate it."]})
    got = score_aspects(prompts, LogprobJudge(), mode="logprobs", cache=tmp_path / "c.sqlite").table
    assert got["score"].iloc[0] == pytest.approx(4.4)
    reply = LogprobJudge().chat_many([None])[0]
    assert score_from_logprobs(reply.top_logprobs)[0] < 3.5  # read from the start: the analysis' "3"
    assert rating_logprobs(reply.text.replace("errors", "faults"), reply.top_logprobs) == []  # text != tokens
