"""Issue 28's "one runner": a notebook runs a method's work only through ``methods.run_stage`` and the public API of
the :class:`dhp.methods.Method` base class. A call on a method object to anything the base class does not declare
(e.g. a method's own ``collect_global``) would be a second, undeclared route around the runner and its manifest."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from dhp.methods import Method

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
BASE_API = {n for n in dir(Method) if not n.startswith("_")}


def _code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    # IPython magics are not Python: leave those lines out
    return "\n".join(line for c in cells if c["cell_type"] == "code"
                     for line in "".join(c["source"]).splitlines() if not line.lstrip().startswith(("%", "!")))


def method_calls(source: str) -> list[tuple[str, str]]:
    """(variable, attribute) of every call ``v.attr(...)`` where ``v`` was bound from ``methods.get(...)``."""
    tree = ast.parse(source)
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            targets = [t for tgt in node.targets for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])]
            for tgt, val in zip(targets, values):
                if (isinstance(tgt, ast.Name) and isinstance(val, ast.Call) and isinstance(val.func, ast.Attribute)
                        and val.func.attr == "get" and isinstance(val.func.value, ast.Name)
                        and val.func.value.id == "methods"):
                    bound.add(tgt.id)
    return [(n.func.value.id, n.func.attr) for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id in bound]


def test_the_check_sees_an_undeclared_stage_call():
    # the control: a notebook that called a method's own sub-stage directly would be caught
    calls = method_calls('m = methods.get("dual_perspective")\nx = m.collect_global(c)\ny = m.config(n=1)')
    assert [a for _, a in calls if a not in BASE_API] == ["collect_global"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_call_only_what_the_method_base_class_declares(path):
    stray = [f"{v}.{a}" for v, a in method_calls(_code(path)) if a not in BASE_API]
    assert not stray, f"{path.name} calls {stray}: run it as a declared stage through methods.run_stage"
