"""WMT22 general-task test sets, de-en (document level) and zh-en (segment level) (paper App. A.4)."""

from __future__ import annotations



from dhp.errors import DHPError
from dhp.datasets.files import WMT_MIN_CHARS, _how_to_get, _lines, _wmt_files, dataset_pool


def _wmt_columns(files, pair):
    src_rel, ref_rel, doc_rel = _wmt_files(pair)
    src, ref, doc = (_lines(files[r]) for r in (src_rel, ref_rel, doc_rel))
    if not len(src) == len(ref) == len(doc):
        raise DHPError(f"WMT22 {pair} files have different line counts "
                       f"({len(src)}, {len(ref)}, {len(doc)}).", _how_to_get("wmt22_" + pair.replace("-", "_")))
    return src, ref, doc


@dataset_pool("wmt22_de_en")
def pool_de_en(files):
    """Document level: a document's segments joined by a space; reference A > 300 characters."""
    src, ref, doc = _wmt_columns(files, "de-en")
    docs: dict[str, list[int]] = {}
    for i, d in enumerate(doc):
        docs.setdefault(d.strip(), []).append(i)
    rows = []
    for d, idx in docs.items():
        reference = " ".join(ref[i].strip() for i in idx if ref[i].strip())
        if len(reference) > WMT_MIN_CHARS:
            rows.append({"item_id": d, "reference": reference,
                         "source": " ".join(src[i].strip() for i in idx if src[i].strip())})
    return rows


@dataset_pool("wmt22_zh_en")
def pool_zh_en(files):
    """Segment level: item_id is the 1-based line number (= SID in the WMT22 human scores)."""
    src, ref, _ = _wmt_columns(files, "zh-en")
    return [{"item_id": str(i + 1), "source": src[i].strip(), "reference": ref[i].strip()}
            for i in range(len(ref)) if len(ref[i].strip()) > WMT_MIN_CHARS]
