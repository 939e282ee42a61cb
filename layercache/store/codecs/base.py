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
differs. A codec that stores values beside the states (an int8 codec's scales) would add them
here, as methods every writer and reader calls.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from ...core.registry import Registry
from ...errors import ConfigError

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

    @property
    def bytes_per_value(self) -> int:
        """Bytes one stored value takes on disk."""
        return int(np.dtype(self.file_dtype).itemsize)

    def empty(self, *shape: int) -> torch.Tensor:
        """A host tensor of ``shape`` in the storage precision (for the extraction's packer to fill)."""
        return torch.empty(shape, dtype=self.torch_dtype)

    def clamp(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` with every magnitude above :attr:`limit` clamped to it (unchanged when there is none)."""
        return values if self.limit is None else values.clamp(-self.limit, self.limit)

    def file_view(self, values: torch.Tensor) -> np.ndarray:
        """The numpy array written to disk for a host tensor already in the storage precision (no copy)."""
        return values.numpy()

    def encode(self, values: torch.Tensor) -> np.ndarray:
        """A float tensor (any device) as the array written to disk: clamped, cast, on the host."""
        return self.file_view(self.clamp(values).to(self.torch_dtype).cpu().contiguous())

    def as_torch(self, array: np.ndarray) -> torch.Tensor:
        """An array read from a shard as a tensor in the storage precision, sharing its memory."""
        return torch.from_numpy(np.ascontiguousarray(array))

    def decode(self, array: np.ndarray) -> np.ndarray:
        """An array read from a shard as float32 numpy."""
        return array.astype(np.float32, copy=False)

    def widen(self, array: np.ndarray) -> torch.Tensor:
        """Like :meth:`decode`, as a torch tensor, widened by torch (whose cast uses every core, numpy's one)."""
        return self.as_torch(array).float()

    def round(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` in the storage precision, as a cache would serve them (what a live feed computes on)."""
        return values.to(self.torch_dtype)


CODECS: Registry[type[StorageCodec]] = Registry("storage dtype", "layercache.store.codecs",
                                                first=("float16", "bfloat16", "float32"), skip=("base",))
"""Every storage codec, by name (the modules of this package register themselves)."""
_INSTANCES: dict[str, StorageCodec] = {}


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


def codec(name: str) -> StorageCodec:
    """The codec of storage dtype ``name`` (one instance per name); an unknown name is a :class:`ConfigError`."""
    found = _INSTANCES.get(name)
    if found is None:
        check_storage_dtype(name)
        found = _INSTANCES[name] = CODECS.lookup(name)()
    return found
