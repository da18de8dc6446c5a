"""The 18 aspect-targeted attacks of Hu et al. 2024 ("Are LLM-based evaluators confusing NLG quality
criteria?", Table 2), registered as perturbations of the family "criteria_confusion": they run only when
named (``perturb(..., perturbations=CONFUSION_ATTACKS)``), never in a default DHP run.

Every attack has an LLM version (a one-shot Auto-CoT prompt in dhp/prompts/perturb/<attack>_single.txt, used
with an LLM perturber, validated by the attack's own ``llm_check`` in ``CHECKS``: a check of what the edit is —
passive constructions and subordinate clauses from spaCy's parse, verb inflections from lemminflect, spellings
within 2 character edits, phrases inserted with every original word kept — not a cap on changed words. Each
accepts the paper's own Table 2 example of its attack, and 9 of the 306 (check, other attack's example)
pairs, all between look-alike edits, e.g. a restating repetition and a complement; tests/test_attacks.py);
nine also have a rule version built on
spaCy's parser, tagger and NER and on lemminflect (dhp.perturb.attacks). With ``perturber="rule"`` the nine
run and the other nine are skipped with a reason; the ``method`` column says which version made a row.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter

from dhp.perturb import attacks
from dhp.perturb.attacks import ATTACK_CHECKS, CONNECTIVES, osa_distance, parse, verb_inflections
from dhp.perturb.catalog import SINGLE, Perturbation, register
from dhp.perturb.rules import Skip
from dhp.text import split_sentences

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
_NEGATION = re.compile(r"\b(not|no|never|none|nobody|nothing|neither|nor)\b|n['\u2019]t\b", re.IGNORECASE)
# The rule attack's connective inventory (dhp.perturb.attacks.CONNECTIVES) plus a few more an LLM may use;
# longest first so "as a result" is one match, not "as".
_CONNECTIVE_WORDS = sorted(set(CONNECTIVES) | {"thus", "so", "because", "meanwhile", "consequently", "hence",
                                               "instead", "yet", "since", "as a result", "in addition"},
                           key=len, reverse=True)
_CONNECTIVES = re.compile(r"\b(" + "|".join(re.escape(w) for w in _CONNECTIVE_WORDS) + r")\b", re.IGNORECASE)


def _words(s: str) -> list[str]:
    return re.findall(r"\w+(?:'\w+)?", s.lower().replace("\u2019", "'"))


def _sentences(s: str) -> list[str]:
    return [x.strip() for x in split_sentences(s) if x.strip()]


def _changed(a: str, b: str) -> int:
    """Words replaced, inserted or deleted between two texts."""
    ops = difflib.SequenceMatcher(None, _words(a), _words(b), autojunk=False).get_opcodes()
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")


def _replacements(a: str, b: str) -> list[tuple[str, str]] | None:
    """The word-for-word replacements that turn `a` into `b`, or None when a word was inserted or deleted."""
    wa, wb = _words(a), _words(b)
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, wa, wb, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if tag != "replace" or i2 - i1 != j2 - j1:
            return None
        out += list(zip(wa[i1:i2], wb[j1:j2]))
    return out


def _doc(s: str):
    return parse(s.replace("\u2019", "'"))


def _content_lemmas(s: str, pos=("NOUN", "PROPN")) -> set[str]:
    return {t.lemma_.lower() for t in _doc(s) if t.pos_ in pos}


def _names(s: str) -> set[str]:
    return {t.lower_ for t in _doc(s) if t.pos_ == "PROPN"}


def _keeps(pos=("NOUN", "PROPN")):
    """The content words (noun and proper-noun lemmas) of the original are all still there."""
    def check(a: str, b: str) -> str | None:
        lost = _content_lemmas(a, pos) - _content_lemmas(b, pos)
        return f"content words lost: {', '.join(sorted(lost)[:5])}" if lost else None
    return check


def _same_sentence_count(a: str, b: str) -> str | None:
    na, nb = len(_sentences(a)), len(_sentences(b))
    return None if na == nb else f"{na} sentences became {nb} (want a rewrite inside the sentences)"


def _all(*checks):
    def check(a: str, b: str) -> str | None:
        for c in checks:
            if (why := c(a, b)):
                return why
        return None
    return check


def _few_words(limit: int):
    return lambda a, b: None if 0 < _changed(a, b) <= limit else f"changed {_changed(a, b)} words (want 1..{limit})"


def _at_most_share(high: float):
    """At least one word and at most a share `high` of the original's words replaced, inserted or deleted."""
    def check(a: str, b: str) -> str | None:
        n = _changed(a, b)
        share = n / max(1, len(_words(a)))
        return None if n >= 1 and share <= high else f"changed {share:.0%} of the words (want 1 word..{high:.0%})"
    return check


