"""The JSON files of a run folder as typed sections: ``config.json``, ``metrics.json``, ``layer_weights.json``.

The manifest of a cache is read through typed sections (:mod:`layercache.store.sections`); a run
folder's files are read here, the same way, so ``report`` and ``live`` never index them by string
keys::

    files = RunFiles.read(run)             # each file present, refused in one sentence when damaged
    files.metrics.scores()                 # {task: {"metric": ..., "value": ...}} on the scored split
    files.layer_weights.mixers             # {mixer key: weight per state}
    RunConfig.peek(run).cache.matches(m)   # trained on the cache whose manifest is m?

Each file is one section (:class:`~.run_sections.RunSection`): a field per key, in the file's order, written back
by :meth:`~.run_sections.RunSection.to_json` with exactly the keys the file holds, so its one writer
(``LayerHead.save`` for the config, :func:`~..workflow.write_trained_run` for the metrics and layer weights)
builds the section and writes what ``to_json`` gives: the same bytes as ever. A key older runs lack reads as
None and is not written back, so every run folder written before still loads, and reads back as it is. A
file a run does not have reads as an empty section. The objects nested in them are sections too: the cache
(:class:`RecordedCache`), what the head was trained on, how it was fitted and how it chose its epoch
(:mod:`.run_sections`); the estimator's parameters, the model's config, the training settings and the history
stay the objects their own classes read and write (``LayerHead``, ``HeadModel.from_config``, ``TrainConfig``,
``TrainHistory``).
Finding a cache's runs (:func:`find_runs`) and checking which cache a run came from
(:func:`run_belongs_to`) live here too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from ...errors import ConfigError
from ...store.sections import OMIT
from .run_folder import CONFIG_FILE
from .run_sections import FitRecord, RunSection, SelectionRecord, TrainingData, nested

METRICS_FILE = "metrics.json"
LAYER_WEIGHTS_FILE = "layer_weights.json"

REPORTED_METRICS = ("accuracy", "span_f1", "macro_f1", "pearson")
"""The metric a report shows for a task's scores: the first of these the scores hold (classification tasks
report accuracy, regression tasks pearson). A run's selection metric may differ: :attr:`RunMetrics.selection`."""


def load_json(file: Path) -> Any:
    """The JSON ``file`` holds (:class:`OSError` or :class:`ValueError` when it cannot be read or is not JSON): the one
    read of a run's JSON files, under each reader's own refusal (:func:`read_run_json`, :meth:`RunConfig.peek`,
    :func:`~.persistence.read_run_config`)."""
    return json.loads(file.read_text())


def read_run_json(file: Path) -> Any:
    """The JSON in the run file ``file``, refused in one sentence when it is not readable JSON."""
    try:
        return load_json(file)
    except (OSError, ValueError) as err:
        raise ConfigError(f"The run file {file} is not readable JSON ({err}); it is damaged: restore it "
                          "or train the head again.") from None


