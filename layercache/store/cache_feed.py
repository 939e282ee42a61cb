"""Minibatches for training and evaluation, read straight from a cache's shards.

A :class:`CacheFeed` serves one split (or a subset of its rows) as padded
:class:`~layercache.store.batches.CacheBatch` objects (the layout every feed shares, so it is a
:class:`~layercache.store.feed.Feed`), without ever holding the split's states in memory. Per
epoch it

1. cuts the chosen rows into *blocks*: runs of rows inside one shard whose states fit a byte
   budget, the unit of locality (a block's rows lie close together in its shard; :mod:`.feed_blocks`);
2. visits the blocks in a seeded random order and shuffles rows inside each block;
3. groups rows of similar length into batches (a bucket of 16 batches is sorted by length, then
   the batches are shuffled), so a head computes on far fewer padded positions than with purely
   random batches, while every epoch still sees a different order (:func:`~.feed_blocks.batch_rows`);
4. builds each batch by one vectorised gather: ``(B, T, S, D)`` states in the cache's storage
   precision (float16 by default; mixers compute in float32), the mask, word ids and labels
   (first sub-token of each word for token tasks). An int8 cache's batch carries its scales
   ``(B, T, S, 1)`` beside the values, gathered by the same positions, dequantised where the head
   computes (:meth:`~layercache.store.batches.CacheBatch.states_on`); an int4 cache's codes and scales
   are decoded to float32 in the gather (what :meth:`~layercache.store.codecs.StorageCodec.served` gives).

The gather reads a memory map of the shard's chunks (:mod:`layercache.store.mapped`): nothing is
copied out of the file but the batch itself, what was read stays in the OS page cache for the
next epoch, and a block that covers its shard densely is read ahead in large requests. A shard
whose layout cannot be mapped is read through h5py instead, a block at a time, as one slab of
contiguous runs (:mod:`.feed_slabs`); slabs are kept for the next epochs while they fit ``keep_bytes`` (an eighth of the
memory budget, 1 GiB at most: :mod:`layercache.core.memory`), and larger subsets stream block by block
every epoch. Once a block's batches are served, the pages it touched in a mapped shard are dropped from the
process (unless all the feed touches fits ``keep_bytes``: then they stay for the next epoch, as a kept slab
would) and the heap's free pages handed back, so resident memory grows with neither the cache nor the steps.
Labels, lengths and word ids are small and loaded once. Evaluation uses the same path without shuffling, and
reports rows so predictions can be put back in split order.

:meth:`CacheFeed.batch` gathers any rows of the split, in the order given, by the same gather:
the cache's public batch reads (``LayerCache.batch``, ``iter_batches``, ``torch_dataset``,
:mod:`.batch_reads`) are built on it, so every batch read from a cache comes from one gather with
one padding rule (:func:`~layercache.store.batches.padded_positions`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial

import numpy as np
import torch

from ..core.memory import current_budget, release_free_heap
from ..errors import CacheError, ConfigError
from .batches import CacheBatch, example_labels, first_subtoken_labels, join_batches, padded_positions
from .cache_view import CacheView
from .codecs import codec, scales_dataset
from .feature_source import require_source
from .feed_blocks import Block, ShardLayout, batch_rows, block_budget, keep_budget
from .feed_slabs import Slab, SlabReader
from .read_errors import translate_read_errors

Take = Callable[[np.ndarray], "tuple[torch.Tensor, torch.Tensor | None]"]
"""Shard positions ``(...)`` -> a batch's states ``(..., S', D)`` and scales or None (``StorageCodec.served``)."""


class CacheFeed:
    """Padded minibatches of one cache split: what a head trains and is scored on, and what
    :meth:`LayerCache.batch <layercache.store.reader.LayerCache.batch>` reads (:meth:`batch`).

    Args:
        cache: an open :class:`~layercache.store.reader.LayerCache`.
        split: the split to read.
        tasks: label tasks to attach (names); ``[]`` for unlabelled prediction.
        rows: the split rows to serve (default: all), e.g. a training subset without a
            validation slice.
        layers: state names or indexes to read (default: every kept state).
        source: ``"tokens"`` or ``"pooled:<mode>"`` (one vector per example, ``T = 1``).
        batch_size: examples per batch.
        block_bytes: budget of one block (one slab read; the pages of a mapped shard one block touches).
            Default: :func:`~.feed_blocks.block_budget` of the memory budget (128 MiB at most).
        keep_bytes: slabs kept in memory across epochs, at most this many bytes in all (0: read
            every block every epoch). Default: :func:`~.feed_blocks.keep_budget` of the memory budget (1 GiB at most).
            The feed's memory is bounded by ``keep_bytes + block_bytes``. ``keep_bytes`` applies only to
            shards read through h5py (``memory_map=False``, or a layout that cannot be mapped), and to the pages
            of mapped ones: a mapped shard holds no copies, and where what the feed touches in an epoch exceeds
            ``keep_bytes`` it drops the pages of each block it has served from the process when the next begins
            (:meth:`~layercache.store.mapped.MappedStates.dont_need`), so its resident memory stays at about
            one block however large the cache is; where it fits, they stay (:attr:`keeps_pages`).
        memory_map: read shards through a memory map of their chunks where the layout allows
            (:mod:`layercache.store.mapped`); ``False`` copies every block out through h5py.
    """

    def __init__(self, cache: CacheView, split: str, *, tasks: Sequence[str] = (), rows: Sequence[int] | None = None,
                 layers=None, source: str = "tokens", batch_size: int = 32, block_bytes: int | None = None,
                 keep_bytes: int | None = None, memory_map: bool = True) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}.")
        self.cache, self.split, self.tasks = cache, split, list(tasks)
        self.info = cache.split_info(split)
        self.index = cache.layer_index(layers)
        self.layer_names = [cache.layer_names[i] for i in self.index]  # what batch state s is, for messages
        self.batch_size = batch_size
        parsed = require_source(cache, source)
        self.pooled_mode = parsed.mode  # None for token states
        self.source = source
        self.storage_dtype = cache.manifest.storage.dataset_dtype(self.dataset)  # of the dataset this feed reads
        self.codec = codec(self.storage_dtype)
        n = cache.num_examples(split)
        self.rows = np.arange(n) if rows is None else np.unique(np.asarray(rows, dtype=np.int64))
        if len(self.rows) == 0:
            raise ConfigError(f"No examples to read from split {split!r}.")
        if self.rows[0] < 0 or self.rows[-1] >= n:
            raise ConfigError(f"rows must lie in [0, {n}) for split {split!r}.")
        self._load_small_arrays()
        self._layout = ShardLayout(self._starts, self._offsets, pooled=self.pooled_mode is not None)
        budget = current_budget() if block_bytes is None or keep_bytes is None else 0
        self.block_bytes = block_budget(budget) if block_bytes is None else block_bytes
        self._blocks = self._layout.blocks(self.rows, self._per_token, self.block_bytes)
        self.keep_bytes = keep_budget(budget) if keep_bytes is None else keep_bytes
        self._slabs = SlabReader(cache, split, self.dataset, self.index, self.codec, self._layout, self.keep_bytes)
        self._maps = [self._map(shard) if memory_map else None for shard in range(len(self.info.shards))]
        # (the pages an epoch touches, as blocks count them) A subset whose mapped pages fit what the feed may keep
        # keeps them across epochs, as slabs that fit are kept: dropping and faulting them back every epoch cost
        # SST-2's head 7 % of its training (index_select and copy_ 0.5 s more over 3 epochs) for no bound it needs.
        touched = int(self.lengths[self.rows].sum()) if self.pooled_mode is None else len(self.rows)
        # every shard mapped: then no slab is kept, and kept pages and kept slabs never add up past keep_bytes
        self.keeps_pages = all(m is not None for m in self._maps) and touched * self._per_token <= self.keep_bytes

    @property
    def _per_token(self) -> int:
        """Bytes a block counts for one stored token (or pooled vector) of the states served (int8, int4 as float16)."""
        return len(self.index) * self.codec.cut_bytes(self.cache.hidden_size)

    @property
    def dataset(self) -> str:
        """The state dataset this feed reads in each shard: ``hidden`` or ``pooled/<mode>``."""
        return "hidden" if self.pooled_mode is None else f"pooled/{self.pooled_mode}"

    def _map(self, shard: int) -> tuple | None:
        """(values, scales or None) memory maps of a shard's state dataset; None unless all of it maps."""
        values = self.cache.mapped_states(self.split, shard, self.dataset)
        if values is None or not self.codec.scaled:
            return None if values is None else (values, None)
        scales = self.cache.mapped_states(self.split, shard, scales_dataset(self.dataset))
        return None if scales is None else (values, scales)

    # --- set-up -----------------------------------------------------------------------
    @translate_read_errors
    def _load_small_arrays(self) -> None:
        """Offsets, word ids and labels of every shard: small next to the states, read once."""
        self._starts = [s.first_row for s in self.info.shards]
        self._offsets, self._word_ids, self._word_offsets = [], [], []
        self._labels: dict[str, list[np.ndarray]] = {t: [] for t in self.tasks}
        kinds = {t: self.cache.manifest.task(t).kind for t in self.tasks}
        self.kinds = kinds
        need_words = any(k == "token" for k in kinds.values())
        if need_words and self.pooled_mode is not None:
            raise CacheError("Token tasks need token states; train them with source 'tokens'.")
        for shard in range(len(self.info.shards)):
            dataset = partial(self.cache.shard_dataset, self.split, shard)
            self._offsets.append(self.cache.shard_offsets(self.split, shard))
            if need_words:
                word_ids, word_offsets = dataset("word_ids"), dataset("word_offsets")
                if word_ids is None or word_offsets is None:
                    raise CacheError("This cache stores no word ids (its text was not split into words), "
                                     "so token labels cannot be aligned; extract a word-level dataset.")
                self._word_ids.append(word_ids[:].astype(np.int64))
                self._word_offsets.append(word_offsets[:].astype(np.int64))
            for task in kinds:
                labels = dataset(f"labels/{task}")
                if labels is None:
                    raise CacheError(f"The cache split {self.split!r} holds no labels for task {task!r}.")
                self._labels[task].append(labels[:])
        self.lengths = np.concatenate([np.diff(o) for o in self._offsets])  # (n,)

    # --- iteration ----------------------------------------------------------------------
    @property
    def n_examples(self) -> int:
        """Examples served per epoch."""
        return len(self.rows)

    def __len__(self) -> int:
        """Batches per epoch (blocks are batched separately, so a few batches are short)."""
        return sum(-(-len(b.rows) // self.batch_size) for b in self._blocks)

    @translate_read_errors
    def epoch(self, shuffle: bool = False, seed: int = 0) -> Iterator[CacheBatch]:
        """One pass over the rows; with ``shuffle``, a new seeded order for each ``seed``."""
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(self._blocks)) if shuffle else range(len(self._blocks))
        for b in order:
            block = self._blocks[b]
            take = self._source(b)
            for rows in batch_rows(block.rows, self.lengths, self.batch_size, rng, shuffle):
                yield self._gather(block, take, rows)
            self._release(block)

    @translate_read_errors
    def batch(self, rows: Sequence[int]) -> CacheBatch:
        """Split ``rows`` (any rows of the split, in the order given, repeats allowed) as one padded batch.

        The gather of :meth:`epoch`, in the stored precision: rows of one shard are one gather, rows
        of several shards one gather per shard, joined by the same padding rule (padded positions
        repeat the row's first token). An out-of-range row raises :class:`IndexError`.
        """
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)  # (B,)
        n = self.cache.num_examples(self.split)
        if len(rows) == 0:
            raise ConfigError("A batch needs at least one row.")
        if rows.min() < 0 or rows.max() >= n:
            raise IndexError(f"rows must lie in [0, {n}) for split {self.split!r}")
        shard_of = self._layout.shard_of(rows)  # (B,)
        parts, where = [], []
        for shard in np.unique(shard_of):
            at = np.nonzero(shard_of == shard)[0]  # positions in ``rows`` of this shard's rows
            block = Block(int(shard), np.unique(rows[at]))
            parts.append(self._gather(block, self._block_source(block), rows[at]))
            self._release(block)  # a copy: the pages it touched in a mapped shard may go
            where.append(at)
        return parts[0] if len(parts) == 1 else join_batches(parts, np.concatenate(where))

    def _block_source(self, block: Block) -> Take:
        """Where the values of a block outside the epoch's plan come from (read now, never kept)."""
        maps = self._maps[block.shard]
        return self._mapped_take(*maps) if maps is not None else self._slab_take(self._slabs.read(block))

    def _source(self, b: int) -> Take:
        """Where block ``b``'s values come from: shard positions ``(...)`` -> what a batch carries (:data:`Take`)."""
        block = self._blocks[b]
        maps = self._maps[block.shard]
        if maps is None:
            return self._slab_take(self._slabs.slab(b, block))
        spans = self._layout.spans(block)
        read = sum(hi - lo for lo, hi in spans)
        if read * 2 >= spans[-1][1] - spans[0][0]:  # dense: worth reading whole chunks ahead
            for lo, hi in spans:
                for mapped in maps:
                    if mapped is not None:
                        mapped.will_need(lo, hi, self.index)
        return self._mapped_take(*maps)

    def _release(self, block: Block) -> None:
        """Drop the pages ``block`` touched in its shard's maps from the process (its batches are copies), unless the
        feed keeps them (:attr:`keeps_pages`), and the heap's free pages
        (:func:`~layercache.core.memory.release_free_heap`)."""
        release_free_heap()
        maps = self._maps[block.shard]
        if maps is None or self.keeps_pages:
            return
        for lo, hi in self._layout.spans(block):
            for mapped in (m for m in maps if m is not None):  # values, then scales (int8, int4)
                mapped.dont_need(lo, hi, self.index)

    def _mapped_take(self, values, scales) -> Take:
        """Gather values (and scales) straight from their shard's memory maps."""
        return lambda positions: self.codec.served(values.gather(positions, self.index), None if scales is None
                                                   else scales.gather(positions, self.index))

    def _slab_take(self, slab: Slab) -> Take:
        """Gather values (and scales) from a slab read through h5py."""
        def take(positions: np.ndarray):
            values, scales = slab.take(positions)
            return self.codec.served(self.codec.as_torch(values), self.codec.scales_as_torch(scales))
        return take

    def _gather(self, block: Block, take: Take, rows: np.ndarray) -> CacheBatch:
        """One padded batch of ``rows``, whose stored values ``take`` reads by shard position."""
        shard = block.shard
        local = rows - self._starts[shard]  # (B,) rows within the shard
        B = len(rows)
        if self.pooled_mode is not None:
            data, scales = take(local)  # (B, S, D) as served (stored precision; int4 float32), (B, S, 1) or None
            states, mask = data.unsqueeze(1), torch.ones(B, 1, dtype=torch.bool)  # (B, 1, S, D), (B, 1)
            labels = {t: self._sequence_labels(t, shard, local) for t in self.tasks}
            return CacheBatch(states=states, mask=mask, rows=rows, labels=labels,
                              scales=None if scales is None else scales.unsqueeze(1))
        offsets = self._offsets[shard]
        starts = offsets[local]  # (B,) first token of each row in the shard
        at = padded_positions(starts, offsets[local + 1] - starts)  # (B, T) shard token of each position
        # Padded positions repeat the row's first token; mixers and heads ignore them through the mask.
        # Kept in the stored precision: a mixer widens it to float32 in the same pass as its own
        # re-layout, and a GPU receives half the bytes (int4 comes decoded, float32: a mixer cannot widen nibbles).
        states, scales = take(at.token)  # (B, T, S, D), (B, T, S, 1) or None
        mask = at.mask  # (B, T)
        word_ids = at.word_ids(self._word_ids[shard]) if self._word_ids else None  # (B, T)
        labels = {}
        for task in self.tasks:
            if self.kinds[task] == "token":
                labels[task] = self._token_labels(task, shard, local, word_ids)
            else:
                labels[task] = self._sequence_labels(task, shard, local)
        return CacheBatch(states=states, mask=mask, rows=rows, labels=labels, word_ids=word_ids, scales=scales)

    def _sequence_labels(self, task: str, shard: int, local: np.ndarray) -> torch.Tensor:
        """(B,) labels of a sequence or regression task for shard rows ``local (B,)``."""
        return example_labels(self._labels[task][shard][local], self.kinds[task])

    def _token_labels(self, task: str, shard: int, local: np.ndarray, word_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) word labels on the first sub-token of each word, IGNORE_INDEX elsewhere."""
        word_start = self._word_offsets[shard][local]  # (B,) first word of each row in the shard's labels
        n_words = self._word_offsets[shard][local + 1] - word_start  # (B,)
        return first_subtoken_labels(word_ids.numpy(), self._labels[task][shard], word_start, n_words)

    def n_words(self, rows: np.ndarray) -> np.ndarray:
        """(B,) words per row (token tasks); words cut off at the maximum length count too."""
        shard_of = self._layout.shard_of(rows)
        out = np.empty(len(rows), dtype=np.int64)
        for i, (row, shard) in enumerate(zip(rows, shard_of)):
            wo = self._word_offsets[shard]
            local = row - self._starts[shard]
            out[i] = wo[local + 1] - wo[local]
        return out

    # --- gold labels in split order ---------------------------------------------------------
    def gold(self, task: str) -> np.ndarray | list[np.ndarray]:
        """Labels of ``self.rows`` in row order: an array, or per-word arrays for a token task."""
        out = []
        shard_of = self._layout.shard_of(self.rows)
        for row, shard in zip(self.rows, shard_of):
            local = row - self._starts[shard]
            if self.kinds[task] == "token":
                wo = self._word_offsets[shard]
                out.append(self._labels[task][shard][wo[local]:wo[local + 1]])
            else:
                out.append(self._labels[task][shard][local])
        return out if self.kinds[task] == "token" else np.asarray(out)

