"""One registry shape for what a package's modules add by themselves: mixers, probes, data-file formats.

:func:`import_modules` imports every module of a package (those named in ``first`` in that order,
then the others alphabetically), so adding an entry is adding one module; :class:`Registry` holds
the entries those modules register by name, in the order of their modules, and refuses an unknown
name in one sentence that lists the known ones.

    PROBES = Registry("probe", "layercache.probes")

    @PROBES.register("linear")
    class LinearProbes: ...

    PROBES.names()          # every name, after importing every module of the package
    PROBES.lookup("linear")  # or ConfigError: Unknown probe 'x'; choose one of cumulative, linear, mdl.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from types import ModuleType
from typing import Generic, TypeVar

from ..errors import ConfigError

T = TypeVar("T")
E = TypeVar("E")


def import_modules(package: str, first: Sequence[str] = (), skip: Sequence[str] = ()) -> list[ModuleType]:
    """Import every module of ``package`` but ``skip``: ``first`` in its order, then the rest alphabetically."""
    found = {m.name for m in pkgutil.iter_modules(importlib.import_module(package).__path__)} - set(skip)
    order = [*(name for name in first if name in found), *sorted(found - set(first))]
    return [importlib.import_module(f"{package}.{name}") for name in order]


class Registry(MutableMapping[str, T], Generic[T]):
    """Entries by name, registered by the modules of ``package`` (a mapping, in module order).

    ``kind`` names an entry in messages (``"probe"``); ``first`` and ``skip`` are as for
    :func:`import_modules`. Reading the mapping does not import anything: :meth:`load` (and
    :meth:`names`, :meth:`lookup`, which call it) imports every module of the package first.
    """

    def __init__(self, kind: str, package: str, first: Sequence[str] = (), skip: Sequence[str] = ()):
        self.kind, self.package, self.first, self.skip = kind, package, tuple(first), tuple(skip)
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: E) -> E:
        """List ``entry`` under ``name`` (again is a no-op); a second entry under one name is a ``TypeError``."""
        if self._entries.get(name, entry) is not entry:
            old, new = (getattr(e, "__name__", repr(e)) for e in (self._entries[name], entry))
            raise TypeError(f"two {self.kind}s are registered as {name!r}: {old} and {new}")
        self._entries[name] = entry
        return entry

    def register(self, name: str) -> Callable[[E], E]:
        """Decorator: list the decorated class (or function) under ``name``."""
        return lambda entry: self.add(name, entry)

    def load(self) -> Registry[T]:
        """Import every module of the package, then order the entries by module (stably); returns ``self``."""
        rank = {module.__name__: i for i, module in enumerate(import_modules(self.package, self.first, self.skip))}
        module = lambda item: rank.get(getattr(item[1], "__module__", ""), len(rank))
        self._entries = dict(sorted(self._entries.items(), key=module))
        return self

    def names(self) -> list[str]:
        """Every registered name, in order (for CLI choices)."""
        return list(self.load())

    def lookup(self, name: str) -> T:
        """The entry registered as ``name``, or a ``ConfigError`` naming the known ones."""
        self.load()
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise ConfigError(f"Unknown {self.kind} {name!r}; choose one of {', '.join(sorted(self))}.") from None

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __setitem__(self, name: str, entry: T) -> None:
        self._entries[name] = entry

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._entries)})"
