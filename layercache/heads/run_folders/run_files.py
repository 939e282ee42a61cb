"""The JSON files of a run folder as typed sections: ``config.json``, ``metrics.json``, ``layer_weights.json``.

The manifest of a cache is read through typed sections (:mod:`layercache.store.sections`); a run
folder's files are read here, the same way, so ``report`` and ``live`` never index them by string
keys::

    files = RunFiles.read(run)             # each file present, refused in one sentence when damaged
    files.metrics.scores()                 # {task: {"metric": ..., "value": ...}} on the scored split
    files.layer_weights.mixers             # {mixer key: weight per state}
    RunConfig.peek(run).cache.matches(m)   # trained on the cache whose manifest is m?

Each section keeps the JSON it was read from (``raw``) and writes it back unchanged
(:meth:`to_json`): the writers (:func:`~.persistence.write_run`) write the same bytes as ever, and
every run folder written before still loads. A file a run does not have reads as an empty section.
Finding a cache's runs (:func:`find_runs`) and checking which cache a run came from
(:func:`run_belongs_to`) live here too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from .run_folder import CONFIG_FILE

METRICS_FILE = "metrics.json"
LAYER_WEIGHTS_FILE = "layer_weights.json"

REPORTED_METRICS = ("accuracy", "span_f1", "macro_f1", "pearson")
"""The metric a report shows for a task's scores: the first of these the scores hold (classification tasks
report accuracy, regression tasks pearson). A run's selection metric may differ: :attr:`RunMetrics.selection`."""


def read_run_json(file: Path) -> Any:
    """The JSON in the run file ``file``, refused in one sentence when it is not readable JSON."""
    try:
        return json.loads(file.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"The run file {file} is not readable JSON ({err}); it is damaged: restore it "
                          "or train the head again.") from None


def _section(data: Any, key: str) -> dict:
    """``data[key]`` when both are JSON objects, else an empty dict (a missing or null section)."""
    value = data.get(key) if isinstance(data, Mapping) else None
    return dict(value) if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class RecordedCache:
    """The ``cache`` section of a run's config: the identity of the cache the run was trained on."""

    model: str | None = None
    model_fingerprint: str | None = None
    tokenizer_fingerprint: str | None = None
    config_hash: str | None = None
    max_length: int | None = None
    stride: int | None = None
    records_text_settings: bool = False
    """Whether the run recorded ``max_length`` and ``stride`` (runs since the live bundle)."""
    storage_dtype: str | None = None
    hidden_size: int | None = None
    raw: dict = field(default_factory=dict, repr=False, compare=False)
    """The section as written: what a loaded head keeps (``cache_info_``) and saves again unchanged."""

    @classmethod
    def from_json(cls, data: Any) -> "RecordedCache":
        """Read the section (missing keys as None: older runs, or a section edited by hand)."""
        data = dict(data) if isinstance(data, Mapping) else {}
        return cls(model=data.get("model"), model_fingerprint=data.get("model_fingerprint"),
                   tokenizer_fingerprint=data.get("tokenizer_fingerprint"), config_hash=data.get("config_hash"),
                   max_length=data.get("max_length"), stride=data.get("stride"),
                   records_text_settings="max_length" in data, storage_dtype=data.get("storage_dtype"),
                   hidden_size=data.get("hidden_size"), raw=data)

    def to_json(self) -> dict:
        """The section exactly as it was read."""
        return dict(self.raw)

    def matches(self, manifest) -> bool:
        """Whether this is the cache of ``manifest``: the same backbone fingerprint and extraction settings."""
        return self.config_hash == manifest.config_hash and self.model_fingerprint == manifest.model.fingerprint


@dataclass(frozen=True)
class JsonSection:
    """One JSON file of a run, kept as read (``raw``) and given back unchanged: the writers own the format."""

    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: Any):
        """Read the file's object as written (anything but an object reads as empty)."""
        return cls(raw=dict(data) if isinstance(data, Mapping) else {})

    def to_json(self) -> dict:
        """The object exactly as it was read."""
        return dict(self.raw)


