"""Exact rule-based perturbations: character deletion, typos, contiguous word deletion, sentence
reordering and replacement by another item's text; plus the seeding and edit-distance helpers.

Every function takes the text, its count/severity and a `random.Random` seeded for this row, and
returns (new_text, edits) or raises `Skip(reason)` when the text cannot carry the perturbation.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from contextlib import contextmanager
from functools import lru_cache

import typo
from rapidfuzz.distance import OSA, Levenshtein

from dhp.text import split_sentences


class Skip(Exception):
    """The text cannot carry this perturbation; the row is recorded as skipped with this reason."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


# --- seeds ----------------------------------------------------------------------------------


def stable_seed(*parts) -> int:
    """A 63-bit seed from the parts, identical across processes and Python versions.

    Python's hash() is salted per process, so we use blake2b over the joined string instead.
    """
    key = "\x1f".join(str(p) for p in parts).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1


@contextmanager
def isolated_global_random():
    """Save and restore Python's global `random` state: the `typo` package reseeds it."""
    state = random.getstate()
    try:
        yield
    finally:
        random.setstate(state)


# --- edit distance --------------------------------------------------------------------------


def edit_distance(a: str, b: str, transpositions: bool = False) -> int:
    """Levenshtein distance between two strings; with `transpositions`, the optimal string
    alignment distance (swapping two adjacent characters costs 1). Computed by rapidfuzz."""
    return int((OSA if transpositions else Levenshtein).distance(a, b))


# --- character level ------------------------------------------------------------------------


def alnum_positions(text: str) -> list[int]:
    return [i for i, c in enumerate(text) if c.isalnum()]


def char_deletion(text: str, k: int, rng: random.Random) -> tuple[str, str]:
    """Delete exactly k alphanumeric characters at distinct random positions."""
    pos = alnum_positions(text)
    if len(pos) <= k:
        raise Skip(
            f"text has {len(pos)} alphanumeric characters; deleting k={k} needs more than {k}"
        )
    drop = set(rng.sample(pos, k))
    return "".join(c for i, c in enumerate(text) if i not in drop), f"deleted {k} alphanumeric chars"


def is_char_deletion(original: str, new: str, k: int) -> bool:
    """True when `new` is `original` with exactly k alphanumeric characters removed."""
    if len(original) - len(new) != k:
        return False
    # Non-alphanumeric characters untouched (so all k removed ones were alphanumeric) ...
    if [c for c in original if not c.isalnum()] != [c for c in new if not c.isalnum()]:
        return False
    # ... and `new` is a subsequence of `original`.
    it = iter(original)
    return all(c in it for c in new)


# Typo kinds we take from the `typo` package, each one edit (a swap is one transposition).
TYPO_KINDS = ("char_swap", "missing_char", "extra_char", "nearby_char", "similar_char", "repeated_char")
_TWO_CHAR = {"char_swap", "missing_char"}  # need a window of two word characters


def _typo_ok(c: str) -> bool:
    # The typo package only knows ASCII keyboard neighbours; others would be silent no-ops.
    return c.isascii() and c.isalnum()


def _spaced_sample(cands: list[int], k: int, gap: int, rng: random.Random) -> list[int] | None:
    """k positions from `cands`, pairwise at least `gap` apart, or None if greedy packing fails."""
    order = cands[:]
    rng.shuffle(order)
    taken: set[int] = set()
    out = []
    for p in order:
        if any((p + d) in taken for d in range(-gap + 1, gap)):
            continue
        taken.add(p)
        out.append(p)
        if len(out) == k:
            return sorted(out)
    return None


