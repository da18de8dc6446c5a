"""Figures of the decompose-and-aggregate method (LLMBar, DnA-Eval): agreement with the human label and position
consistency per strategy, one bar group per judge × mode."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dhp.errors import DHPError  # noqa: E402
from dhp.plots.save import stable  # noqa: E402
from dhp.lazy import lazy_module  # noqa: E402

plt = lazy_module("matplotlib.pyplot")  # imported when a figure is drawn (dhp.lazy)

__all__ = ["AGREEMENT_MEASURES", "pooled_agreement", "plot_agreement"]

AGREEMENT_MEASURES = ("agreement", "agreement_both", "position_consistency")
_TITLES = {"agreement": "agreement (mean of the two orders, LLMBar's accuracy)",
           "agreement_both": "agreement in both orders", "position_consistency": "position consistency"}


def pooled_agreement(agreement: pd.DataFrame, measures=AGREEMENT_MEASURES) -> pd.DataFrame:
    """Each measure per judge × mode × strategy over all its subsets: the item-weighted mean Σ n·x / Σ n (the share
    over the pooled items, as each measure is a share of items). Columns judge, mode, strategy, n, *measures."""
    missing = [c for c in ("judge", "mode", "strategy", "n", *measures) if c not in agreement.columns]
    if missing:
        raise DHPError(f"The agreement table lacks column(s) {missing}.",
                       "pass pairwise_agreement.csv (dhp.analysis.decomposition.agreement_table).")
    a = agreement.assign(**{m: agreement[m] * agreement["n"] for m in measures})
    # min_count=1: a measure no subset could compute stays NaN (shown "n/a"), never a share of 0
    g = a.groupby(["judge", "mode", "strategy"], sort=False)[["n", *measures]].sum(min_count=1).reset_index()
    return g.assign(**{m: g[m] / g["n"] for m in measures})


def _group_label(judge: str, mode: str) -> str:
    kind, _, model = str(judge).partition(":")  # backend and model on two lines: neighbouring labels stay apart
    return f"{kind}:\n{model}\n({mode})" if model else f"{judge}\n({mode})"


def plot_agreement(agreement: pd.DataFrame, measures=AGREEMENT_MEASURES):
    """One panel per measure; in each, one bar group per judge × mode (in table order) and one bar per strategy
    that judge ran, the measure pooled over the subsets (:func:`pooled_agreement`). A strategy keeps its colour in
    every group. The dotted line is 0.5: a judge that always names the first-shown response reaches 0.5
    agreement and 0 position consistency on LLMBar's labels."""
    pooled = stable(pooled_agreement(agreement, measures))  # the same numbers to 10 digits: the same bytes
    if pooled.empty:
        raise DHPError("The agreement table has no rows to plot.", "run the decompose_aggregate method first.")
    groups = list(dict.fromkeys(zip(pooled["judge"], pooled["mode"])))
    strategies = list(dict.fromkeys(pooled["strategy"]))
    cmap = plt.get_cmap("tab20" if len(strategies) > 10 else "tab10")
    colour = {s: cmap(i % cmap.N) for i, s in enumerate(strategies)}
    per_group = [pooled[(pooled["judge"] == j) & (pooled["mode"] == m)] for j, m in groups]
    # a page's column wide (7 in: labels >= 9 px there); many bars: their values turned upright to fit
    upright = len(pooled) + len(groups) > 24
    fig, axes = plt.subplots(len(measures), 1, figsize=(7.0, 2.3 * len(measures) + 1.2), sharex=True, squeeze=False,
                             layout="constrained")
    starts = np.cumsum([0] + [len(g) + 1 for g in per_group[:-1]])  # one empty slot between groups
    for ax, measure in zip(axes[:, 0], measures):
        for start, g in zip(starts, per_group):
            x = start + np.arange(len(g))
            values = g[measure].to_numpy(float)
            bars = ax.bar(x, np.nan_to_num(values), width=0.9, color=[colour[s] for s in g["strategy"]])
            # the value on every bar: a share of 0 draws no bar, and a panel of zeros looked empty, not measured
            ax.bar_label(bars, labels=["n/a" if np.isnan(v) else f"{v:.2f}" for v in values], fontsize=7, padding=1,
                         rotation=90 if upright else 0)
        ax.axhline(0.5, ls=":", color="grey", lw=1)
        ax.set(ylim=(0, 1.3 if upright else 1.12), ylabel="share of items")
        ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
        ax.set_title(_TITLES.get(measure, measure), fontsize=9)
    centres = [start + (len(g) - 1) / 2 for start, g in zip(starts, per_group)]
    axes[-1, 0].set_xticks(centres, [_group_label(j, m) for j, m in groups], fontsize=7)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[s]) for s in strategies]
    fig.legend(handles, strategies, title="strategy", fontsize=7, title_fontsize=8, loc="outside lower center",
               ncol=min(4, len(strategies)), frameon=False)
    fig.suptitle("LLMBar pairwise judging: items pooled over the subsets", fontsize=10)
    return fig
