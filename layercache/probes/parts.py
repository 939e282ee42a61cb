"""A probe's features within the memory budget: a part of a split read whole when it fits, else in pieces.

The batched solver fits every layer's probe together (one L-BFGS over all of them), so a probe's
training features are read whole, for every probed state: a seeded sample of ``max_train`` examples
(words) by default, read alone (never the whole split first). What a fitted probe does with the other
parts is independent per layer, or per example, so those parts are read in pieces that fit the budget
(:func:`~layercache.core.memory.current_budget`):

- :meth:`SplitPart.layer_groups`: a group of layers at a time, all of the part's examples (the moments
  of pooled vectors); :meth:`SplitPart.pieces`: the same, each group a run of rows at a time when even
  one layer does not fit (what the per-layer linear probes score and choose ``C`` with);
- :meth:`SplitPart.row_chunks`: every layer, a run of rows at a time (what a probe that mixes layers
  needs).

A piece's features are the same values as in a whole read, in the same order, so the scores are the
same. A part that fits is read whole, in the same pass as the training part, as before the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ..core.holdout import validation_slice
from ..core.memory import current_budget
from ..core.option_names import option
from ..errors import ConfigError
from ..store.manifest import LabelTask
from ..store.reader import LayerCache
from .features import ProbeInputs, read_parts

FEATURE_SHARE = 0.5
"""The share of the budget that one read's float32 features may take; the rest is the read's own working
memory (a shard's layer as float32, the word positions) and what the probe computes from the features."""


def item_bound(cache: LayerCache, split: str, spec: LabelTask, rows: np.ndarray) -> int:
    """At most how many examples (words: at most one per stored token) ``rows`` of ``split`` give."""
    if spec.kind == "token":
        return int(np.sum(cache.lengths(split)[rows]))
    return len(rows)


def feature_bytes(cache: LayerCache, n_items: int, n_layers: int) -> int:
    """Bytes of ``(n_layers, n_items, D)`` float32 features."""
    return int(n_items) * int(n_layers) * cache.hidden_size * 4


@dataclass
class SplitPart:
    """Rows of one split whose features a fitted probe reads: whole (``inputs``), or in pieces on demand.

    ``relabel``: applied to each piece's inputs, giving its targets (a control task's labels).
    """

    cache: LayerCache
    split: str
    spec: LabelTask
    source: str
    index: list[int]
    rows: np.ndarray
    want_types: bool = False
    inputs: ProbeInputs | None = None
    relabel: Callable[[ProbeInputs], np.ndarray] | None = None

    def _done(self, inputs: ProbeInputs) -> ProbeInputs:
        if self.relabel is not None:
            inputs.y = self.relabel(inputs)
        return inputs

    def read(self, layers: Sequence[int] | None = None, rows: np.ndarray | None = None) -> ProbeInputs:
        """Features of ``layers`` (positions into ``index``; default all) of ``rows`` (default all of the part)."""
        index = self.index if layers is None else [self.index[i] for i in layers]
        rows = self.rows if rows is None else rows
        return read_parts(self.cache, self.split, self.spec, self.source, index, [rows],
                          want_types=self.want_types)[0]

    def layer_groups(self, budget: int | None = None) -> Iterator[tuple[np.ndarray, ProbeInputs]]:
        """``(positions into index, inputs of those layers)``: consecutive groups of layers whose features fit
        :data:`FEATURE_SHARE` of ``budget`` (default: the current budget); one group when the part is read."""
        L = len(self.index)
        if self.inputs is not None:
            yield np.arange(L), self._done(self.inputs)
            return
        budget = current_budget() if budget is None else budget
        per_layer = feature_bytes(self.cache, item_bound(self.cache, self.split, self.spec, self.rows), 1)
        size = max(1, min(L, int(FEATURE_SHARE * budget) // max(per_layer, 1)))
        for start in range(0, L, size):
            layers = np.arange(start, min(L, start + size))
            yield layers, self._done(self.read(layers))

    def pieces(self, budget: int | None = None) -> Iterator[tuple[np.ndarray, Iterator[ProbeInputs]]]:
        """``(positions into index, its chunks)``: the groups of :meth:`layer_groups`, each as consecutive runs of
        the part's rows (one run when a group fits); a group of one layer is cut into runs of rows when even
        one layer of the part does not fit :data:`FEATURE_SHARE` of ``budget``."""
        L = len(self.index)
        if self.inputs is not None:
            yield np.arange(L), iter([self._done(self.inputs)])
            return
        budget = current_budget() if budget is None else budget
        per_layer = feature_bytes(self.cache, item_bound(self.cache, self.split, self.spec, self.rows), 1)
        if per_layer <= FEATURE_SHARE * budget:
            for layers, inputs in self.layer_groups(budget):
                yield layers, iter([inputs])
            return
        for layer in range(L):
            yield np.array([layer]), self._chunks(np.array([layer]), budget)

    def row_chunks(self, budget: int | None = None) -> Iterator[ProbeInputs]:
        """Inputs of every layer for consecutive runs of the part's rows (in cache order) whose features fit
        :data:`FEATURE_SHARE` of ``budget``; one chunk when the part is read. Their examples, one chunk after
        another, are the part's in its order."""
        if self.inputs is not None:
            yield self._done(self.inputs)
            return
        yield from self._chunks(None, current_budget() if budget is None else budget)

    def _chunks(self, layers: np.ndarray | None, budget: int) -> Iterator[ProbeInputs]:
        """``layers`` (None: all) of consecutive runs of the part's rows whose features fit the budget's share."""
        rows = np.unique(self.rows)
        sizes = (self.cache.lengths(self.split)[rows] if self.spec.kind == "token" else np.ones(len(rows), np.int64))
        per_item = feature_bytes(self.cache, 1, len(self.index) if layers is None else len(layers))
        limit = max(1, int(FEATURE_SHARE * budget) // max(per_item, 1))  # items per chunk
        ends = np.cumsum(sizes)
        cuts = [0]
        while cuts[-1] < len(rows):
            base = ends[cuts[-1] - 1] if cuts[-1] else 0
            cuts.append(max(int(np.searchsorted(ends, base + limit, side="right")), cuts[-1] + 1))
        for a, b in zip(cuts[:-1], cuts[1:]):
            yield self._done(self.read(layers, rows=rows[a:b]))


def whole_part(cache: LayerCache, split: str, spec: LabelTask, source: str, index: list[int], *,
               want_types: bool = False) -> SplitPart:
    """Every row of ``split``, read whole when it fits the budget's share, else in pieces when asked."""
    cache.require_split(split)
    return SplitPart(cache, split, spec, source, index, np.arange(cache.num_examples(split)), want_types)


def read_train_parts(cache: LayerCache, spec: LabelTask, source: str, index: list[int], split: str,
                     val_split: str | None, val_fraction: float, seed: int, *, max_train: int | None,
                     want_types: bool = False, budget: int | None = None) -> tuple[ProbeInputs, SplitPart, str]:
    """A probe's training sample (every state, read now), its validation part, and what validates.

    As :func:`~.features.read_train_val` (the same rows, the same sample as taking it after the read), but
    the training part holds only the seeded sample of ``max_train`` examples (words), and the validation
    part is read in the same pass only when both fit :data:`FEATURE_SHARE` of the budget; else later, in
    pieces (:class:`SplitPart`). Refuses, in one sentence, a training sample that does not fit the budget.
    """
    budget = current_budget() if budget is None else budget
    cache.require_split(split)
    if val_split is not None:
        cache.require_split(val_split)
        rows, val_rows = np.arange(cache.num_examples(split)), np.arange(cache.num_examples(val_split))
        where = val_split
    else:
        rows, val_rows = validation_slice(cache, split, [spec], val_fraction, seed)  # a head of this task's rows
        where = f"{split} (seeded {val_fraction:.0%} slice, seed {seed})"
    L = len(index)
    n_train = item_bound(cache, split, spec, rows)
    n_train = n_train if max_train is None else min(n_train, max_train)
    train_bytes = feature_bytes(cache, n_train, L)
    if train_bytes > FEATURE_SHARE * budget:
        raise ConfigError(f"The probes' training features ({n_train:,} examples x {L} states x {cache.hidden_size}, "
                          f"{train_bytes / 2**20:,.0f} MiB as float32) do not fit half the memory budget of "
                          f"{budget / 2**20:,.0f} MiB; lower {option('max_train')} or raise the budget "
                          f"({option('memory_budget')}).")
    val_bytes = feature_bytes(cache, item_bound(cache, val_split or split, spec, val_rows), L)
    sample = (max_train, seed)
    val = SplitPart(cache, val_split or split, spec, source, index, val_rows, want_types)
    if val_split is None and train_bytes + val_bytes <= FEATURE_SHARE * budget:  # one pass, as before the budget
        train, val.inputs = read_parts(cache, split, spec, source, index, [rows, val_rows], want_types=want_types,
                                       sample=sample)
        return train, val, where
    train = read_parts(cache, split, spec, source, index, [rows], want_types=want_types, sample=sample)[0]
    if train_bytes + val_bytes <= FEATURE_SHARE * budget:
        val.inputs = val.read()
    return train, val, where
