"""``CumulativeProbes``: a probe on the scalar mix of layers ``0..l``, for every ``l`` at once.

    cum = CumulativeProbes(task="sentiment").fit(cache)
    cum.scores_          # (L,) validation score of the probe on the mix of layers 0..l
    cum.mix_weights_     # (L, L) softmax mix weights of each prefix (row l: weights of layers 0..l)
    depth.cumulative_scoring(cum.scores_).expected_layer    # Tenney et al.'s E_Delta[l]

Tenney et al. (2019) score a probe on the learned scalar mix of the first ``l + 1`` layers for
each ``l``; the gains between consecutive prefixes say where a property is added. They re-ran the
encoder for every prefix. From a cache every prefix is one more small model on the same
features, so all prefixes are fitted together as one batched model.

Model of prefix ``l`` (features standardised per layer and dimension, as
:class:`~.linear.LinearProbes` does): ``s = softmax(a_0..a_l)`` (layers above ``l`` weigh 0),
``mix = sum_j s_j x_j``, then a linear classifier (binomial for two classes, multinomial
otherwise) or a linear regression on ``mix``. Objective per prefix, in scikit-learn's ``C``
convention divided by the number of examples: ``mean loss + ||W||^2 / (2 C N)``; the mix logits
``a`` are not penalised. The problem is not convex in ``(a, W)`` jointly, so it is fitted by
full-batch L-BFGS from the uniform mix and zero weights, the same start for every prefix (the
embeddings-only prefix is then the plain linear probe on layer 0). ``C`` is chosen per prefix on
validation data from ``C_grid``, one fit of all prefixes per value.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted
from torch.nn import functional as F

from ..errors import CacheError, ConfigError
from ..solvers import n_outputs
from ..store.reader import LayerCache
from .features import (
    ProbeInputs,
    check_solver_params,
    input_moments,
    layer_moments,
    read_inputs,
    read_train_val,
    resolve_source,
    resolve_task,
    standardise,
)
from .registry import register_probe

DEFAULT_C_GRID = (0.1, 1.0, 10.0)
"""A coarser grid than the single-layer probes': each value is a whole non-convex fit of every prefix."""


