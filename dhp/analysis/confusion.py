"""Criteria-confusion statistics (the perturbation-attack method of Hu et al., 2024).

Input is a tidy long table of judge scores with columns
``item_id, attack, aspect, description_type, variant, score``: ``variant`` is "original" or
"perturbed" and ``score`` is a float (NaN allowed, e.g. an unparsable answer). Original rows may carry
the attack they belong to, or leave ``attack`` empty/NaN when one original score serves every attack.

A judge that understands the criteria should lower its score on the cells in S_T (attack hurts the
aspect) and keep it level on the cells in S_F (attack leaves the aspect alone). We test the first with a
one-sided Wilcoxon signed-rank test and the second with a TOST equivalence test on the mean drop (the
paper reports mean drops only, §5; the tests are the workbench's).

Multiple testing: every decision (a significant drop, on S_T or S_F; an invariant cell) is taken on a p value
adjusted within its family, and the families are the same for S_T and S_F: per description type, the
directional tests of all its attack x aspect cells form one family and the equivalence tests of all its
cells another (Holm by default, Benjamini-Hochberg with adjust_method="bh"). Neither set is judged on raw
p while the other is adjusted.
`confusion_tables` runs it all on a run folder's scores, one judge × mode × instruction at a time (the
criteria_confusion method's analyze stage, dhp.methods.criteria_confusion). Everything here is plain
pandas/numpy/scipy: tables in, tables out; nothing calls a model or reads a file.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dhp.errors import DHPError
from dhp.stats.combine import discernment_score
from dhp.stats.multitest import ADJUST_METHODS, adjust
from dhp.stats.wilcoxon import wilcoxon_greater_many
from dhp.lazy import lazy_module

stats = lazy_module("scipy.stats")  # imported when first used (dhp.lazy)

__all__ = ["ADJUST_METHODS", "adjust", "aspect_correlations", "confusion_cells", "confusion_summary",
           "confusion_tables", "directional_test", "equivalence_test", "mean_drop_table", "paired_drops"]

#: Columns of the aspect scores table (dhp.judging.aspects) the statistics need.
REQUIRED_ASPECT_COLUMNS = ["item_id", "attack", "aspect", "description_type", "variant", "score"]
CELL_KEYS = ["attack", "aspect", "description_type"]
#: What tells apart the runs a run folder may hold: each is analysed on its own (scores asked with and without
#: the mitigation are never pooled, and neither are two judges or two modes).
RUN_KEYS = ["judge", "mode", "instruction"]
CELL_COLUMNS = ["attack", "aspect", "description_type", "set", "mean_drop", "n_pairs", "p_directional",
                "p_directional_adj", "D", "significant_drop", "p_equivalence", "p_equivalence_adj",
                "equivalence_method", "equivalence_note", "invariant"]
SUMMARY_COLUMNS = ["description_type", "n_S_T", "n_S_F", "n_SF_tested", "share_ST_D_gt_1", "share_ST_dropped",
                   "share_SF_invariant", "share_SF_dropped", "confusion_index"]
CORRELATION_COLUMNS = ["description_type", "aspect", "other_aspect", "pearson_r"]
ATTACK_ORDER = (
    "repetition", "passive_voice", "inversion", "improper_connective", "sentence_exchange",
    "incorrect_verb_form", "word_exchange", "spelling_mistake", "uncommon_phrase", "complex_sentence",
    "abbreviation", "hypernym", "sentence_deletion", "complement", "continuation", "different_entity",
    "conflicting_fact", "negation",
)
#: The equivalence test needs this many pairs: with fewer, no test of the drop (t, sign or signed-rank)
#: can reach p < 0.05, and a "shown invariant" from 2 or 3 pairs would be noise.
MIN_PAIRS_EQUIVALENCE = 5
ASPECT_ORDER = (
    "fluency", "coherence", "grammaticality", "simplicity", "readability", "faithfulness",
    "non_contradiction", "non_hallucination", "informativeness", "adequacy", "overall_quality",
)


def _require(table: pd.DataFrame, columns, what: str) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise DHPError(f"The {what} table lacks column(s) {', '.join(missing)}.",
                       f"provide a table with columns {', '.join(columns)}.")


def _ordered(values, preferred) -> list:
    present = list(dict.fromkeys(values))
    return [v for v in preferred if v in present] + sorted(v for v in present if v not in preferred)


def paired_drops(scores: pd.DataFrame) -> pd.DataFrame:
    """Pair each perturbed score with its original score.

    Output columns: item_id, attack, aspect, description_type, original, perturbed, drop
    (drop = original - perturbed, so a positive drop means the attack lowered the score).
    Repeated rows for the same key (e.g. several samples) are averaged first, ignoring NaN.
    Pairs where either side is NaN are dropped. Originals with an empty/NaN attack are shared by
    all attacks of the same item, aspect and description type. An optional ``instruction`` column
    (dhp.judging.aspects) must hold one value: scores asked with and without the mitigation are not pooled.
    """
    _require(scores, REQUIRED_ASPECT_COLUMNS, "scores")
    if "instruction" in scores and scores["instruction"].nunique() > 1:
        raise DHPError(f"The scores mix prompt instructions {sorted(scores['instruction'].unique())}.",
                       "analyse each instruction's scores on their own (e.g. scores[scores.instruction == 'paper']).")
    bad = set(scores["variant"].dropna().unique()) - {"original", "perturbed"}
    if bad:
        raise DHPError(f"Unknown variant value(s): {sorted(bad)}.", 'use only "original" and "perturbed".')
    df = scores[REQUIRED_ASPECT_COLUMNS].copy()
    df["score"] = pd.to_numeric(df["score"], errors="coerce")
    base = ["item_id", "aspect", "description_type"]
    pert = (df[df["variant"] == "perturbed"].groupby(base + ["attack"], dropna=False, sort=False)["score"]
            .mean().rename("perturbed").reset_index())
    orig = df[df["variant"] == "original"]
    shared = orig["attack"].isna() | (orig["attack"].astype(str).str.strip() == "")
    per_attack = (orig[~shared].groupby(base + ["attack"], sort=False)["score"].mean()
                  .rename("original").reset_index())
    out = pert.merge(per_attack, on=base + ["attack"], how="left")
    if shared.any():
        common = orig[shared].groupby(base, sort=False)["score"].mean().rename("original_shared").reset_index()
        out = out.merge(common, on=base, how="left")
        out["original"] = out["original"].fillna(out.pop("original_shared"))
    out = out.dropna(subset=["original", "perturbed"])
    out["drop"] = out["original"] - out["perturbed"]
    cols = ["item_id", "attack", "aspect", "description_type", "original", "perturbed", "drop"]
    return out[cols].reset_index(drop=True)


def directional_test(drops: pd.DataFrame) -> pd.DataFrame:
    """One-sided Wilcoxon signed-rank test that the attack lowers the score, per cell.

    Input: output of `paired_drops`. Output, one row per (attack, aspect, description_type):
    attack, aspect, description_type, n_pairs, mean_drop, p_directional, D.
    The test is on original - perturbed with alternative="greater" and zero_method="wilcox"
    (zero differences are discarded). p_directional is 1.0 when there are no pairs or every
    difference is zero. D = log(p) / log(0.05) of this one test, unadjusted, so D > 1 exactly when p < 0.05
    and D = 0 when p = 1 (`confusion_cells` recomputes D from the adjusted p).
    """
    _require(drops, CELL_KEYS + ["drop"], "drops")
    keys, cells = [], []
    for key, grp in drops.groupby(CELL_KEYS, sort=False):
        d = grp["drop"].to_numpy(dtype=float)
        keys.append(key)
        cells.append(d[~np.isnan(d)])
    # every cell is one row of a single test batch (rows padded to the longest cell, the padding masked)
    width = max((len(d) for d in cells), default=0)
    dm, ok = np.zeros((len(cells), width)), np.zeros((len(cells), width), bool)
    for i, d in enumerate(cells):
        dm[i, : len(d)], ok[i, : len(d)] = d, True
    tests = wilcoxon_greater_many(dm, ok, zero_method="wilcox")
    p = np.where(tests.n_pairs == 0, 1.0, tests.p)  # no pair: no evidence of a drop
    rows = [(*key, int(d.size), float(d.mean()) if d.size else np.nan, float(pi)) for key, d, pi in zip(keys, cells, p)]
    out = pd.DataFrame(rows, columns=CELL_KEYS + ["n_pairs", "mean_drop", "p_directional"])
    out["D"] = discernment_score(out["p_directional"].to_numpy(dtype=float))
    return out


def _tost(d: np.ndarray, delta: float) -> tuple[float, str, str]:
    """(p, method, note) of the equivalence test on drops ``d``; p NaN with the note saying why."""
    if d.size < MIN_PAIRS_EQUIVALENCE:
        return np.nan, "", f"{d.size} pair(s); the equivalence test needs at least {MIN_PAIRS_EQUIVALENCE}"
    if np.ptp(d) == 0:
        # Equal drops: the t statistic is 0/0 and says nothing. What they do show is that every pair
        # landed inside (or outside) the margin: the exact sign test of "the median drop lies outside the
        # margin" gives p = 0.5**n (never 0; 1/32 at n = 5).
        return (0.5 ** d.size if abs(d[0]) < delta else 1.0), "sign (equal drops)", ""
    p_low = stats.ttest_1samp(d, -delta, alternative="greater").pvalue
    p_high = stats.ttest_1samp(d, delta, alternative="less").pvalue
    return float(max(p_low, p_high)), "t (TOST)", ""


def equivalence_test(drops: pd.DataFrame, delta: float = 0.2, alpha: float = 0.05) -> pd.DataFrame:
    """TOST equivalence test that the mean drop lies inside (-delta, +delta), per cell.

    Two one-sided one-sample t-tests: mean > -delta and mean < +delta; p_equivalence is the larger
    of their p values. Output, one row per (attack, aspect, description_type):
    attack, aspect, description_type, n_pairs, mean_drop, p_equivalence, equivalence_method,
    equivalence_note, invariant (invariant = unadjusted p_equivalence < alpha; False when p is NaN;
    confusion_cells decides on the adjusted p).
    Edge cases:
    - fewer than MIN_PAIRS_EQUIVALENCE (5) pairs: p_equivalence NaN, equivalence_note says so;
    - all drops equal (zero variance, n >= 5): the t test is undefined (0/0), so no p from it. n equal drops
      inside the margin are n out of n pairs inside it, which the exact sign test of H0 "the median drop
      is outside (-delta, delta)" turns into p = 0.5**n (1/32 at n = 5, smaller only with more pairs);
      equal drops on or outside the margin give p = 1. equivalence_method says which test gave p:
      "t (TOST)" or "sign (equal drops)".
    """
    _require(drops, CELL_KEYS + ["drop"], "drops")
    if not delta > 0:
        raise DHPError(f"delta must be positive, got {delta}.", "pass a positive equivalence margin, e.g. delta=0.2.")
    rows = []
    for key, grp in drops.groupby(CELL_KEYS, sort=False):
        d = grp["drop"].to_numpy(dtype=float)
        d = d[~np.isnan(d)]
        rows.append((*key, int(d.size), float(d.mean()) if d.size else np.nan, *_tost(d, delta)))
    out = pd.DataFrame(rows, columns=CELL_KEYS + ["n_pairs", "mean_drop", "p_equivalence", "equivalence_method",
                                                  "equivalence_note"])
    out["invariant"] = (out["p_equivalence"] < alpha).fillna(False).astype(bool)
    return out


def confusion_cells(scores: pd.DataFrame, expectations: pd.DataFrame, delta: float = 0.2,
                    alpha: float = 0.05, adjust_method: str = "holm") -> pd.DataFrame:
    """All per-cell statistics of the method in one table.

    `expectations` needs attack, aspect and set (as from `load_expectations`); cells absent from it
    get set "excluded". Output, one row per (attack, aspect, description_type):
    attack, aspect, description_type, set, mean_drop, n_pairs, p_directional, p_directional_adj, D,
    significant_drop, p_equivalence, p_equivalence_adj, equivalence_method, equivalence_note, invariant.
    Both p values are adjusted (holm or bh) within one family per description type: the directional tests
    of all its cells (S_T, S_F and excluded alike) and, separately, the equivalence tests of all its cells
    with a p value. Every decision reads the adjusted p: significant_drop = p_directional_adj < alpha (the
    S_T hits and the S_F drops alike), D = log(p_directional_adj) / log(0.05) (so D > 1 exactly when the
    adjusted p < 0.05), invariant = p_equivalence_adj < alpha (False where the test could not be done:
    equivalence_note says why).
    A judge without a single usable original/perturbed pair gets no cells (an empty table), not an error:
    confusion_summary then reports its description types with NaN shares.
    """
    _require(expectations, ["attack", "aspect", "set"], "expectations")
    cols = CELL_COLUMNS
    drops = paired_drops(scores)
    if drops.empty:
        return pd.DataFrame(columns=cols)
    direc = directional_test(drops).drop(columns="D")
    equiv = equivalence_test(drops, delta=delta, alpha=alpha)[
        CELL_KEYS + ["p_equivalence", "equivalence_method", "equivalence_note"]]
    cells = direc.merge(equiv, on=CELL_KEYS, how="left")
    exp = expectations[["attack", "aspect", "set"]].drop_duplicates(["attack", "aspect"])
    cells = cells.merge(exp, on=["attack", "aspect"], how="left")
    cells["set"] = cells["set"].fillna("excluded")
    cells["p_directional_adj"] = np.nan
    cells["p_equivalence_adj"] = np.nan
    for _, idx in cells.groupby("description_type", sort=False).groups.items():
        for raw in ("p_directional", "p_equivalence"):
            cells.loc[idx, f"{raw}_adj"] = adjust(cells.loc[idx, raw].to_numpy(dtype=float), adjust_method)
    cells["D"] = discernment_score(cells["p_directional_adj"].to_numpy(dtype=float))
    cells["significant_drop"] = (cells["p_directional_adj"] < alpha).astype(bool)
    cells["invariant"] = (cells["p_equivalence_adj"] < alpha).astype(bool)
    return cells[cols].reset_index(drop=True)


def confusion_summary(cells: pd.DataFrame, description_types=()) -> pd.DataFrame:
    """Per description_type summary of `confusion_cells` (plus a row for each of ``description_types`` that
    has no cell, i.e. no usable pair: counts 0, shares NaN).

    Output columns: description_type, n_S_T, n_S_F, n_SF_tested (S_F cells with enough pairs for the
    equivalence test), share_ST_D_gt_1 (share of S_T cells with D > 1, i.e. adjusted p < 0.05),
    share_ST_dropped (share of S_T cells with a significant drop at alpha), share_SF_invariant (share of S_F
    cells shown invariant, among the n_SF_tested cells the test could be run on: NaN when none could, since
    "0 shown invariant" would read as a verdict on the judge), share_SF_dropped (share of S_F cells
    with a significant drop), confusion_index (significant drops on S_F divided by significant drops on S_T
    or S_F; NaN when there is none). All decisions read p values adjusted as `confusion_cells` says, the
    same for S_T and S_F. Shares are NaN for an empty set.
    """
    _require(cells, ["description_type", "set", "D", "significant_drop", "invariant"], "cells")
    cols = SUMMARY_COLUMNS
    rows = []
    groups = dict(list(cells.groupby("description_type", sort=False)))
    for dtype in [*groups, *[t for t in description_types if t not in groups]]:
        grp = groups.get(dtype, cells.iloc[:0])
        st, sf = grp[grp["set"] == "S_T"], grp[grp["set"] == "S_F"]
        sig_st, sig_sf = int(st["significant_drop"].sum()), int(sf["significant_drop"].sum())
        tested_sf = sf[sf["p_equivalence"].notna()] if "p_equivalence" in sf else sf
        rows.append({
            "description_type": dtype,
            "n_S_T": len(st),
            "n_S_F": len(sf),
            "n_SF_tested": len(tested_sf),
            "share_ST_D_gt_1": float((st["D"] > 1).mean()) if len(st) else np.nan,
            "share_ST_dropped": float(st["significant_drop"].mean()) if len(st) else np.nan,
            "share_SF_invariant": float(tested_sf["invariant"].mean()) if len(tested_sf) else np.nan,
            "share_SF_dropped": float(sf["significant_drop"].mean()) if len(sf) else np.nan,
            "confusion_index": sig_sf / (sig_st + sig_sf) if sig_st + sig_sf else np.nan,
        })
    return pd.DataFrame(rows, columns=cols)


def mean_drop_table(cells: pd.DataFrame, description_type: str = "detailed") -> pd.DataFrame:
    """Attack x aspect table of mean_drop for one description type (the layout of the paper's Table 4).

    Index: attack (paper order, unknown attacks last); columns: aspect (paper order); values: mean_drop.
    """
    _require(cells, CELL_KEYS + ["mean_drop"], "cells")
    sub = cells[cells["description_type"] == description_type]
    if sub.empty:
        raise DHPError(f"No cells for description_type {description_type!r}.",
                       f"choose one of: {', '.join(map(str, cells['description_type'].unique()))}.")
    table = sub.pivot_table(index="attack", columns="aspect", values="mean_drop", aggfunc="mean", dropna=False)
    table = table.reindex(index=_ordered(sub["attack"], ATTACK_ORDER), columns=_ordered(sub["aspect"], ASPECT_ORDER))
    table.columns.name, table.index.name = "aspect", "attack"
    return table


def aspect_correlations(scores: pd.DataFrame, description_type: str = "detailed") -> pd.DataFrame:
    """Aspect x aspect Pearson correlation of the judge's scores for one description type.

    Rows of the pivot are (item_id, variant, attack) and columns are aspects (paper order); repeated
    scores are averaged; correlations use pairwise-complete rows (pandas DataFrame.corr).
    """
    corr = _aspect_wide(scores, description_type).corr(method="pearson")
    corr.index.name, corr.columns.name = "aspect", "aspect"
    return corr


def _aspect_wide(scores: pd.DataFrame, description_type: str) -> pd.DataFrame:
    """One row per (item_id, variant, attack), one column per aspect (paper order): the mean score."""
    _require(scores, REQUIRED_ASPECT_COLUMNS, "scores")
    sub = scores[scores["description_type"] == description_type].copy()
    if sub.empty:
        raise DHPError(f"No scores for description_type {description_type!r}.",
                       f"choose one of: {', '.join(map(str, scores['description_type'].unique()))}.")
    sub["score"] = pd.to_numeric(sub["score"], errors="coerce")
    sub["attack"] = sub["attack"].fillna("")
    wide = sub.pivot_table(index=["item_id", "variant", "attack"], columns="aspect", values="score", aggfunc="mean")
    return wide.reindex(columns=_ordered(sub["aspect"], ASPECT_ORDER))


def _correlation_rows(scores: pd.DataFrame, description_type: str) -> pd.DataFrame:
    """`aspect_correlations` as a long table (CORRELATION_COLUMNS + n_texts: the texts both aspects scored)."""
    wide = _aspect_wide(scores, description_type)
    corr = wide.corr(method="pearson")
    seen = wide.notna().astype(int)
    both = seen.T @ seen  # texts with a score on both aspects: what each r rests on
    return pd.DataFrame([{"description_type": description_type, "aspect": a, "other_aspect": b,
                          "pearson_r": float(corr.loc[a, b]), "n_texts": int(both.loc[a, b])}
                         for a in corr.index for b in corr.columns], columns=[*CORRELATION_COLUMNS, "n_texts"])


def confusion_tables(scores: pd.DataFrame, expectations: pd.DataFrame, delta: float = 0.2, alpha: float = 0.05,
                     adjust_method: str = "holm") -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Cells, summary and inter-aspect correlations of every judge × mode × instruction in ``scores``.

    ``scores``: the aspect scores of a run folder (dhp.judging.aspects), which may hold several judges, modes and
    instructions: each (RUN_KEYS) is analysed on its own — `confusion_cells` (its description types each with
    their own adjustment family), `confusion_summary` (a description type without a usable pair gets NaN shares)
    and `aspect_correlations`. Several datasets of one judge × mode × instruction are pooled, as the paper
    merges its four tasks (App. B); an item is known by its dataset and item_id, so equal ids of two datasets
    are not paired. ``expectations``: attack, aspect, set (the paper's Table 19, dhp.datasets.criteria_hu2024).

    Returns (cells, summary, correlations) with columns RUN_KEYS + CELL_COLUMNS, RUN_KEYS + SUMMARY_COLUMNS and
    RUN_KEYS + CORRELATION_COLUMNS + n_texts (one row per ordered pair of aspects, the diagonal included;
    pearson_r is NaN where the two aspects share fewer than two texts with a score, or one of them is constant).
    """
    _require(scores, RUN_KEYS + REQUIRED_ASPECT_COLUMNS, "scores")
    keyed = scores.copy()
    if "dataset" in keyed:
        keyed["item_id"] = keyed["dataset"].astype(str) + "/" + keyed["item_id"].astype(str)
    cells, summary, correlations = [], [], []
    for key, grp in keyed.groupby(RUN_KEYS, sort=True):
        who = dict(zip(RUN_KEYS, key))
        dtypes = list(dict.fromkeys(grp["description_type"]))
        c = confusion_cells(grp, expectations, delta=delta, alpha=alpha, adjust_method=adjust_method)
        cells.append(c.assign(**who))
        summary.append(confusion_summary(c, description_types=dtypes).assign(**who))
        correlations += [_correlation_rows(grp, d).assign(**who) for d in dtypes]
    return (_stacked(cells, RUN_KEYS + CELL_COLUMNS), _stacked(summary, RUN_KEYS + SUMMARY_COLUMNS),
            _stacked(correlations, RUN_KEYS + CORRELATION_COLUMNS + ["n_texts"]))


def _stacked(parts: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=columns)
    return pd.concat(parts, ignore_index=True)[columns]
