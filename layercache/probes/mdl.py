"""``OnlineCodeMDL``: minimum description length of a task's labels given each layer (Voita & Titov 2020).

    mdl = OnlineCodeMDL(task="sentiment").fit(cache)          # every layer at once
    mdl.codelength_, mdl.compression_, mdl.best_layer_        # bits by layer, N log2 K / bits, ...
    mdl.block_codelengths_, mdl.portions_                     # bits per block and layer, block ends

The online (prequential) code transmits the labels of the shuffled training data block by block:
the first ``t_1`` labels with the uniform code (``log2 K`` bits each), then each next block
``[t_i, t_{i+1})`` with a linear probe trained on the first ``t_i`` examples, at its summed
cross-entropy converted from nats to bits (``nats / ln 2``). ``codelength_ = t_1 log2 K + sum_i
CE_bits(block_{i+1})``; ``compression_ = N log2 K / codelength_``. A layer from which the labels are
easy to read compresses them well; noise gives a compression near one (or below: the probes
trained on the first few examples overfit).

Each block's probes (one per layer) are fitted as one batched model by :func:`layercache.solvers.fit_logistic`
(one call per block, every layer together, warm-started from the nearest fit already made: the probes
fitted on the same examples less the selection slice, which pick ``C``; those from the previous block's
examples before that). Features are read and standardised as :class:`~.linear.LinearProbes` does (word
states with the cache's token statistics of the split, pooled vectors and arrays with their own
training mean and std); these statistics are label-free, so they leak nothing of the labels into
the early blocks. Classification tasks only.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning

from ..core.memory import current_budget
from ..core.threads import computes
from ..errors import CacheError, ConfigError
from ..solvers import GRADIENT_FLOOR, LinearFit, fit_logistic, linear_outputs, unconverged_message
from ..store.reader import LayerCache
from .base import Probe
from .features import (
    ProbeInputs,
    check_feature_arrays,
    check_solver_params,
    input_moments,
    layer_moments,
    read_parts,
    standardise,
)
from .linear import DEFAULT_C_GRID
from .parts import FEATURE_SHARE, feature_bytes, item_bound, whole_part
from .registry import register_probe
from .selection import DEFAULT_MAX_TRAIN, cross_entropy_nats, sample_rows

DEFAULT_PORTIONS = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.0625, 0.125, 0.25, 0.5, 1.0)
"""Block ends as fractions of the training data: Voita & Titov's 0.1, 0.2, ..., 50, 100 %."""