def _same_words_reordered(a: str, b: str) -> str | None:
    if sorted(_words(a)) != sorted(_words(b)):
        return "the words are not the same words reordered"
    if _words(a) == _words(b):
        return "word order unchanged"
    return _inside_sentences(a, b)


def _inside_sentences(a: str, b: str) -> str | None:
    sa, sb = _sentences(a), _sentences(b)
    return "not a reordering inside the sentences" if len(sa) != len(sb) or sorted(sa) == sorted(sb) else None


def _same_sentences_reordered(a: str, b: str) -> str | None:
    sa, sb = _sentences(a), _sentences(b)
    return None if sorted(sa) == sorted(sb) and sa != sb else "not the same sentences in another order"


def _constituents_moved(a: str, b: str) -> str | None:
    """Inversion: (nearly) the same words, some of them in another order inside the sentences, each
    sentence kept."""
    wa, wb = _words(a), _words(b)
    ca, cb = Counter(wa), Counter(wb)
    differ = sum(((ca - cb) + (cb - ca)).values())
    if differ > max(2, 0.1 * len(wa)):
        return f"{differ} words differ (want the same words in another order)"
    common = ca & cb
    if [w for w in wa if w in common] == [w for w in wb if w in common]:
        return "word order unchanged"
    return _inside_sentences(a, b)


def _inflections_changed(a: str, b: str) -> str | None:
    """Incorrect verb form: words replaced one for one, each by another inflection of the same verb."""
    pairs = _replacements(a, b)
    if not pairs:
        return "not word-for-word replacements" if pairs is None else "nothing changed"
    other = [(x, y) for x, y in pairs if y not in verb_inflections(x) and x not in verb_inflections(y)]
    return f"'{other[0][0]}' -> '{other[0][1]}' is not another form of the same verb" if other else None


def _misspelled(a: str, b: str) -> str | None:
    """Spelling mistake: words replaced one for one, each within 2 character edits, not a real inflection,
    and no more than half of the words."""
    pairs = _replacements(a, b)
    if not pairs:
        return "not word-for-word replacements" if pairs is None else "nothing changed"
    if len(pairs) > 0.5 * len(_words(a)):
        return f"{len(pairs)} of {len(_words(a))} words changed (want at most half)"
    far = [(x, y) for x, y in pairs if osa_distance(x, y) > 2]
    if far:
        return f"'{far[0][0]}' -> '{far[0][1]}' is more than 2 character edits"
    if all(y in verb_inflections(x) for x, y in pairs):
        return "only verb forms changed (that is incorrect verb form)"
    return None


_CLAUSES = ("relcl", "advcl", "acl", "ccomp", "csubj", "csubjpass")


def _clauses(s: str) -> int:
    return sum(t.dep_ in _CLAUSES for t in _doc(s))


def _more_complex(a: str, b: str) -> str | None:
    """Complex sentence: more subordinate clauses (spaCy dependencies relcl, advcl, acl, ccomp, csubj), or
    sentences merged, with the original's content words kept."""
    if not (_clauses(b) > _clauses(a) or len(_sentences(b)) < len(_sentences(a))):
        return "no subordinate clause added and no sentences merged"
    return _keeps()(a, b)


def _more_passive(a: str, b: str) -> str | None:
    """Passive voice: more passive constructions (spaCy auxpass/nsubjpass), content words kept."""
    def n(s):
        return sum(t.dep_ in ("auxpass", "nsubjpass") for t in _doc(s))
    if n(b) <= n(a):
        return "no passive construction added"
    return _keeps()(a, b)


def _only_substitutions(a: str, b: str) -> str | None:
    """Every difference replaces words by other words (nothing only inserted or deleted), and not merely
    by other forms or misspellings of themselves."""
    ops = difflib.SequenceMatcher(None, _words(a), _words(b), autojunk=False).get_opcodes()
    if any(tag in ("insert", "delete") for tag, *_ in ops):
        return "words only inserted or deleted (want words replaced by other words)"
    if _inflections_changed(a, b) is None or _misspelled(a, b) is None:
        return "only inflections or spellings changed"
    return None


def _content_changed(a: str, b: str) -> str | None:
    """Conflicting fact: some content word of the original (noun, name, verb, adjective, adverb, number) is
    gone, and not merely misspelled."""
    pos = ("NOUN", "PROPN", "VERB", "ADJ", "ADV", "NUM")
    if not _content_lemmas(a, pos) - _content_lemmas(b, pos):
        return "no content word of the original changed"
    return "only spellings changed" if _misspelled(a, b) is None else None


def _names_kept(a: str, b: str) -> str | None:
    lost = _names(a) - _names(b)
    return f"names lost: {', '.join(sorted(lost)[:5])}" if lost else None


