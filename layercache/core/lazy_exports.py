"""Public names of a package imported when first asked for (PEP 562), so importing one submodule loads no siblings."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, public: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` whose public names live in the modules ``public`` maps them
    to (relative to the package): ``__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)``."""

    def __getattr__(name: str) -> Any:
        module = public.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted([*vars(sys.modules[package]), *public])

    return __getattr__, __dir__
