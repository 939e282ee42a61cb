"""Linear CKA between every state of one model and every state of another, on the same examples.

For the states ``X`` (n, d) of one model and ``Y`` (n, e) of another over the same ``n`` examples, each centred,
``CKA(X, Y) = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)`` (Kornblith et al. 2019; :func:`~layercache.depth.linear_cka`
computes one pair). The widths may differ: CKA compares the examples' similarity structure, not coordinates, so it
is the measure of choice across models, and it is invariant to an orthogonal transform and an isotropic scaling of
either side (a projection to K principal directions changes it only by what the directions left out).

:func:`cross_cka` computes the whole (L_a, L_b) matrix. Each pair's numerator is either ``||Y^T X||_F^2`` from the
(d, e) feature products or ``<K_X, K_Y>_F`` from the (n, n) example Grams (the same value); it takes whichever
costs fewer operations for these shapes, in float64. The Grams of the model with fewer states are kept (``L n^2``
float64 values: 2,000 examples x 13 states is 416 MB), and only while they fit half the memory budget
(:func:`~layercache.core.memory.current_budget`); beyond it the feature products are used, whatever they cost.
"""

from __future__ import annotations

import numpy as np

from ...core.memory import current_budget
from ...errors import ConfigError


def _centred(X: np.ndarray) -> np.ndarray:
    """``X`` (n, d) as float64, each column's mean subtracted."""
    X = np.asarray(X, np.float64)
    centred: np.ndarray = X - X.mean(axis=0, keepdims=True)
    return centred


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
    if A.shape[1] < B.shape[1]:  # the Grams of the side with fewer states are the ones kept
        return np.ascontiguousarray(_cross(B, A).T)
    return _cross(A, B)


def _cross(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    n, La, d = A.shape
    Lb, e = B.shape[1:]
    gram_cost = n * n * (La * d + Lb * e + La * Lb)
    feature_cost = La * Lb * n * d * e + n * (La * d * d + Lb * e * e)
    grams_fit = Lb * n * n * 8 <= current_budget() // 2
    cross, norm_a, norm_b = (_by_grams if grams_fit and gram_cost < feature_cost else _by_features)(A, B)
    denom = np.outer(norm_a, norm_b)  # (La, Lb)
    with np.errstate(divide="ignore", invalid="ignore"):
        matrix: np.ndarray = np.where(denom > 0, cross / np.where(denom > 0, denom, 1.0), np.nan)
    return matrix


def _by_grams(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(La, Lb) <K_i, M_j>_F and the norms ||K_i||_F, ||M_j||_F of the centred (n, n) example Grams."""
    grams_b = np.stack([_gram(B[:, j]) for j in range(B.shape[1])]).reshape(B.shape[1], -1)  # (Lb, n*n)
    norm_b = np.linalg.norm(grams_b, axis=1)  # (Lb,)
    cross = np.empty((A.shape[1], B.shape[1]))
    norm_a = np.empty(A.shape[1])
    for i in range(A.shape[1]):
        K = _gram(A[:, i]).reshape(-1)  # (n*n,)
        norm_a[i] = np.linalg.norm(K)
        cross[i] = grams_b @ K
    return cross, norm_a, norm_b


def _gram(X: np.ndarray) -> np.ndarray:
    X = _centred(X)
    gram: np.ndarray = X @ X.T  # (n, n)
    return gram


def _by_features(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(La, Lb) ||Y_j^T X_i||_F^2 and the norms ||X_i^T X_i||_F, ||Y_j^T Y_j||_F from the centred features."""
    centred_b = [_centred(B[:, j]) for j in range(B.shape[1])]  # Lb x (n, e)
    norm_b = np.array([np.linalg.norm(Y.T @ Y) for Y in centred_b])
    cross = np.empty((A.shape[1], B.shape[1]))
    norm_a = np.empty(A.shape[1])
    for i in range(A.shape[1]):
        X = _centred(A[:, i])  # (n, d)
        norm_a[i] = np.linalg.norm(X.T @ X)
        for j, Y in enumerate(centred_b):
            cross[i, j] = np.linalg.norm(Y.T @ X) ** 2
    return cross, norm_a, norm_b


def best_matches(matrix: np.ndarray) -> list[int | None]:
    """For each row of a CKA ``matrix`` (L_a, L_b), the column most similar to it (None for a row of NaN)."""
    out: list[int | None] = []
    for row in np.asarray(matrix, np.float64):
        out.append(None if not np.isfinite(row).any() else int(np.nanargmax(row)))
    return out
