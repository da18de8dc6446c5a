"""Error chains for the local view of dual-perspective meta-evaluation (Hu et al. 2025 §3.2): from a reference, a
sequence of texts each carrying exactly one more error of an aspect's kind, counted against the reference.

The edits are the perturbation rules of dhp.perturb (a typo as in ``char_typo``, sentences reordered as in
``sentence_reorder``, an entity replaced as in ``fictional_entities``, a sentence deleted), applied one error at a
time; every step is checked by the same verifiers the perturbation audit uses.
"""

from __future__ import annotations

import random

from faker import Faker

from dhp.errors import DHPError
from dhp.perturb import entities, rules
from dhp.perturb.rules import Skip, isolated_global_random, sentence_spans, stable_seed

__all__ = ["CHAIN_EDITS", "CHAIN_COUNTS", "count_errors", "error_chain", "is_one_more_error"]

#: The error each aspect's chain adds at every step, and how it is counted against the REFERENCE (not
#: against the previous step: an edit that undoes an earlier one must not pass as one more error).
CHAIN_EDITS = {"fluency": "typo", "coherence": "sentence_swap", "consistency": "entity_swap",
               "relevance": "sentence_deletion"}
CHAIN_COUNTS = {
    "fluency": "typos: optimal-string-alignment edit distance to the reference (dhp.perturb.rules.edit_distance)",
    "coherence": "inversions of the sentence order against the reference's (dhp.perturb.rules.sentence_inversions)",
    "consistency": "distinct reference entities replaced (dhp.perturb.entities.n_entities_changed)",
    "relevance": "reference sentences deleted (dhp.perturb.rules.kept_sentences)",
}
_ATTEMPTS = 20  # redraws of one step whose edit does not add exactly one error


def count_errors(reference: str, text: str, aspect: str) -> int | None:
    """How many errors of the aspect's kind separate ``text`` from ``reference`` (CHAIN_COUNTS says how
    each is counted); None when ``text`` is not the reference with errors of that kind only."""
    if aspect not in CHAIN_EDITS:
        raise DHPError(f"No error chain for aspect {aspect!r}.", f"use one of {sorted(CHAIN_EDITS)}.")
    if aspect == "fluency":
        return rules.edit_distance(reference, text, transpositions=True)
    if aspect == "coherence":
        return rules.sentence_inversions(reference, text)
    if aspect == "consistency":
        return entities.n_entities_changed(reference, text)
    kept = rules.kept_sentences(reference, text)
    return None if kept is None else len(rules.sentence_spans(reference)) - len(kept)


def _compose(reference: str, spans, picked: list[int], keep_separators: bool) -> str:
    """The reference's sentences ``picked`` (indices, in this order) with the reference's separators:
    position by position (a reordering) or the one that preceded each kept sentence (a deletion)."""
    ends = [0] + [b for _, b in spans]
    starts = [a for a, _ in spans] + [len(reference)]
    seps = [reference[e:s] for e, s in zip(ends, starts)]  # before sentence i; the last: after all
    out = [seps[0]]
    for pos, k in enumerate(picked):
        if pos:
            out.append(seps[pos] if keep_separators else seps[k])
        out.append(reference[spans[k][0]: spans[k][1]])
    out.append(seps[-1])
    return "".join(out)


