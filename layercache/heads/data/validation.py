"""The validation data of a training run: the cache's validation split, or a seeded slice of train."""

from __future__ import annotations

import numpy as np

from ...core.holdout import holdout_strata, stratified_holdout
from ...core.tasks import LabelTask
from ...store.reader import LayerCache


def validation_slice(cache: LayerCache, split: str, tasks: list[LabelTask], fraction: float,
                     seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, validation rows): a seeded slice of ``split``, stratified by the first sequence task.

    The same draw as the probes' (:func:`~layercache.core.holdout.stratified_holdout`).
    """
    strata = holdout_strata(tasks)
    labels = cache.labels(split, strata.name) if strata is not None else None
    return stratified_holdout(cache.num_examples(split), fraction, seed, labels, what=f"Split {split!r}")
