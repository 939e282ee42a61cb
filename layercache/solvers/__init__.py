"""Convex fits shared by the packages that learn from a cache: batched L2-regularised linear models.

``probes`` fits one model per layer and per ``C``; ``heads`` fits a linear head on fixed features
(``layer:<i>`` / ``last`` under a linear head) the same way. Both sit above this package, which
imports nothing of layercache but :mod:`layercache.errors` (and torch).

    fit = fit_logistic(X, y, n_classes, Cs, sample_weight=w)   # X (L, N, D): (G, L, D, K) weights
    fit = fit_ridge(X, y, Cs)                                  # ridge, exactly, every C at once
"""

from .linear import (
    GRADIENT_FLOOR,
    LinearFit,
    check_c_grid,
    fit_logistic,
    fit_ridge,
    linear_outputs,
    n_outputs,
    outputs_to_predictions,
    unconverged_message,
)

__all__ = ["GRADIENT_FLOOR", "LinearFit", "check_c_grid", "fit_logistic", "fit_ridge", "linear_outputs", "n_outputs",
           "outputs_to_predictions", "unconverged_message"]
