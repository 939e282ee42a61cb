"""Control tasks (Hewitt & Liang 2019): labels a probe can only learn by memorising its inputs.

A probe that scores well may have found the property in the states, or may be expressive enough
to memorise word identities. A control task keeps the task's output space and label frequencies
but makes the label a fixed random function of the word type, so it is learnable only through
memorisation; selectivity = task score - control score tells the two apart.

- Token tasks: each word type gets one label drawn from the empirical label distribution of the
  training words, the same label at every occurrence and in every split. The type is the tuple of
  the word's sub-token input ids (what the cache holds; for an uncased tokenizer that is the
  lower-cased word form, for a cased one "The" and "the" are two types).
- Sequence tasks (no types): a seeded permutation of each split's labels, which keeps the label
  distribution and breaks every link between input and label.

The label of a type comes from a hash of the seed and the ids, not from a generator consumed in
order, so it does not depend on which split, rows or order a type is met in.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError


class ControlTask:
    """Seeded control labels for one task.

    Args:
        seed: picks the random function from types to labels (and the permutations).

    ``fit(labels, n_classes)`` learns the empirical label distribution of the training labels;
    ``word_labels(types)`` then gives each word type its control label, and
    ``sequence_labels(labels, key)`` permutes a split's labels.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def fit(self, labels: np.ndarray, n_classes: int | None = None) -> "ControlTask":
        """Learn the empirical distribution (K,) of ``labels`` (class ids), kept as ``distribution_``."""
        labels = np.asarray(labels, np.int64)
        if labels.size == 0:
            raise ConfigError("A control task needs training labels; the training split has none.")
        counts = np.bincount(labels, minlength=n_classes or 0).astype(np.float64)
        self.distribution_ = counts / counts.sum()
        return self

    def word_labels(self, types: Sequence[tuple[int, ...]]) -> np.ndarray:
        """(n,) int64 control label of each word type, drawn from ``distribution_``."""
        if not hasattr(self, "distribution_"):
            raise ConfigError("Call ControlTask.fit(training labels) before word_labels().")
        cdf = np.cumsum(self.distribution_)
        seen: dict[tuple[int, ...], int] = {}
        out = np.empty(len(types), np.int64)
        for i, word in enumerate(types):
            label = seen.get(word)
            if label is None:
                u = self.uniform(word)
                label = seen[word] = min(int(np.searchsorted(cdf, u, side="right")), len(cdf) - 1)
            out[i] = label
        return out

    def uniform(self, word: tuple[int, ...]) -> float:
        """A number in [0, 1) that is a fixed function of (seed, word type)."""
        data = np.asarray([self.seed, *word], np.int64).tobytes()
        return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") / 2.0**64

    def sequence_labels(self, labels: np.ndarray, key: str = "") -> np.ndarray:
        """A seeded permutation of ``labels`` (one split's, in cache order); ``key`` (the split name)
        gives each split its own permutation."""
        rng = np.random.default_rng([int(self.seed), zlib.crc32(key.encode())])
        labels = np.asarray(labels)
        return labels[rng.permutation(len(labels))]