@dataclass(frozen=True)
class RecordedCache(RunSection):
    """The ``cache`` section of a run's config: the identity of the cache the run was trained on
    (:func:`~.provenance.cache_identity` records it, :func:`~.provenance.check_cache_matches` compares it)."""

    model: str | None = field(default=None, metadata=OMIT)
    """The backbone's name."""
    model_fingerprint: str | None = field(default=None, metadata=OMIT)
    tokenizer_fingerprint: str | None = field(default=None, metadata=OMIT)
    hidden_size: int | None = field(default=None, metadata=OMIT)
    """Width of the states read (K for a cache projected to K dimensions)."""
    final_norm: str | None = field(default=None, metadata=OMIT)
    dataset: str | None = field(default=None, metadata=OMIT)
    layer_names: list[str] | None = field(default=None, metadata=OMIT)
    """Every state the cache holds (the head reads :attr:`RunConfig.layer_names` of them)."""
    storage_dtype: str | None = field(default=None, metadata=OMIT)
    config_hash: str | None = field(default=None, metadata=OMIT)
    max_length: int | None = None
    """The tokenizer's maximum length, recorded with :attr:`stride` since the live bundle
    (:attr:`records_text_settings`)."""
    stride: int | None = None
    """The window stride of long texts (None: truncated)."""
    projection: str | None = field(default=None, metadata=OMIT)
    """The checksum of the projection the states are stored in; None (absent) for states at the model's width."""
    records_text_settings: bool = field(default=False, metadata={"json": False})
    """Whether the run recorded ``max_length`` and ``stride`` (runs since the live bundle): both are written then,
    even when null, and neither otherwise."""

    @classmethod
    def from_json(cls, data: Any) -> "RecordedCache":
        """Read the section (missing keys as None: older runs, or a section edited by hand)."""
        cache = super().from_json(data)
        return replace(cache, records_text_settings=isinstance(data, Mapping) and "max_length" in data)

    def to_json(self) -> dict:
        """The section as the run's config holds it."""
        out = super().to_json()
        if not self.records_text_settings:
            out.pop("max_length")
            out.pop("stride")
        return out

    def matches(self, manifest) -> bool:
        """Whether this is the cache of ``manifest``: the same backbone fingerprint and extraction settings."""
        return self.config_hash == manifest.config_hash and self.model_fingerprint == manifest.model.fingerprint


@dataclass(frozen=True)
class RunConfig(RunSection):
    """A run's ``config.json``: the head's parameters, the states it read and the cache it was trained on.

    Written by :meth:`LayerHead.save <layercache.heads.estimator.LayerHead.save>`; read unchecked by
    :meth:`from_json` and :meth:`peek`, checked for what loading needs by :func:`~.persistence.read_run_config`.
    """

    layercache_version: str | None = field(default=None, metadata=OMIT)
    created_at: str | None = field(default=None, metadata=OMIT)
    params: dict | None = field(default=None, metadata=OMIT)
    """The estimator's parameters (``LayerHead.get_params()``)."""
    model: dict | None = field(default=None, metadata=OMIT)
    """The head model's config (:func:`~..ensembles.model.model_from_config` rebuilds it)."""
    layer_names: list[str] | None = field(default=None, metadata=OMIT)
    """The states the head reads, in order."""
    source: str | None = field(default=None, metadata=OMIT)
    """What the head reads: ``tokens`` or ``pooled:<mode>``."""
    cache: RecordedCache = field(default_factory=RecordedCache, metadata={"section": RecordedCache})
    data: TrainingData | None = nested(TrainingData)
    """What the head was trained on (splits, sizes, normalisation); None for a run that did not record it."""
    train: dict | None = field(default=None, metadata=OMIT)
    """The training settings (:class:`~..training.trainer.TrainConfig`'s fields)."""
    selection: SelectionRecord | None = nested(SelectionRecord)
    """The selection the run chose its epoch by, or None for a run saved before selection metrics existed."""
    fit: FitRecord | None = nested(FitRecord)
    """How the weights were fitted; None for a run saved before the convex fit (:attr:`fitted_by`)."""

    @property
    def mixer(self) -> str | None:
        """The mixer named in the estimator parameters."""
        return self.params.get("mixer") if isinstance(self.params, Mapping) else None

    @property
    def training_data(self) -> dict[str, Any]:
        """:attr:`data` as its JSON object, or an empty object for a run that did not record it: what
        ``LayerHead.load`` sets the head's ``data_`` to."""
        return self.data.to_json() if self.data is not None else {}

    @property
    def fitted_by(self) -> dict[str, Any]:
        """:attr:`fit` as its JSON object; runs saved before the convex fit trained by AdamW (``{"solver": "adamw"}``):
        what ``LayerHead.load`` sets the head's ``fit_`` to."""
        return self.fit.to_json() if self.fit is not None else {"solver": "adamw"}

    @classmethod
    def peek(cls, run: str | os.PathLike) -> "RunConfig | None":
        """The config of the folder ``run``, or None when it has no readable config.json holding an object."""
        try:
            data = load_json(Path(run) / CONFIG_FILE)
        except (OSError, ValueError):
            return None
        return cls.from_json(data) if isinstance(data, Mapping) else None