@register_probe("cumulative")
class CumulativeProbes(BaseEstimator):
    """A probe on the learned scalar mix of layers ``0..l`` for every ``l`` (Tenney et al.'s cumulative scoring).

    Args:
        task: the cache's label task (default: its only task).
        C_grid: inverse L2 strengths of the classifier (or regression) weights; each prefix keeps
            the one with the best validation score, ties to the smaller ``C``.
        max_iter: L-BFGS iterations at most per value of ``C``.
        source: ``tokens``, ``pooled:<mode>`` or ``auto``, as for :class:`~.linear.LinearProbes`.
        seed: seeds the validation slice when the cache has no validation split.
        layers: cached states to mix, in order (names or indices; default: all). Prefix ``l`` mixes
            the first ``l + 1`` of them.
        val_fraction: the validation slice of the training split when there is no validation split.
        max_train: fit on at most this many training examples or words (a seeded sample): the
            batched model holds ``L`` mixed copies of the features. ``None``: all of them.

    Fitted attributes (``L`` prefixes, one per state read):

    - ``scores_`` (L,): validation score of each prefix at its chosen ``C`` (accuracy; R^2 for
      regression); ``grid_scores_`` (G, L); ``C_`` (L,).
    - ``mix_weights_`` (L, L): row ``l`` holds prefix ``l``'s softmax weights over layers ``0..l``
      (zeros above). ``coef_`` (L, D, K), ``intercept_`` (L, K), on mixed standardised features.
    - ``layer_names_``, ``mean_``, ``scale_`` (L, D), ``classes_``, ``kind_``, ``metric_``,
      ``task_``, ``source_``, ``validation_``, ``n_train_``, ``n_val_``, ``fit_seconds_``.
    """

    def __init__(self, task: str | None = None, C_grid: Sequence[float] = DEFAULT_C_GRID, max_iter: int = 200,
                 source: str = "auto", seed: int = 0, layers=None, val_fraction: float = 0.1,
                 max_train: int | None = 50_000) -> None:
        self.task = task
        self.C_grid = C_grid
        self.max_iter = max_iter
        self.source = source
        self.seed = seed
        self.layers = layers
        self.val_fraction = val_fraction
        self.max_train = max_train

    def fit(self, cache: LayerCache, split: str = "train", val_split: str | None = None) -> "CumulativeProbes":
        """Fit every prefix's mix and probe on ``split``; choose ``C`` on ``val_split``, the cache's
        validation split, or a seeded slice of ``split``."""
        t0 = time.perf_counter()
        Cs = self._check_params()
        spec = resolve_task(cache, self.task)
        source = resolve_source(cache, spec, self.source)
        index = cache.layer_index(self.layers)
        if val_split is None:
            val_split = cache.validation_split(exclude=split)
        train, val, self.validation_ = read_train_val(cache, spec, source, index, split, val_split,
                                                      self.val_fraction, self.seed)
        for name, part in (("training", train), ("validation", val)):
            if len(part.y) == 0:
                raise CacheError(f"The {name} data of task {spec.name!r} has no labelled examples; "
                                 "probe a split that has labels.")
        mean, scale = input_moments(cache, split, spec, source, index, train.X)
        self.task_, self.source_ = spec.name, source
        self.layer_names_ = [cache.layer_names[i] for i in index]
        kind = "regression" if spec.kind == "regression" else "classification"
        classes = None if kind == "regression" else np.arange(spec.num_classes)
        self._fit_standardised(train, val, mean, scale, Cs, kind, classes, split, val_split or split)
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    def fit_arrays(self, X: np.ndarray, y: np.ndarray, X_val: np.ndarray, y_val: np.ndarray) -> "CumulativeProbes":
        """Fit on your own features ``X`` (n, L, d), targets ``y`` (n,), validating on ``X_val``, ``y_val``.

        Integer ``y`` is a classification task with classes ``0..max(y)``; floating ``y`` a regression.
        """
        t0 = time.perf_counter()
        Cs = self._check_params()
        X, X_val = np.asarray(X), np.asarray(X_val)
        y, y_val = np.asarray(y), np.asarray(y_val)
        if X.ndim != 3 or X_val.ndim != 3 or X.shape[1:] != X_val.shape[1:]:
            raise ConfigError(f"X and X_val must have shape (n, layers, dim) with the same layers and dim, got "
                              f"{X.shape} and {X_val.shape}.")
        if y.shape != (len(X),) or y_val.shape != (len(X_val),):
            raise ConfigError("y and y_val must hold one target per row of X and X_val.")
        kind = "regression" if y.dtype.kind == "f" else "classification"
        classes = None if kind == "regression" else np.arange(int(max(y.max(), y_val.max())) + 1)
        train = ProbeInputs(np.ascontiguousarray(X.transpose(1, 0, 2), np.float32), y, np.arange(len(y)))
        val = ProbeInputs(np.ascontiguousarray(X_val.transpose(1, 0, 2), np.float32), y_val, np.arange(len(y_val)))
        mean, scale = layer_moments(train.X)
        self.task_, self.source_, self.validation_ = None, "arrays", "X_val"
        self.layer_names_ = [f"layer_{i}" for i in range(X.shape[1])]
        self._fit_standardised(train, val, mean, scale, Cs, kind, classes, None, None)
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    def predict(self, cache: LayerCache, split: str) -> np.ndarray:
        """(L, n) predictions of every prefix's probe on ``split`` (class ids or values)."""
        X, _ = self._read(cache, split)
        return self._predict(X)

    def score(self, cache: LayerCache, split: str) -> np.ndarray:
        """(L,) score of every prefix's probe on ``split``: accuracy, or R^2 for regression."""
        X, y = self._read(cache, split)
        return _metric(self._predict(X), y, self.kind_)

    # --- internals --------------------------------------------------------------------
    def _check_params(self) -> np.ndarray:
        Cs = check_solver_params(self.C_grid, self.max_iter, self.seed, 1e-4)
        if not 0 < self.val_fraction < 1:
            raise ConfigError(f"val_fraction must be in (0, 1), got {self.val_fraction!r}.")
        if self.max_train is not None and (not isinstance(self.max_train, int) or self.max_train < 2):
            raise ConfigError(f"max_train must be an integer of at least 2 or None, got {self.max_train!r}.")
        return Cs

    def _read(self, cache: LayerCache, split: str) -> tuple[np.ndarray, np.ndarray]:
        check_is_fitted(self, "coef_")
        if self.task_ is None:
            raise ConfigError("These probes were fitted with fit_arrays; they cannot read a cache.")
        spec = resolve_task(cache, self.task_)
        missing = [n for n in self.layer_names_ if n not in cache.layer_names]
        if missing:
            raise CacheError(f"The cache has no state {missing[0]!r} that the probes read; use the cache they "
                             "were fitted on.")
        inputs = read_inputs(cache, split, spec, self.source_, cache.layer_index(self.layer_names_))
        return standardise(inputs.X, self.mean_, self.scale_, self.layer_names_, split), inputs.y

    def _fit_standardised(self, train: ProbeInputs, val: ProbeInputs, mean, scale, Cs: np.ndarray, kind: str,
                          classes: np.ndarray | None, split: str | None, val_split: str | None) -> None:
        self.mean_, self.scale_ = np.asarray(mean, np.float32), np.asarray(scale, np.float32)
        self.kind_, self.classes_ = kind, classes
        self.metric_ = "r2" if kind == "regression" else "accuracy"
        Xtr = standardise(train.X, self.mean_, self.scale_, self.layer_names_, split)  # (L, n, D)
        Xva = standardise(val.X, self.mean_, self.scale_, self.layer_names_, val_split)
        ytr = train.y
        if self.max_train is not None and len(ytr) > self.max_train:
            pick = np.sort(np.random.default_rng(self.seed).choice(len(ytr), self.max_train, replace=False))
            Xtr, ytr = np.ascontiguousarray(Xtr[:, pick]), ytr[pick]
        X = torch.from_numpy(Xtr)
        y = torch.from_numpy(np.asarray(ytr, np.float32 if kind == "regression" else np.int64))
        n_classes = None if classes is None else len(classes)
        fits = [_fit_prefixes(X, y, n_classes, float(C), self.max_iter) for C in Cs]
        grid = np.stack([_metric(_predict_prefixes(Xva, *fit[:3], n_classes), val.y, kind) for fit in fits])  # (G, L)
        choice = grid.argmax(0)  # (L,), first best = smallest C
        prefixes = np.arange(X.shape[0])
        self.C_grid_, self.grid_scores_ = Cs, grid
        self.C_ = Cs[choice]
        self.scores_ = grid[choice, prefixes]
        self.mix_weights_ = np.stack([fits[g][0][p] for p, g in enumerate(choice)])  # (L, L)
        self.coef_ = np.stack([fits[g][1][p] for p, g in enumerate(choice)])  # (L, D, K)
        self.intercept_ = np.stack([fits[g][2][p] for p, g in enumerate(choice)])  # (L, K)
        self.n_iter_ = [fit[3] for fit in fits]
        self.n_train_, self.n_val_ = len(ytr), len(val.y)

    def _predict(self, X: np.ndarray) -> np.ndarray:
        n_classes = None if self.classes_ is None else len(self.classes_)
        return _predict_prefixes(X, self.mix_weights_, self.coef_, self.intercept_, n_classes)


