"""The judge report card's rows (pure: tables in, rows out). Each method's ``card`` (dhp.methods) builds its rows
with the functions here from the result tables it wrote; dhp.methods.report_card stacks them for every judge ×
mode and adds a "not run" row for a method without a table — never a number.

The card is a tidy long table (CARD_COLUMNS), one row per judge × mode × method × measure × scope:

- judge, mode: the judge and its scoring mode;
- method: a registered method's name (dhp.methods: dhp, criteria_confusion, decompose_aggregate,
  dual_perspective, human_alignment, and any you register);
- measure: e.g. D_avg, D_min, control_D, null_fpr_avg_paper (dhp); share_ST_D_gt_1, share_SF_invariant,
  confusion_index (criteria_confusion); agreement, position_consistency (decompose_aggregate); kappa,
  local_accuracy (dual_perspective); spearman/kendall/pearson at summary or system level (human_alignment);
- scope: what the number is about (dataset, description type, subset/strategy, aspect, view/aspect);
- value, lo, hi: the number and its interval where the method gives one (NaN otherwise);
- n: items, cells, pairs or targets behind the number (NaN when the table does not say);
- judge_kind: "control", "baseline", "recorded" or "model" (dhp.controls.judge_kind), so no control or baseline
  is read as a model;
- status: "ok"; "no usable scores" (the method ran but the judge's replies gave no number: e.g. no LLMBar
  verdict in any order); "no significant drop" (a confusion index of 0/0); "too few pairs (< 5)" (no S_F cell
  had the 5 pairs the equivalence test needs); "no S_T cell" / "no S_F cell" (the aspects asked have none);
  or "not run".
"""

from __future__ import annotations

import math

import pandas as pd

from dhp.controls import judge_kind

CARD_COLUMNS = ["judge", "mode", "method", "measure", "scope", "value", "lo", "hi", "n", "status", "judge_kind"]


def card_row(judge, mode, method, measure, scope, value, lo=math.nan, hi=math.nan, n=math.nan,
             nan_status: str = "no usable scores") -> dict:
    """One card row; a NaN value gets ``nan_status`` (why there is no number) instead of "ok"."""
    value = float(value) if value is not None and pd.notna(value) else math.nan
    return {"judge": judge, "mode": mode, "method": method, "measure": measure, "scope": str(scope),
            "value": value, "lo": float(lo) if pd.notna(lo) else math.nan,
            "hi": float(hi) if pd.notna(hi) else math.nan, "n": float(n) if pd.notna(n) else math.nan,
            "status": "ok" if math.isfinite(value) else nan_status, "judge_kind": judge_kind(judge, mode)}


def not_run_row(judge: str, mode: str, method: str) -> dict:
    """The one row of a method that has no table (or no row) for this judge × mode: never a number."""
    return {**card_row(judge, mode, method, "", "", math.nan), "status": "not run"}


def _frame(rows: list[dict]) -> pd.DataFrame:
    return with_kind(pd.DataFrame(rows, columns=CARD_COLUMNS))


def with_kind(table: pd.DataFrame, judge: str = "judge", mode: str = "mode") -> pd.DataFrame:
    """``table`` with its ``judge_kind`` column (dhp.controls.judge_kind: control / baseline / recorded / model) filled
    from its judge and mode, so a control or a baseline is never read as a model."""
    return table.assign(judge_kind=[judge_kind(j, m) for j, m in zip(table[judge], table[mode])])


def dhp_rows(summary: pd.DataFrame, discernment: pd.DataFrame | None = None) -> pd.DataFrame:
    """DHP (summary.csv): D_avg, D_min (+ expert-weighted) with their bootstrap intervals, the negative control's D
    and the null false-positive rate of D_avg > 1, per dataset, for every judge × mode in the table. n: the items
    (the most any perturbation was tested on, from discernment.csv; NaN without it)."""
    items: dict = {}
    if discernment is not None and len(discernment):
        d = discernment[discernment["role"] == "perturbation"] if "role" in discernment.columns else discernment
        items = d.groupby(["dataset", "judge", "mode"])["n_items"].max().to_dict()
    rows = []
    for r in summary.to_dict("records"):
        judge, mode = r["judge"], r["mode"]
        n = items.get((r["dataset"], judge, mode), math.nan)
        for m in ("D_avg", "D_min", "D_avg_EW", "D_min_EW"):
            rows.append(card_row(judge, mode, "dhp", m, r["dataset"], r[m], r.get(f"{m}_lo"), r.get(f"{m}_hi"), n))
        rows.append(card_row(judge, mode, "dhp", "control_D", r["dataset"], r.get("control_D")))
        rows.append(card_row(judge, mode, "dhp", "null_fpr_avg_paper", r["dataset"], r.get("null_fpr_avg_paper"),
                             n=r.get("n_null")))
    return _frame(rows)


