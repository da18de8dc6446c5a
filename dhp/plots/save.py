"""Writing a figure: PNG and PDF with stable bytes, shown inline when a notebook kernel runs the code."""

from __future__ import annotations

import contextlib
import hashlib
import string
import sys
from pathlib import Path

from dhp.io import resolve

DPI = 150
# Matplotlib writes its version (PNG "Software", PDF "Producer"/"Creator") and the time (PDF "CreationDate") into
# every file: the same figure would give other bytes on another day or with another matplotlib. None leaves them out.
PNG_METADATA = {"Software": None}
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


def _notebook_kernel() -> bool:
    """True inside a Jupyter kernel (a notebook, papermill), not in a script or a terminal IPython."""
    ipython = sys.modules.get("IPython")  # never imported here just to ask
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def save_figure(fig, out_dir, name: str) -> list[Path]:
    """Write `fig` as <out_dir>/<name>.png and .pdf with stable bytes (no date, no software tag) and close it.

    In a notebook the PNG just written is shown in the cell's output first: the dhp.plots modules select the Agg
    backend, so a closed figure would otherwise never appear, and showing the file shows exactly what was saved.
    """
    import matplotlib.pyplot as plt

    out = resolve(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=DPI, metadata=PNG_METADATA, bbox_inches="tight")
    with _stable_font_subset_names():
        fig.savefig(paths[1], dpi=DPI, metadata=PDF_METADATA, bbox_inches="tight")
    if _notebook_kernel():
        from IPython.display import Image, display
        from PIL import Image as PILImage  # matplotlib's own dependency

        with PILImage.open(paths[0]) as im:  # shown at screen size (100 dpi), not at the file's 150 dpi
            width = round(im.width * 100 / DPI)
        display(Image(data=paths[0].read_bytes(), format="png", width=width))
    plt.close(fig)
    return paths
