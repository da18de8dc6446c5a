"""Does each lesson's prose say what its run says? Numbers a lesson's Markdown states as measurements — durations
("took 210.0 s", "4 minutes"), percentages ("47 %") and values given to two or more decimals ("κ 0.50") — must appear
in that notebook's own outputs (or be set in its code), read from an executed copy (scripts/nbval.py keeps them in
build/executed/).

    python scripts/lesson_prose.py [build/executed]     prints every stated number its run does not show; exit 1 if any

Numbers inside $math$ and `code` are left out (formulas and settings, not measurements), and so are settings and
thresholds ("95% interval", "p = 0.05", "above 10%") and a Markdown line ending in ``<!-- prose: not measured -->``
(a figure from elsewhere, e.g. a paper's, or a made-up example).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXECUTED = ROOT / "build" / "executed"
SKIP_MARK = "<!-- prose: not measured -->"

_NUM = r"[-−]?\d+(?:[.,]\d+)*"
#: a measurement in prose: a duration, a percentage, or a value with >= 2 decimals (ranges "50–89 s": both ends)
_STATED = re.compile(rf"(?P<a>{_NUM})(?:\s*[–-]\s*(?P<b>{_NUM}))?\s*(?P<unit>s\b|seconds?\b|min(?:utes?)?\b|%)"
                     rf"|(?<![\w.])(?P<d>[-−]?\d+\.\d{{2,}})(?![\w.])")
#: a number that is a setting or a threshold, not a measurement: "95% interval", "p = 0.05", "above 10%"
_SETTING_AFTER = re.compile(r"\s*(?:percentile|confidence|bootstrap|interval|level)", re.I)
_SETTING_BEFORE = re.compile(r"(?:\bp\s*[=<>≤]|alpha\s*=?|α\s*=?|\babove|\bbelow|\bunder|\bover|at most|at least)\s*$",
                             re.I)
_MATH_CODE = re.compile(r"\$\$.*?\$\$|\$[^$]*\$|```.*?```|`[^`]*`", re.S)


def _value(text: str) -> float:
    return float(text.replace("−", "-").replace(",", ""))


def stated_numbers(markdown: str) -> list[tuple[str, float, int]]:
    """(as written, value, decimals) of every measurement ``markdown`` states (module docstring)."""
    lines = [ln for ln in markdown.splitlines() if not ln.rstrip().endswith(SKIP_MARK)]
    text = _MATH_CODE.sub(" ", "\n".join(lines))
    out = []
    for m in _STATED.finditer(text):
        if _SETTING_AFTER.match(text, m.end()) or _SETTING_BEFORE.search(text[max(0, m.start() - 20):m.start()]):
            continue
        for g in ("a", "b", "d"):
            s = m.group(g)
            if s:
                dec = len(s.split(".")[1]) if "." in s else 0
                out.append((m.group(0).strip(), _value(s), dec))
    return out


def _output_text(cell: dict) -> str:
    parts = []
    for o in cell.get("outputs", []):
        parts.append("".join(o.get("text", "")))
        data = o.get("data", {})
        for kind in ("text/plain", "text/markdown", "text/html"):
            parts.append("".join(data.get(kind, "")))
    return "\n".join(parts)


def shown_numbers(nb: dict) -> list[float]:
    """Every number the notebook's outputs print, and every number its code sets."""
    text = "\n".join(_output_text(c) + "\n" + "".join(c.get("source", ""))
                     for c in nb.get("cells", []) if c.get("cell_type") == "code")
    return [_value(s) for s in re.findall(r"(?<![\w.])" + _NUM + r"(?:[eE][-+]?\d+)?", text.replace(",", ""))
            if re.fullmatch(r"[-−]?\d+(?:\.\d+)?", s)]


def unsupported(nb: dict) -> list[str]:
    """The measurements a notebook's Markdown states that none of its outputs (or code) shows, at the precision stated
    (210.0 stated: an output 210.04 supports it; 50 stated: 50.3 does, 210.0 does not)."""
    shown = shown_numbers(nb)
    has_outputs = any(c.get("outputs") for c in nb.get("cells", []) if c.get("cell_type") == "code")
    if not has_outputs:
        return []  # not executed: nothing to compare with
    bad = []
    for c in nb.get("cells", []):
        if c.get("cell_type") != "markdown":
            continue
        for written, value, dec in stated_numbers("".join(c.get("source", ""))):
            tol = 0.5 * 10 ** (-dec) + 1e-9
            if not any(abs(v - value) <= tol or abs(abs(v) - abs(value)) <= tol for v in shown):
                bad.append(f"{written!r} (no output shows {value:.{dec}f})")
    return bad


def check(folder: Path = EXECUTED) -> dict[str, list[str]]:
    """{notebook name: its unsupported numbers} for every executed lesson in ``folder``."""
    return {p.name: bad for p in sorted(Path(folder).glob("[0-9][0-9]_*.ipynb"))
            if (bad := unsupported(json.loads(p.read_text(encoding="utf-8"))))}


if __name__ == "__main__":
    found = check(Path(sys.argv[1]) if len(sys.argv) > 1 else EXECUTED)
    for name, bad in found.items():
        print(f"{name}: " + "; ".join(bad))
    sys.exit(1 if found else 0)