@dataclass(frozen=True)
class RunConfig(JsonSection):
    """A run's ``config.json``: the head's parameters, the states it read and the cache it was trained on."""

    cache: RecordedCache = field(default_factory=RecordedCache)

    @classmethod
    def from_json(cls, data: Any) -> "RunConfig":
        """Read a config as written (unchecked: :func:`~.persistence.read_run_config` checks what loading needs)."""
        data = dict(data) if isinstance(data, Mapping) else {}
        return cls(raw=data, cache=RecordedCache.from_json(data.get("cache")))

    @property
    def mixer(self) -> str | None:
        """The mixer named in the estimator parameters."""
        return self.params.get("mixer")

    @property
    def params(self) -> dict:
        """The estimator's parameters (``LayerHead.get_params()``)."""
        return _section(self.raw, "params")

    @property
    def model(self) -> dict:
        """The head model's config (:func:`~..ensembles.model.model_from_config` rebuilds it)."""
        return _section(self.raw, "model")

    @property
    def train(self) -> dict:
        """The training settings (:class:`~..training.trainer.TrainConfig`'s fields)."""
        return _section(self.raw, "train")

    @property
    def layer_names(self) -> list[str]:
        """The states the head reads, in order."""
        return list(self.raw.get("layer_names") or [])

    @property
    def source(self) -> str | None:
        """What the head reads: ``tokens`` or ``pooled:<mode>``."""
        return self.raw.get("source")

    @property
    def selection(self) -> dict | None:
        """The selection the run chose its epoch by, or None for a run saved before selection metrics existed."""
        return self.raw.get("selection") if "selection" in self.raw else None

    @property
    def data(self) -> dict:
        """What the head was trained on (splits, sizes, normalisation); empty when not recorded."""
        return _section(self.raw, "data")

    @property
    def fit(self) -> dict:
        """How the weights were fitted; runs saved before the convex fit trained by AdamW."""
        return self.raw.get("fit", {"solver": "adamw"})

    @classmethod
    def peek(cls, run: str | os.PathLike) -> "RunConfig | None":
        """The config of the folder ``run``, or None when it has no readable config.json holding an object."""
        try:
            data = json.loads((Path(run) / CONFIG_FILE).read_text())
        except (OSError, ValueError):
            return None
        return cls.from_json(data) if isinstance(data, Mapping) else None


@dataclass(frozen=True)
class RunMetrics(JsonSection):
    """A run's ``metrics.json``: its scores on validation (and a test split), and how it chose its epoch."""

    @property
    def mixer(self) -> str | None:
        """The mixer the run trained (None in a file without it)."""
        return self.raw.get("mixer")

    @property
    def validation(self) -> dict[str, dict]:
        """``{task: metrics}`` on validation."""
        return dict(self.raw.get("validation") or {})

    @property
    def test(self) -> dict[str, dict] | None:
        """``{task: metrics}`` on :attr:`test_split`, or None for a run without a test split."""
        return self.raw.get("test")

    @property
    def normalize(self) -> str | None:
        """How the states were normalised before mixing."""
        return self.raw.get("normalize")

    @property
    def train_seconds(self) -> float | None:
        """Wall time of the fit."""
        return self.raw.get("train_seconds")

    @property
    def data(self) -> dict:
        """What the run trained and validated on: the cache, splits and sizes."""
        return _section(self.raw, "data")

    @property
    def validated_on(self) -> str | None:
        """The validation data in words: a split, or the seeded slice of the training split."""
        return self.data.get("validation")

    @property
    def test_split(self) -> str | None:
        """The split the run was tested on, or None."""
        return self.raw.get("test_split")

    @property
    def scored_on(self) -> str:
        """The split :meth:`scored` holds: the test split, else ``validation``."""
        return self.test_split or "validation"

    def scored(self) -> dict[str, dict]:
        """``{task: metrics}`` on the test split when the run has one, else on validation."""
        return dict(self.raw.get("test") or self.raw.get("validation") or {})

    @property
    def selection(self) -> dict[str, str]:
        """``{task: metric}`` the run selected its epoch on (empty for a run that did not record it)."""
        return dict(_section(self.raw, "selection").get("metric") or {})

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
class LayerWeights(JsonSection):
    """A run's ``layer_weights.json``: each mixer's weight per state, and per-token or per-example usage."""

    @property
    def layer_names(self) -> list[str] | None:
        """The states the weights are over."""
        return self.raw.get("layer_names")

    @property
    def mixers(self) -> dict[str, list]:
        """``{mixer key: weight per state}``, without keys whose mixer has no weights (null)."""
        return {k: v for k, v in (self.raw.get("mixers") or {}).items() if v is not None}

    @property
    def usage(self) -> dict:
        """Per-token depth or per-example usage summaries (empty when none)."""
        return self.raw.get("usage") or {}


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
        """``{name: object}`` of each file the folder has, exactly as read (:func:`~..workflow.read_run` returns it)."""
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