def char_typo(text: str, k: int, rng: random.Random, max_attempts: int = 30) -> tuple[str, str]:
    """Add exactly k typographical errors made by the `typo` package.

    k positions at least 2 characters apart each get one typo; the package works on a one- or
    two-character window around the position, seeded from `rng`, with Python's global random
    state saved and restored. The result is accepted only if its optimal-string-alignment
    distance to the original is exactly k (so no two typos cancel or merge).
    """
    cands = [i for i, c in enumerate(text) if _typo_ok(c)]
    if len(cands) < 2 * k:
        raise Skip(
            f"text has {len(cands)} typo-able characters; k={k} separated typos need at least {2 * k}"
        )
    with isolated_global_random():
        for attempt in range(max_attempts):
            # Prefer typos 3+ characters apart (fewer interactions); dense texts need 2.
            positions = _spaced_sample(cands, k, 3, rng) or _spaced_sample(cands, k, 2, rng)
            if positions is None:
                continue
            out, last, kinds, ok = [], 0, Counter(), True
            for n, p in enumerate(positions):
                nxt = positions[n + 1] if n + 1 < len(positions) else len(text)
                two = p + 1 < nxt and p + 1 < len(text) and _typo_ok(text[p + 1])
                kinds_order = list(TYPO_KINDS)
                rng.shuffle(kinds_order)
                for kind in kinds_order:
                    if kind in _TWO_CHAR and not two:
                        continue
                    if kind == "char_swap" and (
                        text[p].lower() == text[p + 1].lower()
                        or text[p].isupper() != text[p + 1].isupper()
                    ):  # the package keeps case per position, so mixed case would be 2 edits
                        continue
                    window = text[p : p + 2] if kind in _TWO_CHAR else text[p]
                    err = typo.StrErrer(window, seed=rng.getrandbits(32))
                    changed = getattr(err, kind)().result
                    if changed != window:
                        break
                else:
                    ok = False
                    break
                out.append(text[last:p])
                out.append(changed)
                last = p + len(window)
                kinds[kind] += 1
            if not ok:
                continue
            out.append(text[last:])
            new = "".join(out)
            if edit_distance(text, new, transpositions=True) == k:
                summary = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
                return new, f"{k} typos: {summary}"
    raise Skip(f"could not place k={k} non-overlapping typos in {max_attempts} attempts")


# --- word level -----------------------------------------------------------------------------


def words(text: str) -> list[str]:
    """Words for word-level perturbations: whitespace-separated tokens (punctuation attached)."""
    return text.split()


def word_deletion(text: str, k: int, rng: random.Random) -> tuple[str, str]:
    """Delete exactly k contiguous words (whitespace tokens) starting at a random word."""
    toks = list(re.finditer(r"\S+", text))
    if len(toks) <= k:
        raise Skip(f"text has {len(toks)} words; deleting k={k} contiguous words needs more than {k}")
    j = rng.randrange(0, len(toks) - k + 1)
    if j + k < len(toks):
        new = text[: toks[j].start()] + text[toks[j + k].start() :]
    else:  # deleting the tail: drop the whitespace before it too
        new = text[: toks[j - 1].end()] + text[toks[j + k - 1].end() :]
    return new, f"deleted {k} contiguous words starting at word {j + 1}"


def is_word_deletion(original: str, new: str, k: int) -> bool:
    """True when the words of `new` are those of `original` minus one run of exactly k words."""
    a, b = words(original), words(new)
    if len(a) - len(b) != k:
        return False
    return any(a[:j] + a[j + k :] == b for j in range(len(a) - k + 1))


