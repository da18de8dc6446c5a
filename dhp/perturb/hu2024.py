"""The 18 aspect-targeted attacks of Hu et al. 2024 ("Are LLM-based evaluators confusing NLG quality
criteria?", Table 2), registered as perturbations of the family "criteria_confusion": they run only when
named (``perturb(..., perturbations=CONFUSION_ATTACKS)``), never in a default DHP run.

Every attack has an LLM version (a one-shot Auto-CoT prompt in dhp/prompts/perturb/<attack>_single.txt, used
with an LLM perturber, validated by the attack's own ``llm_check``); nine also have a rule version built on
spaCy's parser, tagger and NER and on lemminflect (dhp.perturb.attacks). With ``perturber="rule"`` the nine
run and the other nine are skipped with a reason; the ``method`` column says which version made a row.
"""

from __future__ import annotations

import difflib
import re

from dhp.perturb.attacks import ATTACK_CHECKS
from dhp.perturb.registry import SINGLE, Perturbation, register
from dhp.perturb.rules import Skip

TARGET = {  # attack -> the aspect it targets (paper Table 2)
    "repetition": "fluency", "passive_voice": "fluency", "inversion": "fluency",
    "improper_connective": "coherence", "sentence_exchange": "coherence",
    "incorrect_verb_form": "grammaticality", "word_exchange": "grammaticality", "spelling_mistake": "grammaticality",
    "uncommon_phrase": "simplicity", "complex_sentence": "simplicity",
    "abbreviation": "informativeness", "hypernym": "informativeness", "sentence_deletion": "informativeness",
    "complement": "non_hallucination", "continuation": "non_hallucination",
    "different_entity": "non_contradiction", "conflicting_fact": "non_contradiction", "negation": "non_contradiction",
}
CONFUSION_ATTACKS = tuple(TARGET)
RULE_BASED = ("repetition", "improper_connective", "sentence_exchange", "incorrect_verb_form", "word_exchange",
              "spelling_mistake", "sentence_deletion", "different_entity", "negation")
_LEVEL = {"spelling_mistake": "character", "word_exchange": "word", "incorrect_verb_form": "word",
          "uncommon_phrase": "word", "abbreviation": "word", "hypernym": "word", "different_entity": "word",
          "negation": "word"}
_TASKS = {t: SINGLE for t in ("summarization", "story_completion", "question_answering", "translation")}
_NEGATION = re.compile(r"\b(not|no|never|none|nobody|nothing|neither|nor)\b|n't\b", re.IGNORECASE)
_CONNECTIVES = re.compile(r"\b(and|but|however|therefore|thus|so|because|although|though|while|moreover|"
                          r"meanwhile|consequently|hence|instead|yet|since|as a result|in addition|nevertheless)\b",
                          re.IGNORECASE)


def _words(s: str) -> list[str]:
    return re.findall(r"\w+(?:'\w+)?", s.lower())


def _sentences(s: str) -> list[str]:
    from dhp.text import split_sentences

    return [x.strip() for x in split_sentences(s) if x.strip()]


def _changed(a: str, b: str) -> int:
    """Words replaced, inserted or deleted between two texts."""
    ops = difflib.SequenceMatcher(None, _words(a), _words(b), autojunk=False).get_opcodes()
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")


def _few_words(limit: int):
    return lambda a, b: None if 0 < _changed(a, b) <= limit else f"changed {_changed(a, b)} words (want 1..{limit})"


def _same_words_reordered(a: str, b: str) -> str | None:
    if sorted(_words(a)) != sorted(_words(b)):
        return "the words are not the same words reordered"
    return None if _words(a) != _words(b) else "word order unchanged"


def _same_sentences_reordered(a: str, b: str) -> str | None:
    sa, sb = _sentences(a), _sentences(b)
    return None if sorted(sa) == sorted(sb) and sa != sb else "not the same sentences in another order"


