"""``LayerHead``: a scikit-learn-style estimator that learns a head from a layer cache.

    head = LayerHead(mixer="adaptive", epochs=10).fit(cache)          # train (+ validation split)
    metrics = head.score(cache, "test")                                # {task: {metric: value}}
    head.save("runs/adaptive"); LayerHead.load("runs/adaptive")        # JSON + safetensors, no pickle

Where scikit-learn estimators take ``X, y``, a head takes a cache and a split: the cache holds both
the states and the labels, and reading it lazily is the point. ``get_params`` / ``set_params``
work as in scikit-learn (the class derives from ``BaseEstimator``).

A fitted head remembers which backbone and tokenizer produced its training cache (their
fingerprints), which states it reads and the tasks' label names; :meth:`check_cache` refuses a cache
that differs in any of these, because the head's weights would then mean nothing.

The estimator ties together ideas that each have a module: the data source (:mod:`.data.source`), the
validation data (:func:`~layercache.core.holdout.validation_slice`), the training cache's identity
(:mod:`.run_folders.provenance`) and the run folder on disk (:mod:`.run_folders.persistence`).

The states are normalised before mixing as ``normalize`` says (:mod:`.blocks.normalize`): by default
standardised with the training split's statistics on a pre-LN cache (raw residual streams) and
left alone on a post-LN one. The statistics are saved with the weights.

The epoch is selected on each task's selection metric (``metric``, :mod:`.scoring.selection`; by default
``mcc`` for a sequence task with imbalanced training classes), the classification losses may
weigh classes (``class_weight``, :mod:`.training.class_weights`), and a head that predicts nearly one class
for everything is reported in ``warnings_`` and the log (:mod:`.training.collapse`).

A head that is a linear model on fixed features (``last`` or ``layer:<i>`` under a linear
sequence, token or regression head) is a convex problem: with ``solver="auto"`` (the default) or
``"lbfgs"`` it is fitted in full batch with its L2 strength chosen on validation (:mod:`.training.convex`),
the way scikit-learn's ``LogisticRegression`` fits it; every other head trains by minibatch AdamW
(:mod:`.training.trainer`). :mod:`.training.fitting` decides which.

With ``seeds=M`` a minibatch-trained head is fitted ``M`` times from consecutive seeds on one
validation slice and predicts with their average (:mod:`.ensembles.members`, functions over fitted heads, and
:mod:`.ensembles.model`; :meth:`LayerHead.from_seeds`
combines heads fitted separately, as ``layercache sweep`` does with its winner's seeds, and
:meth:`LayerHead.from_members` any heads fitted on the same states, as its ``--ensemble`` does).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from sklearn.base import BaseEstimator

from ..core.devices import resolve_device
from ..core.holdout import validation_slice
from ..core.option_specs import check_options
from ..core.tasks import LabelTask
from ..core.threads import computes
from ..core.version import __version__
from ..errors import ConfigError, LayercacheError
from ..store.cache_feed import CacheFeed
from ..store.feed import Feed
from ..store.feed_pool import FeedPool
from ..store.manifest import utc_now
from ..store.projection import Projection
from ..store.reader import LayerCache
from .blocks.normalize import resolve_normalize
from .data.finite import check_split_stats, split_state_stats
from .data.source import pooled_note, resolve_source, resolve_tasks
from .ensembles.members import FittedHead, check_seed_count, fit_seeds, member_ensemble, seed_ensemble
from .ensembles.model import model_from_config
from .head_options import DEFAULT_MIXER, HeadOptions
from .network.model import HeadModel
from .run_folders.persistence import (
    damaged,
    error_detail,
    jsonable,
    load_weights,
    read_run_config,
    read_weights,
    run_files,
    write_run,
)
from .run_folders.provenance import cache_identity, cache_mean_skip_first, check_backbone_matches, check_cache_matches
from .run_folders.run_files import RunConfig
from .scoring.evaluation import PassResult, evaluate, predict
from .scoring.selection import Selection, default_selection, requested_metrics, resolve_selection
from .training.checkpoint import CheckpointFolder
from .training.class_weights import BALANCED, class_weight_values, label_counts, parse_class_weight
from .training.collapse import collapse_warnings
from .training.convex import convergence_warnings, fit_convex, resolved_c_grid
from .training.fitting import default_lr, fit_record, resolve_solver
from .training.trainer import TrainConfig, TrainHistory, seed_everything, train_model

PROJECTION_MEAN, PROJECTION_BASIS = "projection.mean", "projection.basis"
"""Where a head trained on a projected cache keeps the basis of its states, beside its weights."""

log = logging.getLogger(__name__)

_D = HeadOptions()  # the head's settings as left out: their types, defaults and rules are declared there

SCORING_BATCH = 128
"""Examples per batch when a trained head scores or predicts a split (no gradients: larger than training's)."""


class LayerHead(BaseEstimator):
    """Learn how to combine a frozen model's cached layers for one or several label tasks.

    Args:
        mixer: layer mixer spec: ``last``, ``layer:<i>``, ``scalar``, ``adaptive``, ``attention``,
            ``gumbel``, ``act``.
        tasks: label tasks of the cache to learn (default: every task the cache has), trained
            jointly with ``loss_weights``.
        layers: cached states to read (names or indexes; default: all).
        source: ``tokens``, ``pooled:<mode>``, or ``auto``: the cache's mean-pooled vectors when they
            give identical results (linear mixer, mean-pooling linear head), else token states. On a
            pooled-only cache ``auto`` refuses a model that needs token states (see
            :func:`~.data.source.needs_tokens`); an explicit ``pooled:<mode>`` runs it on one vector per example, with
            a warning that is also kept in the run's ``data.source_note``.
        mixer_options, head_options, share_mixer: see :class:`HeadModel`.
        normalize: input normalisation of the states before mixing: ``standardize`` (per state and
            dimension, with the training split's statistics), ``layer_norm`` (per token, needs token
            states), ``none``, or ``auto``: ``standardize`` when the cache comes from a pre-LN model
            (its manifest's ``final_norm`` is not ``none``: GPT-2, Llama, T5), else ``none``.
        metric: the validation metric that selects the epoch and stops training early: a name from
            :data:`~.scoring.selection.SELECTION_METRICS` for every task, or ``{task: name}``; tasks left out
            (all, with ``None``) take their default: ``accuracy`` for a sequence task (``mcc`` when its
            training classes are imbalanced), ``span_f1`` for IOB tags, else ``macro_f1``, and
            ``pearson`` for regression. A joint head selects on the loss-weighted mean.
        class_weight: class weights in the cross-entropy of classification tasks: ``None``
            (unweighted), ``"balanced"`` (scikit-learn's ``n_samples / (n_classes * count_c)`` on
            the training labels, every classification task), ``{class: weight}`` (by label name or
            index; the one classification task) or ``{task: "balanced" | {class: weight}}``. The
            resolved weights are kept in the model config. The convex fit honours them as
            scikit-learn's ``class_weight`` does (each example's loss weighed by its class's weight).
        solver: how the weights are fitted (:data:`~.training.fitting.SOLVERS`): ``lbfgs``, the convex full-batch
            fit of a linear head on fixed features (``last`` / ``layer:<i>`` mixers; sequence heads with
            ``mean``, ``first`` or ``last`` pooling, no attention and no hidden layer; token heads without
            encoder layers, one example per word's first sub-token): L-BFGS for classification, ridge in
            closed form for regression, ``C`` chosen per task on validation by its selection metric
            (a token task's per word, as evaluation scores it); ``adamw``, minibatch AdamW with early
            stopping (any head); or ``auto``: ``lbfgs`` where the model qualifies, else ``adamw``.
            ``lbfgs`` on a model that does not qualify is refused. The minibatch settings below do not
            apply to ``lbfgs``. A fitted head's ``fit_`` says which solver fitted it (and, for ``lbfgs``,
            each task's ``C``).
        C_grid: the inverse L2 strengths (scikit-learn's ``C``) the convex fit tries, on features
            standardised per dimension (default :data:`~.training.convex.DEFAULT_C_GRID`).
        epochs, batch_size, lr, weight_decay, schedule, warmup, patience, max_grad_norm, seed: see
            :class:`TrainConfig`. ``lr=None`` picks 1e-3 for heads with attention or a projection
            (``adaptive``) and 1e-2 for linear heads, which learn too slowly at 1e-3.
        seeds: train this many heads, with seeds ``seed``, ``seed + 1`` ..., on one validation slice,
            and predict with their average (a seed ensemble, :mod:`.ensembles.model`): steadier and
            usually better than one seed, for ``seeds`` times the training. ``fit_["seeds"]`` lists
            the members' seeds. The convex fit is deterministic, so it refuses ``seeds > 1``.
        val_fraction: size of the seeded stratified validation slice of the training split, used
            when no validation split is given.
        val_seed: seed of that slice (default: ``seed``), so that runs of several seeds can share one
            validation slice (``layercache sweep`` does).
        device: ``cpu``, ``cuda`` or ``auto``.
        progress: show a progress bar while training.

    Every batch the head trains, validates, predicts and scores on comes from :meth:`make_feed`,
    the extension point for other sources of batches: a subclass that overrides it (the live
    backbone's :class:`~layercache.live.training.LiveLayerHead`) trains and scores on any
    :class:`~layercache.store.feed.Feed`, and the hyperparameters (``get_params``) stay the ones
    above.
    """

    # scikit-learn reads the parameters from __init__: HeadOptions' fields, in order (a test holds them equal)
    def __init__(self, mixer: str = DEFAULT_MIXER, *, tasks=_D.tasks, layers=_D.layers, source=_D.source,
                 mixer_options=_D.mixer_options, head_options=_D.head_options, share_mixer=_D.share_mixer,
                 loss_weights=_D.loss_weights, normalize=_D.normalize, metric=_D.metric, class_weight=_D.class_weight,
                 solver=_D.solver, C_grid=_D.C_grid, epochs=_D.epochs, batch_size=_D.batch_size, lr=_D.lr,
                 weight_decay=_D.weight_decay, schedule=_D.schedule, warmup=_D.warmup, patience=_D.patience,
                 max_grad_norm=_D.max_grad_norm, seed=_D.seed, seeds=_D.seeds, val_fraction=_D.val_fraction,
                 val_seed=_D.val_seed, device=_D.device, progress=_D.progress) -> None:
        self.mixer = mixer
        self.tasks = tasks
        self.layers = layers
        self.source = source
        self.mixer_options = mixer_options
        self.head_options = head_options
        self.share_mixer = share_mixer
        self.loss_weights = loss_weights
        self.normalize = normalize
        self.metric = metric
        self.class_weight = class_weight
        self.solver = solver
        self.C_grid = C_grid
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.schedule = schedule
        self.warmup = warmup
        self.patience = patience
        self.max_grad_norm = max_grad_norm
        self.seed = seed
        self.seeds = seeds
        self.val_fraction = val_fraction
        self.val_seed = val_seed
        self.device = device
        self.progress = progress

    # --- fitting ------------------------------------------------------------------------
    @computes
    def fit(self, cache: LayerCache, split: str = "train", val_split: str | None = None, *,
            feeds: FeedPool | None = None, deadline: float | None = None,
            checkpoints: Path | CheckpointFolder | None = None,
            fresh: bool = False) -> "LayerHead":
        """Train on ``split``; validate on ``val_split``, the cache's validation split, or a slice of train.

        ``feeds``: a :class:`~layercache.store.feed_pool.FeedPool` of ``cache`` to take the feeds from, so that many
        fits of one cache share them (``layercache sweep``); by default each fit builds its own.
        ``deadline``: a :func:`time.perf_counter` value after which minibatch training starts no new
        epoch (see :func:`~.training.trainer.train_model`); the convex fit ignores it (it takes a fraction of
        an epoch's time). ``checkpoints``: a folder (or a :class:`~.training.checkpoint.CheckpointFolder`, which
        remembers each fit's checkpoint) where each fit saves its state after every epoch and from which a stopped
        fit resumes (:mod:`.training.checkpoint`; ``fresh`` discards what is there first).
        """
        check_options(HeadOptions, self.get_params())  # a setting out of its range is refused before any read
        if feeds is not None and feeds.cache is not cache:
            raise ConfigError("The feed pool given to fit() reads another cache; pass a FeedPool of the cache being "
                              "fitted.")
        if check_seed_count(self.seeds) > 1:
            return fit_seeds(self, cache, split, val_split, feeds or FeedPool(cache), deadline, checkpoints, fresh)
        device = resolve_device(self.device)
        tasks = self._resolve_tasks(cache)
        # Checked before any data is read: a misspelt metric or class should not cost a pass.
        asked_metrics = requested_metrics(self.metric, tasks)
        class_weight = parse_class_weight(self.class_weight, tasks)
        index = cache.layer_index(self.layers)
        layer_names = [cache.layer_names[i] for i in index]
        normalize = resolve_normalize(self.normalize, cache.manifest.model.final_norm)
        # Build the model up front: a bad spec or option fails before any data is read, and the
        # model decides whether pooled vectors can stand in for token states.
        seed_everything(self.seed)
        model = HeadModel(len(layer_names), cache.hidden_size, tasks, mixer=self.mixer,
                          mixer_options=self.mixer_options, head_options=self.head_options,
                          share_mixer=self.share_mixer, loss_weights=self.loss_weights, normalize=normalize,
                          mean_skip_first=cache_mean_skip_first(cache))
        solver = resolve_solver(self.solver, model)
        if solver == "lbfgs":
            resolved_c_grid(self.C_grid)
        source = resolve_source(cache, self.source, tasks, model)
        note = pooled_note(model, source)
        if note is not None:
            log.warning(note)
        cache.require_split(split)
        check_split_stats(cache, split, layer_names)
        if normalize == "standardize":
            model.set_state_stats(*split_state_stats(cache, split, index, layer_names))
        train_rows, val_feed, val_desc = self.validation_data(cache, split, val_split, tasks, layer_names, source,
                                                              feeds)
        train_feed = self.make_feed(cache, split, tasks, layer_names, source, rows=train_rows, pool=feeds)
        self.train_config_ = self._train_config(default_lr(model))
        for t in tasks:
            if t.kind == "regression":
                gold = train_feed.gold(t.name)
                model.set_target_stats(t.name, np.asarray(gold, dtype=np.float64))
        # Training labels per class, only where a default or a weight depends on them.
        counted = [t for t in tasks if class_weight.get(t.name) == BALANCED
                   or (t.kind == "sequence" and t.name not in asked_metrics)]
        counts = {t.name: label_counts(train_feed.gold(t.name), t.num_classes) for t in counted}
        for name, weights in class_weight_values(class_weight, tasks, counts).items():
            model.set_class_weights(name, weights)
        self.selection_ = resolve_selection(tasks, asked_metrics, model.loss_weights, counts)
        if solver == "lbfgs":
            self.history_: TrainHistory = fit_convex(model, train_feed, val_feed, self.selection_, C_grid=self.C_grid,
                                                     device=device, seed=self.seed)
        else:
            checkpoint = None if checkpoints is None else CheckpointFolder.at(checkpoints).fit(
                jsonable(self.get_params()), cache.manifest.config_hash, split, val_split, layer_names,
                fresh=fresh)
            self.history_ = train_model(model, train_feed, val_feed, self.train_config_, device=device,
                                        progress=self.progress, selection=self.selection_, deadline=deadline,
                                        checkpoint=checkpoint)
            self.checkpoints_ = [] if checkpoint is None else [checkpoint]
        # Score the kept (best) epoch once more: the numbers a run reports, and the usage pass
        # behind input-dependent mixers' layer weights.
        self.validation_metrics_, self.validation_pass_ = evaluate(model, val_feed, device)
        self.warnings_ = collapse_warnings(tasks, val_feed, self.validation_pass_, self.selection_, class_weight,
                                           exact=solver == "lbfgs")
        for warning in convergence_warnings(self.history_):
            self.warnings_.append(warning)
            log.warning(warning)
        self.model_ = model.cpu().eval()
        self.fit_ = fit_record(self.history_)
        self.tasks_ = tasks
        self.layer_names_ = layer_names
        self.source_ = source
        self.normalize_ = normalize
        self.cache_info_ = cache_identity(cache)
        projection = cache.projection()  # a projected cache: the live path needs the basis of the states read
        self.projection_ = None if projection is None else projection.subset(cache.layer_index(layer_names))
        self.data_ = {"cache": str(cache.path), "train_split": split, "validation": val_desc,
                      "n_train": train_feed.n_examples, "n_validation": val_feed.n_examples,
                      "normalize": normalize, "mean_skip_first": model.mean_skip_first}
        if note is not None:
            self.data_["source_note"] = note
        return self

    def validation_data(self, cache: LayerCache, split: str, val_split: str | None, tasks: list[LabelTask],
                        layer_names: list[str], source: str, feeds: FeedPool | None = None) -> tuple:
        """(training rows or None for all, validation feed, its description) of a fit of this head on ``split``:
        ``val_split``, the cache's validation split, or the seeded slice of ``split`` (``val_fraction``,
        ``val_seed``), read as :meth:`make_feed` reads (``tasks``, ``layer_names``, ``source``, from ``feeds``).

        What :meth:`fit` validates on, and what an ensemble of fitted heads is scored on.
        """
        if val_split is None:
            val_split = cache.validation_split(exclude=split)
        if val_split is None:
            slice_seed = self.seed if self.val_seed is None else self.val_seed
            train_rows, val_rows = validation_slice(cache, split, tasks, self.val_fraction, slice_seed)
            val_desc = f"{split} (seeded stratified {self.val_fraction:.0%} slice, seed {slice_seed})"
            val_feed = self.make_feed(cache, split, tasks, layer_names, source, rows=val_rows, pool=feeds)
            return train_rows, val_feed, val_desc
        cache.require_split(val_split)
        check_split_stats(cache, val_split, layer_names)
        return None, self.make_feed(cache, val_split, tasks, layer_names, source, pool=feeds), val_split

    def _train_config(self, lr: float) -> TrainConfig:
        return TrainConfig(epochs=self.epochs, batch_size=self.batch_size, lr=self.lr or lr,
                           weight_decay=self.weight_decay, schedule=self.schedule, warmup=self.warmup,
                           patience=self.patience, max_grad_norm=self.max_grad_norm, seed=self.seed).check()

    def _resolve_tasks(self, cache: LayerCache) -> list[LabelTask]:
        return resolve_tasks(cache, self.tasks)

    def make_feed(self, cache: LayerCache, split: str, tasks: list[LabelTask], layer_names: list[str], source: str,
                  *, rows=None, batch_size: int | None = None, pool: FeedPool | None = None) -> Feed:
        """The feed of ``split`` this head reads: every fit, validation, prediction and score asks for one here.

        ``tasks``: the labels to attach; ``layer_names``: the states, in order; ``source``: the
        resolved ``tokens`` or ``pooled:<mode>``; ``rows``: the split's rows to serve (None: all);
        ``batch_size``: default :attr:`batch_size`; ``pool``: a
        :class:`~layercache.store.feed_pool.FeedPool` of ``cache`` to take the feed from. By default
        a :class:`~layercache.store.cache_feed.CacheFeed` of ``cache``; override it to train and score
        on any other :class:`~layercache.store.feed.Feed` with the same rows and layout.
        """
        names, size = [t.name for t in tasks], batch_size or self.batch_size
        if pool is not None:
            return pool.feed(split, tasks=names, rows=rows, layers=layer_names, source=source, batch_size=size)
        return CacheFeed(cache, split, tasks=names, rows=rows, layers=layer_names, source=source, batch_size=size)

    # --- ensembles (:mod:`.ensembles.members`) --------------------------------------------------
    @classmethod
    @computes
    def from_seeds(cls, members: list["LayerHead"], cache: LayerCache, split: str = "train",
                   val_split: str | None = None, *, feeds: FeedPool | None = None) -> "LayerHead":
        """One head that predicts with the average of ``members``, heads that differ only in their seed (fitted on
        ``cache``'s ``split`` and ``val_split`` with the same settings): :func:`~.ensembles.members.seed_ensemble`."""
        return seed_ensemble(cls, members, cache, split, val_split, feeds=feeds)

    @classmethod
    @computes
    def from_members(cls, members: list["LayerHead"], cache: LayerCache, split: str = "train",
                     val_split: str | None = None, *, feeds: FeedPool | None = None,
                     labels: list[str] | None = None) -> "LayerHead":
        """One head that predicts with the average of ``members``, any heads fitted on ``cache`` for the same tasks
        from the same states and validated alike (``labels`` name them): :func:`~.ensembles.members.member_ensemble`."""
        return member_ensemble(cls, members, cache, split, val_split, feeds=feeds, labels=labels)

    def fitted_state(self) -> FittedHead:
        """What fitting left in this head (its attributes ending in ``_``) as one
        :class:`~.ensembles.members.FittedHead`, what an ensemble reads of its members; a loaded head has no history,
        validation pass or warnings (None)."""
        self.check_fitted()
        return FittedHead(model=self.model_, tasks=self.tasks_, layer_names=self.layer_names_, source=self.source_,
                          normalize=self.normalize_, cache=self.cache_info_, data=self.data_, fit=self.fit_,
                          selection=self.selection_, train_config=self.train_config_,
                          history=getattr(self, "history_", None),
                          validation_pass=getattr(self, "validation_pass_", None),
                          validation_metrics=getattr(self, "validation_metrics_", None),
                          warnings=getattr(self, "warnings_", None), checkpoints=getattr(self, "checkpoints_", []),
                          projection=getattr(self, "projection_", None))

    def set_fitted_state(self, state: FittedHead) -> None:
        """Make this the fitted head ``state`` describes (an ensemble composes its own); the settings stay."""
        self.model_, self.tasks_, self.layer_names_ = state.model, state.tasks, state.layer_names
        self.source_, self.normalize_, self.cache_info_ = state.source, state.normalize, state.cache
        self.data_, self.fit_ = state.data, state.fit
        self.selection_, self.train_config_, self.history_ = state.selection, state.train_config, state.history
        self.validation_pass_, self.validation_metrics_ = state.validation_pass, state.validation_metrics
        self.warnings_, self.checkpoints_, self.projection_ = state.warnings, state.checkpoints, state.projection

    # --- using a fitted head ------------------------------------------------------------
    def check_fitted(self) -> None:
        """Refuse a head that is neither fitted nor loaded, in one sentence."""
        if not hasattr(self, "model_"):
            raise ConfigError("This head is not trained yet; call fit(cache) or LayerHead.load(run) first.")

    @computes
    def predict(self, cache: LayerCache, split: str) -> PassResult:
        """Predictions of every task over ``split`` (row order), plus the mixers' usage."""
        feed = self._scoring_feed(cache, split)  # first: it refuses an unfitted head in one sentence
        return predict(self.model_, feed)

    @computes
    def score(self, cache: LayerCache, split: str) -> dict[str, dict]:
        """Metrics of every task on ``split`` (which must carry the labels)."""
        return self.evaluate(cache, split)[0]

    @computes
    def evaluate(self, cache: LayerCache, split: str) -> tuple[dict[str, dict], PassResult]:
        """Metrics and predictions of every task on ``split``."""
        feed = self._scoring_feed(cache, split)
        return evaluate(self.model_, feed)

    def _scoring_feed(self, cache: LayerCache, split: str) -> Feed:
        """The feed a trained head scores ``split`` through, once the head, the cache and the split are checked."""
        self.check_fitted()
        self.check_cache(cache)
        cache.require_split(split)
        check_split_stats(cache, split, self.layer_names_)
        return self.make_feed(cache, split, self.tasks_, self.layer_names_, self.source_, batch_size=SCORING_BATCH)

    def layer_weights(self) -> dict[str, list[float] | None]:
        """Each mixer's weight per state (after the last evaluation pass for input-dependent mixers)."""
        self.check_fitted()
        return self.model_.layer_weights()

    # --- compatibility ----------------------------------------------------------------------
    def check_cache(self, cache: LayerCache) -> None:
        """Refuse a cache this head cannot read correctly, naming what differs."""
        self.check_fitted()
        check_cache_matches(cache, self.cache_info_, self.layer_names_, self.source_, self.model_.mean_skip_first,
                            self.tasks_)

    def check_backbone(self, backbone) -> None:
        """Refuse a live backbone other than the one whose states trained this head."""
        self.check_fitted()
        check_backbone_matches(backbone, self.cache_info_)

    # --- persistence ------------------------------------------------------------------------
    def run_config(self) -> RunConfig:
        """This head's ``config.json`` as its typed section, stamped now: what :meth:`save` writes."""
        self.check_fitted()
        return RunConfig(layercache_version=__version__, created_at=utc_now(), params=jsonable(self.get_params()),
                         model=self.model_.get_config(), layer_names=self.layer_names_, source=self.source_,
                         cache=self.cache_info_, data=self.data_, train=jsonable(vars(self.train_config_)),
                         selection=self.selection_.to_json(), fit=self.fit_)

    def saved_tensors(self) -> dict[str, torch.Tensor]:
        """What ``weights.safetensors`` holds: the model's weights, and a projected head's basis beside them (a live
        head projects with it)."""
        self.check_fitted()
        state = {k: v.detach().cpu().contiguous() for k, v in self.model_.state_dict().items()}
        if getattr(self, "projection_", None) is not None:
            state[PROJECTION_MEAN] = self.projection_.mean.contiguous()
            state[PROJECTION_BASIS] = self.projection_.basis.contiguous()
        return state

    def save(self, path, **extra_json) -> Path:
        """Write ``config.json`` (:meth:`run_config`) and ``weights.safetensors`` (:meth:`saved_tensors`), plus
        ``extra_json`` files, as the run folder ``path`` (a folder written whole, or a staged
        :class:`~.run_folders.run_folder.StagedRun`; :func:`~.run_folders.persistence.write_run`)."""
        return write_run(path, self.saved_tensors(), self.run_config(), extra_json)

    @classmethod
    def load(cls, path: str | Path) -> "LayerHead":
        """Rebuild a saved head: identical predictions to the one that was saved.

        A damaged run folder (a config.json that is not a JSON object or lacks a setting, settings of
        the wrong type, weights that are truncated, lack a tensor or do not fit the sizes the config
        describes) is refused with a :class:`ConfigError` naming the file. Nothing in config.json is
        used as a path: ``data.cache`` only records where the training cache was.
        """
        config_file, weights_file = run_files(Path(path))
        config = read_run_config(config_file)
        try:
            head = cls(**config.params)
            head.model_ = model_from_config(config.model)
            head.train_config_ = TrainConfig(**config.train)
            # A run saved before selection metrics existed selected on each task's default.
            head.selection_ = (Selection.from_json(config.selection) if config.selection is not None
                               else default_selection(head.model_.tasks, head.model_.loss_weights))
        except (LayercacheError, KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError) as err:
            raise damaged(config_file, f"its settings do not build a head: {error_detail(err)}") from None
        names, width = config.layer_names, config.cache.hidden_size
        if len(names) != head.model_.n_states or width != head.model_.dim:
            raise damaged(config_file, f"it names {len(names)} states of width {width} but its model reads "
                                       f"{head.model_.n_states} of width {head.model_.dim}")
        weights = read_weights(weights_file)
        mean, basis = weights.pop(PROJECTION_MEAN, None), weights.pop(PROJECTION_BASIS, None)
        if (basis is None) != (not config.cache.projection) or (
                basis is not None and (mean is None or tuple(basis.shape) != (len(names), width, basis.shape[2]))):
            raise damaged(weights_file, "its projection basis does not match the projected cache its config names")
        head.projection_ = None if basis is None else Projection(mean.float(), basis.float(),
                                                                 torch.ones(len(names), dtype=torch.float64))
        load_weights(head.model_, weights, weights_file)
        head.model_.eval()
        head.tasks_ = list(head.model_.tasks)
        head.layer_names_ = names
        head.source_ = config.source
        head.normalize_ = head.model_.normalize
        head.cache_info_ = config.cache
        head.data_ = config.training_data
        head.fit_ = config.fitted_by  # runs saved before the convex fit trained by AdamW: {"solver": "adamw"}
        return head

