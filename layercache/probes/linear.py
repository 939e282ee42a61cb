"""``LinearProbes``: one linear probe per cached layer, all layers fitted together as one model.

    probes = LinearProbes(task="sentiment").fit(cache)        # every layer, C chosen per layer
    probes.scores_, probes.C_, probes.best_layer_             # validation accuracy by layer, ...
    probes.score(cache, "test")                               # (L,) test accuracy by layer

A probe is a multinomial logistic regression (binomial for two classes) on one layer's states,
or a ridge regression for a regression task. The ``G`` values of ``C`` times ``L`` layers are
``G * L`` independent models; :mod:`layercache.solvers` fits them as one batched model (weights
``(G, L, D, K)``, float32, CPU), then each layer keeps the ``C`` whose model has the smallest
validation loss (:mod:`.selection`). The objective follows scikit-learn's convention (``sum of per-example losses +
||w||^2 / (2 C)``), so ``LogisticRegression(C=probes.C_[l])`` on the same standardised features
finds the same model.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable, Sequence
from functools import partial

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from ..core.holdout import stratified_holdout
from ..core.threads import computes
from ..errors import CacheError, ConfigError
from ..solvers import LinearFit, fit_logistic, fit_ridge, outputs_to_predictions, unconverged_message
from ..store.reader import LayerCache
from .base import Probe
from .control import ControlTask
from .features import (
    ProbeInputs,
    check_feature_arrays,
    input_moments,
    layer_moments,
    resolve_task,
    standardise,
    usable_scale,
)
from .parts import SplitPart, read_train_parts, whole_part
from .registry import register_probe
from .selection import DEFAULT_MAX_TRAIN, choose_c, sample_rows, validation_loss

DEFAULT_C_GRID = (0.001, 0.01, 0.1, 1.0)
"""Inverse L2 strengths tried per layer. No ``C = 10``: its weakly regularised fits stop at ``tol`` least
converged, and on the built-in MiniLM cache it won topic's layers 5-6 on 3 torch threads and lost them
on 1 or 2 (prediction depth 0.845 against 0.878); ``0.001`` is what layers at chance choose."""


@register_probe("linear")
class LinearProbes(Probe):
    """A linear probe on every layer of a cache, with its L2 strength chosen per layer.

    Args:
        task: the cache's label task to probe (default: its only task).
        C_grid: inverse L2 strengths tried for every layer (scikit-learn's ``C``: loss = sum of
            per-example losses + ``||w||^2 / (2 C)``; for ridge that is ``Ridge(alpha=1/C)``).
            Each layer keeps the one with the smallest validation loss (cross-entropy; squared
            error for regression), ties to the smaller ``C``: a smooth criterion, so the choice
            does not follow rounding noise as a tie in accuracy does (:mod:`.selection`).
        max_iter: L-BFGS iterations at most (each one steps every layer and every ``C``).
        source: ``tokens``, ``pooled:<mode>`` or ``auto``. ``auto``: word states (the first
            sub-token of each word) for a token task; the pooled mean for a sequence or
            regression task (another pooled mode when the cache has no mean, the mean of the
            token states when it has no pooled vectors). ``tokens`` for a sequence task means
            the mean of each example's stored token states.
        control: probe the control task (:class:`~.control.ControlTask`) instead of the task:
            word types get fixed random labels (token tasks) or the labels are permuted
            (sequence tasks). See :func:`~.selectivity.selectivity`.
        seed: seeds the validation slice, the control labels and the preconditioner's sample.
        layers: cached states to probe (names or indices; default: all).
        val_fraction: size of the seeded slice of the training split held out for validation
            when the cache has no validation split (stratified by label for sequence tasks; by
            sentence for token tasks).
        tol: L-BFGS stops when the largest entry of the gradient of the per-example-mean
            objective in the weights and intercepts falls below it (scikit-learn's rule and default).
            Below :data:`~layercache.solvers.GRADIENT_FLOOR` (1e-4) the solver's float32 arithmetic may
            stop short of ``tol`` (a ``ConvergenceWarning`` says where and why).
        max_train: fit on at most this many training examples or words, a seeded sample
            (:func:`~.selection.sample_rows`; the same rows for every probe of the task and seed);
            default :data:`~.selection.DEFAULT_MAX_TRAIN` (the probe report's too); ``None``: all of them.
            Validation and scoring read every row.
        warm_start: start the L-BFGS solve from this probe's previous fit (its ``coef_`` and ``intercept_``,
            each layer's at its chosen ``C``, for every ``C`` of the grid) instead of from zero, as
            scikit-learn's ``warm_start``. The optimum is the same (to ``tol``); a refit on states that
            changed little (another ``C``, the same states stored another way) reaches it in a fraction of the
            iterations. The previous fit must have the same states, width and classes; ridge is solved in
            closed form and ignores it.

    Standardisation: each layer and dimension is centred and scaled before fitting (L-BFGS
    needs it, and it makes one ``C`` grid fit every layer). Word states use the training split's
    token statistics (``cache.layer_stats``): exact, free (recorded during extraction) and the
    same as the heads use. Pooled vectors use their own training mean and std instead: a mean
    over tokens varies far less than single tokens do, so token statistics would leave pooled
    features with spreads well below one. A constant dimension is centred, not scaled.

    Fitted attributes (``L`` probed layers, ``D`` width, ``K`` = 1 for binary and regression
    tasks, else the number of classes):

    - ``layer_names_``: the probed states; ``best_layer_``: index (into them) of the best one.
    - ``scores_`` (L,): validation score at the chosen ``C`` (accuracy; R^2 for regression);
      ``grid_scores_`` (G, L) and ``grid_losses_`` (G, L) (the criterion) for every ``C`` of
      ``C_grid_`` (sorted ascending).
    - ``C_`` (L,), ``coef_`` (L, D, K), ``intercept_`` (L, K): the chosen models, on
      standardised inputs ``(x - mean_) / scale_`` with ``mean_``, ``scale_`` (L, D).
    - ``classes_``, ``task_`` (name), ``kind_`` (``classification`` / ``regression``),
      ``metric_``, ``source_``, ``n_iter_``, ``converged_``, ``n_train_`` (examples fitted),
      ``n_train_available_`` (before ``max_train``), ``n_val_``,
      ``validation_`` (what validated), ``fit_seconds_`` and ``timings_`` (seconds by phase).

    The probes are fitted on the training part only; the chosen ``C`` is not refitted on
    training + validation data (as the heads do, and so validation scores stay honest).
    """

    def __init__(self, task: str | None = None, C_grid: Sequence[float] = DEFAULT_C_GRID, max_iter: int = 500,
                 source: str = "auto", control: bool = False, seed: int = 0, layers=None,
                 val_fraction: float = 0.1, tol: float = 1e-4, max_train: int | None = DEFAULT_MAX_TRAIN,
                 warm_start: bool = False) -> None:
        self.task = task
        self.C_grid = C_grid
        self.max_iter = max_iter
        self.source = source
        self.control = control
        self.seed = seed
        self.layers = layers
        self.val_fraction = val_fraction
        self.tol = tol
        self.max_train = max_train
        self.warm_start = warm_start

    # --- fitting from a cache ---------------------------------------------------------
    @computes
    def fit(self, cache: LayerCache, split: str = "train", val_split: str | None = None) -> "LinearProbes":
        """Fit every layer's probe on ``split``; choose ``C`` on ``val_split``, the cache's validation
        split, or a seeded slice of ``split``."""
        t0 = time.perf_counter()
        Cs = self._check_common()
        setup = self._setup(cache, split, val_split)
        spec, source, index, val_split = setup.spec, setup.source, setup.index, setup.val_split
        want_types = bool(self.control) and spec.kind == "token"
        # The training sample is read alone (every state: the solver fits them together); the validation
        # part whole when it fits the memory budget, else a group of layers at a time (parts.py).
        train, val, self.validation_ = read_train_parts(cache, spec, source, index, split, val_split,
                                                        self.val_fraction, self.seed, max_train=self.max_train,
                                                        want_types=want_types)
        self.n_train_available_ = train.n_available
        if self.control:
            self._control_fit(spec, train)
            train.y = self._control_labels(cache, split, spec, train)
            val.relabel = partial(self._control_labels, cache, val_split or split, spec)
        read_s = time.perf_counter() - t0
        self._require_labelled(spec, train, train if val.inputs is None else val.inputs)  # a lazy part: checked later
        mean, scale = input_moments(cache, split, spec, source, index, train.X)
        self._record_setup(setup)
        self.cache_identity_ = _identity(cache)
        kind = "regression" if spec.kind == "regression" else "classification"
        classes = None if kind == "regression" else np.arange(spec.num_classes)
        self._fit_standardised(train, val.pieces(), mean, scale, Cs, kind, classes, split, val_split or split,
                               spec)
        self.fit_seconds_ = time.perf_counter() - t0
        self.timings_ = {"read": read_s, **self.timings_}
        return self

    @computes
    def predict(self, cache: LayerCache, split: str) -> np.ndarray:
        """(L, n) predictions of every layer's probe for ``split``: class ids, or regression values.

        ``n`` counts the labelled examples of the split, in cache order; for a token task, its
        labelled words (sentence by sentence, in word order).
        """
        return self.predictions(cache, split)[0]

    @computes
    def predictions(self, cache: LayerCache, split: str) -> tuple[np.ndarray, np.ndarray]:
        """``(predicted (L, n), target (n,))`` for ``split``: :meth:`predict` with the labels it is scored
        against (the control labels when ``control``), from one read of the split (a group of layers at a
        time when the split's features do not fit the memory budget)."""
        predicted, y = [], None
        for layers, chunks in self._read(cache, split).pieces():
            runs, targets = [], []
            for inputs in chunks:  # a run of rows at a time
                X = standardise(inputs.X, self.mean_[layers], self.scale_[layers],
                                [self.layer_names_[i] for i in layers], split)
                runs.append(self._predict_standardised(X, layers))
                targets.append(inputs.y)
            predicted.append(np.concatenate(runs, axis=1))
            y = np.concatenate(targets)
        return np.concatenate(predicted), y

    @computes
    def score(self, cache: LayerCache, split: str) -> np.ndarray:
        """(L,) score of every layer's probe on ``split``: accuracy (over words for a token task),
        R^2 for regression; on the control labels when ``control``."""
        return self._score(*self.predictions(cache, split))

    # --- fitting from arrays ----------------------------------------------------------
    @computes
    def fit_arrays(self, X: np.ndarray, y: np.ndarray, X_val: np.ndarray | None = None,
                   y_val: np.ndarray | None = None) -> "LinearProbes":
        """Fit on your own features ``X`` (n, L, d) and targets ``y`` (n,).

        Integer ``y`` is a classification task (classes: its distinct values), floating ``y`` a
        regression. Without ``X_val``, a seeded ``val_fraction`` slice of ``X`` (stratified by
        class) validates. ``task``, ``source`` and ``control`` are not used here: for a control
        task pass control labels (:class:`~.control.ControlTask`) as ``y``.
        """
        t0 = time.perf_counter()
        Cs = self._check_common()
        X, y = _check_arrays(X, y, "X", "y")
        self.n_train_available_ = len(y)
        kind = "regression" if y.dtype.kind == "f" else "classification"
        self.validation_ = "X_val" if X_val is not None else f"seeded {self.val_fraction:.0%} slice of X"
        if X_val is None:
            keep, held = stratified_holdout(len(y), self.val_fraction, self.seed,
                                            y if kind == "classification" else None, what="X")
            X_val, y_val, X, y = X[held], y[held], X[keep], y[keep]
            self.n_train_available_ = len(y)
        else:
            X_val, y_val = _check_arrays(X_val, y_val, "X_val", "y_val")
            if X_val.shape[1:] != X.shape[1:]:
                raise ConfigError(f"X_val has states x width {X_val.shape[1:]} but X has {X.shape[1:]}; "
                                  "give both the same layers.")
        pick = sample_rows(len(y), self.max_train, self.seed)
        if pick is not None:
            X, y = X[pick], y[pick]
        classes = None
        if kind == "classification":
            classes, y = np.unique(y, return_inverse=True)
            if len(classes) < 2:
                raise ConfigError(f"y holds one class only ({classes[0]}); a probe needs at least two.")
            y_val = _encode(y_val, classes)
        train = ProbeInputs(_layers_first(X), y, np.arange(len(y)))
        val = ProbeInputs(_layers_first(X_val), y_val, np.arange(len(y_val)))
        mean, scale = layer_moments(train.X)
        self.task_, self.source_ = None, "arrays"
        self.layer_names_ = [f"layer_{i}" for i in range(train.X.shape[0])]
        self.cache_identity_ = None
        self._fit_standardised(train, [(np.arange(train.X.shape[0]), iter([val]))], mean, scale, Cs, kind, classes,
                               None, None)
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    @computes
    def predict_arrays(self, X: np.ndarray) -> np.ndarray:
        """(L, n) predictions for features ``X`` (n, L, d): class labels (from ``classes_``) or values."""
        check_is_fitted(self, "coef_")
        X = np.asarray(X)
        if X.ndim != 3 or X.shape[1:] != (len(self.layer_names_), self.coef_.shape[1]):
            raise ConfigError(f"X must have shape (n, {len(self.layer_names_)}, {self.coef_.shape[1]}) like the "
                              f"training features, got {X.shape}.")
        pred = self._predict_standardised(self._standardise(_layers_first(X), None))
        return pred if self.classes_ is None else self.classes_[pred]

    @computes
    def score_arrays(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """(L,) accuracy (R^2 for regression) of every layer's probe on ``X`` (n, L, d), ``y`` (n,)."""
        pred = self.predict_arrays(X)
        y = np.asarray(y)
        if self.classes_ is None:
            return self._score(pred, y.astype(np.float64))
        return np.asarray([float(np.mean(p == y)) for p in pred])

    # --- internals --------------------------------------------------------------------
    def _fit_standardised(self, train: ProbeInputs, val_groups: Iterable[tuple[np.ndarray, Iterable[ProbeInputs]]],
                          mean: np.ndarray, scale: np.ndarray, Cs: np.ndarray, kind: str, classes: np.ndarray | None,
                          split: str | None, val_split: str | None, spec=None) -> None:
        """Fit every layer on standardised training features; choose ``C`` on the validation part, given as
        ``(positions of layers, their inputs run of rows by run)`` groups (one group and one run of every layer
        when it was read whole)."""
        init = self._warm_start_init(len(Cs), mean.shape, kind, classes)
        self.mean_ = np.asarray(mean, np.float32)
        self.scale_ = usable_scale(scale)
        self.kind_, self.classes_ = kind, classes
        self.metric_ = "r2" if kind == "regression" else "accuracy"
        t0 = time.perf_counter()
        Xtr = torch.from_numpy(self._standardise(train.X, split))  # (L, n, D), standardised in place
        t1 = time.perf_counter()
        if kind == "regression":
            fit = fit_ridge(Xtr, torch.from_numpy(np.asarray(train.y, np.float32)), torch.from_numpy(Cs))
        else:
            ytr = torch.from_numpy(np.asarray(train.y, np.int64))
            fit = fit_logistic(Xtr, ytr, len(classes), torch.from_numpy(Cs), max_iter=self.max_iter, tol=self.tol,
                               seed=self.seed, init=init)
            if not fit.converged:
                warnings.warn(unconverged_message(fit, self.max_iter, self.tol), ConvergenceWarning, stacklevel=3)
        t2 = time.perf_counter()
        del Xtr
        train.X = None  # the training features are done with: room for the validation part's
        n_classes = None if kind == "regression" else len(classes)
        # Each layer's outputs from its own weights: the validation part may come a group of layers at a time.
        grouped: list[list[torch.Tensor]] = [[] for _ in Cs]
        y_val = None
        for layers, chunks in val_groups:
            at = torch.from_numpy(layers)
            runs: list[list[torch.Tensor]] = [[] for _ in Cs]  # this group's outputs, a run of rows at a time
            targets = []
            for part in chunks:
                Xva = torch.from_numpy(standardise(part.X, self.mean_[layers], self.scale_[layers],
                                                   [self.layer_names_[i] for i in layers], val_split))
                for g in range(len(Cs)):
                    runs[g].append(torch.baddbmm(fit.intercept[g][at].unsqueeze(1), Xva, fit.coef[g][at]))
                targets.append(part.y)
                del Xva, part
            for g in range(len(Cs)):
                grouped[g].append(torch.cat(runs[g], dim=1))
            y_val = np.concatenate(targets)
        if spec is not None and (y_val is None or len(y_val) == 0):
            self._require_labelled(spec, train, ProbeInputs(np.empty(0), np.empty(0), np.empty(0)))
        val = ProbeInputs(np.empty(0, np.float32), y_val, np.empty(0, np.int64))
        outputs = [torch.cat(parts) for parts in grouped]  # (L, n, K) per C
        grid_scores = np.stack([self._score(outputs_to_predictions(Z, n_classes).numpy(), val.y)
                                for Z in outputs])  # (G, L)
        grid_losses = np.stack([validation_loss(Z, val.y, n_classes) for Z in outputs])  # (G, L)
        choice = choose_c(grid_losses)  # (L,): the smallest validation loss, ties to the smaller C
        layers = np.arange(len(self.mean_))
        self.C_grid_ = Cs
        self.grid_scores_, self.grid_losses_ = grid_scores, grid_losses
        self.C_ = self.C_grid_[choice]
        self.scores_ = grid_scores[choice, layers]
        self.coef_ = fit.coef[choice, layers].numpy()  # (L, D, K)
        self.intercept_ = fit.intercept[choice, layers].numpy()  # (L, K)
        self.best_layer_ = int(np.argmax(self.scores_))
        self.n_iter_, self.converged_ = fit.n_iter, fit.converged
        self.n_train_, self.n_val_ = len(train.y), len(val.y)
        self.timings_ = {"standardise": t1 - t0, "solve": t2 - t1, "select": time.perf_counter() - t2}

    def _warm_start_init(self, G: int, shape: tuple[int, int], kind: str,
                         classes: np.ndarray | None) -> LinearFit | None:
        """The previous fit's weights as the start of every one of ``G`` values of ``C`` (``warm_start``); None for a
        cold start (no previous fit, or a ridge); a previous fit of other states, width or classes is refused."""
        if not self.warm_start or not hasattr(self, "coef_") or kind == "regression":
            return None
        L, D = shape
        same = (getattr(self, "kind_", None) == kind and self.coef_.shape[:2] == (L, D)
                and np.array_equal(self.classes_, classes))
        if not same:
            raise ConfigError(f"warm_start=True starts from the previous fit, which has {self.coef_.shape[0]} states "
                              f"of width {self.coef_.shape[1]} and classes {list(self.classes_)}; these features have "
                              f"{L} of width {D} and classes {list(classes)}: fit with warm_start=False.")
        coef = torch.from_numpy(self.coef_).unsqueeze(0).expand(G, *self.coef_.shape)  # (G, L, D, K)
        intercept = torch.from_numpy(self.intercept_).unsqueeze(0).expand(G, *self.intercept_.shape)  # (G, L, K)
        return LinearFit(coef.contiguous(), intercept.contiguous())

    def _standardise(self, X: np.ndarray, split: str | None) -> np.ndarray:
        """(x - mean_) / scale_ in place on X (L, n, D) float32; refuses non-finite states."""
        return standardise(X, self.mean_, self.scale_, self.layer_names_, split)

    def _predict_standardised(self, X: np.ndarray, layers: np.ndarray | None = None) -> np.ndarray:
        """(l, n) predictions from standardised X (l, n, D) of ``layers`` (positions; default: every layer)."""
        layers = slice(None) if layers is None else layers
        Z = torch.baddbmm(torch.from_numpy(self.intercept_[layers]).unsqueeze(1), torch.from_numpy(X),
                          torch.from_numpy(self.coef_[layers]))  # (l, n, K)
        return outputs_to_predictions(Z, None if self.kind_ == "regression" else len(self.classes_)).numpy()

    def _score(self, pred: np.ndarray, y: np.ndarray) -> np.ndarray:
        """(L,) metric of (L, n) predictions against y (n,)."""
        if self.kind_ == "regression":
            y = np.asarray(y, np.float64)
            total = float(((y - y.mean()) ** 2).sum())
            resid = ((pred.astype(np.float64) - y) ** 2).sum(1)
            if total == 0:  # a constant target: R^2 is 1 for a perfect fit, else 0 (as scikit-learn)
                return np.where(resid == 0, 1.0, 0.0)
            return 1.0 - resid / total
        return (pred == np.asarray(y)[None, :]).mean(1)

    def _read(self, cache: LayerCache, split: str) -> SplitPart:
        """The split's features and (control) labels, for a fitted cache probe: read a group of layers at a time."""
        check_is_fitted(self, "coef_")
        if self.task_ is None:
            raise ConfigError("These probes were fitted with fit_arrays; use predict_arrays / score_arrays.")
        _check_identity(self.cache_identity_, _identity(cache))
        missing = [n for n in self.layer_names_ if n not in cache.layer_names]
        if missing:
            raise CacheError(f"The cache has no state {missing[0]!r} that the probes read; use the cache they "
                             "were fitted on (or one extracted the same way).")
        spec = resolve_task(cache, self.task_)
        want_types = bool(self.control) and spec.kind == "token"
        part = whole_part(cache, split, spec, self.source_, cache.layer_index(self.layer_names_),
                          want_types=want_types)
        if self.control:
            part.relabel = partial(self._control_labels, cache, split, spec)
        return part

    def _control_fit(self, spec, train: ProbeInputs) -> None:
        self.control_task_ = ControlTask(self.seed)
        if spec.kind == "token":
            self.control_task_.fit(train.y, spec.num_classes)

    def _control_labels(self, cache: LayerCache, split: str, spec, inputs: ProbeInputs) -> np.ndarray:
        """Control labels for ``inputs`` of ``split``: by word type, or the split's labels permuted."""
        if spec.kind == "token":
            return self.control_task_.word_labels(inputs.types)
        # Permute the whole split's labels, then take the rows read: a validation slice of train
        # sees the same control labels as the training part around it.
        labels = np.asarray(cache.labels(split, spec.name))
        return self.control_task_.sequence_labels(labels, split)[inputs.rows].astype(inputs.y.dtype)


def _layers_first(X: np.ndarray) -> np.ndarray:
    """(n, L, D) -> a new float32 (L, n, D) array, contiguous (standardised in place later: never a view)."""
    return np.array(np.asarray(X).transpose(1, 0, 2), dtype=np.float32, order="C", copy=True)


def _encode(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Class labels -> indices into ``classes``; refuses labels that training never saw."""
    idx = np.searchsorted(classes, y)
    bad = (idx >= len(classes)) | (classes[np.minimum(idx, len(classes) - 1)] != y)
    if bad.any():
        raise ConfigError(f"y_val holds the class {y[bad][0]!r} that y does not; validate on the same classes.")
    return idx


def _check_arrays(X, y, xname: str, yname: str) -> tuple[np.ndarray, np.ndarray]:
    X, y = check_feature_arrays(X, y, xname, yname)
    if y.dtype.kind not in "iuf":
        raise ConfigError(f"{yname} must be integer class ids or float targets, got dtype {y.dtype}.")
    return X, y


def _identity(cache: LayerCache) -> dict:
    m = cache.manifest
    return {"model": m.model.name, "fingerprint": m.model.fingerprint, "hidden_size": m.hidden_size}


def _check_identity(fitted: dict | None, other: dict) -> None:
    if fitted is None:
        return
    if fitted["hidden_size"] != other["hidden_size"] or (
            fitted["fingerprint"] and other["fingerprint"] and fitted["fingerprint"] != other["fingerprint"]):
        raise CacheError(f"The probes were fitted on states of {fitted['model']!r}, not of this cache's "
                         f"{other['model']!r}; score them on a cache of the same backbone.")
