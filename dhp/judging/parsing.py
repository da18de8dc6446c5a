"""One acceptance rule for judge replies in every mode: a single score on the 1-5 scale, or NaN with why."""

from __future__ import annotations

import math
import re

import numpy as np
import regex  # for partial matching: reply_decided asks whether a continuation could still match

from dhp.backends.base import STOP_CONDITIONS
from dhp.backends.base import stop_condition as _backend_stop_condition
from dhp.errors import DHPError


VALID_SCORES = (1, 2, 3, 4, 5)
_SCORE_TOKENS = tuple(str(v) for v in VALID_SCORES)

def _labels(metric: str | None) -> list[str]:
    labels = ["overall score", "overall", "score", "rating", "grade"]
    if metric:
        labels += [metric.replace("_", " "), metric]
    return sorted(set(labels), key=len, reverse=True)


_NUMBER = r"(\d+(?:\.\d+)?)(?![\d])"
_SCALE = r"(?:\s*(?:/|out\s+of)\s*5(?![\d.,]))?"
# After a number, these mean it is not one score on the 1-5 scale: a numbered-list echo ("1. Read"),
# a range ("3-4", "3 to 4"), another scale ("4/10", "3 out of 10"), a decimal comma or a list ("4,5").
_BAD_AFTER = regex.compile(r"^(?:\s*(?:-|–|to)\s*\d|\s*(?:/|out\s+of)\s*\d|\.\d|\s*[,;]\s*\d"
                        r"|\s*(?:and|or)\s+\d)", regex.IGNORECASE)
# An unlabelled number at the start followed by "." or ")" and a word is a numbered list ("1. Read the
# summary"); after a score label ("Coherence: 1. The summary...") it is a score and its explanation.
_LIST_ECHO = regex.compile(r"^[.)]\s*[^\W\d_]")
SCALE = (1.0, 5.0)


def _clean(text) -> str:
    """A reply without markdown emphasis and code marks (as the rule reads it; not yet stripped)."""
    return str(text).replace("*", "").replace("`", "")


def parse_reply(text: str | None, metric: str | None = None) -> tuple[float, str]:
    """The 1–5 score in a judge reply and, when there is none, why: ``(score, "")`` or ``(NaN, reason)``.

    Accepted: the score at the start of the reply, optionally after a label ("4", "4.", "Score: 4",
    "- Coherence: 3", "**4**", "4/5", "4 out of 5", "3.5", "4 - mostly coherent\\n..."), or a labelled
    score anywhere ("... Score: 4"). NaN: numbers outside the scale ("0", "6", "5.5", "Score: 5.9"),
    other scales ("4/10", "3 out of 10"), decimal commas and lists ("4,5"), ranges ("1-5", "3 to 4"),
    numbered-list echoes of the evaluation steps ("1. Read the summary"), and numbers anchored to neither
    the start nor a label ("I read 3 articles"). Every mode applies this same rule to the same reply.
    """
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return math.nan, "no reply"
    t = _clean(text).strip()
    if not t:
        return math.nan, "empty reply"
    value, why, _ = _verdict(t, metric)
    return value, why


def _verdict(t: str, metric: str | None) -> tuple[float, str, "re.Match | None"]:
    """parse_reply on a cleaned, stripped, non-empty reply, plus the match that gave the score when it
    came from the start-of-line pattern (None otherwise)."""
    lab = "|".join(re.escape(x) for x in _labels(metric))
    head = rf"(?:(?:{lab})\s*(?:\(\s*1\s*-\s*5\s*\))?\s*(?:[:=\-]|is)?\s*)"
    why = ""
    for k, pattern in enumerate((rf"^[\s\-•>#]*({head})?{_NUMBER}{_SCALE}",
                                 rf"\b((?:{lab})\s*(?:\(\s*1\s*-\s*5\s*\))?\s*(?:[:=]|is)\s*){_NUMBER}{_SCALE}")):
        for m in re.finditer(pattern, t, flags=re.IGNORECASE | re.MULTILINE):
            value = float(m.group(2))
            rest = t[m.end():]
            if _BAD_AFTER.match(rest) or (not m.group(1) and _LIST_ECHO.match(rest)):
                why = why or f"not a single score on the 1-5 scale: {t[:80]!r}"
            elif not SCALE[0] <= value <= SCALE[1]:
                why = why or f"out of scale: {m.group(2)}"
            else:
                return value, "", (m if k == 0 else None)
    return math.nan, why or f"unparsable reply: {t[:80]!r}", None


