"""Report-card figures: one page per judge (a panel per method) and a comparison across judges."""

from __future__ import annotations

import math
import textwrap

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dhp.analysis.report_card import headline, standings  # noqa: E402
from dhp.controls import judge_kind  # noqa: E402
from dhp.io import slug  # noqa: E402
from dhp.plots.save import save_figures, stable  # noqa: E402
from dhp.lazy import lazy_module  # noqa: E402

plt = lazy_module("matplotlib.pyplot")  # imported when a figure is drawn (dhp.lazy)
mtransforms = lazy_module("matplotlib.transforms")  # imported when a figure is drawn (dhp.lazy)


MAX_ROWS = 12
PAGE_WIDTH = 7.0  # inches: a page's column shows it at about 100 dpi, 7-pt labels >= 9 px (dhp.plots.save)  # rows drawn per method panel; the rest are in report_card.csv


def _method_panel(ax, m: pd.DataFrame, method: str) -> None:
    """One method's rows as dots with their intervals; the number (or why there is none) and n in a column right of
    the axes, so no label overlaps a dot or a whisker."""
    more = len(m) - MAX_ROWS
    shown = f" ({MAX_ROWS} of {len(m)} rows; all in report_card.csv)" if more > 0 else ""
    ax.set_title(method.replace("_", " ") + shown, fontsize=9, loc="left")
    if m.empty or (m["status"] == "not run").all():
        ax.text(0.5, 0.5, "not run", ha="center", va="center", fontsize=10, color="grey", transform=ax.transAxes)
        ax.set_axis_off()
        return
    m = m.head(MAX_ROWS)
    ok = (m["status"] == "ok").to_numpy()
    y = np.arange(len(m))
    for yi, r in zip(y, m.itertuples()):
        note = f"{r.value:.3g}" if r.status == "ok" else r.status
        ax.text(1.02, yi, note + (f"  (n={r.n:.0f})" if np.isfinite(r.n) else ""), va="center", fontsize=7,
                transform=ax.get_yaxis_transform(), color="black" if r.status == "ok" else "#8A4B08")
    ax.set_yticks(y, [f"{r.measure} · {r.scope}" for r in m.itertuples()], fontsize=7)
    ax.set_ylim(len(m) - 0.5, -0.5)
    if ok.any():
        v = m["value"].to_numpy(float)
        lo = np.where(np.isfinite(m["lo"].to_numpy(float)), v - m["lo"].to_numpy(float), 0)
        hi = np.where(np.isfinite(m["hi"].to_numpy(float)), m["hi"].to_numpy(float) - v, 0)
        ax.errorbar(v[ok], y[ok], xerr=np.vstack([lo[ok], hi[ok]]), fmt="o", ms=4, color="#1F4E8C", ecolor="#333333",
                    lw=0.9, capsize=2)
        finite = np.concatenate([v[ok], m["lo"].to_numpy(float)[ok], m["hi"].to_numpy(float)[ok]])
        finite = finite[np.isfinite(finite)]
        pad = max(0.05, 0.08 * float(np.ptp(finite))) if len(finite) else 0.1
        ax.set_xlim(float(finite.min()) - pad, float(finite.max()) + pad)
    else:
        ax.set_xticks([])
        ax.text(0.5, 0.5, "no number to draw: see the right column", ha="center", va="center", fontsize=7,
                color="grey", transform=ax.transAxes)
    ax.tick_params(axis="x", labelsize=7)


def _standing_panel(ax, standing: pd.DataFrame) -> None:
    """Where the judge stands on each leaderboard view: its rank and cluster next to the best judge there."""
    ax.set_axis_off()
    ax.text(0.01, 1.0, "where this judge stands on the leaderboard (rank by value, cluster, best judge there)",
            fontsize=9, va="bottom", transform=mtransforms.blended_transform_factory(ax.figure.transFigure, ax.transAxes))
    lines = []
    for r in standing.head(MAX_ROWS).itertuples():
        where = (f"rank {r.rank:.0f} of {r.of}, cluster {r.cluster:.0f}" if isinstance(r.cluster, (int, float))
                 and np.isfinite(r.cluster) else str(r.cluster))
        value = f"{r.value:.3g}" if np.isfinite(r.value) else "—"
        scope = f"{r.scope}{' · ' + r.strategy if r.strategy else ''} · {r.measure}"
        best = f"{r.best_judge} ({r.best_mode}) {r.best_value:.3g}" if r.best_judge else "—"
        lines += textwrap.wrap(f"{scope}: {value}, {where}; best: {best}", 110, subsequent_indent="    ")
    if not lines:
        lines = ["not on the leaderboard: no view had another judge on the same units"]
    for i, line in enumerate(lines):
        # from the figure's left edge, not the axes' (the panels above leave room for their labels there)
        ax.text(0.01, 1 - (i + 1) / (len(lines) + 1), line, fontsize=7, va="center",
                transform=mtransforms.blended_transform_factory(ax.figure.transFigure, ax.transAxes))


