"""The judge with the real embedded model: all three modes on real SummEval items, warm rerun, and
resuming after SIGKILL without repeating calls (slow)."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

from dhp.cache import Cache
from dhp.judging import SCORE_COLUMNS, failure_summary, score_perturbed

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_items():
    """One real SummEval item (from the data root, through the loader) with three variants."""
    from dhp import datasets, perturb

    # a missing file is fetched or fails loudly (conftest), never skips the real-data checks
    ds = datasets.load_dataset("summeval", n_items=1, seed=0)
    pt = perturb.perturb(ds, seed=0)
    keep = pt["perturbation"].isin(["original", "char_deletion"]) & (pt["status"] == "ok")
    return pt[keep].head(3).reset_index(drop=True), ds


def test_three_modes_on_real_items(real_items, tmp_path):
    pt, ds = real_items
    cache = tmp_path / "c.sqlite"
    n_var = len(pt)
    lp, lp_stats = score_perturbed(pt, ds, mode="logprobs", metrics=["fluency"], cache=cache, progress=False)
    assert list(lp.columns[:len(SCORE_COLUMNS)]) == SCORE_COLUMNS and len(lp) == n_var
    assert lp["score"].between(1, 5).all() and (lp["prob_mass"] > 0).all() and (lp["n_valid"] == 1).all()
    st = lp_stats
    # variants of one (item, metric) share instructions + article: most prompt tokens come from the KV cache
    assert st["prompt_tokens_computed"] < 0.6 * st["prompt_tokens_submitted"]

    sm = score_perturbed(pt, ds, mode="sample", n_samples=2, metrics=["fluency"], cache=cache, progress=False).table
    assert len(sm) == n_var and ((sm["n_valid"] + sm["n_failed"]) == 2).all()
    assert sm["score"].dropna().between(1, 5).all()
    assert sm["score"].isna().eq(sm["n_valid"] == 0).all()  # NaN exactly where nothing parsed

    ll = score_perturbed(pt, ds, mode="likelihood", cache=cache, progress=False).table
    assert len(ll) == n_var and (ll["metric"] == "likelihood").all()
    assert (ll["score"] < 0).all() and (ll["completion_tokens"] > 5).all()
    orig = ll.loc[ll["perturbation"] == "original", "score"].iloc[0]
    assert (ll.loc[ll["perturbation"] == "char_deletion", "score"] < orig).all()  # deletions lower likelihood

    again, again_stats = score_perturbed(pt, ds, mode="logprobs", metrics=["fluency"], cache=cache, progress=False)
    assert again_stats["calls"] == 0
    pd.testing.assert_frame_equal(lp, again)
    assert set(failure_summary(pd.concat([lp, sm, ll]))["mode"]) == {"logprobs", "sample", "likelihood"}


SOURCE = ("A storm closed the coastal road near Pellham on Sunday. Crews cleared fallen trees by the evening, "
          "and the road reopened on Monday morning. No one was hurt, the county said.")


def synthetic_tables():
    ds = pd.DataFrame([{"dataset": "summeval", "task": "summarization", "item_id": "k1", "source": SOURCE,
                        "reference": "x", "question": "", "wrong_ending": "", "src_lang": "", "tgt_lang": ""}])
    texts = ["A storm shut the Pellham coastal road on Sunday; it reopened Monday and no one was hurt.",
             "A strm shut the Pelham coastl road on Sunday; it reopned Monday and no one was hurt.",
             "It reopened Monday and no one was hurt. A storm shut the Pellham coastal road on Sunday."]
    pt = pd.DataFrame([{"dataset": "summeval", "task": "summarization", "item_id": "k1", "perturbation": p,
                        "level": "none", "severity": "none", "method": "rule", "text": t, "edits": "",
                        "status": "ok", "reason": ""}
                       for p, t in zip(["original", "char_typo", "sentence_reorder"], texts)])
    return pt, ds


RUN = textwrap.dedent("""
    import sys, pandas as pd
    from dhp.judging import score_perturbed
    pt = pd.read_parquet(sys.argv[1]); ds = pd.read_parquet(sys.argv[2])
    score_perturbed(pt, ds, mode="sample", n_samples=3, metrics=["coherence", "fluency"], cache=sys.argv[3],
          progress=False)
