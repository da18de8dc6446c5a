"""Writing a figure: PNG and PDF with stable bytes, shown inline when a notebook kernel runs the code."""

from __future__ import annotations

import sys
from pathlib import Path

from dhp.io import resolve

DPI = 150
# Matplotlib writes its version (PNG "Software", PDF "Producer"/"Creator") and the time (PDF "CreationDate") into
# every file: the same figure would give other bytes on another day or with another matplotlib. None leaves them out.
PNG_METADATA = {"Software": None}
PDF_METADATA = {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None}


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
    fig.savefig(paths[1], dpi=DPI, metadata=PDF_METADATA, bbox_inches="tight")
    if _notebook_kernel():
        from IPython.display import Image, display
        from PIL import Image as PILImage  # matplotlib's own dependency

        with PILImage.open(paths[0]) as im:  # shown at screen size (100 dpi), not at the file's 150 dpi
            width = round(im.width * 100 / DPI)
        display(Image(data=paths[0].read_bytes(), format="png", width=width))
    plt.close(fig)
    return paths
