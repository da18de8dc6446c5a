"""Rule-based grammatical errors: one error (minor/single) or several (major, 2-3) from these rules.

- subject_verb: flip an auxiliary's number (is<->are, was<->were, has<->have, does<->do), or drop
  the -s of a verb after he/she/it ("she wants" -> "she want");
- verb_tense: a past form where the base or participle is required ("will go" -> "will went",
  "has taken" -> "has took", "will announce" -> "will announced", "to see" -> "to saw"), or an
  irregular past regularised ("went" -> "goed");
- article: a<->an against the next word's first letter ("a apple", "an house");
- preposition: swap a preposition for a wrong one (in<->on, at->on, of->for, to->at before a noun
  phrase, with->by, for->of);
- fragment: split a subordinate clause off as its own sentence ("..., which was ..." ->
  "... . Which was ...", "... because ..." -> "... . Because ..."), or drop the auxiliary of a
  passive ("was founded" -> "founded");
- pronoun_agreement: its<->their;
- pronoun_case: a subject pronoun in object form at a clause start ("She left" -> "Her left"), or
  an object pronoun after a past verb in subject form ("told him" -> "told he").
Chosen errors touch tokens at least one untouched word apart, so each is a separate change.
"""

from __future__ import annotations

import difflib
import random
import re
from dataclasses import dataclass

from dhp.perturb.rules import Skip

AGREE = {"is": "are", "are": "is", "was": "were", "were": "was", "has": "have", "have": "has",
         "does": "do", "do": "does"}
# base, simple past, past participle
IRREGULAR = [
    ("be", "was", "been"), ("begin", "began", "begun"), ("break", "broke", "broken"),
    ("bring", "brought", "brought"), ("choose", "chose", "chosen"), ("come", "came", "come"),
    ("do", "did", "done"), ("drink", "drank", "drunk"), ("drive", "drove", "driven"),
    ("eat", "ate", "eaten"), ("fall", "fell", "fallen"), ("find", "found", "found"),
    ("fly", "flew", "flown"), ("forget", "forgot", "forgotten"), ("get", "got", "gotten"),
    ("give", "gave", "given"), ("go", "went", "gone"), ("grow", "grew", "grown"),
    ("have", "had", "had"), ("hold", "held", "held"), ("know", "knew", "known"),
    ("leave", "left", "left"), ("lose", "lost", "lost"), ("make", "made", "made"),
    ("meet", "met", "met"), ("pay", "paid", "paid"), ("ride", "rode", "ridden"),
    ("rise", "rose", "risen"), ("run", "ran", "run"), ("say", "said", "said"), ("see", "saw", "seen"),
    ("sell", "sold", "sold"), ("send", "sent", "sent"), ("show", "showed", "shown"),
    ("sing", "sang", "sung"), ("sit", "sat", "sat"), ("speak", "spoke", "spoken"),
    ("spend", "spent", "spent"), ("stand", "stood", "stood"), ("steal", "stole", "stolen"),
    ("swim", "swam", "swum"), ("take", "took", "taken"), ("teach", "taught", "taught"),
    ("tell", "told", "told"), ("think", "thought", "thought"), ("throw", "threw", "thrown"),
    ("wake", "woke", "woken"), ("wear", "wore", "worn"), ("win", "won", "won"),
    ("write", "wrote", "written"), ("buy", "bought", "bought"), ("catch", "caught", "caught"),
    ("feel", "felt", "felt"), ("keep", "kept", "kept"), ("lead", "led", "led"),
]
BASE_TO_PAST = {b: p for b, p, _ in IRREGULAR}
PARTICIPLE_TO_PAST = {pp: p for _, p, pp in IRREGULAR if pp != p}
MODALS = {"will", "would", "can", "could", "should", "may", "might", "must", "shall", "didn't",
          "don't", "doesn't", "won't", "can't", "couldn't", "wouldn't", "shouldn't", "did"}
PAST_TO_BASE = {p: b for b, p, _ in IRREGULAR if p not in {"left", "was", "had", "did", "made"}}
SUBJECT_TO_OBJECT = {"he": "him", "she": "her", "they": "them", "we": "us", "i": "me"}
OBJECT_TO_SUBJECT = {"him": "he", "them": "they"}
NOT_VERBS = {
    "be", "not", "also", "never", "still", "soon", "only", "always", "just", "likely", "probably",
    "then", "now", "all", "both", "even", "easily", "already", "really", "certainly", "help",
    "the", "a", "an", "this", "that", "his", "her", "their", "its", "our", "your", "my", "n't",
}
PREP_SWAP = {"in": "on", "on": "in", "at": "on", "of": "for", "with": "by", "for": "of", "from": "of"}
DETERMINERS = {"the", "a", "an", "his", "her", "their", "its", "our", "my", "your", "this", "that"}
FRAGMENT_CONJ = {"because", "although", "which", "while", "whereas"}
THIRD_PERSON = {"he", "she", "it"}
NON_VERB_S = {"is", "was", "has", "does", "this", "its", "his", "hers", "as", "us", "thus", "less",
              "always", "perhaps", "news", "yes", "plus", "across", "unless", "various", "famous"}

