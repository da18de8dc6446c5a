"""Judge biases (pure: tables in, tables out): position, length and planted cues from pairwise verdicts; the length
of pointwise scores given the human score; repeatability of repeated requests.

Pairwise verdicts are rows of dhp.judging.strategies.VERDICT_COLUMNS (judge, mode, item_id, subset, strategy, order,
verdict, label, ...): order "12" shows output_1 first, "21" output_2 first; the verdict is in the data set's own
numbering ("1", "2", "tie", or None). Any judge that gives such rows stands on these views — live, recorded (LLMBar's
result.json files) or a control/baseline.

- *Position* (per judge × mode × strategy × subset): ``prefer_first`` — the share of verdicts for the output shown
  first, over the pairs with a verdict in both orders (a pair is one unit: 0, ½ or 1), bootstrap interval over
  pairs; ``flip_rate`` — the share of those pairs whose verdict changes when the two outputs swap places (Wilson
  interval); ``equal_llmbar`` — LLMBar's positional agreement rate ("equal" in its statistics.json: the two orders'
  verdicts identical, two missing verdicts counting as identical), with its count.
- *Length, observed*: the longer output of a pair by words (pairs of equal length left out); ``p_longer_gold_longer``
  = P(prefers the longer | the gold label is the longer), ``p_longer_gold_shorter`` = P(prefers the longer | the
  gold is the shorter), each over pairs (both orders), bootstrap interval; ``length_bias`` = their sum minus 1 — 0
  for a judge that follows the label or errs at random, +1 for "always the longer", −1 for "always the shorter";
  ``length_coef``: the coefficient of log(words₁/words₂) in the logistic model verdict = "1" ~ gold + shown-first +
  log length ratio (alpaca_eval's length-controlled idea), with a pair-clustered (sandwich) Wald interval.
- *Pointwise length*: the partial correlation of a judge's score with the output's length given the human score
  (Pearson of the residuals of both after a linear fit on the human score), bootstrap interval over outputs.
- *Planted cues*: the verdict on a pair whose gold-worse output carries a cue, against the verdict on the plain
  pair in the same order: ``robustness`` — the share unchanged (CALM's robustness rate), ``toward_cue`` — the share
  that moved to the cued output; per cue and order.
- *Repeatability*: Fleiss' κ of k repeated verdicts of the same requests (each unit rated k times).

Every number carries n; a statistic of fewer than MIN_UNITS units is NaN with status "too few units (n < 5)", never
0 and never a zero-width interval.
"""

from __future__ import annotations

import functools
import math
import re

import numpy as np
import pandas as pd

from dhp.analysis.decomposition import protocol_of, subset_group, view_strategy
from dhp.stats.correlation import weighted_pearson
from dhp.stats.paired import wilson_interval
from dhp.stats.resample import MIN_RESAMPLE_UNITS

__all__ = ["MIN_UNITS", "LLMBAR_SCOPE", "word_count", "pair_lengths", "pair_units", "both_orders", "first_values", "position_table", "length_table",
           "cue_table", "wilson", "bootstrap_mean", "partial_correlation_given", "pointwise_length_table",
           "fleiss_kappa", "repeatability_table", "baseline_verdicts", "BASELINES", "POSITION_COLUMNS",
           "LENGTH_COLUMNS", "CUE_COLUMNS", "POINTWISE_COLUMNS", "REPEAT_COLUMNS", "logistic_length"]

#: Fewest units a bias number is given on (dhp.stats.resample.MIN_RESAMPLE_UNITS): below it, NaN "too few units".
MIN_UNITS = MIN_RESAMPLE_UNITS
TOO_FEW = f"too few units (n < {MIN_UNITS})"
#: The pooled scope of LLMBar's own 419 pairs (Natural + the four Adversarial subsets)
LLMBAR_SCOPE = "LLMBar (Natural + Adversarial)"
LLMBAR_SUBSETS = ("Natural", "Adversarial_GPTInst", "Adversarial_GPTOut", "Adversarial_Manual", "Adversarial_Neighbor")
FIRST = {"12": "1", "21": "2"}  # the output shown first in each order, in the data set's numbering

