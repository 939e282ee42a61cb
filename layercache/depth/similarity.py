"""Layer similarity by linear CKA (Kornblith et al. 2019).

For representations ``X`` (n, d) and ``Y`` (n, d') of the same ``n`` examples, each centred
(column means subtracted)::

    CKA(X, Y) = ||Y^T X||_F^2 / (||X^T X||_F * ||Y^T Y||_F)

It is 1 for a representation and itself, invariant to an orthogonal transform and to an isotropic
scaling of either argument, and near 0 for unrelated representations when ``n >> d``. Since
``||Y^T X||_F^2 = <X X^T, Y Y^T>_F``, the same value comes from the (d, d') feature-space products
or from the (n, n) example Grams; the functions here take whichever is smaller, always in float64.

    similarity = layer_similarity(cache)          # pooled mean vectors of the validation split
    similarity.matrix                             # (L, L), symmetric, ones on the diagonal
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.layers import LayerSpec
from ..errors import ConfigError
from ..store.feature_source import parse_source, require_source
from ..store.reader import LayerCache

DEFAULT_MAX_EXAMPLES = 5000


def _centred(X: np.ndarray) -> np.ndarray:
    """X (n, d) as float64 with each column's mean subtracted: (n, d)."""
    X = np.asarray(X, dtype=np.float64)
    return X - X.mean(axis=0, keepdims=True)


def _ratio(cross: float, norm_x: float, norm_y: float) -> float:
    """cross / (norm_x * norm_y), NaN when either representation is constant (norm 0)."""
    denom = norm_x * norm_y
    return float(cross / denom) if denom > 0 else float("nan")


def _check_examples(n: int) -> None:
    if n < 2:
        raise ConfigError(f"CKA needs at least 2 examples to centre the representations, got {n}; "
                          "pass more examples.")


def linear_cka(X: np.ndarray, Y: np.ndarray) -> float:
    """Linear CKA between ``X`` (n, d) and ``Y`` (n, d') of the same ``n`` examples, computed in float64.

    Uses the (d, d') feature-space products when ``n`` exceeds both widths, else the (n, n) Grams
    (the same value). Returns NaN when either representation is constant over the examples (CKA is
    undefined: its norm is 0). Refuses arrays that are not 2-D, disagree on ``n``, or hold fewer
    than 2 examples.
    """
    X, Y = np.asarray(X), np.asarray(Y)
    if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0]:
        raise ConfigError(f"linear_cka needs two 2-D arrays (n, d) and (n, d') with the same n, got shapes "
                          f"{X.shape} and {Y.shape}.")
    _check_examples(X.shape[0])
    X, Y = _centred(X), _centred(Y)  # (n, d), (n, d')
    n, d, e = X.shape[0], X.shape[1], Y.shape[1]
    if n > max(d, e):
        cross = np.linalg.norm(Y.T @ X) ** 2  # ||Y^T X||_F^2 from the (d', d) product
        return _ratio(cross, np.linalg.norm(X.T @ X), np.linalg.norm(Y.T @ Y))
    K, M = X @ X.T, Y @ Y.T  # (n, n) example Grams
    return _ratio(np.vdot(K, M), np.linalg.norm(K), np.linalg.norm(M))


