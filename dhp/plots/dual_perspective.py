"""Dual-perspective figure: the global view's confusion matrices (human vs judge rating, per aspect) beside the local
view's accuracy for every pair of error counts (Hu et al. 2025, Figure 5)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402

from dhp.plots.save import stable  # noqa: E402
from dhp.lazy import lazy_module  # noqa: E402

plt = lazy_module("matplotlib.pyplot")  # imported when a figure is drawn (dhp.lazy)
sns = lazy_module("seaborn")  # imported when a figure is drawn (dhp.lazy)


def plot_dual_perspective(targets: pd.DataFrame, matrix: pd.DataFrame, judge: str):
    """One judge: a confusion matrix per aspect (agreed targets with a rating; n in the title) and the local pair
    matrix (accuracy for every pair of error counts i < j, with its n per cell)."""
    targets, matrix = stable(targets), stable(matrix)  # the same numbers to 10 digits: the same bytes anywhere
    t = targets[(targets["judge"] == judge) & targets["judge_rating"].notna()]
    m = matrix[matrix["judge"] == judge]
    aspects = sorted(set(targets.loc[targets["judge"] == judge, "aspect"]))
    n = len(aspects) + 1  # two panels a row: a page's column wide (7 in), labels >= 9 px there
    ncols = min(2, n)
    nrows = -(-n // ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(7.0 if ncols > 1 else 3.8, 3.4 * nrows + 0.3), squeeze=False)
    for ax in grid.flat[n:]:
        ax.set_visible(False)
    axes = [list(grid.flat[:n])]
    for ax, aspect in zip(axes[0], aspects):
        g = t[t["aspect"] == aspect]
        cm = pd.crosstab(g["human_rating"], g["judge_rating"]).reindex(index=range(1, 6), columns=range(1, 6),
                                                                        fill_value=0)
        sns.heatmap(cm, annot=True, fmt="d", cbar=False, ax=ax, cmap="Blues", annot_kws={"fontsize": 8})
        ax.set(title=f"{aspect}: n = {len(g)} rated", xlabel="judge rating", ylabel="human rating (all agree)")
    ax = axes[0][-1]
    if m.empty:
        ax.text(0.5, 0.5, "no chain pair with two scores", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    else:
        pm = m.pivot_table(index=["aspect", "errors_i"], columns="errors_j", values="accuracy")
        pn = m.pivot_table(index=["aspect", "errors_i"], columns="errors_j", values="n").reindex_like(pm)
        labels = pm.apply(lambda col: [f"{v:.2f}\nn={n:.0f}" if pd.notna(v) else "" for v, n in zip(col, pn[col.name])])
        sns.heatmap(pm, annot=labels, fmt="", vmin=0, vmax=1, cmap="RdBu", ax=ax, annot_kws={"fontsize": 7})
        ax.set(title="local: accuracy by error counts", xlabel="errors j", ylabel="aspect, errors i")
    fig.suptitle(judge, fontsize=9)
    fig.tight_layout()
    return fig
