"""Public names of a package imported when first asked for (PEP 562), so importing one submodule loads no siblings."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

_EXPORTS = "_lazy_exports_"


class _ExportsFirst(ModuleType):
    """A package whose exported name wins over its submodule of the same name: importing a submodule binds the
    submodule on the package (``layercache.depth.token_categories``), which would otherwise hide the function it
    exports under that name for good."""

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if isinstance(value, ModuleType) and not name.startswith("__"):
            exports: Mapping[str, str] = super().__getattribute__("__dict__").get(_EXPORTS, {})
            if exports.get(name) == f".{name}":
                return getattr(value, name)
        return value


def lazy_exports(package: str, public: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` whose public names live in the modules ``public`` maps them
    to (relative to the package): ``__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)``. A name exported from
    the submodule of the same name (``expected_layer`` in ``expected_layer.py``) reads as the export, even after the
    submodule itself was imported."""
    module = sys.modules[package]
    setattr(module, _EXPORTS, dict(public))
    if any(where == f".{name}" for name, where in public.items()):
        module.__class__ = _ExportsFirst

    def __getattr__(name: str) -> Any:
        where = public.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where, package), name)
        setattr(sys.modules[package], name, value)  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted([*vars(sys.modules[package]), *public])

    return __getattr__, __dir__
