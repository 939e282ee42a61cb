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

The states are normalised before mixing as ``normalize`` says (:mod:`.normalize`): by default
standardised with the training split's statistics on a pre-LN cache (raw residual streams) and
left alone on a post-LN one. The statistics are saved with the weights.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from sklearn.base import BaseEstimator

from ..core.files import write_text_atomic
from ..core.devices import resolve_device
from ..core.version import __version__
from ..errors import CacheMismatchError, ConfigError, LayercacheError
from ..core.tasks import LabelTask
from ..store.manifest import utc_now
from ..store.reader import LayerCache
from .attention import SelfAttention
from .evaluation import PassResult, evaluate, predict
from .feed import CacheFeed
from .finite import REEXTRACT, NonFiniteStatesError, check_split_stats
from .model import HeadModel
from .normalize import resolve_normalize
from .tasks import SequenceHead
from .trainer import TrainConfig, TrainHistory, seed_everything, train_model

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "weights.safetensors"
VALIDATION_NAMES = ("validation", "valid", "dev", "val")
#: Mixers that read one pooled vector exactly as they would read every token (the rest need tokens).
POOLED_MIXERS = "last, layer:<i>, or scalar without layer_norm, with a mean-pooling head"

log = logging.getLogger(__name__)


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
            :func:`needs_tokens`); an explicit ``pooled:<mode>`` runs it on one vector per example, with
            a warning that is also kept in the run's ``data.source_note``.
        mixer_options, head_options, share_mixer: see :class:`HeadModel`.
        normalize: input normalisation of the states before mixing: ``standardize`` (per state and
            dimension, with the training split's statistics), ``layer_norm`` (per token, needs token
            states), ``none``, or ``auto``: ``standardize`` when the cache comes from a pre-LN model
            (its manifest's ``final_norm`` is not ``none``: GPT-2, Llama, T5), else ``none``.
        epochs, batch_size, lr, weight_decay, schedule, warmup, patience, max_grad_norm, seed: see
            :class:`TrainConfig`. ``lr=None`` picks 1e-3 for heads with attention or a projection
            (``adaptive``) and 1e-2 for linear heads, which learn too slowly at 1e-3.
        val_fraction: size of the seeded stratified validation slice of the training split, used
            when no validation split is given.
        device: ``cpu``, ``cuda`` or ``auto``.
        progress: show a progress bar while training.
    """

    def __init__(self, mixer: str = "adaptive", *, tasks=None, layers=None, source: str = "auto",
                 mixer_options=None, head_options=None, share_mixer: bool = True, loss_weights=None,
                 normalize: str = "auto",
                 epochs: int = 20, batch_size: int = 32, lr: float | None = None, weight_decay: float = 0.01,
                 schedule: str = "linear", warmup: float = 0.06, patience: int = 3, max_grad_norm: float = 1.0,
                 seed: int = 0, val_fraction: float = 0.1, device: str = "auto", progress: bool = True) -> None:
        self.mixer = mixer
        self.tasks = tasks
        self.layers = layers
        self.source = source
        self.mixer_options = mixer_options
        self.head_options = head_options
        self.share_mixer = share_mixer
        self.loss_weights = loss_weights
        self.normalize = normalize
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.schedule = schedule
        self.warmup = warmup
        self.patience = patience
        self.max_grad_norm = max_grad_norm
        self.seed = seed
        self.val_fraction = val_fraction
        self.device = device
        self.progress = progress

    # --- fitting ------------------------------------------------------------------------
    def fit(self, cache: LayerCache, split: str = "train", val_split: str | None = None) -> "LayerHead":
        """Train on ``split``; validate on ``val_split``, the cache's validation split, or a slice of train."""
        device = resolve_device(self.device)
        tasks = self._resolve_tasks(cache)
        index = cache.layer_index(self.layers)
        layer_names = [cache.layer_names[i] for i in index]
        normalize = resolve_normalize(self.normalize, cache.manifest.model.get("final_norm"))
        # Build the model up front: a bad spec or option fails before any data is read, and the
        # model decides whether pooled vectors can stand in for token states.
        seed_everything(self.seed)
        model = HeadModel(len(layer_names), cache.hidden_size, tasks, mixer=self.mixer,
                          mixer_options=self.mixer_options, head_options=self.head_options,
                          share_mixer=self.share_mixer, loss_weights=self.loss_weights, normalize=normalize,
                          mean_skip_first=cache_mean_skip_first(cache))
        source = resolve_source(cache, self.source, tasks, model)
        note = pooled_note(model, source)
        if note is not None:
            log.warning(note)
        _check_split(cache, split)
        check_split_stats(cache, split, layer_names)
        if normalize == "standardize":
            # Exact per-dimension statistics over every real token of the split, from the shards'
            # sums: no pass over the states.
            stats = cache.layer_stats(split)
            mean, std = stats["mean"][index], stats["std"][index]  # (S, D) each
            bad = np.nonzero(~(np.isfinite(mean) & np.isfinite(std)).all(axis=1))[0]
            if len(bad):  # damaged shard sums: standardising with them would turn every state into NaN
                raise NonFiniteStatesError(
                    f"The cache's per-dimension statistics of split {split!r} are not finite for state "
                    f"{layer_names[bad[0]]}, so its states cannot be standardised; {REEXTRACT}, or pass "
                    "--normalize none.")
            model.set_state_stats(mean, std)
        train_rows = None
        if val_split is None:
            val_split = find_validation_split(cache, exclude=split)
        if val_split is None:
            train_rows, val_rows = validation_slice(cache, split, tasks, self.val_fraction, self.seed)
            val_desc = f"{split} (seeded stratified {self.val_fraction:.0%} slice, seed {self.seed})"
            val_feed = self._feed(cache, split, tasks, layer_names, source, rows=val_rows)
        else:
            _check_split(cache, val_split)
            check_split_stats(cache, val_split, layer_names)
            val_desc = val_split
            val_feed = self._feed(cache, val_split, tasks, layer_names, source)
        train_feed = self._feed(cache, split, tasks, layer_names, source, rows=train_rows)
        self.train_config_ = self._train_config(default_lr(model))
        for t in tasks:
            if t.kind == "regression":
                gold = train_feed.gold(t.name)
                model.set_target_stats(t.name, np.asarray(gold, dtype=np.float64))
        self.history_: TrainHistory = train_model(model, train_feed, val_feed, self.train_config_, device=device,
                                                  progress=self.progress)
        # Score the kept (best) epoch once more: the numbers a run reports, and the usage pass
        # behind input-dependent mixers' layer weights.
        self.validation_metrics_, self.validation_pass_ = evaluate(model, val_feed, device)
        self.model_ = model.cpu().eval()
        self.tasks_ = tasks
        self.layer_names_ = layer_names
        self.source_ = source
        self.normalize_ = normalize
        self.cache_info_ = cache_identity(cache)
        self.data_ = {"cache": str(cache.path), "train_split": split, "validation": val_desc,
                      "n_train": train_feed.n_examples, "n_validation": val_feed.n_examples,
                      "normalize": normalize, "mean_skip_first": model.mean_skip_first}
        if note is not None:
            self.data_["source_note"] = note
        return self

    def _train_config(self, lr: float) -> TrainConfig:
        return TrainConfig(epochs=self.epochs, batch_size=self.batch_size, lr=self.lr or lr,
                           weight_decay=self.weight_decay, schedule=self.schedule, warmup=self.warmup,
                           patience=self.patience, max_grad_norm=self.max_grad_norm, seed=self.seed).check()

    def _resolve_tasks(self, cache: LayerCache) -> list[LabelTask]:
        if not cache.tasks:
            raise ConfigError(f"The cache {cache.path} has no labels to learn from; extract a labelled dataset "
                              "(or give --label-column at extraction).")
        names = [self.tasks] if isinstance(self.tasks, str) else self.tasks
        if names is None:
            return list(cache.tasks)
        known = {t.name: t for t in cache.tasks}
        missing = [n for n in names if n not in known]
        if missing:
            raise ConfigError(f"The cache has no task {missing[0]!r}; its tasks are: {', '.join(known)}.")
        return [known[n] for n in names]

    def _feed(self, cache, split, tasks, layer_names, source, rows=None, batch_size=None) -> CacheFeed:
        return CacheFeed(cache, split, tasks=[t.name for t in tasks], rows=rows, layers=layer_names,
                         source=source, batch_size=batch_size or self.batch_size)

    # --- using a fitted head ------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "model_"):
            raise ConfigError("This head is not trained yet; call fit(cache) or LayerHead.load(run) first.")

    def predict(self, cache: LayerCache, split: str) -> PassResult:
        """Predictions of every task over ``split`` (row order), plus the mixers' usage."""
        self._check_fitted()
        self.check_cache(cache)
        _check_split(cache, split)
        check_split_stats(cache, split, self.layer_names_)
        feed = self._feed(cache, split, self.tasks_, self.layer_names_, self.source_, batch_size=128)
        return predict(self.model_, feed)

    def score(self, cache: LayerCache, split: str) -> dict[str, dict]:
        """Metrics of every task on ``split`` (which must carry the labels)."""
        return self.evaluate(cache, split)[0]

    def evaluate(self, cache: LayerCache, split: str) -> tuple[dict[str, dict], PassResult]:
        """Metrics and predictions of every task on ``split``."""
        self._check_fitted()
        self.check_cache(cache)
        _check_split(cache, split)
        check_split_stats(cache, split, self.layer_names_)
        feed = self._feed(cache, split, self.tasks_, self.layer_names_, self.source_, batch_size=128)
        return evaluate(self.model_, feed)

    def layer_weights(self) -> dict[str, list[float] | None]:
        """Each mixer's weight per state (after the last evaluation pass for input-dependent mixers)."""
        self._check_fitted()
        return self.model_.layer_weights()

    # --- compatibility ----------------------------------------------------------------------
    def check_cache(self, cache: LayerCache) -> None:
        """Refuse a cache this head cannot read correctly, naming what differs."""
        self._check_fitted()
        mine, theirs = self.cache_info_, cache_identity(cache)
        what = {"model_fingerprint": "backbone weights", "tokenizer_fingerprint": "tokenizer",
                "hidden_size": "hidden size"}
        for key, label in what.items():
            if mine[key] != theirs[key]:
                raise CacheMismatchError(
                    f"The cache {cache.path} was extracted with a different {label} ({theirs['model']!r}, "
                    f"{key} {_short_digest(theirs[key])}) than this head was trained on ({mine['model']!r}, "
                    f"{_short_digest(mine[key])}); extract the data with the head's backbone.")
        missing = [n for n in self.layer_names_ if n not in cache.layer_names]
        if missing:
            raise CacheMismatchError(f"The cache {cache.path} lacks the state(s) {', '.join(missing)} this head "
                                     "reads; re-extract without --layers (or with those layers).")
        if self.source_ == "pooled:mean" and cache_mean_skip_first(cache) != self.model_.mean_skip_first:
            # The model's own mean pooling follows its training cache; the pooled vectors read here would not.
            how = {True: "without each example's first token", False: "over every token"}
            raise CacheMismatchError(
                f"The cache {cache.path} holds means {how[cache_mean_skip_first(cache)]} but this head was trained "
                f"on means {how[self.model_.mean_skip_first]}; score it on a cache extracted the same way, or train "
                "it with --source tokens.")
        known = {t.name: t for t in cache.tasks}
        for t in self.tasks_:
            other = known.get(t.name)
            if other is not None and (other.kind != t.kind or other.label_names != t.label_names):
                raise CacheMismatchError(
                    f"Task {t.name!r} in the cache has labels {other.label_names} ({other.kind}) but the head "
                    f"predicts {t.label_names} ({t.kind}); class ids would not line up.")

    def check_backbone(self, backbone) -> None:
        """Refuse a live backbone other than the one whose states trained this head."""
        self._check_fitted()
        for key, value, label in (("model_fingerprint", backbone.fingerprint, "weights"),
                                  ("tokenizer_fingerprint", backbone.tokenizer_fingerprint, "tokenizer")):
            if self.cache_info_[key] != value:
                raise CacheMismatchError(
                    f"The backbone {backbone.name!r} has different {label} than the one this head was trained on "
                    f"({self.cache_info_['model']!r}); load that backbone.")

    # --- persistence ------------------------------------------------------------------------
    def save(self, path: str | Path, **extra_json) -> Path:
        """Write ``config.json`` and ``weights.safetensors`` (plus ``extra_json`` files) into ``path``."""
        self._check_fitted()
        path = Path(path)
        state = {k: v.detach().cpu().contiguous() for k, v in self.model_.state_dict().items()}
        config = {
            "layercache_version": __version__, "created_at": utc_now(),
            "params": _jsonable(self.get_params()), "model": self.model_.get_config(),
            "layer_names": self.layer_names_, "source": self.source_, "cache": self.cache_info_,
            "data": self.data_, "train": _jsonable(vars(self.train_config_)),
        }
        try:
            path.mkdir(parents=True, exist_ok=True)
            save_file(state, str(path / WEIGHTS_FILE))
            _write_json(path / CONFIG_FILE, config)
            for name, payload in extra_json.items():
                _write_json(path / f"{name}.json", payload)
        except (NotADirectoryError, FileExistsError):
            raise ConfigError(f"The run folder {path} cannot be created: a file stands on its path; give a folder "
                              "path for the run.") from None
        except (OSError, SafetensorError) as err:  # read-only disk, permissions, full disk (safetensors: its own type)
            why = err.strerror if isinstance(err, OSError) and err.strerror else _detail(err)
            raise ConfigError(f"The run folder {path} cannot be written ({why}); choose another folder for the "
                              "run.") from None
        return path

    @classmethod
    def load(cls, path: str | Path) -> "LayerHead":
        """Rebuild a saved head: identical predictions to the one that was saved.

        A damaged run folder (a config.json that is not a JSON object or lacks a setting, settings of
        the wrong type, weights that are truncated, lack a tensor or do not fit the sizes the config
        describes) is refused with a :class:`ConfigError` naming the file. Nothing in config.json is
        used as a path: ``data.cache`` only records where the training cache was.
        """
        path = Path(path)
        config_file, weights_file = path / CONFIG_FILE, path / WEIGHTS_FILE
        if not config_file.is_file() or not weights_file.is_file():
            raise ConfigError(f"{path} is not a layercache run folder (it needs {CONFIG_FILE} and "
                              f"{WEIGHTS_FILE}); pass the folder `layercache train-head` wrote.")
        config = read_run_config(config_file)
        try:
            head = cls(**config["params"])
            head.model_ = HeadModel.from_config(config["model"])
            head.train_config_ = TrainConfig(**config["train"])
        except (LayercacheError, KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError) as err:
            raise _damaged(config_file, f"its settings do not build a head: {_detail(err)}") from None
        if len(config["layer_names"]) != head.model_.n_states or config["cache"]["hidden_size"] != head.model_.dim:
            raise _damaged(config_file, f"it names {len(config['layer_names'])} states of width "
                                        f"{config['cache']['hidden_size']} but its model reads {head.model_.n_states} "
                                        f"of width {head.model_.dim}")
        try:
            state = load_file(str(weights_file))
        except (SafetensorError, OSError, ValueError, RuntimeError) as err:
            raise ConfigError(f"The weights file {weights_file} cannot be read ({_detail(err)}); it is truncated "
                              "or damaged: restore it or train the head again.") from None
        try:
            head.model_.load_state_dict(state)
        except RuntimeError as err:  # a size mismatch, a missing or an unexpected tensor
            raise ConfigError(f"The weights in {weights_file} do not fit the model its {CONFIG_FILE} describes "
                              f"({_detail(err)}); one of the two files is damaged: restore them or train the "
                              "head again.") from None
        head.model_.eval()
        head.tasks_ = list(head.model_.tasks)
        head.layer_names_ = list(config["layer_names"])
        head.source_ = config["source"]
        head.normalize_ = head.model_.normalize
        head.cache_info_ = config["cache"]
        head.data_ = config.get("data", {})
        return head


def read_run_config(config_file: Path) -> dict:
    """A run's config.json, checked for the keys and types :meth:`LayerHead.load` relies on."""
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as err:  # unreadable, not UTF-8, not JSON
        raise _damaged(config_file, f"it is not readable JSON: {_detail(err)}") from None
    if not isinstance(config, dict):
        raise _damaged(config_file, f"it holds a JSON {type(config).__name__}, not an object")
    expected = {"params": dict, "model": dict, "layer_names": list, "source": str, "cache": dict, "train": dict}
    for key, kind in expected.items():
        if key not in config:
            raise _damaged(config_file, f"it lacks the setting {key!r}")
        if not isinstance(config[key], kind):
            raise _damaged(config_file, f"its setting {key!r} is a {type(config[key]).__name__}, "
                                        f"not a {kind.__name__}")
    if not all(isinstance(n, str) for n in config["layer_names"]):
        raise _damaged(config_file, "its 'layer_names' are not all strings")
    if config["source"] != "tokens" and not config["source"].startswith("pooled:"):
        raise _damaged(config_file, f"its 'source' {config['source']!r} is neither tokens nor pooled:<mode>")
    for key in ("model", "model_fingerprint", "tokenizer_fingerprint", "hidden_size"):
        if key not in config["cache"]:
            raise _damaged(config_file, f"its 'cache' lacks {key!r}")
    if not isinstance(config["cache"]["hidden_size"], int) or isinstance(config["cache"]["hidden_size"], bool):
        raise _damaged(config_file, "its 'cache.hidden_size' is not an integer")
    if not isinstance(config.get("data", {}), dict):
        raise _damaged(config_file, "its 'data' is not an object")
    return config


def _detail(err: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message, without its final full stop, cut to ``limit`` characters.

    torch's load_state_dict message starts with a header line; the line after it names the tensor.
    """
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("Error(s) in loading state_dict"):
        lines = lines[1:]
    text = (lines[0] if lines else type(err).__name__).rstrip(".")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _damaged(config_file: Path, why: str) -> ConfigError:
    return ConfigError(f"The run config {config_file} cannot be used ({why}); it is damaged or from another "
                       "layercache version: restore it or train the head again.")


# --- helpers ------------------------------------------------------------------------------------
def _short_digest(value) -> str:
    """``xxh3_128-files:0123456789ab…`` -> ``0123456789ab``: the part of a fingerprint that tells two apart."""
    return str(value).rpartition(":")[2][:12]


def default_lr(model: HeadModel) -> float:
    """1e-3 for heads with attention, encoder layers or learned projections; 1e-2 for linear ones."""
    deep = any(isinstance(m, SelfAttention) for m in model.modules())
    return 1e-3 if deep or model.mixer_spec == "adaptive" else 1e-2


def pooled_equivalent(model: HeadModel) -> bool:
    """Whether ``model`` gives the same outputs on mean-pooled vectors as on all token states.

    True when every mixer is one linear map at every token (``last``, ``layer:<i>``, ``scalar``
    without layer norm) and every head is a sequence head that mean-pools before anything else:
    the mean then commutes with the mixer, and a ``(B, 1, S, D)`` batch replaces ``(B, T, S, D)``.
    The input normalisation must commute too: ``standardize`` is one affine map per dimension whose
    weights (the mean's) sum to 1, so it does; a per-token ``layer_norm`` does not. With
    ``mean_skip_first`` the model's mean pooling leaves out the first token as the cache's does.
    """
    return (model.normalize != "layer_norm"
            and all(m.commutes_with_token_mean() for m in model.mixers.values())
            and all(isinstance(h, SequenceHead) and h.pooling == "mean" and h.attention is None
                    for h in model.heads.values()))


def needs_tokens(model: HeadModel) -> str | None:
    """What in ``model`` needs token states, as the subject of a sentence, or None.

    Everything that :func:`pooled_equivalent` does not accept: a mixer that is not the same linear
    map at every token (``adaptive``, ``attention``, ``gumbel``, ``act``, ``scalar`` with layer
    norm), a token head, or a sequence head that attends over tokens or pools other than by mean.
    On one pooled vector per example such a model still runs, but it is not the model asked for.
    """
    if model.normalize == "layer_norm":
        return "The input normalisation layer_norm (per token; --normalize standardize is not)"
    for mixer in model.mixers.values():
        if not mixer.commutes_with_token_mean():
            return f"The mixer {model.mixer_spec!r}"
    for name, head in model.heads.items():
        if not isinstance(head, SequenceHead):
            return f"The token head of task {name!r}"
        if head.attention is not None:
            return f"The head of task {name!r} (self-attention over tokens, attention_heads)"
        if head.pooling != "mean":
            return f"The head option pooling={head.pooling} (task {name!r})"
    return None


def pooled_note(model: HeadModel, source: str) -> str | None:
    """A warning when ``source`` feeds pooled vectors to a model that is meant to read every token."""
    if not source.startswith("pooled:"):
        return None
    need = needs_tokens(model)
    if need is None:
        return None
    return (f"{need} runs on one pooled vector per example (--source {source}), not on token states: "
            "whatever it learns across tokens is degenerate here.")


def resolve_source(cache: LayerCache, source: str, tasks: list[LabelTask], model: HeadModel | None = None) -> str:
    """``auto`` -> the cache's mean-pooled vectors when ``model`` cannot tell them from token states
    (far fewer bytes per epoch), else token states when stored, else the first pooled mode when
    ``model`` does not need token states. Refuse what cannot work, or would silently train another
    model than the one asked for."""
    token_tasks = [t.name for t in tasks if t.kind == "token"]
    if source == "auto":
        if model is not None and "mean" in cache.manifest.pooling and pooled_equivalent(model):
            return "pooled:mean"
        if cache.stores_tokens:
            return "tokens"
        if token_tasks:
            raise ConfigError(f"Token task {token_tasks[0]!r} needs token states, but the cache holds pooled "
                              "vectors only; re-extract with --store tokens.")
        mode = cache.manifest.pooling[0]
        need = None if model is None else needs_tokens(model)
        if need is not None:
            # Falling back to pooled vectors would silently train another model than the one asked
            # for (attention over one vector, a per-token depth with one token); only on request.
            raise ConfigError(f"{need} needs token states but the cache holds pooled vectors only; re-extract "
                              f"with --store tokens, use a mixer that works on pooled vectors ({POOLED_MIXERS}), "
                              f"or pass --source pooled:{mode} to run it on one pooled vector per example.")
        return f"pooled:{mode}"
    if source == "tokens" and not cache.stores_tokens:
        raise ConfigError("The cache holds pooled vectors only; use --source pooled:<mode> or re-extract "
                          "with --store tokens.")
    if source.startswith("pooled:") and token_tasks:
        raise ConfigError(f"Token task {token_tasks[0]!r} cannot be learned from pooled vectors; use --source tokens.")
    return source


def find_validation_split(cache: LayerCache, exclude: str) -> str | None:
    for name in VALIDATION_NAMES:
        if name in cache.splits and name != exclude:
            return name
    return None


def _check_split(cache: LayerCache, split: str) -> None:
    if split not in cache.splits:
        raise ConfigError(f"The cache has no split {split!r}; its splits are: {', '.join(cache.splits)}.")


def validation_slice(cache: LayerCache, split: str, tasks: list[LabelTask], fraction: float,
                     seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, validation rows): a seeded slice of ``split``, stratified by the first class task."""
    if not 0 < fraction < 1:
        raise ConfigError(f"val_fraction must be in (0, 1), got {fraction}.")
    n = cache.num_examples(split)
    if n < 2:
        raise ConfigError(f"Split {split!r} has {n} example(s): too few to hold out a validation slice; "
                          "give a validation split.")
    rng = np.random.default_rng(seed)
    strata = next((t for t in tasks if t.kind == "sequence"), None)
    labels = cache.labels(split, strata.name) if strata is not None else np.zeros(n, dtype=np.int64)
    val = []
    for value in np.unique(labels):
        members = rng.permutation(np.nonzero(labels == value)[0])
        val.append(members[: int(round(fraction * len(members)))])
    val = np.sort(np.concatenate(val))
    if len(val) == 0:
        val = np.sort(rng.choice(n, size=1, replace=False))
    train = np.setdiff1d(np.arange(n), val)
    return train, val


def cache_mean_skip_first(cache: LayerCache) -> bool:
    """Whether the cache's pooled means leave out each example's first token (older caches: no)."""
    return bool(cache.manifest.storage.get("mean_skip_first", False))


def cache_identity(cache: LayerCache) -> dict:
    """What a head must agree with: backbone and tokenizer fingerprints, width, states, dataset."""
    m = cache.manifest
    return {"model": m.model.get("name"), "model_fingerprint": m.model.get("fingerprint"),
            "tokenizer_fingerprint": m.tokenizer.get("fingerprint"), "hidden_size": m.hidden_size,
            "final_norm": m.model.get("final_norm"), "dataset": m.dataset.get("name"),
            "layer_names": m.layer_names, "storage_dtype": m.storage.get("dtype"), "config_hash": m.config_hash}


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    return value


def _write_json(path: Path, payload) -> None:
    write_text_atomic(path, json.dumps(_jsonable(payload), indent=2, default=str) + "\n")