def confusion_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """Criteria confusion (confusion_summary.csv): share of S_T cells with D > 1 (n: the S_T cells), share of S_F
    cells shown invariant (n: the S_F cells the equivalence test could run on, n_SF_tested), confusion index, per
    description type — and per instruction: the scope of a run with the §6 mitigation is
    "<description type>/mitigated", so it sits next to the paper's setting instead of replacing it."""
    rows = []
    for r in summary.to_dict("records"):
        instruction = str(r.get("instruction") or "paper")
        scope = r["description_type"] if instruction == "paper" else f"{r['description_type']}/{instruction}"
        n_st, n_sf, n_tested = r["n_S_T"], r["n_S_F"], r.get("n_SF_tested", math.nan)
        # why a share is missing: no cell at all means no usable pair; cells of the other set mean the scores were
        # usable but this set was empty (the aspects asked) or, for invariance, no S_F cell had 5 pairs
        scored = n_st + n_sf > 0
        rows.append(card_row(r["judge"], r["mode"], "criteria_confusion", "share_ST_D_gt_1", scope,
                             r["share_ST_D_gt_1"], n=n_st,
                             nan_status="no S_T cell" if scored else "no usable scores"))
        rows.append(card_row(r["judge"], r["mode"], "criteria_confusion", "share_SF_invariant", scope,
                             r["share_SF_invariant"], n=n_tested,
                             nan_status="too few pairs (< 5)" if n_sf > 0 else "no S_F cell" if scored
                             else "no usable scores"))
        # the confusion index is 0/0 when no cell dropped significantly: undefined, though scores were usable
        # n: the cells both shares rest on (S_T cells and the S_F cells the equivalence test ran on)
        rows.append(card_row(r["judge"], r["mode"], "criteria_confusion", "confusion_index", scope,
                             r["confusion_index"], n=n_st + (n_tested if pd.notna(n_tested) else 0),
                             nan_status="no significant drop" if scored else "no usable scores"))
    return _frame(rows)


def agreement_rows(agreement: pd.DataFrame) -> pd.DataFrame:
    """Decompose and aggregate (pairwise_agreement.csv): agreement with the gold label and position consistency
    per subset × strategy."""
    # a miss counts against agreement, but with no verdict in any order there is nothing to agree: NaN
    return _frame([card_row(r["judge"], r["mode"], "decompose_aggregate", m, f"{r['subset']}/{r['strategy']}",
                            math.nan if r.get("no_verdict", 0) >= 2 * r["n"] else r[m], n=r["n"])
                   for r in agreement.to_dict("records") for m in ("agreement", "position_consistency")])


def dual_rows(kappa: pd.DataFrame | None, local: pd.DataFrame | None) -> pd.DataFrame:
    """Dual perspective (global_kappa.csv, local_accuracy.csv): global weighted κ and local adjacent accuracy per
    aspect."""
    rows = [_small_n(card_row(r["judge"], r["mode"], "dual_perspective", "kappa", r["aspect"], r["kappa"],
                              n=r.get("n"))) for r in ([] if kappa is None else kappa.to_dict("records"))]
    rows += [card_row(r["judge"], r["mode"], "dual_perspective", "local_accuracy", r["aspect"], r["accuracy"],
                      n=r.get("n_pairs")) for r in ([] if local is None else local.to_dict("records"))]
    return _frame(rows)


#: Below this many units a correlation (or κ) is shown as "n too small", not as a number to read: a correlation of
#: 2 systems is ±1 whatever the judge, and an average over 1 document has no spread to judge it by.
MIN_CORRELATION_UNITS = 3


def _small_n(row: dict) -> dict:
    """A row whose correlation rests on fewer than MIN_CORRELATION_UNITS units keeps its value, says so."""
    if row["status"] == "ok" and math.isfinite(row["n"]) and row["n"] < MIN_CORRELATION_UNITS:
        row["status"] = f"n too small (n < {MIN_CORRELATION_UNITS})"
    return row


