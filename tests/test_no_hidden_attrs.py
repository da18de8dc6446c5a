"""Issue 28: run statistics, estimates and bootstrap draws travel as return values, never in DataFrame.attrs
(a channel no signature shows, which pandas copies through some operations and drops in others)."""

import ast
from pathlib import Path

DHP = Path(__file__).resolve().parent.parent / "dhp"


def attrs_uses(source: str, name: str = "<string>") -> list[str]:
    """Every ``<expr>.attrs`` in ``source`` (read or written), as "file:line"."""
    return [f"{name}:{node.lineno}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and node.attr == "attrs"]


def test_the_check_finds_attrs_read_and_written():
    control = ('def f(df, out):\n'
               '    out.attrs["judge_stats"] = {"calls": 1}\n'
               '    return df.attrs.get("bootstrap")\n')
    assert attrs_uses(control) == ["<string>:2", "<string>:3"]
    assert attrs_uses('def f(df):\n    return df.attributes, getattr(df, "stats")\n') == []


def test_no_module_of_dhp_uses_dataframe_attrs():
    files = sorted(DHP.rglob("*.py"))
    assert len(files) > 50  # the package, not an empty folder
    found = [use for f in files for use in attrs_uses(f.read_text(encoding="utf-8"), str(f.relative_to(DHP.parent)))]
    assert found == [], f"return the value explicitly instead (issue 28): {found}"
