"""Writing a figure: PNG and PDF with stable bytes, shown inline when a notebook kernel runs the code."""

from __future__ import annotations

import contextlib
import hashlib
import io
import string
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from dhp.io import resolve, slug

DPI = 150
# Matplotlib writes its version (PNG "Software", PDF "Producer"/"Creator") and the time (PDF "CreationDate") into
# every file: the same figure would give other bytes on another day or with another matplotlib. None leaves them out.
PNG_METADATA = {"Software": None}
#: PNG text key holding the smallest font of the figure in the PNG's own pixels (points × DPI / 72). A page showing
#: the PNG at width w renders its smallest label at min_font_px × w / (PNG width): the site check reads it from here.
MIN_FONT_KEY = "dhp:min_font_px"
PDF_METADATA = {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None}


@contextlib.contextmanager
def _stable_font_subset_names():
    """matplotlib names an embedded font subset ("BNZLTN+DejaVuSans") after Python's hash() of its glyphs (for some
    font types an object's id): name it after a sha256 of the glyphs instead, the same in every process."""
    from matplotlib.backends.backend_pdf import PdfFile

    original = PdfFile.__dict__.get("_get_subset_prefix")
    if original is None:  # a matplotlib without it (the lock pins one with it)
        yield
        return

    def prefix(charset) -> str:
        n = int.from_bytes(hashlib.sha256(repr(sorted(map(str, charset))).encode()).digest()[:8], "big")
        return "".join(string.ascii_uppercase[(n // 26**i) % 26] for i in range(6)) + "+"

    PdfFile._get_subset_prefix = staticmethod(prefix)
    try:
        yield
    finally:
        PdfFile._get_subset_prefix = original


#: Significant digits a figure's numbers keep (:func:`stable`).
STABLE_DIGITS = 10


def stable(x):
    """``x`` with every float rounded to STABLE_DIGITS significant digits: a table, a series, an array or a number.

    The tables a figure draws come from floating-point sums whose last bits depend on the BLAS and the CPU's
    summation order; drawn as they are, a value at a label's rounding boundary (0.125 as "0.12" or "0.13"), two tied
    judges' order, or a coordinate's last printed digit changes the PNG/PDF bytes from machine to machine. Rounded
    first, the same numbers to 10 digits give the same bytes. Every plotting function of dhp.plots applies it to the
    tables it is given."""
    if isinstance(x, pd.DataFrame):
        out = x.copy()
        for c in out.columns:
            if pd.api.types.is_float_dtype(out[c]):
                out[c] = stable(out[c].to_numpy())
        return out
    if isinstance(x, pd.Series):
        return pd.Series(stable(x.to_numpy()), index=x.index, name=x.name) if pd.api.types.is_float_dtype(x) else x
    a = np.asarray(x, dtype=float)
    # decimal rounding by formatting: exact for every magnitude (a scale factor overflows at 1e-300)
    out = np.array([float(f"{v:.{STABLE_DIGITS}g}") for v in a.ravel()], dtype=float).reshape(a.shape)
    return float(out) if np.ndim(x) == 0 else out


def min_font_px(fig) -> float:
    """The smallest font size among the texts the figure draws (titles, tick labels, legends, annotations), in pixels
    of the PNG save_figure writes. NaN for a figure without text."""
    from matplotlib.text import Text

    hidden = set()  # tick labels of an axes drawn without axes (set_axis_off) are not drawn
    for ax in fig.axes:
        if not ax.axison:
            hidden.update(map(id, ax.get_xticklabels() + ax.get_yticklabels()))
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
             and id(t) not in hidden and (t.axes is None or t.axes.get_visible())]
    return round(min(sizes) * DPI / 72, 2) if sizes else float("nan")


def _notebook_kernel() -> bool:
    """True inside a Jupyter kernel (a notebook, papermill), not in a script or a terminal IPython."""
    ipython = sys.modules.get("IPython")  # never imported here just to ask
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def figure_png(fig) -> bytes:
    """The PNG save_figure writes for ``fig`` (DPI, stable bytes, the ``dhp:min_font_px`` chunk), as bytes."""
    fig.canvas.draw()  # tick labels exist only once drawn
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={**PNG_METADATA, MIN_FONT_KEY: f"{min_font_px(fig):g}"},
                bbox_inches="tight")
    return buf.getvalue()


def _display_png(png: bytes) -> None:
    from IPython.display import Image, display
    from PIL import Image as PILImage  # matplotlib's own dependency

    with PILImage.open(io.BytesIO(png)) as im:  # shown at screen size (100 dpi), not at the file's 150 dpi
        width = round(im.width * 100 / DPI)
    display(Image(data=png, format="png", width=width))


def show_figure(fig) -> None:
    """Show ``fig`` in a notebook cell's output exactly as save_figure would (its PNG, carrying the min-font chunk
    the site's legibility check reads), without writing a file, and close it: for a figure a lesson shows but does
    not keep (a toy judge's, an interactive one's fallback)."""
    import matplotlib.pyplot as plt

    _display_png(figure_png(fig))
    plt.close(fig)


def save_figure(fig, out_dir, name: str) -> list[Path]:
    """Write `fig` as <out_dir>/<name>.png and .pdf with stable bytes (no date, no software tag) and close it.

    The PNG carries one text chunk, ``dhp:min_font_px`` (:data:`MIN_FONT_KEY`): the smallest font of the figure's
    visible texts in the PNG's pixels (points × 150 / 72). Shown at width w, its smallest label renders at
    ``min_font_px × w / png_width`` px (figures are drawn ≤ 7.2 in wide with fonts ≥ 7 pt: ≥ 9 px in a 700-px column).

    In a notebook the PNG just written is shown in the cell's output first: the dhp.plots modules select the Agg
    backend, so a closed figure would otherwise never appear, and showing the file shows exactly what was saved.
    """
    import matplotlib.pyplot as plt

    out = resolve(out_dir)
    paths = _write(fig, out, name)
    if _notebook_kernel():
        _display_png(paths[0].read_bytes())
    plt.close(fig)
    return paths


def _write(fig, out: Path, name: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    name = slug(name)  # whatever a caller passes (a dataset name of a user's file), it stays one file in `out`
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    paths[0].write_bytes(figure_png(fig))
    with _stable_font_subset_names():
        fig.savefig(paths[1], dpi=DPI, metadata=PDF_METADATA, bbox_inches="tight")
    return paths


#: Fewest figures save_figures splits over worker processes (rendering one costs ~0.2-0.4 s; a fork ~0.05 s)
PARALLEL_MIN_FIGURES = 6
_FORKED: list | None = None  # (name, figure) pairs as a forked worker inherits them


def _write_part(at: list[int], out: str) -> None:
    for i in at:
        _write(_FORKED[i][1], Path(out), _FORKED[i][0])


def save_figures(figures: dict, out_dir) -> list[Path]:
    """save_figure for every figure of ``figures`` (file name without suffix -> figure), in that order: the same
    files, written by up to two forked worker processes at once when there are PARALLEL_MIN_FIGURES or more (a
    leaderboard has 15-60 figures), each shown inline afterwards in a notebook; written here if a worker fails."""
    import concurrent.futures
    import multiprocessing
    import os

    import matplotlib.pyplot as plt

    global _FORKED
    out = resolve(out_dir)
    items = list(figures.items())
    workers = min(2, os.cpu_count() or 1)
    done = False
    if workers >= 2 and len(items) >= PARALLEL_MIN_FIGURES:
        out.mkdir(parents=True, exist_ok=True)
        _FORKED = items
        try:
            ctx = multiprocessing.get_context("fork")
            with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
                parts = [list(range(len(items)))[w::workers] for w in range(workers)]
                for f in [pool.submit(_write_part, part, str(out)) for part in parts]:
                    f.result()
            done = True
        except (OSError, ValueError, concurrent.futures.process.BrokenProcessPool):
            done = False  # written here instead
        finally:
            _FORKED = None
    paths = []
    for name, fig in items:
        if done:
            paths += [out / f"{slug(name)}.png", out / f"{slug(name)}.pdf"]
            if _notebook_kernel():
                _display_png(paths[-2].read_bytes())
            plt.close(fig)
        else:
            paths += save_figure(fig, out, name)
    return paths
