"""A head's run folder end to end: ``train_head`` trains a head on a cache and writes everything about it to one
folder; ``evaluate_run`` scores a saved run and ``read_run`` reads its JSON files (the folder on disk:
:mod:`.run_folders`).

A run folder holds

- ``config.json``: estimator parameters, model config, the states read, and the identity of the
  cache it was trained on (backbone and tokenizer fingerprints, dataset, storage);
- ``weights.safetensors``: the weights (no pickle anywhere);
- ``metrics.json``: validation and test metrics, training history and times, which metric
  selected the epoch (``selection``), how the weights were fitted (``fit``: the solver, and the
  convex fit's ``C`` per task) and any ``warnings`` about the trained head (a collapse onto one
  class);
- ``layer_weights.json`` and ``layer_weights.png``: each mixer's weight per state (and per-token
  depth / per-example usage for ``act`` / ``gumbel``).

The folder is claimed (locked against a second writer) before training and appears complete or not
at all (:mod:`.run_folders.run_folder`): a run that fails or is interrupted leaves nothing behind.

``train_head`` and ``evaluate_run`` are what the ``train-head`` and ``eval`` commands call.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.files import write_file_atomic
from ..core.memory import memory_limit
from ..core.option_names import option
from ..core.option_specs import check_options
from ..core.plotting import pyplot
from ..core.threads import computes
from ..errors import ConfigError
from ..store.reader import TEST_NAMES, LayerCache, using_cache
from .data.finite import check_split_stats
from .estimator import LayerHead
from .head_options import DEFAULT_MIXER, TRAIN_SPLIT, HeadOptions
from .run_folders.persistence import unwritable, write_run
from .run_folders.run_files import LayerWeights, RunFiles, RunMetrics, runs_root
from .run_folders.run_folder import RunFolder, StagedRun, occupying, refuse_occupied
from .scoring.evaluation import PassResult
from .training.checkpoint import CheckpointFolder


@dataclass
class TrainResult:
    """What :func:`train_head` produced: the run folder, the fitted head, and the run's files as written (typed
    sections, as :meth:`RunFiles.read(run) <.run_folders.run_files.RunFiles.read>` reads them back)."""

    run: Path
    head: LayerHead
    files: RunFiles
    """``config.json``, ``metrics.json`` and ``layer_weights.json``: ``files.metrics.validation``,
    ``files.metrics.test`` (None without a test split), ``files.metrics.warnings``, ``files.layer_weights.mixers``
    ..."""

    @property
    def metrics(self) -> dict:
        """``metrics.json`` as a plain dict: ``{"validation": {task: metrics}, "test": {...} or absent, "selection":
        ..., "warnings": [...], ...}`` (:attr:`files` holds it typed)."""
        return self.files.metrics.to_json()

    @property
    def layer_weights(self) -> dict:
        """``layer_weights.json`` as a plain dict: ``{"layer_names", "mixers", "usage"}`` (:attr:`files` holds it
        typed)."""
        return self.files.layer_weights.to_json()


def checkpoints_root(cache_path: str | os.PathLike) -> Path:
    """Where the fits of a cache's heads keep their state between epochs until their run is written
    (``<cache>.runs/.checkpoints``, one file per fit): the same command finds it again, whatever its ``--out``."""
    return runs_root(cache_path) / ".checkpoints"


def claim_run_folder(cache_path: str | os.PathLike, out: str | os.PathLike | None, name: str, overwrite: bool,
                     what: str = "run folder") -> RunFolder:
    """Lock ``out``, or a new ``<cache>.runs/<name>-NNN`` (claimed atomically), for writing a run; use with ``with``."""
    if out is not None:
        return RunFolder.claim(out, overwrite=overwrite, what=what)
    return RunFolder.claim_new(runs_root(cache_path), name.replace(":", ""), what=what)


def check_run_folder(run: Path, overwrite: bool = False) -> None:
    """Refuse a run folder that cannot be written, before any training.

    ``run`` may not exist yet: then its nearest existing ancestor must be a writable folder (not a
    file, as in ``--out notes.txt/run``). An existing ``run`` must be a writable folder, empty
    unless ``overwrite`` (a lock file, or what a killed run left staged, does not count).
    """
    probe = run
    while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        if probe == run:
            raise ConfigError(f"{option('out', run)} is a file; give a folder for the run.")
        raise ConfigError(f"{option('out', run)} lies below {probe}, which is a file, not a folder; give a folder "
                          "path for the run.")
    if not probe.exists():  # a dangling link, or nothing of the path exists at all
        raise ConfigError(f"{option('out', run)} cannot be created ({probe} is a broken link or missing); give another "
                          "folder for the run.")
    if probe == run:
        refuse_occupied(run, "run folder", occupying(run, "run folder"), overwrite)
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"The run folder {run} cannot be written: {probe} is not writable (permissions, or a "
                          f"read-only disk); choose another {option('out')}.")


@computes
def train_head(cache: str | os.PathLike | LayerCache | None = None, mixer: str = DEFAULT_MIXER, *,
               out: str | os.PathLike | None = None, split: str = TRAIN_SPLIT, val_split: str | None = None,
               test_split: str | None = None, overwrite: bool = False,
               estimator: Callable[..., LayerHead] = LayerHead, memory_budget: int | None = None,
               **params) -> TrainResult:
    """Train a head on a cache and write a run folder.

    Args:
        cache: a cache folder or an open :class:`LayerCache` (default: the most recent cache).
        mixer: the layer mixer (see :func:`layercache.heads.make_mixer`).
        out: the run folder (default: a new folder beside the cache).
        split: the training split.
        val_split: the validation split (default: the cache's validation split, or a seeded
            stratified slice of ``split``).
        test_split: a split to report on (default: ``test`` when the cache has one).
        overwrite: allow writing into a non-empty ``out``.
        estimator: builds the head from ``(mixer, **params)``; default :class:`LayerHead`
            (:func:`layercache.live.training.train_head_live` passes one whose feeds run the backbone).
        memory_budget: bytes the feeds may hold (:func:`~layercache.core.memory.memory_budget`; None: half the
            memory available): each feed's blocks and kept slabs are a share of it, and the pages of a memory-mapped
            shard are dropped from the process block by block, so the peak does not grow with the cache. A
            budget under 2 GiB (16 blocks of the 128 MiB cap) cuts smaller blocks, and a shuffled epoch visits
            blocks in a seeded order, so the same seed then trains on another order: other weights, as another
            seed gives, not worse ones.
        **params: :class:`LayerHead` parameters (``epochs``, ``lr``, ``tasks``, ``mixer_options`` ...).
    """
    check_options(HeadOptions, params)  # a setting out of range is refused before the cache is opened
    with memory_limit(memory_budget), using_cache(cache) as handle:
        if out is not None:
            check_run_folder(Path(out), overwrite)  # before training: a bad --out should not cost a training run
        test_name = handle.report_split(test_split, names=TEST_NAMES, exclude=split)
        if test_name is not None:
            read = [handle.layer_names[i] for i in handle.layer_index(params.get("layers"))]
            check_split_stats(handle, test_name, read)  # refuse a damaged test split before training
        head = estimator(mixer, **params)
        # Each epoch's state is saved, so the same command resumes a killed fit; --overwrite starts afresh.
        checkpoints = CheckpointFolder(checkpoints_root(handle.path))
        with claim_run_folder(handle.path, out, mixer, overwrite) as folder:  # locked until written, or removed
            folder.resume_hint = checkpoints.resume_hint  # Ctrl-C says which epoch the same command resumes from
            started = time.perf_counter()
            head.fit(handle, split=split, val_split=val_split, checkpoints=checkpoints, fresh=overwrite)
            train_seconds = time.perf_counter() - started
            test = None if test_name is None else (test_name, *head.evaluate(handle, test_name))
            result = write_trained_run(folder.run(), head, handle, train_seconds=train_seconds, test=test)
            folder.commit()
            checkpoints.remove()
            return result


def write_trained_run(run: str | os.PathLike | StagedRun, head: LayerHead, cache: LayerCache, *,
                      train_seconds: float, test: tuple[str, dict, PassResult] | None = None) -> TrainResult:
    """Write the run folder of a head just fitted on ``cache``: what :func:`train_head` writes.

    ``run`` is a folder (claimed, written and committed here; a run there is replaced) or a
    :class:`~.run_folders.run_folder.StagedRun` whose owner commits it. ``test`` is ``(split, metrics, pass)`` of
    the head scored on a test split, or None. The layer weights' usage summaries come from that pass
    when given, else from the validation pass.
    """
    if not isinstance(run, StagedRun):
        with RunFolder.claim(run, overwrite=True) as folder:
            result = write_trained_run(folder.run(), head, cache, train_seconds=train_seconds, test=test)
            folder.commit()
            return result
    mixer = head.mixer
    test_split, test_metrics, result = (None, None, head.validation_pass_) if test is None else test
    metrics = RunMetrics(mixer=mixer, normalize=head.normalize_, fit=head.fit_, train_seconds=train_seconds,
                         data=head.data_, selection_record=head.selection_.to_json(), warnings=list(head.warnings_),
                         validation=head.validation_metrics_, history=head.history_.to_json(), test_split=test_split,
                         test=test_metrics)
    weights = LayerWeights(layer_names=head.layer_names_, mixer_weights=head.layer_weights(), usage=result.usage)
    config = head.run_config()
    write_run(run, head.saved_tensors(), config, {"metrics": metrics, "layer_weights": weights})
    try:
        plot_layer_weights(weights, run.file("layer_weights.png"), title=f"{mixer} on {cache.manifest.model.name}")
    except OSError as err:
        raise unwritable(run.final, err) from None
    files = RunFiles(run.final, config, metrics, weights, present=("config", "metrics", "layer_weights"))
    return TrainResult(run=run.final, head=head, files=files)


@dataclass(frozen=True)
class RunEvaluation:
    """A saved run scored on a split of a cache (:func:`evaluate_run`)."""

    split: str
    cache: str
    """The cache scored on."""
    metrics: dict[str, dict]
    """task -> metric -> value."""
    usage: dict
    """A mixer's per-example (or per-token) layer usage, by mixer key (empty for mixers without one)."""
    layer_names: list[str]
    layer_weights: dict[str, list[float] | None]
    """mixer key -> its weight per state (``LayerHead.layer_weights``)."""
    primary: dict[str, str]
    """task -> the metric the run selected its epoch on."""

    def weights(self) -> LayerWeights:
        """The layer weights as the run folder's typed section (what ``render_layer_weights`` draws)."""
        return LayerWeights(layer_names=self.layer_names, mixer_weights=self.layer_weights, usage=self.usage)

    def to_json(self) -> dict:
        """The evaluation as JSON data (``layercache eval --json``)."""
        return asdict(self)


