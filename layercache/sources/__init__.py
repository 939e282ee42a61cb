"""Data sources: the built-in task set, local files, saved folders and the Hub, read into records.

:func:`load_dataset_records` is the entry point (public, with the records it returns); local file
formats live one module each in :mod:`layercache.sources.formats`, and :mod:`layercache.sources.registry`
collects them by extension. The modules themselves are internal.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> the module that defines it (imported when first asked for: a submodule imported alone
# does not load its siblings)
_PUBLIC = {
    "load_dataset_records": ".datasets",
    "DatasetRecords": ".records",
    "SplitRecords": ".records",
    "load_builtin": ".builtin",
    "builtin_vocabulary": ".builtin",
}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


__all__ = sorted(_PUBLIC)
