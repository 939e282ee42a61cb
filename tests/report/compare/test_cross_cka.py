"""Linear CKA across two models' states: every entry is linear_cka of its pair, whichever way it is computed."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from layercache.depth import linear_cka
from layercache.errors import ConfigError
from layercache.report.compare import cross_cka

module = importlib.import_module("layercache.report.compare.cross_cka")  # the module: the package exports the function


def _pairwise(A, B):
    return np.array([[linear_cka(A[:, i], B[:, j]) for j in range(B.shape[1])] for i in range(A.shape[1])])


def _states(n, L, d, seed):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, d))
    return np.stack([base @ rng.standard_normal((d, d)) * (k + 1) + rng.standard_normal((n, d)) * k
                     for k in range(L)], axis=1).astype(np.float32)  # (n, L, d): related states, widths differ


@pytest.mark.parametrize("n", [12, 400])  # fewer examples than widths: the Grams; more: the feature products
def test_every_entry_is_the_pairs_linear_cka(n, monkeypatch):
    A, B = _states(n, 4, 24, 0), _states(n, 3, 40, 1)
    used = []
    for name in ("unit_grams", "_by_features"):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _o=original, _n=name: used.append(_n) or _o(*a))
    matrix = cross_cka(A, B)
    assert matrix.shape == (4, 3)
    np.testing.assert_allclose(matrix, _pairwise(A, B), atol=1e-10)
    assert used == (["unit_grams", "unit_grams"] if n == 12 else ["_by_features"])
    np.testing.assert_allclose(cross_cka(B, A), matrix.T, atol=1e-10)


def test_grams_beyond_the_memory_budget_give_way_to_the_feature_products(monkeypatch):
    A, B = _states(10, 3, 50, 2), _states(10, 2, 60, 3)
    expected = _pairwise(A, B)
    assert module.grams_pay(A.shape, B.shape)
    monkeypatch.setattr(module, "current_budget", lambda: 1000)  # the Grams (5 x 10 x 10 x 8 bytes) do not fit
    monkeypatch.setattr(module, "unit_grams", lambda *a: pytest.fail("the Grams were kept beyond the budget"))
    np.testing.assert_allclose(cross_cka(A, B), expected, atol=1e-10)


def test_a_state_and_its_rotation_match_and_a_constant_state_is_nan():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((50, 8))
    Q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    A = np.stack([X, np.ones_like(X)], axis=1)  # (50, 2, 8): the second state is constant
    B = np.stack([3 * X @ Q, rng.standard_normal((50, 8))], axis=1)
    matrix = cross_cka(A, B)
    assert matrix[0, 0] == pytest.approx(1.0) and matrix[0, 1] < 0.5
    assert np.isnan(matrix[1]).all()
    assert module.best_matches(matrix) == [0, None]
    by_grams = module.cka_of_grams(module.unit_grams(A), module.unit_grams(B))  # the way several models share
    np.testing.assert_allclose(by_grams, matrix, atol=1e-10)
    transposed = module.cka_of_grams(module.unit_grams(B), module.unit_grams(A))
    assert np.isnan(by_grams[1]).all() and np.isnan(transposed[:, 1]).all()


def test_refusals():
    with pytest.raises(ConfigError, match="same n"):
        cross_cka(np.zeros((5, 2, 3)), np.zeros((6, 2, 3)))
    with pytest.raises(ConfigError, match="at least 2 examples"):
        cross_cka(np.zeros((1, 2, 3)), np.zeros((1, 2, 3)))


def _unbiased_hsic(K, L):
    """Song et al. (2012)'s unbiased HSIC of two (n, n) Grams, term by term as the paper writes it."""
    n = K.shape[0]
    K, L = K.copy(), L.copy()
    np.fill_diagonal(K, 0)
    np.fill_diagonal(L, 0)
    one = np.ones(n)
    return (np.trace(K @ L) + (one @ K @ one) * (one @ L @ one) / ((n - 1) * (n - 2))
            - 2 / (n - 2) * (one @ K @ L @ one)) / (n * (n - 3))


def _debiased_reference(X, Y):
    """Debiased linear CKA of (n, d) and (n, e) from the unbiased HSIC of their uncentred linear Grams."""
    K, L = X @ X.T, Y @ Y.T
    return _unbiased_hsic(K, L) / np.sqrt(_unbiased_hsic(K, K) * _unbiased_hsic(L, L))


