"""The validation data of a training run: the cache's validation split, or a seeded slice of train."""

from __future__ import annotations

import numpy as np

from ..core.tasks import LabelTask
from ..errors import ConfigError
from ..store.reader import LayerCache


def validation_slice(cache: LayerCache, split: str, tasks: list[LabelTask], fraction: float,
                     seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, validation rows): a seeded slice of ``split``, stratified by the first class task."""
    if not 0 < fraction < 1:
        raise ConfigError(f"val_fraction must be in (0, 1), got {fraction}.")
    n = cache.num_examples(split)
    if n < 2:
        raise ConfigError(f"Split {split!r} has {n} example(s): too few to hold out a validation slice; "
                          "give a validation split.")
    rng = np.random.default_rng(seed)
    strata = next((t for t in tasks if t.kind == "sequence"), None)
    labels = cache.labels(split, strata.name) if strata is not None else np.zeros(n, dtype=np.int64)
    val = []
    for value in np.unique(labels):
        members = rng.permutation(np.nonzero(labels == value)[0])
        val.append(members[: int(round(fraction * len(members)))])
    val = np.sort(np.concatenate(val))
    if len(val) == 0:
        val = np.sort(rng.choice(n, size=1, replace=False))
    train = np.setdiff1d(np.arange(n), val)
    return train, val
