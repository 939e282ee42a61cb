"""Prediction depth (Baldock et al. 2021): from which layer on an example's prediction is settled.

Given per-layer predictions ``y_l(x)`` (n, L), layer on axis 1 and the final layer last, the depth
of ``x`` is the smallest ``l`` such that ``y_m(x) = y_{L-1}(x)`` for every ``m >= l``. An example whose
predictions agree at every layer has depth 0; the final layer always agrees with itself, so depths
lie in ``0..L-1``. Baldock et al. used k-NN (k = 30) on training embeddings per layer; the per-layer
linear probes serve too: ``LinearProbes.predict`` returns (L, n), so pass its transpose.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError


@dataclass(frozen=True)
class PredictionDepth:
    """Prediction depths and their summary, from :func:`prediction_depth`.

    Attributes:
        depth: (n,) int64, each example's depth in ``0..L-1``.
        counts: (L,) int64, how many examples have each depth.
        accuracy_by_depth: (L,) float64, per depth the accuracy of the final layer's prediction among the
            examples of that depth; NaN where no example has that depth. ``None`` when no labels were given.
        mean_depth: mean of ``depth`` (NaN for no examples).
    """

    depth: np.ndarray
    counts: np.ndarray
    accuracy_by_depth: np.ndarray | None
    mean_depth: float


def prediction_depth(predictions: np.ndarray, labels: np.ndarray | None = None) -> PredictionDepth:
    """Depth of every example from its per-layer ``predictions`` (n, L); ``labels`` (n,) for accuracy by depth.

    Predictions may be class ids or any values comparable with ``==`` (strings too). Vectorised: the
    depth is one past the last layer that disagrees with the final one (0 if none does).
    Refuses predictions that are not 2-D with at least one layer, and labels of another length.
    """
    pred = np.asarray(predictions)
    if pred.ndim != 2 or pred.shape[1] < 1:
        raise ConfigError(f"prediction_depth needs predictions of shape (n, L), layer on axis 1, got {pred.shape} "
                          "(LinearProbes.predict returns (L, n): pass its transpose).")
    n, L = pred.shape
    disagree = pred != pred[:, -1:]  # (n, L), last column all False
    last_from_end = np.argmax(disagree[:, ::-1], axis=1)  # (n,): L-1-k for the last disagreeing layer k
    depth = np.where(disagree.any(axis=1), L - last_from_end, 0).astype(np.int64)  # (n,): k+1, or 0
    counts = np.bincount(depth, minlength=L).astype(np.int64)  # (L,)
    accuracy = None
    if labels is not None:
        gold = np.asarray(labels)
        if gold.shape != (n,):
            raise ConfigError(f"labels must have shape ({n},), one per example, got {gold.shape}.")
        correct = (pred[:, -1] == gold).astype(np.float64)  # (n,)
        hits = np.bincount(depth, weights=correct, minlength=L)  # (L,)
        with np.errstate(divide="ignore", invalid="ignore"):
            accuracy = np.where(counts > 0, hits / np.maximum(counts, 1), np.nan)  # (L,)
    mean = float(depth.mean()) if n else float("nan")
    return PredictionDepth(depth=depth, counts=counts, accuracy_by_depth=accuracy, mean_depth=mean)
