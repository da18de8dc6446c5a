"""Checks that each perturbed row did what its method claims, and the per-method audit table."""

from __future__ import annotations

import statistics

import pandas as pd

from dhp.perturb import rules
from dhp.perturb.llm import validate
from dhp.perturb.catalog import PERTURBATIONS, Context, k_for

AUDIT_COLUMNS = [
    "dataset", "perturbation", "level", "severity", "method", "k", "n_rows", "n_ok", "n_skipped",
    "n_failed", "n_verified", "pct_verified", "mean_edit_distance", "median_edit_distance", "check",
]

LLM_CHECK = "passes the LLM output validators (changed, sane length, no meta text)"


def verify_row(row, reference: str, references: dict[str, str], wrong_ending: str = "") -> bool:
    """True when an ok row's text is what its perturbation/severity promises (the registered verifier)."""
    p, text = row["perturbation"], row["text"]
    if text is None:
        return False
    if p == "original":
        return text == reference
    if str(row["method"]).startswith("llm:"):
        return validate(p, reference, text) is None
    method = PERTURBATIONS.get(p)
    if method is None or method.verify is None:
        return False
    ctx = Context(row["severity"], k_for(row["dataset"], row.get("task"), p, row["severity"]),
                  item={"item_id": str(row["item_id"]), "dataset": row["dataset"], "wrong_ending": wrong_ending},
                  pool=references)
    return bool(method.verify(reference, text, ctx))


def _check(perturbation: str, method: str) -> str:
    if str(method).startswith("llm:"):
        return LLM_CHECK
    if perturbation == "original":
        return "text equals the reference"
    return PERTURBATIONS[perturbation].check if perturbation in PERTURBATIONS else ""


def verify(perturbed: pd.DataFrame, dataset: pd.DataFrame | None = None) -> pd.DataFrame:
    """`perturbed` plus two columns: `verified` (bool; False for rows that are not ok) and
    `edit_distance` (character Levenshtein distance to the reference; NaN unless ok).

    References come from `dataset` when given, else from the table's own original rows (then
    wrong_ending rows can only be verified with `dataset`).
    """
    refs: dict[tuple[str, str], str] = {}
    wrong: dict[tuple[str, str], str] = {}
    if dataset is not None:
        for r in dataset.itertuples(index=False):
            refs[(r.dataset, str(r.item_id))] = r.reference
            wrong[(r.dataset, str(r.item_id))] = getattr(r, "wrong_ending", "") or ""
    else:
        orig = perturbed[perturbed["perturbation"] == "original"]
        for r in orig.itertuples(index=False):
            refs[(r.dataset, str(r.item_id))] = r.text if r.text is not None else ""
    by_ds: dict[str, dict[str, str]] = {}
    for (ds, i), t in refs.items():
        by_ds.setdefault(ds, {})[i] = t
    verified, dist = [], []
    for _, row in perturbed.iterrows():
        key = (row["dataset"], str(row["item_id"]))
        ref = refs.get(key)
        if row["status"] != "ok" or ref is None:
            verified.append(False)
            dist.append(float("nan"))
            continue
        verified.append(bool(verify_row(row, ref, by_ds.get(row["dataset"], {}), wrong.get(key, ""))))
        dist.append(float(rules.edit_distance(ref, row["text"])))
    out = perturbed.copy()
    out["verified"] = verified
    out["edit_distance"] = dist
    return out


def audit(perturbed: pd.DataFrame, dataset: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (dataset, perturbation, severity, method): did each method do what it claims?

    Columns:
    - dataset, perturbation, level, severity, method: the group;
    - k: the count from Table 2 for counted methods (str; "" otherwise);
    - n_rows, n_ok, n_skipped, n_failed: rows by status;
    - n_verified: ok rows that pass the method's check; pct_verified = 100 * n_verified / n_ok
      (NaN when n_ok is 0);
    - mean_edit_distance, median_edit_distance: character Levenshtein distance between the
      reference and the ok texts;
    - check: what "verified" means for this method (the registered Perturbation.check).
    """
    v = verify(perturbed, dataset)
    rows = []
    keys = ["dataset", "perturbation", "level", "severity", "method"]
    for key, g in v.groupby(keys, sort=False):
        ds, p, level, sev, method = key
        ok = g[g["status"] == "ok"]
        d = [x for x in ok["edit_distance"] if x == x]
        k = k_for(ds, g["task"].iloc[0] if "task" in g else None, p, sev)
        rows.append(
            {
                "dataset": ds, "perturbation": p, "level": level, "severity": sev, "method": method,
                "k": "" if k is None else str(k),
                "n_rows": len(g),
                "n_ok": len(ok),
                "n_skipped": int((g["status"] == "skipped").sum()),
                "n_failed": int((g["status"] == "failed").sum()),
                "n_verified": int(ok["verified"].sum()),
                "pct_verified": 100.0 * ok["verified"].sum() / len(ok) if len(ok) else float("nan"),
                "mean_edit_distance": statistics.fmean(d) if d else float("nan"),
                "median_edit_distance": float(statistics.median(d)) if d else float("nan"),
                "check": _check(p, method),
            }
        )
    return pd.DataFrame(rows, columns=AUDIT_COLUMNS)
