"""Figures, one module per method (discernment today); each figure function takes result tables and
returns a matplotlib figure, and ``save_figure`` (dhp.plots.save) writes it as PNG and PDF with stable bytes and
shows it inline when a notebook runs the code.

The names below load their module on first use (PEP 562): matplotlib and seaborn take about a second to import,
which every process that imports dhp (each notebook kernel, each CLI call) would otherwise pay without drawing."""

from __future__ import annotations

import importlib

_HOME = {  # name -> the module that defines it
    **{n: "dhp.plots.discernment" for n in (
        "STAT_LABELS", "all_figures", "discernment_figures", "plot_discernment_bars", "plot_discernment_heatmap",
        "plot_expert_weights", "plot_response_styles", "read_result", "response_style_figures",
        "response_style_table")},
    **{n: "dhp.plots.save" for n in ("save_figure", "save_figures", "show_figure")},
}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'dhp.plots' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value  # looked up once
    return value


def __dir__():
    return sorted(set(globals()) | set(_HOME))
