"""The L-BFGS closure answers the points it is asked for twice from memory: the same fit, fewer objective passes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layercache.solvers import fit_logistic, linear


def _counted_fit(monkeypatch, remembered: int, n: int, classes: int):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(3, n, 16, generator=g)  # (L, N, D)
    y = (X[0, :, :classes].argmax(1) if classes > 2 else (X[1, :, 0] > 0).long())
    y = torch.where(torch.rand(n, generator=g) < 0.2, torch.randint(0, classes, (n,), generator=g), y)  # noise
    passes = [0]
    real = torch.baddbmm

    def counted(*args, **kwargs):
        if args[1].shape[1] == n:  # the outputs pass over the training features: one per evaluation
            passes[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(linear, "REMEMBERED_EVALUATIONS", remembered)
    monkeypatch.setattr(torch, "baddbmm", counted)
    fit = fit_logistic(X.contiguous(), y, classes, torch.tensor([0.1, 10.0]), max_iter=200, tol=1e-6)
    monkeypatch.undo()
    return fit, passes[0]


@pytest.mark.parametrize("n, classes", [(200, 2), (2048, 3)])  # below and above CONTIGUOUS_WEIGHTS_ROWS
def test_remembered_evaluations_give_the_same_fit_in_fewer_passes(monkeypatch, n, classes):
    remembered, fewer = _counted_fit(monkeypatch, linear.REMEMBERED_EVALUATIONS, n, classes)
    plain, more = _counted_fit(monkeypatch, 0, n, classes)
    assert remembered.n_iter == plain.n_iter > linear.CHECK_EVERY  # several rounds, each with a check
    assert torch.equal(remembered.coef, plain.coef) and torch.equal(remembered.intercept, plain.intercept)
    # every round start after the first comes from memory, and at least one stopping check does
    rounds = -(-plain.n_iter // linear.CHECK_EVERY)
    assert rounds <= more - fewer <= 2 * rounds - 1  # the first round starts at an unseen point


def test_a_fit_leaves_nothing_for_the_cycle_collector():
    """The closure's helpers must not call each other: functions that do form a reference cycle through their cells,
    which kept the features (and every tensor the objective reads) alive after the fit until Python's cycle collector
    ran; an online code's blocks, each fitted on its own copy of the features, piled up 100 MiB that way."""
    import gc
    import weakref

    rng = np.random.default_rng(0)
    X = torch.from_numpy(rng.standard_normal((2, 300, 16)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 3, 300))
    features = weakref.ref(X)
    gc.disable()
    try:
        fit_logistic(X, y, 3, torch.tensor([1.0]), max_iter=30)
        del X
        assert features() is None, "the fit's features outlived it: a reference cycle holds them"
    finally:
        gc.enable()