def plot_report_card(card: pd.DataFrame, judge: str, mode: str, standing: pd.DataFrame | None = None):
    """One panel per method (in the card's order): every measure × scope (expert-weighted variants only in the table)
    as a dot with its interval, its number and n beside it; rows without a number say why; a method that was not run
    says so. With ``standing`` (dhp.analysis.report_card.standings) a last panel shows the judge's rank and cluster on
    every leaderboard view next to the best judge measured there."""
    card, standing = stable(card), (stable(standing) if standing is not None else None)  # same bytes everywhere
    g = card[(card["judge"] == judge) & (card["mode"] == mode)]
    method_names = list(dict.fromkeys(card["method"]))
    panels = [g[(g["method"] == m) & ~g["measure"].str.endswith("_EW")] for m in method_names]
    heights = [1.0 if p.empty or (p["status"] == "not run").all() else 0.7 + 0.22 * min(len(p), MAX_ROWS)
               for p in panels]
    if standing is not None:
        heights.append(0.6 + 0.32 * max(1, min(len(standing), MAX_ROWS)))  # a line may wrap once
    fig, axes = plt.subplots(len(heights), 1, figsize=(PAGE_WIDTH, sum(heights) + 0.8), squeeze=False, layout="constrained",
                             gridspec_kw={"height_ratios": heights})
    for ax, method, m in zip(axes[:, 0], method_names, panels):
        _method_panel(ax, m, method)
    if standing is not None:
        _standing_panel(axes[-1, 0], standing)
    fig.suptitle(f"Report card: {judge} ({mode})", fontsize=10)
    return fig


def save_report_card_pages(card: pd.DataFrame, out_dir, picks: dict, board: pd.DataFrame | None = None) -> list:
    """One page per judge × mode (report_card_<judge>-<mode>.png and .pdf, names made file-safe; with ``board``, the
    leaderboard, each page shows where the judge stands) and the comparison figure (report_card_comparison;
    ``picks``: method -> its headline measure); returns the paths."""
    pages = {}
    for judge, mode in sorted(set(zip(card["judge"], card["mode"]))):
        standing = standings(board, judge, mode) if board is not None else None
        pages[f"report_card_{slug(f'{judge}-{mode}')}"] = plot_report_card(card, judge, mode, standing)
    if len(card):
        pages["report_card_comparison"] = plot_card_comparison(card, picks, board)
    return save_figures(pages, out_dir)  # the demo's seven pages: written by two processes at once


#: The card measure of a method whose leaderboard view compares judges on common units: the comparison page shows the
#: leaderboard's value there (the units every judge of the view has), not each judge's own run size.
COMMON_UNIT_VIEWS = {"dhp": ("dhp", "D_avg")}


def _common_units(h: pd.DataFrame, counts: pd.DataFrame, board: pd.DataFrame | None, methods) -> str:
    """Replace, in place, the cells of COMMON_UNIT_VIEWS methods by the leaderboard's value on the view's common units
    (or the leaderboard's status for a judge it left out); returns a note for the title ("" when nothing replaced)."""
    if board is None or board.empty:
        return ""
    notes = []
    for method, (view, measure) in COMMON_UNIT_VIEWS.items():
        if method not in methods:
            continue
        b = board[(board["view"] == view) & (board["measure"] == measure)]
        if b.empty:
            continue
        scope = sorted(set(b["scope"]))[0]  # one dataset's view; the first one when there are several
        b = b[b["scope"] == scope].set_index(["judge", "mode"])
        for i in range(len(h)):
            key = (h.iloc[i]["judge"], h.iloc[i]["mode"])
            if key not in b.index or h.iloc[i][method] == "not run":
                continue
            r = b.loc[key]
            ok = r["status"] == "ok"
            h.iat[i, h.columns.get_loc(method)] = round(float(r["value"]), 3) if ok else str(r["status"])
            counts.iat[i, counts.columns.get_loc(method)] = float(r["n"]) if ok else math.nan
        notes.append(f"{method}: {measure} on the leaderboard's common units ({scope})")
    return "; ".join(notes)


