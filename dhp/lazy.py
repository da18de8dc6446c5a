"""Heavy third-party modules imported on first use.

``sps = lazy_module("scipy.stats")`` at the top of a module binds a stand-in whose first attribute access imports
the real module (through Python's import system and its per-module lock, so two threads wait for one import); every
access is then answered by the real module. scipy.stats, seaborn and matplotlib.pyplot take over a second to import
together; every process that imports dhp paid it — each notebook kernel, each ``dhp`` command (``dhp data fetch``,
``dhp --help``), each CLI call of the tests — whether or not it computes a statistic or draws a figure. The import
lines stay at the top of their module (tests/test_import_placement.py)."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType


class _LazyModule(ModuleType):
    def __getattr__(self, attr: str):  # only for names the stand-in lacks: all of the real module's
        return getattr(importlib.import_module(self.__name__), attr)


def lazy_module(name: str) -> ModuleType:
    """The module ``name`` if it is imported already, else a stand-in that imports it when first used."""
    return sys.modules.get(name) or _LazyModule(name)
