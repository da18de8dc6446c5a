"""The pairwise protocol: the judge sees two candidates for the same source and says which is better
(or that they tie). Every pair is asked in both orders, so position bias is visible, and each verdict
is mapped back to the pair's own labelling (candidate "1" / "2").

Input (the pairs table): pair_id, source, candidate_1, candidate_2, and optionally unit (what a
candidate is called in the prompt: "summary", "translation", ...; default "text"). Any other text column
fills the template slot of its name (e.g. aspect_title for dhp/prompts/pairwise/summarization_compare.txt).

Modes: ``sample`` parses the reply text; ``logprobs`` parses it the same way and also reads the
log-probabilities of the labels "1" and "2" at the first generated token (``p_1`` = P("1") / (P("1") +
P("2")), NaN when the server gives none). The label always comes from the parsed reply, so both modes
agree on what the judge said; ``p_1`` adds how sure it was. A reply that names no label is a None
verdict with its reason — never a guessed one.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from dhp import calls, prompts
from dhp.backends import ChatRequest, get_backend
from dhp.backends.control import is_control_backend, prefer_rows
from dhp.errors import DHPError

ORDERS = ("12", "21")
PAIR_MODES = ("sample", "logprobs")
COMPARE_COLUMNS = ["pair_id", "judge", "mode", "order", "verdict", "p_1", "reply", "failure"]
COMBINED_COLUMNS = ["pair_id", "judge", "mode", "verdict_12", "verdict_21", "combined", "position_consistent"]
_LABEL = re.compile(r"^\W*(?:(?:candidate|response|output|summary|translation|answer|text)\s*)?(1|2|tie)\b",
                    re.IGNORECASE)


def parse_preference(text: str | None) -> tuple[str | None, str]:
    """("1" | "2" | "tie", "") when the reply starts with a label (after punctuation, "Candidate", "Summary"...), else
    (None, reason). A label later in the text is not taken: "Both are good, but 2" is ambiguous enough."""
    if text is None:
        return None, "no reply"
    m = _LABEL.match(text)
    if not m:
        return None, f"reply does not start with 1, 2 or tie: {text.strip()[:40]!r}"
    return m.group(1).lower(), ""


def label_probability(top_logprobs) -> float:
    """P("1") / (P("1") + P("2")) at the first generated token, NaN when neither label is among the top."""
    if not top_logprobs:
        return math.nan
    first = top_logprobs[0] or {}
    p = {lab: sum(math.exp(lp) for tok, lp in first.items() if tok.strip() == lab) for lab in ("1", "2")}
    total = p["1"] + p["2"]
    return p["1"] / total if total > 0 else math.nan


def _check_pairs(pairs: pd.DataFrame, mode: str) -> None:
    missing = [c for c in ("pair_id", "source", "candidate_1", "candidate_2") if c not in pairs.columns]
    if missing:
        raise DHPError(f"The pairs table lacks column(s) {missing}.",
                       "give pair_id, source, candidate_1, candidate_2 (and optionally unit).")
    if pairs["pair_id"].duplicated().any():
        raise DHPError("The pairs table has duplicate pair_id values.", "make pair_id unique.")
    if mode not in PAIR_MODES:
        raise DHPError(f"Unknown pairwise mode {mode!r}.", f"use one of {PAIR_MODES}.")


def compare_pairs(pairs: pd.DataFrame, judge="embedded", mode: str = "logprobs", cache=None, seed: int = 0,
                  template: tuple[str, str] = ("pairwise", "compare_overall"),
                  progress: bool | str = False) -> pd.DataFrame:
    """Ask the judge about every pair in both orders. Returns COMPARE_COLUMNS, one row per pair × order:
    verdict "1", "2", "tie" or None in the pair's own labelling (order "21" showed candidate 2 first),
    p_1 the label probability of candidate 1 (logprobs mode; NaN otherwise), reply the raw text,
    failure the reason when verdict is None. Calls go through dhp.calls (cached, any backend)."""
    backend = get_backend(judge)
    _check_pairs(pairs, "sample" if is_control_backend(backend) else mode)  # a control runs in mode "metric"
    if is_control_backend(backend):
        return _compare_controlled(pairs, backend, mode)
    tpl = prompts.load(*template)
    meta, reqs = [], []
    for r in pairs.to_dict("records"):
        for order in ORDERS:
            a, b = (r["candidate_1"], r["candidate_2"]) if order == "12" else (r["candidate_2"], r["candidate_1"])
            slots = {k: v for k, v in r.items() if isinstance(v, str)}
            text = prompts.fill(tpl, slots | {"unit": r.get("unit") or "text", "source": r["source"] or "",
                                              "candidate_1": a, "candidate_2": b})
            meta.append((r["pair_id"], order))
            reqs.append(ChatRequest.make([{"role": "user", "content": text}], 4, 0.0, seed,
                                         logprobs=20 if mode == "logprobs" else None))
    replies = calls.chat(backend, reqs, cache, progress=progress, desc="compare")
    rows = []
    for (pair_id, order), rep in zip(meta, replies):
        text = getattr(rep, "text", None)
        verdict, why = parse_preference(text) if text is not None else (None, getattr(rep, "reason", "call failed"))
        p_first = label_probability(getattr(rep, "top_logprobs", None)) if mode == "logprobs" else math.nan
        if order == "21":  # shown swapped: map back to the pair's labelling
            verdict = {"1": "2", "2": "1"}.get(verdict, verdict)
            p_first = 1 - p_first if math.isfinite(p_first) else p_first
        rows.append({"pair_id": pair_id, "judge": backend.identity, "mode": mode, "order": order, "verdict": verdict,
                     "p_1": p_first, "reply": text, "failure": why})
    return pd.DataFrame(rows, columns=COMPARE_COLUMNS)


def _compare_controlled(pairs: pd.DataFrame, backend, mode: str) -> pd.DataFrame:
    """compare_pairs for a control (dhp.controls): each pair shown in both orders, the control's verdict from the pair's
    ``gold`` column (the better candidate, "1"/"2"), mapped back to the pair's labelling."""
    if "gold" not in pairs.columns:
        raise DHPError(f"{backend.identity} needs each pair's better candidate (column 'gold').",
                       "give the pairs a gold column ('1' or '2').")
    shown = []
    for r in pairs.to_dict("records"):
        for order in ORDERS:
            swap = order == "21"
            gold = {"1": "2", "2": "1"}.get(str(r["gold"]), str(r["gold"])) if swap else str(r["gold"])
            shown.append({"pair_id": r["pair_id"], "order": order, "gold": gold,
                          "first": r["candidate_2"] if swap else r["candidate_1"],
                          "second": r["candidate_1"] if swap else r["candidate_2"]})
    shown = pd.DataFrame(shown, columns=["pair_id", "order", "gold", "first", "second"])
    verdicts = prefer_rows(backend, shown, ["pair_id", "order"]) if len(shown) else []
    rows = [{"pair_id": r["pair_id"], "judge": backend.identity, "mode": mode, "order": r["order"],
             "verdict": {"1": "2", "2": "1"}.get(v, v) if r["order"] == "21" else v, "p_1": math.nan, "reply": None,
             "failure": ""} for r, v in zip(shown.to_dict("records"), verdicts)]
    return pd.DataFrame(rows, columns=COMPARE_COLUMNS)


def combine_pair_orders(verdicts: pd.DataFrame) -> pd.DataFrame:
    """One row per pair (COMBINED_COLUMNS): verdict_12, verdict_21, combined (the verdict both orders give,
    "inconsistent" when they differ, None when either has none) and position_consistent (both orders
    gave a verdict and it is the same)."""
    w = (verdicts.set_index(["pair_id", "judge", "mode", "order"])["verdict"].astype(object)
         .unstack("order").reindex(columns=list(ORDERS)).reset_index())
    w.columns.name = None
    w = w.rename(columns={"12": "verdict_12", "21": "verdict_21"})
    both = w["verdict_12"].notna() & w["verdict_21"].notna()
    same = both & (w["verdict_12"] == w["verdict_21"])
    w["combined"] = np.where(~both, None, np.where(same, w["verdict_12"], "inconsistent"))
    w["position_consistent"] = same
    return w[COMBINED_COLUMNS]
