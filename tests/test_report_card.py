"""The judge report card: every registered method's rows for every judge × mode found in the tables, numbers copied
from each method's table, "not run" where a method has no row for a judge (never 0), and the figures."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dhp import methods
from dhp.analysis.report_card import CARD_COLUMNS, confusion_rows, dhp_rows, headline


def _summary(judge="j", mode="logprobs", d_avg=1.4):
    return pd.DataFrame([{"dataset": "summeval", "judge": judge, "mode": mode, "D_avg": d_avg, "D_avg_lo": 0.9,
                          "D_avg_hi": 1.8, "D_min": 0.2, "D_min_lo": 0.0, "D_min_hi": 0.5, "D_avg_EW": 1.2,
                          "D_avg_EW_lo": 0.8, "D_avg_EW_hi": 1.6, "D_min_EW": 0.1, "D_min_EW_lo": 0.0,
                          "D_min_EW_hi": 0.4, "control_D": 0.3, "null_fpr_avg_paper": 0.02, "n_null": 1000,
                          "n_perturbations": 13}])


def _confusion(judge="j", mode="logprobs"):
    return pd.DataFrame([{"judge": judge, "mode": mode, "instruction": "paper", "description_type": "detailed",
                          "n_S_T": 19, "n_S_F": 37, "n_SF_tested": 20, "share_ST_D_gt_1": 0.25,
                          "share_ST_dropped": 0.25, "share_SF_invariant": 0.5, "share_SF_dropped": 0.1,
                          "confusion_index": math.nan}])


def _picks():
    return {m.name: m.headline for m in methods.all_methods()}


def test_card_copies_the_numbers_and_marks_what_did_not_run(tmp_path):
    _summary().to_csv(tmp_path / "summary.csv", index=False)
    _confusion().to_csv(tmp_path / "confusion_summary.csv", index=False)
    card = methods.report_card(tmp_path)
    assert list(card.columns) == CARD_COLUMNS
    d = card[(card["method"] == "dhp") & (card["measure"] == "D_avg")].iloc[0]
    assert (d["value"], d["lo"], d["hi"], d["scope"]) == (1.4, 0.9, 1.8, "summeval")
    ci = card[card["measure"] == "confusion_index"].iloc[0]
    assert math.isnan(ci["value"]) and ci["status"] == "no significant drop"  # NaN stays NaN, with why
    not_run = card[card["status"] == "not run"]
    assert set(not_run["method"]) == set(methods.names()) - {"dhp", "criteria_confusion"}
    assert not_run["value"].isna().all()  # never a 0
    assert set(card["method"]) == set(methods.names())  # every registered method has a row
    h = headline(card, _picks()).iloc[0]
    assert h["dhp"] == 1.4 and h["criteria_confusion"] == "no significant drop"


def test_another_judge_in_one_table_only_is_not_run_elsewhere(tmp_path):
    pd.concat([_summary(), _summary("k", d_avg=0.3)]).to_csv(tmp_path / "summary.csv", index=False)
    _confusion().to_csv(tmp_path / "confusion_summary.csv", index=False)
    card = methods.report_card(tmp_path)
    assert sorted(set(zip(card["judge"], card["mode"]))) == [("j", "logprobs"), ("k", "logprobs")]
    d = card[card["measure"] == "D_avg"].set_index("judge")["value"]
    assert d.to_dict() == {"j": 1.4, "k": 0.3}
    k_conf = card[(card["judge"] == "k") & (card["method"] == "criteria_confusion")]
    assert k_conf["status"].tolist() == ["not run"]
    only_k = methods.report_card(tmp_path, judge="k")
    assert set(only_k["judge"]) == {"k"}
    missing = methods.report_card(tmp_path, judge="z", mode="sample")
    assert (missing["status"] == "not run").all() and len(missing) == len(methods.names())


def test_per_method_folders(tmp_path):
    (tmp_path / "a").mkdir()
    _summary().to_csv(tmp_path / "a" / "summary.csv", index=False)
    card = methods.report_card({"dhp": tmp_path / "a"})
    assert set(card.loc[card["status"] != "not run", "method"]) == {"dhp"}


def test_row_builders_keep_each_judge():
    summary = pd.concat([_summary(), _summary("k", "sample", 0.3)])
    rows = dhp_rows(summary)
    assert set(zip(rows["judge"], rows["mode"])) == {("j", "logprobs"), ("k", "sample")}
    assert rows.loc[rows["measure"].str.startswith("D_"), "n"].isna().all()  # items unknown without discernment.csv
    disc = pd.DataFrame({"dataset": summary["dataset"].iloc[0], "judge": ["j", "j", "k"], "mode": ["logprobs", "logprobs",
                         "sample"], "role": ["perturbation", "negative_control", "perturbation"], "n_items": [10, 40, 7]})
    rows = dhp_rows(summary, disc).set_index(["judge", "measure"])
    assert rows.loc[("j", "D_avg"), "n"] == 10 and rows.loc[("k", "D_min"), "n"] == 7  # items, not perturbations
    conf = confusion_rows(_confusion())
    inv = conf[conf["measure"] == "share_SF_invariant"].iloc[0]
    assert inv["value"] == 0.5 and inv["n"] == 20  # n = the S_F cells that could be tested


def test_figures_have_a_panel_per_method(tmp_path):
    from dhp.plots.report_card import plot_card_comparison, plot_report_card

    pd.concat([_summary(), _summary("k", "sample")]).to_csv(tmp_path / "summary.csv", index=False)
    card = methods.report_card(tmp_path)
    fig = plot_report_card(card, "j", "logprobs")
    assert len(fig.axes) >= len(methods.names())
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts.count("not run") == len(methods.names()) - 1  # every method but DHP
    comp = plot_card_comparison(card, _picks())
    cells = [t.get_text() for t in comp.axes[0].texts]
    assert cells.count("not run") == 2 * (len(methods.names()) - 1) and "1.40\nn=?" in cells  # n unknown here


def test_pages_are_named_per_judge_and_mode_and_file_safe(tmp_path):
    from dhp.plots.report_card import save_report_card_pages

    pd.concat([_summary("openai:m@http://h:1/v1", "sample"), _summary()]).to_csv(tmp_path / "summary.csv", index=False)
    card = methods.report_card(tmp_path)
    names = sorted(p.name for p in save_report_card_pages(card, tmp_path / "figs", _picks()))
    assert names == ["report_card_comparison.pdf", "report_card_comparison.png", "report_card_j-logprobs.pdf",
                     "report_card_j-logprobs.png", "report_card_openai_m_http_h_1_v1-sample.pdf",
                     "report_card_openai_m_http_h_1_v1-sample.png"]


def test_headline_falls_back_to_the_next_measure_with_a_number_and_says_which():
    from dhp.analysis.report_card import card_row

    card = pd.DataFrame([
        card_row("b", "metric", "human_alignment", "segment_acc_eq_calibrated", "mqm", float("nan"),
                 nan_status="no usable scores"),
        card_row("b", "metric", "human_alignment", "summary_spearman", "coherence", 0.2),
        card_row("b", "metric", "human_alignment", "summary_spearman", "fluency", 0.4),
        card_row("j", "m", "human_alignment", "segment_acc_eq_calibrated", "mqm", 0.5),
        card_row("j", "m", "human_alignment", "summary_spearman", "coherence", 0.9),
        card_row("k", "m", "human_alignment", "segment_acc_eq_calibrated", "mqm", float("nan"),
                 nan_status="no usable scores")])
    picks = {"human_alignment": ("segment_acc_eq_calibrated", "summary_spearman")}
    h = headline(card, picks).set_index("judge")["human_alignment"]
    used = headline(card, picks, measures=True).set_index("judge")["human_alignment"]
    assert h["b"] == pytest.approx(0.3) and used["b"] == "summary_spearman"  # mean of its scopes
    assert h["j"] == 0.5 and used["j"] == "segment_acc_eq_calibrated"  # the first preference when it has a number
    assert h["k"] == "no usable scores"  # no number anywhere: the reason, never 0


def _comparison_card():
    from dhp.analysis.report_card import card_row

    rows = [card_row(j, "metric", "human_alignment", "summary_spearman", "coherence", v, n=20)
            for j, v in (("baseline:chrf_src", 0.04), ("control:oracle@0.2", 0.8), ("control:chance", 0.01))]
    rows += [card_row("embedded:smollm2-135m", "logprobs", "human_alignment", "segment_acc_eq_calibrated", "mqm",
                      math.nan, nan_status="too few units (3 of 100) and nothing else usable here")]
    rows += [card_row(j, m, "dhp", "D_avg", "summeval", 1.2, 0.9, 1.5, n=10)
             for j, m in (("baseline:chrf_src", "metric"), ("embedded:smollm2-135m", "logprobs"))]
    return pd.DataFrame(rows)


def test_comparison_headers_name_the_statistic_their_cells_show_and_kinds_are_named():
    from dhp.plots.report_card import plot_card_comparison

    picks = {"dhp": "D_avg", "human_alignment": ("segment_acc_eq_calibrated", "summary_spearman")}
    fig = plot_card_comparison(_comparison_card(), picks)
    ax = fig.axes[0]
    headers = [t.get_text().replace("\n", "") for t in ax.get_xticklabels()]
    # every number in the human-alignment column is a summary-level Spearman: its header says so, not the first pick
    assert "summary_spearman" in headers[1] and "segment_acc" not in headers[1], headers
    assert "D_avg" in headers[0]
    judges = [t.get_text() for t in ax.get_yticklabels()]
    assert any("control:oracle@0.2" in j and "control)" in j for j in judges), judges
    assert any("baseline:chrf_src" in j and "baseline)" in j for j in judges)
    assert any("smollm2" in j and "model)" in j for j in judges)
    # the card table names the kind too
    assert "judge_kind" in CARD_COLUMNS and set(_comparison_card()["judge_kind"]) == {"baseline", "control", "model"}


def test_comparison_text_stays_inside_its_cell():
    from dhp.plots.report_card import plot_card_comparison

    picks = {"dhp": "D_avg", "human_alignment": ("segment_acc_eq_calibrated", "summary_spearman")}
    fig = plot_card_comparison(_comparison_card(), picks)
    fig.set_dpi(100)
    fig.canvas.draw()
    ax = fig.axes[0]
    r = fig.canvas.get_renderer()
    to_px = ax.transData.transform
    for t in ax.texts:
        j, i = t.get_position()
        (x0, y0), (x1, y1) = to_px((j - 0.5, i - 0.5)), to_px((j + 0.5, i + 0.5))
        box = t.get_window_extent(r)
        assert min(x0, x1) - 0.5 <= box.x0 and box.x1 <= max(x0, x1) + 0.5, (t.get_text(), box, x0, x1)
        assert min(y0, y1) - 0.5 <= box.y0 and box.y1 <= max(y0, y1) + 0.5, (t.get_text(), box, y0, y1)
    # the long status is cut to the cell, still readable
    assert any(t.get_text().startswith("too few units") for t in ax.texts)
