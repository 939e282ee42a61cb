"""Data sources: the built-in task set, local files, saved folders and the Hub, read into records.

:func:`load_dataset_records` is the entry point (public, with the records it returns); local file
formats live one module each in :mod:`layercache.sources.formats`, and :mod:`layercache.sources.registry`
collects them by extension. The modules themselves are internal.
"""

from __future__ import annotations

from ..core.lazy_exports import lazy_exports

# public name -> the module that defines it (imported when first asked for: a submodule imported alone
# does not load its siblings)
_PUBLIC = {
    "load_dataset_records": ".datasets",
    "DatasetRecords": ".records",
    "SplitRecords": ".records",
    "load_builtin": ".builtin",
    "builtin_vocabulary": ".builtin",
}


__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
__all__ = sorted(_PUBLIC)
