"""Expected layer (Tenney et al. 2019): where along the depth a property is read.

Two centres of gravity over layers ``0..L`` (layer 0 = the embeddings):

- of scalar-mix weights ``s``, normalised to sum 1: ``E_s[l] = sum_l l * s_l``
  (:func:`expected_layer`);
- of the gains of cumulative scoring (:func:`cumulative_scoring`): with ``score(l)`` the score of
  a probe on the scalar mix of layers ``0..l``, the gain ``Delta_l = score(l) - score(l-1)`` for
  ``l >= 1`` and ``E_Delta[l] = sum_{l>=1} l * Delta_l / sum_{l>=1} Delta_l``. The original re-ran
  the encoder for every ``l``; from a cache each prefix mix is only another head.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError


def expected_layer(weights: np.ndarray) -> float:
    """``E_s[l] = sum_l l * s_l`` for scalar-mix weights (L+1,) over layers 0..L (0 = embeddings).

    The weights are normalised to sum 1 first (so softmax outputs and raw non-negative weights give
    the same answer). Refuses weights that are not 1-D, not finite, negative, or sum to 0.
    """
    s = np.asarray(weights, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise ConfigError(f"expected_layer needs a 1-D array of weights, one per layer, got shape {s.shape}.")
    if not np.all(np.isfinite(s)) or np.any(s < 0) or s.sum() <= 0:
        raise ConfigError("Scalar-mix weights must be finite, non-negative and not all zero (pass the softmax "
                          f"of the mixer's logits, not the logits), got {s.tolist()}.")
    s = s / s.sum()  # (L+1,), sums to 1
    return float(np.arange(s.size) @ s)


@dataclass(frozen=True)
class CumulativeScores:
    """Cumulative scoring, from :func:`cumulative_scoring`.

    Attributes:
        scores: (L+1,) float64, ``scores[l]`` = score of the probe on the mix of layers 0..l.
        gains: (L+1,) float64, ``gains[l] = scores[l] - scores[l-1]`` for ``l >= 1``; ``gains[0]`` is 0
            (layer 0 has no predecessor; it is the baseline, not a gain).
        expected_layer: ``E_Delta[l]``, or NaN when the gains sum to <= 0 (see :func:`cumulative_scoring`).
    """

    scores: np.ndarray
    gains: np.ndarray
    expected_layer: float


def cumulative_scoring(scores: np.ndarray) -> CumulativeScores:
    """Gains ``Delta_l`` and their expected layer ``E_Delta[l]`` from prefix-mix scores (L+1,).

    ``scores[l]`` is the score (higher is better, e.g. accuracy or F1) of a probe on the scalar mix of
    layers ``0..l``, for ``l = 0..L``. ``E_Delta[l] = sum_{l>=1} l * Delta_l / sum_{l>=1} Delta_l``.

    When the gains sum to <= 0 (the last prefix scores no better than the embeddings alone),
    ``expected_layer`` is NaN: there is no positive mass to take a centre of gravity of, and the
    ratio would be meaningless (of either sign, or unbounded as the sum nears 0). With a positive sum
    but some negative gains the ratio is still returned as defined, and may fall outside ``[1, L]``.
    Refuses scores that are not 1-D with at least 2 finite values.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or s.size < 2 or not np.all(np.isfinite(s)):
        raise ConfigError("cumulative_scoring needs a 1-D array of finite scores for layers 0..L (at least 2), "
                          f"got shape {s.shape}.")
    gains = np.concatenate([[0.0], np.diff(s)])  # (L+1,), gains[0] = 0
    total = gains[1:].sum()
    centre = float(np.arange(1, s.size) @ gains[1:] / total) if total > 0 else float("nan")
    return CumulativeScores(scores=s, gains=gains, expected_layer=centre)