def _prefix_mask(L: int) -> torch.Tensor:
    """(L, L) bool: prefix ``l`` may use layers ``0..l``."""
    return torch.ones(L, L, dtype=torch.bool).tril()


def _outputs(X: torch.Tensor, weights: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Every prefix's outputs: X (L, n, D), weights (P, L), W (P, D, K), b (P, K) -> (P, n, K).

    ``sum_l s_pl (x_l W_p)`` rather than ``(sum_l s_pl x_l) W_p``: the same numbers, but every
    layer's states meet every prefix's weights in one (L n, D) @ (D, P K) product, which reads the
    features once per evaluation instead of building P mixed (n, D) copies of them.
    """
    L, n, D = X.shape
    P, _, K = W.shape
    per_layer = (X.reshape(L * n, D) @ W.permute(1, 0, 2).reshape(D, P * K)).view(L, n, P, K)  # x_l W_p
    return torch.einsum("pl,lnpk->pnk", weights, per_layer) + b.unsqueeze(1)  # (P, n, K)


def _fit_prefixes(X: torch.Tensor, y: torch.Tensor, n_classes: int | None, C: float,
                  max_iter: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Mix weights (P, L), coef (P, D, K), intercept (P, K) of every prefix at one ``C``, and the iterations."""
    L, N, D = X.shape
    K = n_outputs(n_classes)
    mask = _prefix_mask(L)
    logits = torch.zeros(L, L, requires_grad=True)  # (P, L) mix logits, masked to the prefix below
    W = torch.zeros(L, D, K, requires_grad=True)  # (P, D, K)
    if n_classes is None:
        start = y.mean().view(1).expand(L, 1)
    elif K == 1:
        p = y.float().mean().clamp(1e-4, 1 - 1e-4)
        start = torch.log(p / (1 - p)).view(1).expand(L, 1)
    else:
        prior = torch.bincount(y, minlength=K).float().clamp_min(1.0) / N
        start = prior.log().view(1, K).expand(L, K)
    b = start.clone().requires_grad_(True)  # (P, K)
    penalty = 1.0 / (2.0 * C * N)
    if n_classes is not None and K > 1:
        target = y.view(1, N).expand(L, N)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        weights = torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=1)  # (P, L)
        Z = _outputs(X, weights, W, b)  # (P, N, K)
        if n_classes is None:
            data = 0.5 * ((Z[..., 0] - y.view(1, N)) ** 2).mean(1)  # (P,)
        elif K == 1:
            data = F.binary_cross_entropy_with_logits(Z[..., 0], y.float().view(1, N).expand(L, N),
                                                      reduction="none").mean(1)
        else:
            data = F.cross_entropy(Z.transpose(1, 2), target, reduction="none").mean(1)
        loss = (data + penalty * (W * W).sum((1, 2))).sum()  # the prefixes are independent: sum them
        loss.backward()
        return loss

    optimizer = torch.optim.LBFGS([logits, W, b], lr=1.0, max_iter=max_iter, tolerance_grad=1e-6,
                                  tolerance_change=1e-10, history_size=20, line_search_fn="strong_wolfe")
    optimizer.step(closure)
    with torch.no_grad():
        weights = torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=1)
    n_iter = int(optimizer.state[logits].get("n_iter", 0))
    return weights.numpy().copy(), W.detach().numpy().copy(), b.detach().numpy().copy(), n_iter


def _predict_prefixes(X: np.ndarray, weights: np.ndarray, coef: np.ndarray, intercept: np.ndarray,
                      n_classes: int | None) -> np.ndarray:
    """(P, n) predictions of every prefix on standardised X (L, n, D)."""
    with torch.no_grad():
        Z = _outputs(torch.from_numpy(np.asarray(X, np.float32)), torch.from_numpy(weights),
                     torch.from_numpy(coef), torch.from_numpy(intercept))  # (P, n, K)
    if n_classes is None:
        return Z[..., 0].numpy()
    if n_classes == 2:
        return (Z[..., 0] > 0).long().numpy()
    return Z.argmax(-1).numpy()


def _metric(pred: np.ndarray, y: np.ndarray, kind: str) -> np.ndarray:
    """(P,) accuracy, or R^2 for regression, of (P, n) predictions against y (n,)."""
    y = np.asarray(y)
    if kind == "regression":
        y = y.astype(np.float64)
        total = float(((y - y.mean()) ** 2).sum())
        resid = ((pred.astype(np.float64) - y) ** 2).sum(1)
        return np.where(resid == 0, 1.0, 0.0) if total == 0 else 1.0 - resid / total
    return (pred == y[None, :]).mean(1)
