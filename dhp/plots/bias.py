"""Figures of the bias method: per judge, the share of verdicts for the output shown first and the flip rate under
swap (and, given the length table, the length bias index), each with its interval, on one strategy's pooled LLMBar
pairs — the recorded judges, the live ones and the baselines on the same axis."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dhp.analysis.bias import LLMBAR_SCOPE  # noqa: E402
from dhp.analysis.decomposition import view_strategy  # noqa: E402
from dhp.errors import DHPError  # noqa: E402
from dhp.lazy import lazy_module  # noqa: E402
from dhp.plots.save import stable  # noqa: E402

plt = lazy_module("matplotlib.pyplot")  # imported when a figure is drawn (dhp.lazy)

__all__ = ["plot_bias", "PANELS"]

#: measure -> (title, the value of a judge without that bias: the reference line)
PANELS = {"prefer_first": ("share of verdicts for the output shown first", 0.5),
          "flip_rate": ("flip rate: the verdict changes when the outputs swap", 0.0),
          "length_bias": ("length bias: P(longer | gold longer) + P(longer | gold shorter) − 1", 0.0)}


def _rows(table: pd.DataFrame, strategy: str, scope: str) -> pd.DataFrame:
    vs = [view_strategy(s, p) for s, p in zip(table["strategy"].astype(str), table["protocol"].fillna("").astype(str))]
    return table[(np.array(vs) == strategy) & (table["subset"] == scope)]


def plot_bias(position: pd.DataFrame, length: pd.DataFrame | None = None, strategy: str = "Vanilla",
              scope: str = LLMBAR_SCOPE):
    """One panel per measure (prefer-first, flip rate, and with ``length`` the length bias index), one row per judge
    × mode on ``strategy`` (the leaderboard's strategy name: a live ``llmbar:Vanilla`` and the recorded Vanilla
    judges are both "Vanilla") in ``scope``: the value, its 95 % interval as a bar, n beside the judge. A judge with
    too few units has no dot, its reason instead. The dotted line: no bias."""
    pos = stable(_rows(position, strategy, scope))
    if pos.empty:
        raise DHPError(f"No position rows for strategy {strategy!r} in {scope!r}.",
                       f"pick one of {sorted({view_strategy(s, p) for s, p in zip(position['strategy'], position['protocol'].fillna(''))})}.")
    pos = pos.sort_values(["prefer_first", "judge"], na_position="first").reset_index(drop=True)
    panels = [("prefer_first", pos), ("flip_rate", pos)]
    if length is not None and len(length):
        ln = stable(_rows(length, strategy, scope)).set_index(["judge", "mode"])
        ln = ln.reindex(pd.MultiIndex.from_frame(pos[["judge", "mode"]])).reset_index()
        panels.append(("length_bias", ln))
    labels = [f"{j} ({m}), n={n}" for j, m, n in zip(pos["judge"], pos["mode"], pos["n_both"])]
    fig, axes = plt.subplots(1, len(panels), figsize=(7.0, 0.32 * len(pos) + 1.6),
                             sharey=True, squeeze=False, layout="constrained")
    y = np.arange(len(pos))
    for ax, (measure, t) in zip(axes[0], panels):
        title, ref = PANELS[measure]
        v, lo, hi = (t[c].to_numpy(float) for c in (measure, f"{measure}_lo", f"{measure}_hi"))
        baseline = t["mode"].astype(str).eq("baseline").to_numpy()
        for mask, colour in ((~baseline, "tab:blue"), (baseline, "tab:grey")):
            ax.errorbar(v[mask], y[mask], xerr=[np.nan_to_num(v - lo)[mask], np.nan_to_num(hi - v)[mask]],
                        fmt="o", color=colour, ms=4, capsize=2, lw=1)
        for yi, val, why in zip(y, v, t["status"].fillna("no row").astype(str)):
            if np.isnan(val):  # no number: say why where the dot would be
                ax.text(ref, yi, f" n/a: {why}", fontsize=7, va="center", color="tab:red")
        ax.axvline(ref, ls=":", color="grey", lw=1)
        ax.set_ylim(-0.7, len(pos) - 0.3)  # room for the first and last rows' reasons
        ax.set_title(title, fontsize=8, wrap=True)
        ax.set_xlim(-0.05 if ref == 0.5 or measure == "flip_rate" else -1.05, 1.05)
        ax.grid(axis="x", lw=0.3)
    axes[0, 0].set_yticks(y, labels, fontsize=7)
    fig.suptitle(f"Position and length bias, strategy {strategy}, {scope} (95 % intervals; grey: baselines)",
                 fontsize=9)
    return fig
