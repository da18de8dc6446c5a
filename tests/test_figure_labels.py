"""No label overlaps another in the figures the lessons show (issue 53): the LLMBar agreement chart with the recorded
judges (lessons 08, 11, 12) and the report card's comparison (README, lesson 10). Checked on the drawn text's
extents, as a reader's browser shows them."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from dhp.plots import decomposition


def overlaps(fig) -> list[tuple[str, str]]:
    """Pairs of visible, non-empty texts of ``fig`` (axes texts, tick labels, titles) whose drawn boxes intersect."""
    fig.set_dpi(100)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    texts = []
    for ax in fig.axes:
        texts += list(ax.texts) + list(ax.get_xticklabels()) + list(ax.get_yticklabels()) + [ax.title]
    boxes = [(t.get_text(), t.get_window_extent(r)) for t in texts if t.get_visible() and t.get_text().strip()]
    return [(a, b) for (a, ba), (b, bb) in itertools.combinations(boxes, 2)
            if ba.x0 < bb.x1 - 0.5 and bb.x0 < ba.x1 - 0.5 and ba.y0 < bb.y1 - 0.5 and bb.y0 < ba.y1 - 0.5]


def _recorded_like(n_judges=7, n_strategies=17) -> pd.DataFrame:
    """The shape of lesson 11's agreement table: SmolLM2 on 3 strategies, six recorded LLMBar judges on up to 17."""
    rng = np.random.default_rng(0)
    rows = [{"judge": "embedded:smollm2-135m", "mode": "logprobs", "strategy": s} for s in ("dhp_vanilla", "direct",
                                                                                             "dna")]
    names = ["ChatGPT", "ChatGPT-0301", "Falcon", "GPT-4", "LLaMA2", "PaLM2"][:n_judges - 1]
    rows += [{"judge": j, "mode": "recorded", "strategy": f"Strategy_{k}"} for j in names for k in range(n_strategies)]
    t = pd.DataFrame(rows).assign(subset="Natural", n=100)
    return t.assign(**{m: rng.uniform(0, 1, len(t)).round(2) for m in decomposition.AGREEMENT_MEASURES})


def test_agreement_chart_with_the_recorded_judges_has_no_overlapping_labels():
    fig = decomposition.plot_agreement(_recorded_like())
    assert overlaps(fig) == []
    # every value is still written (a share of 0 must not look unmeasured)
    assert sum(len(ax.texts) for ax in fig.axes) == 3 * (3 + 6 * 17)
    # and at 7 pt or more: a 7-in figure shown in a ~700-px column draws 7 pt at 9.7 px (6 pt: 8.3 px, under 9)
    from dhp.plots.save import DPI, min_font_px

    assert fig.get_figwidth() <= 7.0 and min_font_px(fig) >= round(7 * DPI / 72, 2)


@pytest.mark.parametrize("n_judges, n_strategies", [(1, 3), (8, 2), (4, 5), (3, 3)])
def test_fewer_judges_and_strategies_have_no_overlaps_either(n_judges, n_strategies):
    t = _recorded_like().query("mode == 'logprobs'") if n_judges == 1 else pd.concat(
        _recorded_like(7, n_strategies).query("mode == 'recorded'").assign(judge=lambda d: f"openai:model-{k}-" + d["judge"])
        for k in range((n_judges + 5) // 6)).groupby("judge").head(n_strategies)
    t = t[t["judge"].isin(list(dict.fromkeys(t["judge"]))[:n_judges])]
    fig = decomposition.plot_agreement(t)
    if n_judges == 1:
        assert all(ax.patches for ax in fig.axes)  # lesson 08's one judge: bars, not the grid
    assert overlaps(fig) == []  # whichever layout the sizes chose


def test_the_overlap_check_sees_the_old_layout_collide(monkeypatch):
    # the control: a bar with its value for every judge x strategy (the layout lessons 11/12 showed) overlaps
    monkeypatch.setattr(decomposition, "_bars_fit", lambda *a: True)
    assert overlaps(decomposition.plot_agreement(_recorded_like()))


def test_report_card_comparison_has_no_overlapping_labels():
    from dhp.analysis.report_card import card_row
    from dhp.plots.report_card import plot_card_comparison

    judges = [("baseline:chrf_src", "metric"), ("control:oracle@0.2", "metric"), ("control:chance", "metric"),
              ("control:longer", "metric"), ("embedded:gemma-3-270m", "likelihood"),
              ("embedded:smollm2-135m", "logprobs")]
    rows = []
    for k, (j, m) in enumerate(judges):
        rows.append(card_row(j, m, "dhp", "D_avg", "summeval", 1.0 + k / 10, n=100))
        rows.append(card_row(j, m, "criteria_confusion", "confusion_index", "detailed",
                             float("nan") if k % 2 else 0.2, nan_status="no significant drop"))
        rows.append(card_row(j, m, "human_alignment", "segment_acc_eq_calibrated", "mqm", float("nan"),
                             nan_status="too few units (3 of 100)"))
        rows.append(card_row(j, m, "human_alignment", "summary_spearman", "coherence",
                             float("nan") if k == 4 else 0.1 * k, n=20, nan_status="n too small (n < 3)"))
        # the README figure's five columns: a long status beside a long one (issue 53: one spilled out of its cell)
        rows.append(card_row(j, m, "decompose_aggregate", "agreement", "Natural/direct", float("nan"),
                             nan_status="too few units (3 of 100)"))
        rows.append(card_row(j, m, "dual_perspective", "kappa", "coherence", float("nan"),
                             nan_status="too few units (2 of 100)"))
        rows.append(card_row(j, m, "bias", "flip_rate", "LLMBar/dhp_vanilla", 0.1 * k, n=100))
    # the six methods' headers side by side (two long names collided once the bias column came in)
    picks = {"dhp": "D_avg", "criteria_confusion": "confusion_index", "decompose_aggregate": "agreement",
             "dual_perspective": "kappa", "human_alignment": ("segment_acc_eq_calibrated", "summary_spearman"),
             "bias": "flip_rate"}
    assert overlaps(plot_card_comparison(pd.DataFrame(rows), picks)) == []
