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