#: Characters of a status or measure line that fit one cell of the comparison at 6-7 pt (a cell is ~1 inch wide)
CELL_CHARS = 14


def _wrap(text: str, width: int = CELL_CHARS, lines: int = 3) -> str:
    """``text`` in lines of at most ``width`` characters (a measure name breaks after its underscores, never inside
    a word part), at most ``lines`` of them (the last one ending in "…" when cut)."""
    out = [w.replace("_ ", "_") for w in textwrap.wrap(str(text).replace("_", "_ "), width, break_long_words=True)]
    if len(out) > lines:
        out = out[:lines - 1] + [out[lines - 1][:width - 1] + "…"]
    return "\n".join(out)


def _column_measure(measures: pd.Series, values: pd.Series, pick) -> str:
    """The measure a column's numbers show: the one most of its numeric cells use (ties: the method's preference
    order); the method's first pick when no cell has a number."""
    prefs = (pick,) if isinstance(pick, str) else tuple(pick)
    with_number = measures[values.notna()]
    if with_number.empty:
        return prefs[0]
    counts = with_number.value_counts()
    top = counts[counts == counts.max()].index
    return next((p for p in prefs if p in top), str(top[0]))


def plot_card_comparison(card: pd.DataFrame, picks: dict[str, str], board: pd.DataFrame | None = None):
    """Judges × methods: each method's headline number (``picks``: method -> measure, see
    dhp.analysis.report_card.headline) with the n behind it; a cell that is not ok (not run, n too small, no usable
    scores) shows its status, never a number. With ``board`` (leaderboard.csv), D is the leaderboard's, on the units
    every judge of its view shares (COMMON_UNIT_VIEWS)."""
    card, board = stable(card), (stable(board) if board is not None else None)  # same bytes on every machine
    h = headline(card, picks).astype(object)
    used = headline(card, picks, measures=True)  # the measure of each cell (a fallback one is named in it)
    counts = headline(card, picks, counts=True)
    methods = [c for c in h.columns if c not in ("judge", "mode")]
    common = _common_units(h, counts, board, methods)
    numeric = h[methods].apply(pd.to_numeric, errors="coerce")
    grid = numeric.to_numpy(dtype=float)
    # each column's header names the statistic its cells show: the measure most of its numbers are (a method's
    # first pick may be missing for every judge, e.g. human alignment's segment accuracy, and the cells then show
    # its fallback); a cell of another measure names its own
    shown = {m: _column_measure(used[m], numeric[m], picks[m]) for m in methods}
    fig, ax = plt.subplots(figsize=(min(PAGE_WIDTH, 1.05 * len(methods) + 2), 0.6 * len(h) + 1.7))
    ax.imshow(np.ma.masked_invalid(grid), cmap="Blues", aspect="auto")
    lo, hi = (np.nanmin(grid), np.nanmax(grid)) if np.isfinite(grid).any() else (0.0, 1.0)
    for i in range(len(h)):
        for j, m in enumerate(methods):
            v = h.iloc[i][m]
            if isinstance(v, str):  # a status: wrapped to the cell's width (CELL_CHARS), never past it
                label = _wrap(v)
            else:
                n = counts.iloc[i][m]
                label = f"{v:.2f}" + (f"\nn={int(n)}" if pd.notna(n) else "\nn=?")
                if used.iloc[i][m] != shown[m]:
                    label += "\n" + _wrap(f"({used.iloc[i][m]})", lines=2)
            dark = not isinstance(v, str) and hi > lo and (v - lo) / (hi - lo) > 0.6  # white text on dark cells
            ax.text(j, i, label, ha="center", va="center", fontsize=7,
                    color=("white" if dark else "black") if not isinstance(v, str) else "#8A4B08")
    # the method's name wrapped to a cell's width too: six long names side by side collide on one line
    ax.set_xticks(range(len(methods)), [_wrap(m.replace("_", " "), lines=2) + "\n" + _wrap(shown[m])
                                        for m in methods], fontsize=7)
    ax.xaxis.tick_top()
    ax.set_yticks(range(len(h)), [f"{j}\n({m} · {judge_kind(j, m)})" for j, m in zip(h["judge"], h["mode"])],
                  fontsize=7)
    title = "Judges side by side: each method's headline statistic (named over its column) and its n"
    title = "\n".join(textwrap.wrap(title, 95) + (textwrap.wrap(common, 95) if common else []))
    ax.set_title(title + "\nnot-ok cells show their status, never a number; controls and baselines are no "
                         "models", fontsize=8)
    fig.tight_layout()
    return fig