def _both_ways(A, B, monkeypatch):
    """cross_cka(debiased=True) by the Grams and by the feature products (the budget forbidding the Grams)."""
    by_grams = cross_cka(A, B, debiased=True)
    with monkeypatch.context() as mp:
        mp.setattr(module, "current_budget", lambda: 0)
        by_features = cross_cka(A, B, debiased=True)
    return by_grams, by_features


def test_debiased_cka_reads_unrelated_states_near_zero_where_plain_cka_reads_high(monkeypatch):
    """50 examples of two independent random states 2,000 wide: plain CKA far above 0, the debiased one near 0."""
    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((50, 1, 2000)), rng.standard_normal((50, 1, 2000))
    plain = cross_cka(A, B)[0, 0]
    assert plain > 0.9  # the bias: the Grams of wide random states are all close to the identity
    for debiased in _both_ways(A, B, monkeypatch):
        assert abs(debiased[0, 0]) < 0.05, debiased


def test_debiased_cka_matches_the_unbiased_hsic_written_out(monkeypatch):
    A, B = _states(20, 3, 24, 6), _states(20, 2, 40, 7)
    expected = np.array([[_debiased_reference(A[:, i].astype(np.float64), B[:, j].astype(np.float64))
                          for j in range(B.shape[1])] for i in range(A.shape[1])])
    for matrix in _both_ways(A, B, monkeypatch):
        np.testing.assert_allclose(matrix, expected, atol=1e-9)
    wide = _states(400, 2, 24, 8), _states(400, 2, 30, 9)  # more examples than widths: the feature products
    expected = np.array([[_debiased_reference(wide[0][:, i].astype(np.float64), wide[1][:, j].astype(np.float64))
                          for j in range(2)] for i in range(2)])
    np.testing.assert_allclose(cross_cka(*wide, debiased=True), expected, atol=1e-9)


def test_both_estimators_read_one_for_the_same_states_and_ignore_rotations_and_scales(monkeypatch):
    rng = np.random.default_rng(10)
    X = rng.standard_normal((30, 60))  # fewer examples than width
    Q, _ = np.linalg.qr(rng.standard_normal((60, 60)))
    A = X[:, None]
    for B in (X[:, None], (7.5 * X @ Q)[:, None]):
        assert cross_cka(A, B)[0, 0] == pytest.approx(1.0)
        for matrix in _both_ways(A, B, monkeypatch):
            assert matrix[0, 0] == pytest.approx(1.0)
    Y = rng.standard_normal((30, 1, 20)) + X[:, None, :20]  # a related state: the same value either side
    for matrix in _both_ways(A, Y, monkeypatch):
        turned = _both_ways((0.3 * X @ Q)[:, None], Y, monkeypatch)
        np.testing.assert_allclose(turned, [matrix, matrix], atol=1e-9)
    with pytest.raises(ConfigError, match="at least 4 examples"):
        cross_cka(np.ones((3, 1, 2)), np.ones((3, 1, 2)), debiased=True)


def test_a_negative_debiased_cka_has_its_own_colour():
    """On the heatmap a debiased value below 0 is grey (the colour map's under colour, an arrow on the bar), not the
    colour of 0; a pair with none below 0 keeps the plain bar."""
    from types import SimpleNamespace

    from layercache.report.compare.figures import figure_cka

    def drawn(values):
        pair = {"cka": values, "rows": ["a0", "a1"], "columns": ["b0", "b1"], "best_match_of_rows": [0, 1],
                "a": "A", "b": "B", "n": 200, "states": "mean"}
        comparison = SimpleNamespace(similarity=[pair], meta={"cka": {"estimator": "debiased"}})
        fig = figure_cka(comparison, 0)
        image = fig.axes[0].images[0]
        colorbar = image.colorbar
        return image, colorbar

    image, colorbar = drawn([[0.9, -0.02], [0.1, 0.8]])
    grey = image.cmap.get_under()
    assert tuple(image.to_rgba(np.array([-0.02]))[0]) == tuple(grey) != tuple(image.to_rgba(np.array([0.0]))[0])
    assert colorbar.extend == "min" and "below 0" in colorbar.ax.get_ylabel()
    _, colorbar = drawn([[0.9, 0.0], [0.1, 0.8]])
    assert colorbar.extend == "neither" and "below 0" not in colorbar.ax.get_ylabel()