def cka_matrix(states: np.ndarray) -> np.ndarray:
    """Linear CKA between every pair of layers of ``states`` (n, L, d): a symmetric (L, L) float64 matrix.

    The diagonal is 1 (NaN for a layer that is constant over the examples, where CKA is undefined,
    as are that layer's entries). Each layer is centred once per pass in float64. For ``n > d`` it
    computes the (d, d) products ``X_i^T X_j`` one row of pairs at a time (memory ``O(n d + d^2)``
    beyond the input); for ``n <= d`` the (n, n) Gram of every layer.
    """
    states = np.asarray(states)
    if states.ndim != 3:
        raise ConfigError(f"cka_matrix needs states of shape (n, L, d), got shape {states.shape}.")
    n, L, d = states.shape
    _check_examples(n)
    if n <= d:
        grams = np.stack([_gram(states[:, i]) for i in range(L)]).reshape(L, n * n)  # (L, n*n)
        cross = grams @ grams.T  # (L, L): <K_i, K_j>_F
        norms = np.sqrt(np.diag(cross))  # (L,): ||K_i||_F = ||X_i^T X_i||_F
    else:
        cross = np.empty((L, L))
        for i in range(L):
            Xi = _centred(states[:, i])  # (n, d)
            cross[i, i] = np.linalg.norm(Xi.T @ Xi) ** 2
            for j in range(i + 1, L):
                cross[i, j] = cross[j, i] = np.linalg.norm(Xi.T @ _centred(states[:, j])) ** 2  # ||X_j^T X_i||_F^2
        norms = np.sqrt(np.diag(cross))  # (L,): ||X_i^T X_i||_F
    denom = np.outer(norms, norms)  # (L, L)
    with np.errstate(divide="ignore", invalid="ignore"):
        matrix = np.where(denom > 0, cross / np.where(denom > 0, denom, 1.0), np.nan)  # (L, L)
    ok = norms > 0
    matrix[np.diag_indices(L)] = np.where(ok, 1.0, np.nan)  # exactly 1 where defined
    return matrix


def _gram(X: np.ndarray) -> np.ndarray:
    """(n, n) Gram of the centred (n, d) representation."""
    X = _centred(X)
    return X @ X.T


@dataclass(frozen=True)
class LayerSimilarity:
    """Linear CKA between the cached layers, from :func:`layer_similarity`.

    Attributes:
        layer_names: the layers compared, in stored order (rows and columns of ``matrix``).
        matrix: (L, L) float64 CKA, symmetric, ones on the diagonal.
        split: the split the vectors came from.
        source: ``pooled:<mode>``, the vectors compared.
        num_examples: how many examples went in (a seeded subsample when the split was larger).
    """

    layer_names: list[str]
    matrix: np.ndarray
    split: str
    source: str
    num_examples: int


def layer_similarity(cache: LayerCache, split: str | None = None, source: str = "pooled:mean",
                     layers: LayerSpec | Sequence[LayerSpec] | None = None,
                     max_examples: int | None = DEFAULT_MAX_EXAMPLES, seed: int = 0) -> LayerSimilarity:
    """Linear CKA between every pair of cached layers, on one pooled vector per example.

    Args:
        cache: an open :class:`~layercache.store.reader.LayerCache`.
        split: the split to read; default the cache's validation split, else ``train``.
        source: ``pooled:<mode>`` (the cache must hold that pooling).
        layers: which layers (default all), as for :meth:`LayerCache.pooled`.
        max_examples: read at most this many examples, a subsample drawn with ``seed`` when the split
            is larger (sorted, in cache order); ``None`` reads them all.
        seed: seed of that subsample.

    Refuses (:class:`~layercache.errors.ConfigError`) a split the cache lacks, a source other than
    ``pooled:<mode>``, ``max_examples`` below 2, and a split with fewer than 2 examples.
    """
    parsed = parse_source(source, allow_auto=False)
    if not parsed.is_pooled:
        raise ConfigError(f"layer_similarity compares one pooled vector per example, got source {source!r}; "
                          "pass source='pooled:<mode>', e.g. 'pooled:mean'.")
    if max_examples is not None and max_examples < 2:
        raise ConfigError(f"max_examples must be at least 2 (CKA centres over examples) or None, got {max_examples}.")
    split = cache.report_split(split, fallback="train")
    cache.require_split(split)  # the fallback too
    n = cache.num_examples(split)
    if n < 2:
        raise ConfigError(f"Split {split!r} holds {n} example(s) and CKA needs at least 2; pick a larger split.")
    rows = None
    if max_examples is not None and n > max_examples:
        rows = np.sort(np.random.default_rng(seed).choice(n, size=max_examples, replace=False))  # (max_examples,)
    states = cache.pooled(split, require_source(cache, parsed).mode, layers=layers, rows=rows)  # (n', L, D) float32
    names = [cache.layer_names[i] for i in cache.layer_index(layers)]
    return LayerSimilarity(layer_names=names, matrix=cka_matrix(states), split=split, source=source,
                           num_examples=int(states.shape[0]))
