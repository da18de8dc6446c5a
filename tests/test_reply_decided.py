"""reply_decided: when a generating backend may stop, the judge must read the same verdict as from any
longer reply (fast, no model)."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from dhp.errors import DHPError
from dhp.judging.parsing import parse_reply, reply_decided, score_stop, stop_condition

# Pieces that make and break scores under the acceptance rule: digits, scales, ranges, lists, labels.
PIECES = ["1", "3", "4", "5", "0", "10", ".", ",", ";", "/", "-", "–", ")", "=", ":", " ", "\n", "*", "to",
          " to ", "out of", " out of ", "and", " or ", "Score", "Coherence", "Score: ", "The", "R", "b", "x"]
texts = st.lists(st.sampled_from(PIECES), max_size=8).map("".join)


def _same(a, b) -> bool:
    return (math.isnan(a[0]) and math.isnan(b[0])) or a == b


@settings(max_examples=3000, deadline=None)
@given(texts, texts)
def test_a_decided_reply_keeps_its_verdict_under_any_continuation(prefix, continuation):
    if reply_decided(prefix, "coherence"):
        assert parse_reply(prefix + continuation, "coherence") == parse_reply(prefix, "coherence")


@pytest.mark.parametrize("prefix,continuation", [
    ("4", "5"), ("4", ".5"), ("4", "/10"), ("4", ",5"), ("4", " out of 10"), ("4 out of", " 10"),
    ("4/5", "0"), ("4\n", "- 5"), ("4 ", "to 5"), ("1.", " Read"), ("1. ", "Read"), ("Coherence: 1\n-", " 5"),
    ("The summary is fine. Score: 4", "\n2"),  # a labelled score later loses to a line starting with a number
    ("Rumors have circulated", " Score: 4"),  # a NaN can become a score
])
def test_not_decided_where_a_continuation_changes_the_verdict(prefix, continuation):
    assert not _same(parse_reply(prefix, "coherence"), parse_reply(prefix + continuation, "coherence"))
    assert not reply_decided(prefix, "coherence")


@pytest.mark.parametrize("prefix", [
    "4\nThe", "4 = good", "4 5", "4/5 because", "1. 1", "Coherence: 1. ", "Coherence: 1\n- Structure",
    "**4** is", "Sure\n4 x", "3.5 x", "- Coherence: 3\n\nThe",
])
def test_decided_once_no_continuation_can_matter(prefix):
    assert math.isfinite(parse_reply(prefix, "coherence")[0]) and reply_decided(prefix, "coherence")


def test_the_metric_label_counts():
    # "Fluency: 1." followed by a word is a score with its explanation only when "fluency" is a label
    assert reply_decided("Fluency: 1. The", "fluency") and not reply_decided("Fluency: 1. The", "coherence")


def test_logprobs_need_their_score_position():
    """score_from_logprobs reads the first position whose chosen token is a score digit: until one was
    generated the reply is not decided for logprobs mode, even if its text is."""
    assert not reply_decided("4\nThe", "coherence", [{"4.": -0.1, "3": -2.5}, {"\n": -0.1}, {"The": -0.2}])
    assert reply_decided("4\nThe", "coherence", [{"4": -0.1, "3": -2.5}, {"\n": -0.1}, {"The": -0.2}])


def test_stop_condition_names_the_metric_and_rejects_unknown_rules():
    rule = stop_condition(score_stop("fluency"))
    assert rule("Fluency: 1. The") and not stop_condition(score_stop("coherence"))("Fluency: 1. The")
    assert stop_condition("") is None
    with pytest.raises(DHPError, match="Unknown stop condition"):
        stop_condition("digits")
