"""Decompose-and-aggregate analyses (pure: tables in, tables out): agreement with human preference per strategy
(DnA-Eval's Table 2 layout, with position consistency and cost), and two bridges to DHP — DnA as a pointwise score
that the discernment statistics read, and pairwise discernment (original and perturbed shown together). The judge
calls that make these tables are in dhp.methods.decompose_aggregate (collect).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dhp.analysis.discernment import discernment_score
from dhp.errors import DHPError
from dhp.schema import SCORE_COLUMNS
from dhp.lazy import lazy_module

sps = lazy_module("scipy.stats")  # imported when first used (dhp.lazy)

__all__ = ["combine_orders", "agreement_table", "dna_scores", "task_weights", "equal_weights", "pairwise_discernment",
           "bridge_table", "AGREEMENT_COLUMNS", "COMPARISON_COLUMNS", "PAIRWISE_D_COLUMNS", "BRIDGE_COLUMNS"]

AGREEMENT_COLUMNS = ["judge", "mode", "subset", "strategy", "agreement", "agreement_order_12", "agreement_order_21",
                     "agreement_both", "position_consistency", "equal_llmbar", "n", "no_verdict", "ties", "calls",
                     "prompt_tokens"]
_RUN_KEYS = ("judge", "mode", "source")  # columns that tell runs apart when one verdicts table holds several
_NEEDED = ["item_id", "subset", "strategy", "order", "verdict", "label"]


def _run_keys(verdicts: pd.DataFrame) -> list[str]:
    return [c for c in _RUN_KEYS if c in verdicts.columns]


def combine_orders(verdicts: pd.DataFrame) -> pd.DataFrame:
    """One row per item × strategy (× judge, mode, source when the table has them): verdict_12, verdict_21
    (None where that order has no row or no verdict) and combined (the verdict both orders give, else
    "inconsistent"; None when either order has no verdict)."""
    missing = [c for c in _NEEDED if c not in verdicts.columns]
    if missing:
        raise DHPError(f"The verdicts table lacks column(s) {missing}.",
                       "give one row per item × strategy × order with " + ", ".join(_NEEDED) + ".")
    bad = sorted(set(verdicts["order"].astype(str)) - {"12", "21"})
    if bad:
        raise DHPError(f"Unknown order value(s) {bad} in the verdicts table.",
                       'use "12" (output_1 shown first) and "21" (output_2 shown first).')
    index = [*_run_keys(verdicts), "item_id", "subset", "strategy", "label", "order"]
    v = verdicts.assign(order=verdicts["order"].astype(str), label=verdicts["label"].astype(str))
    dup = v.duplicated(index)
    if dup.any():
        raise DHPError(f"{int(dup.sum())} duplicate row(s) for the same item, strategy and order, e.g. "
                       f"{v.loc[dup, index].iloc[0].to_dict()}.",
                       "keep one verdict per item × strategy × order (add judge, mode or source columns to tell "
                       "runs apart).")
    w = (v.set_index(index)["verdict"].astype(object).unstack("order").reindex(columns=["12", "21"]).reset_index())
    w.columns.name = None
    w = w.rename(columns={"12": "verdict_12", "21": "verdict_21"})
    w[["verdict_12", "verdict_21"]] = w[["verdict_12", "verdict_21"]].astype(object).where(
        w[["verdict_12", "verdict_21"]].notna(), None)
    both = w["verdict_12"].notna() & w["verdict_21"].notna()
    w["combined"] = np.where(~both, None, np.where(w["verdict_12"] == w["verdict_21"], w["verdict_12"], "inconsistent"))
    return w


def agreement_table(verdicts: pd.DataFrame, costs: pd.DataFrame | None = None, judge: str = "", mode: str = ""
                    ) -> pd.DataFrame:
    """Agreement with the gold label, computed the same way for every strategy and for live or imported
    verdicts — the statistics of LLMBar's evaluate.py (Zeng et al. 2023; github.com/princeton-nlp/LLMBar,
    LLMEvaluator/evaluate.py, statistics.json). One row per subset × strategy (× judge, mode, source when the
    verdicts table has those columns; otherwise judge and mode are the arguments), AGREEMENT_COLUMNS
    (+ source when present):

    - agreement_order_12, agreement_order_21: share of the n items whose verdict in that order equals the label
      (LLMBar's correct_False, correct_True);
    - agreement: their mean, (correct_12 + correct_21) / 2n — LLMBar's reported accuracy (correct_average);
    - agreement_both: share of items right in both orders (correct_both);
    - position_consistency: share of items whose two orders both gave a verdict and the same one;
    - equal_llmbar: LLMBar's "equal" (its positional agreement rate): share of items whose two orders' verdicts
      are identical, where two missing verdicts count as identical (evaluate.py compares None == None);
    - n: items; no_verdict: (item, order) runs without a verdict (unparsed reply, refused step, or no row for
      that order; reasons in the verdicts' failure column); ties: (item, order) runs whose verdict is "tie";
    - calls, prompt_tokens: the strategy's cost over the whole run (from ``costs``: strategy, calls,
      prompt_tokens, and judge/mode when it covers several runs; NaN where it has no row, e.g. for a recorded
      judge, whose cost is not known).

    A missing verdict counts as wrong in every agreement column (as in LLMBar) and as inconsistent in
    position_consistency; a "tie" verdict is wrong against a "1"/"2" label and right against a "tie" label."""
    c = combine_orders(verdicts)
    keys = _run_keys(verdicts)
    cols = [*AGREEMENT_COLUMNS[:2], *(["source"] if "source" in keys else []), *AGREEMENT_COLUMNS[2:]]
    if c.empty:  # no verdict rows (e.g. a run folder holding only the DHP bridge): no row, never a 0
        return pd.DataFrame(columns=cols)
    group = [*keys, "subset", "strategy"]
    rows = []
    for key, g in c.groupby(group, sort=True, dropna=False):
        rec = dict(zip(group, key))
        n = len(g)
        right_12, right_21 = g["verdict_12"] == g["label"], g["verdict_21"] == g["label"]
        same = g["verdict_12"].fillna("<none>") == g["verdict_21"].fillna("<none>")
        answered = g["verdict_12"].notna() & g["verdict_21"].notna()
        rec.update(agreement=float((right_12.sum() + right_21.sum()) / (2 * n)),
                   agreement_order_12=float(right_12.mean()), agreement_order_21=float(right_21.mean()),
                   agreement_both=float((right_12 & right_21).mean()),
                   position_consistency=float((same & answered).mean()), equal_llmbar=float(same.mean()), n=int(n),
                   no_verdict=int(g["verdict_12"].isna().sum() + g["verdict_21"].isna().sum()),
                   ties=int((g["verdict_12"] == "tie").sum() + (g["verdict_21"] == "tie").sum()))
        rows.append(rec)
    out = pd.DataFrame(rows)
    if "judge" not in keys:
        out.insert(0, "judge", judge)
    if "mode" not in keys:
        out.insert(1, "mode", mode)
    if costs is not None and len(out):
        on = ["strategy", *[k for k in ("judge", "mode") if k in costs.columns and k in keys]]
        out = out.merge(costs[[*on, "calls", "prompt_tokens"]], on=on, how="left")
    else:
        out = out.assign(calls=math.nan, prompt_tokens=math.nan)
    return out.reindex(columns=cols)


# ---------------------------------------------------------------------------------------------- DHP bridges

def task_weights(expert_weights: pd.DataFrame) -> pd.DataFrame:
    """DnA's aspect weights per task from an expert-weights table (dhp.weights: task, perturbation, metric,
    weight): each metric's weight averaged over the task's perturbations — one weighting per task, fixed before
    any variant is seen. Columns task, metric, weight."""
    return expert_weights.groupby(["task", "metric"], as_index=False)["weight"].mean()


def equal_weights(scores: pd.DataFrame) -> pd.DataFrame:
    """Every metric of every task in ``scores`` weighted alike (columns task, metric, weight)."""
    s = scores[scores["metric"] != "likelihood"]
    return s[["task", "metric"]].drop_duplicates().assign(weight=1.0).reset_index(drop=True)


def dna_scores(scores: pd.DataFrame, weights: pd.DataFrame) -> pd.DataFrame:
    """DnA as a pointwise DHP score: aspects = the task's metrics (each already scored in its own inference,
    dhp.judging.score_perturbed), aggregated in code as f = Σ_m w_m s_m with ``weights`` (task, metric, weight;
    normalised to sum 1 per task — :func:`task_weights` or :func:`equal_weights`). A row lacking any metric's
    score is NaN. Returns a scores table (SCORE_COLUMNS) with metric "dna", for every judge × mode in ``scores``."""
    s = scores[scores["metric"] != "likelihood"]
    if s.empty:
        raise DHPError("dna_scores needs metric scores (logprobs or sample mode).", "score with mode='logprobs'.")
    missing = [c for c in ("task", "metric", "weight") if c not in weights.columns]
    if missing:
        raise DHPError(f"The DnA weights table lacks column(s) {missing}.", "give task, metric, weight.")
    w = weights.assign(weight=weights["weight"] / weights.groupby("task")["weight"].transform("sum"))
    key = ["dataset", "task", "judge", "mode", "item_id", "perturbation", "severity", "level"]
    m = s.merge(w[["task", "metric", "weight"]], on=["task", "metric"], how="left")
    if m["weight"].isna().any():
        raise DHPError(f"No DnA weight for metric(s) {sorted(set(m.loc[m['weight'].isna(), 'metric']))}.",
                       "give a weight for every metric of the task.")
    m["wx"] = m["weight"] * m["score"]
    # a NaN metric score makes the weighted sum NaN (sum with min_count = all metrics)
    out = m.groupby(key, as_index=False).agg(score=("wx", lambda x: x.sum(min_count=len(x))),
                                            n_valid=("n_valid", "sum"), n_failed=("n_failed", "sum"))
    out["metric"] = "dna"
    return out[SCORE_COLUMNS]


#: The comparisons table (original and perturbed copy shown together, both orders): one row per item ×
#: perturbation × severity × order; order "op" shows the original first, "po" the perturbed copy; winner
#: "original", "perturbed", "tie" or None (no label in the reply: failure says why); p_1 the label probability
#: of the original (logprobs mode; NaN otherwise).
COMPARISON_COLUMNS = ["dataset", "judge", "mode", "item_id", "perturbation", "severity", "level", "order", "winner",
                      "p_1", "failure"]
PAIRWISE_D_COLUMNS = ["dataset", "judge", "mode", "perturbation", "severity", "level", "n_items", "original_wins",
                      "perturbed_wins", "ties", "inconsistent", "unparsed", "share_original", "p", "D"]


def pairwise_discernment(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Per judge × mode × perturbation (PAIRWISE_D_COLUMNS): does the judge prefer the original to its perturbed
    copy when it sees both? The two orders of one item are one trial, not two: per item, both orders naming the
    same winner give one outcome (original_wins, perturbed_wins or ties); orders that disagree are counted in
    ``inconsistent``; an item with a missing winner in either order (unparsed reply, or no row for that order)
    in ``unparsed``. The one-sided exact binomial (sign) test counts the wins and losses only:
    ``scipy.stats.binomtest(wins, wins + losses, 0.5, alternative="greater")``, turned into D = log_0.05(p);
    ties, inconsistent and unparsed items are left out of it (p and D NaN when no item has a win or a loss).
    share_original = original_wins / n_items. Input: the comparisons table (COMPARISON_COLUMNS; dataset, judge,
    mode, item_id, perturbation, severity, level, order "op"/"po", winner are read)."""
    key = ["dataset", "judge", "mode", "perturbation", "severity", "level"]
    missing = [c for c in [*key, "item_id", "order", "winner"] if c not in comparisons.columns]
    if missing:
        raise DHPError(f"The comparisons table lacks column(s) {missing}.",
                       "pass the comparisons table of the decompose_aggregate method (bridge_comparisons.parquet).")
    if comparisons.empty:
        return pd.DataFrame(columns=PAIRWISE_D_COLUMNS)
    dup = comparisons.duplicated([*key, "item_id", "order"])
    if dup.any():
        raise DHPError(f"{int(dup.sum())} duplicate comparison(s) of the same item, perturbation and order.",
                       "keep one comparison per item × perturbation × severity × order.")
    w = (comparisons.assign(winner=comparisons["winner"].astype(object))
         .set_index([*key, "item_id", "order"])["winner"].unstack("order").reindex(columns=["op", "po"]))
    both = w["op"].notna() & w["po"].notna()
    outcome = pd.Series(np.where(~both, "unparsed", np.where(w["op"] == w["po"], w["op"], "inconsistent")),
                        index=w.index)
    rows = []
    for k, g in outcome.groupby(level=key, sort=True):
        counts = g.value_counts()
        wins, losses = int(counts.get("original", 0)), int(counts.get("perturbed", 0))
        p = float(sps.binomtest(wins, wins + losses, 0.5, alternative="greater").pvalue) if wins + losses else math.nan
        rows.append(dict(zip(key, k), n_items=int(len(g)), original_wins=wins, perturbed_wins=losses,
                         ties=int(counts.get("tie", 0)), inconsistent=int(counts.get("inconsistent", 0)),
                         unparsed=int(counts.get("unparsed", 0)), share_original=wins / len(g), p=p,
                         D=float(discernment_score(p)) if math.isfinite(p) else math.nan))
    return pd.DataFrame(rows, columns=PAIRWISE_D_COLUMNS)