#: The bias views' own baselines (mode "baseline"): what a judge is read against. "always the first" picks the
#: output shown first in every order; "always the longer" the output with more words in both orders (none on pairs
#: of equal length); "never moved by a cue" gives on a cued pair the verdict it gave on the plain pair.
BASELINES = {"baseline:always_first": "always the output shown first",
             "baseline:always_longer": "always the output with more words",
             "baseline:never_moved": "never moved by a cue (the plain pair's verdict)"}
BASELINE_MODE = "baseline"

POSITION_COLUMNS = ["judge", "mode", "strategy", "protocol", "subset", "n_pairs", "n_both", "prefer_first",
                    "prefer_first_lo", "prefer_first_hi", "flip_rate", "flip_rate_lo", "flip_rate_hi",
                    "equal_llmbar", "equal_count", "status"]
LENGTH_COLUMNS = ["judge", "mode", "strategy", "protocol", "subset", "n_gold_longer", "p_longer_gold_longer",
                  "p_longer_gold_longer_lo", "p_longer_gold_longer_hi", "n_gold_shorter", "p_longer_gold_shorter",
                  "p_longer_gold_shorter_lo", "p_longer_gold_shorter_hi", "p_longer", "p_longer_lo", "p_longer_hi",
                  "length_bias", "length_bias_lo",
                  "length_bias_hi", "n_verdicts", "length_coef", "length_coef_lo", "length_coef_hi", "status"]
CUE_COLUMNS = ["judge", "mode", "strategy", "cue", "order", "n", "robustness", "robustness_lo", "robustness_hi",
               "toward_cue", "toward_cue_lo", "toward_cue_hi", "status"]
POINTWISE_COLUMNS = ["dataset", "judge", "mode", "criterion", "n", "partial_r", "partial_r_lo", "partial_r_hi",
                     "status"]
REPEAT_COLUMNS = ["judge", "mode", "strategy", "n_units", "k", "fleiss_kappa", "kappa_lo", "kappa_hi",
                  "agreement_all", "status"]


# ---------------------------------------------------------------------------------------------- small statistics

_WORD = re.compile(r"\w+", re.UNICODE)


def word_count(text) -> int:
    """Words of a text (runs of letters/digits): the length every view compares."""
    return len(_WORD.findall(str(text or "")))


def wilson(k: float, n: int) -> tuple[float, float]:
    """Wilson score interval of k successes in n trials (95 %); NaN for n < MIN_UNITS."""
    return (math.nan, math.nan) if n < MIN_UNITS else wilson_interval(k, n)


@functools.lru_cache(maxsize=64)
def _draws(n: int, k: int, seed: int) -> np.ndarray:
    """k × n bootstrap multiplicities of n units (seeded; the same draws for every group of n units, read-only)."""
    if not n:
        return np.zeros((k, 0))
    idx = np.random.default_rng(seed).integers(0, n, size=(k, n))
    out = np.zeros((k, n))
    np.add.at(out, (np.repeat(np.arange(k), n), idx.ravel()), 1.0)
    out.flags.writeable = False
    return out


def _interval(boots: np.ndarray, n: int, ci: float = 0.95) -> tuple[float, float]:
    b = boots[np.isfinite(boots)]
    if n < MIN_UNITS or not len(b):
        return math.nan, math.nan
    lo, hi = np.percentile(b, [100 * (1 - ci) / 2, 100 * (1 + ci) / 2])
    return float(lo), float(hi)


def bootstrap_mean(values, k: int = 1000, seed: int = 0) -> tuple[float, float, float]:
    """(mean, lo, hi) of per-unit values in [0, 1] with a percentile bootstrap interval over units (Wilson's with
    the units as trials where every resample is alike); NaN below MIN_UNITS."""
    x = np.asarray(values, float)
    x = x[np.isfinite(x)]
    if len(x) < MIN_UNITS:
        return (float(x.mean()) if len(x) else math.nan), math.nan, math.nan
    c = _draws(len(x), k, seed)
    lo, hi = _interval(c @ x / len(x), len(x))
    if hi - lo < 1e-12:  # every unit alike (e.g. always the first): no spread to resample, so Wilson's interval
        lo, hi = wilson(float(x.sum()), len(x))  # of the units as trials, never a zero-width one
    return float(x.mean()), lo, hi


