"""LLMBar's recorded verdicts (the data root's llmbar_judgments/, 349 result.json files) imported and
scored by dhp.analysis.decomposition.agreement_table give, for every judge × strategy × data set, the
statistics LLMBar's LLMEvaluator/evaluate.py computes from the same files (correct_False, correct_True,
correct_average, correct_both, equal) — recomputed here straight from the raw JSON by a re-implementation of
evaluate.py's loop (which reproduces the counts of upstream's own statistics.json for all 349 files).

Two departures, both by design and both checked exactly: (R1) where a Rating reply is not an integer,
evaluate.py records the fallback winners "1"/"2"; the import records no verdict (never a made-up value).
(R2) evaluate.py's ``equal`` counts an item with no verdict in either order as consistent (None == None);
dhp's position_consistency counts only items with a verdict in both orders.
"""

from __future__ import annotations

import json
import re
import time

import pandas as pd
import pytest

from dhp.analysis.decomposition import agreement_table
from dhp.recorded import import_judgments
from conftest import DATA

ROOT = DATA / "llmbar_judgments"
_INT = re.compile(r"\s*[+-]?\d+\s*")


def evaluate_py(items: list[dict], rating_fallback_as_none: bool = False) -> dict:
    """LLMBar evaluate.py's statistics loop over one result.json (counts, not percentages); with
    ``rating_fallback_as_none`` a Rating item whose replies are not both integers has no winner (R1)."""
    correct_false = correct_true = correct_both = equal = both_none = 0
    for inst in items:
        label = str(inst["label"])
        last = inst["results"][-1]
        out_false, out_true = last["swap = False"]["winner"], last["swap = True"]["winner"]
        if rating_fallback_as_none and "score_1" in last:
            try:
                int(last["score_1"][0]), int(last["score_2"][0])
            except ValueError:
                out_false = out_true = None
        correct_false += out_false == label
        correct_true += out_true == label
        correct_both += (out_false == label) and (out_true == label)
        equal += out_true == out_false
        both_none += out_true is None and out_false is None
    return {"n": len(items), "correct_False": correct_false, "correct_True": correct_true,
            "correct_both": correct_both, "equal": equal, "both_none": both_none}


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    run = tmp_path_factory.mktemp("llmbar_recorded")
    t0 = time.perf_counter()
    report = import_judgments("llmbar", ROOT, run)
    seconds = time.perf_counter() - t0
    return run, report, pd.read_parquet(run / "pairwise_verdicts.parquet"), seconds


@pytest.fixture(scope="module")
def raw() -> dict[tuple[str, str, str], list]:
    """(judge, strategy, subset) -> the file's items, subset named as the import names it."""
    out = {}
    for f in sorted(ROOT.rglob("result.json")):
        rel = f.relative_to(ROOT).parts  # LLMBar/Adversarial/GPTInst/evaluators/GPT-4/Vanilla/result.json
        sub = "_".join(rel[1:-4]) if rel[0] == "LLMBar" else "_".join(rel[:-4])
        out[(rel[-3], rel[-2], sub)] = json.loads(f.read_text(encoding="utf-8"))
    return out


@pytest.fixture(scope="module")
def agreement(imported) -> pd.DataFrame:
    v = imported[2]
    # agreement_table scores one judge's table: one call per judge
    return pd.concat([agreement_table(g, judge=j, mode="recorded") for j, g in v.groupby("judge", sort=True)],
                     ignore_index=True).set_index(["judge", "strategy", "subset"])


def test_every_file_is_imported_once(imported, raw):
    run, report, v, seconds = imported
    assert len(report.files) == len(raw) == 349
    assert len(v) == 2 * sum(len(items) for items in raw.values())
    assert set(v.groupby(["judge", "strategy", "subset"]).size().index) == set(raw)
    assert not v.duplicated(["judge", "subset", "strategy", "item_id", "order"]).any()
    # every file is recognised as LLMBar's upstream file @ 900616b (dhp/resources/data_registry.json)
    assert all(f["upstream"].startswith("github.com/princeton-nlp/LLMBar@900616b") for f in report.files)
    print(f"\nimported {len(report.files)} files, {len(v):,} rows in {seconds:.1f} s")