def alignment_rows(alignment: pd.DataFrame) -> pd.DataFrame:
    """Human alignment (alignment.csv): every view × statistic per aspect, with its interval; in the segment view
    its headline, acc*_eq (ties calibrated), comes before the other statistics. n: documents (summary), systems
    (system), targets (dataset), pairs or rows (segment); below MIN_CORRELATION_UNITS the status says "n too small"."""
    records = sorted(alignment.to_dict("records"),
                     key=lambda r: r["view"] == "segment" and r["statistic"] != "acc_eq_calibrated")
    return _frame([_small_n(card_row(r["judge"], r["mode"], "human_alignment", f"{r['view']}_{r['statistic']}",
                                     r["aspect"], r["value"], r.get("ci_lo"), r.get("ci_hi"), r.get("n")))
                   for r in records])


def headline(card: pd.DataFrame, picks: dict[str, str | tuple[str, ...]], measures: bool = False,
             counts: bool = False) -> pd.DataFrame:
    """One row per judge × mode, one column per method's headline number (``picks``: method -> measure, or measures
    in order of preference: the first the judge has a usable number for; the mean over its scopes whose status is
    "ok"), with "not run" where the method did not run and, where it gave no usable number, the status that says why
    ("n too small", "no usable scores", ...) — never a number built from such rows. ``measures=True``: the measure
    each cell shows instead; ``counts=True``: the n behind each cell (the smallest n of the rows averaged)."""
    out = []
    for (judge, mode), g in card.groupby(["judge", "mode"], sort=True):
        row: dict[str, object] = {"judge": judge, "mode": mode}
        for method, wanted in picks.items():
            m = g[g["method"] == method]
            if (m["status"] == "not run").all():
                row[method] = "not run"
                continue
            prefs = (wanted,) if isinstance(wanted, str) else tuple(wanted)
            with_rows = [(x, m[m["measure"] == x]) for x in prefs if (m["measure"] == x).any()]
            # the first measure with an ok number; else the first the judge has rows for (its status says why)
            x, rows = next(((x, r) for x, r in with_rows if (r["status"] == "ok").any()),
                           with_rows[0] if with_rows else (prefs[0], m.iloc[:0]))
            ok = rows[rows["status"] == "ok"]
            if measures:
                row[method] = x
                continue
            if counts:
                row[method] = float(ok["n"].min()) if len(ok) else math.nan
                continue
            # no ok row: the status of a row that has a value (e.g. "n too small") says most, else the first's
            why = next((st for x_, r in with_rows for st, v in zip(r["status"], r["value"]) if pd.notna(v)),
                       rows["status"].iloc[0] if len(rows) else "no usable scores")
            row[method] = round(float(ok["value"].mean()), 3) if len(ok) else why
        out.append(row)
    return pd.DataFrame(out, columns=["judge", "mode", *picks])


STANDING_COLUMNS = ["view", "scope", "measure", "strategy", "value", "rank", "of", "cluster", "best_judge",
                    "best_mode", "best_value", "n", "recorded_best"]


def standings(board: pd.DataFrame, judge: str, mode: str) -> pd.DataFrame:
    """Where one judge stands on every leaderboard view it is in (leaderboard.csv): its value, rank of how many
    judges, significance cluster, and the best judge measured there (live or recorded) with its value. A view that
    left this judge out is listed with its reason in ``cluster`` (no rank, no number)."""
    rows = []
    keys = ["view", "scope", "measure", "strategy"]
    b = board.assign(strategy=board["strategy"].astype(object).fillna(""))  # (an all-empty column reads as float)
    for key, g in b.groupby(keys, sort=True):
        mine = g[(g["judge"] == judge) & (g["mode"] == mode)]
        if mine.empty:
            continue
        me = mine.iloc[0]
        ranked = g[g["status"] == "ok"].sort_values("rank")
        best = ranked.iloc[0] if len(ranked) else None
        rows.append({**dict(zip(keys, key)), "value": me["value"], "rank": me["rank"], "of": len(ranked),
                     "cluster": me["cluster"] if me["status"] == "ok" else me["status"],
                     "best_judge": best["judge"] if best is not None else "",
                     "best_mode": best["mode"] if best is not None else "",
                     "best_value": best["value"] if best is not None else math.nan, "n": me["n"],
                     "recorded_best": bool(best["recorded"]) if best is not None else False})
    return pd.DataFrame(rows, columns=STANDING_COLUMNS)
