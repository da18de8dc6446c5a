"""SumPubMed: the BACKGROUND section of text and abstract (paper App. A.1)."""

from __future__ import annotations

import re


from dhp.datasets.files import _read_text, dataset_pool


_HEADER = re.compile(r"[A-Z][A-Z &/-]+")


def sumpubmed_section(text: str, section: str = "BACKGROUND") -> str:
    """The body of an upper-case section (header on its own line) of a SumPubMed file.

    Paragraphs are joined with a newline; runs of spaces inside a line collapse to one.
    Returns "" when the section is absent.
    """
    lines = text.split("\n")
    try:
        start = [ln.strip() for ln in lines].index(section) + 1
    except ValueError:
        return ""
    body = []
    for ln in lines[start:]:
        if _HEADER.fullmatch(ln.strip()):
            break
        if ln.strip():
            body.append(" ".join(ln.split()))
    return "\n".join(body)


@dataset_pool("sumpubmed")
def pool(files):
    numbers = sorted({int(re.search(r"_(\d+)\.txt$", rel).group(1)) for rel in files})
    rows = []
    for n in numbers:
        src = sumpubmed_section(_read_text(files[f"sumpubmed/text/text_{n}.txt"]))
        ref = sumpubmed_section(_read_text(files[f"sumpubmed/abstract/abstract_{n}.txt"]))
        if src and ref:
            rows.append({"item_id": str(n), "source": src, "reference": ref})
    return rows
