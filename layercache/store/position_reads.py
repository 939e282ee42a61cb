"""States at chosen token positions of a split, as :meth:`~.reader.LayerCache.gather_positions` reads them.

A position is split-wide: the split's stored tokens numbered in cache order, row 0's first, so token ``t`` of
row ``r`` is position ``starts[r] + t`` with ``starts`` the cumulative sum of ``lengths(split)``. The probes of a
token task read each word's first sub-token this way: a few states of every row, never the rows themselves.

Two reads give the same float32 values, those :meth:`~layercache.store.state_reads.StateReads.layer_tokens`
decodes (the codec's :meth:`~layercache.store.codecs.StorageCodec.dequantize` of the stored values and their
scales):

- from the shards' memory maps (:mod:`.mapped`), when every shard of the split can be mapped: only the asked
  vectors are read, :data:`GATHER_POSITIONS` at a time, and the pages touched are dropped from the process after
  each shard and state (:meth:`~layercache.store.mapped.MappedStates.dont_need`), so what the read holds is the
  states it returns, whatever the size of the cache;
- otherwise (a compressed shard, a layout the map cannot read exactly) through HDF5: each shard's whole state,
  as ``layer_tokens`` streams it, and the asked rows picked from it, stopping after the last shard asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .cache_view import CacheView
from .codecs import codec, scales_dataset
from .mapped import MappedStates

GATHER_POSITIONS = 4096
"""Positions gathered and decoded in one step from a memory-mapped shard (their temporaries: a few MB)."""

Run = tuple[np.ndarray, np.ndarray | None]
"""A part's positions sorted, and the order that sorted them (None: they were in order already)."""


def gather_positions(cache: CacheView, split: str, parts: Sequence[Sequence[int]], index: list[int]
                     ) -> list[np.ndarray]:
    """The states of kept states ``index`` at each part's split-wide token positions: one ``(L, n, D)`` float32
    array per part, in the order of its positions (any order, repeats allowed), all parts read in one pass.

    Refuses a cache of pooled vectors only (:class:`~layercache.errors.CacheError`) and a position outside the
    split's tokens (``IndexError``).
    """
    cache.require_tokens()
    asked = [np.asarray(positions, np.int64) for positions in parts]  # (n,) each
    bounds = _shard_bounds(cache, split)  # (shards + 1,) split-wide first token of each shard, then the total
    for positions in asked:
        if positions.size and (positions.min() < 0 or positions.max() >= bounds[-1]):
            raise IndexError(f"token positions must lie in [0, {int(bounds[-1])}) for split {split!r}")
    # Each part in increasing order (a stable sort, only where it is not already): a shard's positions are then
    # one run of it, found by two binary searches. ``_where`` says where the sorted positions go in the output.
    runs: list[Run] = []
    for positions in asked:
        if np.all(positions[1:] >= positions[:-1]):
            runs.append((positions, None))
        else:
            order = np.argsort(positions, kind="stable")
            runs.append((positions[order], order))
    out = [np.empty((len(index), len(positions), cache.hidden_size), np.float32) for positions in asked]  # (L, n, D)
    if not _from_maps(cache, split, index, bounds, runs, out):
        _streamed(cache, split, index, runs, out)
    return out


def _shard_bounds(cache: CacheView, split: str) -> np.ndarray:
    """``(shards + 1,)`` int64: the split-wide position of each shard's first token, then the split's tokens."""
    n_shards = len(cache.split_info(split).shards)
    tokens = [int(cache.shard_offsets(split, shard)[-1]) for shard in range(n_shards)]
    return np.concatenate([[0], np.cumsum(tokens)]).astype(np.int64)


def _where(order: np.ndarray | None, a: int, b: int) -> slice | np.ndarray:
    """Where sorted positions ``a .. b - 1`` of a part go in its output: the same places, or where ``order`` sends
    them."""
    return slice(a, b) if order is None else order[a:b]


def _maps(cache: CacheView, split: str) -> list[tuple[MappedStates, MappedStates | None]] | None:
    """Each shard's token states memory-mapped, with their scales (None for an unscaled codec); None when a shard's
    states or scales cannot be mapped."""
    stored = codec(cache.manifest.storage.dtype)
    maps = []
    for shard in range(len(cache.split_info(split).shards)):
        values = cache.mapped_states(split, shard, "hidden")
        scales = cache.mapped_states(split, shard, scales_dataset("hidden")) if stored.scaled else None
        if values is None or (stored.scaled and scales is None):
            return None
        maps.append((values, scales))
    return maps


def _from_maps(cache: CacheView, split: str, index: list[int], bounds: np.ndarray, runs: list[Run],
               out: list[np.ndarray]) -> bool:
    """Fill ``out`` from the shards' memory maps; False (and nothing read) when a shard cannot be mapped."""
    maps = _maps(cache, split)
    if maps is None:
        return False
    stored = codec(cache.manifest.storage.dtype)
    for li, layer in enumerate(index):
        for shard, (values, scales) in enumerate(maps):
            lo, hi = int(bounds[shard]), int(bounds[shard + 1])
            for (positions, order), X in zip(runs, out):
                a, b = np.searchsorted(positions, [lo, hi])
                for start in range(a, b, GATHER_POSITIONS):  # a few thousand positions at a time: small temporaries
                    stop = min(b, start + GATHER_POSITIONS)
                    local = positions[start:stop] - lo  # (n,) rows of the shard
                    gathered = values.gather(local, [layer])[:, 0]  # (n, W) in the stored precision and width
                    factors = None if scales is None else scales.gather(local, [layer])[:, 0]  # (n, scales width)
                    X[li, _where(order, start, stop)] = stored.dequantize(gathered, factors).numpy()  # (n, D)
            # The pages stay in the OS page cache; dropping them from the process keeps its memory at the output.
            for mapped in (values, scales):
                if mapped is not None:
                    mapped.dont_need(0, hi - lo, [layer])
    return True


def _streamed(cache: CacheView, split: str, index: list[int], runs: list[Run], out: list[np.ndarray]) -> None:
    """Fill ``out`` from each shard's whole state as ``layer_tokens`` decodes it (contiguous per shard: the cache
    stores each state in its own chunks), one gather per part from each block."""
    last = max((int(positions[-1]) for positions, _ in runs if len(positions)), default=-1)  # no shard after it
    for li, layer in enumerate(index):
        offset = 0
        for block in cache.layer_tokens(split, layer):  # (t_shard, D) float32
            if offset > last:
                break
            end = offset + len(block)
            for (positions, order), X in zip(runs, out):
                a, b = np.searchsorted(positions, [offset, end])
                if b > a:
                    X[li, _where(order, a, b)] = block[positions[a:b] - offset]
            offset = end
