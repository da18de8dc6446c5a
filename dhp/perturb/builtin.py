"""The perturbations of the DHP paper (Table 2, Appendix B) plus the negative control, one registered
object each. Registration order is the row order of the perturbed table.

``weights=`` holds the project's own default expert votes (10 imaginary voters per issue, reasoned from
the metric definitions — NOT the paper's survey, which it shows only in a figure). The shipped
dhp/resources/expert_weights.csv is written from them; notebook 06 collects real votes to replace it.
The control has no votes: every metric gets the same weight.
"""

from __future__ import annotations

from dhp.perturb import entities, grammar, paraphrase, rules
from dhp.perturb.catalog import MINOR_MAJOR, SINGLE, Context, Perturbation, register
from dhp.perturb.rules import Skip
from dhp.schema import CONTROL


def _paper(*args, **fields) -> Perturbation:
    """One of the DHP paper's perturbations: in the default set of every run (``paper=True``)."""
    return Perturbation(*args, paper=True, **fields)


_ALL4 = ("summarization", "story_completion", "question_answering", "translation")
_C10_50 = {"minor": 10, "major": 50}
_C5_25 = {"minor": 5, "major": 25}
_QA = {"answer_quality": 10}


def _counted():
    """Character methods: minor/major everywhere except Story Cloze (one severity)."""
    return {t: (SINGLE if t == "story_completion" else MINOR_MAJOR) for t in _ALL4}


_CHAR_K = {
    "summeval": _C10_50, "sumpubmed": {"minor": 20, "major": 100}, "storycloze": {"single": 5},
    "answer_equivalence": _C5_25, "pubmedqa": _C5_25, "wmt22_de_en": _C10_50, "wmt22_zh_en": _C10_50,
}

register(_paper(
    "char_deletion", "character", "delete k random alphanumeric characters",
    apply=lambda text, ctx: rules.char_deletion(text, int(ctx.k), ctx.rng),
    verify=lambda ref, text, ctx: rules.is_char_deletion(ref, text, ctx.k),
    check="exactly k alphanumeric chars removed, nothing else changed",
    tasks=_counted(), k=_CHAR_K,
    weights={"summarization": {"coherence": 1, "fluency": 8, "relevance": 1}, "story_completion": {"coherence": 1, "fluency": 9}, "question_answering": _QA, "translation": {"accuracy": 3, "fluency": 7}},
    quality_issue="Some letters or digits are missing from words here and there."))

register(_paper(
    "char_typo", "character", "add k typographical errors with the `typo` package",
    apply=lambda text, ctx: rules.char_typo(text, int(ctx.k), ctx.rng),
    verify=lambda ref, text, ctx: rules.edit_distance(ref, text, transpositions=True) == ctx.k,
    check="optimal-string-alignment distance to the reference is exactly k",
    tasks=_counted(), k=_CHAR_K,
    weights={"summarization": {"coherence": 1, "fluency": 9}, "story_completion": {"fluency": 10}, "question_answering": _QA, "translation": {"accuracy": 2, "fluency": 8}},
    quality_issue="The text contains typing mistakes (swapped, doubled or wrong keys)."))

register(_paper(
    "word_deletion", "word", "delete k contiguous words",
    apply=lambda text, ctx: rules.word_deletion(text, int(ctx.k), ctx.rng),
    verify=lambda ref, text, ctx: rules.is_word_deletion(ref, text, ctx.k),
    check="words = reference words minus one run of exactly k",
    tasks={"translation": MINOR_MAJOR}, k={"wmt22_de_en": _C5_25, "wmt22_zh_en": _C5_25},
    weights={"translation": {"accuracy": 8, "fluency": 2}},
    quality_issue="A run of consecutive words has been dropped from the text."))


def _n_ok(n, severity: str) -> bool:
    return n is not None and (n >= 2 if severity == "major" else n == 1)


register(_paper(
    "fictional_entities", "word", "replace named entities / numbers / terms with fictional ones",
    apply=lambda text, ctx: entities.fictional_entities(text, ctx.severity, ctx.rng, ctx.fake),
    verify=lambda ref, text, ctx: _n_ok(entities.n_entities_changed(ref, text), ctx.severity),
    check="only detected entities changed, consistently; minor/single 1, major >= 2",
    tasks=_counted(), llm=True, llm_length=(0.6, 1.6),
    weights={"summarization": {"coherence": 1, "consistency": 8, "relevance": 1}, "story_completion": {"coherence": 2, "consistency": 8}, "question_answering": _QA, "translation": {"accuracy": 10}},
    quality_issue="A key named entity (person, place, number, technical term) is replaced by an invented one."))

