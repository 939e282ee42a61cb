"""The options of an extraction, grouped: what data, how it is stored, how it is batched.

:func:`~layercache.extraction.run.extract` takes them as three small frozen specs, or as the flat
keyword arguments it always took (which build the same specs). Their defaults, and the command line's,
are those of :mod:`layercache.core.extraction_defaults`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ..core.devices import DEFAULT_DEVICE
from ..core.extraction_defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BATCH_TOKENS,
    DEFAULT_DATASET,
    DEFAULT_FORWARD_DTYPE,
    DEFAULT_POOLING,
    DEFAULT_SHARD_BYTES,
    DEFAULT_STORE,
)
from ..core.layers import LayerSpec
from ..errors import ConfigError
from ..store.storage import AUTO

__all__ = ["DataSpec", "StorageSpec", "BatchSpec", "DEFAULT_SHARD_BYTES", "merged_spec"]


@dataclass(frozen=True)
class DataSpec:
    """Which data to run: see :func:`~layercache.sources.datasets.load_dataset_records` for every option."""

    dataset: str | None = DEFAULT_DATASET
    """``builtin``, a hub id, a local file or a saved datasets folder; ``None`` with ``split_files``."""
    config: str | None = None
    """Hub dataset configuration (``cola`` for ``glue``)."""
    splits: Sequence[str] | None = None
    split_files: Mapping[str, str] | None = None
    """One local file per split: ``{"train": path, ...}``."""
    text_columns: Sequence[str] | None = None
    label_columns: Sequence[str] | None = None
    no_labels: bool = False
    task_kind: str | None = None
    limit: int | None = None
    """Keep the first ``limit`` examples of each split."""


@dataclass(frozen=True)
class StorageSpec:
    """What the cache keeps of each example, and how it is laid out on disk."""

    layers: LayerSpec | Sequence[LayerSpec] | None = None
    """States to keep, names or indices (``0`` = embeddings, ``-1`` = last); ``None`` = all."""
    store: str = DEFAULT_STORE
    """``tokens`` (every token's states, and the pooled vectors) or ``pooled`` (pooled vectors only)."""
    pooling: Sequence[str] = DEFAULT_POOLING
    storage_dtype: str = AUTO
    mean_skip_first: bool = False
    """Leave each example's first token out of mean pooling (a decoder's BOS / attention sink)."""
    shard_bytes: int = DEFAULT_SHARD_BYTES
    project: int | None = None
    """Store every state as its coordinates in K principal directions fitted on the first split (``--project K``;
    :mod:`layercache.store.projection`); None keeps the model's width."""
    project_basis: str = "pca"
    """How that basis is fitted (``--project-basis``): ``pca`` (the covariance's top K eigenvectors) or
    ``standardized`` (the correlation matrix's: PCA of the states scaled to unit variance per dimension)."""
    compression: str = "none"
    """Lossless compression of the stored states (``--compression``): ``none`` or ``zstd``
    (:mod:`layercache.store.compression`; needs hdf5plugin)."""


@dataclass(frozen=True)
class BatchSpec:
    """How the backbone runs: forward batches, token windows, dtype and device."""

    batch_tokens: int = DEFAULT_BATCH_TOKENS
    """Padded tokens per forward batch."""
    batch_size: int = DEFAULT_BATCH_SIZE
    """Most sequences per forward batch."""
    max_length: int | None = None
    """Token limit per window (default: the model's)."""
    stride: int | None = None
    """Split long texts into windows overlapping by this many tokens instead of truncating."""
    dtype: str = DEFAULT_FORWARD_DTYPE
    """Forward-pass dtype."""
    device: str = DEFAULT_DEVICE
    device_map: str | None = None
    """Split a backbone larger than one device over GPUs, CPU memory and disk (``auto``, ...; needs accelerate):
    see :mod:`layercache.backbone.placement`. ``device`` stays ``auto`` then."""
    max_memory: Mapping[str, int | str] | None = None
    """With ``device_map``: the most each device may hold, ``{"cuda:0": "20GiB", "cpu": "60GiB"}``."""


def merged_spec(cls: type, spec: Any, flat: dict[str, Any], argument: str) -> Any:
    """``spec`` itself, or a ``cls`` built from the flat keyword values when ``spec`` is ``None``.

    A flat value that differs from its default next to a spec is refused: the two would disagree.
    """
    if spec is None:
        return cls(**flat)
    if not isinstance(spec, cls):
        raise ConfigError(f"{argument}= takes a {cls.__name__}, not {type(spec).__name__}.")
    defaults = {f.name: f.default for f in fields(cls)}
    given = [name for name, value in flat.items() if _comparable(value) != _comparable(defaults[name])]
    if given:
        raise ConfigError(f"Pass {', '.join(given)} inside {argument}={cls.__name__}(...), not beside it.")
    return spec


def _comparable(value: Any) -> Any:
    """Lists and tuples compare by their items: ``["mean"]`` is the default ``("mean",)``."""
    return tuple(value) if isinstance(value, (list, tuple)) else value