# --- sentence level -------------------------------------------------------------------------


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence in `text` (pysbd via dhp.text.split_sentences)."""
    spans, cur = [], 0
    for s in split_sentences(text):
        i = text.find(s, cur)
        if i < 0:  # the splitter normalised something; fall back to no spans
            return []
        spans.append((i, i + len(s)))
        cur = i + len(s)
    return spans


def control_format(text: str) -> tuple[str, str]:
    """The negative control: the same words and punctuation laid out one sentence per line (a single
    sentence gets a trailing line break). No reader would call it worse, yet its judge prompt — and so
    its cache key — differs from the original's, so the judge scores it in a call of its own and its D
    measures the judge's test-retest noise (an identical text would just reuse the original's answer)."""
    spans = sentence_spans(text)
    if len(spans) > 1:
        # only the white space between sentences becomes a line break: two spans with nothing between them (a
        # closing quote the splitter made a sentence of its own) stay joined, so no word is split
        pieces, last = [], 0
        for a, b in spans:
            gap = text[last:a]
            pieces.append("\n" if last and gap and not gap.strip() else gap)
            pieces.append(text[a:b])
            last = b
        new = ("".join(pieces) + text[last:]).strip()
    else:
        new = text.strip() + "\n"
    if new == text:  # already laid out that way
        new = text + "\n"
    return new, "reformatted: one sentence per line (words unchanged)"


def is_control(original: str, new: str) -> bool:
    """True when ``new`` differs from ``original`` only in white space (the control's promise)."""
    return new != original and " ".join(new.split()) == " ".join(original.split())


def _rebuild(text: str, spans: list[tuple[int, int]], order: list[int]) -> str:
    """The text with sentence i replaced by sentence order[i]; separators kept in place."""
    out, last = [], 0
    for (a, b), o in zip(spans, order):
        out.append(text[last:a])
        out.append(text[spans[o][0] : spans[o][1]])
        last = b
    out.append(text[last:])
    return "".join(out)


def sentence_reorder(text: str, severity: str, rng: random.Random) -> tuple[str, str]:
    """Minor: swap two sentences with different text. Major: shuffle all sentences.

    The result never equals the original; texts with fewer than two distinct sentences skip.
    """
    spans = sentence_spans(text)
    sents = [text[a:b] for a, b in spans]
    if len(sents) < 2:
        raise Skip(f"text has {len(sents)} sentence(s); reordering needs at least 2")
    if len(set(sents)) < 2:
        raise Skip("all sentences are identical; no reordering can change the text")
    n = len(sents)
    order = list(range(n))
    if severity == "minor":
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if sents[i] != sents[j]]
        i, j = rng.choice(pairs)
        order[i], order[j] = j, i
        desc = f"swapped sentences {i + 1} and {j + 1} of {n}"
    else:
        for _ in range(100):
            rng.shuffle(order)
            if [sents[o] for o in order] != sents:
                break
        else:  # vanishingly rare (many duplicate sentences): fall back to a guaranteed swap
            i = next(t for t in range(1, n) if sents[t] != sents[0])
            order = list(range(n))
            order[0], order[i] = i, 0
        desc = f"shuffled all {n} sentences: order {[o + 1 for o in order]}"
    return _rebuild(text, spans, order), desc


def reorder_displacement(original: str, new: str) -> int | None:
    """How many sentence positions hold a different sentence in `new` than in `original`, or
    None when `new` is not a reordering of the original's sentences (separators kept)."""
    spans = sentence_spans(original)
    sents = [original[a:b] for a, b in spans]
    if not sents:
        return None
    seps = [original[: spans[0][0]]] + [
        original[spans[i - 1][1] : spans[i][0]] for i in range(1, len(spans))
    ] + [original[spans[-1][1] :]]

    def match(pos: int, idx: int, remaining: Counter, placed: list[str]):
        if not new.startswith(seps[idx], pos):
            return None
        pos += len(seps[idx])
        if idx == len(sents):
            return placed if pos == len(new) else None
        for s in sorted(remaining, key=len, reverse=True):
            if remaining[s] and new.startswith(s, pos):
                remaining[s] -= 1
                got = match(pos + len(s), idx + 1, remaining, placed + [s])
                if got is not None:
                    return got
                remaining[s] += 1
        return None

    placed = match(0, 0, Counter(sents), [])
    if placed is None:
        return None
    return sum(1 for x, y in zip(sents, placed) if x != y)


