"""States and token arrays of chosen rows: the reads of :class:`~layercache.store.reader.LayerCache` by row.

Pooled vectors (``pooled``, ``pooled_stored``), token states (``tokens``, ``layer_tokens``) and the
per-token integer arrays (``token_arrays``), each read grouped by shard, in as few HDF5 calls as the
rows allow, and widened to float32 from the stored precision (an int8 or int4 cache's scales are read with
the same index and applied: :meth:`~layercache.store.codecs.StorageCodec.decode`). :class:`StateReads` is a base of
``LayerCache``: it reads through the cache's shard access (``_handle``, ``split_info``, ``shard_offsets``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import h5py
import numpy as np
import torch

from ..core.layers import LayerSpec
from ..core.option_names import option
from ..errors import CacheError
from .codecs import StorageCodec, codec, scales_dataset
from .read_errors import translate_read_errors


class StateReads:
    """The state reads of :class:`~layercache.store.reader.LayerCache` (a base class of it; not used alone)."""

    @translate_read_errors
    def pooled(self, split: str, mode: str = "mean", layers: LayerSpec | Sequence[LayerSpec] | None = None,
               rows: Sequence[int] | None = None) -> np.ndarray:
        """Pooled vectors, float32 (n, S', D); ``rows`` picks examples (default all)."""
        if mode not in self.manifest.pooling:
            have = ", ".join(self.manifest.pooling) or "none"
            raise CacheError(f"The cache has no pooled {mode!r} vectors (it has: {have}); "
                             f"re-extract with {option('pooling', [mode], typed=mode)}.")
        index = self.layer_index(layers)
        name = f"pooled/{mode}"
        stored_as = self._codec_of(name)
        if rows is None:
            parts = [stored_as.decode(*self._stored(self._handle(s.file), name, slice(None), index))
                     for s in self.split_info(split).shards]
            return np.concatenate(parts)
        return self._gather_rows(split, np.asarray(rows), name, index)

    @translate_read_errors
    def pooled_stored(self, split: str, mode: str = "mean",
                      layers: LayerSpec | Sequence[LayerSpec] | None = None) -> torch.Tensor:
        """Pooled vectors of a whole split, (n, S', D), as a tensor in the stored precision (float16,
        bfloat16 or float32): half the bytes of :meth:`pooled` to gather rows from, for a consumer
        that widens (and transposes) them in its own single pass. A scaled codec's (int8, int4) vectors
        come dequantised, as float32."""
        if mode not in self.manifest.pooling:
            have = ", ".join(self.manifest.pooling) or "none"
            raise CacheError(f"The cache has no pooled {mode!r} vectors (it has: {have}); "
                             f"re-extract with {option('pooling', [mode], typed=mode)}.")
        index = self.layer_index(layers)
        name = f"pooled/{mode}"
        stored_as = self._codec_of(name)
        parts = []
        for shard in self.split_info(split).shards:
            mapped = None if stored_as.scaled else self._mapped(shard.file, name)
            if mapped is not None:
                # One gather from a memory map of the shard's uncompressed chunks: a third of the time HDF5 takes
                # to read and scatter them (SST-2's train split, 37 MB of float16: 17 against 54 ms, warm), the
                # same values. The copy is made, so the process keeps none of the mapped pages.
                n = mapped.shape[0]
                parts.append(mapped.gather(np.arange(n), index))  # (n, S', D) stored precision
                mapped.dont_need(0, n, index)
            elif stored_as.scaled:
                parts.append(torch.from_numpy(stored_as.decode(*self._stored(self._handle(shard.file), name,
                                                                             slice(None), index))))
            else:
                values, _ = self._stored(self._handle(shard.file), name, slice(None), index)
                parts.append(stored_as.as_torch(values))
        return torch.cat(parts)

    def _codec_of(self, name: str) -> StorageCodec:
        """The codec state dataset ``name`` (``hidden``, ``pooled/<mode>``) is stored in."""
        return codec(self.manifest.storage.dataset_dtype(name))

    def _stored(self, handle: h5py.File, name: str, rows, index: list[int]) -> tuple[np.ndarray, np.ndarray | None]:
        """``handle[name][rows, index, :]`` as stored, and its scales read the same way (None if unscaled)."""
        values = _read_states(handle[name], rows, index)
        if not self._codec_of(name).scaled:
            return values, None
        return values, _read_states(handle[scales_dataset(name)], rows, index)

    def _gather_rows(self, split: str, rows: np.ndarray, name: str, index: list[int]) -> np.ndarray:
        """Float32 ``(len(rows), S', D)`` of state dataset ``name`` at split ``rows`` (any order)."""
        out = None
        stored_as = self._codec_of(name)
        for shard, local, where in self._group_by_shard(split, rows):
            handle = self._handle(self.split_info(split).shards[shard].file)
            order = np.argsort(local)
            block = stored_as.decode(*self._stored(handle, name, local[order], index))
            if out is None:
                out = np.empty((len(rows),) + block.shape[1:], np.float32)
            out[where[order]] = block
        return out

    def _group_by_shard(self, split: str, rows: np.ndarray):
        starts = np.asarray(self._shard_starts(split))
        n = self.num_examples(split)
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            raise IndexError(f"rows must lie in [0, {n}) for split {split!r}")
        shard_of = np.searchsorted(starts, rows, side="right") - 1
        for shard in np.unique(shard_of):
            where = np.nonzero(shard_of == shard)[0]
            yield int(shard), rows[where] - starts[shard], where

    @translate_read_errors
    def tokens(self, split: str, rows: Sequence[int], layers: LayerSpec | Sequence[LayerSpec] | None = None
               ) -> list[np.ndarray]:
        """Token states of the given rows: one float32 array (t_i, S', D) per row."""
        self.require_tokens()
        index = self.layer_index(layers)
        stored_as = codec(self.manifest.storage.dtype)
        rows = np.asarray(rows, dtype=np.int64)
        out: list[np.ndarray | None] = [None] * len(rows)
        for shard, local, where in self._group_by_shard(split, rows):
            offsets = self.shard_offsets(split, shard)
            handle = self._handle(self.split_info(split).shards[shard].file)
            # One read per run of consecutive rows: far fewer HDF5 calls than one per example.
            order = np.argsort(local)
            for run in _consecutive_runs(local[order]):
                a, b = offsets[run[0]], offsets[run[-1] + 1]
                block = stored_as.decode(*self._stored(handle, "hidden", slice(a, b), index))
                for r in run:
                    pos = where[order][np.searchsorted(local[order], r)]
                    out[pos] = block[offsets[r] - a: offsets[r + 1] - a]
        return out  # type: ignore[return-value]

    @translate_read_errors
    def layer_tokens(self, split: str, layer: LayerSpec) -> Iterator[np.ndarray]:
        """Stream one layer across all tokens of a split: yields float32 (t_shard, D) per shard."""
        self.require_tokens()
        (index,) = self.layer_index(layer)
        stored_as = codec(self.manifest.storage.dtype)
        for info in self.split_info(split).shards:
            handle = self._handle(info.file)
            scales = handle[scales_dataset("hidden")][:, index, :] if stored_as.scaled else None  # (t, widths)
            yield stored_as.decode(handle["hidden"][:, index, :], scales)

    @translate_read_errors
    def token_arrays(self, split: str, name: str, rows: Sequence[int]) -> list[np.ndarray]:
        """Per-token integer arrays (``input_ids`` or ``word_ids``) for the given rows, in their order.

        One read per shard touched (the span from its first asked row to its last; these arrays are a few bytes
        a token, so a shard's whole span is small), sliced per row in memory: a probe of a token task asks for
        thousands of rows, which one HDF5 read each took seconds to give.
        """
        rows = np.asarray(rows, np.int64)
        out: list[np.ndarray | None] = [None] * len(rows)
        located = [self._locate(split, int(row)) for row in rows]  # (shard, row inside it) each; refuses a bad row
        by_shard: dict[int, list[int]] = {}
        for i, (shard, _) in enumerate(located):
            by_shard.setdefault(shard, []).append(i)
        for shard, asked in by_shard.items():
            offsets = self.shard_offsets(split, shard)
            h = self._handle(self.split_info(split).shards[shard].file)
            if name not in h:
                raise CacheError(f"The cache stores no {name} (words were unknown at extraction).")
            local = [located[i][1] for i in asked]
            lo, hi = int(offsets[min(local)]), int(offsets[max(local) + 1])
            span = h[name][lo:hi]  # (tokens of the span,)
            for i, row in zip(asked, local):
                out[i] = span[offsets[row] - lo:offsets[row + 1] - lo]
        return out  # type: ignore[return-value]

    def require_tokens(self) -> None:
        """Refuse (:class:`CacheError`) a cache that holds pooled vectors only, before token states are read."""
        if not self.stores_tokens:
            raise CacheError(f"This cache holds pooled vectors only; re-extract with {option('store', 'tokens')} "
                             "for token states.")


def _read_states(ds: h5py.Dataset, rows, index: list[int]) -> np.ndarray:
    """Read ds[rows, index, :]; h5py needs increasing indices, so sort and restore the order."""
    if index == list(range(ds.shape[1])):
        return ds[rows]
    order = np.argsort(index)
    sorted_index = [index[i] for i in order]
    if isinstance(rows, np.ndarray):
        data = ds[rows.tolist(), :, :][:, sorted_index, :] if len(rows) else ds[0:0, sorted_index, :]
    else:
        data = ds[rows, sorted_index, :]
    return data[:, np.argsort(order), :]


def _consecutive_runs(values: np.ndarray) -> list[np.ndarray]:
    if len(values) == 0:
        return []
    breaks = np.nonzero(np.diff(values) != 1)[0] + 1
    return np.split(values, breaks)

