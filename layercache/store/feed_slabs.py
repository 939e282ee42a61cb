"""A feed's blocks copied out of their shards through h5py, for shards whose layout a memory map cannot read.

A :class:`SlabReader` reads a block's rows of one state dataset (and a scaled codec's scales beside them) as one
*slab* of contiguous runs (:meth:`~.feed_blocks.ShardLayout.spans`), only the states the feed serves. Slabs are
kept for the next epochs while they fit ``keep_bytes``; larger subsets stream block by block every epoch through
one reused buffer, so the reader holds at most ``keep_bytes`` plus one block.
"""

from __future__ import annotations

from dataclasses import dataclass

import h5py
import numpy as np

from ..errors import CacheError
from .buffers import populated_empty
from .cache_view import CacheView
from .codecs import StorageCodec, scales_dataset
from .feed_blocks import Block, ShardLayout


@dataclass
class Slab:
    """A block's stored values copied out of its shard by h5py (when the shard cannot be mapped)."""

    values: np.ndarray  # (t, S', W) token states or (n, S', W) pooled vectors, stored dtype and width
    run_starts: np.ndarray  # (k,) shard position of each run read, ascending
    run_bases: np.ndarray  # (k,) where that run starts in ``values``
    scales: np.ndarray | None = None  # (t or n, S', scales width) scales of a scaled codec, laid out like ``values``

    @property
    def nbytes(self) -> int:
        """Bytes the slab holds (values and scales)."""
        return self.values.nbytes + (0 if self.scales is None else self.scales.nbytes)

    def take(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Values at shard ``positions (...)`` (all inside the runs read) -> ``(..., S', W)``, and their scales
        ``(..., S', scales width)`` (None for an unscaled codec)."""
        run = np.searchsorted(self.run_starts, positions, side="right") - 1
        at = positions - self.run_starts[run] + self.run_bases[run]
        return self.values[at], None if self.scales is None else self.scales[at]


class SlabReader:
    """Slabs of one split's state dataset (``hidden`` or ``pooled/<mode>``) for the states at ``index``, read
    through h5py and kept across epochs while they fit ``keep_bytes``."""

    def __init__(self, cache: CacheView, split: str, dataset: str, index: list[int], codec: StorageCodec,
                 layout: ShardLayout, keep_bytes: int) -> None:
        self.cache, self.split, self.dataset, self.index = cache, split, dataset, index
        self.codec, self.layout, self.keep_bytes = codec, layout, keep_bytes
        self.kept: dict[int, Slab] = {}  # block number -> slab
        self.kept_bytes = 0
        self._stream: np.ndarray | None = None  # reused by blocks that are not kept

    def slab(self, number: int, block: Block) -> Slab:
        """Block ``number``'s slab (``block``): kept from an earlier epoch, or read (and kept if it fits)."""
        if number in self.kept:
            return self.kept[number]
        keep = self.kept_bytes + self.slab_bytes(block) <= self.keep_bytes
        slab = self.read(block, keep=keep)
        if keep:
            self.kept[number] = slab
            self.kept_bytes += slab.nbytes
        return slab

    def slab_bytes(self, block: Block) -> int:
        """Bytes of ``block``'s slab, before it is read."""
        rows = sum(hi - lo for lo, hi in self.layout.spans(block))
        return rows * len(self.index) * self.codec.vector_bytes(self.cache.hidden_size)

    def read(self, block: Block, keep: bool = False) -> Slab:
        """Stored values of a block's rows, copied out of the shard through h5py: (t, S', W) token states or
        (n, S', W) pooled vectors, stored dtype and width, only the states this reader serves.

        Rows at most :data:`~.feed_blocks.MAX_GAP_ROWS` apart are read as one contiguous run (one large read beats
        many small ones); farther rows start a new run, so a sparse subset never reads the whole shard. A slab that
        will be kept is memory mapped in up front (its pages would otherwise fault in one by one as it is read); one
        that will not reuses the streaming buffer.
        """
        ds = self._dataset(block.shard, self.dataset)
        spans = self.layout.spans(block)
        shape = (sum(hi - lo for lo, hi in spans), len(self.index), ds.shape[2])
        slab = populated_empty(shape, ds.dtype) if keep else self._stream_buffer(shape, ds.dtype)
        self._read_spans(ds, spans, slab)
        scales = None
        if self.codec.scaled:  # small: a fresh array each time, in the scales dataset's width and dtype
            factors = self._dataset(block.shard, scales_dataset(self.dataset))
            scales = np.empty(shape[:2] + factors.shape[2:], factors.dtype)
            self._read_spans(factors, spans, scales)
        bases = np.concatenate([[0], np.cumsum([hi - lo for lo, hi in spans])[:-1]]).astype(np.int64)
        return Slab(slab, np.array([lo for lo, _ in spans], dtype=np.int64), bases, scales)

    def _dataset(self, shard: int, name: str) -> h5py.Dataset:
        """Dataset ``name`` of ``shard``: present, since the feed checked the cache's layout when it opened."""
        ds = self.cache.shard_dataset(self.split, shard, name)
        if ds is None:  # only a file changed after the cache was opened
            raise CacheError(f"Shard {shard} of split {self.split!r} has no {name!r} dataset any more; the cache "
                             "changed while it was read: re-open it, or re-extract it if `layercache verify` fails.")
        return ds

    def _read_spans(self, ds: h5py.Dataset, spans: list[tuple[int, int]], out: np.ndarray) -> None:
        """Rows ``lo:hi`` of each span of ``ds``, for the states served, one after another into ``out``."""
        base = 0
        every_state = self.index == list(range(ds.shape[1]))
        for lo, hi in spans:
            if hi > lo:
                if every_state:
                    ds.read_direct(out, np.s_[lo:hi], np.s_[base:base + hi - lo])
                else:
                    for i, s in enumerate(self.index):
                        ds.read_direct(out, np.s_[lo:hi, s], np.s_[base:base + hi - lo, i])
            base += hi - lo

    def _stream_buffer(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A view of the reused buffer for slabs that are not kept (grown when a block needs more)."""
        need = int(np.prod(shape))
        if self._stream is None or self._stream.size < need or self._stream.dtype != dtype:
            self._stream = populated_empty((need,), dtype)
        return self._stream[:need].reshape(shape)