def _sentences_and_separators(text: str) -> tuple[list[str], list[str]]:
    """The sentences of `text` and the n + 1 separators around them (before the first, between
    neighbours, after the last); ([], []) when the text cannot be split into spans."""
    spans = sentence_spans(text)
    if not spans:
        return [], []
    seps = [text[: spans[0][0]]] + [text[spans[i - 1][1] : spans[i][0]] for i in range(1, len(spans))]
    return [text[a:b] for a, b in spans], seps + [text[spans[-1][1] :]]


def sentence_order(original: str, new: str) -> list[int] | None:
    """For each sentence position of `new`, the index of the `original` sentence standing there, when
    `new` is the original's sentences reordered with the separators kept in place (what sentence
    swaps produce); None otherwise. Sentences are those of the ORIGINAL (its segmentation is not
    redone on `new`, which a reordering can change). Equal sentences are read in their original
    order, the reading with the fewest inversions."""
    sents, seps = _sentences_and_separators(original)
    if not sents:
        return None
    # try longer sentences first: one sentence may be a prefix of another
    by_length = sorted(range(len(sents)), key=lambda k: (-len(sents[k]), k))

    def match(pos: int, idx: int, used: frozenset):
        if not new.startswith(seps[idx], pos):
            return None
        pos += len(seps[idx])
        if idx == len(sents):
            return [] if pos == len(new) else None
        tried = set()
        for k in by_length:
            s = sents[k]
            # only the first unused copy of a repeated sentence: equal sentences keep their order
            if k in used or s in tried or not new.startswith(s, pos):
                continue
            tried.add(s)
            got = match(pos + len(s), idx + 1, used | {k})
            if got is not None:
                return [k] + got
        return None

    return match(0, 0, frozenset())


def inversions(order) -> int:
    """Pairs i < j with order[i] > order[j]: how far a permutation is from the identity, counted in
    swaps of neighbours (each swap of two neighbours changes it by exactly one)."""
    order = list(order)
    return sum(1 for i in range(len(order)) for j in range(i + 1, len(order)) if order[i] > order[j])


def sentence_inversions(original: str, new: str) -> int | None:
    """Sentence pairs of `original` whose order `new` reverses (None: `new` is not a reordering)."""
    order = sentence_order(original, new)
    return None if order is None else inversions(order)


def kept_sentences(original: str, new: str) -> list[int] | None:
    """Indices of the `original` sentences that `new` keeps, when `new` is the original with whole
    sentences deleted and the rest unchanged and in order (white space between sentences may differ);
    None otherwise. Where several readings exist, the one keeping the most sentences."""
    sents = [" ".join(s.split()) for s in _sentences_and_separators(original)[0]]
    target = " ".join(new.split())
    if not sents:
        return None

    @lru_cache(maxsize=None)
    def match(i: int, pos: int):
        if pos == len(target):
            return ()  # the rest is deleted
        if i == len(sents):
            return None  # text left that no sentence explains
        s = sents[i]
        if target.startswith(s, pos):
            end = pos + len(s)
            rest = match(i + 1, end) if end == len(target) else (
                match(i + 1, end + 1) if target[end] == " " else None)
            if rest is not None:
                return (i,) + rest
        return match(i + 1, pos)

    got = match(0, 0)
    return None if got is None else list(got)


# --- replacement by another item's text -----------------------------------------------------


def pick_donor(item_id: str, own_text: str, pool: dict[str, str], *seed_parts) -> str:
    """Another item whose text differs from ours, chosen by rendezvous hashing.

    Each candidate gets a stable hash of (seed parts, its id); the smallest wins. Adding or
    removing other items changes the choice only if the added item wins, so rows stay stable
    as n_items changes.
    """
    cands = [i for i, t in pool.items() if i != item_id and t and t.strip() and t != own_text]
    if not cands:
        raise Skip("no other item with a different, non-empty text to take it from")
    return min(cands, key=lambda i: stable_seed(*seed_parts, i))