def _continues(a: str, b: str) -> str | None:
    return None if _words(b)[: len(_words(a))] == _words(a) and len(_sentences(b)) > len(_sentences(a)) \
        else "the original is not kept with a new sentence after it"


def _one_sentence_removed(a: str, b: str) -> str | None:
    sa, sb = _sentences(a), _sentences(b)
    return None if len(sb) == len(sa) - 1 and all(x in sa for x in sb) else "not exactly one sentence removed"


def _negation_changed(a: str, b: str) -> str | None:
    if len(_NEGATION.findall(a)) == len(_NEGATION.findall(b)):
        return "no negation added or removed"
    return _few_words(4)(a, b)


def _connective_changed(a: str, b: str) -> str | None:
    if [m.lower() for m in _CONNECTIVES.findall(a)] == [m.lower() for m in _CONNECTIVES.findall(b)]:
        return "no connective changed"
    if len(_NEGATION.findall(a)) != len(_NEGATION.findall(b)):
        return "a negation was added or removed (that is the negation attack)"
    return _few_words(4)(a, b)


def _inserted_phrase(a: str, b: str) -> str | None:
    """Repetition and complement: only insertions inside the sentences, every original word kept in order,
    at least one inserted run of two or more words (or a word repeated right beside itself), and no negation
    added (a single inserted connective or "not" is another attack). The paper's repetition restates
    ("choose and make the selection of"), so a literal repeat is not required; a restatement and a
    complement cannot be told apart without reading the meaning."""
    wa, wb = _words(a), _words(b)
    ops = difflib.SequenceMatcher(None, wa, wb, autojunk=False).get_opcodes()
    if any(tag in ("replace", "delete") for tag, *_ in ops) or len(wb) <= len(wa):
        return "not every original word kept in order with words added"
    runs = [(wb[j1:j2], wb[max(0, j1 - (j2 - j1)):j1], wb[j2:j2 + (j2 - j1)])
            for tag, i1, i2, j1, j2 in ops if tag == "insert"]
    if not any(len(r) >= 2 or r in (before, after) for r, before, after in runs):
        return "no phrase added (only single words)"
    if len(_NEGATION.findall(a)) != len(_NEGATION.findall(b)):
        return "a negation was added (that is the negation attack)"
    return _same_sentence_count(a, b)


def _shorter(a: str, b: str) -> str | None:
    if len(b) >= len(a):
        return "the text did not get shorter"
    return "one sentence deleted, nothing abbreviated" if _one_sentence_removed(a, b) is None else None


CHECKS = {
    "repetition": _inserted_phrase, "passive_voice": _all(_same_sentence_count, _more_passive),
    "inversion": _all(_constituents_moved, _keeps()),
    "improper_connective": _connective_changed, "sentence_exchange": _same_sentences_reordered,
    "incorrect_verb_form": _inflections_changed, "word_exchange": _same_words_reordered,
    "spelling_mistake": _misspelled,
    "uncommon_phrase": _all(_same_sentence_count, _at_most_share(0.6), _only_substitutions, _names_kept),
    "complex_sentence": _more_complex, "abbreviation": _shorter,
    "hypernym": _all(_few_words(6), _only_substitutions), "sentence_deletion": _one_sentence_removed,
    "complement": _inserted_phrase,
    "continuation": _continues, "different_entity": _all(_few_words(4), _only_substitutions),
    "conflicting_fact": _all(_same_sentence_count, _at_most_share(0.6), _content_changed),
    "negation": _negation_changed,
}
LENGTH = {"repetition": (1.02, 1.8), "complement": (1.02, 1.8), "continuation": (1.05, 2.5),
          "sentence_deletion": (0.2, 0.98), "abbreviation": (0.4, 0.99), "complex_sentence": (0.6, 1.5)}


def _rule(name: str):
    def apply(text: str, ctx):
        if name not in RULE_BASED:
            raise Skip(f"{name} has no rule-based version; use an LLM perturber")
        return attacks.RULE_ATTACKS[name](text, ctx.rng)
    return apply


def _verify(name: str):
    def verify(reference: str, text: str, ctx) -> bool:
        return bool(attacks.verify_attack(name, reference, text))
    return verify


for _name, _target in TARGET.items():
    register(Perturbation(
        _name, _LEVEL.get(_name, "sentence"), f"aspect-targeted attack on {_target.replace('_', '-')} (Hu et al. 2024)",
        apply=_rule(_name), tasks=_TASKS, verify=_verify(_name) if _name in RULE_BASED else None,
        check=ATTACK_CHECKS.get(_name, ""), llm=True,
        llm_length=LENGTH.get(_name, (0.6, 1.6)), llm_check=CHECKS[_name], family="criteria_confusion",
        quality_issue=f"targets {_target.replace('_', '-')}"))
