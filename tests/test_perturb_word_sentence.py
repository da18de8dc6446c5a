"""Rule-based counterparts of the LLM methods: fictional entities, grammatical errors and
rewrite-insert, on sentences written for these tests."""

import random

import pytest
from faker import Faker

from dhp.perturb import entities, grammar, paraphrase
from dhp.perturb.rules import Skip

NEWS = (
    "Maria Lopez, the mayor of Springfield, said the new bridge will open in June. "
    "The project cost 45 million dollars and took three years. "
    "The council of Rivertown has approved its budget for 2024."
)


def fake():
    return Faker("en_US")


def test_find_entities_detects_names_places_numbers_and_terms():
    found = {e.text: e.kind for e in entities.find_entities(NEWS)}
    assert found["Maria Lopez"] == "person"
    assert found["June"] == "month"
    assert found["45"] == "number" and found["2024"] == "number"
    assert found["three"] == "number_word"
    assert "The" not in found and "Springfield" in found
    terms = {e.text: e.kind for e in entities.find_entities("levels of il-6 and brca1 rose with hepatitis in russia")}
    assert terms == {"il-6": "term", "brca1": "term", "hepatitis": "term", "russia": "place"}


def test_sentence_initial_common_word_is_not_an_entity():
    assert entities.find_entities("Yesterday the weather was fine. Nothing happened.") == []
    # A known first name at a sentence start is.
    assert [e.text for e in entities.find_entities("Tom bought a bike.")] == ["Tom"]


@pytest.mark.parametrize("severity,expect", [("minor", 1), ("single", 1), ("major", None)])
def test_fictional_entities_replaces_the_right_number(severity, expect):
    for s in range(15):
        new, edits = entities.fictional_entities(NEWS, severity, random.Random(s), fake())
        assert new != NEWS
        n = entities.n_entities_changed(NEWS, new)
        if expect:
            assert n == expect
        else:
            assert n >= 2
        assert edits.startswith("replaced")


def test_fictional_entities_same_entity_replaced_consistently():
    text = "Tom met Anna in Paris. Later Tom flew home."
    for s in range(10):
        new, _ = entities.fictional_entities(text, "minor", random.Random(s), fake())
        ch = entities.entity_changes(text, new)
        assert ch is not None and len(ch) == 1


def test_fictional_entities_without_entities_skips():
    with pytest.raises(Skip, match="no named entity"):
        entities.fictional_entities("she was very happy about it.", "minor", random.Random(0), fake())
    with pytest.raises(Skip, match="at least 2"):
        entities.fictional_entities("she met Tom at noon.", "major", random.Random(0), fake())


def test_entity_changes_rejects_changes_outside_entities():
    assert entities.entity_changes("Tom is here.", "Tom was here.") is None
    assert entities.entity_changes("Tom is here.", "Bob is here.") == [("Tom", "Bob")]


def test_grammar_candidates_cover_the_rule_kinds():
    text = ("The dog is hungry, which was expected. She will go to the park and has taken an umbrella "
            "in her bag. A apple fell from its branch because the wind was founded strong. He wants it.")
    kinds = {c.kind for c in grammar.candidates(text)}
    assert {"subject_verb", "verb_tense", "article", "preposition", "fragment", "pronoun_agreement",
            "pronoun_case"} <= kinds


@pytest.mark.parametrize("severity", ["minor", "single", "major"])
def test_grammatical_errors_counts(severity):
    for s in range(20):
        new, edits = grammar.grammatical_errors(NEWS, severity, random.Random(s))
        blocks = grammar.changed_blocks(NEWS, new)
        if severity == "major":
            assert blocks >= 2 and edits.split()[0] in {"2", "3"}
        else:
            assert blocks == 1 and edits.startswith("1 grammatical error")


def test_grammatical_errors_examples():
    rng = random.Random(0)
    new, _ = grammar.grammatical_errors("He will go home.", "single", rng)
    assert new in {"He will went home.", "Him will go home."}
    new, _ = grammar.grammatical_errors("It was an old car", "single", rng)
    assert new != "It was an old car"


def test_grammatical_errors_no_site_skips():
    with pytest.raises(Skip):
        grammar.grammatical_errors("Wonderful!", "single", random.Random(0))


def test_paraphrase_rules():
    out, rules = paraphrase.paraphrase("The minister said that taxes will rise.")
    assert out == "According to the minister, taxes will rise." and rules == ["reporting_verb"]
    out, rules = paraphrase.paraphrase("The game was cancelled because the pitch was flooded.")
    assert out.startswith("Since the pitch was flooded, the game was cancelled") or out.startswith(
        "Because the pitch was flooded, the game was cancelled")
    out, rules = paraphrase.paraphrase("Zebras eat grass.")
    assert out == "In other words, zebras eat grass." and rules == ["discourse_marker"]


@pytest.mark.parametrize("severity,expect", [("minor", 1), ("major", 2)])
def test_rewrite_insert_inserts_after_sentences(severity, expect):
    for s in range(10):
        new, _ = paraphrase.rewrite_insert(NEWS, severity, random.Random(s))
        got = paraphrase.inserted_rewrites(NEWS, new)
        assert got is not None and len(got) == expect  # 3 sentences: major = ceil(3/2) = 2
        assert all(x.split() != [] for x in got)


def test_rewrite_insert_major_needs_two_sentences():
    with pytest.raises(Skip, match="at least 2"):
        paraphrase.rewrite_insert("One sentence only.", "major", random.Random(0))
    assert paraphrase.inserted_rewrites("A b. C d.", "A b. X y. C x.") is None