""")


def _rows(db):
    if not os.path.exists(db):
        return 0
    try:
        with sqlite3.connect(db, timeout=1) as con:
            return con.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def test_sigkill_then_resume_repeats_no_call_and_gives_same_table(tmp_path):
    pt, ds = synthetic_tables()
    pt.to_parquet(tmp_path / "pt.parquet")
    ds.to_parquet(tmp_path / "ds.parquet")
    db = str(tmp_path / "killed.sqlite")
    script = tmp_path / "run.py"
    script.write_text(RUN)
    total = 3 * 2 * 3  # variants x metrics x samples: replies, each its own cache row
    per_call = 3  # one request per row asks for its 3 replies (one generation: greedy is deterministic)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "pt.parquet"),
                             str(tmp_path / "ds.parquet"), db], cwd=os.getcwd())
    deadline = time.monotonic() + 240
    while _rows(db) < 2 * per_call and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = _rows(db)
    assert 2 * per_call <= done < total and done % per_call == 0  # a request's replies are stored together

    with Cache(db) as cache:
        resumed, resumed_stats = score_perturbed(pt, ds, mode="sample", n_samples=3, metrics=["coherence", "fluency"], cache=cache,
                        progress=False)
        assert len(cache) == total  # each call stored once
    assert resumed_stats["calls"] == (total - done) // per_call  # no committed call repeated
    assert resumed_stats["cache_hits"] == done

    fresh, fresh_stats = score_perturbed(pt, ds, mode="sample", n_samples=3, metrics=["coherence", "fluency"], cache=None,
                  progress=False)
    assert fresh_stats["calls"] == total // per_call
    pd.testing.assert_frame_equal(resumed, fresh)


@pytest.fixture(scope="module")
def handful():
    """One real SummEval item, its original and two perturbations (from the data root, through the loader): the
    second of the seeded pair, on which some logprobs replies stop early (none of the first's do)."""
    from dhp import datasets, perturb

    ds = datasets.load_dataset("summeval", n_items=2, seed=0)
    ds = ds[ds["item_id"] == ds["item_id"].iloc[1]].reset_index(drop=True)
    pt = perturb.perturb(ds, seed=0)
    keep = (pt["status"] == "ok") & (pt["perturbation"].isin(["original", "char_deletion", "sentence_reorder"])
                                     & pt["severity"].isin(["none", "major"]))
    return pt[keep].reset_index(drop=True), ds


@pytest.mark.parametrize("mode,kwargs", [("logprobs", {}), ("sample", {"n_samples": 2})])
def test_early_stop_gives_the_verdicts_of_fixed_length_replies(handful, mode, kwargs):
    """The embedded judge stops a reply once reply_decided says no continuation can change its verdict;
    on real SummEval prompts it must give exactly the scores, probability masses and failure reasons of
    the fixed-length replies (max_tokens) it generated before, in fewer decode steps. A context of 768 tokens: the
    judge cuts each source to fit, as it does a longer one (the prompt is what costs here, the same in both runs; at
    2,048 tokens this was the suite's slowest test). At 640 tokens no logprobs reply stops early: 768, not less."""
    from dhp.backends import get_backend

    pt, ds = handful
    runs = {}
    for early in (False, True):
        backend = get_backend("embedded", early_stop=early, n_ctx=768)
        with pytest.warns(UserWarning, match="source truncated to fit the context of 768 tokens"):
            runs[early] = score_perturbed(pt, ds, judge=backend, mode=mode, metrics=["coherence", "fluency"],
                                          cache=None, progress=False, seed=3, **kwargs).table
    fixed, early = runs[False], runs[True]
    pd.testing.assert_frame_equal(fixed.drop(columns="completion_tokens"), early.drop(columns="completion_tokens"))
    # not vacuous: some replies were scored and stopped early, some failed (their reasons compared above)
    assert (early["completion_tokens"] < fixed["completion_tokens"]).any()
    assert (early["completion_tokens"] <= fixed["completion_tokens"]).all()
    assert (fixed["n_failed"] > 0).any() and (fixed["n_valid"] > 0).any()


# ------------------------------------------------------------------ prefix order (issue 39: a demo that fits)

def test_prefix_order_is_a_stable_lexicographic_walk():
    """Lexicographic order by token id visits the prompts' trie depth first: each prompt follows the one
    sharing its longest prefix. Equal prompts keep their order (stable)."""
    from dhp.backends.embedded import prefix_order

    seqs = [[1, 5, 2], [1, 2, 3, 4], [7], [1, 2], [1, 5, 2], [1, 2, 3, 9]]
    assert prefix_order(seqs) == [3, 1, 5, 0, 4, 2]
    assert prefix_order([]) == []


EDITS = [  # variants of one summary, edited at its start, middle and end, in an order that is not the trie's
    SOURCE.replace("Sunday", "Saturday"),
    SOURCE,
    SOURCE.replace("storm", "strom"),
    SOURCE.replace("county said", "county said on Monday"),
    SOURCE.replace("Crews cleared", "Crews cleard"),
    SOURCE,  # a duplicate: the same result as its twin
]


def _cold(b):
    """Forget what the backend's KV caches hold: its next call is computed from an empty cache."""
    b._kv_prompt_len.clear()
    b._ll_prev = None


def test_reordered_chat_calls_give_each_request_a_cold_evaluations_result():
    """chat_many evaluates its requests in prefix order, reusing the KV cache; each request must get, in its own
    slot, exactly (bit for bit) the reply and top-20 logprobs of evaluating it alone from an empty cache."""
    from dhp.backends import ChatRequest, EmbeddedBackend

    reqs = [ChatRequest.make([{"role": "user", "content": f"Article: {SOURCE}\nSummary: {t}\nRate it 1-5:"}],
                             max_tokens=3, logprobs=20) for t in EDITS]
    b = EmbeddedBackend()
    seen = []
    got = b.chat_many(reqs, on_result=lambda i, r: seen.append(i))
    assert sorted(seen) == list(range(len(reqs))) and seen != sorted(seen)  # reordered, each index once
    reused = sum(g.prompt_tokens - g.prompt_tokens_computed for g in got)
    assert reused > 0.5 * sum(g.prompt_tokens for g in got)
    for req, g in zip(reqs, got):
        _cold(b)
        alone = b.chat_many([req])[0]
        assert alone.prompt_tokens_computed == alone.prompt_tokens  # really from an empty cache
        assert (g.text, g.top_logprobs) == (alone.text, alone.top_logprobs)
    b.close()


def test_likelihood_reuses_the_shared_positions_of_the_previous_call_exactly():
    """loglikelihood_many evaluates its pairs in prefix order, and takes the log-probabilities of the positions
    a variant shares with the one before it from that call: every sum must equal (bit for bit) a cold model's,
    with fewer tokens computed than the continuations hold."""
    from dhp.backends import EmbeddedBackend

    prefix = f"Article:\n{SOURCE}\n\nSummary:\n"
    pairs = [(prefix, t) for t in EDITS] + [(prefix + "A", " storm closed the road.")]
    b = EmbeddedBackend()
    got = b.loglikelihood_many(pairs)
    n_cont = sum(g.n_tokens for g in got)
    assert sum(g.prompt_tokens_computed for g in got) < len(b.tokenize(prefix)) + 0.8 * n_cont
    for pair, g in zip(pairs, got):
        _cold(b)
        alone = b.loglikelihood_many([pair])[0]
        assert alone.prompt_tokens_computed == alone.prompt_tokens
        assert (g.logprob_sum, g.n_tokens) == (alone.logprob_sum, alone.n_tokens), pair[1]
    b.close()
