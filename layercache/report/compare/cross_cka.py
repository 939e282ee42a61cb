"""Linear CKA between every state of one model and every state of another, on the same examples.

For the states ``X`` (n, d) of one model and ``Y`` (n, e) of another over the same ``n`` examples, each centred,
``CKA(X, Y) = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)`` (Kornblith et al. 2019; :func:`~layercache.depth.linear_cka`
computes one pair). The widths may differ: CKA compares the examples' similarity structure, not coordinates, so it
is the measure of choice across models, and it is invariant to an orthogonal transform and an isotropic scaling of
either side (a projection to K principal directions changes it only by what the directions left out).

:func:`cross_cka` computes the whole (L_a, L_b) matrix. Each pair's numerator is either ``||Y^T X||_F^2`` from the
(d, e) feature products or ``<K_X, K_Y>_F`` from the (n, n) example Grams (the same value); it takes whichever
costs fewer operations for these shapes (:func:`grams_pay`). It computes in float64 with torch, on the threads the
library's thread policy chooses (numpy's BLAS would take every core, and stall on a shared machine). The Grams are
kept (``L n^2`` float64 values a model: 2,000 examples x 13 states is 416 MB) only while they fit half the memory
budget (:func:`~layercache.core.memory.current_budget`); beyond it the feature products are used, whatever they
cost. A comparison of several models computes each model's Grams once for all its pairs (:func:`unit_grams`,
:func:`cka_of_grams`).
"""

from __future__ import annotations

import numpy as np
import torch

from ...core.memory import current_budget
from ...core.threads import computes
from ...errors import ConfigError


def _centred(X: np.ndarray) -> torch.Tensor:
    """``X`` (n, d) as a float64 tensor, each column's mean subtracted."""
    T = torch.as_tensor(np.asarray(X), dtype=torch.float64)
    return T - T.mean(dim=0, keepdim=True)


@computes
def cross_cka(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """(L_a, L_b) float64 linear CKA between every state of ``A`` (n, L_a, d) and every state of ``B`` (n, L_b, e).

    An entry is NaN where either state is constant over the examples (CKA is undefined there). Refuses arrays that
    are not 3-D, disagree on ``n``, or hold fewer than 2 examples.
    """
    A, B = np.asarray(A), np.asarray(B)
    if A.ndim != 3 or B.ndim != 3 or A.shape[0] != B.shape[0]:
        raise ConfigError(f"cross_cka needs states (n, L_a, d) and (n, L_b, e) of the same n examples, got shapes "
                          f"{A.shape} and {B.shape}.")
    if A.shape[0] < 2:
        raise ConfigError(f"CKA needs at least 2 examples to centre the states, got {A.shape[0]}.")
    if grams_pay(A.shape, B.shape) and grams_fit(A.shape[0], A.shape[1] + B.shape[1]):
        return cka_of_grams(unit_grams(A), unit_grams(B))
    cross, norm_a, norm_b = _by_features(A, B)
    denom = np.outer(norm_a, norm_b)  # (La, Lb)
    with np.errstate(divide="ignore", invalid="ignore"):
        matrix: np.ndarray = np.where(denom > 0, cross / np.where(denom > 0, denom, 1.0), np.nan)
    return matrix


def grams_pay(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> bool:
    """Whether the (n, n) Grams of states shaped (n, L_a, d) and (n, L_b, e) cost fewer operations than the
    feature products."""
    n, La, d = shape_a
    Lb, e = shape_b[1:]
    gram_cost = n * n * (La * d + Lb * e + La * Lb)
    feature_cost = La * Lb * n * d * e + n * (La * d * d + Lb * e * e)
    return gram_cost < feature_cost


def grams_fit(n: int, states: int) -> bool:
    """Whether ``states`` (n, n) float64 Grams fit half the memory budget."""
    return states * n * n * 8 <= current_budget() // 2


def unit_grams(states: np.ndarray) -> np.ndarray:
    """(L, n * n) float64: each state's centred (n, n) example Gram over its Frobenius norm (zeros for a state
    constant over the examples), so that CKA of two states is the dot product of their rows."""
    n, L = states.shape[:2]
    out = torch.zeros((L, n * n), dtype=torch.float64)
    for i in range(L):
        X = _centred(states[:, i])  # (n, d)
        K = (X @ X.T).reshape(-1)  # (n * n,)
        norm = float(torch.linalg.vector_norm(K))
        if norm > 0:
            out[i] = K / norm
    return out.numpy()


def cka_of_grams(grams_a: np.ndarray, grams_b: np.ndarray) -> np.ndarray:
    """(L_a, L_b) CKA from two models' :func:`unit_grams`: NaN where a state was constant."""
    matrix: np.ndarray = (torch.from_numpy(grams_a) @ torch.from_numpy(grams_b).T).numpy()
    matrix[~grams_a.any(axis=1)] = np.nan
    matrix[:, ~grams_b.any(axis=1)] = np.nan
    return matrix


def _by_features(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(La, Lb) ||Y_j^T X_i||_F^2 and the norms ||X_i^T X_i||_F, ||Y_j^T Y_j||_F from the centred features."""
    centred_b = [_centred(B[:, j]) for j in range(B.shape[1])]  # Lb x (n, e)
    norm_b = np.array([float(torch.linalg.matrix_norm(Y.T @ Y)) for Y in centred_b])
    cross = np.empty((A.shape[1], B.shape[1]))
    norm_a = np.empty(A.shape[1])
    for i in range(A.shape[1]):
        X = _centred(A[:, i])  # (n, d)
        norm_a[i] = float(torch.linalg.matrix_norm(X.T @ X))
        for j, Y in enumerate(centred_b):
            cross[i, j] = float(torch.linalg.matrix_norm(Y.T @ X)) ** 2
    return cross, norm_a, norm_b


def best_matches(matrix: np.ndarray) -> list[int | None]:
    """For each row of a CKA ``matrix`` (L_a, L_b), the column most similar to it (None for a row of NaN)."""
    out: list[int | None] = []
    for row in np.asarray(matrix, np.float64):
        out.append(None if not np.isfinite(row).any() else int(np.nanargmax(row)))
    return out
