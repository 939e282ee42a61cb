"""Why a fit stopped short of ``tol``, in one sentence that names the fix: ``max_iter`` reached, or no more
progress (below :data:`~layercache.solvers.GRADIENT_FLOOR` the float32 arithmetic stalls, and raising
``max_iter`` would not help), with the largest gradient entry the fit ended at."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning

from layercache import LinearProbes
from layercache.solvers import GRADIENT_FLOOR, fit_logistic, unconverged_message

STALLS_AT_1E_6 = 4  # a seed of the small fits GRADIENT_FLOOR's docstring counts: it stalls at tol=1e-6 (3 classes)


def small_fit_data(seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(2, 400, 20) features with a one-dimensional class signal, labels (400,), and the class count (3-6)."""
    rng = np.random.default_rng(seed)
    classes = 3 + seed % 4
    X = rng.standard_normal((2, 400, 20)).astype(np.float32)
    y = rng.integers(0, classes, 400)
    X[:, :, 0] += y
    return X, y, classes


def fit(seed: int, **options):
    X, y, classes = small_fit_data(seed)
    return fit_logistic(torch.from_numpy(X), torch.from_numpy(y), classes, torch.tensor([1.0, 10.0]), **options)


def test_a_fit_reports_the_gradient_it_ended_at():
    done = fit(STALLS_AT_1E_6)
    assert done.converged and 0 < done.grad_max <= 1e-4
    short = fit(STALLS_AT_1E_6, max_iter=2)
    assert not short.converged and short.n_iter == 2 and short.grad_max > 1e-4


def test_a_stall_below_the_floor_is_told_apart_from_max_iter():
    stalled = fit(STALLS_AT_1E_6, tol=1e-6, max_iter=500)
    assert not stalled.converged and stalled.n_iter < 500 and stalled.grad_max > 1e-6
    message = unconverged_message(stalled, 500, 1e-6)
    assert "no more progress" in message and f"tol >= {GRADIENT_FLOOR:.0e}" in message and "will not help" in message
    assert f"{stalled.grad_max:.1e}" in message
    at_limit = unconverged_message(fit(STALLS_AT_1E_6, max_iter=2), 2, 1e-4)
    assert "max_iter=2" in at_limit and "raise max_iter" in at_limit
    # A stall at or above the floor is not the float32 arithmetic's: it names the slow, weakly regularised fits.
    assert "largest C" in unconverged_message(stalled, 500, GRADIENT_FLOOR)


@pytest.mark.parametrize("seed", range(16))
def test_the_floor_holds_on_the_small_fits_it_counts(seed):
    assert fit(seed, tol=GRADIENT_FLOOR).converged


def test_linear_probes_warn_with_the_reason():
    X, y, _ = small_fit_data(2)  # with LinearProbes' validation slice held out, this seed's fit stalls at 1e-6
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        LinearProbes(C_grid=(1.0, 10.0), tol=1e-6).fit_arrays(X.transpose(1, 0, 2), y)
    messages = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert messages and all("no more progress" in m and "will not help" in m for m in messages)


def test_the_online_code_warns_once_when_its_tol_is_below_the_floor():
    from layercache.probes import OnlineCodeMDL

    X, y, _ = small_fit_data(2)
    for tol, expected in ((1e-6, 1), (GRADIENT_FLOOR, 0)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            OnlineCodeMDL(C_grid=(1.0, 10.0), tol=tol).fit_arrays(X.transpose(1, 0, 2), y)
        messages = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
        assert len(messages) == expected and all("will not help" in m for m in messages), (tol, messages)