@computes
def evaluate_run(run: str | os.PathLike, cache: str | os.PathLike | LayerCache | None = None,
                 split: str = "test") -> RunEvaluation:
    """Score a saved run on a split of a cache (refusing a cache from another backbone)."""
    head = LayerHead.load(run)
    with using_cache(cache) as handle:
        metrics, result = head.evaluate(handle, split)
        return RunEvaluation(split=split, cache=str(handle.path), metrics=metrics, usage=result.usage,
                             layer_names=head.layer_names_, layer_weights=head.layer_weights(),
                             primary=dict(head.selection_.metrics))


def read_run(run: str | os.PathLike) -> dict:
    """The JSON files of a run folder as plain dicts: ``config``, ``metrics`` and ``layer_weights``, each one
    the folder has (:meth:`RunFiles.to_json <.run_files.RunFiles.to_json>` of the typed sections)."""
    return RunFiles.read(run).to_json()


def plot_layer_weights(weights: LayerWeights, path: Path, title: str = "") -> Path:
    """Bar chart of each mixer's weight per state, written atomically as a PNG with the mode of any new file."""
    plt = pyplot()
    names = weights.layer_names or []
    mixers = weights.mixers
    fig, ax = plt.subplots(figsize=(max(4, 0.6 * len(names) + 2), 3))
    width = 0.8 / max(1, len(mixers))
    for i, (key, values) in enumerate(mixers.items()):
        ax.bar([x + i * width for x in range(len(names))], values, width=width, label=key)
    ax.set_xticks([x + width * (len(mixers) - 1) / 2 for x in range(len(names))])
    ax.set_xticklabels(names, rotation=45, ha="right")
    ax.set_ylabel("weight")
    ax.set_title(title)
    if len(mixers) > 1:
        ax.legend()
    fig.tight_layout()
    try:
        write_file_atomic(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    finally:
        plt.close(fig)
    return path