def _one_sentence_removed(a: str, b: str) -> str | None:
    sa, sb = _sentences(a), _sentences(b)
    return None if len(sb) == len(sa) - 1 and all(x in sa for x in sb) else "not exactly one sentence removed"


def _extends(a: str, b: str) -> str | None:
    kept = difflib.SequenceMatcher(None, _words(a), _words(b), autojunk=False)
    if sum(x.size for x in kept.get_matching_blocks()) < 0.9 * len(_words(a)):
        return "the original words are not kept"
    return None if len(_words(b)) > len(_words(a)) else "nothing was added"


def _continues(a: str, b: str) -> str | None:
    return None if _words(b)[: len(_words(a))] == _words(a) and len(_sentences(b)) > len(_sentences(a)) \
        else "the original is not kept with a new sentence after it"


def _negation_changed(a: str, b: str) -> str | None:
    if len(_NEGATION.findall(a)) == len(_NEGATION.findall(b)):
        return "no negation added or removed"
    return _few_words(4)(a, b)


def _connective_changed(a: str, b: str) -> str | None:
    if [m.lower() for m in _CONNECTIVES.findall(a)] == [m.lower() for m in _CONNECTIVES.findall(b)]:
        return "no connective changed"
    return _few_words(4)(a, b)


def _repeats(a: str, b: str) -> str | None:
    def dup(s: str) -> int:
        w = _words(s)
        grams = [tuple(w[i:i + 2]) for i in range(len(w) - 1)]
        return len(grams) - len(set(grams))
    return None if dup(b) > dup(a) and len(b) > len(a) else "no repeated phrase added"


def _fewer_sentences(a: str, b: str) -> str | None:
    return None if len(_sentences(b)) < len(_sentences(a)) else "the sentences were not merged"


def _shorter(a: str, b: str) -> str | None:
    return None if len(b) < len(a) else "the text did not get shorter"


CHECKS = {
    "repetition": _repeats, "passive_voice": _few_words(12), "inversion": _few_words(12),
    "improper_connective": _connective_changed, "sentence_exchange": _same_sentences_reordered,
    "incorrect_verb_form": _few_words(2), "word_exchange": _same_words_reordered, "spelling_mistake": _few_words(3),
    "uncommon_phrase": _few_words(8), "complex_sentence": _fewer_sentences, "abbreviation": _shorter,
    "hypernym": _few_words(6), "sentence_deletion": _one_sentence_removed, "complement": _extends,
    "continuation": _continues, "different_entity": _few_words(4), "conflicting_fact": _few_words(6),
    "negation": _negation_changed,
}
LENGTH = {"repetition": (1.02, 1.8), "complement": (1.02, 1.8), "continuation": (1.05, 2.5),
          "sentence_deletion": (0.2, 0.98), "abbreviation": (0.4, 0.99), "complex_sentence": (0.6, 1.5)}


def _rule(name: str):
    def apply(text: str, ctx):
        if name not in RULE_BASED:
            raise Skip(f"{name} has no rule-based version; use an LLM perturber")
        from dhp.perturb import attacks

        return attacks.RULE_ATTACKS[name](text, ctx.rng)
    return apply


def _verify(name: str):
    def verify(reference: str, text: str, ctx) -> bool:
        from dhp.perturb import attacks

        return bool(attacks.verify_attack(name, reference, text))
    return verify


for _name, _target in TARGET.items():
    register(Perturbation(
        _name, _LEVEL.get(_name, "sentence"), f"aspect-targeted attack on {_target.replace('_', '-')} (Hu et al. 2024)",
        apply=_rule(_name), tasks=_TASKS, verify=_verify(_name) if _name in RULE_BASED else None,
        check=ATTACK_CHECKS.get(_name, ""), llm=True,
        llm_length=LENGTH.get(_name, (0.6, 1.6)), llm_check=CHECKS[_name], family="criteria_confusion",
        quality_issue=f"targets {_target.replace('_', '-')}"))
