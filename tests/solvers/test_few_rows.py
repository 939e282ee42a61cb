"""Fewer rows than dimensions: the solver works in the span of the centred rows (``r = n - 1`` directions, from the
``(n, n)`` kernel when ``n <= D / 2``), and the fit is the one the full basis and scikit-learn reach."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from layercache.solvers import fit_logistic
from layercache.solvers.linear import _gram_eigen


def rows(n: int, dim: int, classes: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(1, n, dim) features with a class signal and one repeated row (a direction of zero variance), labels (n,)."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    X = rng.standard_normal((n, dim)) + 0.8 * rng.standard_normal((classes, dim))[y]
    X[1], y[1] = X[0], y[0]
    return torch.from_numpy(X.astype(np.float32)).unsqueeze(0), torch.from_numpy(y)


@pytest.mark.parametrize("n", [2, 9, 40, 70])
def test_the_basis_spans_the_centred_rows_with_orthonormal_or_zero_columns(n):
    X, _ = rows(n, 96, 2)
    s, V, _ = _gram_eigen(X, 16384, 0)  # (1, r), (1, 96, r)
    assert V.shape == (1, 96, min(96, n - 1)) and s.shape == (1, min(96, n - 1))
    gram = V[0].T @ V[0]
    nonzero = (s[0] > 0).float()
    torch.testing.assert_close(gram, torch.diag(nonzero), atol=2e-5, rtol=0)
    centred = X[0] - X[0].mean(0)
    residual = centred - centred @ V[0] @ V[0].T  # what the basis misses of the rows
    assert float(residual.abs().max()) <= 1e-4 * float(centred.abs().max())
    # the repeated row leaves one direction fewer than n - 1: zero from the kernel, float32 noise from the Gram
    assert float(s[0, 0]) <= 1e-5 * float(s[0, -1])
    assert n == 2 or float(s[0, 1:].min()) > 1e-3 * float(s[0, -1])
    if 2 * n <= 96:
        assert int((s[0] == 0).sum()) == 1


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("n", [6, 40])
def test_few_rows_reach_sklearns_optimum(n, classes):
    X, y = rows(n, 96, classes, seed=n)
    Cs = torch.tensor([0.05, 1.0])
    fit = fit_logistic(X, y, classes, Cs, tol=1e-6, max_iter=2000)
    for g, C in enumerate(Cs.tolist()):
        sk = LogisticRegression(C=C, max_iter=10000, tol=1e-10).fit(X[0].numpy(), y.numpy())
        Z = X[0].numpy() @ fit.coef[g, 0].numpy() + fit.intercept[g, 0].numpy()  # (n, K)
        if classes == 2:
            np.testing.assert_allclose(1 / (1 + np.exp(-Z[:, 0])), sk.predict_proba(X[0].numpy())[:, 1], atol=2e-3)
        else:
            p = np.exp(Z - Z.max(1, keepdims=True))
            np.testing.assert_allclose(p / p.sum(1, keepdims=True), sk.predict_proba(X[0].numpy()), atol=2e-3)


def test_a_warm_start_from_fewer_rows_stays_in_the_span_and_matches_a_cold_fit():
    X, y = rows(60, 200, 3, seed=4)  # 60 rows of 200 dimensions: the kernel path
    Cs = torch.tensor([0.1, 1.0])
    first = fit_logistic(X[:, :30].contiguous(), y[:30], 3, Cs, max_iter=2000)  # tol 1e-4: float32 stalls below
    warm = fit_logistic(X, y, 3, Cs, max_iter=2000, init=first)
    cold = fit_logistic(X, y, 3, Cs, max_iter=2000)
    assert warm.converged and cold.converged
    outputs = [torch.baddbmm(f.intercept[:, 0].unsqueeze(1), X.expand(2, 60, 200), f.coef[:, 0]) for f in (warm, cold)]
    # both stop within tol of the one optimum: the same probabilities to a few thousandths
    torch.testing.assert_close(outputs[0].softmax(-1), outputs[1].softmax(-1), atol=5e-3, rtol=0)
