"""``CumulativeProbes``: a probe on the scalar mix of layers ``0..l``, for every ``l``.

    cum = CumulativeProbes(task="sentiment").fit(cache)
    cum.scores_          # (L,) validation score of the probe on the mix of layers 0..l
    cum.mix_weights_     # (L, L) softmax mix weights of each prefix (row l: weights of layers 0..l)
    depth.cumulative_scoring(cum.scores_).expected_layer    # Tenney et al.'s E_Delta[l]

Tenney et al. (2019) score a probe on the learned scalar mix of the first ``l + 1`` layers for
each ``l``; the gains between consecutive prefixes say where a property is added. They re-ran the
encoder for every prefix. From a cache every prefix is one more small model on the same features.

Model of prefix ``l`` (features standardised per layer and dimension, as
:class:`~.linear.LinearProbes` does): ``s = softmax(a_0..a_l)`` (layers above ``l`` weigh 0),
``mix = sum_j s_j x_j``, then a linear classifier (binomial for two classes, multinomial
otherwise) or a linear regression on ``mix``. Objective per prefix, in scikit-learn's ``C``
convention divided by the number of examples: ``mean loss + ||W||^2 / (2 C N)``; the mix logits
``a`` are not penalised.

The problem is not convex in ``(a, W)`` jointly. Each prefix is fitted on its own by full-batch
L-BFGS, starting from the per-layer linear probes (:class:`~.linear.LinearProbes`, fitted first or
passed in): from the probe of the layer of ``0..l`` with the smallest validation loss, with 0.9 of
the mix on that layer and the rest spread evenly, and with that probe's ``C`` (chosen on
validation data). So a prefix starts where its best single layer already is, and a longer prefix
is never left below a layer it contains for want of iterations. (The former start from the uniform
mix and zero weights, all prefixes in one L-BFGS problem, stopped at its 200 iterations far from
the optimum on 8,000 CoNLL-style words, at an accuracy below the majority class.)
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted
from torch.nn import functional as F

from ..core.threads import computes
from ..errors import CacheError, ConfigError
from ..store.reader import LayerCache
from .base import Probe
from .features import ProbeInputs, resolve_task, standardise, take_rows
from .linear import DEFAULT_C_GRID, LinearProbes
from .parts import read_train_parts, whole_part
from .registry import register_probe
from .selection import DEFAULT_MAX_TRAIN, sample_rows, validation_loss

START_WEIGHT = 0.9
"""Share of a prefix's starting mix on its best single layer (the rest spread over the others)."""