@dataclass(frozen=True)
class RunMetrics(RunSection):
    """A run's ``metrics.json``: its scores on validation (and a test split), and how it chose its epoch.

    Written by :func:`~..workflow.write_trained_run`.
    """

    json_names: ClassVar[dict[str, str]] = {"selection_record": "selection"}
    mixer: str | None = field(default=None, metadata=OMIT)
    """The mixer the run trained."""
    normalize: str | None = field(default=None, metadata=OMIT)
    """How the states were normalised before mixing."""
    fit: FitRecord | None = nested(FitRecord)
    """How the weights were fitted (the config's ``fit``)."""
    train_seconds: float | None = field(default=None, metadata=OMIT)
    """Wall time of the fit."""
    data: TrainingData | None = nested(TrainingData)
    """What the run trained and validated on: the cache, splits and sizes."""
    selection_record: SelectionRecord | None = nested(SelectionRecord)
    """The selection the run chose its epoch by, as recorded (``selection``: metric, reason, score, weights);
    :attr:`selection` is its metric per task."""
    warnings: list[str] | None = field(default=None, metadata=OMIT)
    """Warnings about the trained head (a collapse onto one class)."""
    validation: dict[str, dict] | None = field(default=None, metadata=OMIT)
    """``{task: metrics}`` on validation."""
    history: dict | None = field(default=None, metadata=OMIT)
    """The training history (:meth:`~..training.trainer.TrainHistory.to_json`)."""
    test_split: str | None = field(default=None, metadata=OMIT)
    """The split the run was tested on, or None."""
    test: dict[str, dict] | None = field(default=None, metadata=OMIT)
    """``{task: metrics}`` on :attr:`test_split`, or None for a run without a test split."""

    @property
    def validated_on(self) -> str | None:
        """The validation data in words: a split, or the seeded slice of the training split."""
        return self.data.validation if self.data is not None else None

    @property
    def scored_on(self) -> str:
        """The split :meth:`scored` holds: the test split, else ``validation``."""
        return self.test_split or "validation"

    def scored(self) -> dict[str, dict]:
        """``{task: metrics}`` on the test split when the run has one, else on validation."""
        return dict(self.test or self.validation or {})

    @property
    def selection(self) -> dict[str, str]:
        """``{task: metric}`` the run selected its epoch on (empty for a run that did not record it)."""
        record = self.selection_record
        return dict(record.metric or {}) if record is not None else {}

    def scores(self) -> dict[str, dict]:
        """``{task: {"metric", "value"}}``: each scored task's reported metric (:data:`REPORTED_METRICS`)."""
        out = {}
        for task, values in self.scored().items():
            metric = reported_metric(values)
            if metric:
                out[task] = {"metric": metric, "value": values[metric]}
        return out


def reported_metric(values: Mapping) -> str | None:
    """The metric a report shows among a task's scores ``values``: the first of :data:`REPORTED_METRICS` present."""
    return next((m for m in REPORTED_METRICS if m in values), None)


@dataclass(frozen=True)
class LayerWeights(RunSection):
    """A run's ``layer_weights.json``: each mixer's weight per state, and per-token or per-example usage.

    Written by :func:`~..workflow.write_trained_run`; what ``train-head`` and ``eval`` print
    (:func:`~layercache.report.heads.render_layer_weights`).
    """

    json_names: ClassVar[dict[str, str]] = {"mixer_weights": "mixers"}
    layer_names: list[str] | None = field(default=None, metadata=OMIT)
    """The states the weights are over."""
    mixer_weights: dict[str, list | None] | None = field(default=None, metadata=OMIT)
    """``{mixer key: weight per state}``, None for a mixer whose weights need an evaluation pass (``mixers``)."""
    usage: dict = field(default_factory=dict)
    """Per-token depth or per-example usage summaries by mixer key (empty when none)."""

    @property
    def mixers(self) -> dict[str, list]:
        """``{mixer key: weight per state}``, without keys whose mixer has no weights (null)."""
        return {k: v for k, v in (self.mixer_weights or {}).items() if v is not None}


