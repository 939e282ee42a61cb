"""What the store's readers of a split need from an open cache: the :class:`CacheView` protocol.

:class:`~layercache.store.reader.LayerCache` satisfies it. The modules that read through an open
cache without being part of it (the feature-source rules of :mod:`.feature_source`, the cache feed
of :mod:`.cache_feed`, the batch reads of :mod:`.batch_reads`, the reads at token positions of
:mod:`.position_reads`) take a ``CacheView``, so :mod:`.reader` imports them and none of them
imports the reader back.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import h5py
import numpy as np

from ..core.layers import LayerSpec
from ..core.tasks import LabelTask
from .manifest import Manifest, SplitInfo
from .mapped import MappedStates


class CacheView(Protocol):
    """An open cache, as far as its split readers use it (see :class:`~layercache.store.reader.LayerCache`)."""

    manifest: Manifest

    @property
    def layer_names(self) -> list[str]:
        """Names of the kept states, in stored order."""
        ...

    @property
    def hidden_size(self) -> int:
        """D, the width of every state."""
        ...

    @property
    def tasks(self) -> list[LabelTask]:
        """The label tasks the cache holds labels for."""
        ...

    @property
    def stores_tokens(self) -> bool:
        """Whether token states are stored (False for a cache of pooled vectors only)."""
        ...

    def split_info(self, split: str) -> SplitInfo:
        """The manifest entry of ``split``; refuses an unknown split."""
        ...

    def num_examples(self, split: str) -> int:
        """Rows of ``split`` in the cache."""
        ...

    def layer_index(self, layers: LayerSpec | Sequence[LayerSpec] | None) -> list[int]:
        """Positions among the kept states for names or (negative) indices; None = all."""
        ...

    def shard_dataset(self, split: str, shard: int, name: str) -> h5py.Dataset | None:
        """The HDF5 dataset ``name`` of shard ``shard`` of ``split``, or None when the shard has none."""
        ...

    def shard_offsets(self, split: str, shard: int) -> np.ndarray:
        """(n + 1,) token offsets of a shard's rows."""
        ...

    def mapped_states(self, split: str, shard: int, name: str = "hidden") -> MappedStates | None:
        """A shard's state dataset memory-mapped, or None when its layout cannot be mapped."""
        ...

    def layer_tokens(self, split: str, layer: LayerSpec) -> Iterator[np.ndarray]:
        """One state across all tokens of a split: float32 ``(t_shard, D)`` per shard."""
        ...

    def require_tokens(self) -> None:
        """Refuse a cache that holds pooled vectors only, before token states are read."""
        ...
