"""Feeds shared by many fits of one cache: each :class:`~.cache_feed.CacheFeed` is built once and served again.

A fit of a head builds a training feed and a validation feed, and scoring builds another: each
reads the split's offsets, word ids and labels out of every shard and maps the shards' states.
Many fits of one cache (``layercache sweep``: every candidate and seed) ask for the same few
feeds: the token states and the pooled vectors of train, validation and test. A :class:`FeedPool`
keeps each one the first time it is asked for, by everything that makes it what it is (split,
tasks, rows, states, source, batch size), and hands out the same object after that.

Sharing is safe because a feed holds no state from one pass to the next beyond what it has read:
every ``epoch(shuffle, seed)`` makes its own order, and the slabs a feed keeps in memory (shards
read through h5py; ``keep_bytes``) are exactly what a new feed would read again. The states of a
memory-mapped shard stay in the OS page cache whichever feed read them last.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from .cache_feed import CacheFeed
from .reader import LayerCache


class FeedPool:
    """The feeds of one open cache, each built once.

    Args:
        cache: the open cache every feed reads.
        keep_bytes: passed to every :class:`CacheFeed` (slabs kept in memory across epochs, for shards
            read through h5py; a memory-mapped shard keeps none); default (None): each feed's own, a share
            of the memory budget (:func:`~.feed_blocks.keep_budget`). The pool's memory is at most this
            much per feed it holds.
    """

    def __init__(self, cache: LayerCache, *, keep_bytes: int | None = None) -> None:
        self.cache = cache
        self.keep_bytes = keep_bytes
        self._feeds: dict[tuple, CacheFeed] = {}
        self.served = 0
        """Feeds handed out, first requests included."""
        self.build_seconds = 0.0
        """Wall time spent building the feeds held."""

    def feed(self, split: str, *, tasks: Sequence[str] = (), rows: Sequence[int] | None = None, layers=None,
             source: str = "tokens", batch_size: int = 32) -> CacheFeed:
        """The feed :class:`CacheFeed` would build from these arguments: built the first time, then the same object."""
        picked = None if rows is None else np.unique(np.asarray(rows, dtype=np.int64))  # (n,) as the feed keeps them
        index = tuple(self.cache.layer_index(layers))
        key = (split, tuple(tasks), None if picked is None else picked.tobytes(), index, source, batch_size)
        self.served += 1
        found = self._feeds.get(key)
        if found is None:
            started = time.perf_counter()
            found = CacheFeed(self.cache, split, tasks=tasks, rows=picked, layers=list(index), source=source,
                              batch_size=batch_size, keep_bytes=self.keep_bytes)
            self.build_seconds += time.perf_counter() - started
            self._feeds[key] = found
        return found

    @property
    def built(self) -> int:
        """Feeds built (each request after the first of its kind was served from the pool)."""
        return len(self._feeds)

    def stats(self) -> dict:
        """``{"built", "served", "build_seconds"}``: what the pool did, for a report."""
        return {"built": self.built, "served": self.served, "build_seconds": self.build_seconds}