def reply_decided(text: str, metric: str | None = None,
                  top_logprobs: list[dict[str, float]] | None = None) -> bool:
    """True when no continuation of the partial reply ``text`` can change :func:`parse_reply`'s verdict
    (and, given ``top_logprobs`` of the positions generated so far, :func:`score_from_logprobs`'s): a
    generating backend may stop there and the judge reads the same score as from a longer reply.

    Only a score accepted by the start-of-line pattern can be decided. A NaN is never decided (a later
    "Score: 4" could still be accepted, and its reason quotes the reply), nor is a score found only
    after a label anywhere (a later line starting with a number would take precedence). An accepted
    score stays accepted with the same value unless later text turns what follows it into a rejected
    form or extends the number or its scale ("4" -> "45", "4." -> "4.5", "4/5" -> "4/50"): every such
    extension starts with text that the rejection patterns (``_BAD_AFTER``; ``_LIST_ECHO`` without a
    label) could still match, so the score is decided once neither can match any continuation of what
    follows it (regex partial matching). "4" and "4\\n" are not decided ("4\\n- 5" is a range), "4\\nThe"
    is; "1." is not ("1. Read" is a list echo), "1. 1" is. Text cut inside a UTF-8 character must not be
    passed (the backend waits for the character)."""
    t = _clean(text).lstrip()
    if not t.strip():
        return False
    _, _, m = _verdict(t.rstrip(), metric)
    if m is None:
        return False
    rest = t[m.end():]  # trailing whitespace kept: "4 " may still become "4 out of 10"
    if _BAD_AFTER.match(rest, partial=True) or (not m.group(1) and _LIST_ECHO.match(rest, partial=True)):
        return False
    return top_logprobs is None or math.isfinite(score_from_logprobs(top_logprobs, metric)[0])


STOP_WHEN_SCORED = "score"


def score_stop(metric: str | None) -> str:
    """The ``ChatRequest.stop_when`` value that stops a reply once :func:`reply_decided` (for ``metric``'s
    labels) says its score is decided."""
    return f"{STOP_WHEN_SCORED}:{metric or ''}"


def stop_condition(stop_when: str):
    """The test a generating backend applies after each token for ``ChatRequest.stop_when``:
    ``(text_so_far, top_logprobs_so_far or None) -> bool``; None for ""."""
    return _backend_stop_condition(stop_when)


# backends look the kind up in their registry, so they need not import this protocol
STOP_CONDITIONS[STOP_WHEN_SCORED] = lambda metric: (lambda text, tops=None: reply_decided(text, metric or None, tops))


def parse_score(text: str | None, metric: str | None = None) -> float:
    """The 1–5 score in a judge reply, or NaN (the rule of :func:`parse_reply`)."""
    return parse_reply(text, metric)[0]


def score_from_logprobs(top_logprobs: list[dict[str, float]] | None, metric: str | None = None
                        ) -> tuple[float, float]:
    """Expected score and probability mass at the score position, from per-position top logprobs.

    The score position is the first generated position whose chosen (most likely) token is a valid
    score "1".."5". Token texts are compared after stripping spaces, and probabilities of the same digit
    are added. Returns (NaN, 0.0) when no position chose a score token. The judge calls this only for
    replies whose text :func:`parse_reply` accepts, so both modes share one acceptance rule.
    """
    if not top_logprobs:
        return math.nan, 0.0
    for pos in top_logprobs:
        p = np.zeros(len(VALID_SCORES))
        for tok, lp in pos.items():
            s = tok.strip()
            if s in _SCORE_TOKENS:
                p[int(s) - 1] += math.exp(lp)
        chosen = max(pos, key=pos.get)
        if chosen.strip() in _SCORE_TOKENS and p.sum() > 0:
            mass = float(p.sum())
            return float(np.dot(np.array(VALID_SCORES), p) / mass), min(mass, 1.0)
    return math.nan, 0.0


# Analyse-then-rate replies (Hu et al. 2024, App. C.2: "Analysis: ..." then "Rating: <1-5>" on its own line).
_RATING_LABEL = re.compile(r"\brating\b[*_\s]*(?:\(\s*1\s*-\s*5\s*\))?[*_\s]*[:=]", re.IGNORECASE)


def rating_offset(text: str | None) -> int | None:
    """Character offset of the first "Rating:" label of an analyse-then-rate reply, or None without one."""
    m = _RATING_LABEL.search(str(text or ""))
    return m.start() if m else None


def parse_rating(text: str | None, metric: str | None = None) -> tuple[float, str]:
    """The 1–5 rating that follows the analysis in an analyse-then-rate reply: the text from the first
    "Rating:" label on, read by :func:`parse_reply` (the one acceptance rule); numbers in the analysis are
    never read. ``(NaN, reason)`` without a "Rating:" label or when what follows it is not one 1–5 score."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return math.nan, "no reply"
    at = rating_offset(text)
    if at is None:
        return math.nan, f"no 'Rating:' after the analysis: {str(text).strip()[-80:]!r}"
    return parse_reply(str(text)[at:], metric)


def rating_logprobs(text: str, top_logprobs: list[dict[str, float]] | None) -> list[dict[str, float]]:
    """The positions of ``top_logprobs`` from the one holding the "Rating:" label on, so that
    :func:`score_from_logprobs` reads the rating, not a digit of the analysis. Needs the reply to be the
    chosen (most likely) tokens, as in greedy decoding; [] when it is not or there is no label."""
    at = rating_offset(text)
    if at is None or not top_logprobs:
        return []
    end = 0
    for i, pos in enumerate(top_logprobs):
        tok = max(pos, key=pos.get)
        if str(text)[end:end + len(tok)] != tok:
            return []  # the reply is not the chosen tokens: positions cannot be matched to the text
        end += len(tok)
        if end > at:
            return top_logprobs[i:]
    return []