_TOKEN = re.compile(r"\S+")
_CORE = re.compile(r"^(\W*)(.*?)(\W*)$", re.DOTALL)


@dataclass(frozen=True)
class Edit:
    tokens: tuple[int, ...]  # token indices the edit touches (consecutive)
    new: tuple[str, ...]  # replacement token strings ("" deletes the token)
    kind: str
    desc: str


def _split(tok: str) -> tuple[str, str, str]:
    return _CORE.match(tok).groups()


def _case(like: str, word: str) -> str:
    return word[:1].upper() + word[1:] if like[:1].isupper() else word


def _past_regular(w: str) -> str:
    if w.endswith("e"):
        return w + "d"
    if re.search(r"[^aeiou]y$", w):
        return w[:-1] + "ied"
    return w + "ed"


def _drop_s(w: str) -> str:
    if w.endswith("ies"):
        return w[:-3] + "y"
    if re.search(r"(ch|sh|x|ss|z|o)es$", w):
        return w[:-2]
    return w[:-1]


def candidates(text: str) -> list[Edit]:
    """Every grammatical error the rules can make in `text` (one Edit each).

    Long on purpose: it is the rule list itself, one short block per error type, read top to bottom.
    """
    toks = [m.group() for m in _TOKEN.finditer(text)]
    parts = [_split(t) for t in toks]
    cores = [p[1] for p in parts]
    low = [c.lower() for c in cores]
    out: list[Edit] = []

    def repl(i: int, core: str) -> str:
        lead, old, trail = parts[i]
        return lead + _case(old, core) + trail

    for i, w in enumerate(low):
        prev = low[i - 1] if i > 0 and not parts[i - 1][2] else ""  # no punctuation in between
        nxt = low[i + 1] if i + 1 < len(low) and not parts[i][2] else ""
        if not w.isalpha():
            continue
        if w in AGREE and not (w == "were" and prev in {"if", "i", "wish"}):
            out.append(Edit((i,), (repl(i, AGREE[w]),), "subject_verb", f"{cores[i]!r}->{AGREE[w]!r}"))
        if prev in THIRD_PERSON and w.endswith("s") and len(w) > 3 and w not in NON_VERB_S \
                and not w.endswith(("ss", "us", "is")):
            out.append(Edit((i,), (repl(i, _drop_s(w)),), "subject_verb", f"{cores[i]!r}->{_drop_s(w)!r}"))
        if prev in {"has", "have", "had"} and w in PARTICIPLE_TO_PAST:
            new = PARTICIPLE_TO_PAST[w]
            out.append(Edit((i,), (repl(i, new),), "verb_tense", f"{prev} {cores[i]!r}->{new!r}"))
        if prev == "to" and w in BASE_TO_PAST and w not in NOT_VERBS:
            new = BASE_TO_PAST[w]
            out.append(Edit((i,), (repl(i, new),), "verb_tense", f"to {cores[i]!r}->{new!r}"))
        if w in PAST_TO_BASE and cores[i].islower():
            new = PAST_TO_BASE[w] + ("d" if PAST_TO_BASE[w].endswith("e") else "ed")
            out.append(Edit((i,), (repl(i, new),), "verb_tense", f"{cores[i]!r}->{new!r} (regularised)"))
        if w in SUBJECT_TO_OBJECT and nxt.isalpha() and nxt not in {"and", "or"} \
                and (i == 0 or parts[i - 1][2] in {".", "!", "?", ","} or low[i - 1] in {"and", "but", "so", "then", "when", "because"}):
            new = SUBJECT_TO_OBJECT[w]
            out.append(Edit((i,), (repl(i, new),), "pronoun_case", f"{cores[i]!r}->{new!r}"))
        if w in OBJECT_TO_SUBJECT and i > 0 and not parts[i - 1][2] and low[i - 1].endswith("ed"):
            new = OBJECT_TO_SUBJECT[w]
            out.append(Edit((i,), (repl(i, new),), "pronoun_case", f"{cores[i]!r}->{new!r}"))
        if prev in MODALS and w not in NOT_VERBS and cores[i].islower():
            new = BASE_TO_PAST.get(w) or (None if w.endswith(("ed", "ing", "ly", "s")) else _past_regular(w))
            if new:
                out.append(Edit((i,), (repl(i, new),), "verb_tense", f"{prev} {cores[i]!r}->{new!r}"))
        if w in {"a", "an"} and nxt and nxt[0].isalpha():
            vowel = nxt[0] in "aeiou"
            if (w == "a") == vowel:
                pass  # already wrong in the source; leave it
            else:
                new = "an" if w == "a" else "a"
                out.append(Edit((i,), (repl(i, new),), "article", f"{cores[i]!r}->{new!r} before {cores[i + 1]!r}"))
        if w in PREP_SWAP and nxt:
            out.append(Edit((i,), (repl(i, PREP_SWAP[w]),), "preposition", f"{cores[i]!r}->{PREP_SWAP[w]!r}"))
        if w == "to" and nxt in DETERMINERS:
            out.append(Edit((i,), (repl(i, "at"),), "preposition", f"{cores[i]!r}->'at'"))
        if w in FRAGMENT_CONJ and i > 1 and i + 2 < len(toks) and parts[i][0] == "" \
                and (w != "which" or parts[i - 1][2] == ",") and re.fullmatch(r",?", parts[i - 1][2]) \
                and cores[i - 1]:
            lead, core, _ = parts[i - 1]
            new_prev = lead + core + "."
            new_conj = _case("X", cores[i]) + parts[i][2]
            out.append(Edit((i - 1, i), (new_prev, new_conj), "fragment", f"split at {cores[i]!r}"))
        if w in {"was", "were", "is", "are"} and i > 0 and nxt.endswith("ed") and prev.isalpha() \
                and prev not in {"it", "there", "this", "that", "what"}:
            out.append(Edit((i,), ("",), "fragment", f"dropped auxiliary {cores[i]!r}"))
        if w in {"its", "their"}:
            new = "their" if w == "its" else "its"
            out.append(Edit((i,), (repl(i, new),), "pronoun_agreement", f"{cores[i]!r}->{new!r}"))
    return out


