"""The manifest's sections as types: what made a cache (model, tokenizer, dataset), how it is stored, how it ran.

Each section serialises to exactly the keys the manifest has always held (``to_json``), so the
files and the configuration hash over them do not depend on this module: a field is written as
``null`` when it always was, and left out when older caches may lack it and ``null`` would not be
a valid value (``omit_if_none``). :mod:`layercache.store.schema` validates the raw JSON before a
section is built, so ``from_json`` only picks the known keys.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

_OMIT = {"omit_if_none": True}


class Section:
    """Base of the manifest's typed sections: JSON in and out, the keys named as in the file."""

    json_names: ClassVar[dict[str, str]] = {}
    """Attribute -> JSON key, where the key is not a valid attribute name (``class``)."""

    def to_json(self) -> dict[str, Any]:
        """The section as the manifest stores it (a deep copy: editing it leaves the section as it is)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.metadata.get("omit_if_none"):
                continue
            out[self.json_names.get(f.name, f.name)] = copy.deepcopy(value)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]):
        """Build the section from its JSON object (validated by the schema); unknown keys are dropped."""
        keys = {cls.json_names.get(f.name, f.name): f.name for f in dataclasses.fields(cls)}
        return cls(**{keys[k]: copy.deepcopy(v) for k, v in data.items() if k in keys})


@dataclass(kw_only=True)
class ModelSection(Section):
    """The backbone that produced the states (``Backbone.describe()``)."""

    name: str
    """What the user asked for: a hub id, a folder, or ``minilm``."""
    source: str | None = field(default=None, metadata=_OMIT)
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
    placement: dict[str, int] | None = field(default=None, metadata=_OMIT)
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
    padding_side: str | None = field(default=None, metadata=_OMIT)
    stride: int | None = None
    """Overlap of the windows long texts were cut into (``--stride``); ``None``: truncated."""


@dataclass(kw_only=True)
class DatasetSection(Section):
    """The data the states were extracted from."""

    name: str
    config: str | None = None
    fingerprint: str
    """Content hash of the rows read (text and labels)."""
    columns: list[str] | None = field(default=None, metadata=_OMIT)
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
    all_layer_names: list[str] | None = field(default=None, metadata=_OMIT)
    store: str
    """``tokens`` (every real token's states, and pooled vectors) or ``pooled``."""
    pooling: list[str]
    shard_bytes: int
    final_norm: str | None = field(default=None, metadata=_OMIT)
    mean_skip_first: bool | None = field(default=None, metadata=_OMIT)
    """Mean pooling left out each example's first token; absent in caches older than the option (false)."""
    project: int | None = field(default=None, metadata=_OMIT)
    """K: every state stored as its coordinates in K principal directions (``--project K``,
    :mod:`layercache.store.projection`); absent: stored at the model's width."""
    project_basis: str | None = field(default=None, metadata=_OMIT)
    """How the ``--project K`` basis was fitted (``--project-basis``: ``pca`` or ``standardized``), written with
    ``project``; absent without a projection, and in caches older than the option (read as ``pca``)."""
    pooled_dtype: str | None = field(default=None, metadata=_OMIT)
    """The on-disk dtype of the pooled vectors where it is not :attr:`dtype`: float16 beside int8 token states
    (:func:`~layercache.store.codecs.pooled_dtype_for`). Absent: :attr:`dtype` (and in caches written before it
    existed, an int8 cache's pooled vectors are int8 too)."""
    compression: str | None = field(default=None, metadata=_OMIT)
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

    batch_tokens: int | None = field(default=None, metadata=_OMIT)
    batch_size: int | None = field(default=None, metadata=_OMIT)
    planner: str | None = field(default=None, metadata=_OMIT)
    """The batch planner's name: a resume must cut the same batches."""
    device: str | None = field(default=None, metadata=_OMIT)
    forward_dtype: str | None = field(default=None, metadata=_OMIT)
    storage_dtype_auto: str | None = field(default=None, metadata=_OMIT)
    """Why ``--storage-dtype auto`` chose the stored dtype; absent when the user named one."""
    fp16_overflow_by_split: dict[str, int] | None = field(default=None, metadata=_OMIT)
    fp16_overflow: int | None = field(default=None, metadata=_OMIT)
    """State values clamped to ±65,504 over all splits."""
    projection_variance: list[float] | None = field(default=None, metadata=_OMIT)
    """Per kept state, the fraction of its variance the ``--project K`` directions keep (on the fitted sample)."""
    projection_tokens: int | None = field(default=None, metadata=_OMIT)
    """Tokens of the first split the projection was fitted on."""
    quality: dict | None = field(default=None, metadata=_OMIT)
    """What the stored states cost in quality, measured after a lossy extraction on a labelled sample
    (:func:`layercache.planning.extract`): the choice, the sample, and per task the probes' (and the quick
    head's) loss in points against float32 states with its 95 % interval; absent when not measured."""

    @property
    def overflow(self) -> int:
        """``fp16_overflow``, with absent read as 0."""
        return self.fp16_overflow or 0
