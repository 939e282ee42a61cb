"""Sample weights in the batched logistic solver: scikit-learn's ``sample_weight`` / ``class_weight``, exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from layercache.errors import ConfigError
from layercache.solvers import fit_logistic


def data(n: int, classes: int, dim: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Standardised features (n, dim) with a noisy linear class signal, and imbalanced labels (n,)."""
    rng = np.random.default_rng(seed)
    y = rng.choice(classes, size=n, p=np.linspace(2, 1, classes) / np.linspace(2, 1, classes).sum())
    X = rng.standard_normal((n, dim)) + rng.standard_normal((classes, dim))[y] * 0.7
    return ((X - X.mean(0)) / X.std(0)).astype(np.float32), y


@pytest.mark.parametrize("classes", [2, 3])
def test_weighted_fit_matches_sklearn_class_weight(classes):
    X, y = data(400, classes)
    class_weight = {c: 1.0 + 1.5 * c for c in range(classes)}
    weight = torch.tensor([class_weight[c] for c in y], dtype=torch.float32)
    Cs = torch.tensor([0.05, 1.0])
    fit = fit_logistic(torch.from_numpy(X).unsqueeze(0), torch.from_numpy(y), classes, Cs, sample_weight=weight,
                       tol=1e-6)
    assert fit.converged
    for g, C in enumerate(Cs.tolist()):
        sk = LogisticRegression(C=C, class_weight=class_weight, max_iter=5000, tol=1e-10).fit(X, y)
        coef, intercept = fit.coef[g, 0].numpy(), fit.intercept[g, 0].numpy()  # (D, K), (K,)
        Z = X @ coef + intercept
        if classes == 2:
            np.testing.assert_allclose(coef[:, 0], sk.coef_[0], atol=2e-3)
            p = 1 / (1 + np.exp(-Z[:, 0]))
            np.testing.assert_allclose(p, sk.predict_proba(X)[:, 1], atol=1e-3)
        else:
            p = np.exp(Z - Z.max(1, keepdims=True))
            np.testing.assert_allclose(p / p.sum(1, keepdims=True), sk.predict_proba(X), atol=1e-3)


def test_integer_weights_equal_repeated_rows_and_unit_weights_change_nothing():
    X, y = data(200, 2, seed=1)
    times = np.random.default_rng(2).integers(1, 4, len(y))
    Xt = torch.from_numpy(X).unsqueeze(0)
    Cs = torch.tensor([0.5])
    weighted = fit_logistic(Xt, torch.from_numpy(y), 2, Cs, sample_weight=torch.from_numpy(times).float(), tol=1e-6)
    X_repeated, y_repeated = np.repeat(X, times, 0), np.repeat(y, times)
    repeated = fit_logistic(torch.from_numpy(X_repeated).unsqueeze(0), torch.from_numpy(y_repeated), 2, Cs, tol=1e-6)
    torch.testing.assert_close(weighted.coef, repeated.coef, atol=1e-3, rtol=0)
    plain = fit_logistic(Xt, torch.from_numpy(y), 2, Cs, tol=1e-6)
    ones = fit_logistic(Xt, torch.from_numpy(y), 2, Cs, tol=1e-6, sample_weight=torch.ones(len(y)))
    torch.testing.assert_close(plain.coef, ones.coef, atol=1e-4, rtol=0)  # the same fit, up to rounding


@pytest.mark.parametrize("weight", [[-1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [float("nan"), 1.0, 1.0, 1.0]])
def test_bad_sample_weights_are_refused_in_one_sentence(weight):
    X = torch.zeros(1, 4, 2)
    with pytest.raises(ConfigError, match="sample_weight must be finite and non-negative with a positive sum"):
        fit_logistic(X, torch.tensor([0, 1, 0, 1]), 2, torch.tensor([1.0]), sample_weight=torch.tensor(weight))
