"""Rule-based rewrite-and-insert: paraphrase sentence(s) and insert each rewrite right after its
original sentence (the redundancy is the quality issue).

Paraphrase rules, applied in this order; at least one always changes the sentence:
1. reporting verb: "X said (that) Y." -> "According to X, Y." and "Y, X said." -> "According to X, Y.";
2. clause fronting: "A because/although/after/before/when/while/since/if B." -> "Because B, a.";
3. synonyms: common words swapped from a fixed table ("show" -> "demonstrate", ...);
4. if nothing else applied: "In other words, <sentence>".
"""

from __future__ import annotations

import math
import random
import re

from dhp.perturb.entities import is_name_or_place
from dhp.perturb.rules import Skip, sentence_spans

SYNONYMS = {
    "said": "stated", "says": "states", "big": "large", "large": "big", "many": "numerous",
    "show": "demonstrate", "shows": "demonstrates", "showed": "demonstrated",
    "however": "nevertheless", "important": "significant", "help": "assist", "helps": "assists",
    "use": "employ", "used": "employed", "uses": "employs", "using": "employing",
    "also": "additionally", "but": "yet", "start": "begin", "started": "began", "begin": "start",
    "began": "started", "buy": "purchase", "bought": "purchased", "get": "obtain", "got": "obtained",
    "need": "require", "needs": "requires", "needed": "required", "try": "attempt",
    "tried": "attempted", "find": "discover", "found": "discovered", "small": "little",
    "quickly": "rapidly", "fast": "quick", "happy": "glad", "sad": "unhappy", "often": "frequently",
    "increase": "rise", "increased": "rose", "decrease": "decline",
    "decreased": "declined", "result": "outcome", "results": "outcomes", "method": "approach",
    "methods": "approaches", "study": "investigation", "aim": "goal", "whole": "entire",
    "very": "highly", "begins": "starts", "killed": "slain", "died": "passed away",
    "children": "kids", "house": "home", "went": "headed", "decided": "chose", "wanted": "wished",
    "looked": "appeared", "told": "informed", "asked": "requested", "made": "created",
    "make": "create", "makes": "creates", "important.": "significant.", "because": "since",
    "although": "though", "before": "prior to", "after": "following", "while": "whereas",
    "new": "novel", "several": "a number of", "people": "individuals",
    "patients": "subjects", "role": "function", "effect": "impact", "effects": "impacts",
    "suggest": "indicate", "suggests": "indicates", "suggested": "indicated", "reported": "noted",
    "announced": "declared", "claimed": "asserted", "received": "got", "believe": "think",
    "believes": "thinks", "believed": "thought", 
}
REPORTING = r"(?:said|says|told reporters|reported|announced|added|explained|stated|claimed)"
CONJ = r"(?:because|although|after|before|when|while|since|if)"


def _lower_first(s: str) -> str:
    """Lower-case the first letter for use mid-sentence, unless the first word looks like a name
    ("I", acronyms, known first/last names and places keep their capital)."""
    first = s.split(" ", 1)[0].strip(",;:")
    if first == "I" or first[1:2].isupper() or first[:1].islower() or is_name_or_place(first):
        return s
    return s[:1].lower() + s[1:]


def _synonyms(s: str) -> tuple[str, int]:
    n = 0

    def sub(m: re.Match) -> str:
        nonlocal n
        w = m.group()
        r = SYNONYMS.get(w.lower())
        if r is None:
            return w
        n += 1
        return r[:1].upper() + r[1:] if w[:1].isupper() else r

    return re.sub(r"\b[A-Za-z]+\b", sub, s), n


def paraphrase(sentence: str) -> tuple[str, list[str]]:
    """A rule-based paraphrase of one sentence that differs from it, and the rules used."""
    s = sentence.strip()
    end = s[-1] if s and s[-1] in ".!?" else "."
    body = s[:-1] if s and s[-1] in ".!?" else s
    rules = []
    m = re.fullmatch(rf"(?P<subj>[^,]{{2,60}}?) {REPORTING}(?: that)? (?P<rest>.+)", body)
    m2 = re.fullmatch(rf"(?P<rest>.+), (?P<subj>[^,]{{2,60}}?) {REPORTING}", body)
    if m2 and not m2.group("rest").startswith(("'", '"')):
        body = f"According to {_lower_first(m2.group('subj'))}, {_lower_first(m2.group('rest'))}"
        rules.append("reporting_verb")
    elif m and len(m.group("subj").split()) <= 6:
        body = f"According to {_lower_first(m.group('subj'))}, {_lower_first(m.group('rest'))}"
        rules.append("reporting_verb")
    else:
        m = re.fullmatch(rf"(?P<a>[^,]{{8,}}?),? (?P<c>{CONJ}) (?P<b>[^,]{{8,}})", body)
        if m:
            body = f"{m.group('c').capitalize()} {m.group('b')}, {_lower_first(m.group('a'))}"
            rules.append("clause_fronting")
    body, n = _synonyms(body)
    if n:
        rules.append(f"synonyms({n})")
    out = body + end
    if out == s or not rules:
        out = "In other words, " + _lower_first(s)
        rules = ["discourse_marker"]
    return out, rules


def rewrite_insert(text: str, severity: str, rng: random.Random) -> tuple[str, str]:
    """Paraphrase one (minor) or several (major: half, at least two) sentences and insert each
    rewrite right after its original."""
    spans = sentence_spans(text)
    n = len(spans)
    if n == 0:
        raise Skip("no sentence found")
    if severity == "major":
        if n < 2:
            raise Skip(f"text has {n} sentence; the major level rewrites at least 2")
        m = max(2, math.ceil(n / 2))
    else:
        m = 1
    chosen = sorted(rng.sample(range(n), m))
    out, last, notes = [], 0, []
    for i in chosen:
        a, b = spans[i]
        rewrite, rules = paraphrase(text[a:b])
        out.append(text[last:b])
        out.append(" " + rewrite)
        last = b
        notes.append(f"after sentence {i + 1} ({'+'.join(rules)})")
    out.append(text[last:])
    return "".join(out), f"inserted {m} rewritten sentence{'s' if m > 1 else ''}: " + "; ".join(notes)


def inserted_rewrites(original: str, new: str) -> list[str] | None:
    """The pieces inserted right after original sentences to give `new` (None if `new` is not
    the original with whole sentences inserted at sentence ends)."""
    spans = sentence_spans(original)
    if not spans:
        return None
    parts, last = [], 0
    for i, (a, b) in enumerate(spans):
        parts.append(re.escape(original[last:b]))
        parts.append(f"(?: (?P<r{i}>[^\\n]+?))?")
        last = b
    parts.append(re.escape(original[last:]))
    m = re.fullmatch("".join(parts), new, flags=re.DOTALL)
    if m is None:
        return None
    got = [(i, m.group(f"r{i}")) for i in range(len(spans)) if m.group(f"r{i}")]
    return [g for i, g in got if g.strip() != original[spans[i][0] : spans[i][1]].strip()] if all(
        g.strip() != original[spans[i][0] : spans[i][1]].strip() for i, g in got
    ) else None
