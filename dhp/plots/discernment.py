"""Paper figures: discernment bars (Fig. 4/5), D heatmap, response styles (Fig. 6), expert weights (Fig. 8).

Every figure is written as PNG and PDF with fixed DPI and no timestamps/software tags in the metadata, so
the same inputs give byte-identical files (figures can be committed and diffed).
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dhp.errors import DHPError  # noqa: E402
from dhp.io import read_table, resolve, slug  # noqa: E402
from dhp.perturb.catalog import PERTURBATIONS  # noqa: E402
from dhp.schema import LEVELS, ORIGINAL, CONTROL  # noqa: E402
from dhp.plots.save import save_figure, stable  # noqa: E402  (one writer for every figure)
from dhp.lazy import lazy_module  # noqa: E402

plt = lazy_module("matplotlib.pyplot")  # imported when a figure is drawn (dhp.lazy)
sns = lazy_module("seaborn")  # imported when a figure is drawn (dhp.lazy)

STAT_LABELS = {
    "D_avg": "$D_{avg}$",
    "D_avg_EW": "$D_{avg}^{EW}$",
    "D_min": "$D_{min}$",
    "D_min_EW": "$D_{min}^{EW}$",
}
STAT_CI = {
    "D_avg": ("D_avg_lo", "D_avg_hi"),
    "D_avg_EW": ("D_avg_EW_lo", "D_avg_EW_hi"),
    "D_min": ("D_min_lo", "D_min_hi"),
    "D_min_EW": ("D_min_EW_lo", "D_min_EW_hi"),
}
COLORS = ["#4C72B0", "#8DA0CB", "#DD8452", "#F2B880"]
#: Width of every figure in inches: a page's content column (~700-800 px at 1280 px) shows it at about its 100-dpi
#: size, so 7-pt labels stay >= 9 px on the page (dhp.plots.save writes the smallest font into the PNG).
PAGE_WIDTH = 7.0
JUDGE_WIDTH = 0.85  # inches a judge's bar group takes: its three-line label at 7 pt fits
PANEL_PAD = 0.3


def _judge_label(judge: str, mode: str, wrap: int | None = None) -> str:
    # Backend and model on separate lines, so neighbouring bar groups' labels do not overlap; ``wrap``: a model name
    # longer than that many characters breaks after a hyphen (a heatmap's narrow columns).
    kind, _, model = judge.partition(":")
    if wrap and model:
        lines = [""]
        for part in re.split(r"(?<=-)", model):  # after each hyphen (textwrap keeps "smollm2-135m" whole)
            if lines[-1] and len(lines[-1]) + len(part) > wrap:
                lines.append("")
            lines[-1] += part
        model = "\n".join(lines)
    return f"{kind}:\n{model}\n({mode})" if model else f"{judge}\n({mode})"


def item_sets(scores: pd.DataFrame, dataset: str) -> dict[tuple[str, str], frozenset]:
    """(judge, mode) -> the set of items it scored on ``dataset`` (from the scores table)."""
    s = scores[scores["dataset"] == dataset]
    return {(str(j), str(m)): frozenset(g["item_id"].astype(str)) for (j, m), g in s.groupby(["judge", "mode"])}


def plot_discernment_bars(summary: pd.DataFrame, dataset: str, items: dict | None = None):
    """Paper Fig. 4/5 for one dataset: grouped bars of D_avg, D_avg^EW, D_min, D_min^EW per judge × mode.

    ``items`` ((judge, mode) -> the items it was measured on, :func:`item_sets`): judges stand side by side only
    when measured on the same items — one panel per item set, its n in the title (D grows with n, so D at n = 100
    beside D at n = 10 would compare the sample sizes, not the judges). Without ``items`` one panel, and the title
    says that n is not known. Error bars are the bootstrap 95% intervals when the summary has them; the red line is
    D = 1 (p = 0.05).
    """
    s = stable(summary[summary["dataset"] == dataset]).sort_values(["judge", "mode"])
    if s.empty:
        raise DHPError(f"No summary rows for dataset {dataset!r}.", "run notebook 03 for that dataset first.")
    keys = list(zip(s["judge"].astype(str), s["mode"].astype(str)))
    if items:
        sets = [items.get(k) for k in keys]
        groups = list(dict.fromkeys(sets))  # first-seen order
        groups.sort(key=lambda g: -len(g) if g is not None else 1)
    else:
        sets, groups = [None] * len(s), [None]
    # Small multiples that fit a page's column (7 in: at 150 dpi shown 700 px wide, 7-pt labels render at ~10 px):
    # panels sized by their judges, packed into rows left to right; y shared by every panel.
    widths = [max(1.5, PANEL_PAD + JUDGE_WIDTH * sum(x == g for x in sets)) for g in groups]  # 1.5: its title
    rows: list[list[int]] = []
    for k, w in enumerate(widths):
        if rows and sum(widths[i] for i in rows[-1]) + w <= PAGE_WIDTH - 0.5:
            rows[-1].append(k)
        else:
            rows.append([k])
    units = 100  # the grid's columns: a panel spans its share of the page width
    fig = plt.figure(figsize=(PAGE_WIDTH, 2.6 * len(rows) + 1.0), layout="constrained")
    gs = fig.add_gridspec(len(rows), units)
    axes = []
    for r, row in enumerate(rows):
        start = 0
        for k in row:
            span = max(1, round(units * widths[k] / max(PAGE_WIDTH - 0.5, sum(widths[i] for i in row))))
            ax = fig.add_subplot(gs[r, start:min(units, start + span)], sharey=axes[0][0] if axes else None)
            if start:
                ax.tick_params(labelleft=False)
            start += span
            axes.append((ax, groups[k]))
    for ax, g in axes:
        sub = s[[x == g for x in sets]]
        _bars(ax, sub)
        if items:
            ax.set_title(f"same {len(g)} items (n = {len(g)})" if g is not None else "items unknown (n = ?)",
                         fontsize=8)
    for r, row in enumerate(rows):  # the y label once a row
        axes[sum(len(x) for x in rows[:r])][0].set_ylabel("D = log$_{0.05}$ p", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, ncol=5, loc="outside lower center", frameon=False)
    note = ("judges side by side only on the same items; n in each panel" if items
            else "n per judge not known: judges may rest on different items")
    fig.suptitle(f"DHP discernment — {dataset} ({note})", fontsize=9)
    return fig


def _bars(ax, s: pd.DataFrame) -> None:
    labels = [_judge_label(j, m) for j, m in zip(s["judge"], s["mode"])]
    x = np.arange(len(s))
    width = 0.8 / len(STAT_LABELS)
    for k, (stat, lab) in enumerate(STAT_LABELS.items()):
        v = s[stat].to_numpy(float)
        lo_c, hi_c = STAT_CI[stat]
        yerr = None
        if lo_c in s and hi_c in s and np.isfinite(s[lo_c].to_numpy(float)).any():
            lo, hi = s[lo_c].to_numpy(float), s[hi_c].to_numpy(float)
            yerr = np.vstack([np.clip(v - lo, 0, None), np.clip(hi - v, 0, None)])
            yerr = np.nan_to_num(yerr)
        ax.bar(x + (k - 1.5) * width, np.nan_to_num(v), width, label=lab, color=COLORS[k],
               yerr=yerr, capsize=2, error_kw={"elinewidth": 0.8})  # fmt: skip
    ax.axhline(1.0, color="red", lw=1.2, ls="-", label="D = 1 (p = 0.05)")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_xlim(-0.6, len(s) - 0.4)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(axis="y", alpha=0.3)


def plot_discernment_heatmap(discernment: pd.DataFrame, dataset: str, value: str = "D"):
    """Judge × perturbation heatmap of D (or D_EW) for one dataset; cells below 1 are issues it misses.

    Columns are ordered by level (character, word, sentence) then the control last.
    """
    d = stable(discernment[discernment["dataset"] == dataset])
    if d.empty:
        raise DHPError(f"No discernment rows for dataset {dataset!r}.", "run notebook 03 for that dataset first.")
    d["judge_mode"] = [_judge_label(j, m, wrap=9) for j, m in zip(d["judge"], d["mode"])]
    d["column"] = [f"{p}/{s}" if s not in ("single", "none") else p for p, s in zip(d["perturbation"], d["severity"])]
    order = {lv: i for i, lv in enumerate(LEVELS)}
    d["_o"] = [order.get(lv, len(LEVELS)) + (10 if p == CONTROL else 0) for lv, p in zip(d["level"], d["perturbation"])]
    cols = d.sort_values(["_o", "perturbation", "severity"])["column"].drop_duplicates().tolist()
    # perturbations down, judges across: the long list runs down the page, so the figure fits a column's width
    grid = d.pivot_table(index="column", columns="judge_mode", values=value, aggfunc="first").reindex(index=cols)
    width = min(PAGE_WIDTH, 2.6 + 0.75 * grid.shape[1])
    fig, ax = plt.subplots(figsize=(width, max(2.5, 0.26 * len(grid) + 1.9)))
    vmax = max(2.0, float(np.nanmax(grid.to_numpy())) if np.isfinite(grid.to_numpy()).any() else 2.0)
    sns.heatmap(grid, ax=ax, cmap="RdBu", center=1.0, vmin=0, vmax=vmax, annot=True, fmt=".2f",
                annot_kws={"fontsize": 7}, cbar_kws={"label": f"{value} (1 means p = 0.05)"}, linewidths=0.5)  # fmt: skip
    ax.set_ylabel("")
    ax.set_xlabel("")
    ax.set_title(f"{value} per perturbation/severity (by level, control last) and judge — {dataset}", fontsize=9)
    ax.tick_params(labelsize=7)
    plt.setp(ax.get_xticklabels(), rotation=0)
    plt.setp(ax.get_yticklabels(), rotation=0)
    ax.figure.axes[-1].tick_params(labelsize=7)  # the colour bar
    ax.figure.axes[-1].yaxis.label.set_size(8)
    fig.tight_layout()
    return fig


def response_style_table(scores: pd.DataFrame, dataset: str, perturbation: str, severity: str | None = None) -> pd.DataFrame:
    """Per judge × mode × item: metric-averaged score on the original and on the perturbed text.

    Columns: judge, mode, item_id, original, perturbed. Items lacking either side are dropped.
    `severity=None` picks the first severity present for the perturbation (sorted).
    """
    s = scores[scores["dataset"] == dataset]
    sev_all = sorted(s.loc[s["perturbation"] == perturbation, "severity"].unique())
    if not sev_all:
        raise DHPError(f"No scores for perturbation {perturbation!r} on {dataset!r}.",
                       f"choose one of {sorted(set(s['perturbation']) - {ORIGINAL})}.")  # fmt: skip
    severity = severity or sev_all[0]
    key = ["judge", "mode", "item_id"]
    o = s[s["perturbation"] == ORIGINAL].groupby(key)["score"].mean().rename("original")
    p = s[(s["perturbation"] == perturbation) & (s["severity"] == severity)].groupby(key)["score"].mean().rename("perturbed")
    return pd.concat([o, p], axis=1).dropna().reset_index()


def plot_response_styles(scores: pd.DataFrame, dataset: str, perturbation: str = "fictional_entities",
                         severity: str | None = None, human: pd.Series | None = None):  # fmt: skip
    """Paper Fig. 6: per judge, distributions of metric-averaged scores on originals vs perturbed texts.

    Title ρ: Pearson correlation of the judge's original-text scores with `human` (item_id -> human score)
    when given, as in the paper; otherwise between its original and perturbed scores of the same items.
    Different shapes with the same ordering are response styles; the Wilcoxon test only sees the ordering.
    """
    t = stable(response_style_table(scores, dataset, perturbation, severity))
    groups = list(t.groupby(["judge", "mode"], sort=True))
    if not groups:
        raise DHPError(f"No paired scores for {perturbation!r} on {dataset!r}.", "check that notebook 02 scored both sides.")
    n = len(groups)
    # at most two panels a row: the figure fits a page's column (PAGE_WIDTH) with its labels >= 9 px there
    ncols = min(n, 2)
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(PAGE_WIDTH if n > 1 else 3.8, 2.6 * nrows + 0.5), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, ((judge, mode), g) in zip(axes.flat, groups):
        long = pd.concat([
            pd.DataFrame({"score": g["original"], "text": "original"}),
            pd.DataFrame({"score": g["perturbed"], "text": perturbation}),
        ], ignore_index=True)  # fmt: skip
        bins = np.histogram_bin_edges(long["score"].to_numpy(float), bins=min(15, max(5, len(g) // 2)))
        sns.histplot(long, x="score", hue="text", bins=bins, stat="density", element="step", common_norm=False,
                     palette=["#4C72B0", "#C44E52"], ax=ax, alpha=0.35)  # fmt: skip
        if human is not None:
            h = g["item_id"].map(human)
            ok = h.notna()
            rho, what = stable(_pearson(g.loc[ok, "original"], h[ok])), "ρ vs human"
        else:
            rho, what = stable(_pearson(g["original"], g["perturbed"])), "ρ(orig, pert)"
        ax.set_title(f"{judge} ({mode})\n{what} = {rho:.2f}", fontsize=8)
        ax.set_xlabel("metric-averaged score", fontsize=8)
        ax.set_ylabel("density", fontsize=8)
        ax.tick_params(labelsize=7)
        if ax.get_legend() is not None:
            plt.setp(ax.get_legend().get_texts(), fontsize=7)
            ax.get_legend().get_title().set_fontsize(7)
    fig.suptitle(f"Response styles — {dataset}: original vs {perturbation}", fontsize=10)
    fig.tight_layout()
    return fig


def _pearson(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or np.std(a) == 0 or np.std(b) == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def plot_expert_weights(ew: pd.DataFrame, label: str = "project default mapping (not the paper's survey)"):
    """Paper Fig. 8: one heatmap per task, perturbations × metrics, cell = expert weight."""
    ew = stable(ew)
    tasks = [t for t in ("summarization", "story_completion", "question_answering", "translation") if t in set(ew["task"])]
    tasks += sorted(set(ew["task"]) - set(tasks))
    ncols = min(2, len(tasks))  # two heatmaps a row: the figure fits a page's column
    nrows = -(-len(tasks) // ncols)
    n_pert = ew.groupby("task")["perturbation"].nunique().max() if len(ew) else 1
    fig, axes = plt.subplots(nrows, ncols, figsize=(PAGE_WIDTH, nrows * (0.2 * n_pert + 1.6) + 0.4), squeeze=False)
    for ax in axes.flat[len(tasks):]:
        ax.set_visible(False)
    for ax, task in zip(axes.flat, tasks):
        g = ew[ew["task"] == task]
        grid = g.pivot(index="perturbation", columns="metric", values="weight")
        grid = grid.reindex(index=list(dict.fromkeys(g["perturbation"])), columns=list(dict.fromkeys(g["metric"])))
        sns.heatmap(grid, ax=ax, cmap="Blues", vmin=0, vmax=1, annot=True, fmt=".2f", cbar=False,
                    annot_kws={"fontsize": 7}, linewidths=0.5)  # fmt: skip
        ax.set_title(task.replace("_", " "), fontsize=9)
        ax.set_xlabel("")
        ax.set_ylabel("")
        ax.tick_params(labelsize=7)
        left = axes.flat[list(axes.flat).index(ax) - 1] if ax.get_subplotspec().colspan.start else None
        if left is not None and [t.get_text() for t in left.get_yticklabels()] == list(grid.index):
            ax.set_yticklabels([])  # the same perturbations as its left neighbour: named once
        plt.setp(ax.get_xticklabels(), rotation=35, ha="right")
    fig.suptitle(f"Expert weights EW — {label}", fontsize=10)
    fig.tight_layout()
    return fig


def discernment_figures(summary: pd.DataFrame, discernment: pd.DataFrame, ew: pd.DataFrame | None = None,
                        scores: pd.DataFrame | None = None) -> dict:
    """The bar chart and heatmap of every dataset (and the expert-weight figure if `ew` is given): name -> figure.
    ``scores``: the scores table, which says which items each judge was measured on (bars side by side only on the
    same items, n shown)."""
    figs = {}
    for ds in sorted(summary["dataset"].unique()):
        # a dataset name may be a user's text (dhp.datasets.load_custom): it is named in files through slug only
        figs[f"discernment_{slug(ds)}"] = plot_discernment_bars(summary, ds, item_sets(scores, ds) if scores is not None
                                                                else None)
        figs[f"heatmap_D_{slug(ds)}"] = plot_discernment_heatmap(discernment, ds)
    if ew is not None:  # the weights DHP's discernment uses: its family's perturbations (Fig. 8), not other methods'
        dhp_family = [n for n, p in PERTURBATIONS.items() if p.family == "dhp"]
        figs["expert_weights"] = plot_expert_weights(ew[ew["perturbation"].isin(dhp_family)])
    return figs


def all_figures(summary: pd.DataFrame, discernment: pd.DataFrame, figures_dir, ew: pd.DataFrame | None = None,
                scores: pd.DataFrame | None = None) -> list[Path]:
    """Write :func:`discernment_figures` to ``figures_dir`` (PNG + PDF each)."""
    paths: list[Path] = []
    for name, fig in discernment_figures(summary, discernment, ew, scores).items():
        paths += save_figure(fig, figures_dir, name)
    return paths


def response_style_figures(scores: pd.DataFrame, figures_dir, dataset: str | None = None,
                           perturbation: str = "fictional_entities", severity: str | None = None) -> list[Path]:
    """Write the response-style figure for `dataset` (None: every dataset in `scores`). A dataset that
    lacks `perturbation` (e.g. no entity could be replaced) uses its first perturbation in name order."""
    paths: list[Path] = []
    for ds in [dataset] if dataset else sorted(scores["dataset"].unique()):
        present = sorted(set(scores.loc[scores["dataset"] == ds, "perturbation"]) - {"original", "control"})
        if not present:
            raise DHPError(f"The scores of dataset {ds!r} have no perturbed rows.",
                           "judge the perturbed table of notebook 01, not the originals alone.")
        pert = perturbation if perturbation in present else present[0]
        paths += save_figure(plot_response_styles(scores, ds, pert, severity), figures_dir,
                             f"response_styles_{slug(ds)}")
    return paths


def read_result(directory, name: str) -> pd.DataFrame:
    """Read table `name` (scores, discernment, summary) from a run or results folder: parquet, else CSV."""
    d = resolve(directory)
    f = d / f"{name}.parquet"
    if not f.exists():
        f = d / f"{name}.csv"
    producer = "notebook 02_judge.ipynb" if name == "scores" else "notebook 03_discernment.ipynb"
    return read_table(f, f"{name} table", producer)