def n_errors(severity: str, available: int) -> int:
    """One error for minor/single; three for major when the text allows, else two."""
    if severity != "major":
        return 1
    if available < 2:
        raise Skip(f"the rules found {available} place(s) for an error; major needs at least 2")
    return min(3, available)


def apply_edits(text: str, edits: list[Edit]) -> str:
    spans = [m.span() for m in _TOKEN.finditer(text)]
    new_tok = {}
    for e in edits:
        for t, s in zip(e.tokens, e.new):
            new_tok[t] = s
    out, last = [], 0
    for t in sorted(new_tok):
        a, b = spans[t]
        out.append(text[last:a])
        if new_tok[t] == "":  # deleted token: also drop the whitespace after it
            last = spans[t + 1][0] if t + 1 < len(spans) else b
            continue
        out.append(new_tok[t])
        last = b
    out.append(text[last:])
    return "".join(out)


def grammatical_errors(text: str, severity: str, rng: random.Random) -> tuple[str, str]:
    """Introduce one (minor/single) or 2-3 (major) grammatical errors, of different kinds when
    possible, each at least one unchanged word away from the others."""
    cands = candidates(text)
    if not cands:
        raise Skip("no place found for a rule-based grammatical error")
    by_kind: dict[str, list[Edit]] = {}
    for c in cands:
        by_kind.setdefault(c.kind, []).append(c)
    want = n_errors(severity, len(cands))
    chosen: list[Edit] = []
    blocked: set[int] = set()
    kinds = sorted(by_kind)
    rng.shuffle(kinds)
    # Round-robin over kinds so several errors are of different kinds when the text allows.
    pools = {k: rng.sample(by_kind[k], len(by_kind[k])) for k in kinds}
    while len(chosen) < want and any(pools.values()):
        for k in kinds:
            while pools[k]:
                e = pools[k].pop()
                if not any(t in blocked for t in e.tokens):
                    chosen.append(e)
                    for t in e.tokens:
                        blocked.update({t - 1, t, t + 1})
                    break
            if len(chosen) == want:
                break
    if len(chosen) < (2 if severity == "major" else 1):
        raise Skip(f"only {len(chosen)} non-adjacent error site(s) found; need {want}")
    chosen.sort(key=lambda e: e.tokens)
    new = apply_edits(text, chosen)
    desc = "; ".join(f"{e.kind} {e.desc}" for e in chosen)
    n = len(chosen)
    return new, f"{n} grammatical error{'s' if n > 1 else ''}: {desc}"


def changed_blocks(original: str, new: str) -> int:
    """Number of separate changed regions between the word sequences of the two texts."""
    a, b = original.split(), new.split()
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return sum(1 for op in ops if op[0] != "equal")
