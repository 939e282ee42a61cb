"""layercache: run a frozen transformer once, cache every layer's states, learn from the cache.

The public API; everything else is an implementation detail.
"""

__version__ = "0.1.0"

from .errors import (CacheError, CacheMismatchError, ConfigError, DatasetError,  # noqa: E402
                     InsufficientDiskError, LayercacheError, ModelLoadError)
from .extraction.run import ExtractResult, extract  # noqa: E402
from .heads import LayerHead, TrainResult, evaluate_run, train_head  # noqa: E402
from .sources.backbone import DEFAULT_MODEL, Backbone, load_backbone  # noqa: E402
from .sources.records import DatasetRecords, LabelTask, SplitRecords  # noqa: E402
from .store.manifest import Manifest, read_manifest  # noqa: E402
from .store.reader import CacheBatch, LayerCache  # noqa: E402

__all__ = [
    "__version__", "extract", "ExtractResult", "train_head", "evaluate_run", "TrainResult", "LayerHead", "LayerCache", "CacheBatch", "Manifest", "read_manifest",
    "load_backbone", "Backbone", "DEFAULT_MODEL", "DatasetRecords", "SplitRecords", "LabelTask",
    "LayercacheError", "ConfigError", "ModelLoadError", "DatasetError", "CacheError", "CacheMismatchError",
    "InsufficientDiskError",
]
