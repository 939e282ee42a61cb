"""The one seeded validation slice of a training split, shared by the heads and the probes.

When a cache has no validation split, a head (:mod:`layercache.heads`) and a probe
(:mod:`layercache.probes`) both hold out a seeded share of the training rows: :func:`validation_slice`, the one
place that set-up is written. It draws with :func:`stratified_holdout`, stratified by the labels
:func:`holdout_strata` picks, so a head and a probe of the same task and seed validate on the same rows (and a
notebook and the probe report on the same cache agree). :func:`sample_rows` is the one seeded sample of
training rows (or words) a probe fitted with ``max_train`` keeps (:data:`DEFAULT_MAX_TRAIN` by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ..errors import ConfigError
from .tasks import LabelTask

DEFAULT_MAX_TRAIN = 4000
"""Training examples (words for a token task) every probe fits on by default: a seeded sample above it.

The probe report and a notebook's ``LinearProbes(task=...)`` share it, so they give the same
numbers. On the built-in MiniLM cache's token task (32,633 training words) the probes' validation
accuracy at 4,000 words is within 0.01 of the full fit at every layer, and the report's probes,
control task, MDL and cumulative probes of that task take a few seconds instead of 3 minutes."""


class LabelledSplits(Protocol):
    """What a validation slice reads of a cache (:class:`~layercache.store.reader.LayerCache` is one)."""

    def num_examples(self, split: str) -> int:
        """Rows of ``split``."""

    def labels(self, split: str, task: str) -> Any:
        """``task``'s labels of every row of ``split``."""


def validation_slice(cache: LabelledSplits, split: str, tasks: Sequence[LabelTask], fraction: float,
                     seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(kept rows, validation rows) of ``split``: a seeded ``fraction``, stratified by the first sequence task of
    ``tasks`` (:func:`holdout_strata`). A head of these tasks and a probe of one of them (``tasks=[task]``) with
    the same seed draw it here, so they validate on the same rows."""
    strata = holdout_strata(tasks)
    labels = cache.labels(split, strata.name) if strata is not None else None
    return stratified_holdout(cache.num_examples(split), fraction, seed, labels, what=f"Split {split!r}")


def holdout_strata(tasks: Sequence[LabelTask]) -> LabelTask | None:
    """The task whose labels stratify the slice: the first sequence task of ``tasks``, or None.

    Token tasks hold out whole sentences and regression targets have no classes, so neither
    stratifies; a slice without strata is a plain seeded sample of the rows.
    """
    return next((t for t in tasks if t.kind == "sequence"), None)


def stratified_holdout(n: int, fraction: float, seed: int, strata: np.ndarray | None = None, *,
                       what: str = "The training split") -> tuple[np.ndarray, np.ndarray]:
    """(kept, held out) sorted positions of ``n`` rows: a seeded ``fraction`` held out, per stratum.

    Each value of ``strata`` (n,) has its members permuted by one ``numpy`` generator seeded with
    ``seed`` (values in sorted order) and its first ``round(fraction * count)`` held out. When that
    holds out nothing or everything, one seeded row is held out instead. ``what`` names the rows in
    the refusal of fewer than two.
    """
    if not 0 < fraction < 1:
        raise ConfigError(f"val_fraction must be in (0, 1), got {fraction}.")
    if n < 2:
        raise ConfigError(f"{what} has {n} example(s): too few to hold out a validation slice; "
                          "give a validation split.")
    rng = np.random.default_rng(seed)
    strata = np.zeros(n, np.int64) if strata is None else np.asarray(strata)
    if strata.shape != (n,):
        raise ConfigError(f"The strata of a validation slice must hold one value per row ({n}), got shape "
                          f"{strata.shape}.")
    held = [rng.permutation(np.nonzero(strata == value)[0]) for value in np.unique(strata)]
    val = np.sort(np.concatenate([members[: int(round(fraction * len(members)))] for members in held]))
    if len(val) == 0 or len(val) == n:
        val = np.sort(rng.choice(n, size=1, replace=False))
    return np.setdiff1d(np.arange(n), val), val


def sample_rows(n: int, max_train: int | None, seed: int) -> np.ndarray | None:
    """Sorted positions of a seeded sample of ``max_train`` of ``n`` rows, or None to keep all of them."""
    if max_train is None or n <= max_train:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, max_train, replace=False))


def check_max_train(max_train: object) -> None:
    """Refuse, in one sentence, a ``max_train`` that is neither None nor an integer of at least 2."""
    if max_train is not None and (isinstance(max_train, bool) or not isinstance(max_train, (int, np.integer))
                                  or max_train < 2):
        raise ConfigError(f"max_train must be an integer of at least 2 or None, got {max_train!r}.")
