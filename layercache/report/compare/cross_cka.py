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

**Debiased CKA** (``debiased=True``). The plain estimator is biased upward when the examples are few for the
states' width (Kornblith et al. 2019 note it): two independent random states of width 1,000 on 100 examples read
about 0.9. The debiased estimator replaces each HSIC by its unbiased estimate (Song et al. 2012), as Nguyen et al.
2021 do: on the Grams, each centred with the diagonal removed (:func:`_unbiased_centred`), so that
``<K~, L~>_F / (n (n - 3))`` is the unbiased HSIC and CKA is again a normalised dot product of the Grams; in the
feature form, from the same products and each example's squared norm (:func:`_debias`), with no ``(n, n)`` array.
It reads near 0 for unrelated states at any sample size, 1 for the same states, keeps CKA's invariance to an
orthogonal transform and an isotropic scaling, and lies in [-1, 1] (a slightly negative value: unrelated states).
It needs at least 4 examples.
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


ESTIMATORS = ("debiased", "plain")
"""The estimators of linear CKA: ``debiased`` (unbiased HSIC, Song et al. 2012) and ``plain`` (Kornblith et al.)."""


def least_examples(debiased: bool) -> int:
    """The fewest examples an estimator is defined on: 2 to centre the states, 4 for the unbiased HSIC."""
    return 4 if debiased else 2


@computes
def cross_cka(A: np.ndarray, B: np.ndarray, *, debiased: bool = False) -> np.ndarray:
    """(L_a, L_b) float64 linear CKA between every state of ``A`` (n, L_a, d) and every state of ``B`` (n, L_b, e):
    the plain estimator, or with ``debiased`` the one of unbiased HSIC (see the module).

    An entry is NaN where either state is constant over the examples (CKA is undefined there). Refuses arrays that
    are not 3-D, disagree on ``n``, or hold fewer examples than the estimator needs (2; debiased 4).
    """
    A, B = np.asarray(A), np.asarray(B)
    if A.ndim != 3 or B.ndim != 3 or A.shape[0] != B.shape[0]:
        raise ConfigError(f"cross_cka needs states (n, L_a, d) and (n, L_b, e) of the same n examples, got shapes "
                          f"{A.shape} and {B.shape}.")
    least = least_examples(debiased)
    if A.shape[0] < least:
        raise ConfigError(f"{'Debiased' if debiased else 'Linear'} CKA needs at least {least} examples, got "
                          f"{A.shape[0]}.")
    if grams_pay(A.shape, B.shape) and grams_fit(A.shape[0], A.shape[1] + B.shape[1]):
        return cka_of_grams(unit_grams(A, debiased), unit_grams(B, debiased))
    cross, norm_a, norm_b = _by_features(A, B, debiased)
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


def unit_grams(states: np.ndarray, debiased: bool = False) -> np.ndarray:
    """(L, n * n) float64: each state's centred (n, n) example Gram (``debiased``: centred for the unbiased HSIC,
    :func:`_unbiased_centred`) over its Frobenius norm (zeros for a state constant over the examples), so that CKA
    of two states is the dot product of their rows."""
    n, L = states.shape[:2]
    out = torch.zeros((L, n * n), dtype=torch.float64)
    for i in range(L):
        X = _centred(states[:, i])  # (n, d)
        gram = X @ X.T  # (n, n)
        K = (_unbiased_centred(gram) if debiased else gram).reshape(-1)  # (n * n,)
        norm = float(torch.linalg.vector_norm(K))
        if norm > 0:
            out[i] = K / norm
    return out.numpy()


def _unbiased_centred(gram: torch.Tensor) -> torch.Tensor:
    """(n, n) ``gram`` with its diagonal removed and centred so that ``<K~, L~>_F / (n (n - 3))`` is Song et al.'s
    unbiased HSIC of two Grams (Kornblith et al.'s ``center_gram(unbiased=True)``); in place."""
    n = gram.shape[0]
    gram.fill_diagonal_(0)
    means = gram.sum(dim=0) / (n - 2)  # (n,)
    means -= means.sum() / (2 * (n - 1))
    gram -= means[:, None]
    gram -= means[None, :]
    return gram.fill_diagonal_(0)


def cka_of_grams(grams_a: np.ndarray, grams_b: np.ndarray) -> np.ndarray:
    """(L_a, L_b) CKA from two models' :func:`unit_grams`: NaN where a state was constant."""
    matrix: np.ndarray = (torch.from_numpy(grams_a) @ torch.from_numpy(grams_b).T).numpy()
    matrix[~grams_a.any(axis=1)] = np.nan
    matrix[:, ~grams_b.any(axis=1)] = np.nan
    return matrix


def _by_features(A: np.ndarray, B: np.ndarray, debiased: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(La, Lb) ||Y_j^T X_i||_F^2 and the norms ||X_i^T X_i||_F, ||Y_j^T Y_j||_F from the centred features; with
    ``debiased`` each term of the unbiased HSIC (:func:`_debias`) and the square roots of the norms' (0 where a
    norm's estimate is not positive: a state constant over the examples)."""
    n = A.shape[0]
    centred_b = [_centred(B[:, j]) for j in range(B.shape[1])]  # Lb x (n, e)
    rows_b = [(Y * Y).sum(dim=1) for Y in centred_b]  # Lb x (n,): the Grams' diagonals
    norm_b = np.array([_norm(float(torch.linalg.matrix_norm(Y.T @ Y)), r, debiased, n)
                       for Y, r in zip(centred_b, rows_b)])
    cross = np.empty((A.shape[1], B.shape[1]))
    norm_a = np.empty(A.shape[1])
    for i in range(A.shape[1]):
        X = _centred(A[:, i])  # (n, d)
        rows_a = (X * X).sum(dim=1)  # (n,)
        norm_a[i] = _norm(float(torch.linalg.matrix_norm(X.T @ X)), rows_a, debiased, n)
        for j, Y in enumerate(centred_b):
            product = float(torch.linalg.matrix_norm(Y.T @ X)) ** 2
            cross[i, j] = _debias(product, rows_a, rows_b[j], n) if debiased else product
    return cross, norm_a, norm_b


def _debias(product: float, rows_x: torch.Tensor, rows_y: torch.Tensor, n: int) -> float:
    """``n (n - 3)`` times the unbiased HSIC of two centred states, from ``||Y^T X||_F^2`` and the (n,) squared
    norms of their examples (the Grams' diagonals): Kornblith et al.'s feature-space form, no (n, n) Gram."""
    return (product - n / (n - 2) * float(rows_x @ rows_y)
            + float(rows_x.sum()) * float(rows_y.sum()) / ((n - 1) * (n - 2)))


def _norm(gram_norm: float, rows: torch.Tensor, debiased: bool, n: int) -> float:
    """A state's ``||X^T X||_F``, or the square root of its debiased self-term (0 when that is not positive)."""
    if not debiased:
        return gram_norm
    return float(np.sqrt(max(_debias(gram_norm ** 2, rows, rows, n), 0.0)))


def best_matches(matrix: np.ndarray) -> list[int | None]:
    """For each row of a CKA ``matrix`` (L_a, L_b), the column most similar to it (None for a row of NaN)."""
    out: list[int | None] = []
    for row in np.asarray(matrix, np.float64):
        out.append(None if not np.isfinite(row).any() else int(np.nanargmax(row)))
    return out
