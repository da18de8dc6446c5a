"""Criteria confusion's two cheap routes for a small judge: mode "likelihood" (GPTScore's form: the text's mean
log-probability per token after the task, the source and the criterion; no reply) and instruction "rating_only"
(the rating alone, no analysis). Scripted judges; the embedded judges' numbers are the demo's."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from pydantic import ValidationError
from test_confusion_method import SMALL, _write_items
from test_confusion_pipeline import AspectJudge

from dhp import methods
from dhp.backends import Backend
from dhp.backends.base import LogLikelihood
from dhp.errors import DHPError
from dhp.judging.parsing import parse_rating

NAME = "criteria_confusion"
LIKELY = {**SMALL, "mode": "likelihood"}


class LikelihoodJudge(Backend):
    """A base model's likelihood that falls (-2 nats a token instead of -1) only where the criterion is the one the
    attack damages (negation -> non-contradiction, sentence deletion -> informativeness): no confusion. Records
    the (prefix, continuation) pairs it was asked."""

    identity = "scripted:likelihood"
    model = "scripted"
    deterministic = True
    supports_chat = False
    supports_logprobs = False

    def __init__(self):
        self.pairs = []

    def loglikelihood_many(self, pairs, on_result=None):
        out = []
        for i, (prefix, candidate) in enumerate(pairs):
            self.pairs.append((prefix, candidate))
            criterion = re.search(r"criterion:\n(\w[\w -]*):", prefix).group(1).lower()
            article = prefix.split("\nSource:\n", 1)[1].split("\n\nThe summary", 1)[0]
            reference = article.removeprefix("Article: ").removesuffix(" More background follows.")
            low = candidate.strip() != reference.strip() and (
                ("not" in candidate.split() or "n't" in candidate) and "contradiction" in criterion
                or len(candidate) < len(reference) - 20 and "informativeness" in criterion)
            n = len(candidate.split())
            res = LogLikelihood(-(2.0 if low else 1.0) * n, n, len(prefix) // 4, None)
            out.append(res)
            if on_result:
                on_result(i, res)
        return out


@pytest.fixture(scope="module")
def items_csv(tmp_path_factory):
    return _write_items(tmp_path_factory.mktemp("byo"))


def test_likelihood_scores_the_text_after_the_criterion(tmp_path, items_csv):
    """Each text is scored once per aspect as the continuation of a prefix holding the source and that aspect's
    criterion (never the text itself); its score is the mean log-probability per token; the cells read a drop
    where the likelihood fell and nowhere else; a second run asks nothing."""
    judge = LikelihoodJudge()
    methods.run(NAME, judge=judge, run_dir=str(tmp_path), dataset=str(items_csv), **LIKELY)
    assert len(judge.pairs) == 10 * 3 * 3  # items x (original + 2 attacks) x aspects
    variants = pd.read_parquet(tmp_path / "confusion_variants.parquet")
    texts = set(variants.loc[variants["status"] == "ok", "text"])
    for prefix, candidate in judge.pairs:
        assert candidate in texts and candidate not in prefix.split("\nSource:\n")[0] + prefix.split("criterion:")[1]
        assert prefix.endswith("\nSummary:\n") and "\nSource:\nArticle: " in prefix
        assert "How to answer" not in prefix and "Rating" not in prefix  # no question: nothing is generated
    assert {re.search(r"criterion:\n(\w[\w -]*):", p).group(1).lower() for p, _ in judge.pairs} == {
        "fluency", "informativeness", "non-contradiction"}
    scores = pd.read_parquet(tmp_path / "confusion_scores.parquet")
    assert set(scores["mode"]) == {"likelihood"} and set(scores["instruction"]) == {"paper"}
    assert set(scores["score"]) <= {-1.0, -2.0} and scores["n_valid"].eq(1).all()
    cells = pd.read_csv(tmp_path / "confusion_cells.csv").set_index(["attack", "aspect"])
    assert cells.loc[("negation", "non_contradiction"), "significant_drop"]
    assert cells.loc[("negation", "non_contradiction"), "mean_drop"] == pytest.approx(1.0)
    assert not cells.loc[("negation", "fluency"), "significant_drop"]
    summary = pd.read_csv(tmp_path / "confusion_summary.csv").iloc[0]
    assert summary["confusion_index"] == 0 and summary["share_ST_D_gt_1"] > 0
    asked = len(judge.pairs)
    methods.run(NAME, judge=judge, run_dir=str(tmp_path), dataset=str(items_csv), **LIKELY)
    assert len(judge.pairs) == asked  # cached


def test_likelihood_refuses_what_it_cannot_do(tmp_path, items_csv):
    """A question's instruction does not apply to a likelihood (nothing is asked); a chat-only judge cannot give
    one; a control cannot either (it runs in mode metric)."""
    with pytest.raises(ValidationError, match="asks none"):
        methods.get(NAME).Params(mode="likelihood", instruction="mitigated")
    with pytest.raises(DHPError, match="cannot serve mode 'likelihood'"):
        methods.run(NAME, judge=ChatOnly(), run_dir=str(tmp_path), dataset=str(items_csv), **LIKELY)


class ChatOnly(AspectJudge):
    identity = "scripted:chat-only"
    supports_loglikelihood = False


def test_rating_only_asks_for_the_rating_alone(tmp_path, items_csv):
    """instruction 'rating_only': the prompt asks for "Rating: <1-5>" and no analysis, the rest of the paper's
    prompt unchanged; the reply's rating is read by the same rule; runs of both instructions share a folder."""
    judge = AspectJudge()
    methods.run(NAME, judge=judge, run_dir=str(tmp_path), dataset=str(items_csv), **SMALL)
    paper = [r.messages[0][1] for r in judge.requests]
    judge.requests.clear()
    methods.run(NAME, judge=judge, run_dir=str(tmp_path), dataset=str(items_csv), **SMALL, instruction="rating_only")
    rating_only = [r.messages[0][1] for r in judge.requests]
    assert len(rating_only) == len(paper)
    for a, b in zip(paper, rating_only):
        assert '"Analysis:"' in a and '"Analysis:"' not in b
        assert 'write "Rating:" followed by one number from 1 to 5, and nothing else.' in b
        assert a.split("How to answer:")[0] == b.split("How to answer:")[0]
    summary = pd.read_csv(tmp_path / "confusion_summary.csv")
    assert sorted(summary["instruction"]) == ["paper", "rating_only"]
    assert parse_rating("Rating: 4\n\nThe summary")[0] == 4  # the embedded judge's reply to it
