"""Paper figures: discernment bars (Fig. 4/5), D heatmap, response styles (Fig. 6), expert weights (Fig. 8).

Every figure is written as PNG and PDF with fixed DPI and no timestamps/software tags in the metadata, so
the same inputs give byte-identical files (figures can be committed and diffed).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from dhp.errors import DHPError  # noqa: E402
from dhp.io import read_table, resolve  # noqa: E402
from dhp.perturb.registry import PERTURBATIONS  # noqa: E402
from dhp.schema import LEVELS, ORIGINAL, CONTROL  # noqa: E402
from dhp.plots.save import save_figure  # noqa: E402  (one writer for every figure)

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


def _judge_label(judge: str, mode: str) -> str:
    # Backend and model on separate lines, so neighbouring bar groups' labels do not overlap.
    kind, _, model = judge.partition(":")
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
    s = summary[summary["dataset"] == dataset].sort_values(["judge", "mode"])
    if s.empty:
        raise DHPError(f"No summary rows for dataset {dataset!r}.", "run notebook 03 for that dataset first.")
    keys = list(zip(s["judge"].astype(str), s["mode"].astype(str)))
    if items:
        sets = [items.get(k) for k in keys]
        groups = list(dict.fromkeys(sets))  # first-seen order
        groups.sort(key=lambda g: -len(g) if g is not None else 1)
    else:
        sets, groups = [None] * len(s), [None]
    widths = [max(3.2, 1.6 * sum(x == g for x in sets) + 1.2) for g in groups]
    fig, axes = plt.subplots(1, len(groups), figsize=(sum(widths) + 1.8, 3.9), squeeze=False,
                             gridspec_kw={"width_ratios": widths}, sharey=True)
    for ax, g in zip(axes[0], groups):
        sub = s[[x == g for x in sets]]
        _bars(ax, sub)
        if items:
            ax.set_title(f"same {len(g)} items (n = {len(g)})" if g is not None else "items unknown (n = ?)",
                         fontsize=8)
    axes[0][0].set_ylabel("discernment score D = log$_{0.05}$ p")
    axes[0][-1].legend(fontsize=8, ncol=1, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    note = ("judges side by side only on the same items; n in each panel" if items
            else "n per judge not known: judges may rest on different items")
    fig.suptitle(f"DHP discernment — {dataset}\n({note})", fontsize=9)
    fig.tight_layout()
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
    ax.set_xlabel("judge (mode)")
    ax.grid(axis="y", alpha=0.3)


def plot_discernment_heatmap(discernment: pd.DataFrame, dataset: str, value: str = "D"):
    """Judge × perturbation heatmap of D (or D_EW) for one dataset; cells below 1 are issues it misses.

    Columns are ordered by level (character, word, sentence) then the control last.
    """
    d = discernment[discernment["dataset"] == dataset].copy()
    if d.empty:
        raise DHPError(f"No discernment rows for dataset {dataset!r}.", "run notebook 03 for that dataset first.")
    d["judge_mode"] = [f"{j} ({m})" for j, m in zip(d["judge"], d["mode"])]
    d["column"] = [f"{p}/{s}" if s not in ("single", "none") else p for p, s in zip(d["perturbation"], d["severity"])]
    order = {lv: i for i, lv in enumerate(LEVELS)}
    d["_o"] = [order.get(lv, len(LEVELS)) + (10 if p == CONTROL else 0) for lv, p in zip(d["level"], d["perturbation"])]
    cols = d.sort_values(["_o", "perturbation", "severity"])["column"].drop_duplicates().tolist()
    grid = d.pivot_table(index="judge_mode", columns="column", values=value, aggfunc="first").reindex(columns=cols)
    fig, ax = plt.subplots(figsize=(max(5, 0.75 * len(cols) + 3), max(2.5, 0.55 * len(grid) + 1.8)))
    vmax = max(2.0, float(np.nanmax(grid.to_numpy())) if np.isfinite(grid.to_numpy()).any() else 2.0)
    sns.heatmap(grid, ax=ax, cmap="RdBu", center=1.0, vmin=0, vmax=vmax, annot=True, fmt=".2f",
                annot_kws={"fontsize": 7}, cbar_kws={"label": f"{value} (1 means p = 0.05)"}, linewidths=0.5)  # fmt: skip
    ax.set_xlabel("perturbation / severity (by level; control last)")
    ax.set_ylabel("judge (mode)")
    ax.set_title(f"{value} per perturbation — {dataset}")
    plt.setp(ax.get_xticklabels(), rotation=45, ha="right")
    plt.setp(ax.get_yticklabels(), rotation=0)
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
    t = response_style_table(scores, dataset, perturbation, severity)
    groups = list(t.groupby(["judge", "mode"], sort=True))
    if not groups:
        raise DHPError(f"No paired scores for {perturbation!r} on {dataset!r}.", "check that notebook 02 scored both sides.")
    n = len(groups)
    # at most three panels a row: six judges in one row were 3044 px wide and unreadable at a page's width
    ncols = min(n, 3)
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 3.0 * nrows + 0.4), squeeze=False)
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
            rho, what = _pearson(g.loc[ok, "original"], h[ok]), "ρ vs human"
        else:
            rho, what = _pearson(g["original"], g["perturbed"]), "ρ(orig, pert)"
        ax.set_title(f"{judge} ({mode})\n{what} = {rho:.2f}", fontsize=9)
        ax.set_xlabel("metric-averaged score")
        ax.set_ylabel("density")
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
    tasks = [t for t in ("summarization", "story_completion", "question_answering", "translation") if t in set(ew["task"])]
    tasks += sorted(set(ew["task"]) - set(tasks))
    fig, axes = plt.subplots(1, len(tasks), figsize=(3.2 * len(tasks) + 1, 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        g = ew[ew["task"] == task]
        grid = g.pivot(index="perturbation", columns="metric", values="weight")
        grid = grid.reindex(index=list(dict.fromkeys(g["perturbation"])), columns=list(dict.fromkeys(g["metric"])))
        sns.heatmap(grid, ax=ax, cmap="Blues", vmin=0, vmax=1, annot=True, fmt=".2f", cbar=False,
                    annot_kws={"fontsize": 7}, linewidths=0.5)  # fmt: skip
        ax.set_title(task.replace("_", " "), fontsize=9)
        ax.set_xlabel("metric")
        ax.set_ylabel("perturbation" if ax is axes[0][0] else "")
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
        figs[f"discernment_{ds}"] = plot_discernment_bars(summary, ds, item_sets(scores, ds) if scores is not None
                                                          else None)
        figs[f"heatmap_D_{ds}"] = plot_discernment_heatmap(discernment, ds)
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
        paths += save_figure(plot_response_styles(scores, ds, pert, severity), figures_dir, f"response_styles_{ds}")
    return paths


def read_result(directory, name: str) -> pd.DataFrame:
    """Read table `name` (scores, discernment, summary) from a run or results folder: parquet, else CSV."""
    d = resolve(directory)
    f = d / f"{name}.parquet"
    if not f.exists():
        f = d / f"{name}.csv"
    producer = "notebook 02_judge.ipynb" if name == "scores" else "notebook 03_discernment.ipynb"
    return read_table(f, f"{name} table", producer)
