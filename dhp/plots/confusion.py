"""Figures of the criteria-confusion method (Hu et al. 2024): the attack × aspect drop heat-map with the
S_T / S_F cells outlined, the inter-aspect correlation matrix, the directional D per attack and the
description-type comparison; :func:`confusion_figures` draws them all from the method's result tables."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dhp.analysis.confusion import ASPECT_ORDER, ATTACK_ORDER, RUN_KEYS, mean_drop_table  # noqa: E402
from dhp.plots.save import stable  # noqa: E402
from dhp.lazy import lazy_module  # noqa: E402

plt = lazy_module("matplotlib.pyplot")  # imported when a figure is drawn (dhp.lazy)
sns = lazy_module("seaborn")  # imported when a figure is drawn (dhp.lazy)
mpatches = lazy_module("matplotlib.patches")  # imported when a figure is drawn (dhp.lazy)


def plot_drop_heatmap(cells: pd.DataFrame, description_type: str):
    """Mean score drop per attack (rows) × aspect (columns); S_T cells (should drop) get a solid outline,
    S_F cells (should not move) a dashed one, excluded cells none (the paper's Table 4 with its marks)."""
    table = mean_drop_table(cells, description_type)
    sets = cells[cells["description_type"] == description_type].set_index(["attack", "aspect"])["set"]
    fig, ax = plt.subplots(figsize=(1 + 0.6 * table.shape[1], 1 + 0.4 * table.shape[0]))
    lim = max(0.5, float(np.nanmax(np.abs(table.to_numpy()))) if table.notna().any().any() else 0.5)
    sns.heatmap(table, ax=ax, cmap="RdBu_r", center=0, vmin=-lim, vmax=lim, annot=True, fmt=".1f",
                annot_kws={"size": 7}, cbar_kws={"label": "mean drop (original − attacked)"})
    for i, attack in enumerate(table.index):
        for j, aspect in enumerate(table.columns):
            kind = sets.get((attack, aspect))
            if kind in ("S_T", "S_F"):
                ax.add_patch(mpatches.Rectangle((j + 0.05, i + 0.05), 0.9, 0.9, fill=False, lw=1.2, color="black",
                                       ls="-" if kind == "S_T" else "--"))
    ax.set_title(f"Score drop per attack and aspect ({description_type}); solid: S_T, dashed: S_F", fontsize=9)
    return fig


def plot_aspect_correlations(corr: pd.DataFrame, description_type: str):
    """Pearson correlation between aspects' scores (the paper's Figure 4 and 8–13)."""
    fig, ax = plt.subplots(figsize=(1 + 0.55 * corr.shape[1], 0.8 + 0.5 * corr.shape[0]))
    sns.heatmap(corr, ax=ax, cmap="vlag", vmin=-1, vmax=1, annot=True, fmt=".2f", annot_kws={"size": 7})
    ax.set_title(f"Inter-aspect correlation of scores ({description_type})", fontsize=9)
    return fig


def plot_directional_d(cells: pd.DataFrame, description_type: str):
    """Per attack: the directional D (log_0.05 p of the one-sided Wilcoxon) of its S_T cells, one dot per
    cell, bar = median; the dashed line is D = 1 (p = 0.05)."""
    st = cells[(cells["description_type"] == description_type) & (cells["set"] == "S_T")]
    order = [a for a in ATTACK_ORDER if a in set(st["attack"])]
    fig, ax = plt.subplots(figsize=(max(4, 0.45 * len(order) + 1), 3.2))
    if order:
        med = st.groupby("attack")["D"].median().reindex(order)
        ax.bar(range(len(order)), med.fillna(0).to_numpy(), color="#8DA0CB")
        sns.stripplot(data=st, x="attack", y="D", order=order, ax=ax, color="black", size=3)
        ax.set_xticks(range(len(order)), order, rotation=60, ha="right", fontsize=7)
    ax.axhline(1.0, ls="--", color="grey", lw=1)
    ax.set_xlabel("")
    ax.set_ylabel("directional D on S_T cells")
    ax.set_title(f"Does the targeted aspect drop? ({description_type})", fontsize=9)
    return fig


def plot_description_types(summary: pd.DataFrame):
    """The description-type comparison (the paper's Figures 14–18, as our statistics): per description type,
    the share of S_T cells with D > 1, the share of S_F cells shown invariant, and the confusion index."""
    measures = ["share_ST_D_gt_1", "share_SF_invariant", "confusion_index"]
    long = summary.melt(id_vars=["description_type"], value_vars=measures, var_name="measure", value_name="value")
    fig, ax = plt.subplots(figsize=(1.2 * summary["description_type"].nunique() + 3, 3))
    sns.barplot(data=long, x="description_type", y="value", hue="measure", ax=ax)
    ax.set_ylim(0, 1)
    ax.set_xlabel("description type")
    ax.set_ylabel("share")
    ax.set_title("Criteria confusion by description type", fontsize=9)
    return fig


def _slug(*parts) -> str:
    """A file-name part from judge, mode, instruction, description type ("embedded:smollm2-135m" -> "embedded-...")."""
    return "_".join(re.sub(r"[^A-Za-z0-9.-]+", "-", str(p)).strip("-") for p in parts)


def _correlation_matrix(correlations: pd.DataFrame) -> pd.DataFrame:
    """The long correlation rows of one judge × mode × instruction × description type as the square matrix."""
    present = set(correlations["aspect"])
    order = [a for a in ASPECT_ORDER if a in present] + sorted(present - set(ASPECT_ORDER))
    corr = correlations.pivot(index="aspect", columns="other_aspect", values="pearson_r").reindex(
        index=order, columns=order).astype(float)
    corr.index.name, corr.columns.name = "aspect", "aspect"
    return corr


def confusion_figures(cells: pd.DataFrame, summary: pd.DataFrame, correlations: pd.DataFrame) -> dict:
    """Every figure of the method's result tables (several judges, modes and instructions): per judge × mode ×
    instruction × description type with cells, the drop heat-map, the inter-aspect correlations and the directional
    D; per judge × mode × instruction with several description types, their comparison. Name -> figure."""
    cells, summary, correlations = stable(cells), stable(summary), stable(correlations)  # same bytes anywhere
    figs = {}
    for key, grp in cells.groupby(RUN_KEYS, sort=True):
        mine = correlations
        for k, v in zip(RUN_KEYS, key):
            mine = mine[mine[k] == v]
        for dtype in dict.fromkeys(grp["description_type"]):
            name = _slug(*key, dtype)
            figs[f"confusion_drops_{name}"] = plot_drop_heatmap(grp, dtype)
            corr = mine[mine["description_type"] == dtype]
            if len(corr):
                figs[f"confusion_correlations_{name}"] = plot_aspect_correlations(_correlation_matrix(corr), dtype)
            figs[f"confusion_directional_{name}"] = plot_directional_d(grp, dtype)
    for key, grp in summary.groupby(RUN_KEYS, sort=True):
        if grp["description_type"].nunique() > 1:
            figs[f"confusion_description_types_{_slug(*key)}"] = plot_description_types(grp)
    return figs