@register_probe("mdl")
class OnlineCodeMDL(Probe):
    """Online codelength of a classification task's labels given each layer's states.

    Args:
        task: the cache's label task (default: its only task); a classification task (sequence
            or token), not a regression.
        source: ``tokens``, ``pooled:<mode>`` or ``auto``, as for :class:`~.linear.LinearProbes`
            (``auto``: word states for a token task, the pooled mean for a sequence task).
        portions: increasing fractions of the shuffled training data in (0, 1], the last 1.0,
            where the blocks end. Each end is ``round(p * N)``, at least 1; ends that coincide
            (small ``N``) merge their blocks.
        C_grid: inverse L2 strengths tried for each block's probes (scikit-learn's ``C``: loss =
            sum of per-example losses + ``||w||^2 / (2 C)``), on standardised features. Before
            coding block ``i + 1``, each layer picks its ``C`` by the cross-entropy on the last
            ``selection_fraction`` of the examples already coded, of probes fitted on the rest
            of them; then all probes are refitted on every coded example and the picked one
            codes the next block. No label of a block is used before it is coded. Why a grid:
            the online code charges every confident mistake of a probe fitted on few examples,
            so one fixed ``C`` is too weak for the early blocks of wide states (on MiniLM's SST-2
            means ``C=1`` gave compressions of 0.91-1.10 by layer) or too strong for a cleanly
            separable layer. One value skips the selection.
        selection_fraction: the share of the coded examples that picks ``C`` (at least one
            example; while fewer than two are coded, the smallest ``C`` is used).
        max_iter: L-BFGS iterations at most per block.
        seed: seeds the shuffle of the training data (and the solver's preconditioner sample).
        layers: cached states to probe (names or indices; default: all).
        tol: L-BFGS stopping tolerance (as for ``LinearProbes``).
        max_train: code at most this many training examples or words: the seeded sample
            :class:`~.linear.LinearProbes` fits with the same ``max_train`` and ``seed``
            (:func:`~.selection.sample_rows`), then shuffled. Default
            :data:`~.selection.DEFAULT_MAX_TRAIN`; ``None``: all of them.
            The codelength grows with the number of labels coded and the compression with the
            data the probes learn from, so compare layers at one ``max_train``.

    Fitted attributes (``L`` probed layers, ``M`` blocks):

    - ``codelength_`` (L,): bits per layer; ``uniform_codelength_``: ``N log2 K`` bits;
      ``compression_`` (L,): ``uniform_codelength_ / codelength_``.
    - ``block_codelengths_`` (M, L): bits of each block and layer (row 0: the uniform first block,
      ``t_1 log2 K``); its column sums are ``codelength_``.
    - ``portions_`` (M,): the block ends ``t_1 < ... < t_M = N`` as counts of examples.
    - ``layer_names_``, ``best_layer_`` (index of the shortest codelength), ``n_classes_`` (K),
      ``classes_`` (the labels behind class ids 0..K-1), ``task_``, ``source_``, ``n_train_`` (N),
      ``n_train_available_`` (before ``max_train``), ``converged_`` (M,) (whether each block's probes
      met ``tol``; the first block has none),
      ``C_`` (M, L): the ``C`` that coded each block and layer (NaN for the uniform first block),
      ``fit_seconds_``.

    A class absent from the examples a block's probes were trained on gets a probability that
    L-BFGS drives towards zero (its intercept is unpenalised) until the gradient is below ``tol``:
    each of its examples in the next block then costs some 10-20 bits (finite: the cross-entropy
    is taken in float64 log-softmax form). That is the online code's price for an unseen class,
    and it is small next to the total once ``N`` is in the thousands.
    """

    classification_only = True

    def __init__(self, task: str | None = None, source: str = "auto", portions: Sequence[float] = DEFAULT_PORTIONS,
                 C_grid: Sequence[float] = DEFAULT_C_GRID, selection_fraction: float = 0.1, max_iter: int = 500,
                 seed: int = 0, layers=None, tol: float = 1e-4, max_train: int | None = DEFAULT_MAX_TRAIN) -> None:
        self.task = task
        self.source = source
        self.portions = portions
        self.C_grid = C_grid
        self.selection_fraction = selection_fraction
        self.max_iter = max_iter
        self.seed = seed
        self.layers = layers
        self.tol = tol
        self.max_train = max_train

    @computes
    def fit(self, cache: LayerCache, split: str = "train") -> "OnlineCodeMDL":
        """Measure every layer's online codelength of the task's labels on ``split``."""
        t0 = time.perf_counter()
        portions = self._check_params()
        setup = self._setup(cache, split)
        spec, source, index = setup.spec, setup.source, setup.index
        if spec.kind == "regression":
            raise ConfigError(f"Task {spec.name!r} is a regression, but the online code measures the labels of a "
                              "classification task; choose a sequence or token task with classes (or use "
                              "LinearProbes for a regression).")
        cache.require_split(split)
        inputs, mean, scale = self._read_sample(cache, split, spec, source, index)
        if len(inputs.y) == 0:
            raise CacheError(f"The {split!r} split has no labelled examples of task {spec.name!r}; "
                             "measure a split that has labels.")
        self._record_setup(setup)
        self.classes_ = np.arange(spec.num_classes)
        X = standardise(inputs.X, mean, scale, self.layer_names_, split)
        self._fit_standardised(X, np.asarray(inputs.y, np.int64), spec.num_classes, portions, inputs.n_available)
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    @computes
    def fit_arrays(self, X: np.ndarray, y: np.ndarray, n_classes: int | None = None) -> "OnlineCodeMDL":
        """Measure the online codelength of integer labels ``y`` (n,) given features ``X`` (n, L, d).

        With ``n_classes``, ``y`` holds class ids in ``[0, n_classes)`` and the uniform code uses
        ``log2(n_classes)`` bits (classes absent from ``y`` count); without it, the classes are
        the distinct values of ``y``. ``task`` and ``source`` are not used here.
        """
        t0 = time.perf_counter()
        portions = self._check_params()
        X, y = check_feature_arrays(X, y)
        if y.dtype.kind not in "iu":
            raise ConfigError(f"y must hold integer class ids (dtype {y.dtype} looks like a regression target); the "
                              "online code measures classification labels, so pass class ids.")
        if len(y) == 0:
            raise ConfigError("X and y hold no examples; give at least one.")
        if n_classes is None:
            classes, y = np.unique(y, return_inverse=True)
        else:
            if not isinstance(n_classes, (int, np.integer)) or n_classes < 2:
                raise ConfigError(f"n_classes must be an integer of at least 2, got {n_classes!r}.")
            if y.min() < 0 or y.max() >= n_classes:
                raise ConfigError(f"y must hold class ids in [0, {n_classes}) for n_classes={n_classes}, "
                                  f"got values from {y.min()} to {y.max()}.")
            classes = np.arange(n_classes)
        if len(classes) < 2:
            raise ConfigError(f"y holds one class only ({classes[0]}); pass n_classes, or labels of two classes.")
        Xl = np.array(X.transpose(1, 0, 2), dtype=np.float32, order="C", copy=True)  # (L, n, d), ours to modify
        self.task_, self.source_ = None, "arrays"
        self.layer_names_ = [f"layer_{i}" for i in range(Xl.shape[0])]
        self.classes_ = classes
        mean, scale = layer_moments(Xl)
        Xl = standardise(Xl, mean, scale, self.layer_names_)
        self._fit_standardised(Xl, np.asarray(y, np.int64), len(classes), portions)
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    # --- internals --------------------------------------------------------------------
    def _below_floor(self, fit: LinearFit) -> LinearFit | None:
        """``fit`` when it stalled short of a ``tol`` below :data:`~layercache.solvers.GRADIENT_FLOOR`, else None."""
        stalled = not fit.converged and fit.n_iter < self.max_iter
        return fit if stalled and self.tol < GRADIENT_FLOOR else None

    def _read_sample(self, cache: LayerCache, split: str, spec, source: str,
                     index: list[int]) -> tuple[ProbeInputs, np.ndarray, np.ndarray]:
        """The examples (words) coded, every state, and the mean and std (L, D) that standardise them.

        Only the seeded sample of ``max_train`` is read (the one :meth:`_fit_standardised` would take), when
        the moments do not need the rest: word states take the cache's statistics; pooled vectors their own
        moments over the whole split, read whole when they fit the memory budget, else a group of layers at
        a time for the moments, then the sample.
        """
        part = whole_part(cache, split, spec, source, index)
        whole = feature_bytes(cache, item_bound(cache, split, spec, part.rows), len(index))
        if spec.kind != "token" and whole <= FEATURE_SHARE * current_budget():
            inputs = read_parts(cache, split, spec, source, index, [part.rows])[0]
            return inputs, *input_moments(cache, split, spec, source, index, inputs.X)
        if spec.kind == "token":
            mean, scale = input_moments(cache, split, spec, source, index, None)
        else:
            mean = np.empty((len(index), cache.hidden_size))
            scale = np.empty_like(mean)
            for layers, group in part.layer_groups():
                mean[layers], scale[layers] = layer_moments(group.X)
        inputs = read_parts(cache, split, spec, source, index, [part.rows], sample=(self.max_train, self.seed))[0]
        return inputs, mean, scale

    def _check_params(self) -> np.ndarray:
        try:
            portions = np.asarray([float(p) for p in self.portions], np.float64)
        except (TypeError, ValueError):
            raise ConfigError(f"portions must be a list of fractions in (0, 1], got {self.portions!r}.") from None
        if (len(portions) == 0 or not np.all((portions > 0) & (portions <= 1)) or portions[-1] != 1.0
                or np.any(np.diff(portions) <= 0)):
            raise ConfigError(f"portions must be increasing fractions in (0, 1] ending at 1.0, got {self.portions!r}.")
        if not (isinstance(self.selection_fraction, (int, float)) and 0 < self.selection_fraction < 1):
            raise ConfigError(f"selection_fraction must be in (0, 1), got {self.selection_fraction!r}.")
        self._check_common()
        return portions

    def _fit_standardised(self, X: np.ndarray, y: np.ndarray, n_classes: int, portions: np.ndarray,
                          available: int | None = None) -> None:
        """The online code on standardised X (L, N, D), class ids y (N,) in [0, n_classes); ``available``: the
        examples there were when X is already the seeded sample of them."""
        L, N, _ = X.shape
        self.n_train_available_ = N if available is None else available
        sample = sample_rows(N, self.max_train, self.seed)
        rows = np.arange(N) if sample is None else sample  # the examples coded: all, or the seeded sample
        order = rows[np.random.default_rng(self.seed).permutation(len(rows))]
        N = len(rows)
        ends = np.unique(np.clip(np.round(portions * N).astype(np.int64), 1, N))  # t_1 < ... < t_M = N
        Xs = torch.from_numpy(X).index_select(1, torch.from_numpy(order))  # (L, N, D), shuffled, contiguous
        ys = torch.from_numpy(y[order])
        log2k = math.log2(n_classes)
        blocks = np.empty((len(ends), L), np.float64)
        blocks[0] = ends[0] * log2k  # the uniform code for the first block
        Cs = torch.from_numpy(check_solver_params(self.C_grid, self.max_iter, self.seed, self.tol))  # (G,) ascending
        G = len(Cs)
        chosen_C = np.full((len(ends), L), np.nan)
        fit: LinearFit | None = None  # G x L probes on every coded example, warm start of the next
        pick: LinearFit | None = None  # G x L probes on the coded examples less the selection slice
        converged = np.ones(len(ends), bool)
        at_limit = False
        floored: LinearFit | None = None  # a fit that stalled short of a tol below the solver's float32 floor
        for i in range(1, len(ends)):
            seen, stop = int(ends[i - 1]), int(ends[i])
            choice = np.zeros(L, np.int64)  # (L,) index into Cs; the smallest C until a choice is possible
            n_select = max(1, int(round(self.selection_fraction * seen)))
            if G > 1 and seen - n_select >= 1:
                head = seen - n_select
                pick = fit_logistic(Xs[:, :head].contiguous(), ys[:head], n_classes, Cs, max_iter=self.max_iter,
                                    tol=self.tol, seed=self.seed, init=pick)
                at_limit = at_limit or pick.n_iter >= self.max_iter
                floored = floored or self._below_floor(pick)
                held = Xs[:, head:seen].contiguous()  # (L, n_select, D)
                nats = np.stack([cross_entropy_nats(linear_outputs(held, pick.coef[g], pick.intercept[g]),
                                                     ys[head:seen]) for g in range(G)])  # (G, L)
                choice = np.argmin(nats, axis=0)  # ties: the smaller C (the grid is ascending)
            # from the probes just fitted on all but the selection slice of these examples: nearer the optimum
            # than the last block's fit on half of them
            fit = fit_logistic(Xs[:, :seen].contiguous(), ys[:seen], n_classes, Cs, max_iter=self.max_iter,
                               tol=self.tol, seed=self.seed, init=fit if pick is None else pick)
            converged[i] = fit.converged
            at_limit = at_limit or fit.n_iter >= self.max_iter
            floored = floored or self._below_floor(fit)
            layer = torch.arange(L)
            coef, intercept = fit.coef[choice, layer], fit.intercept[choice, layer]  # (L, D, K), (L, K)
            nats = cross_entropy_nats(linear_outputs(Xs[:, seen:stop].contiguous(), coef, intercept), ys[seen:stop])
            blocks[i] = nats / math.log(2)  # nats -> bits
            chosen_C[i] = Cs.numpy()[choice]
        if at_limit:  # (a fit that stopped short of tol for lack of progress, on a few examples, is no news)
            warnings.warn(f"L-BFGS stopped at max_iter={self.max_iter} before reaching tol={self.tol} on some "
                          "block; raise max_iter for exact codelengths.", ConvergenceWarning, stacklevel=3)
        elif floored is not None:  # a tol the solver cannot reach: every block may stop short of it
            warnings.warn(unconverged_message(floored, self.max_iter, self.tol), ConvergenceWarning, stacklevel=3)
        self.n_classes_, self.n_train_, self.converged_, self.C_ = n_classes, N, converged, chosen_C
        self.portions_ = ends
        self.block_codelengths_ = blocks
        self.codelength_ = blocks.sum(0)
        self.uniform_codelength_ = N * log2k
        self.compression_ = self.uniform_codelength_ / self.codelength_
        self.best_layer_ = int(np.argmin(self.codelength_))
