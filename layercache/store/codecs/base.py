"""The storage codec base class and its registry.

A codec fixes four things about a storage dtype:

- the precision states have once read (``torch_dtype``: what the cache feed serves and mixers
  widen, what a live feed rounds to so that cache and live batches agree);
- the array a shard stores (``file_dtype``; HDF5 and numpy have no bfloat16, so its codec stores
  the raw 16-bit patterns as ``uint16``);
- the largest magnitude it holds (``limit``): a finite value beyond it would become inf, so it is
  clamped and counted (float16's +-65,504) instead;
- the conversions between them (:meth:`~StorageCodec.encode`, :meth:`~StorageCodec.file_view`,
  :meth:`~StorageCodec.as_torch`, :meth:`~StorageCodec.decode`, :meth:`~StorageCodec.widen`).

The defaults are those of a dtype numpy and HDF5 know (float16, float32); a codec overrides what
differs.

A *scaled* codec (int8) stores one float32 scale per vector beside the values: per token and state
for token states, per example and state for pooled vectors. In a shard the scales of dataset
``X`` (``hidden``, ``pooled/mean``) are the dataset :func:`scales_dataset` ``(X)`` of shape
``(N, S, 1)``, so that a read indexed like the values, ``[rows, states, :]``, returns scales
``(..., S', 1)`` that broadcast over the values ``(..., S', D)``. Everything that writes or reads
states passes the scales along (``None`` for an unscaled codec) and widens through
:meth:`~StorageCodec.decode` or :meth:`~StorageCodec.dequantize`, which apply them.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from ...core.registry import Registry
from ...errors import ConfigError

SCALE_BYTES = 4
"""Bytes of one stored scale (float32)."""

AUTO = "auto"
"""What extraction resolves before writing: float16, or bfloat16 when a probe batch's states exceed the
float16 range. Never recorded in a manifest."""


class StorageCodec:
    """How one storage dtype stores state values and reads them back; subclasses set the class attributes."""

    name: ClassVar[str]
    """What the manifest records and ``--storage-dtype`` takes."""
    torch_dtype: ClassVar[torch.dtype]
    """The precision of states once read, and of the host buffers extraction fills."""
    file_dtype: ClassVar[np.dtype]
    """The HDF5 dataset's dtype."""
    limit: ClassVar[float | None] = None
    """Largest magnitude stored as is; larger finite values are clamped to +-limit and counted. None: no limit."""
    scaled: ClassVar[bool] = False
    """Whether a float32 scale per vector is stored beside the values (see the module docstring)."""

    @property
    def bytes_per_value(self) -> int:
        """Bytes one stored value takes on disk."""
        return int(np.dtype(self.file_dtype).itemsize)

    def vector_bytes(self, dim: int) -> int:
        """Bytes one stored vector of ``dim`` values takes on disk, its scale included."""
        return dim * self.bytes_per_value + (SCALE_BYTES if self.scaled else 0)

    def cut_bytes(self, dim: int) -> int:
        """Bytes a stored vector of ``dim`` values counts for where shards and feed blocks are cut: its own, but at
        least a float16 vector's. So an int8 cache is cut where its float16 twin is: the same shards, the same
        blocks, and for a seed the same batches, so a head trained on either differs only by the rounding."""
        return max(self.vector_bytes(dim), 2 * dim)

    def quantize(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Float ``values (..., D)`` as stored, on their device: the storage precision ``(..., D)`` and the
        float32 scales ``(..., 1)`` (``None`` for an unscaled codec)."""
        return self.clamp(values).to(self.torch_dtype), None

    def dequantize(self, stored: torch.Tensor, scales: torch.Tensor | None) -> torch.Tensor:
        """Stored values ``(..., D)`` (and their scales ``(..., 1)``) as float32, on their device."""
        return stored.float()

    def error_bound(self, values: torch.Tensor) -> torch.Tensor:
        """Most a stored value of each vector of float ``values (..., D)`` may differ from it: ``(..., 1)``.

        Half a unit in the last place of the storage precision at each vector's largest magnitude
        (a bound on rounding to nearest; values clamped at :attr:`limit` differ by more, and are counted).
        """
        finfo = torch.finfo(self.torch_dtype)
        return values.abs().amax(-1, keepdim=True).float() * finfo.eps / 2

    def empty(self, *shape: int) -> torch.Tensor:
        """A host tensor of ``shape`` in the storage precision (for the extraction's packer to fill)."""
        return torch.empty(shape, dtype=self.torch_dtype)

    def clamp(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` with every magnitude above :attr:`limit` clamped to it (unchanged when there is none)."""
        return values if self.limit is None else values.clamp(-self.limit, self.limit)

    def file_view(self, values: torch.Tensor) -> np.ndarray:
        """The numpy array written to disk for a host tensor already in the storage precision (no copy)."""
        return values.numpy()

    def encode(self, values: torch.Tensor) -> tuple[np.ndarray, np.ndarray | None]:
        """A float tensor ``(..., D)`` (any device) as written to disk, on the host: the values array, and the
        float32 scales ``(..., 1)`` or ``None`` (see :meth:`quantize`)."""
        stored, scales = self.quantize(values)
        return self.file_view(stored.cpu().contiguous()), None if scales is None else scales.cpu().numpy()

    def as_torch(self, array: np.ndarray) -> torch.Tensor:
        """An array read from a shard as a tensor in the storage precision, sharing its memory."""
        return torch.from_numpy(np.ascontiguousarray(array))

    def decode(self, array: np.ndarray, scales: np.ndarray | None = None) -> np.ndarray:
        """An array read from a shard (and its scales, read with the same index) as float32 numpy."""
        return array.astype(np.float32, copy=False)

    def widen(self, array: np.ndarray, scales: np.ndarray | None = None) -> torch.Tensor:
        """Like :meth:`decode`, as a torch tensor, widened by torch (whose cast uses every core, numpy's one)."""
        return self.dequantize(self.as_torch(array), None if scales is None else torch.from_numpy(scales))

    def round(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` as a cache would serve them (what a live feed computes on): the storage precision, or
        for a scaled codec the dequantised float32 of what it would store."""
        return values.to(self.torch_dtype)


CODECS: Registry[type[StorageCodec]] = Registry("storage dtype", "layercache.store.codecs",
                                                first=("float16", "bfloat16", "float32", "int8"), skip=("base",))
"""Every storage codec, by name (the modules of this package register themselves)."""
_INSTANCES: dict[str, StorageCodec] = {}


def scales_dataset(name: str) -> str:
    """Where a shard stores the scales of state dataset ``name``: ``scales/hidden``, ``scales/pooled/mean``."""
    return f"scales/{name}"


def register_codec(cls: type[StorageCodec]) -> type[StorageCodec]:
    """Class decorator: list a codec under its ``name``."""
    return CODECS.add(cls.name, cls)


def codec_names() -> list[str]:
    """Every storage dtype a cache may record, in order (for ``--storage-dtype`` and the manifest schema)."""
    return CODECS.names()


def check_storage_dtype(name: str, *, allow_auto: bool = False) -> str:
    """Return ``name`` if it is a storage dtype (or ``auto`` when allowed), else raise :class:`ConfigError`."""
    choices = ((AUTO,) if allow_auto else ()) + tuple(codec_names())
    if name not in choices:
        raise ConfigError(f"Storage dtype {name!r} is not supported; choose one of {', '.join(choices)}.")
    return name


POOLED_BESIDE_SCALED = "float16"
"""The dtype of the pooled vectors stored beside scaled (int8) token states (:func:`pooled_dtype_for`)."""


def pooled_dtype_for(storage_dtype: str, store: str) -> str:
    """The on-disk dtype of a cache's pooled vectors: ``storage_dtype``, except beside int8 token states: float16.

    Why: a pooled vector is a mean over an example's tokens, read as one vector by every probe and pooled head of a
    sequence task, so its rounding does not average out as token states' does in a mixer; and there is one per
    example, against one per token for the token states, so float16 costs about ``1 / mean length`` of the cache
    (1.5 % on SST-2). A pooled-only cache (``store == "pooled"``) keeps what was asked: the vectors are all it holds.
    """
    if store != "pooled" and codec(storage_dtype).scaled:
        return POOLED_BESIDE_SCALED
    return storage_dtype


def codec(name: str) -> StorageCodec:
    """The codec of storage dtype ``name`` (one instance per name); an unknown name is a :class:`ConfigError`."""
    found = _INSTANCES.get(name)
    if found is None:
        check_storage_dtype(name)
        found = _INSTANCES[name] = CODECS.lookup(name)()
    return found
