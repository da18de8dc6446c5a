"""Figures, one module per method (discernment today); each figure function takes result tables and
returns a matplotlib figure, and ``save_figure`` (dhp.plots.save) writes it as PNG and PDF with stable bytes and
shows it inline when a notebook runs the code."""

from dhp.plots.discernment import (
    all_figures, discernment_figures, plot_discernment_bars, plot_discernment_heatmap, plot_expert_weights, plot_response_styles,
    STAT_LABELS, read_result, response_style_figures, response_style_table,
)
from dhp.plots.save import save_figure, save_figures, show_figure

__all__ = [
    "STAT_LABELS", "all_figures", "discernment_figures", "plot_discernment_bars", "plot_discernment_heatmap", "plot_expert_weights",
    "plot_response_styles", "read_result", "response_style_figures", "response_style_table", "save_figure", "save_figures",
    "show_figure",
]
