"""How every probe picks its L2 strength ``C``: the smallest validation loss, and the one training sample.

A probe's ``C`` is chosen per layer from a grid on validation data. Accuracy on a validation set of
a few hundred or thousand examples is a step function: two values of ``C`` often tie or differ by
one example, so which one wins follows rounding noise (a different number of torch threads, the
order of a float sum) and moves every later number with it (the prediction depth of a report and
of a notebook on the same cache differed by 0.03 that way). The validation **loss** the probes are
trained on (cross-entropy in nats for classes, squared error for regression targets) is a smooth
function of the weights, so two values of ``C`` come close only when their models are equally
good: :func:`choose_c` takes the smallest ``C`` whose loss is within 0.1 % of the smallest (the
grid is ascending), so such a pair cannot trade places on rounding noise.

:func:`sample_rows` (from :mod:`layercache.core.holdout`) is the one seeded sample of training rows
(or words) that a probe fitted with ``max_train`` keeps, the same draw for every probe of a task and seed.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from ..core.holdout import DEFAULT_MAX_TRAIN, check_max_train, sample_rows

__all__ = ["DEFAULT_MAX_TRAIN", "check_max_train", "choose_c", "cross_entropy_nats", "sample_rows",
           "validation_loss"]

LOSS_RTOL = 1e-3
"""Validation losses closer than this (relative) count as a tie, won by the smaller ``C``: well above the
spread of a tol-stopped L-BFGS fit across thread counts (~1e-5), well below a real difference."""


def cross_entropy_nats(Z: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """(L,) summed cross-entropy in nats of outputs Z (L, n, K) against class ids y (n,).

    K = 1 is the binomial logit of class 1. In float64 log-softmax form, so every term is finite
    (a probability that rounds to zero in float32 still costs its finite number of nats).
    """
    Z = Z.double()
    if Z.shape[-1] == 1:
        z = Z[..., 0]
        return (F.softplus(z) - y.double().view(1, -1) * z).sum(1).numpy()  # -log sigmoid(+-z)
    logp = torch.log_softmax(Z, dim=-1)
    return -logp.gather(2, y.long().view(1, -1, 1).expand(Z.shape[0], -1, 1)).sum((1, 2)).numpy()


def validation_loss(Z: torch.Tensor, y, n_classes: int | None) -> np.ndarray:
    """(L,) mean loss of outputs Z (L, n, K) against ``y`` (n,): cross-entropy in nats for
    ``n_classes`` classes, half the squared error for a regression (``n_classes`` None)."""
    y = torch.as_tensor(np.asarray(y))
    n = max(int(y.shape[0]), 1)
    if n_classes is None:
        return (0.5 * (Z[..., 0].double() - y.double().view(1, -1)) ** 2).sum(1).numpy() / n
    return cross_entropy_nats(Z, y) / n


def choose_c(losses: np.ndarray, rtol: float = LOSS_RTOL) -> np.ndarray:
    """(L,) index into the ascending ``C`` grid per layer, from validation ``losses`` (G, L): the smallest
    ``C`` whose loss is within ``rtol`` of the layer's smallest loss.

    Two values of ``C`` whose models are equally good reach losses that differ only by where the
    solver stopped (its tolerance, the order of float sums on another number of threads); the margin
    keeps such a pair from trading places, and prefers the stronger regularisation. A layer whose
    losses are all NaN gets the smallest ``C``.
    """
    losses = np.asarray(losses, np.float64)
    losses = np.where(np.isnan(losses), np.inf, losses)
    best = losses.min(0)  # (L,)
    within = losses <= best + rtol * np.abs(best)  # (G, L); the best itself is always within
    return np.argmax(within, axis=0)  # the first (smallest) C within the margin
