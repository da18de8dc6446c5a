"""Shared text helpers: PTB detokeniser, sentence splitting, word counts (synthetic examples)."""

import pytest

from dhp.errors import DHPError
from dhp.text import count_words, detokenize_ptb, split_sentences, text_lengths


@pytest.mark.parametrize("tokenised,expected", [
    ("The club 's chairman said it was n't over .", "The club's chairman said it wasn't over."),
    ("He said `` we 'll see '' , then left !", 'He said "we\'ll see", then left!'),
    ("It cost $ 5 ( about 4 % more ) ; fine : yes ?", "It cost $5 (about 4% more); fine: yes?"),
    ("-LRB- see above -RRB- and -lrb- below -rrb-", "(see above) and (below)"),
    ("an 'honour ' to meet", "an 'honour' to meet"),
    ("called it ' a disgrace ' .", "called it 'a disgrace'."),
    ("the players ' union", "the players' union"),
    ("follow # RubberDub now", "follow #RubberDub now"),
    ("a   19-year-old  scored  2-0 .", "a 19-year-old scored 2-0."),
    ("", ""),
])
def test_detokenize_ptb(tokenised, expected):
    assert detokenize_ptb(tokenised) == expected


def test_detokenize_is_idempotent_on_plain_text():
    plain = "She said \"no\", and it's 5% (roughly) of $10."
    assert detokenize_ptb(plain) == plain


def test_split_sentences():
    assert split_sentences("Dr. Smith arrived at 5 p.m. today. He left early! Why?") == [
        "Dr. Smith arrived at 5 p.m. today.", "He left early!", "Why?"]
    assert split_sentences("   ") == [] and split_sentences("") == []
    assert len(split_sentences("Der Hund bellt. Die Katze schläft.", lang="de")) == 2
    assert len(split_sentences("今天下雨。我们在家。", lang="zh")) == 2
    with pytest.raises(DHPError, match="language 'xx'"):
        split_sentences("Hello.", lang="xx")


def test_count_words_and_lengths():
    assert count_words("The 19-year-old's goal, worth $2.6m, came at 3-0 .") == 8
    assert count_words("... !!") == 0
    assert text_lengths("One two. Three.") == (15, 3, 2)