def test_agreement_reproduces_evaluate_py_for_every_judge_strategy_and_subset(agreement, raw):
    both_col = "agreement_both" if "agreement_both" in agreement.columns else "agreement"
    differ = 0
    for key, items in raw.items():
        a = agreement.loc[key]
        ours = evaluate_py(items, rating_fallback_as_none=True)
        n = ours["n"]
        assert a["n"] == n, key
        assert a["agreement_order_12"] == pytest.approx(ours["correct_False"] / n, abs=1e-12), key
        assert a["agreement_order_21"] == pytest.approx(ours["correct_True"] / n, abs=1e-12), key
        assert (a["agreement_order_12"] + a["agreement_order_21"]) / 2 == pytest.approx(
            (ours["correct_False"] + ours["correct_True"]) / 2 / n, abs=1e-12), key  # correct_average
        if both_col == "agreement_both":  # agreement is then the two-order average
            assert a["agreement"] == pytest.approx((ours["correct_False"] + ours["correct_True"]) / 2 / n, abs=1e-12)
        assert a[both_col] == pytest.approx(ours["correct_both"] / n, abs=1e-12), key
        # R2: dhp's position consistency leaves out items without a verdict in both orders
        assert a["position_consistency"] == pytest.approx((ours["equal"] - ours["both_none"]) / n, abs=1e-12), key
        # R1 changes a file's numbers exactly where a Rating reply was not an integer (a fallback pair
        # "1"/"2" always matches the label in one order, so every such item shifts a count)
        upstream = evaluate_py(items)
        same = all(upstream[k] == ours[k] for k in ("correct_False", "correct_True", "correct_both"))
        fallback = any("score_1" in it["results"][-1] and not all(
            _INT.fullmatch(str(it["results"][-1][s][0])) for s in ("score_1", "score_2")) for it in items)
        assert same != fallback, key
        differ += not same
    print(f"\n{differ} of {len(raw)} files differ from evaluate.py by R1 (Rating fallback verdicts)")


def test_item_ids_are_the_ids_of_the_llmbar_loader(imported):
    from dhp.datasets.llmbar import SUBSETS, load_llmbar

    items = load_llmbar(list(SUBSETS))
    v = imported[2]
    natural = v[~v["subset"].str.startswith("Processed_")]
    ids = set(items["item_id"])
    assert set(natural["item_id"]) == ids
    # the recorded label of each id is the loader's label: the files list the items in dataset.json order
    labels = natural.drop_duplicates("item_id").set_index("item_id")["label"]
    assert (labels.reindex(items["item_id"]).to_numpy() == items["label"].to_numpy()).all()
    for f in sorted((ROOT / "LLMBar").rglob("result.json"))[:40]:
        rel = f.relative_to(ROOT / "LLMBar").parts
        sub = "_".join(rel[:-4])
        rec = json.loads(f.read_text(encoding="utf-8"))
        mine = items[items["subset"] == sub].reset_index(drop=True)
        assert [r["input"] for r in rec] == mine["instruction"].tolist(), f


def test_headline_numbers(agreement):
    """Each judge's Vanilla accuracy (two-order average) on LLMBar Adversarial, pooled over its 319 items:
    printed for the README; the pooled value is the item-weighted mean of the four subsets."""
    subsets = ["Adversarial_GPTInst", "Adversarial_GPTOut", "Adversarial_Manual", "Adversarial_Neighbor"]
    lines = []
    for judge in sorted(agreement.index.get_level_values("judge").unique()):
        rows = agreement.loc[[(judge, "Vanilla", s) for s in subsets]]
        avg = (rows["agreement_order_12"] + rows["agreement_order_21"]) / 2
        pooled = float((avg * rows["n"]).sum() / rows["n"].sum())
        nat = agreement.loc[(judge, "Vanilla", "Natural")]
        lines.append(f"{judge}: Adversarial {pooled:.3f} (n={int(rows['n'].sum())}), Natural "
                     f"{(nat['agreement_order_12'] + nat['agreement_order_21']) / 2:.3f}, "
                     f"position consistency Adversarial {float((rows['position_consistency'] * rows['n']).sum() / rows['n'].sum()):.3f}")
        assert int(rows["n"].sum()) == 319 and 0 <= pooled <= 1
    print("\n" + "\n".join(lines))


def test_byo_verdicts_default_to_llmbar_ids_and_labels(tmp_path, raw):
    from dhp.errors import DHPError

    f = tmp_path / "mine.csv"
    f.write_text("item_id,judge,strategy,order,verdict\nNatural-0,me,direct,12,1\nNatural-0,me,direct,21,tie\n")
    import_judgments("table", f, tmp_path / "run")
    v = pd.read_parquet(tmp_path / "run" / "pairwise_verdicts.parquet")
    assert set(v["subset"]) == {"Natural"} and v["verdict"].tolist() == ["1", "tie"]
    assert set(v["label"]) == {str(raw[("GPT-4", "Vanilla", "Natural")][0]["label"])}
    f.write_text("item_id,judge,strategy,order,verdict\nNatural-100,me,direct,12,1\n")  # Natural has 0..99
    with pytest.raises(DHPError, match="item_id 'Natural-100' is not in the dataset table LLMBar"):
        import_judgments("table", f, tmp_path / "run")
