"""What a head's trainer and evaluation need from a source of minibatches: the :class:`Feed` protocol.

Two feeds satisfy it: :class:`~layercache.store.cache_feed.CacheFeed` reads the batches from a cache,
:class:`~layercache.live.feed.LiveFeed` computes them with the backbone in the loop. Both serve
batches of the shared layout (:class:`~layercache.store.batches.CacheBatch`), so
:func:`~layercache.heads.training.trainer.train_model` and :func:`~layercache.heads.scoring.evaluation.evaluate`
take either, and a head trained on one can be scored on the other.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

import numpy as np

from .batches import CacheBatch


@runtime_checkable
class Feed(Protocol):
    """Padded minibatches of one split for a head; what the trainer, evaluation and the finiteness checks read.

    Attributes:
        split: the split served (named in messages).
        tasks: label tasks attached to every batch (names), in order.
        kinds: task -> ``"sequence"``, ``"token"`` or ``"regression"``.
        layer_names: what state ``s`` of a batch's ``(B, T, S, D)`` states is (named in messages).
        rows: ``(n,)`` the split rows served, ascending.
    """

    split: str
    tasks: list[str]
    kinds: dict[str, str]
    layer_names: list[str]
    rows: np.ndarray

    @property
    def n_examples(self) -> int:
        """Examples served per epoch: ``len(rows)``."""
        ...

    def __len__(self) -> int:
        """Batches per epoch (the trainer's steps per epoch)."""
        ...

    def epoch(self, shuffle: bool = False, seed: int = 0) -> Iterator[CacheBatch]:
        """One pass over ``rows``: every row exactly once, in a seeded random order with ``shuffle``.

        The same ``seed`` gives the same order; unshuffled passes (evaluation) come in a fixed order,
        and callers put results back in row order by ``batch.rows``.
        """
        ...

    def n_words(self, rows: np.ndarray) -> np.ndarray:
        """(B,) words of each of ``rows`` (token tasks), words cut off at the maximum length included."""
        ...

    def gold(self, task: str) -> np.ndarray | list[np.ndarray]:
        """Labels of ``rows`` in row order: an array, or one per-word array per row for a token task."""
        ...
