"""Shared text helpers: sentence splitting, word counting and PTB detokenisation.

Every stage that counts or cuts sentences (dataset statistics, sentence-level perturbations) uses
`split_sentences`, so "a sentence" means the same thing everywhere in the workbench.
"""

from __future__ import annotations

import re
from functools import lru_cache

import pysbd

from dhp.errors import DHPError

__all__ = ["split_sentences", "count_words", "text_lengths", "detokenize_ptb"]


@lru_cache(maxsize=None)
def _segmenter(lang: str):
    try:
        # clean=False keeps the text byte-identical: joining the pieces gives the input back.
        return pysbd.Segmenter(language=lang, clean=False)
    except ValueError:
        raise DHPError(
            f"Sentence splitting does not support language {lang!r}.",
            "use an ISO 639-1 code that pysbd supports, e.g. 'en', 'de', 'zh'.",
        ) from None


def split_sentences(text: str, lang: str = "en") -> list[str]:
    """Split `text` into sentences with pysbd (rule-based, deterministic).

    Returns the sentences stripped of surrounding whitespace, empty pieces dropped; an empty or
    whitespace-only text gives []. `lang` is an ISO 639-1 code supported by pysbd.
    """
    if not text or not text.strip():
        return []
    return [s.strip() for s in _segmenter(lang).segment(text) if s.strip()]


# A word is a run of letters/digits, optionally joined by inner hyphens/apostrophes/periods
# ("don't", "19-year-old", "2.6"); punctuation alone is not a word.
_WORD = re.compile(r"\w+(?:[-'’.,/]\w+)*")


def count_words(text: str) -> int:
    """Number of words (alphanumeric runs, inner - ' . , / kept inside a word; punctuation ignored)."""
    return len(_WORD.findall(text or ""))


def text_lengths(text: str, lang: str = "en") -> tuple[int, int, int]:
    """(characters, words, sentences) of `text`; characters are Unicode code points."""
    return len(text), count_words(text), len(split_sentences(text, lang))


# --- PTB detokenisation -------------------------------------------------------------------
# SummEval references (via BARTScore) are Penn-Treebank tokenised: "team 's draw", "goal .",
# "`` quoted ''". Judges should see normal text, so we undo the tokenisation.

_BRACKETS = {"-lrb-": "(", "-rrb-": ")", "-lsb-": "[", "-rsb-": "]", "-lcb-": "{", "-rcb-": "}"}
_CLITICS = {"'s", "'re", "'ve", "'ll", "'d", "'m", "n't"}
_ATTACH_LEFT = set(".,;:!?%)]}") | {"...", "''"}
_ATTACH_RIGHT = set("([{$#") | {"``"}


def detokenize_ptb(text: str) -> str:
    """Undo Penn-Treebank tokenisation of English text.

    Rules: `` and '' become straight double quotes attached to the quoted words; clitics ('s, n't,
    're, 've, 'll, 'd, 'm) and closing punctuation (. , ; : ! ? % ) ] } ...) attach to the word
    before; opening brackets, $ and # attach to the word after; -LRB-/-RRB- style tokens become
    brackets; a lone ' alternates between opening and closing quote, except after a word ending
    in "s" when no quote is open (plural possessive: "players '" -> "players'"). Whitespace is
    normalised to single spaces.
    """
    tokens = text.split()
    out: list[str] = []
    glue_next = False  # the previous token wants the next one attached without a space
    single_open = False
    for tok in tokens:
        low = tok.lower()
        tok = _BRACKETS.get(low, tok)
        if tok == "`":
            tok = "'"
            low = "`"
        attach_left = False
        attach_right = False
        if tok == "``":
            tok, attach_right = '"', True
        elif tok == "''":
            tok, attach_left = '"', True
        elif low in _CLITICS:
            attach_left = True
        elif tok in _ATTACH_LEFT:
            attach_left = True
        elif tok in _ATTACH_RIGHT:
            attach_right = True
        elif tok == "'":
            if low == "`" or (not single_open and not (out and out[-1][-1:].lower() == "s")):
                single_open, attach_right = True, True
            elif single_open:
                single_open, attach_left = False, True
            else:  # plural possessive
                attach_left = True
        elif len(tok) > 1 and tok[0] == "'" and tok[-1] != "'":
            single_open = True  # quote glued to its word by the tokeniser: "'honour ' to"
        elif len(tok) > 1 and tok[-1] == "'" and tok[0] != "'":
            single_open = False
        if out and not attach_left and not glue_next:
            out.append(" ")
        out.append(tok)
        glue_next = attach_right
    return "".join(out)
