"""Padded float32 minibatches read straight from a cache: ``LayerCache.batch``, ``iter_batches``, ``torch_dataset``.

The layout is :mod:`layercache.store.batches`'s, with zeros at padded positions (see
:meth:`BatchReads.batch`). :class:`BatchReads` is a base of :class:`~layercache.store.reader.LayerCache`:
it reads through the cache's row reads (``pooled``, ``tokens``, ``token_arrays``) and shard access.
:class:`CacheDataset` wraps one split as a map-style torch ``Dataset``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..errors import CacheError, ConfigError
from .batches import CacheBatch, consecutive_starts, example_labels, padded_positions, zero_padding
from .batches import first_subtoken_labels as align_word_labels
from .feature_source import parse_source
from .read_errors import translate_read_errors

if TYPE_CHECKING:
    from .reader import LayerCache


class BatchReads:
    """The batch producer of :class:`~layercache.store.reader.LayerCache` (a base class of it; not used alone)."""

    @translate_read_errors
    def iter_batches(self, split: str, batch_size: int = 32, *, layers=None, source: str = "tokens",
                     tasks: Sequence[str] | None = None, shuffle: bool = False, seed: int = 0,
                     block_size: int = 1024) -> Iterator[CacheBatch]:
        """Yield padded float32 minibatches.

        ``source`` is ``"tokens"`` or ``"pooled:<mode>"``. With ``shuffle``, blocks of
        ``block_size`` consecutive rows are read in a random order and shuffled inside a buffer:
        random enough for SGD, while each read stays one large contiguous slab (a fully random
        order would cost one small HDF5 read per example).
        """
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}.")
        n = self.num_examples(split)
        tasks = [t.name for t in self.tasks] if tasks is None else list(tasks)
        rng = np.random.default_rng(seed)
        blocks = [np.arange(a, min(a + block_size, n)) for a in range(0, n, block_size)]
        if shuffle:
            blocks = [blocks[i] for i in rng.permutation(len(blocks))]
        for block in blocks:
            if shuffle:
                block = rng.permutation(block)
            for start in range(0, len(block), batch_size):
                yield self.batch(split, block[start:start + batch_size], layers=layers, source=source, tasks=tasks)

    @translate_read_errors
    def batch(self, split: str, rows: Sequence[int], *, layers=None, source: str = "tokens",
              tasks: Sequence[str] | None = None) -> CacheBatch:
        """Read the given rows as one padded float32 :class:`CacheBatch`, zeros at padded positions.

        The layout is :mod:`layercache.store.batches`'s (word ids -1 and labels ``IGNORE_INDEX`` at
        padded positions), except for the fill: the feeds that serve heads repeat each row's first
        token there, while this reader has always returned zeros (a plain sum over ``T`` is then a
        masked sum), and keeps doing so.
        """
        rows = np.asarray(rows, dtype=np.int64)
        tasks = [t.name for t in self.tasks] if tasks is None else list(tasks)
        parsed = parse_source(source, allow_auto=False)
        if parsed.is_pooled:
            pooled = self.pooled(split, parsed.mode, layers, rows)  # (B, S, D)
            per_row, word_ids = [p[None] for p in pooled], None
        else:
            per_row = self.tokens(split, rows, layers)
            word_ids = (self.token_arrays(split, "word_ids", rows)
                        if any(self.manifest.task(t).kind == "token" for t in tasks) else None)
        lengths = np.array([len(x) for x in per_row], dtype=np.int64)  # (B,) tokens of each row
        at = padded_positions(consecutive_starts(lengths), lengths)  # (B, T) rows' tokens one after another
        flat = torch.from_numpy(np.concatenate(per_row))  # (t, S, D) float32
        states = zero_padding(flat[torch.from_numpy(at.token)], at.mask)  # (B, T, S, D), zeros at padding
        wid = None if word_ids is None else at.word_ids(np.concatenate(word_ids))  # (B, T)
        labels = {t: self._batch_labels(split, t, rows, wid) for t in tasks}
        return CacheBatch(states=states, mask=at.mask, rows=rows, labels=labels, word_ids=wid)

    def _batch_labels(self, split, task, rows, word_ids: torch.Tensor | None) -> torch.Tensor:
        """(B,) labels of a sequence or regression task, or (B, T) token labels (first sub-token of each word)."""
        spec = self.manifest.task(task)
        if spec.kind != "token":
            return example_labels(np.concatenate([self._label_slice(split, task, r) for r in rows]), spec.kind)
        if word_ids is None:
            raise CacheError(f"Token task {task!r} needs token states with word ids; this cache has none.")
        words = [self._label_slice(split, task, r) for r in rows]  # (W_i,) word labels of each row
        n_words = np.array([len(w) for w in words], dtype=np.int64)  # (B,)
        return align_word_labels(word_ids.numpy(), np.concatenate(words), consecutive_starts(n_words), n_words)

    def _label_slice(self, split: str, task: str, row: int) -> np.ndarray:
        shard, local = self._locate(split, int(row))
        h = self._handle(self.split_info(split).shards[shard].file)
        if self.manifest.task(task).kind != "token":
            return h[f"labels/{task}"][local:local + 1]
        key = (split, shard)
        if key not in self._word_offsets:
            self._word_offsets[key] = h["word_offsets"][:]
        wo = self._word_offsets[key]
        return h[f"labels/{task}"][wo[local]:wo[local + 1]]

    def torch_dataset(self, split: str, *, layers=None, source: str = "tokens",
                      tasks: Sequence[str] | None = None) -> "CacheDataset":
        """A map-style torch ``Dataset`` over one split; pair it with ``dataset.collate``."""
        return CacheDataset(self, split, layers=layers, source=source, tasks=tasks)


class CacheDataset(torch.utils.data.Dataset):
    """Map-style dataset over one split: item ``i`` is row ``i``; ``collate`` pads a list of rows.

    Reading happens in ``collate`` so that a whole minibatch is one grouped read, and each
    DataLoader worker reopens its own HDF5 handles.
    """

    def __init__(self, cache: LayerCache, split: str, *, layers=None, source="tokens", tasks=None):
        self.cache, self.split = cache, split
        self.layers, self.source, self.tasks = layers, source, tasks
        cache.split_info(split)  # fail early on a bad split name

    def __len__(self) -> int:
        return self.cache.num_examples(self.split)

    def __getitem__(self, row: int) -> int:
        if not 0 <= row < len(self):
            raise IndexError(row)
        return row

    def collate(self, rows: list[int]) -> CacheBatch:
        """Read a list of rows as one padded :class:`CacheBatch` (a DataLoader's ``collate_fn``)."""
        return self.cache.batch(self.split, rows, layers=self.layers, source=self.source, tasks=self.tasks)


def first_subtoken_labels(word_labels: torch.Tensor, word_ids: torch.Tensor) -> torch.Tensor:
    """Spread one row's per-word labels onto its tokens: the first sub-token of each word carries the word's label.

    word_labels: (W,); word_ids: (T,) with -1 for special tokens and padding. Returns (T,) int64 with
    IGNORE_INDEX on special tokens, padding and continuation sub-tokens. The one-row form of
    :func:`layercache.store.batches.first_subtoken_labels`, which every batch producer uses.
    """
    labels = np.asarray(word_labels)  # (W,)
    n_words = np.array([len(labels)], dtype=np.int64)  # (1,)
    return align_word_labels(np.asarray(word_ids)[None], labels, np.zeros(1, dtype=np.int64), n_words)[0]  # (T,)

