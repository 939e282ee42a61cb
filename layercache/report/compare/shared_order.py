"""Every model's probes on the same examples: each cache read in the comparison's shared order.

The probes draw what they draw in cache row order: the training sample of ``max_train`` examples (words), the
validation slice of a cache without a validation split, a sequence task's permuted control labels. Two caches of
one dataset store their rows in other orders (extraction writes the longest examples first, and what is long
depends on the tokenizer), so the same seeded draw would pick other examples in each. :class:`SharedOrderCache`
presents a cache's rows in the shared order of :mod:`.examples` (ascending source row): the probes of every model
then draw the same positions of the same sequence of examples, so they fit, validate and are scored on exactly the
same examples, with nothing in the probes changed.

For a token task the items are words, and a word cut off by one model's truncation has no state in that cache: its
label is hidden (as an unlabelled word) in every cache's view, so the words every model's probes see are the words
all of them kept (:func:`shared_word_drops`).

The view is a :class:`~layercache.store.reader.LayerCache` over the same folder (its own file handles), with the
reads the probes make by row or by split-wide token position translated to the cache's own rows: ``lengths``,
``example_index``, ``labels``, ``pooled``, ``pooled_stored``, ``tokens``, ``token_arrays`` and
``gather_positions``. Statistics over a whole split (``layer_stats``) do not depend on the order. The reads the
probes do not make (padded batches, per-shard streams) are refused rather than given in the wrong order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np
import torch

from ...core.layers import LayerSpec
from ...store.reader import LayerCache
from .examples import SharedExamples


class SharedOrderCache(LayerCache):
    """``cache`` with the rows of each split in the order ``order[split]`` (the cache row of each view row), and
    the token-task labels of ``dropped`` words hidden."""

    def __init__(self, cache: LayerCache, order: dict[str, np.ndarray],
                 dropped: dict[str, dict[int, np.ndarray]] | None = None) -> None:
        super().__init__(cache.path, cache.manifest)
        self.committed = cache.committed
        self._order = {split: np.asarray(rows, np.int64) for split, rows in order.items()}  # (n,) each
        # split -> view row -> the word ids whose labels are hidden (words another cache did not keep)
        self._dropped = dropped or {}
        if isinstance(cache, SharedOrderCache):  # a view of a view: one order from the files' rows
            self._dropped = {split: _merged(cache._dropped.get(split, {}), self._dropped.get(split, {}),
                                            self._order[split]) for split in self._order}
            self._order = {split: cache._order[split][rows] for split, rows in self._order.items()}
        self._view_starts: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def _rows(self, split: str, rows: Sequence[int] | np.ndarray) -> np.ndarray:
        """(k,) the cache rows of view ``rows``."""
        return self._order[split][np.asarray(rows, np.int64)]

    def lengths(self, split: str) -> np.ndarray:
        """(n,) tokens per example, in the shared order."""
        lengths: np.ndarray = super().lengths(split)
        return lengths[self._order[split]]

    def example_index(self, split: str) -> np.ndarray:
        """(n,) source row of each example, in the shared order (ascending)."""
        index: np.ndarray = super().example_index(split)
        return index[self._order[split]]

    def labels(self, split: str, task: str) -> np.ndarray | list[np.ndarray]:
        """A task's labels in the shared order; a token task's words that another cache did not keep unlabelled."""
        labels = super().labels(split, task)
        order = self._order[split]
        if not isinstance(labels, list):
            return np.asarray(labels)[order]
        out = [labels[row] for row in order]
        for row, words in self._dropped.get(split, {}).items():
            kept = np.array(out[row], np.int64)  # a copy: class ids, -1 marks a word without a label
            kept[words[words < len(kept)]] = -1
            out[row] = kept
        return out

    def pooled(self, split: str, mode: str = "mean", layers: LayerSpec | Sequence[LayerSpec] | None = None,
               rows: Sequence[int] | None = None) -> np.ndarray:
        """Pooled vectors, float32 (n, S', D), of view ``rows`` (default all, in the shared order)."""
        wanted = self._order[split] if rows is None else self._rows(split, rows)
        pooled: np.ndarray = super().pooled(split, mode, layers, rows=wanted)
        return pooled

    def pooled_stored(self, split: str, mode: str = "mean",
                      layers: LayerSpec | Sequence[LayerSpec] | None = None) -> torch.Tensor:
        """Pooled vectors of a whole split (n, S', D) in the stored precision, in the shared order."""
        stored: torch.Tensor = super().pooled_stored(split, mode, layers)
        return stored.index_select(0, torch.from_numpy(self._order[split]))

    def tokens(self, split: str, rows: Sequence[int], layers: LayerSpec | Sequence[LayerSpec] | None = None
               ) -> list[np.ndarray]:
        """Token states (t_i, S', D) of view ``rows``."""
        states: list[np.ndarray] = super().tokens(split, self._rows(split, rows), layers)
        return states

    def token_arrays(self, split: str, name: str, rows: Sequence[int]) -> list[np.ndarray]:
        """Per-token ``input_ids`` or ``word_ids`` of view ``rows``."""
        arrays: list[np.ndarray] = super().token_arrays(split, name, self._rows(split, rows))
        return arrays

    def gather_positions(self, split: str, positions: Sequence[Sequence[int]], *,
                         layers: LayerSpec | Sequence[LayerSpec] | None = None) -> list[np.ndarray]:
        """States at split-wide token positions of the view (token ``t`` of view row ``r`` is
        ``lengths(split)[:r].sum() + t``), read at the cache's own positions of the same tokens."""
        if split not in self._view_starts:
            own = np.concatenate([[0], np.cumsum(super().lengths(split))])  # (n + 1,) cache row starts
            view = np.concatenate([[0], np.cumsum(self.lengths(split))])  # (n + 1,) view row starts
            self._view_starts[split] = own, view
        own, view = self._view_starts[split]
        mapped = []
        for asked in positions:
            part = np.asarray(asked, np.int64)  # (k,)
            row = np.searchsorted(view, part, side="right") - 1  # (k,) the view row of each position
            mapped.append(own[self._order[split][row]] + part - view[row])
        return super().gather_positions(split, mapped, layers=layers)

    def _not_reordered(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError("A comparison's shared-order view reads what the probes read; open the cache "
                                  "itself for this.")

    batch = iter_batches = torch_dataset = layer_tokens = _not_reordered


def _merged(inner: dict[int, np.ndarray], outer: dict[int, np.ndarray], order: np.ndarray) -> dict[int, np.ndarray]:
    """The hidden words of a view of a view: ``outer``'s, and ``inner``'s (by its rows) moved to the outer rows."""
    out = dict(outer)
    for row, inner_row in enumerate(order):
        if int(inner_row) in inner:
            out[row] = np.union1d(out.get(row, np.empty(0, np.int64)), inner[int(inner_row)])
    return out


def shared_word_drops(caches: Sequence[LayerCache], shared: SharedExamples) -> list[dict[str, dict[int, np.ndarray]]]:
    """Per cache, split -> position in the shared order -> the word ids it kept that another cache holding token
    states did not (a word cut off by one model's truncation); empty where they all kept the same words."""
    tokened = [k for k, cache in enumerate(caches) if cache.stores_tokens]
    drops: list[dict[str, dict[int, np.ndarray]]] = [{} for _ in caches]
    if len(tokened) < 2:
        return drops
    for split in shared.sizes:
        kept = [[np.unique(ids[ids >= 0]) for ids in
                 caches[k].token_arrays(split, "word_ids", shared.cache_rows(k, split))] for k in tokened]
        for i in range(shared.sizes[split]):
            words = [kept[j][i] for j in range(len(tokened))]
            if all(np.array_equal(words[0], w) for w in words[1:]):
                continue
            every = words[0]
            for w in words[1:]:
                every = np.intersect1d(every, w)
            for j, k in enumerate(tokened):
                extra = np.setdiff1d(words[j], every)
                if len(extra):
                    drops[k].setdefault(split, {})[i] = extra
    return drops


def dropped_words(drops: Sequence[dict[str, dict[int, np.ndarray]]]) -> dict[str, int]:
    """Split -> how many words some cache kept and another did not (each word once)."""
    out: dict[str, int] = {}
    for split in {s for d in drops for s in d}:
        rows = {row for d in drops for row in d.get(split, {})}
        out[split] = sum(len(np.unique(np.concatenate([d[split][row] for d in drops if row in d.get(split, {})])))
                         for row in rows)
    return out


def shared_order(caches: Sequence[LayerCache], shared: SharedExamples,
                 words: bool = True) -> tuple[list[LayerCache], dict[str, int]]:
    """Each cache read in the shared order (itself where its rows already are), and split -> the words left out
    of every model's probes because one model did not keep them (``words``: a token task is probed; else none)."""
    drops = shared_word_drops(caches, shared) if words else [{} for _ in caches]
    views: list[LayerCache] = []
    for k, cache in enumerate(caches):
        order = {split: shared.cache_rows(k, split) for split in shared.sizes}
        if not drops[k] and all(np.array_equal(rows, np.arange(len(rows))) for rows in order.values()):
            views.append(cache)
        else:
            views.append(SharedOrderCache(cache, order, drops[k]))
    return views, dropped_words(drops)
