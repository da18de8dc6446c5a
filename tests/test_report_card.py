"""The judge report card: numbers copied from each method's table, "not run" where a method did not run
(never 0), and the figures."""

from __future__ import annotations

import math

import pandas as pd

from dhp.analysis.report_card import CARD_COLUMNS, METHODS, headline, report_card, report_card_from_runs


def _summary():
    return pd.DataFrame([{"dataset": "summeval", "judge": "j", "mode": "logprobs", "D_avg": 1.4, "D_avg_lo": 0.9,
                          "D_avg_hi": 1.8, "D_min": 0.2, "D_min_lo": 0.0, "D_min_hi": 0.5, "D_avg_EW": 1.2,
                          "D_avg_EW_lo": 0.8, "D_avg_EW_hi": 1.6, "D_min_EW": 0.1, "D_min_EW_lo": 0.0,
                          "D_min_EW_hi": 0.4, "control_D": 0.3, "null_fpr_avg_paper": 0.02, "n_null": 1000,
                          "n_perturbations": 13}])


def _confusion():
    return pd.DataFrame([{"judge": "j", "mode": "logprobs", "description_type": "gold", "n_S_T": 19, "n_S_F": 37,
                          "share_ST_D_gt_1": 0.25, "share_SF_invariant": 0.5, "share_SF_dropped": 0.1,
                          "confusion_index": math.nan}])


def test_card_copies_the_numbers_and_marks_what_did_not_run(tmp_path):
    card = report_card("j", "logprobs", summary=_summary(), confusion=_confusion())
    assert list(card.columns) == CARD_COLUMNS
    d = card[(card["method"] == "dhp") & (card["measure"] == "D_avg")].iloc[0]
    assert (d["value"], d["lo"], d["hi"], d["scope"]) == (1.4, 0.9, 1.8, "summeval")
    ci = card[card["measure"] == "confusion_index"].iloc[0]
    assert math.isnan(ci["value"]) and ci["status"] == "no significant drop"  # NaN stays NaN, with why
    not_run = card[card["status"] == "not run"]
    assert set(not_run["method"]) == {"decompose_aggregate", "dual_perspective", "human_alignment"}
    assert not_run["value"].isna().all()  # never a 0
    h = headline(card).iloc[0]
    assert h["dhp"] == 1.4 and h["decompose_aggregate"] == "not run" and h["criteria_confusion"] == "no significant drop"


def test_card_from_run_folders_and_another_judge_is_not_run(tmp_path):
    (tmp_path / "dhp").mkdir()
    _summary().to_csv(tmp_path / "dhp" / "summary.csv", index=False)
    card = report_card_from_runs("j", "logprobs", {"dhp": tmp_path / "dhp", "criteria_confusion": tmp_path / "none"})
    assert set(card.loc[card["status"] != "not run", "method"]) == {"dhp"}
    other = report_card_from_runs("someone_else", "logprobs", {"dhp": tmp_path / "dhp"})
    assert (other["status"] == "not run").all() and len(other) == len(METHODS)


def test_figures_have_a_panel_per_method():
    from dhp.plots.report_card import plot_card_comparison, plot_report_card

    card = pd.concat([report_card("j", "logprobs", summary=_summary()),
                      report_card("k", "sample", confusion=_confusion().assign(judge="k", mode="sample"))])
    fig = plot_report_card(card, "j", "logprobs")
    assert len(fig.axes) >= len(METHODS)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts.count("not run") == 4  # every method but DHP
    comp = plot_card_comparison(card)
    cells = [t.get_text() for t in comp.axes[0].texts]
    assert cells.count("not run") == 4 + 4 and "1.40" in cells


def test_description_type_comparison_figure_has_a_bar_group_per_type():
    from dhp.plots.confusion import plot_description_types

    summary = pd.concat([_confusion(), _confusion().assign(description_type="detailed", share_ST_D_gt_1=0.75)])
    fig = plot_description_types(summary)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["gold", "detailed"]
    heights = sorted(round(p.get_height(), 2) for p in fig.axes[0].patches if p.get_height() == p.get_height())
    assert 0.75 in heights and 0.25 in heights


def test_cards_for_every_judge_in_stacked_tables_keep_each_judges_numbers(tmp_path):
    from dhp.analysis.report_card import report_cards_from_runs

    two = pd.concat([_summary(), _summary().assign(judge="k", D_avg=0.3)])
    two.to_csv(tmp_path / "summary.csv", index=False)
    pd.DataFrame([{"judge": "k", "mode": "logprobs", "aspect": "fluency", "kappa": 0.5, "n": 4},
                  {"judge": "j", "mode": "logprobs", "aspect": "fluency", "kappa": -0.1, "n": 6}]).to_csv(
        tmp_path / "global_kappa.csv", index=False)
    cards = report_cards_from_runs({m: tmp_path for m in METHODS})
    assert sorted(set(zip(cards["judge"], cards["mode"]))) == [("j", "logprobs"), ("k", "logprobs")]
    d = cards[cards["measure"] == "D_avg"].set_index("judge")["value"]
    assert d.to_dict() == {"j": 1.4, "k": 0.3}
    kappa = cards[cards["measure"] == "kappa"].set_index("judge")[["value", "n"]]
    assert kappa.loc["j"].tolist() == [-0.1, 6] and kappa.loc["k"].tolist() == [0.5, 4]
    only_k = report_cards_from_runs({m: tmp_path for m in METHODS}, judge="k")
    assert set(only_k["judge"]) == {"k"}
    missing = report_cards_from_runs({m: tmp_path for m in METHODS}, judge="z", mode="sample")
    assert (missing["status"] == "not run").all() and len(missing) == len(METHODS)


def test_no_verdict_at_all_is_not_an_agreement_of_zero_and_an_empty_confusion_index_says_why():
    agreement = pd.DataFrame([
        {"judge": "j", "mode": "logprobs", "subset": "Natural", "strategy": "direct", "agreement": 0.0,
         "position_consistency": 0.0, "n": 2, "no_verdict": 4},
        {"judge": "j", "mode": "logprobs", "subset": "Natural", "strategy": "dna", "agreement": 0.5,
         "position_consistency": 0.0, "n": 2, "no_verdict": 3}])
    conf = _confusion().assign(n_S_T=14, n_S_F=12)
    card = report_card("j", "logprobs", agreement=agreement, confusion=conf).set_index(["measure", "scope"])
    direct = card.loc[("agreement", "Natural/direct")]
    assert math.isnan(direct["value"]) and direct["status"] == "no usable scores"
    assert card.loc[("agreement", "Natural/dna"), "value"] == 0.5  # one verdict: a real (small) number
    assert card.loc[("confusion_index", "gold"), "status"] == "no significant drop"
    empty = report_card("j", "logprobs", confusion=_confusion().assign(n_S_T=0, n_S_F=0)).set_index("measure")
    assert empty.loc["confusion_index", "status"] == "no usable scores"


def test_pages_are_named_per_judge_and_mode_and_file_safe(tmp_path):
    from dhp.plots.report_card import save_report_card_pages

    card = pd.concat([report_card("openai:m@http://h:1/v1", "sample", summary=_summary().assign(judge="openai:m@http://h:1/v1", mode="sample")),
                      report_card("j", "logprobs", summary=_summary())])
    names = sorted(p.name for p in save_report_card_pages(card, tmp_path))
    assert names == ["report_card_comparison.pdf", "report_card_comparison.png", "report_card_j-logprobs.pdf",
                     "report_card_j-logprobs.png", "report_card_openai_m_http_h_1_v1-sample.pdf",
                     "report_card_openai_m_http_h_1_v1-sample.png"]
