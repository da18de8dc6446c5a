"""One registry mechanism for every kind of extension: backends, perturbations, recorded-judgment sources, judge
protocols and pairwise strategies, methods, datasets.

A :class:`Registry` maps names to registered objects. It fills itself the first time it is read, by discovery:

- a package scan: every module of the kind's package (``dhp.backends``, ``dhp.perturb``, ``dhp.recorded``,
  ``dhp.judging``, ``dhp.methods``, ``dhp.datasets``) is imported, and each registers what it defines — so a new
  extension is one new file in that package;
- Python entry points of the group ``dhp.<kind>`` (e.g. ``dhp.backends``): an installed plug-in package names its
  module there (``[project.entry-points."dhp.backends"] echo = "my_plugin.echo"``) and is found the same way.

One rule for a duplicate name, for every kind: an entry's identity is the module that registers it plus the object
(``module.qualname``; a ``functools.partial`` by its function), so partials and lambdas are told apart by where
they are registered. The same identity registered again — a module reloaded, a notebook cell rerun — replaces
itself; any other is refused with a DHPError, partials and lambdas included. While registries discover (the package scan and the entry points), a
clash is not raised at once: the name is set aside as a conflict and only reading that name fails, with one message
naming both definitions, so a plug-in that clashes with an in-tree file breaks the command that needs the name, not
every command.

``python -m dhp extensions`` lists every registered extension of every kind (:func:`describe_all`).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
import sys
from importlib.metadata import entry_points
from typing import Any, Callable, Generic, Iterator, Mapping, TypeVar

from dhp.errors import DHPError

__all__ = ["Registry", "REGISTRIES", "origin_of", "describe_all", "registrar", "registering_module"]

T = TypeVar("T")

#: Every registry by kind, in the order ``python -m dhp extensions`` lists them.
REGISTRIES: dict[str, "Registry"] = {}


@functools.lru_cache(maxsize=1)
def _entry_points():
    # read once per process: scanning every installed distribution costs ~10 ms, and there are seven registries
    return entry_points()


def kind_article(kind: str) -> str:
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def origin_of(obj: Any) -> str:
    """Where an object was defined (``module.qualname``): what tells a redefinition from a clash. A
    ``functools.partial`` is named by its function (its arguments may change when a cell is rerun): with the
    registering module (:class:`Registry`), that is the identity."""
    if isinstance(obj, functools.partial):
        return f"functools.partial({origin_of(obj.func)})"
    target = obj if hasattr(obj, "__qualname__") else getattr(obj, "apply", None) or type(obj)
    if isinstance(target, functools.partial):
        return origin_of(target)
    module = getattr(target, "__module__", None) or "?"
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{module}.{name}"


#: Code objects of the helpers that register for their caller (``@perturbation``, ``register_backend``, ...): the
#: registering module is the first caller outside them and outside this module.
_REGISTRAR_CODES: set = set()
_DISCOVERING = [0]  # > 0 while a registry's discovery imports modules (clashes are set aside, not raised)


def registrar(fn: Callable) -> Callable:
    """Mark ``fn`` as a registering helper: the module that calls it is the one that registers."""
    _REGISTRAR_CODES.add(fn.__code__)
    return fn


def registering_module() -> str:
    """The module that registers: the first frame outside this module and the :func:`registrar` helpers."""
    f = sys._getframe(1)
    while f is not None and (f.f_code in _REGISTRAR_CODES or f.f_globals.get("__name__") == __name__):
        f = f.f_back
    return (f.f_globals.get("__name__") or "?") if f is not None else "?"


class Registry(Mapping[str, T], Generic[T]):
    """Registered objects of one ``kind`` by name, found by discovery (module docstring), in a stable order: those of
    the package's own modules by module name (then as registered), then the others as registered.

    ``kind``: what an entry is, in messages ("judge backend"); ``package``: the package whose modules are scanned;
    ``group``: the entry-point group (default ``dhp.<last part of package>``); ``fix``: how to register one, said in
    the unknown-name error. Read it as a mapping (discovery runs first); :meth:`add` registers, :meth:`lookup`
    gets one by name with the one unknown-name error."""

    def __init__(self, kind: str, package: str, group: str | None = None, fix: str = "",
                 show: Callable[[str, Any], str] | None = None) -> None:
        self.kind, self.package = kind, package
        self.show = show  # how help texts list an entry (default: its name)
        self.group = group or f"dhp.{package.rsplit('.', 1)[-1]}"
        self.fix = fix
        self._items: dict[str, T] = {}
        self._origins: dict[str, str] = {}
        self._registrants: dict[str, str] = {}
        self._conflicts: dict[str, list[str]] = {}
        self._rank: dict[str, tuple] = {}
        self._order: list[str] | None = None
        self._discovered = False
        REGISTRIES[kind] = self

    # ------------------------------------------------------------------ discovery
    def discover(self) -> None:
        """Import every module of the package and every module of the entry-point group (once)."""
        if self._discovered:
            return
        self._discovered = True  # first: a module imported below may read the registry while it registers
        _DISCOVERING[0] += 1
        try:
            self._discover()
        finally:
            _DISCOVERING[0] -= 1

    def _discover(self) -> None:
        pkg = importlib.import_module(self.package)
        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
            if not info.name.startswith("_"):
                module = f"{self.package}.{info.name}"
                try:
                    importlib.import_module(module)
                except DHPError:
                    self._discovered = False
                    raise
                except Exception as e:  # a broken extension file names itself, not the command that tripped on it
                    self._discovered = False
                    raise DHPError(f"{module} ({kind_article(self.kind)} module) fails to import: "
                                   f"{type(e).__name__}: {e}.", "fix that file or remove it.") from e
        for ep in _entry_points().select(group=self.group):
            try:
                ep.load()
            except DHPError as e:  # said once, with its own fix (not "... Fix: ... Fix: ...")
                raise DHPError(f"The plug-in {ep.name!r} ({ep.value}) of entry-point group {self.group!r} fails to "
                               f"load: {e.problem}", e.fix) from e
            except Exception as e:  # a broken plug-in names itself instead of failing somewhere unrelated
                raise DHPError(f"The plug-in {ep.name!r} ({ep.value}) of entry-point group {self.group!r} fails to "
                               f"load: {type(e).__name__}: {e}.", "fix or uninstall that package.") from e

    # ------------------------------------------------------------------ registering
    def add(self, name: str, obj: T, origin: str | None = None, module: str | None = None,
            registrant: str | None = None) -> T:
        """Register ``obj`` under ``name``; a name another definition holds is refused (one rule, every kind:
        identity is the registering module plus :func:`origin_of`)."""
        if not isinstance(name, str) or not name:
            raise DHPError(f"A {self.kind} needs a name, got {name!r}.", f"give the {self.kind} a non-empty name.")
        raw = origin or origin_of(obj)
        registrant = registrant or registering_module()
        # said where the registering module is not the definition's own (a partial, a function registered elsewhere)
        origin = raw if raw.startswith(registrant + ".") else f"{raw} (registered in {registrant})"
        if name in self._conflicts:
            self._conflicts[name].append(origin)
            return obj
        if name in self._items and (self._origins[name], self._registrants[name]) != (origin, registrant):
            clash = DHPError(f"A {self.kind} named {name!r} is already registered (by {self._origins[name]}); "
                             f"{origin} registers it again.",
                             f"give the new {self.kind} another name (python -m dhp extensions lists the names "
                             f"taken).")
            if not _DISCOVERING[0]:
                raise clash
            # found while discovering: the name is set aside; reading it says why (lookup), other names work
            self._conflicts[name] = [self._origins[name], origin]
            self._drop(name)
            return obj
        if name not in self._items:
            self._rank[name] = (*self._module_rank(module or raw.rpartition(".")[0]), len(self._rank))
        self._items[name] = obj
        self._origins[name] = origin
        self._registrants[name] = registrant
        self._order = None
        return obj

    def _conflict_error(self, name: str) -> DHPError:
        return DHPError(f"The {self.kind} name {name!r} is registered by {len(self._conflicts[name])} definitions: "
                        f"{'; '.join(self._conflicts[name])}.",
                        f"rename one of them (or uninstall the plug-in that clashes); python -m dhp extensions lists "
                        f"the names taken.")

    def conflicts(self) -> dict[str, list[str]]:
        """Names set aside because two definitions registered them during discovery -> those definitions."""
        self.discover()
        return {k: list(v) for k, v in self._conflicts.items()}

    def _module_rank(self, module: str) -> tuple:
        # The package's own modules first, in the scan's (name) order, whatever imported them first: the order of
        # the entries (e.g. the perturbed table's rows) must not depend on import order; then the others as added.
        inside = module.startswith(self.package + ".")
        return (0, module[len(self.package) + 1:].split(".")[0]) if inside else (1, "")

    def decorator(self, name: str, wrap: Callable[[Any], T] | None = None) -> Callable:
        """``@registry.decorator("name")``: register the decorated object (or ``wrap(obj)``); returns it unchanged."""
        def deco(obj):
            self.add(name, wrap(obj) if wrap else obj, origin_of(obj), registrant=registering_module())
            return obj

        return deco

    def remove(self, name: str, default: Any = None) -> T | None:
        """Unregister ``name`` (tests and notebooks that clean up after themselves)."""
        self._conflicts.pop(name, None)
        return self._drop(name, default)

    def _drop(self, name: str, default: Any = None) -> T | None:
        self._origins.pop(name, None)
        self._registrants.pop(name, None)
        self._rank.pop(name, None)
        self._order = None
        return self._items.pop(name, default)

    pop = remove

    def __setitem__(self, name: str, obj: T) -> None:  # the same rule as add (monkeypatching tests use it)
        self.add(name, obj)

    def __delitem__(self, name: str) -> None:
        self.remove(name)

    def registered(self) -> dict[str, T]:
        """What is registered so far, without discovery (a check made while registering)."""
        return dict(self._items)

    # ------------------------------------------------------------------ reading
    def lookup(self, name: str) -> T:
        """The entry called ``name``, or the one error for an unknown name."""
        self.discover()
        if name in self._conflicts:
            raise self._conflict_error(name)
        if name not in self._items:
            raise DHPError(f"Unknown {self.kind} {name!r}; registered: {', '.join(self._items) or 'none'}.",
                           self.fix or f"use one of those, or add a module with your {self.kind} to {self.package} "
                                       f"(or an installed package's entry point in group {self.group!r}).")
        return self._items[name]

    def origin(self, name: str) -> str:
        self.discover()
        return self._origins[name]

    def registrant(self, name: str) -> str:
        """The module that registered ``name`` (half of its identity; :func:`origin` is the other)."""
        self.discover()
        return self._registrants[name]

    def __getitem__(self, name: str) -> T:
        self.discover()
        if name in self._conflicts:
            raise self._conflict_error(name)
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        self.discover()
        if self._order is None:
            self._order = sorted(self._items, key=self._rank.__getitem__)
        return iter(self._order)

    def __len__(self) -> int:
        self.discover()
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        self.discover()
        return name in self._items

    def __repr__(self) -> str:
        return f"<Registry {self.kind}: {', '.join(self._items)}>"


_PLACEHOLDER = re.compile(r"\{registered:([^}:]+)(?::(\w+))?\}")


def expand_help(text: str) -> str:
    """A help text with its lists filled from the registries: ``{registered:KIND}`` is every entry of that kind (as
    the registry shows it), ``{registered:KIND:ATTR}`` those whose ``ATTR`` is set — so no help lists built-ins by
    hand, and a new extension appears in every help that lists its kind."""
    def fill(m: re.Match) -> str:
        reg = REGISTRIES.get(m.group(1))
        if reg is None:
            return m.group(0)
        items = [(n, reg[n]) for n in reg if m.group(2) is None or getattr(reg[n], m.group(2), None)]
        return " | ".join(reg.show(n, obj) if reg.show else n for n, obj in items)

    return _PLACEHOLDER.sub(fill, text) if "{registered:" in text else text


def describe_all() -> str:
    """Every registered extension of every kind, one line each: kind, name, where it is defined."""
    lines = []
    for kind, reg in REGISTRIES.items():
        reg.discover()
        lines.append(f"{kind} ({reg.package}, entry points {reg.group}): {len(reg)}")
        lines += [f"  {name:28s} {reg.origin(name)}" for name in reg]
        lines += [f"  {name:28s} CONFLICT, unusable until renamed: {' / '.join(origins)}"
                  for name, origins in reg.conflicts().items()]
    return "\n".join(lines)