#: The bridge table: one row per dataset × judge × mode × perturbation × severity × kind, where kind says how the
#: same judge's D was obtained — "direct" (pointwise metric scores, harmonic-mean p as the DHP paper prints it),
#: "dna" (the metric scores aggregated with fixed weights into one pointwise score, dna_scores) or "pairwise"
#: (original and perturbed copy shown together, sign test over items, pairwise_discernment).
BRIDGE_COLUMNS = ["dataset", "judge", "mode", "perturbation", "severity", "level", "kind", "p", "D", "n_items"]
BRIDGE_KINDS = ("direct", "dna", "pairwise")


def bridge_table(direct: pd.DataFrame, dna: pd.DataFrame, pairwise: pd.DataFrame) -> pd.DataFrame:
    """The three D of the bridge side by side (BRIDGE_COLUMNS): ``direct`` and ``dna`` are discernment tables
    (dhp.analysis.discernment.discernment of the metric scores and of dna_scores), ``pairwise`` is
    pairwise_discernment's table; each may be empty."""
    parts = [t.assign(kind=kind).reindex(columns=BRIDGE_COLUMNS)
             for kind, t in zip(BRIDGE_KINDS, (direct, dna, pairwise)) if t is not None and len(t)]
    if not parts:
        return pd.DataFrame(columns=BRIDGE_COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values(["dataset", "judge", "mode", "perturbation", "severity"], kind="stable").reset_index(drop=True)


def subset_group(subset: str) -> str:
    """The leaderboard's scope of an LLMBar subset: the four adversarial subsets pooled (as LLMBar and DnA-Eval
    report them), every other subset on its own."""
    return "LLMBar Adversarial (4 subsets)" if str(subset).startswith("Adversarial") else (
        "LLMBar Natural" if subset == "Natural" else str(subset).replace("Processed_", ""))


#: LLMBar's evaluator templates behind its recorded verdicts (github.com/princeton-nlp/LLMBar @ LLMBAR_COMMIT,
#: LLMEvaluator/evaluators/prompts): the first 12 hex digits of each template's sha256 (auxiliary ones first, joined
#: by "+"). A live ``llmbar:<Strategy>`` run whose templates, read from the data root, have these digests follows
#: the recorded judges' protocol and shares their leaderboard view; any other wording gets a view of its own.
LLMBAR_COMMIT = "900616b"
LLMBAR_TEMPLATE_SHA = {"Vanilla": "77a3a8f35447", "Vanilla_NoRules": "c5759aaedc9d", "Vanilla_1shot": "bdc127c0ca41",
                       "Vanilla_2shot": "e29be9c04236", "CoT": "fe8768534e49", "Metrics": "582d0cdf593c+75b5fd4c8b24",
                       "Reference": "840368102404+5e0f2645cd41",
                       "Metrics_Reference": "582d0cdf593c+840368102404+a75730d4a3e7",
                       "Rating": "4c1fbf0c857e", "Rating_NoRules": "4ee776236550",
                       "Rating_Metrics": "582d0cdf593c+8b6133dac790", "Rating_Reference": "840368102404+ba2029222833",
                       "Rating_Metrics_Reference": "582d0cdf593c+840368102404+90630ec0ef0a",
                       "Swap": "fe8768534e49+cefbd81e8adf", "Swap_CoT": "fe8768534e49+4f74f144f3dc"}
LIVE_LLMBAR = "llmbar:"  # prefix of the live strategies that run LLMBar's evaluators verbatim


#: How each recorded LLMBar judge's config (config/<judge>/<Strategy>.json and evaluate.py's dispatch on its model
#: name) differs from GPT-4's, the config a live judge follows: what the judge was sent and how its reply was read.
#: ChatGPT and ChatGPT-0301 differ only in the model. tests/test_llmbar_identity.py derives these from the data
#: root's configs (dhp.judging.strategies.llmbar_protocol) and checks they are equal.
LLMBAR_OWN_FORMAT = {"PaLM2": "own message format (one text prompt: system and user joined, no chat roles)",
                     "LLaMA2": "own message format (Llama-2 [INST] <<SYS>> text, no ChatML)",
                     "Falcon": "own message format (System:/User:/Falcon: text, no ChatML)"}
LLMBAR_OWN_DECODING_TEXT = "own decoding (no temperature set: the model's generation defaults)"
LLMBAR_OWN_DECODING = ("LLaMA2", "Falcon")
LLMBAR_OWN_RULE_TEXT = "own answer rule (a line starting Output (a)/(b), not '... is better.')"
LLMBAR_OWN_RULE = {("PaLM2", "CoT")}


def llmbar_differences(judge: str, strategy: str) -> tuple[str, ...]:
    """How ``judge``'s recorded ``strategy`` protocol differs from the live one (GPT-4's config), in the identity's
    words: answer rule, message format, decoding; () when it does not."""
    judge = str(judge)
    out = [LLMBAR_OWN_RULE_TEXT] if (judge, str(strategy)) in LLMBAR_OWN_RULE else []
    out += [LLMBAR_OWN_FORMAT[judge]] if judge in LLMBAR_OWN_FORMAT else []
    out += [LLMBAR_OWN_DECODING_TEXT] if judge in LLMBAR_OWN_DECODING else []
    return tuple(out)


def llmbar_identity(strategy: str, digest: str, judge: str = "", differences=()) -> str:
    """The protocol identity of an LLMBar evaluator: "llmbar/<Strategy>@<commit> sha256:<template digests>" is
    GPT-4's config — the templates as ChatML messages, its decoding (temperature 0, its max_tokens), its answer
    rule — which a live judge follows and GPT-4, ChatGPT and ChatGPT-0301 were run with. Another judge's config is
    that identity with how it differs: "... [PaLM2: own answer rule (...)]", so it is never "the same protocol"."""
    base = f"llmbar/{strategy}@{LLMBAR_COMMIT} sha256:{digest}"
    return f"{base} [{judge}: {'; '.join(differences)}]" if differences else base


def protocol_of(strategy: str, source: str, judge: str = "") -> str:
    """The protocol of a verdict row: a live ``llmbar:`` strategy records its template identity in ``source``; an
    imported LLMBar verdict (source = its result.json) ran upstream's template with ``judge``'s config
    (:func:`llmbar_differences`); the project's own wordings are "dhp/<strategy>"."""
    source = str(source or "")
    if str(strategy).startswith(LIVE_LLMBAR) and source.startswith("llmbar/"):
        return source
    if source.startswith(("LLMBar/", "Processed/")):  # an imported LLMBar result.json (dhp.recorded.llmbar)
        digest = LLMBAR_TEMPLATE_SHA.get(str(strategy))
        if not digest:
            return f"llmbar/{strategy}@{LLMBAR_COMMIT}"
        return llmbar_identity(strategy, digest, str(judge), llmbar_differences(judge, strategy))
    if source:
        return f"recorded/{strategy}"
    return f"dhp/{strategy}"


def view_strategy(strategy: str, protocol: str) -> str:
    """The leaderboard strategy a row is ranked under: a live ``llmbar:X`` run on upstream's templates is "X" (the
    recorded judges' view); every other strategy keeps its own name, so different protocols never share a view."""
    name = str(strategy)
    if name.startswith(LIVE_LLMBAR):
        base = name[len(LIVE_LLMBAR):]
        if base in LLMBAR_TEMPLATE_SHA and protocol == llmbar_identity(base, LLMBAR_TEMPLATE_SHA[base]):
            return base
    return name


def correctness_units(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Per judge × mode × strategy × item: the share of the two orders whose verdict is the gold label (0, 0.5 or 1;
    a missing verdict counts as wrong, as in LLMBar's accuracy, whose mean over items this is). Columns: judge,
    mode, strategy (:func:`view_strategy`), protocol (:func:`protocol_of`), scope (:func:`subset_group`), unit
    (subset:item_id), value."""
    missing = [c for c in ("judge", "mode", *_NEEDED) if c not in verdicts.columns]
    if missing:
        raise DHPError(f"The verdicts table lacks columns {missing}.", "pass pairwise_verdicts.parquet.")
    right = (verdicts["verdict"].astype(object) == verdicts["label"].astype(object)).astype(float)
    source = verdicts["source"] if "source" in verdicts.columns else pd.Series("", index=verdicts.index)
    t = verdicts.assign(right=right, protocol=[protocol_of(s, src, j) for s, src, j in
                                               zip(verdicts["strategy"], source, verdicts["judge"])])
    out = t.groupby(["judge", "mode", "strategy", "protocol", "subset", "item_id"], as_index=False)["right"].sum()
    out["value"] = out["right"] / 2.0  # two orders per item
    out["scope"] = out["subset"].map(subset_group)
    out["strategy"] = [view_strategy(s, p) for s, p in zip(out["strategy"], out["protocol"])]
    out["unit"] = out["subset"].astype(str) + ":" + out["item_id"].astype(str)
    return out[["judge", "mode", "strategy", "protocol", "scope", "unit", "value"]]