# ---------------------------------------------------------------------------------------------- pairs

def pair_lengths(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per pair (dhp.datasets.llmbar's table): subset, item_id, label, words_1, words_2, longer ("1", "2", or ""
    for equal lengths) — numbers only, no text."""
    w1, w2 = pairs["output_1"].map(word_count), pairs["output_2"].map(word_count)
    longer = np.where(w1 > w2, "1", np.where(w2 > w1, "2", ""))
    return pd.DataFrame({"subset": pairs["subset"].astype(str), "item_id": pairs["item_id"].astype(str),
                         "label": pairs["label"].astype(str), "words_1": w1.astype(int), "words_2": w2.astype(int),
                         "longer": longer})


def pair_units(verdicts: pd.DataFrame) -> pd.DataFrame:
    """One row per judge × mode × strategy × subset × item: v12, v21 (None when missing), label, protocol and the
    leaderboard strategy (view_strategy: a live ``llmbar:X`` on upstream's template is "X", the recorded judges')."""
    cols = ["judge", "mode", "strategy", "subset", "item_id", "order", "verdict", "label"]
    v = verdicts[cols].astype({c: str for c in cols if c != "verdict"})
    v = v.assign(source=verdicts["source"].astype(str).to_numpy() if "source" in verdicts.columns else "")
    # the protocol of each (strategy, source, judge) once: 62k rows share a few hundred
    combos = v[["strategy", "source", "judge"]].drop_duplicates()
    combos["protocol"] = [protocol_of(s, src, j) for s, src, j in combos.itertuples(index=False)]
    v = v.merge(combos, on=["strategy", "source", "judge"], how="left")
    v["verdict"] = v["verdict"].astype(object).where(v["verdict"].notna(), None)
    keys = ["judge", "mode", "strategy", "protocol", "subset", "item_id"]
    v = v.drop_duplicates([*keys, "order"], keep="last")
    w = v.set_index([*keys, "order"])["verdict"].unstack("order")
    w = w.reindex(columns=["12", "21"]).rename(columns={"12": "v12", "21": "v21"})
    w = w.join(v.groupby(keys, sort=False)["label"].first()).reset_index()
    vs = w[["strategy", "protocol"]].drop_duplicates()
    vs["view_strategy"] = [view_strategy(s, p) for s, p in vs.itertuples(index=False)]
    w = w.merge(vs, on=["strategy", "protocol"], how="left")
    for c in ("v12", "v21"):
        w[c] = w[c].astype(object).where(w[c].notna(), None)
    w.columns.name = None
    return w.reset_index(drop=True)


def first_values(u: pd.DataFrame) -> np.ndarray:
    """Per pair with both verdicts: the share of its two verdicts for the output shown first (0, ½, 1)."""
    return ((u["v12"] == "1").astype(float) + (u["v21"] == "2").astype(float)).to_numpy() / 2.0


def both_orders(u: pd.DataFrame) -> pd.Series:
    return u["v12"].notna() & u["v21"].notna()


def _with_pooled(units: pd.DataFrame) -> pd.DataFrame:
    """``units`` plus their LLMBar subsets again under the pooled scope LLMBAR_SCOPE (the 419 pairs)."""
    mine = units[units["subset"].isin(LLMBAR_SUBSETS)]
    return pd.concat([units, mine.assign(subset=LLMBAR_SCOPE)], ignore_index=True)


def position_table(verdicts: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """The position view of every judge × mode × strategy × subset (and the pooled LLMBar scope): POSITION_COLUMNS."""
    units = _with_pooled(pair_units(verdicts))
    rows = []
    for key, g in units.groupby(["judge", "mode", "strategy", "protocol", "subset"], sort=True):
        both = g[both_orders(g)]
        nb = len(both)
        first, flo, fhi = bootstrap_mean(first_values(both), n_boot, seed) if nb else (math.nan,) * 3
        flips = int((both["v12"] != both["v21"]).sum())
        equal = int((g["v12"].fillna("<none>") == g["v21"].fillna("<none>")).sum())
        few = nb < MIN_UNITS
        rows.append({**dict(zip(["judge", "mode", "strategy", "protocol", "subset"], key)), "n_pairs": len(g),
                     "n_both": nb, "prefer_first": math.nan if few else first, "prefer_first_lo": flo,
                     "prefer_first_hi": fhi, "flip_rate": math.nan if few else flips / nb,
                     **dict(zip(("flip_rate_lo", "flip_rate_hi"), wilson(flips, nb))),
                     "equal_llmbar": equal / len(g) if len(g) else math.nan, "equal_count": equal,
                     "status": TOO_FEW if few else "ok"})
    return pd.DataFrame(rows, columns=POSITION_COLUMNS)


# ---------------------------------------------------------------------------------------------- length

def _length_units(verdicts: pd.DataFrame, lengths: pd.DataFrame) -> pd.DataFrame:
    """pair_units on pairs of unequal length with a verdict in both orders, with words_1, words_2, longer,
    gold_longer and prefers_longer (the share of its two verdicts for the longer output)."""
    u = pair_units(verdicts)
    u = u[both_orders(u)].merge(lengths[["subset", "item_id", "words_1", "words_2", "longer"]], on=["subset", "item_id"],
                          how="inner")
    u = u[u["longer"] != ""].copy()
    u["gold_longer"] = u["label"].astype(str) == u["longer"]
    u["prefers_longer"] = ((u["v12"] == u["longer"]).astype(float) + (u["v21"] == u["longer"]).astype(float)) / 2
    return u


def logistic_length(u: pd.DataFrame) -> tuple[float, float, float, int]:
    """(coefficient, lo, hi, verdicts) of log(words₁/words₂) in the logistic model P(verdict "1") ~ gold (±1) +
    shown first (±1: output_1 first) + log length ratio, fitted by maximum likelihood (Newton–Raphson, the
    textbook IRLS: no penalty) on every verdict "1"/"2" of the pairs ``u`` (pair_units + lengths), with a
    pair-clustered sandwich 95 % Wald interval. NaN when fewer than MIN_UNITS pairs, when the verdicts are all
    one value, or when the label or the order separates them (no finite maximum)."""
    x = np.log((u["words_1"].to_numpy(float) + 1) / (u["words_2"].to_numpy(float) + 1))
    gold = np.where(u["label"].astype(str).to_numpy() == "1", 1.0, -1.0)
    parts = []
    for order, col, shown in (("12", "v12", 1.0), ("21", "v21", -1.0)):
        v = u[col].to_numpy(object)
        ok = (v == "1") | (v == "2")
        parts.append((np.flatnonzero(ok), gold[ok], np.full(ok.sum(), shown), x[ok], (v[ok] == "1").astype(float)))
    groups, g, o, lx, y = (np.concatenate(c) for c in zip(*parts))
    nan = (math.nan, math.nan, math.nan, len(y))
    if len(u) < MIN_UNITS or not len(y) or y.min() == y.max():
        return nan
    Z = np.c_[np.ones(len(y)), g, o, lx]
    beta = np.zeros(Z.shape[1])
    for _ in range(50):
        p = 1 / (1 + np.exp(-Z @ beta))
        H = (Z * (p * (1 - p))[:, None]).T @ Z  # the information matrix
        try:
            step = np.linalg.solve(H, Z.T @ (y - p))
        except np.linalg.LinAlgError:
            return nan
        beta = beta + step
        if not np.isfinite(beta).all() or np.abs(beta).max() > 30:  # separation: the likelihood has no maximum
            return nan
        if np.abs(step).max() < 1e-10:
            break
    else:
        return nan
    p = 1 / (1 + np.exp(-Z @ beta))
    H = (Z * (p * (1 - p))[:, None]).T @ Z
    per_pair = np.zeros((len(u), Z.shape[1]))
    np.add.at(per_pair, groups, Z * (y - p)[:, None])  # the pair's two verdicts are one cluster
    try:
        Hinv = np.linalg.inv(H)
    except np.linalg.LinAlgError:
        return nan
    se = float(np.sqrt(max((Hinv @ (per_pair.T @ per_pair) @ Hinv)[3, 3], 0.0)))
    coef = float(beta[3])
    if not math.isfinite(se) or se == 0:
        return nan
    return coef, coef - 1.959963984540054 * se, coef + 1.959963984540054 * se, len(y)


def length_table(verdicts: pd.DataFrame, lengths: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """The observed length view of every judge × mode × strategy × subset whose pairs have lengths (and the pooled
    LLMBar scope): LENGTH_COLUMNS."""
    u = _length_units(verdicts, lengths)
    if u.empty:
        return pd.DataFrame(columns=LENGTH_COLUMNS)
    u = _with_pooled(u)
    rows = []
    for key, g in u.groupby(["judge", "mode", "strategy", "protocol", "subset"], sort=True):
        gl, gs = g[g["gold_longer"]], g[~g["gold_longer"]]
        a, alo, ahi = bootstrap_mean(gl["prefers_longer"], n_boot, seed)
        b, blo, bhi = bootstrap_mean(gs["prefers_longer"], n_boot, seed + 1)
        # whatever the gold says: the share alpaca_eval calls "proba. prefer longer" (MT-Bench's verbosity number)
        c, clo_, chi_ = bootstrap_mean(g["prefers_longer"], n_boot, seed + 2)
        few = len(gl) < MIN_UNITS or len(gs) < MIN_UNITS
        bias, lo, hi = _length_bias(g, n_boot, seed)
        if few:  # no value, so no interval either
            lo = hi = math.nan
        elif math.isfinite(bias) and lo == hi:  # every pair alike (control:first: 0.5 on each): no bootstrap spread
            lo, hi = mover_sum(a, (alo, ahi), b, (blo, bhi))
        coef, clo, chi, nv = logistic_length(g)
        rows.append({**dict(zip(["judge", "mode", "strategy", "protocol", "subset"], key)),
                     "n_gold_longer": len(gl), "p_longer_gold_longer": a, "p_longer_gold_longer_lo": alo,
                     "p_longer_gold_longer_hi": ahi, "n_gold_shorter": len(gs), "p_longer_gold_shorter": b,
                     "p_longer_gold_shorter_lo": blo, "p_longer_gold_shorter_hi": bhi,
                     "p_longer": c, "p_longer_lo": clo_, "p_longer_hi": chi_,
                     "length_bias": math.nan if few else bias, "length_bias_lo": lo, "length_bias_hi": hi,
                     "n_verdicts": nv, "length_coef": coef, "length_coef_lo": clo, "length_coef_hi": chi,
                     "status": TOO_FEW if few else "ok"})
    return pd.DataFrame(rows, columns=LENGTH_COLUMNS)


def length_bias_of(values: np.ndarray, gold_longer: np.ndarray, w: np.ndarray | None = None) -> np.ndarray | float:
    """P(longer | gold longer) + P(longer | gold shorter) − 1 of per-pair values, or per draw of weights ``w``
    (k × n bootstrap multiplicities)."""
    gl = np.asarray(gold_longer, bool)
    x = np.asarray(values, float)
    if w is None:
        if not gl.any() or gl.all():
            return math.nan
        return float(x[gl].mean() + x[~gl].mean() - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = (w[:, gl] @ x[gl]) / w[:, gl].sum(axis=1)
        b = (w[:, ~gl] @ x[~gl]) / w[:, ~gl].sum(axis=1)
    return a + b - 1


def mover_sum(a: float, a_ci: tuple[float, float], b: float, b_ci: tuple[float, float]) -> tuple[float, float]:
    """Interval of a + b - 1 from the intervals of a and b (MOVER: Zou & Donner 2008; Newcombe's 1998 hybrid score
    interval of a difference, for a sum): where the bootstrap of the pairs has no spread at all, the two Wilson
    intervals still have width. Clipped to the measure's range [-1, 1]."""
    if not all(math.isfinite(x) for x in (a, b, *a_ci, *b_ci)):  # (max(-1, nan) would read -1)
        return math.nan, math.nan
    s = a + b - 1
    lo = s - math.hypot(a - a_ci[0], b - b_ci[0])
    hi = s + math.hypot(a_ci[1] - a, b_ci[1] - b)
    return max(-1.0, lo), min(1.0, hi)


def _length_bias(g: pd.DataFrame, k: int, seed: int) -> tuple[float, float, float]:
    x, gl = g["prefers_longer"].to_numpy(float), g["gold_longer"].to_numpy(bool)
    value = length_bias_of(x, gl)
    if len(g) < MIN_UNITS:
        return value, math.nan, math.nan
    return (value, *_interval(length_bias_of(x, gl, _draws(len(g), k, seed)), len(g)))


# ---------------------------------------------------------------------------------------------- planted cues

def cue_table(cued: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """The planted-cue view: ``cued`` holds live verdict rows with a ``cue`` column ("none": the plain pair) and
    ``cued_output`` (the output that carries the cue, "1"/"2"). Per judge × mode × strategy × cue × order (and
    "both"): robustness (verdict equal to the plain pair's verdict in the same order) and toward_cue (verdict moved
    to the cued output, from another verdict), over the (pair, order) runs with a verdict in both; Wilson intervals."""
    plain = cued[cued["cue"] == "none"].set_index(["judge", "mode", "strategy", "item_id", "order"])["verdict"]
    rows = []
    rest = cued[cued["cue"] != "none"]
    for key, g in rest.groupby(["judge", "mode", "strategy", "cue"], sort=True):
        base = plain.reindex(pd.MultiIndex.from_frame(g[["judge", "mode", "strategy", "item_id", "order"]])).to_numpy()
        t = g.assign(base=base)
        t = t[t["verdict"].notna() & t["base"].notna()]
        for order, o in [*t.groupby("order", sort=True), ("both", t)]:
            n = len(o)
            same = int((o["verdict"] == o["base"]).sum())
            toward = int(((o["verdict"] == o["cued_output"]) & (o["base"] != o["cued_output"])).sum())
            few = n < MIN_UNITS
            rows.append({**dict(zip(["judge", "mode", "strategy", "cue"], key)), "order": order, "n": n,
                         "robustness": math.nan if few else same / n,
                         **dict(zip(("robustness_lo", "robustness_hi"), wilson(same, n))),
                         "toward_cue": math.nan if few else toward / n,
                         **dict(zip(("toward_cue_lo", "toward_cue_hi"), wilson(toward, n))),
                         "status": TOO_FEW if few else "ok"})
    return pd.DataFrame(rows, columns=CUE_COLUMNS)


# ---------------------------------------------------------------------------------------------- baselines

def baseline_verdicts(lengths: pd.DataFrame, strategy: str) -> pd.DataFrame:
    """Verdict rows of the baselines "always the first" and "always the longer" on the pairs of ``lengths``, in
    both orders, under ``strategy`` (so they share its views): VERDICT-like rows (judge, mode, item_id, subset,
    strategy, order, verdict, label, source)."""
    rows = []
    for r in lengths.itertuples(index=False):
        for order in ("12", "21"):
            common = {"mode": BASELINE_MODE, "item_id": r.item_id, "subset": r.subset, "strategy": strategy,
                      "order": order, "label": r.label, "source": "", "failure": ""}
            rows.append({**common, "judge": "baseline:always_first", "verdict": FIRST[order]})
            rows.append({**common, "judge": "baseline:always_longer", "verdict": r.longer or None,
                         "failure": "" if r.longer else "equal lengths"})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- pointwise length

def partial_correlation_given(score, length, human) -> float:
    """Pearson correlation of ``score`` and ``length`` given ``human``: of their residuals after a least-squares
    line on ``human``. NaN when a residual is constant or fewer than 3 finite triples."""
    s, l, h = (np.asarray(a, float) for a in (score, length, human))
    ok = np.isfinite(s) & np.isfinite(l) & np.isfinite(h)
    s, l, h = s[ok], l[ok], h[ok]
    if len(s) < 3:
        return math.nan
    A = np.c_[np.ones(len(h)), h]
    rs = s - A @ np.linalg.lstsq(A, s, rcond=None)[0]
    rl = l - A @ np.linalg.lstsq(A, l, rcond=None)[0]
    den = math.sqrt(float(rs @ rs) * float(rl @ rl))
    return float(rs @ rl / den) if den > 1e-12 else math.nan


def _weighted_partial(s, l, h, w) -> np.ndarray:
    """partial_correlation_given per draw of weights w (k × n), from the weighted pairwise correlations."""
    rsl, rsh, rlh = weighted_pearson(s, l, w), weighted_pearson(s, h, w), weighted_pearson(l, h, w)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (rsl - rsh * rlh) / np.sqrt((1 - rsh ** 2) * (1 - rlh ** 2))


def pointwise_length_table(rows: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Per dataset × judge × mode × criterion: the partial correlation of the judge's score with the output's
    length given the human score (``rows``: dataset, judge, mode, criterion, unit, score, length, human), with a
    bootstrap interval over outputs: POINTWISE_COLUMNS."""
    out = []
    for key, g in rows.groupby(["dataset", "judge", "mode", "criterion"], sort=True):
        g = g[np.isfinite(g[["score", "length", "human"]].astype(float)).all(axis=1)]
        n = len(g)
        s, l, h = (g[c].to_numpy(float) for c in ("score", "length", "human"))
        r = partial_correlation_given(s, l, h)
        lo = hi = math.nan
        if n >= MIN_UNITS and math.isfinite(r):
            lo, hi = _interval(_weighted_partial(s, l, h, _draws(n, n_boot, seed)), n)
        status = ("no usable scores" if n == 0 else TOO_FEW if n < MIN_UNITS
                  else "ok" if math.isfinite(r) else "undefined (constant scores)")
        out.append({**dict(zip(["dataset", "judge", "mode", "criterion"], key)), "n": n,
                    "partial_r": r if n >= MIN_UNITS else math.nan, "partial_r_lo": lo, "partial_r_hi": hi,
                    "status": status})
    return pd.DataFrame(out, columns=POINTWISE_COLUMNS)


# ---------------------------------------------------------------------------------------------- repeatability

def fleiss_kappa(counts) -> float:
    """Fleiss' κ of a units × categories matrix of counts (each unit rated by the same number of raters): (P̄ − P̄ₑ)
    / (1 − P̄ₑ) (Fleiss 1971). NaN with fewer than 2 raters per unit or when every rating is one category."""
    c = np.asarray(counts, float)
    if c.ndim != 2 or not len(c):
        return math.nan
    m = c.sum(axis=1)
    if m.min() != m.max() or m[0] < 2:
        return math.nan
    m = m[0]
    p_j = c.sum(axis=0) / c.sum()
    P_i = ((c * c).sum(axis=1) - m) / (m * (m - 1))
    pe = float((p_j ** 2).sum())
    return math.nan if pe >= 1 - 1e-12 else float((P_i.mean() - pe) / (1 - pe))


def repeatability_table(repeats: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Fleiss' κ of repeated verdicts (``repeats``: judge, mode, strategy, item_id, order, repeat, verdict; a
    missing verdict is its own category "none") per judge × mode × strategy; units: (item, order); bootstrap
    interval over units; agreement_all: the share of units whose k verdicts are all equal."""
    out = []
    for key, g in repeats.groupby(["judge", "mode", "strategy"], sort=True):
        v = g.assign(verdict=g["verdict"].astype(object).where(g["verdict"].notna(), "none"))
        c = pd.crosstab([v["item_id"], v["order"]], v["verdict"])
        k = int(c.sum(axis=1).max()) if len(c) else 0
        c = c[c.sum(axis=1) == k]
        kappa = fleiss_kappa(c.to_numpy())
        lo = hi = math.nan
        if len(c) >= MIN_UNITS and math.isfinite(kappa):
            arr = c.to_numpy(float)
            idx = np.random.default_rng(seed).integers(0, len(arr), size=(n_boot, len(arr)))
            lo, hi = _interval(np.array([fleiss_kappa(arr[i]) for i in idx]), len(arr))
        status = (TOO_FEW if len(c) < MIN_UNITS else "ok" if math.isfinite(kappa)
                  else "undefined (every verdict the same category)" if k >= 2 else "one repeat only")
        out.append({**dict(zip(["judge", "mode", "strategy"], key)), "n_units": len(c), "k": k,
                    "fleiss_kappa": kappa if len(c) >= MIN_UNITS else math.nan, "kappa_lo": lo, "kappa_hi": hi,
                    "agreement_all": float((c.max(axis=1) == k).mean()) if len(c) else math.nan,
                    "status": status})
    return pd.DataFrame(out, columns=REPEAT_COLUMNS)
