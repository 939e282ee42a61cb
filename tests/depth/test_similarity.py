"""Linear CKA: its invariances, the pairwise matrix, a direct HSIC formula, and a tiny real cache."""

from __future__ import annotations

import numpy as np
import pytest

import layercache
from layercache.depth import cka_matrix, layer_similarity, linear_cka
from layercache.errors import ConfigError


def hsic_cka(X: np.ndarray, Y: np.ndarray) -> float:
    """CKA from the (n, n) linear kernels and the centring matrix H = I - 11^T/n, as in the paper."""
    n = X.shape[0]
    H = np.eye(n) - np.ones((n, n)) / n  # (n, n)
    K, M = H @ X @ X.T @ H, H @ Y @ Y.T @ H  # (n, n) centred kernels

    def hsic(A, B):
        return np.trace(A @ B)

    return hsic(K, M) / np.sqrt(hsic(K, K) * hsic(M, M))


def random_orthogonal(d: int, rng) -> np.ndarray:
    """A (d, d) orthogonal matrix (Q of a Gaussian matrix)."""
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return q


@pytest.mark.parametrize("n", [200, 6])  # feature-space (n > d) and example-Gram (n <= d) paths
def test_identity_rotation_and_scaling(n):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 8)) + 5.0  # not centred
    Y = X @ rng.normal(size=(8, 8)) + rng.normal(size=(n, 8))  # related, not identical
    assert linear_cka(X, X) == pytest.approx(1.0, abs=1e-12)
    base = linear_cka(X, Y)
    assert 0.05 < base < 0.999
    assert linear_cka(X, Y @ random_orthogonal(8, rng)) == pytest.approx(base, abs=1e-10)
    assert linear_cka(X @ random_orthogonal(8, rng), Y) == pytest.approx(base, abs=1e-10)
    assert linear_cka(3.7 * X, Y) == pytest.approx(base, abs=1e-10)
    assert linear_cka(X, 0.01 * Y) == pytest.approx(base, abs=1e-10)
    assert linear_cka(X, Y) == pytest.approx(linear_cka(Y, X), abs=1e-12)
    assert linear_cka(X, Y) == pytest.approx(hsic_cka(X, Y), abs=1e-10)


def test_not_invariant_to_a_non_isotropic_scaling():
    """The invariance tests above are not vacuous: stretching one axis changes CKA."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 4))
    Y = X + 0.5 * rng.normal(size=(300, 4))
    assert abs(linear_cka(X * np.array([10.0, 1, 1, 1]), Y) - linear_cka(X, Y)) > 0.05


def test_independent_matrices_with_many_examples_are_dissimilar():
    rng = np.random.default_rng(2)
    X, Y = rng.normal(size=(20000, 5)), rng.normal(size=(20000, 7))
    assert linear_cka(X, Y) < 0.01
    assert linear_cka(X, np.hstack([X, Y[:, :2]])) > 0.5  # the same n, dependent: far from small


def test_matches_the_direct_hsic_formula_with_different_widths():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(12, 3)) * 4 + 1
    Y = np.tanh(X @ rng.normal(size=(3, 5))) + 0.3 * rng.normal(size=(12, 5))
    assert linear_cka(X, Y) == pytest.approx(hsic_cka(X, Y), abs=1e-12)
    wide = rng.normal(size=(12, 30))  # n < d: the Gram path
    assert linear_cka(X, wide) == pytest.approx(hsic_cka(X, wide), abs=1e-12)


@pytest.mark.parametrize("n", [300, 5])
def test_cka_matrix_is_symmetric_with_unit_diagonal_and_matches_pairs(n):
    rng = np.random.default_rng(4)
    base = rng.normal(size=(n, 6))
    states = np.stack([base + s * rng.normal(size=(n, 6)) for s in (0.0, 0.3, 1.0, 3.0)], axis=1)  # (n, 4, 6)
    states = states.astype(np.float32)
    M = cka_matrix(states)
    assert M.shape == (4, 4) and M.dtype == np.float64
    np.testing.assert_allclose(M, M.T, atol=0)
    np.testing.assert_array_equal(np.diag(M), 1.0)
    for i in range(4):
        for j in range(4):
            assert M[i, j] == pytest.approx(linear_cka(states[:, i], states[:, j]), abs=1e-9), (i, j)
            assert M[i, j] == pytest.approx(hsic_cka(states[:, i].astype(np.float64),
                                                     states[:, j].astype(np.float64)), abs=1e-6), (i, j)
    if n > 6:  # noise grows away from layer 0: similarity to it falls
        assert M[0, 1] > M[0, 2] > M[0, 3]


def test_constant_layer_is_nan_and_refusals():
    rng = np.random.default_rng(5)
    states = rng.normal(size=(50, 3, 4))
    states[:, 1] = 2.0  # constant: CKA undefined
    M = cka_matrix(states)
    assert np.isnan(M[1]).all() and np.isnan(M[:, 1]).all()
    assert M[0, 0] == 1.0 and np.isfinite(M[0, 2])
    assert np.isnan(linear_cka(states[:, 0], states[:, 1]))
    with pytest.raises(ConfigError, match="at least 2 examples"):
        linear_cka(np.ones((1, 3)), np.ones((1, 3)))
    with pytest.raises(ConfigError, match="same n"):
        linear_cka(np.ones((4, 3)), np.ones((5, 3)))
    with pytest.raises(ConfigError, match=r"\(n, L, d\)"):
        cka_matrix(np.ones((4, 3)))


# --- a real (tiny) cache ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def pooled_cache(tiny_models, tmp_path_factory):
    """The built-in task set through the tiny BERT, pooled vectors only."""
    out = tmp_path_factory.mktemp("depth") / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(out.parent / "home"))
        layercache.extract(str(tiny_models["bert"]), "builtin", out, store="pooled", limit=40, progress=False)
    with layercache.LayerCache.open(out) as cache:
        yield cache


def test_layer_similarity_on_a_cache(pooled_cache):
    cache = pooled_cache
    L = len(cache.layer_names)
    result = layer_similarity(cache)
    assert result.split == "validation" and result.source == "pooled:mean"
    assert result.layer_names == cache.layer_names and result.matrix.shape == (L, L)
    assert result.num_examples == cache.num_examples("validation")
    np.testing.assert_allclose(result.matrix, cka_matrix(cache.pooled("validation", "mean")), atol=1e-12)
    np.testing.assert_array_equal(np.diag(result.matrix), 1.0)

    two = layer_similarity(cache, "train", layers=["embeddings", -1], max_examples=7, seed=3)
    assert two.layer_names == ["embeddings", cache.layer_names[-1]] and two.num_examples == 7
    again = layer_similarity(cache, "train", layers=["embeddings", -1], max_examples=7, seed=3)
    np.testing.assert_array_equal(two.matrix, again.matrix)  # the subsample is seeded
    rows = np.sort(np.random.default_rng(3).choice(cache.num_examples("train"), 7, replace=False))
    expected = cka_matrix(cache.pooled("train", "mean", layers=["embeddings", -1], rows=rows))
    np.testing.assert_allclose(two.matrix, expected, atol=1e-12)


def test_layer_similarity_refusals(pooled_cache):
    cache = pooled_cache
    with pytest.raises(ConfigError, match="no split 'nope'"):
        layer_similarity(cache, "nope")
    with pytest.raises(ConfigError, match="pooled:<mode>"):
        layer_similarity(cache, source="tokens")
    with pytest.raises(ConfigError, match="at least 2"):
        layer_similarity(cache, max_examples=1)
