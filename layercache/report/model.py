"""The probe report's data model: :class:`ProbeReport` and its JSON form, what every other part of report/ shares.

report/ has three parts, and imports run one way (orchestration -> renderers -> data model):

- the data model (this module): what a report is, plain JSON data read back by :meth:`ProbeReport.load`;
  it imports nothing else of report/;
- the orchestration that computes one from a cache (:mod:`.probing`, :mod:`.probe_parts`,
  :mod:`.cumulative_gains`): probes, depth analyses, runs;
- the renderers that only read the data model (:mod:`.html`, :mod:`.figures`, :mod:`.summary`,
  :mod:`.tables`) and :mod:`.saving`, which writes ``report.json`` and ``report.html``.

Missing values are ``None`` here and ``null`` in the JSON, never NaN.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ConfigError

REPORT_FORMAT = "layercache-probe-report"
REPORT_VERSION = 1
JSON_NAME, HTML_NAME = "report.json", "report.html"


def clean(value):
    """``value`` as plain JSON data: arrays as lists, numpy scalars as Python numbers, NaN / inf as None."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return clean(value.tolist())
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


@dataclass
class ReportPaths:
    """Where :func:`~.saving.save_report` wrote the report."""

    folder: Path
    json: Path
    html: Path


@dataclass
class ProbeReport:
    """A probing report, as plain JSON data (see the module docstring for what each part holds).

    Attributes:
        meta: the cache (path, model, dataset, layer names, splits), the evaluation split, the
            settings and the versions.
        tasks: task name -> its analyses (``probe``, ``control``, ``mdl``, ``cumulative``,
            ``prediction_depth``; the parts that do not apply to a task kind are absent), and
            ``per_layer``: probe name -> the per-layer result of every other registered probe
            (:meth:`~layercache.probes.base.Probe.report_part`: ``metric``, ``validation``, ``eval``, ...).
        similarity: linear CKA between layers, or None when the cache holds no pooled vectors.
        runs: every trained run found for the cache: its path, mixer, test score and layer weights.
        token_depth: per-token depth (of an ``act`` head: ``mixer``) by token category, or None.
        logit_lens: next-token accuracy and KL to the final layer per layer (decoders), or None.
        lenses: the logit lens, the tuned lens and the linear shortcut side by side per layer (decoders): how each
            was fitted (``fits``) and its scores (``scores``: KL, next-token bits, agreement, prediction depth), or
            None.
        timings: seconds spent in each part.
        notes: why a part is missing, in one sentence each.
    """

    meta: dict
    tasks: dict[str, dict] = field(default_factory=dict)
    similarity: dict | None = None
    runs: list[dict] = field(default_factory=list)
    token_depth: dict | None = None
    logit_lens: dict | None = None
    lenses: dict | None = None
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.clean()

    def clean(self) -> "ProbeReport":
        """Make every part plain JSON data (lists, numbers, None for NaN), as :meth:`to_json` writes it."""
        for name in ("meta", "tasks", "similarity", "runs", "token_depth", "logit_lens", "lenses", "timings", "notes"):
            setattr(self, name, clean(getattr(self, name)))
        return self

    @property
    def layer_names(self) -> list[str]:
        """The cache's states, in order (embeddings first)."""
        return list(self.meta["layer_names"])

    def to_json(self) -> dict:
        """The report as JSON data, with its format name and version."""
        return {"format": REPORT_FORMAT, "version": REPORT_VERSION, **clean(asdict(self))}

    @classmethod
    def from_json(cls, data: dict) -> "ProbeReport":
        """A report from :meth:`to_json`'s data; refuses another format or a newer version."""
        if not isinstance(data, dict) or data.get("format") != REPORT_FORMAT:
            raise ConfigError("This JSON is not a layercache probe report (no \"format\": "
                              f"\"{REPORT_FORMAT}\"); pass the report.json that probe-report wrote.")
        if not isinstance(data.get("version"), int) or data["version"] > REPORT_VERSION:
            raise ConfigError(f"The report has version {data.get('version')!r}, newer than this layercache reads "
                              f"({REPORT_VERSION}); upgrade layercache.")
        names = ("meta", "tasks", "similarity", "runs", "token_depth", "logit_lens", "lenses", "timings", "notes")
        return cls(**{k: data[k] for k in names if k in data})

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ProbeReport":
        """Read a ``report.json`` (or the folder holding one)."""
        path = Path(path)
        if path.is_dir():
            path = path / JSON_NAME
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"There is no report at {path}; run layercache probe-report first.") from None
        except (OSError, ValueError) as err:
            raise ConfigError(f"The report {path} is not readable JSON ({err}); write it again with "
                              "layercache probe-report.") from None
        return cls.from_json(data)

    # --- what a summary shows ---------------------------------------------------------
    def best_layers(self) -> dict[str, str | None]:
        """Task -> the layer whose probe scores best on validation."""
        return {name: t["probe"]["best_layer"] for name, t in self.tasks.items()}