@register_probe("cumulative")
class CumulativeProbes(Probe):
    """A probe on the learned scalar mix of layers ``0..l`` for every ``l`` (Tenney et al.'s cumulative scoring).

    Args:
        task: the cache's label task (default: its only task).
        C_grid: inverse L2 strengths of the per-layer probes the prefixes start from; each prefix
            keeps the ``C`` its starting layer's probe chose on validation.
        max_iter: L-BFGS iterations at most per prefix.
        tol: a prefix's L-BFGS stops when the largest entry of the gradient of its objective (the
            per-example mean loss plus the penalty, over mix logits and probe) is below ``tol``:
            scikit-learn's rule, as :class:`~.linear.LinearProbes`.
        source: ``tokens``, ``pooled:<mode>`` or ``auto``, as for :class:`~.linear.LinearProbes`.
        seed: seeds the validation slice when the cache has no validation split, and the sample.
        layers: cached states to mix, in order (names or indices; default: all). Prefix ``l`` mixes
            the first ``l + 1`` of them.
        val_fraction: the validation slice of the training split when there is no validation split.
        max_train: fit on at most this many training examples or words (the seeded sample of
            :func:`~.selection.sample_rows`, the one the per-layer probes fit with the same
            setting). ``None``: all of them.

    Fitted attributes (``L`` prefixes, one per state read):

    - ``scores_`` (L,): validation score of each prefix (accuracy; R^2 for regression);
      ``losses_`` (L,): its validation loss; ``C_`` (L,); ``start_layer_`` (L,): the layer each
      prefix started from; ``n_iter_`` (L,).
    - ``mix_weights_`` (L, L): row ``l`` holds prefix ``l``'s softmax weights over layers ``0..l``
      (zeros above). ``coef_`` (L, D, K), ``intercept_`` (L, K), on mixed standardised features.
    - ``layer_names_``, ``mean_``, ``scale_`` (L, D), ``classes_``, ``kind_``, ``metric_``,
      ``task_``, ``source_``, ``validation_``, ``n_train_``, ``n_val_``, ``fit_seconds_``, and
      ``probes_``: the per-layer probes the prefixes started from.
    """

    def __init__(self, task: str | None = None, C_grid: Sequence[float] = DEFAULT_C_GRID, max_iter: int = 100,
                 source: str = "auto", seed: int = 0, layers=None, val_fraction: float = 0.1,
                 max_train: int | None = DEFAULT_MAX_TRAIN, tol: float = 1e-4) -> None:
        self.task = task
        self.C_grid = C_grid
        self.max_iter = max_iter
        self.tol = tol
        self.source = source
        self.seed = seed
        self.layers = layers
        self.val_fraction = val_fraction
        self.max_train = max_train

    @computes
    def fit(self, cache: LayerCache, split: str = "train", val_split: str | None = None, *,
            probes: LinearProbes | None = None) -> "CumulativeProbes":
        """Fit every prefix's mix and probe on ``split``, validating on ``val_split``, the cache's
        validation split, or a seeded slice of ``split``.

        ``probes``: fitted :class:`~.linear.LinearProbes` of the same task, source and layers to
        start from (the probe report passes its own); by default they are fitted here first.
        """
        t0 = time.perf_counter()
        self._check_common()
        setup = self._setup(cache, split, val_split)
        spec, source, index, names, val_split = setup.spec, setup.source, setup.index, setup.names, setup.val_split
        if probes is None:
            probes = LinearProbes(task=spec.name, C_grid=self.C_grid, source=source, seed=self.seed,
                                  layers=names, val_fraction=self.val_fraction,
                                  max_train=self.max_train).fit(cache, split, val_split)
        elif (getattr(probes, "task_", None), getattr(probes, "source_", None),
              list(getattr(probes, "layer_names_", []))) != (spec.name, source, names):
            raise ConfigError(f"The probes passed were fitted on another task, source or layers than "
                              f"{spec.name!r} from {source} on {len(names)} states; pass LinearProbes of those.")
        # The training sample is read alone; the validation part whole when it fits the memory budget, else
        # a run of rows at a time (every layer: a prefix mixes them) (parts.py).
        train, val, self.validation_ = read_train_parts(cache, spec, source, index, split, val_split,
                                                        self.val_fraction, self.seed, max_train=self.max_train)
        self._require_labelled(spec, train, train if val.inputs is None else val.inputs)  # a lazy part: later
        self._record_setup(setup)
        kind = "regression" if spec.kind == "regression" else "classification"
        classes = None if kind == "regression" else np.arange(spec.num_classes)
        self._fit_standardised(train, val.row_chunks(), probes, kind, classes, split, val_split or split, spec)
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    @computes
    def fit_arrays(self, X: np.ndarray, y: np.ndarray, X_val: np.ndarray, y_val: np.ndarray) -> "CumulativeProbes":
        """Fit on your own features ``X`` (n, L, d), targets ``y`` (n,), validating on ``X_val``, ``y_val``.

        Integer ``y`` is a classification task (classes: its distinct values); floating ``y`` a regression.
        """
        t0 = time.perf_counter()
        self._check_common()
        X, X_val = np.asarray(X), np.asarray(X_val)
        y, y_val = np.asarray(y), np.asarray(y_val)
        if X.ndim != 3 or X_val.ndim != 3 or X.shape[1:] != X_val.shape[1:]:
            raise ConfigError(f"X and X_val must have shape (n, layers, dim) with the same layers and dim, got "
                              f"{X.shape} and {X_val.shape}.")
        if y.shape != (len(X),) or y_val.shape != (len(X_val),):
            raise ConfigError("y and y_val must hold one target per row of X and X_val.")
        probes = LinearProbes(C_grid=self.C_grid, seed=self.seed, max_train=self.max_train).fit_arrays(
            X, y, X_val, y_val)
        kind = probes.kind_
        if kind == "classification":  # class ids as the probes encoded them
            y, y_val = np.searchsorted(probes.classes_, y), np.searchsorted(probes.classes_, y_val)
        pick = sample_rows(len(y), self.max_train, self.seed)
        train = ProbeInputs(np.ascontiguousarray(X.transpose(1, 0, 2), np.float32), y, np.arange(len(y)))
        train = take_rows(train, pick)
        val = ProbeInputs(np.ascontiguousarray(X_val.transpose(1, 0, 2), np.float32), y_val, np.arange(len(y_val)))
        self.task_, self.source_, self.validation_ = None, "arrays", "X_val"
        self.layer_names_ = [f"layer_{i}" for i in range(X.shape[1])]
        self._fit_standardised(train, [val], probes, kind, probes.classes_, None, None)
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    @computes
    def predict(self, cache: LayerCache, split: str) -> np.ndarray:
        """(L, n) predictions of every prefix's probe on ``split`` (class ids or values)."""
        return self.predictions(cache, split)[0]

    @computes
    def score(self, cache: LayerCache, split: str) -> np.ndarray:
        """(L,) score of every prefix's probe on ``split``: accuracy, or R^2 for regression."""
        return _metric(*self.predictions(cache, split), self.kind_)

    @computes
    def correct(self, cache: LayerCache, split: str) -> np.ndarray:
        """(L, n) per example (word) and prefix: 1 when right (accuracy), or the squared error (regression).

        What a score is the mean of (R^2 needs the targets too: see :meth:`predictions`), for
        resampling a score's uncertainty.
        """
        predicted, target = self.predictions(cache, split)
        if self.kind_ == "regression":
            return (predicted.astype(np.float64) - target) ** 2
        return (predicted == target[None, :]).astype(np.float64)

    @computes
    def predictions(self, cache: LayerCache, split: str) -> tuple[np.ndarray, np.ndarray]:
        """``(predicted (L, n), target (n,))`` of every prefix on ``split``, from one read of it (a run of rows at
        a time when its features do not fit the memory budget)."""
        n_classes = None if self.classes_ is None else len(self.classes_)
        Z, y = _sliced_outputs(self._read(cache, split), self.mix_weights_, self.coef_, self.intercept_)
        return _to_predictions(Z, n_classes), y

    # --- internals --------------------------------------------------------------------
    def _read(self, cache: LayerCache, split: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Standardised features (L, n, D) and targets (n,) of ``split``, a run of rows at a time."""
        check_is_fitted(self, "coef_")
        if self.task_ is None:
            raise ConfigError("These probes were fitted with fit_arrays; they cannot read a cache.")
        spec = resolve_task(cache, self.task_)
        missing = [n for n in self.layer_names_ if n not in cache.layer_names]
        if missing:
            raise CacheError(f"The cache has no state {missing[0]!r} that the probes read; use the cache they "
                             "were fitted on.")
        part = whole_part(cache, split, spec, self.source_, cache.layer_index(self.layer_names_))
        for inputs in part.row_chunks():
            yield standardise(inputs.X, self.mean_, self.scale_, self.layer_names_, split), inputs.y

    def _fit_standardised(self, train: ProbeInputs, val_chunks: Iterable[ProbeInputs], probes: LinearProbes, kind: str,
                          classes: np.ndarray | None, split: str | None, val_split: str | None, spec=None) -> None:
        self.mean_, self.scale_ = probes.mean_, probes.scale_  # the probes' weights read features scaled so
        self.kind_, self.classes_ = kind, classes
        self.metric_ = "r2" if kind == "regression" else "accuracy"
        self.probes_ = probes
        Xtr = torch.from_numpy(standardise(train.X, self.mean_, self.scale_, self.layer_names_, split))  # (L, n, D)
        y = torch.from_numpy(np.asarray(train.y, np.float32 if kind == "regression" else np.int64))
        n_classes = None if classes is None else len(classes)
        L, _, D = Xtr.shape
        K = probes.coef_.shape[2]
        chosen = np.searchsorted(probes.C_grid_, probes.C_)
        layer_loss = probes.grid_losses_[chosen, np.arange(L)]  # (L,) each probe's validation loss
        weights, coef, intercept = np.zeros((L, L)), np.zeros((L, D, K), np.float32), np.zeros((L, K), np.float32)
        self.start_layer_ = np.asarray([int(np.argmin(layer_loss[: p + 1])) for p in range(L)])
        self.C_ = probes.C_[self.start_layer_]
        self.n_iter_ = []
        for p, start in enumerate(self.start_layer_):
            w, W, b, n_iter = _fit_prefix(Xtr[: p + 1], y, n_classes, float(self.C_[p]), self.max_iter, self.tol,
                                          int(start), probes.coef_[start], probes.intercept_[start])
            weights[p, : p + 1], coef[p], intercept[p] = w, W, b
            self.n_iter_.append(n_iter)
        self.mix_weights_, self.coef_, self.intercept_ = weights, coef, intercept
        del Xtr
        train.X = None  # done with: room for the validation part's features
        standardised = ((standardise(part.X, self.mean_, self.scale_, self.layer_names_, val_split), part.y)
                        for part in val_chunks)  # every layer, a run of rows at a time
        Z, y_val = _sliced_outputs(standardised, weights, coef, intercept)  # (P, n, K)
        if spec is not None and len(y_val) == 0:
            self._require_labelled(spec, train, ProbeInputs(np.empty(0), y_val, np.empty(0)))
        self.scores_ = _metric(_to_predictions(Z, n_classes), y_val, kind)
        self.losses_ = validation_loss(Z, y_val, n_classes)
        self.C_grid_ = probes.C_grid_
        self.n_train_, self.n_val_ = len(train.y), len(y_val)


def _fit_prefix(X: torch.Tensor, y: torch.Tensor, n_classes: int | None, C: float, max_iter: int, tol: float,
                start: int, coef: np.ndarray, intercept: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Mix weights (l,), coef (D, K), intercept (K,) of one prefix X (l, N, D), from layer ``start``'s probe."""
    n_layers, N, D = X.shape
    share = np.full(n_layers, (1.0 - START_WEIGHT) / max(n_layers - 1, 1))
    share[start] = START_WEIGHT if n_layers > 1 else 1.0
    logits = torch.tensor(np.log(share), dtype=torch.float32, requires_grad=True)
    W = torch.tensor(coef, dtype=torch.float32).clone().requires_grad_(True)  # (D, K)
    b = torch.tensor(intercept, dtype=torch.float32).clone().requires_grad_(True)  # (K,)
    flat = X.reshape(n_layers, N * D)
    penalty = 1.0 / (2.0 * C * N)

    def objective() -> torch.Tensor:
        mix = (torch.softmax(logits, 0) @ flat).view(N, D)
        Z = mix @ W + b  # (N, K)
        if n_classes is None:
            data = 0.5 * ((Z[:, 0] - y) ** 2).mean()
        elif Z.shape[1] == 1:
            data = F.binary_cross_entropy_with_logits(Z[:, 0], y.float())
        else:
            data = F.cross_entropy(Z, y)
        return data + penalty * (W * W).sum()

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = objective()
        loss.backward()
        return loss

    with torch.no_grad():
        before = float(objective())
    start_state = [t.detach().clone() for t in (logits, W, b)]
    optimizer = torch.optim.LBFGS([logits, W, b], lr=1.0, max_iter=max_iter, tolerance_grad=tol,
                                  tolerance_change=1e-10, history_size=20, line_search_fn="strong_wolfe")
    optimizer.step(closure)
    with torch.no_grad():
        after = float(objective())
    if not (after <= before):  # not finite, or no better than the start (never seen): keep the start
        with torch.no_grad():
            for t, s in zip((logits, W, b), start_state):
                t.copy_(s)
    n_iter = int(optimizer.state[logits].get("n_iter", 0))
    with torch.no_grad():
        weights = torch.softmax(logits, 0)
    return weights.numpy().astype(np.float64), W.detach().numpy().copy(), b.detach().numpy().copy(), n_iter


OUTPUT_ROWS = 2048
"""Examples (words) whose prefix outputs are computed in one product: the outputs of a part come in slices of
this many in its order, whether it was read whole or a run of rows at a time, so they are the same numbers
either way (a matrix product's last bits depend on its shape)."""


def _sliced_outputs(chunks: Iterable[tuple[np.ndarray, np.ndarray]], weights: np.ndarray, coef: np.ndarray,
                    intercept: np.ndarray) -> tuple[torch.Tensor, np.ndarray]:
    """``(P, n, K)`` outputs and the ``(n,)`` targets of standardised ``(X (L, m, D), y (m,))`` chunks of a part,
    computed in slices of :data:`OUTPUT_ROWS` of the part's examples wherever the chunks end."""
    outputs, targets, carry = [], [], None
    for X, y in chunks:
        targets.append(np.asarray(y))
        start = 0
        if carry is not None:  # complete the slice the last chunk began
            start = min(OUTPUT_ROWS - carry.shape[1], X.shape[1])
            carry = np.concatenate([carry, X[:, :start]], axis=1)
            if carry.shape[1] < OUTPUT_ROWS:
                continue
            outputs.append(_prefix_outputs(carry, weights, coef, intercept))
            carry = None
        full = start + (X.shape[1] - start) // OUTPUT_ROWS * OUTPUT_ROWS
        for a in range(start, full, OUTPUT_ROWS):
            outputs.append(_prefix_outputs(np.ascontiguousarray(X[:, a:a + OUTPUT_ROWS]), weights, coef, intercept))
        if full < X.shape[1]:
            carry = np.array(X[:, full:])
    if carry is not None:
        outputs.append(_prefix_outputs(carry, weights, coef, intercept))
    y = np.concatenate(targets) if targets else np.empty(0)
    if not outputs:
        return torch.empty(len(weights), 0, coef.shape[2]), y
    return torch.cat(outputs, dim=1), y


def _prefix_outputs(X: np.ndarray, weights: np.ndarray, coef: np.ndarray, intercept: np.ndarray) -> torch.Tensor:
    """(P, n, K) outputs of every prefix on standardised X (L, n, D)."""
    with torch.no_grad():
        return _outputs(torch.from_numpy(np.asarray(X, np.float32)), torch.from_numpy(np.asarray(weights, np.float32)),
                        torch.from_numpy(coef), torch.from_numpy(intercept))


def _to_predictions(Z: torch.Tensor, n_classes: int | None) -> np.ndarray:
    """(P, n) predictions from (P, n, K) outputs: values, or class ids."""
    if n_classes is None:
        return Z[..., 0].numpy()
    if n_classes == 2:
        return (Z[..., 0] > 0).long().numpy()
    return Z.argmax(-1).numpy()


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


def _metric(pred: np.ndarray, y: np.ndarray, kind: str) -> np.ndarray:
    """(P,) accuracy, or R^2 for regression, of (P, n) predictions against y (n,)."""
    y = np.asarray(y)
    if kind == "regression":
        y = y.astype(np.float64)
        total = float(((y - y.mean()) ** 2).sum())
        resid = ((pred.astype(np.float64) - y) ** 2).sum(1)
        return np.where(resid == 0, 1.0, 0.0) if total == 0 else 1.0 - resid / total
    return (pred == y[None, :]).mean(1)
