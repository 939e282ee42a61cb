"""Padded float32 minibatches read from a cache: what ``LayerCache.batch``, ``iter_batches`` and ``torch_dataset`` do.

Each is a thin layer over the cache feed (:class:`~layercache.store.cache_feed.CacheFeed`): one
gather and one padding rule for every batch read from a cache, whether a head trains on it or a
user reads it. The batch is the feed's, in the layout of :mod:`layercache.store.batches`, with its
states widened to float32; padded positions (mask False) therefore repeat the row's first token.
Until the reads shared the feed's gather they held zeros there; only those masked positions
changed, so code that masks (``states[mask]``, a mask-weighted sum) reads exactly what it read.

The functions take the open cache as an argument (a :class:`~layercache.store.cache_view.CacheView`):
:mod:`.reader` imports this module and binds them as ``LayerCache`` methods.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from ..errors import ConfigError
from .batches import CacheBatch
from .cache_feed import CacheFeed
from .cache_view import CacheView
from .read_errors import translate_read_errors


def batch_feed(cache: CacheView, split: str, *, layers=None, source: str = "tokens",
               tasks: Sequence[str] | None = None) -> CacheFeed:
    """The feed the batch reads gather through: every row of ``split``, labels of ``tasks`` (None: all)."""
    tasks = [t.name for t in cache.tasks] if tasks is None else list(tasks)
    return CacheFeed(cache, split, tasks=tasks, layers=layers, source=source)


def float_batch(feed: CacheFeed, rows: Sequence[int]) -> CacheBatch:
    """``feed.batch(rows)`` with its states widened to float32 (the public reads' precision)."""
    return feed.batch(rows).float_states()


@translate_read_errors
def read_batch(cache: CacheView, split: str, rows: Sequence[int], *, layers=None, source: str = "tokens",
               tasks: Sequence[str] | None = None) -> CacheBatch:
    """``rows`` of ``split`` as one padded float32 batch, in the order given (``LayerCache.batch``)."""
    return float_batch(batch_feed(cache, split, layers=layers, source=source, tasks=tasks), rows)


@translate_read_errors
def iter_batches(cache: CacheView, split: str, batch_size: int = 32, *, layers=None, source: str = "tokens",
                 tasks: Sequence[str] | None = None, shuffle: bool = False, seed: int = 0,
                 block_size: int = 1024) -> Iterator[CacheBatch]:
    """Padded float32 minibatches of ``split`` (``LayerCache.iter_batches``).

    Unshuffled, the rows come in cache order. With ``shuffle``, blocks of ``block_size``
    consecutive rows are visited in a seeded random order and shuffled inside: random enough for
    SGD, while each batch's rows stay close together in their shard.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be at least 1, got {batch_size}.")
    feed = batch_feed(cache, split, layers=layers, source=source, tasks=tasks)
    n = cache.num_examples(split)
    rng = np.random.default_rng(seed)
    blocks = [np.arange(a, min(a + block_size, n)) for a in range(0, n, block_size)]
    if shuffle:
        blocks = [blocks[i] for i in rng.permutation(len(blocks))]
    for block in blocks:
        if shuffle:
            block = rng.permutation(block)
        for start in range(0, len(block), batch_size):
            yield float_batch(feed, block[start:start + batch_size])


class CacheDataset(torch.utils.data.Dataset):
    """Map-style dataset over one split: item ``i`` is row ``i``; ``collate`` reads a list of rows as one batch.

    Reading happens in ``collate`` so that a whole minibatch is one gather. The feed is built at
    the first ``collate`` in each process, so each DataLoader worker opens its own shards.
    """

    def __init__(self, cache: CacheView, split: str, *, layers=None, source="tokens", tasks=None):
        self.cache, self.split = cache, split
        self.layers, self.source, self.tasks = layers, source, tasks
        cache.split_info(split)  # fail early on a bad split name
        self._feed: CacheFeed | None = None

    def __len__(self) -> int:
        return self.cache.num_examples(self.split)

    def __getitem__(self, row: int) -> int:
        if not 0 <= row < len(self):
            raise IndexError(row)
        return row

    @translate_read_errors
    def collate(self, rows: list[int]) -> CacheBatch:
        """Read a list of rows as one padded float32 :class:`CacheBatch` (a DataLoader's ``collate_fn``)."""
        if self._feed is None:
            self._feed = batch_feed(self.cache, self.split, layers=self.layers, source=self.source, tasks=self.tasks)
        return float_batch(self._feed, rows)
