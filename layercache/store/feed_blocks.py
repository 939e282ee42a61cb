"""Which rows of a split a feed reads together, and in what order it serves them.

A :class:`~.cache_feed.CacheFeed` cuts the rows it serves into *blocks*: runs of rows inside one shard whose
states fit a byte budget, the unit of locality (a block's rows lie close together in its shard, so they are
read, kept and released together). Inside a block, rows at most :data:`MAX_GAP_ROWS` apart are read as one
contiguous *run*; farther rows start a new run, so a sparse subset never reads its whole shard. An epoch visits
the blocks in a seeded random order and groups each block's rows into batches of similar length
(:func:`batch_rows`). Everything here is index arithmetic over the shards' row offsets: no state is read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Batches per length bucket when shuffling: large enough to cut padding, small enough to stay random.
BUCKET_BATCHES = 16
#: Unchosen rows a read may skip over: a few wasted rows cost less than another HDF5 read.
MAX_GAP_ROWS = 4
#: The most one block reads at once, and the most slabs a feed keeps across epochs, whatever the budget.
MAX_BLOCK_BYTES, MAX_KEEP_BYTES = 128 << 20, 1 << 30
#: Shares of the memory budget for one block and for a feed's kept slabs (a fit holds a few feeds and computes too).
BLOCK_SHARE, KEEP_SHARE = 1 / 16, 1 / 8


def block_budget(budget: int) -> int:
    """Bytes one block of a feed reads (or touches in a mapped shard) under a memory budget of ``budget`` bytes."""
    return min(MAX_BLOCK_BYTES, int(BLOCK_SHARE * budget))


def keep_budget(budget: int) -> int:
    """Bytes of slabs a feed keeps across epochs under a memory budget of ``budget`` bytes."""
    return min(MAX_KEEP_BYTES, int(KEEP_SHARE * budget))


@dataclass
class Block:
    """Chosen rows of one shard that are read together."""

    shard: int
    rows: np.ndarray  # (n,) sorted split rows


@dataclass
class ShardLayout:
    """Where each row of a split lies in its shard's stored dataset: the rows' shards and their token offsets.

    ``starts``: the split row each shard begins with; ``offsets``: per shard, ``(rows + 1,)`` token offsets of its
    rows; ``pooled``: the dataset holds one vector per row (pooled vectors), not one per token.
    """

    starts: list[int]
    offsets: list[np.ndarray]
    pooled: bool

    def shard_of(self, rows: np.ndarray) -> np.ndarray:
        """(n,) the shard each of split ``rows (n,)`` lies in."""
        return np.searchsorted(self.starts, rows, side="right") - 1

    def blocks(self, rows: np.ndarray, per_token: int, block_bytes: int) -> list[Block]:
        """Cut sorted split ``rows`` of each shard into blocks whose reads fit ``block_bytes``, ``per_token`` bytes
        a stored token (or vector).

        A block is read as runs of nearby rows (:meth:`spans`), so what it costs is the span of those runs, gaps
        included.
        """
        blocks = []
        shard_of = self.shard_of(rows)
        for shard in np.unique(shard_of):
            chosen = rows[shard_of == shard]
            local = chosen - self.starts[shard]
            ends = self.offsets[shard][local + 1] if not self.pooled else local + 1
            starts = self.offsets[shard][local] if not self.pooled else local
            # Each row adds its own tokens, plus the gap before it when that gap is read through.
            joined = np.zeros(len(local), dtype=bool)
            joined[1:] = np.diff(local) <= MAX_GAP_ROWS + 1
            prev_end = np.concatenate([[0], ends[:-1]])
            cost = np.cumsum((ends - np.where(joined, prev_end, starts)) * per_token)
            cuts = [0]
            while cuts[-1] < len(local):
                base = cost[cuts[-1] - 1] if cuts[-1] else 0
                end = int(np.searchsorted(cost, base + block_bytes, side="right"))
                cuts.append(max(end, cuts[-1] + 1))
            for a, b in zip(cuts[:-1], cuts[1:]):
                blocks.append(Block(int(shard), chosen[a:b]))
        return blocks

    def spans(self, block: Block) -> list[tuple[int, int]]:
        """``(lo, hi)`` stored positions of each run of ``block``'s rows read together, ascending: rows at most
        :data:`MAX_GAP_ROWS` apart share a run (the rows between are read through)."""
        local = block.rows - self.starts[block.shard]  # (n,) sorted
        offsets = self.offsets[block.shard] if not self.pooled else np.arange(local[-1] + 2)
        breaks = np.nonzero(np.diff(local) > MAX_GAP_ROWS + 1)[0] + 1
        return [(int(offsets[run[0]]), int(offsets[run[-1] + 1])) for run in np.split(local, breaks)]


def batch_rows(rows: np.ndarray, lengths: np.ndarray, batch_size: int, rng: np.random.Generator,
               shuffle: bool) -> list[np.ndarray]:
    """A block's ``rows`` as batches: sorted by length (``lengths``: tokens of every split row) without ``shuffle``,
    the least padding; with it, a seeded permutation whose buckets of :data:`BUCKET_BATCHES` batches are sorted by
    length, then the batches shuffled, so a head computes on few padded positions and every epoch sees a new order.
    """
    if not shuffle:
        # Sorted by length: least padding; callers put predictions back by ``batch.rows``.
        rows = rows[np.argsort(lengths[rows], kind="stable")]
        return [rows[i:i + batch_size] for i in range(0, len(rows), batch_size)]
    rows = rng.permutation(rows)
    batches: list[np.ndarray] = []
    bucket = batch_size * BUCKET_BATCHES
    for i in range(0, len(rows), bucket):
        chunk = rows[i:i + bucket]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches.extend(chunk[j:j + batch_size] for j in range(0, len(chunk), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]
