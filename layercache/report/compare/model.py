"""The comparison's data model: :class:`Comparison` and its JSON form, what every other part of compare/ reads.

A comparison holds, as plain JSON data (missing values ``None``, never NaN):

- ``meta``: the data every cache was extracted from (dataset, splits and their sizes), the split the scores and
  the CKA are on, the settings (seed, training sample, CKA sample) and the versions;
- ``models``: one entry per cache, in the order given: its ``label`` (how every table and figure names it), the
  model, its family (encoder / decoder), its states (``layer_names``, their ``layers`` among the model's
  ``n_layers + 1`` and their ``relative_depth``: 0 = embeddings, 1 = last layer), its width and its storage;
- ``tasks``: task -> its kind and metric, and per model label the probes' results (``probe``, ``control`` with
  selectivity, ``cumulative``, ``prediction_depth``: the probe report's entries of that task, computed the same
  way) with ``summary``: the best layer and the expected layer, each as a layer and as a relative depth; a model
  that cannot probe the task is in ``skipped`` with the reason;
- ``similarity``: one entry per pair of models: linear CKA between every state of one and every state of the
  other, on the same seeded sample of examples (``cka``: rows the first model's states, columns the second's);
- ``timings`` and ``notes`` (why a part is missing, or what to keep in mind reading one).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from ..model import clean

COMPARISON_FORMAT = "layercache-comparison"
COMPARISON_VERSION = 1
JSON_NAME, HTML_NAME = "report.json", "report.html"
PARTS = ("meta", "models", "tasks", "similarity", "timings", "notes")


@dataclass
class ComparisonPaths:
    """Where :func:`~.saving.save_comparison` wrote the comparison."""

    folder: Path
    json: Path
    html: Path


@dataclass
class Comparison:
    """Several models compared from their caches, as plain JSON data (see the module docstring)."""

    meta: dict[str, Any]
    models: list[dict[str, Any]] = field(default_factory=list)
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    similarity: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.clean()

    def clean(self) -> Comparison:
        """Make every part plain JSON data (lists, numbers, None for NaN), as :meth:`to_json` writes it."""
        for name in PARTS:
            setattr(self, name, clean(getattr(self, name)))  # type: ignore[no-untyped-call]
        return self

    @property
    def labels(self) -> list[str]:
        """The models' labels, in the order the caches were given."""
        return [str(m["label"]) for m in self.models]

    def model(self, label: str) -> dict[str, Any]:
        """The entry of the model labelled ``label``."""
        return next(m for m in self.models if m["label"] == label)

    def to_json(self) -> dict[str, Any]:
        """The comparison as JSON data, with its format name and version."""
        data: dict[str, Any] = clean(asdict(self))  # type: ignore[no-untyped-call]
        return {"format": COMPARISON_FORMAT, "version": COMPARISON_VERSION, **data}

    @classmethod
    def from_json(cls, data: Any) -> Comparison:
        """A comparison from :meth:`to_json`'s data; refuses another format or a newer version."""
        if not isinstance(data, dict) or data.get("format") != COMPARISON_FORMAT:
            raise ConfigError("This JSON is not a layercache comparison (no \"format\": "
                              f"\"{COMPARISON_FORMAT}\"); pass the report.json that layercache compare wrote.")
        version = data.get("version")
        if not isinstance(version, int) or version > COMPARISON_VERSION:
            raise ConfigError(f"The comparison has version {version!r}, newer than this layercache reads "
                              f"({COMPARISON_VERSION}); upgrade layercache.")
        return cls(**{k: data[k] for k in PARTS if k in data})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Comparison:
        """Read a comparison's ``report.json`` (or the folder holding one)."""
        path = Path(path)
        if path.is_dir():
            path = path / JSON_NAME
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"There is no comparison at {path}; run layercache compare first.") from None
        except (OSError, ValueError) as err:
            raise ConfigError(f"The comparison {path} is not readable JSON ({err}); write it again with "
                              "layercache compare.") from None
        return cls.from_json(data)
