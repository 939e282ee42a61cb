"""The manifest's sections as types: what made a cache (model, tokenizer, dataset), how it is stored, how it ran.

Each section serialises to exactly the keys the manifest has always held (``to_json``), so the
files and the configuration hash over them do not depend on this module: a field is written as
``null`` when it always was, and left out when older caches may lack it and ``null`` would not be
a valid value (``omit_if_none``). :mod:`layercache.store.schema` validates the raw JSON before a
section is built, so ``from_json`` only picks the known keys.

:class:`JsonSection` is the base of these and of a run folder's files
(:class:`~layercache.heads.run_folders.run_files.RunSection`): one field per JSON key, in the file's order.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, ClassVar, TypeVar

OMIT: dict[str, Any] = {"omit_if_none": True}
"""Field metadata: the key is written only when the field is set (files written before it existed lack it)."""

J = TypeVar("J", bound="JsonSection")


class JsonSection:
    """Base of the typed JSON sections of a cache's manifest and of a run folder's files: a dataclass whose fields
    are the keys of a JSON object, in the order the file holds them.

    :meth:`to_json` writes each field under its key (:attr:`json_names` where the key differs from the field), in
    field order: a field whose metadata is :data:`OMIT` only when it is not None, a field marked
    ``{"json": False}`` never, and a nested section (metadata ``{"section": cls}``) as its own JSON. Values are
    deep copies both ways, so editing what one side returns leaves the other as it is.
    :meth:`from_json` reads such an object back: a missing key reads as its field's default, and a key the
    section does not know is dropped (:attr:`keeps_unknown` False: the manifest, validated by its schema) or kept
    in an ``extra`` field, written back after the known keys (True: a run's files, which keep what a later
    version or a hand edit added).
    """

    json_names: ClassVar[dict[str, str]] = {}
    """Field -> JSON key, where they differ (``class``, a key that is not a valid attribute name)."""
    keeps_unknown: ClassVar[bool] = False
    """Whether :meth:`from_json` keeps keys it does not know in :attr:`extra`, or drops them."""
    extra: dict[str, Any]
    """The keys read that the section does not know, as read: a field of the sections that keep them, written after
    the known keys (absent from those that drop them)."""

    @classmethod
    def keyed_fields(cls) -> dict[str, Field[Any]]:
        """``{JSON key: field}`` of every field the JSON object holds, in file order."""
        return {cls.json_names.get(f.name, f.name): f for f in fields(cls)  # type: ignore[arg-type]
                if f.metadata.get("json", True)}

    @classmethod
    def from_json(cls: type[J], data: Any) -> J:
        """Build the section from its JSON object (anything but an object reads as an empty section; a missing key
        as its field's default). A nested section reads its object; an optional one (default None) reads null as
        None and keeps any other value as an unknown key, a required one reads it as an empty section."""
        data = data if isinstance(data, Mapping) else {}
        keyed = cls.keyed_fields()
        known: dict[str, Any] = {}
        unknown: dict[str, Any] = {}
        for key, value in data.items():
            f = keyed.get(key)
            section = None if f is None else f.metadata.get("section")
            if f is None:
                unknown[key] = copy.deepcopy(value)
            elif section is None:
                known[f.name] = copy.deepcopy(value)
            elif isinstance(value, Mapping) or f.default is not None:  # a required section reads anything else empty
                known[f.name] = section.from_json(value)
            elif value is None:
                known[f.name] = None
            else:  # not an object where an optional section is: kept as read, as a key it does not know
                unknown[key] = copy.deepcopy(value)
        if cls.keeps_unknown:
            known["extra"] = unknown
        return cls(**known)

    def to_json(self) -> dict[str, Any]:
        """The section as its file holds it: the known keys in field order, then the unknown ones kept as read."""
        out: dict[str, Any] = {}
        for key, f in self.keyed_fields().items():
            value = getattr(self, f.name)
            if value is None and f.metadata.get("omit_if_none"):
                continue
            out[key] = value.to_json() if isinstance(value, JsonSection) else copy.deepcopy(value)
        if self.keeps_unknown:
            out.update((k, copy.deepcopy(v)) for k, v in self.extra.items() if k not in out)
        return out


class Section(JsonSection):
    """Base of the manifest's typed sections: JSON in and out, the keys named as in the file; keys the schema let
    through but the section does not know are dropped."""


@dataclass(kw_only=True)
class ModelSection(Section):
    """The backbone that produced the states (``Backbone.describe()``)."""

    name: str
    """What the user asked for: a hub id, a folder, or ``minilm``."""
    source: str | None = field(default=None, metadata=OMIT)
    """Where it was loaded from (the installed folder of a bundled alias)."""
    revision: str | None = None
    fingerprint: str
    """Content hash of every weight file, the config and the tokenizer: what later steps compare."""
    architecture: str
    model_type: str | None = None
    kind: str
    """``encoder``, ``decoder`` or ``encoder-decoder`` (encoder states)."""
    n_layers: int
    hidden_size: int
    final_norm: str
    """Whether ``layer_L`` is after a final norm: ``none``, ``applied`` or ``not-applied``."""
    forward_dtype: str
    device: str
    """Where the forward ran (the input device of a split model)."""
    placement: dict[str, int] | None = field(default=None, metadata=OMIT)
    """Modules per device when ``--device-map`` split the model (``{"cuda:0": 14, "disk": 3}``)."""


@dataclass(kw_only=True)
class TokenizerSection(Section):
    """How text became tokens: the tokenizer's identity, the maximum length and the window stride."""

    json_names: ClassVar[dict[str, str]] = {"class_name": "class"}
    class_name: str
    fingerprint: str
    max_length: int
    pad_from: str | None = None
    """The special token padding was borrowed from, for a tokenizer without one (decoders)."""
    padding_side: str | None = field(default=None, metadata=OMIT)
    stride: int | None = None
    """Overlap of the windows long texts were cut into (``--stride``); ``None``: truncated."""


@dataclass(kw_only=True)
class DatasetSection(Section):
    """The data the states were extracted from."""

    name: str
    config: str | None = None
    fingerprint: str
    """Content hash of the rows read (text and labels)."""
    columns: list[str] | None = field(default=None, metadata=OMIT)
    text_columns: list[str]
    limit: int | None = None
    files: dict[str, str] | None = None
    """Split -> local file, for ``--split NAME=PATH``."""


@dataclass(kw_only=True)
class StorageSection(Section):
    """What the shards hold and how: dtype, kept states, token states or pooled vectors only."""

    dtype: str
    """The on-disk dtype (never ``auto``: the manifest records what ``auto`` resolved to)."""
    layers: list[int]
    """Indices of the kept states among the model's ``n_layers + 1`` (0 = embeddings)."""
    layer_names: list[str]
    all_layer_names: list[str] | None = field(default=None, metadata=OMIT)
    store: str
    """``tokens`` (every real token's states, and pooled vectors) or ``pooled``."""
    pooling: list[str]
    shard_bytes: int
    final_norm: str | None = field(default=None, metadata=OMIT)
    mean_skip_first: bool | None = field(default=None, metadata=OMIT)
    """Mean pooling left out each example's first token; absent in caches older than the option (false)."""
    project: int | None = field(default=None, metadata=OMIT)
    """K: every state stored as its coordinates in K principal directions (``--project K``,
    :mod:`layercache.store.projection`); absent: stored at the model's width."""
    project_basis: str | None = field(default=None, metadata=OMIT)
    """How the ``--project K`` basis was fitted (``--project-basis``: ``pca`` or ``standardized``), written with
    ``project``; absent without a projection, and in caches older than the option (read as ``pca``)."""
    pooled_dtype: str | None = field(default=None, metadata=OMIT)
    """The on-disk dtype of the pooled vectors where it is not :attr:`dtype`: float16 beside int8 token states
    (:func:`~layercache.store.codecs.pooled_dtype_for`). Absent: :attr:`dtype` (and in caches written before it
    existed, an int8 cache's pooled vectors are int8 too)."""
    compression: str | None = field(default=None, metadata=OMIT)
    """The lossless filter on every shard's state datasets (``--compression``, :mod:`layercache.store.compression`);
    recorded only when there is one, so absent (every cache written before the option) is ``none``."""

    def __post_init__(self) -> None:
        if self.pooled_dtype == self.dtype:  # recorded only where it differs
            self.pooled_dtype = None
        if self.compression == "none":  # recorded only when set: an uncompressed cache keeps its hash
            self.compression = None

    @property
    def stored_compression(self) -> str:
        """:attr:`compression`, absent read as ``none``."""
        return self.compression or "none"

    @property
    def stored_pooled_dtype(self) -> str:
        """The on-disk dtype of the pooled vectors (``pooled/<mode>``)."""
        return self.pooled_dtype or self.dtype

    def dataset_dtype(self, name: str) -> str:
        """The on-disk dtype of state dataset ``name`` of a shard: ``hidden`` or ``pooled/<mode>``."""
        return self.stored_pooled_dtype if name.startswith("pooled/") else self.dtype

    @property
    def projection_basis(self) -> str | None:
        """:attr:`project_basis`, absent read as ``pca`` in a projected cache; None in one at the model's width."""
        return (self.project_basis or "pca") if self.project else None

    @property
    def stores_tokens(self) -> bool:
        """Whether shards hold per-token states (not only pooled vectors)."""
        return self.store == "tokens"

    @property
    def skips_first_in_mean(self) -> bool:
        """``mean_skip_first``, with absent read as false."""
        return bool(self.mean_skip_first)

    def hashed(self) -> dict[str, Any]:
        """The section as the configuration hash sees it: ``mean_skip_first`` only when set, so caches
        written before the option existed keep their hash (absent means false); ``project`` only when set;
        ``project_basis`` only when not ``pca`` (a ``pca`` cache keeps the hash it had before the option)."""
        return {k: v for k, v in self.to_json().items()
                if (k != "mean_skip_first" or v) and (k != "project_basis" or v != "pca")}


@dataclass(kw_only=True)
class ExtractionSection(Section):
    """How the run went: batching, where and in what precision it ran, and what it had to clamp.

    Everything here is optional in the file (older caches lack some of it).
    """

    batch_tokens: int | None = field(default=None, metadata=OMIT)
    batch_size: int | None = field(default=None, metadata=OMIT)
    planner: str | None = field(default=None, metadata=OMIT)
    """The batch planner's name: a resume must cut the same batches."""
    device: str | None = field(default=None, metadata=OMIT)
    forward_dtype: str | None = field(default=None, metadata=OMIT)
    storage_dtype_auto: str | None = field(default=None, metadata=OMIT)
    """Why ``--storage-dtype auto`` chose the stored dtype; absent when the user named one."""
    fp16_overflow_by_split: dict[str, int] | None = field(default=None, metadata=OMIT)
    fp16_overflow: int | None = field(default=None, metadata=OMIT)
    """State values clamped to ±65,504 over all splits."""
    projection_variance: list[float] | None = field(default=None, metadata=OMIT)
    """Per kept state, the fraction of its variance the ``--project K`` directions keep (on the fitted sample)."""
    projection_tokens: int | None = field(default=None, metadata=OMIT)
    """Tokens of the first split the projection was fitted on."""
    quality: dict | None = field(default=None, metadata=OMIT)
    """What the stored states cost in quality, measured after a lossy extraction on a labelled sample
    (:func:`layercache.planning.extract`): the choice, the sample, and per task the probes' (and the quick
    head's) loss in points against float32 states with its 95 % interval; absent when not measured."""

    @property
    def overflow(self) -> int:
        """``fp16_overflow``, with absent read as 0."""
        return self.fp16_overflow or 0
