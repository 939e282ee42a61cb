"""The options of an extraction, grouped: what data, how it is stored, how it is batched.

:func:`~layercache.extraction.run.extract` takes them as three small frozen specs, or as the flat
keyword arguments it always took (which build the same specs). Each option is declared once, here: a field whose
:class:`~layercache.core.option_specs.Flag` is how ``layercache extract`` and ``plan`` type it (the command line's
options are made from them, :mod:`layercache.cli.spec_options`). Their defaults are those of
:mod:`layercache.core.extraction_defaults`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..core.devices import DEFAULT_DEVICE, DEVICE_FLAG, DEVICE_MAPS
from ..core.extraction_defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BATCH_TOKENS,
    DEFAULT_DATASET,
    DEFAULT_FORWARD_DTYPE,
    DEFAULT_POOLING,
    DEFAULT_SHARD_BYTES,
    DEFAULT_STORE,
)
from ..core.layers import LayerSpec
from ..core.option_specs import Constraint, Flag, at_least, option_field, option_spec, positive
from ..store.storage import AUTO

__all__ = ["DataSpec", "StorageSpec", "BatchSpec", "DEFAULT_SHARD_BYTES"]

DIMENSIONS = Constraint(lambda k: k is None or (isinstance(k, int) and not isinstance(k, bool) and k >= 1),
                        "takes a number of dimensions, at least 1")
"""``--project K``'s rule: a whole number of dimensions (None: the model's width)."""


@option_spec
@dataclass(frozen=True)
class DataSpec:
    """Which data to run: see :func:`~layercache.sources.datasets.load_dataset_records` for every option."""

    dataset: str | None = option_field(DEFAULT_DATASET, Flag(
        "DATASET", "{default} (default), a hub id, or a local file: {files}.", reader="dataset", argument=True))
    """``builtin``, a hub id, a local file or a saved datasets folder; ``None`` with ``split_files``."""
    config: str | None = option_field(None, Flag("--config", "Hub dataset config, e.g. cola for glue."),
                                      keyword="dataset_config")
    """Hub dataset configuration (``cola`` for ``glue``)."""
    splits: Sequence[str] | None = option_field(None, Flag(
        "--split", "Split to {command} (hub), or NAME=PATH for local files; repeatable.", reader="splits"))
    split_files: Mapping[str, str] | None = option_field(None, Flag("--split", "", reader="split_files"))
    """One local file per split: ``{"train": path, ...}`` (``--split NAME=PATH``)."""
    text_columns: Sequence[str] | None = option_field(None, Flag(
        "--text-column", "Text column (twice for sentence pairs).", reader="list"))
    label_columns: Sequence[str] | None = option_field(None, Flag(
        "--label-column", "Label column(s); detected when omitted.", reader="list"))
    no_labels: bool = option_field(False, Flag("--no-labels", "Cache states of unlabelled data."))
    task_kind: str | None = option_field(None, Flag("--task-kind", "Override the label kind."))
    limit: int | None = option_field(None, Flag("--limit", "Keep the first N examples of each split."),
                                     check=at_least(1, whole=True, optional=True))
    """Keep the first ``limit`` examples of each split."""

    def __post_init__(self) -> None:
        # split_files are the data: the default dataset gives way to them (extract("minilm", split_files={...})),
        # while any other dataset beside them is refused when the data loads
        if self.split_files and self.dataset == DEFAULT_DATASET:
            object.__setattr__(self, "dataset", None)


@option_spec
@dataclass(frozen=True)
class StorageSpec:
    """What the cache keeps of each example, and how it is laid out on disk."""

    layers: LayerSpec | Sequence[LayerSpec] | None = option_field(None, Flag(
        "--layers", "States to keep: names or indices (0 = embeddings, -1 = last); comma-separated.", reader="layers"))
    """States to keep, names or indices (``0`` = embeddings, ``-1`` = last); ``None`` = all."""
    store: str = option_field(DEFAULT_STORE, Flag(
        "--store", "What to keep.", "tokens: every token's states; pooled: pooled vectors only."))
    """``tokens`` (every token's states, and the pooled vectors) or ``pooled`` (pooled vectors only)."""
    pooling: Sequence[str] = option_field(DEFAULT_POOLING, Flag(
        "--pooling", "Pooled vectors to store; comma-separated.", reader="list",
        show_default=", ".join(DEFAULT_POOLING)))
    storage_dtype: str = option_field(AUTO, Flag(
        "--storage-dtype", "On disk.",
        "auto: float16, or bfloat16 when the first batch's states exceed the float16 range; float16 clamps to "
        "±65,504; int8: one scale per token and state; int4: two values a byte, one scale per 32 values (an even "
        "width)."))
    mean_skip_first: bool = option_field(False, Flag(
        "--mean-skip-first", "Leave each example's first token (a decoder's BOS / attention sink) out of mean "
                             "pooling, here and in heads."))
    """Leave each example's first token out of mean pooling (a decoder's BOS / attention sink)."""
    shard_bytes: int = option_field(DEFAULT_SHARD_BYTES, Flag(
        "--shard-size", "Target bytes of states per shard file.", reader="size"), check=positive())
    project: int | None = option_field(None, Flag(
        "--project", "Store each state as its coordinates in K principal directions, fitted on a sample of the first "
                     "split (K below the model's width; `info` shows the variance kept)."), check=DIMENSIONS)
    """Store every state as its coordinates in K principal directions fitted on the first split (``--project K``;
    :mod:`layercache.store.projection`); None keeps the model's width."""
    project_basis: str = option_field("pca", Flag(
        "--project-basis", "How --project fits its basis.",
        "pca: the K directions of largest variance; standardized: PCA of the states scaled to unit variance per "
        "dimension, so a few high-variance dimensions do not take the basis (keeps more of a weak signal)."))
    """How that basis is fitted (``--project-basis``): ``pca`` (the covariance's top K eigenvectors) or
    ``standardized`` (the correlation matrix's: PCA of the states scaled to unit variance per dimension)."""
    compression: str = option_field("none", Flag(
        "--compression", "Lossless compression of the stored states (needs the hdf5plugin package).",
        "zstd: about 0.86 of the bytes of float16 states, 0.81 of int8's; every read decompresses them (a memory "
        "map cannot), so epochs over a cache larger than memory are slower."))
    """Lossless compression of the stored states (``--compression``): ``none`` or ``zstd``
    (:mod:`layercache.store.compression`; needs hdf5plugin)."""


@option_spec
@dataclass(frozen=True)
class BatchSpec:
    """How the backbone runs: forward batches, token windows, dtype and device."""

    batch_tokens: int = option_field(DEFAULT_BATCH_TOKENS, Flag("--batch-tokens", "Padded tokens per forward batch."))
    """Padded tokens per forward batch."""
    batch_size: int = option_field(DEFAULT_BATCH_SIZE, Flag("--batch-size", "Most sequences per forward batch."))
    """Most sequences per forward batch."""
    max_length: int | None = option_field(None, Flag("--max-length", "Token limit per window.",
                                                     show_default="the model's"))
    """Token limit per window (default: the model's)."""
    stride: int | None = option_field(None, Flag(
        "--stride", "Split long texts into windows overlapping by this many tokens instead of truncating."))
    """Split long texts into windows overlapping by this many tokens instead of truncating."""
    dtype: str = option_field(DEFAULT_FORWARD_DTYPE, Flag(
        "--dtype", "Forward-pass dtype.", "auto: float32 on CPU, bfloat16 or float16 on CUDA."))
    """Forward-pass dtype."""
    device: str = option_field(DEFAULT_DEVICE, DEVICE_FLAG)
    device_map: str | None = option_field(None, Flag(
        "--device-map", f"Split a model that fits no single device over the GPUs, CPU memory and disk: "
                        f"{', '.join(DEVICE_MAPS)} (accelerate's placements; needs pip install accelerate). Leave "
                        "--device at auto."))
    """Split a backbone larger than one device over GPUs, CPU memory and disk (``auto``, ...; needs accelerate):
    see :mod:`layercache.backbone.placement`. ``device`` stays ``auto`` then."""
    max_memory: Mapping[str, int | str] | None = option_field(None, Flag(
        "--max-memory", "With --device-map (refused without it): the most one device may hold, DEVICE=SIZE "
                        "(cuda:0=20GiB, cpu=60GiB); repeatable. What fits nowhere is offloaded to a temporary folder "
                        "on disk.", reader="max_memory"))
    """With ``device_map``: the most each device may hold, ``{"cuda:0": "20GiB", "cpu": "60GiB"}``."""
