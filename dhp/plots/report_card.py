"""Report-card figures: one page per judge (a panel per method) and a comparison across judges."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dhp.analysis.report_card import headline  # noqa: E402


def plot_report_card(card: pd.DataFrame, judge: str, mode: str):
    """One panel per method (in the card's order): every measure × scope (expert-weighted variants only in the
    table) as a horizontal bar with its interval where there is one; a method that was not run says so instead of
    showing a bar."""
    g = card[(card["judge"] == judge) & (card["mode"] == mode)]
    method_names = list(dict.fromkeys(card["method"]))
    fig, axes = plt.subplots(len(method_names), 1, figsize=(7.5, 2.0 * len(method_names)), squeeze=False)
    for ax, method in zip(axes[:, 0], method_names):
        m = g[(g["method"] == method) & ~g["measure"].str.endswith("_EW")]  # EW variants stay in the table
        ax.set_title(method.replace("_", " "), fontsize=9, loc="left")
        if m.empty or (m["status"] == "not run").all():
            ax.text(0.5, 0.5, "not run", ha="center", va="center", fontsize=11, color="grey", transform=ax.transAxes)
            ax.set_axis_off()
            continue
        labels = [f"{r.measure} · {r.scope}" for r in m.itertuples()]
        y = np.arange(len(m))
        vals = m["value"].fillna(0).to_numpy()
        ax.barh(y, vals, color=["#4C72B0" if s == "ok" else "#DDDDDD" for s in m["status"]])
        err = np.vstack([(m["value"] - m["lo"]).to_numpy(), (m["hi"] - m["value"]).to_numpy()])
        if np.isfinite(err).any():
            ax.errorbar(vals, y, xerr=np.where(np.isfinite(err), err, 0), fmt="none", ecolor="black", lw=0.8)
        for yi, r in zip(y, m.itertuples()):
            note = f"{r.value:.2f}" if r.status == "ok" else r.status
            ax.text(0.01, yi, f" {note}" + (f"  (n={r.n:.0f})" if np.isfinite(r.n) else ""), va="center",
                    fontsize=6, transform=ax.get_yaxis_transform())
        ax.set_yticks(y, labels, fontsize=6)
        ax.invert_yaxis()
    fig.suptitle(f"Report card: {judge} ({mode})", fontsize=10)
    fig.tight_layout()
    return fig


def save_report_card_pages(card: pd.DataFrame, out_dir, picks: dict[str, str]) -> list:
    """One page per judge × mode (report_card_<judge>-<mode>.png and .pdf, names made file-safe) and the
    comparison figure (report_card_comparison; ``picks``: method -> its headline measure); returns the paths."""
    from dhp.io import slug
    from dhp.plots import save_figure

    paths = []
    for judge, mode in sorted(set(zip(card["judge"], card["mode"]))):
        paths += save_figure(plot_report_card(card, judge, mode), out_dir, f"report_card_{slug(f'{judge}-{mode}')}")
    if len(card):
        paths += save_figure(plot_card_comparison(card, picks), out_dir, "report_card_comparison")
    return paths


def plot_card_comparison(card: pd.DataFrame, picks: dict[str, str]):
    """Judges × methods: each method's headline number (``picks``: method -> measure, see
    dhp.analysis.report_card.headline); cells of a method that was not run are grey and say so."""
    h = headline(card, picks)
    methods = [c for c in h.columns if c not in ("judge", "mode")]
    numeric = h[methods].apply(pd.to_numeric, errors="coerce")
    fig, ax = plt.subplots(figsize=(1.6 * len(methods) + 2, 0.6 * len(h) + 1.5))
    ax.imshow(np.ma.masked_invalid(numeric.to_numpy(dtype=float)), cmap="Blues", aspect="auto")
    for i in range(len(h)):
        for j, m in enumerate(methods):
            v = h.iloc[i][m]
            ax.text(j, i, v if isinstance(v, str) else f"{v:.2f}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(methods)), [m.replace("_", "\n") for m in methods], fontsize=7)
    ax.set_yticks(range(len(h)), [f"{j}\n({m})" for j, m in zip(h["judge"], h["mode"])], fontsize=7)
    ax.set_title("Judges side by side: " + " · ".join(f"{m} {picks[m] if isinstance(picks[m], str) else picks[m][0]}" for m in methods), fontsize=8)
    fig.tight_layout()
    return fig
