"""The base of a run folder's typed sections (:class:`RunSection`), and the sections nested in its files that are
not about the cache: what the head was trained on (:class:`TrainingData`, ``data``), how its weights were fitted
(:class:`FitRecord`, ``fit``) and how it chose its epoch (:class:`SelectionRecord`, ``selection``).

``config.json`` and ``metrics.json`` both hold these three (:mod:`.run_files`). Each is written from what the fitted
head holds (``LayerHead.data_``, ``fit_`` and ``selection_.to_json()``: plain objects, read into the section when
the file's section is built), with the keys in the order the head builds them, so a run's files are the same bytes
as before they were typed; a key a run lacks (an older one, or a plain head's ``members``) reads as None and is not
written back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from ...store.sections import OMIT, JsonSection


@dataclass(frozen=True)
class RunSection(JsonSection):
    """Base of a run file's typed sections: one field per key, in the order the file holds them (a
    :class:`~layercache.store.sections.JsonSection`, as the manifest's sections are).

    :meth:`to_json` writes each field under its key (:attr:`json_names` where the key differs from the
    field): a field marked :data:`~layercache.store.sections.OMIT` only when it is set, a nested section as
    its own JSON, then any key this version does not know (:attr:`extra`: a file edited by hand, or by a
    later version), as read. :meth:`from_json` reads a file of any version back into the same fields, so a
    file written by :meth:`to_json` reads back equal, and is written again byte for byte.

    A nested section (a field whose metadata names its class under ``"section"``) may be given as its JSON object,
    as the head's attributes hold it (``RunConfig(data=head.data_)``): it is read into its section when the
    section is built.
    """

    keeps_unknown: ClassVar[bool] = True
    extra: dict[str, Any] = field(default_factory=dict, kw_only=True, repr=False, metadata={"json": False})
    """Keys of the file this version does not know, as read; written after the known ones."""

    def __post_init__(self) -> None:
        for f in fields(self):
            section = f.metadata.get("section")
            value = getattr(self, f.name)
            if section is not None and isinstance(value, Mapping):
                object.__setattr__(self, f.name, section.from_json(value))


def nested(section: type[RunSection]) -> Any:
    """The field of an optional nested ``section``: absent (None) in runs that lack it, and then not written."""
    return field(default=None, metadata={**OMIT, "section": section})


@dataclass(frozen=True)
class TrainingData(RunSection):
    """What a head was trained and validated on (``data`` of a run's config and metrics): ``LayerHead.data_``."""

    cache: str | None = field(default=None, metadata=OMIT)
    """Where the training cache was (recorded only: never used as a path to read)."""
    train_split: str | None = field(default=None, metadata=OMIT)
    validation: str | None = field(default=None, metadata=OMIT)
    """The validation data in words: a split, or the seeded slice of the training split."""
    n_train: int | None = field(default=None, metadata=OMIT)
    n_validation: int | None = field(default=None, metadata=OMIT)
    normalize: str | None = field(default=None, metadata=OMIT)
    """How the states were normalised before mixing (absent in runs older than the option)."""
    mean_skip_first: bool | None = field(default=None, metadata=OMIT)
    """Whether mean pooling left out each example's first token (absent in runs older than the option)."""
    source_note: str | None = field(default=None, metadata=OMIT)
    """Why the head read another source than the one asked for (the warning its fit gave); absent when it did not."""
    trained: str | None = field(default=None, metadata=OMIT)
    """``live`` for a head trained with the backbone in the loop (``train-head --live``); absent otherwise."""
    live: dict[str, Any] | None = field(default=None, metadata=OMIT)
    """Such a head's backbone, forward dtype, device and forward seconds."""
    members: list[str] | None = field(default=None, metadata=OMIT)
    """An ensemble's members, by label."""
    seeds: list[int] | None = field(default=None, metadata=OMIT)
    """A seed ensemble's seeds."""


@dataclass(frozen=True)
class FitRecord(RunSection):
    """How a head's weights were fitted (``fit`` of a run's config and metrics): ``LayerHead.fit_``."""

    json_names: ClassVar[dict[str, str]] = {"c": "C", "c_grid": "C_grid"}
    solver: str | None = field(default=None, metadata=OMIT)
    """``adamw`` or ``lbfgs``; an ensemble of both names them both (``adamw+lbfgs``)."""
    method: dict[str, str] | None = field(default=None, metadata=OMIT)
    """The convex fit's method per task."""
    c: dict[str, float] | None = field(default=None, metadata=OMIT)
    """The convex fit's L2 strength per task, chosen on validation (``C``)."""
    c_grid: list[float] | None = field(default=None, metadata=OMIT)
    """The values of ``C`` it chose among (``C_grid``)."""
    members: list[str] | None = field(default=None, metadata=OMIT)
    """An ensemble's members, by label."""
    combine: str | None = field(default=None, metadata=OMIT)
    """How an ensemble combines its members' predictions."""
    seeds: list[int] | None = field(default=None, metadata=OMIT)
    """A seed ensemble's seeds."""


@dataclass(frozen=True)
class SelectionRecord(RunSection):
    """How a run chose its epoch (``selection`` of a run's config and metrics): ``LayerHead.selection_.to_json()``,
    which :meth:`Selection.from_json <..scoring.selection.Selection.from_json>` reads back."""

    metric: dict[str, str] | None = field(default=None, metadata=OMIT)
    """The selection metric per task."""
    reason: dict[str, str] | None = field(default=None, metadata=OMIT)
    """Why each task's metric was chosen (the default's reason, or asked for)."""
    score: str | None = field(default=None, metadata=OMIT)
    """How the tasks' metrics combine into the score an epoch is chosen on, in words."""
    weights: dict[str, float] | None = field(default=None, metadata=OMIT)
    """Each task's weight in that score."""