register(_paper(
    "grammatical_errors", "word", "introduce grammatical errors (agreement, tense, article, ...)",
    apply=lambda text, ctx: grammar.grammatical_errors(text, ctx.severity, ctx.rng),
    verify=lambda ref, text, ctx: _n_ok(grammar.changed_blocks(ref, text), ctx.severity),
    check="minor/single: exactly 1 changed word region; major: >= 2",
    tasks=_counted(), llm=True, llm_length=(0.6, 1.4),
    weights={"summarization": {"coherence": 1, "fluency": 9}, "story_completion": {"coherence": 1, "fluency": 9}, "question_answering": _QA, "translation": {"accuracy": 1, "fluency": 9}},
    quality_issue="The text has grammar mistakes (agreement, tense, prepositions, fragments)."))


def _reordered(ref: str, text: str, ctx: Context) -> bool:
    moved = rules.reorder_displacement(ref, text)
    return moved is not None and (moved == 2 if ctx.severity == "minor" else moved >= 2)


register(_paper(
    "sentence_reorder", "sentence", "shuffle k sentences (k=2 minor, all major); never the original order",
    apply=lambda text, ctx: rules.sentence_reorder(text, ctx.severity, ctx.rng),
    verify=_reordered,
    check="same sentences and separators; minor: exactly 2 moved, major: >= 2 moved",
    tasks={"summarization": MINOR_MAJOR},
    k={"summeval": {"minor": 2, "major": "all"}, "sumpubmed": {"minor": 2, "major": "all"}},
    weights={"summarization": {"coherence": 9, "fluency": 1}},
    quality_issue="The sentences are in a shuffled order."))


def _inserted(ref: str, text: str, ctx: Context) -> bool:
    got = paraphrase.inserted_rewrites(ref, text)
    return got is not None and (len(got) == 1 if ctx.severity == "minor" else len(got) >= 2)


register(_paper(
    "rewrite_insert", "sentence", "rephrase sentence(s) and insert each rewrite right after its original",
    apply=lambda text, ctx: paraphrase.rewrite_insert(text, ctx.severity, ctx.rng),
    verify=_inserted,
    check="reference kept; minor 1 / major >= 2 new sentences inserted after sentence ends",
    tasks={"summarization": MINOR_MAJOR}, llm=True, llm_length=(1.05, 3.0),
    weights={"summarization": {"coherence": 3, "consistency": 3, "relevance": 4}},
    quality_issue="A sentence is rewritten or a new sentence is inserted that is not supported by the source."))


def _donor(text: str, ctx: Context, name: str):
    item_id, dataset = str(ctx.item["item_id"]), str(ctx.item["dataset"])
    donor = rules.pick_donor(item_id, text, dict(ctx.pool), "donor", ctx.seed, dataset, name)
    return ctx.pool[donor], f"replaced with the reference of item {donor}"


def _is_donor(ref: str, text: str, ctx: Context) -> bool:
    return text != ref and any(t == text for i, t in ctx.pool.items() if i != str(ctx.item.get("item_id")))


register(_paper(
    "random_ending", "sentence", "replace the ending with the ending of another story",
    apply=lambda text, ctx: _donor(text, ctx, "random_ending"), verify=_is_donor,
    check="text is another item's reference", tasks={"story_completion": SINGLE},
    weights={"story_completion": {"coherence": 5, "consistency": 5}},
    quality_issue="The ending is a sentence taken from a different, unrelated story."))


def _wrong_ending(text: str, ctx: Context):
    wrong = (ctx.item.get("wrong_ending") or "").strip()
    if not wrong:
        raise Skip("the dataset has no wrong ending for this item")
    if wrong == text.strip():
        raise Skip("the wrong ending equals the right ending")
    return wrong, "replaced with the dataset's wrong ending"


def _is_wrong_ending(ref: str, text: str, ctx: Context) -> bool:
    wrong = ctx.item.get("wrong_ending") or ""
    return bool(wrong) and text == wrong and text != ref


register(_paper(
    "wrong_ending", "sentence", "replace the ending with the dataset's wrong ending",
    apply=_wrong_ending, verify=_is_wrong_ending,
    check="text is the dataset's wrong ending", tasks={"story_completion": SINGLE},
    weights={"story_completion": {"coherence": 4, "consistency": 6}},
    quality_issue="The ending contradicts the story (the dataset's implausible ending)."))

register(_paper(
    "random_answer", "sentence", "replace the answer with the answer to another question",
    apply=lambda text, ctx: _donor(text, ctx, "random_answer"), verify=_is_donor,
    check="text is another item's reference", tasks={"question_answering": SINGLE},
    weights={"question_answering": _QA},
    quality_issue="The answer is taken from a different question."))

register(_paper(
    CONTROL, "none", "negative control: the same words, one sentence per line, scored by its own call",
    apply=lambda text, ctx: rules.control_format(text),
    verify=lambda ref, text, ctx: rules.is_control(ref, text),
    check="differs from the reference in white space only (one sentence per line)",
    tasks={t: SINGLE for t in _ALL4},
    quality_issue="Nothing is changed (a control: no metric should be affected)."))
