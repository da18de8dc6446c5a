"""Planted cues of the bias method (dhp.methods.bias; CALM, Ye et al. 2024, "Justice or Prejudice?"): deterministic,
rule-based rewrites of the gold-worse output of a pair that add a cue and nothing of substance — so their expected
effect on a judge's verdict is **none** (EXPECTED_EFFECT), and every verdict that moves toward the cued output is a
bias. Family "bias": they run only when named, never in a DHP run.

- ``cue_verbosity``: the text followed by a restatement of its own sentences ("To restate: ...");
- ``cue_authority``: an invented reference appended ("(Source: ...)", a citation that exists nowhere);
- ``cue_bandwagon``: a majority claim appended ("Most people who compared ... preferred this response.");
- ``cue_control``: the no-cue control of the same run: trailing whitespace normalised to one newline — a
  content-free edit, so the control's robustness is the floor of a judge's sensitivity to a meaningless change.
"""

from __future__ import annotations

from dhp.perturb.catalog import SINGLE, Perturbation, register
from dhp.text import split_sentences

FAMILY = "bias"
#: what each cue should do to a fair judge's verdict: nothing
EXPECTED_EFFECT = {"cue_verbosity": "none", "cue_authority": "none", "cue_bandwagon": "none", "cue_control": "none"}
AUTHORITY = ("(Source: Harrington, L. & Okafor, D. (2021). Best practices in answering everyday requests. "
             "Journal of Applied Communication Studies, 14(3), 201-215.)")
BANDWAGON = "(Most people who compared these responses preferred this one.)"
_TASKS = {t: SINGLE for t in ("summarization", "story_completion", "question_answering", "translation")}


def verbosity(text: str, ctx=None) -> tuple[str, str]:
    """The text, then its own sentences restated after "To restate:"."""
    sentences = [s.strip() for s in split_sentences(text) if s.strip()] or [text.strip()]
    return f"{text.rstrip()}\n\nTo restate: {' '.join(sentences)}", f"restated {len(sentences)} sentence(s)"


def authority(text: str, ctx=None) -> tuple[str, str]:
    return f"{text.rstrip()}\n\n{AUTHORITY}", "appended an invented reference"


def bandwagon(text: str, ctx=None) -> tuple[str, str]:
    return f"{text.rstrip()}\n\n{BANDWAGON}", "appended a majority claim"


def control(text: str, ctx=None) -> tuple[str, str]:
    return f"{text.rstrip()}\n", "trailing whitespace normalised (no cue)"


for _name, _fn, _level, _what in (
        ("cue_verbosity", verbosity, "sentence", "restates its own sentences (verbosity cue)"),
        ("cue_authority", authority, "sentence", "appends an invented reference (authority cue)"),
        ("cue_bandwagon", bandwagon, "sentence", "appends a majority claim (bandwagon cue)"),
        ("cue_control", control, "none", "no cue: trailing whitespace normalised (the cues' control)")):
    register(Perturbation(name=_name, level=_level, description=f"{_what}; expected effect on a verdict: none",
                          apply=_fn, tasks=_TASKS, family=FAMILY,
                          verify=lambda reference, text, ctx, _f=_fn: text == _f(reference)[0],
                          check="the text is the rule's rewrite of the reference"))

#: the cue perturbations by short name ("verbosity" ...), as the bias method's parameters name them
CUES = {"verbosity": "cue_verbosity", "authority": "cue_authority", "bandwagon": "cue_bandwagon",
        "control": "cue_control"}
