"""Importing dhp (every method registered, the CLI, the grid) loads no heavy library it has not used yet (dhp.lazy):
each notebook kernel and each `dhp` command paid ~1 s for scipy.stats, seaborn, matplotlib.pyplot and sklearn."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("scipy.stats", "seaborn", "matplotlib.pyplot", "sklearn")

_PROBE = """
import json, sys
import dhp.cli, dhp.grid, dhp.evaluate, dhp.leaderboard
from dhp import methods
methods.get("dhp")  # discovers every registered method
{use}
print(json.dumps([m for m in {heavy!r} if type(sys.modules.get(m)).__name__ == "module"]))
"""


def _loaded(use: str = "") -> list[str]:
    out = subprocess.run([sys.executable, "-c", _PROBE.format(use=use, heavy=HEAVY)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_dhp_loads_no_heavy_library_until_it_is_used():
    assert _loaded() == []
    # control: a statistic and a figure load theirs (the probe would see a module imported at the top)
    assert _loaded("from dhp.stats import wilcoxon; wilcoxon.sps.norm") == ["scipy.stats"]
    assert set(_loaded("from dhp.plots import discernment; discernment.sns.color_palette()")) >= {
        "seaborn", "matplotlib.pyplot"}


def test_a_stand_in_imports_its_module_once_at_first_use(tmp_path, monkeypatch):
    from dhp.lazy import lazy_module

    (tmp_path / "dhp_lazy_probe.py").write_text("import builtins\nbuiltins.dhp_lazy_probe_runs = "
                                                 "getattr(builtins, 'dhp_lazy_probe_runs', 0) + 1\nVALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "dhp_lazy_probe", raising=False)
    import builtins

    stand_in = lazy_module("dhp_lazy_probe")
    assert getattr(builtins, "dhp_lazy_probe_runs", 0) == 0  # nothing executed yet
    assert stand_in.VALUE == 42 and stand_in.VALUE == 42
    assert builtins.dhp_lazy_probe_runs == 1 and sys.modules["dhp_lazy_probe"].VALUE == 42
    assert lazy_module("dhp_lazy_probe") is sys.modules["dhp_lazy_probe"]  # imported: the module itself
    monkeypatch.delattr(builtins, "dhp_lazy_probe_runs")
    monkeypatch.delitem(sys.modules, "dhp_lazy_probe")

    from dhp.stats import segment  # a lazily resolved attribute the callers test for None

    assert segment._kendall_dis is sys.modules["scipy.stats._stats"]._kendall_dis
