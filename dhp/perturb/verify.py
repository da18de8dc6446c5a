"""Checks that each perturbed row did what its method claims, and the per-method audit table."""

from __future__ import annotations

import statistics

import pandas as pd

from dhp.perturb import entities, grammar, paraphrase, rules
from dhp.perturb.registry import k_for

AUDIT_COLUMNS = [
    "dataset", "perturbation", "level", "severity", "method", "k", "n_rows", "n_ok", "n_skipped",
    "n_failed", "n_verified", "pct_verified", "mean_edit_distance", "median_edit_distance", "check",
]

CHECKS = {
    "original": "text equals the reference",
    "control": "differs from the reference in white space only (one sentence per line)",
    "char_deletion": "exactly k alphanumeric chars removed, nothing else changed",
    "char_typo": "optimal-string-alignment distance to the reference is exactly k",
    "word_deletion": "words = reference words minus one run of exactly k",
    "sentence_reorder": "same sentences and separators; minor: exactly 2 moved, major: >= 2 moved",
    "rewrite_insert": "reference kept; minor 1 / major >= 2 new sentences inserted after sentence ends",
    "fictional_entities": "only detected entities changed, consistently; minor/single 1, major >= 2",
    "grammatical_errors": "minor/single: exactly 1 changed word region; major: >= 2",
    "random_ending": "text is another item's reference",
    "random_answer": "text is another item's reference",
    "wrong_ending": "text is the dataset's wrong ending",
    "llm": "passes the LLM output validators (changed, sane length, no meta text)",
}


def verify_row(row, reference: str, references: dict[str, str], wrong_ending: str = "") -> bool:
    """True when an ok row's text is what its perturbation/severity promises (see CHECKS)."""
    p, sev, text = row["perturbation"], row["severity"], row["text"]
    if text is None:
        return False
    if p == "original":
        return text == reference
    if p == "control":
        return rules.is_control(reference, text)
    if str(row["method"]).startswith("llm:"):
        from dhp.perturb.llm import validate

        return validate(p, reference, text) is None
    k = k_for(row["dataset"], row.get("task"), p, sev)
    if p == "char_deletion":
        return rules.is_char_deletion(reference, text, k)
    if p == "char_typo":
        return rules.edit_distance(reference, text, transpositions=True) == k
    if p == "word_deletion":
        return rules.is_word_deletion(reference, text, k)
    if p == "sentence_reorder":
        moved = rules.reorder_displacement(reference, text)
        return moved is not None and (moved == 2 if sev == "minor" else moved >= 2)
    if p == "rewrite_insert":
        got = paraphrase.inserted_rewrites(reference, text)
        return got is not None and (len(got) == 1 if sev == "minor" else len(got) >= 2)
    if p == "fictional_entities":
        n = entities.n_entities_changed(reference, text)
        return n is not None and (n >= 2 if sev == "major" else n == 1)
    if p == "grammatical_errors":
        n = grammar.changed_blocks(reference, text)
        return n >= 2 if sev == "major" else n == 1
    if p in ("random_ending", "random_answer"):
        return text != reference and any(
            t == text for i, t in references.items() if i != row["item_id"]
        )
    if p == "wrong_ending":
        return bool(wrong_ending) and text == wrong_ending and text != reference
    return False


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
    - check: what "verified" means for this method (see CHECKS).
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
                "check": CHECKS["llm"] if str(method).startswith("llm:") else CHECKS.get(p, ""),
            }
        )
    return pd.DataFrame(rows, columns=AUDIT_COLUMNS)