def _next_error(reference: str, spans, state, aspect: str, rng, fake):
    """One more error on top of ``state`` (the previous text; for coherence the sentence order, for
    relevance the kept sentences): (text, new state), or Skip when none can be added."""
    if aspect == "fluency":
        text = rules.char_typo(state, 1, rng)[0]
        return text, text
    if aspect == "consistency":
        text = entities.fictional_entities(state, "minor", rng, fake)[0]
        return text, text
    sents = [reference[a:b] for a, b in spans]
    if aspect == "coherence":
        # swapping two neighbours still in reference order adds exactly one inversion; any other swap
        # adds an odd number or removes some (the old chain's 0, 1, 2, 3, 2, 1)
        ups = [p for p in range(len(state) - 1) if state[p] < state[p + 1] and sents[state[p]] != sents[state[p + 1]]]
        if not ups:
            raise Skip("the sentences are in reverse reference order already: no swap adds an inversion")
        p = rng.choice(ups)
        order = state[:p] + [state[p + 1], state[p]] + state[p + 2:]
        return _compose(reference, spans, order, keep_separators=True), order
    if len(state) < 2:
        raise Skip("one sentence left: deleting it would leave no summary")
    drop = rng.choice(state)
    kept = [k for k in state if k != drop]
    return _compose(reference, spans, kept, keep_separators=False), kept


def error_chain(text: str, aspect: str, length: int, seed: int = 0) -> list[str]:
    """Targets of decreasing quality for one aspect: the reference, then 1, 2, ..., ``length`` errors of
    the aspect's kind (CHAIN_EDITS).

    Guarantee, checked on every step (:func:`is_one_more_error`), not assumed: step j is step j - 1
    plus one error with every earlier error kept, and :func:`count_errors` against the REFERENCE is
    exactly j — typos (edit distance), inversions of the sentence order (coherence swaps two
    neighbouring sentences that are still in reference order), reference entities replaced, reference
    sentences deleted. So no step undoes an earlier error: the chain never gets better. A text that
    cannot take another error (coherence: sentences fully reversed; relevance: one sentence left;
    fluency/consistency: nothing left to edit) or a step not drawn in 20 tries ends the chain early:
    shorter, never padded."""
    if aspect not in CHAIN_EDITS:
        raise DHPError(f"No error chain for aspect {aspect!r}.", f"use one of {sorted(CHAIN_EDITS)}.")
    spans = sentence_spans(text) if aspect in ("coherence", "relevance") else []
    if aspect in ("coherence", "relevance") and not spans:
        return [text]  # no sentences to reorder or delete
    state = list(range(len(spans))) if spans else text
    chain = [text]
    with isolated_global_random():  # typo reseeds the global random
        for step in range(1, int(length) + 1):
            nxt = None
            for attempt in range(_ATTEMPTS):
                rng = random.Random(stable_seed("dhp-chain", seed, aspect, step, attempt, chain[-1]))
                fake = Faker("en_US")
                fake.seed_instance(rng.randrange(2**31))
                try:
                    cand, cand_state = _next_error(text, spans, state, aspect, rng, fake)
                except Skip:
                    break
                if cand not in chain and is_one_more_error(text, chain[-1], cand, aspect):
                    nxt = cand
                    break
            if nxt is None:
                break
            chain.append(nxt)
            state = cand_state
    return chain


def is_one_more_error(reference: str, prev: str, nxt: str, aspect: str) -> bool:
    """True when ``nxt`` is ``prev`` plus exactly one error of the aspect's kind, every earlier error
    kept: one more against the reference (:func:`count_errors`) and one edit from ``prev`` (one typo;
    one swap of neighbouring sentences; the same entity replacements plus one; the same deletions plus
    one). Checked by the verifiers the perturbation audit uses, not by re-running the edit."""
    before, after = count_errors(reference, prev, aspect), count_errors(reference, nxt, aspect)
    if before is None or after != before + 1:
        return False
    if aspect == "fluency":
        return rules.edit_distance(prev, nxt, transpositions=True) == 1
    if aspect == "coherence":
        a, b = rules.sentence_order(reference, prev), rules.sentence_order(reference, nxt)
        moved = [i for i in range(len(a)) if a[i] != b[i]]
        return len(moved) == 2 and moved[1] == moved[0] + 1
    if aspect == "consistency":
        a, b = entities.entity_changes(reference, prev) or [], entities.entity_changes(reference, nxt) or []
        return set(a) < set(b)
    return set(rules.kept_sentences(reference, nxt)) < set(rules.kept_sentences(reference, prev))
