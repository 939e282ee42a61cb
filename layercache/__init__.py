"""layercache: run a frozen transformer once, cache every layer's states, learn from the cache.

The public API; everything else is an implementation detail. Names are imported on first use
(PEP 562), so ``import layercache`` loads neither torch's model zoo, transformers nor the
extractor: a head or a probe trained from a cache never pays for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .core.version import __version__
from .errors import (
    CacheError,
    CacheMismatchError,
    ConfigError,
    DatasetError,
    InsufficientDiskError,
    LayercacheError,
    ModelLoadError,
)

# public name -> the module that defines it
_LAZY = {
    "extract": "layercache.planning.checked", "ExtractResult": "layercache.extraction.run",
    "train_head": "layercache.heads.workflow", "evaluate_run": "layercache.heads.workflow",
    "TrainResult": "layercache.heads.workflow", "LayerHead": "layercache.heads.estimator",
    "sweep": "layercache.heads.sweeps.sweep", "SweepResult": "layercache.heads.sweeps.sweep",
    "LayerCache": "layercache.store.reader", "CacheBatch": "layercache.store.reader",
    "Manifest": "layercache.store.manifest", "read_manifest": "layercache.store.manifest",
    "load_backbone": "layercache.backbone.loader", "Backbone": "layercache.backbone.loader",
    "DEFAULT_MODEL": "layercache.backbone.loader",
    "DatasetRecords": "layercache.sources.records", "SplitRecords": "layercache.sources.records",
    "LabelTask": "layercache.core.tasks", "LinearProbes": "layercache.probes.linear",
    "LiveBundle": "layercache.live.bundle", "attach": "layercache.live.bundle",
    "use_threads": "layercache.core.threads", "memory_limit": "layercache.core.memory",
}

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from .backbone.loader import DEFAULT_MODEL, Backbone, load_backbone
    from .core.memory import memory_limit
    from .core.tasks import LabelTask
    from .core.threads import use_threads
    from .extraction.run import ExtractResult
    from .heads.estimator import LayerHead
    from .heads.sweeps.sweep import SweepResult, sweep
    from .heads.workflow import TrainResult, evaluate_run, train_head
    from .live.bundle import LiveBundle, attach
    from .planning.checked import extract
    from .probes.linear import LinearProbes
    from .sources.records import DatasetRecords, SplitRecords
    from .store.manifest import Manifest, read_manifest
    from .store.reader import CacheBatch, LayerCache


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'layercache' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "__version__", "extract", "ExtractResult", "train_head", "evaluate_run", "TrainResult", "LayerHead", "sweep",
    "SweepResult",
    "LayerCache", "CacheBatch", "Manifest", "read_manifest", "load_backbone", "Backbone", "DEFAULT_MODEL",
    "DatasetRecords", "SplitRecords", "LabelTask", "LinearProbes", "LiveBundle", "attach", "use_threads",
    "memory_limit",
    "LayercacheError", "ConfigError", "ModelLoadError", "DatasetError", "CacheError", "CacheMismatchError",
    "InsufficientDiskError",
]
