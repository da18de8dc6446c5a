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


#: Bars (plus one gap per group) that fit a page's width (7 in) with an upright value label on each; more are drawn as
#: a grid (:func:`_agreement_grid`)
MAX_BARS = 24


#: Drawn width of a 7-pt character at 100 dpi, in pixels (DejaVu Sans averages ~0.6 em), and the axes' share of the
#: page's 7-inch width: what decides whether a bar chart's labels fit (:func:`_bars_fit`)
_CHAR_PX, _AXES_PX = 4.6, 0.85 * 700


def _bars_fit(per_group: list, groups: list) -> bool:
    """Whether a value label over each bar ("0.50": ~4 characters) and each judge's name under its group fit the
    page's width: the bar chart; else the grid."""
    slots = sum(len(g) + 1 for g in per_group)
    if slots > MAX_BARS + 1:
        return False
    px = _AXES_PX / max(slots, 1)
    if px < 4.5 * _CHAR_PX:
        return False
    widest = [max(len(line) for line in _group_label(j, m).splitlines()) for j, m in groups]
    return all(w * _CHAR_PX <= (len(g) + 1) * px for w, g in zip(widest, per_group))


def _agreement_grid(pooled: pd.DataFrame, measures, groups: list, strategies: list):
    """One panel per measure: rows judge × mode, columns strategies, each cell the pooled value written in it ("n/a"
    where it could not be computed, blank where the judge did not run that strategy)."""
    fig, axes = plt.subplots(len(measures), 1, figsize=(7.0, (0.24 * len(groups) + 0.6) * len(measures) + 1.6),
                             squeeze=False, layout="constrained")
    rows = {g: i for i, g in enumerate(groups)}
    cols = {s: j for j, s in enumerate(strategies)}
    fs = 7  # "0.50" at 7 pt is ~17 pt wide; 15 columns in the ~5-in axes leave ~24 pt each (6 pt drew 8 px on a page)
    for k, (ax, measure) in enumerate(zip(axes[:, 0], measures)):
        grid = np.full((len(groups), len(strategies)), np.nan)
        ran = np.zeros_like(grid, dtype=bool)
        for r in pooled.itertuples():
            i, j = rows[(r.judge, r.mode)], cols[r.strategy]
            grid[i, j], ran[i, j] = getattr(r, measure), True
        ax.imshow(np.ma.masked_invalid(grid), cmap="Blues", vmin=0, vmax=1.3, aspect="auto")
        for i in range(len(groups)):
            for j in range(len(strategies)):
                if ran[i, j]:
                    v = grid[i, j]
                    ax.text(j, i, "n/a" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=fs,
                            color="white" if np.isfinite(v) and v > 0.85 else "black")
        ax.set_yticks(range(len(groups)), [f"{j} ({m})" for j, m in groups], fontsize=7)
        ax.set_xticks(range(len(strategies)), strategies if k == len(measures) - 1 else [""] * len(strategies),
                      fontsize=7, rotation=90)
        ax.set_title(_TITLES.get(measure, measure), fontsize=8)
    fig.suptitle("LLMBar pairwise judging: share of items pooled over the subsets, per judge and strategy\n"
                 "(a judge that always names the first-shown response: agreement 0.50, position consistency 0)",
                 fontsize=8)
    return fig


def plot_agreement(agreement: pd.DataFrame, measures=AGREEMENT_MEASURES):
    """One panel per measure; in each, one bar group per judge × mode (in table order) and one bar per strategy
    that judge ran, the measure pooled over the subsets (:func:`pooled_agreement`). A strategy keeps its colour in
    every group. The dotted line is 0.5: a judge that always names the first-shown response reaches 0.5
    agreement and 0 position consistency on LLMBar's labels. More bars than fit a page's width with a value on each
    (MAX_BARS): the same numbers as a judge × strategy grid per measure, a value in each cell."""
    pooled = stable(pooled_agreement(agreement, measures))  # the same numbers to 10 digits: the same bytes
    if pooled.empty:
        raise DHPError("The agreement table has no rows to plot.", "run the decompose_aggregate method first.")
    groups = list(dict.fromkeys(zip(pooled["judge"], pooled["mode"])))
    strategies = list(dict.fromkeys(pooled["strategy"]))
    cmap = plt.get_cmap("tab20" if len(strategies) > 10 else "tab10")
    colour = {s: cmap(i % cmap.N) for i, s in enumerate(strategies)}
    per_group = [pooled[(pooled["judge"] == j) & (pooled["mode"] == m)] for j, m in groups]
    if not _bars_fit(per_group, groups):
        # too many bars for a value on each in a page's width, or a judge's name wider than its group (upright
        # labels overlapped, and so did the judges' names under their groups): the same numbers as a judge ×
        # strategy grid, one cell per value
        return _agreement_grid(pooled, measures, groups, strategies)
    fig, axes = plt.subplots(len(measures), 1, figsize=(7.0, 2.3 * len(measures) + 1.2), sharex=True, squeeze=False,
                             layout="constrained")
    starts = np.cumsum([0] + [len(g) + 1 for g in per_group[:-1]])  # one empty slot between groups
    for ax, measure in zip(axes[:, 0], measures):
        for start, g in zip(starts, per_group):
            x = start + np.arange(len(g))
            values = g[measure].to_numpy(float)
            bars = ax.bar(x, np.nan_to_num(values), width=0.9, color=[colour[s] for s in g["strategy"]])
            # the value on every bar: a share of 0 draws no bar, and a panel of zeros looked empty, not measured
            ax.bar_label(bars, labels=["n/a" if np.isnan(v) else f"{v:.2f}" for v in values], fontsize=7, padding=1)
        ax.axhline(0.5, ls=":", color="grey", lw=1)
        ax.set(ylim=(0, 1.12), ylabel="share of items")
        ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
        ax.set_title(_TITLES.get(measure, measure), fontsize=9)
    centres = [start + (len(g) - 1) / 2 for start, g in zip(starts, per_group)]
    axes[-1, 0].set_xticks(centres, [_group_label(j, m) for j, m in groups], fontsize=7)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[s]) for s in strategies]
    fig.legend(handles, strategies, title="strategy", fontsize=7, title_fontsize=8, loc="outside lower center",
               ncol=min(4, len(strategies)), frameon=False)
    fig.suptitle("LLMBar pairwise judging: items pooled over the subsets", fontsize=10)
    return fig