@dataclass(frozen=True)
class RunFiles:
    """The JSON files of one run folder; a file the run lacks is ``None`` (config) or an empty section."""

    path: Path
    config: RunConfig | None = None
    metrics: RunMetrics = field(default_factory=RunMetrics)
    layer_weights: LayerWeights = field(default_factory=LayerWeights)
    present: tuple[str, ...] = ()
    """The files the folder has, by name (``config``, ``metrics``, ``layer_weights``)."""

    @classmethod
    def read(cls, run: str | os.PathLike) -> "RunFiles":
        """Read each file the folder ``run`` has, refusing one that is not readable JSON in one sentence."""
        run = Path(run)
        found = {name: read_run_json(run / file) for name, file in
                 (("config", CONFIG_FILE), ("metrics", METRICS_FILE), ("layer_weights", LAYER_WEIGHTS_FILE))
                 if (run / file).is_file()}
        return cls(path=run, config=RunConfig.from_json(found["config"]) if "config" in found else None,
                   metrics=RunMetrics.from_json(found.get("metrics")),
                   layer_weights=LayerWeights.from_json(found.get("layer_weights")), present=tuple(found))

    def to_json(self) -> dict[str, dict]:
        """``{name: object}`` of each file the folder has, as read (:func:`~..workflow.read_run` returns it)."""
        sections = {"config": self.config, "metrics": self.metrics, "layer_weights": self.layer_weights}
        return {name: sections[name].to_json() for name in self.present}

    @property
    def mixer(self) -> str | None:
        """The run's mixer: as its metrics record it, else as its config's parameters name it."""
        return self.metrics.mixer or (self.config.mixer if self.config is not None else None)


def runs_root(cache_path: str | os.PathLike) -> Path:
    """Where a cache's runs go, and are found: ``<cache>.runs`` beside the real cache folder (the one rule, for
    ``train-head``, ``sweep`` and the report's search).

    The cache path is resolved first, so ``.`` inside a cache or ``..`` from a split folder name the
    cache itself, never a ``.runs`` folder inside it.
    """
    root = Path(cache_path).resolve()
    return root.parent / f"{root.name}.runs"


def run_belongs_to(run: str | os.PathLike, manifest) -> bool:
    """Whether the folder ``run`` holds a run trained on the cache of ``manifest`` (False when it holds no run)."""
    config = RunConfig.peek(run)
    return config is not None and config.cache.matches(manifest)


def find_runs(cache, extra: Iterable[str | os.PathLike] = ()) -> list[Path]:
    """Run folders trained on ``cache`` (an open cache): those in ``<cache>.runs/`` and ``extra`` whose recorded
    cache has the same backbone fingerprint and extraction settings (config hash). ``extra`` runs that do not match
    are refused, naming the run."""
    manifest = cache.manifest
    beside, given = runs_root(cache.path), Path(cache.path)
    if given.name not in ("", "..") and (given.parent / f"{given.name}.runs").resolve() == beside:
        beside = given.parent / f"{given.name}.runs"  # the same folder, named as the user named the cache
    candidates = sorted(p for p in beside.iterdir() if (p / CONFIG_FILE).is_file()) if beside.is_dir() else []
    found = [run for run in candidates if run_belongs_to(run, manifest)]
    for run in map(Path, extra):
        config = RunConfig.peek(run)
        if config is None:
            raise ConfigError(f"{run} is not a run folder (no readable config.json); pass a folder written by "
                              "layercache train-head.")
        if not config.cache.matches(manifest):
            raise ConfigError(f"The run {run} was trained on another cache than {cache.path} (a different "
                              "backbone or extraction settings); pass runs of this cache.")
        if run.resolve() not in {p.resolve() for p in found}:
            found.append(run)
    return found
