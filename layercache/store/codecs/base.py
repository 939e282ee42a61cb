"""The storage codec base class and its registry.

A codec fixes five things about a storage dtype:

- the precision states have once read (``torch_dtype``, named by ``torch_dtype_name``: what the cache
  feed serves and mixers widen, what a live feed rounds to so that cache and live batches agree);
- the array a shard stores (``file_dtype``; HDF5 and numpy have no bfloat16, so its codec stores
  the raw 16-bit patterns as ``uint16``), and its width for a vector of D values
  (:meth:`~StorageCodec.stored_width`: D, or D / 2 for int4's two values a byte);
- the largest magnitude it holds (``limit``): a finite value beyond it would become inf, so it is
  clamped and counted (float16's +-65,504) instead;
- the scales stored beside the values, if any (``scale_dtype``, :meth:`~StorageCodec.scales_width`);
- the conversions between them (:meth:`~StorageCodec.encode`, :meth:`~StorageCodec.file_view`,
  :meth:`~StorageCodec.as_torch`, :meth:`~StorageCodec.decode`, :meth:`~StorageCodec.widen`).

The defaults are those of a dtype numpy and HDF5 know (float16, float32); a codec overrides what
differs.

Reading the codecs' names and widths imports no torch (``layercache --help`` lists the storage dtypes):
a codec names its torch dtype (``torch_dtype_name = "float16"``), and torch is imported where a
codec converts values (:attr:`~StorageCodec.torch_dtype` and the methods on tensors).

A *scaled* codec stores scales beside the values: int8 one float32 scale per vector, int4 one
bfloat16 scale per group of 32 values (per token and state for token states, per example and
state for pooled vectors). In a shard the scales of dataset ``X`` (``hidden``, ``pooled/mean``)
are the dataset :func:`scales_dataset` ``(X)`` of shape ``(N, S, scales_width(D))``, stored in
the codec named by ``scale_dtype`` (so the memory-mapped reads and the bfloat16 bit patterns work
for scales as for values), so that a read indexed like the values, ``[rows, states, :]``, returns
the scales of exactly the vectors read. Everything that writes or reads states passes the scales
along (``None`` for an unscaled codec) and widens through :meth:`~StorageCodec.decode` or
:meth:`~StorageCodec.dequantize`, which apply them; nothing outside a codec assumes a scale's
count, dtype or the stored width.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ...core.option_names import option
from ...core.registry import Registry
from ...errors import ConfigError

if TYPE_CHECKING:
    import torch

AUTO = "auto"
"""What extraction resolves before writing: float16, or bfloat16 when a probe batch's states exceed the
float16 range. Never recorded in a manifest."""


class StorageCodec:
    """How one storage dtype stores state values and reads them back; subclasses set the class attributes."""

    name: ClassVar[str]
    """What the manifest records and ``--storage-dtype`` takes."""
    torch_dtype_name: ClassVar[str]
    """The name of :attr:`torch_dtype` in torch (``torch.<name>``), so that a codec is declared without torch."""
    file_dtype: ClassVar[np.dtype]
    """The HDF5 dataset's dtype."""
    limit: ClassVar[float | None] = None
    """Largest magnitude stored as is; larger finite values are clamped to +-limit and counted. None: no limit."""
    scale_dtype: ClassVar[str | None] = None
    """The storage dtype (a codec's name) of the scales stored beside the values; None: no scales."""

    @property
    def torch_dtype(self) -> torch.dtype:
        """The stored values' precision in torch: what the extraction's host buffers hold and a memory map reads
        (for an unscaled codec also the precision of states once read)."""
        import torch  # here, so that reading the codecs' names and widths never loads torch

        dtype: torch.dtype = getattr(torch, self.torch_dtype_name)
        return dtype

    @property
    def scaled(self) -> bool:
        """Whether scales are stored beside the values (see the module docstring)."""
        return self.scale_dtype is not None

    @property
    def scale_codec(self) -> StorageCodec:
        """The codec the scales are stored in (float32 for int8, bfloat16 for int4); only for a scaled codec."""
        if self.scale_dtype is None:
            raise ValueError(f"{self.name} stores no scales")
        return codec(self.scale_dtype)

    @property
    def bytes_per_value(self) -> float:
        """Bytes one stored value takes on disk (0.5 for int4), its scales aside."""
        return int(np.dtype(self.file_dtype).itemsize)

    def stored_width(self, dim: int) -> int:
        """Width of the stored array for vectors of ``dim`` values (:meth:`width_problem` says which it takes)."""
        return dim

    def scales_width(self, dim: int) -> int:
        """Scales stored per vector of ``dim`` values: 0 for an unscaled codec."""
        return 1 if self.scaled else 0

    def width_problem(self, dim: int) -> str | None:
        """Why vectors of ``dim`` values cannot be stored (a clause), or None when they can."""
        return None

    def values_bytes(self, dim: int) -> int:
        """Bytes of one stored vector's values on disk."""
        return self.stored_width(dim) * int(np.dtype(self.file_dtype).itemsize)

    def scales_bytes(self, dim: int) -> int:
        """Bytes of one stored vector's scales on disk (0 for an unscaled codec)."""
        return self.scales_width(dim) * self.scale_codec.values_bytes(1) if self.scaled else 0

    def vector_bytes(self, dim: int) -> int:
        """Bytes one stored vector of ``dim`` values takes on disk, its scales included."""
        return self.values_bytes(dim) + self.scales_bytes(dim)

    def cut_bytes(self, dim: int) -> int:
        """Bytes a stored vector of ``dim`` values counts for where shards and feed blocks are cut: its own, but at
        least a float16 vector's. So an int8 (or int4) cache is cut where its float16 twin is: the same shards,
        the same blocks, and for a seed the same batches, so a head trained on either differs only by the
        rounding."""
        return max(self.vector_bytes(dim), 2 * dim)

    def quantize(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Float ``values (..., D)`` as stored, on their device: the values ``(..., stored_width(D))`` in
        :attr:`torch_dtype` and the scales ``(..., scales_width(D))`` in their codec's precision (``None`` for
        an unscaled codec)."""
        return self.clamp(values).to(self.torch_dtype), None

    def dequantize(self, stored: torch.Tensor, scales: torch.Tensor | None) -> torch.Tensor:
        """Stored values ``(..., stored_width(D))`` (and their scales) as float32 ``(..., D)``, on their device."""
        return stored.float()

    def require_scales(self, scales):
        """``scales``, or :class:`ValueError` when a scaled codec's values come without them (a caller's bug)."""
        if scales is None:
            raise ValueError(f"{self.name} states need their scales to be read")
        return scales

    def served(self, stored: torch.Tensor, scales: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What a cache feed's batch carries for values gathered as stored: ``(states (..., D), scales or None)``.

        As stored, scales beside (int8's are applied where a head widens the states, so one byte a value
        crosses to the device); a codec whose values a head cannot widen by one product (int4's packed
        nibbles) decodes them here to float32, scales None.
        """
        return stored, scales

    def error_bound(self, values: torch.Tensor) -> torch.Tensor:
        """Most a stored value of float ``values (..., D)`` may differ from it: a tensor that broadcasts against
        ``values``, ``(..., 1)`` per vector or ``(..., D)`` per value.

        Half a unit in the last place of the storage precision at each vector's largest magnitude
        (a bound on rounding to nearest; values clamped at :attr:`limit` differ by more, and are counted).
        """
        import torch

        finfo = torch.finfo(self.torch_dtype)
        return values.abs().amax(-1, keepdim=True).float() * finfo.eps / 2

    def empty(self, *shape: int) -> torch.Tensor:
        """A host tensor for vectors of ``shape`` (``(..., D)``) as stored, ``(..., stored_width(D))`` (for the
        extraction's packer to fill)."""
        import torch

        return torch.empty((*shape[:-1], self.stored_width(shape[-1])), dtype=self.torch_dtype)

    def empty_scales(self, *shape: int) -> torch.Tensor | None:
        """A host tensor for the scales of vectors of ``shape`` (``(..., D)``): ``(..., scales_width(D))``, or
        None for an unscaled codec."""
        if not self.scaled:
            return None
        return self.scale_codec.empty(*shape[:-1], self.scales_width(shape[-1]))

    def clamp(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` with every magnitude above :attr:`limit` clamped to it (unchanged when there is none)."""
        return values if self.limit is None else values.clamp(-self.limit, self.limit)

    def file_view(self, values: torch.Tensor) -> np.ndarray:
        """The numpy array written to disk for a host tensor already in the storage precision (no copy)."""
        return values.numpy()

    def scales_view(self, scales: torch.Tensor | None) -> np.ndarray | None:
        """The numpy array written to disk for a host tensor of scales (no copy; None stays None)."""
        return None if scales is None else self.scale_codec.file_view(scales)

    def encode(self, values: torch.Tensor) -> tuple[np.ndarray, np.ndarray | None]:
        """A float tensor ``(..., D)`` (any device) as written to disk, on the host: the values array, and the
        scales array or ``None`` (see :meth:`quantize`)."""
        stored, scales = self.quantize(values)
        return self.file_view(stored.cpu().contiguous()), self.scales_view(
            None if scales is None else scales.cpu().contiguous())

    def as_torch(self, array: np.ndarray) -> torch.Tensor:
        """An array read from a shard as a tensor in the storage precision, sharing its memory."""
        import torch

        return torch.from_numpy(np.ascontiguousarray(array))

    def scales_as_torch(self, scales: np.ndarray | None) -> torch.Tensor | None:
        """Scales read from a shard as a tensor in their precision, sharing their memory (None stays None)."""
        return None if scales is None else self.scale_codec.as_torch(scales)

    def decode(self, array: np.ndarray, scales: np.ndarray | None = None) -> np.ndarray:
        """An array read from a shard (and its scales, read with the same index) as float32 numpy ``(..., D)``."""
        return array.astype(np.float32, copy=False)

    def widen(self, array: np.ndarray, scales: np.ndarray | None = None) -> torch.Tensor:
        """Like :meth:`decode`, as a torch tensor, widened by torch (whose cast uses every core, numpy's one)."""
        return self.dequantize(self.as_torch(array), self.scales_as_torch(scales))

    def round(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` as a cache would serve them (what a live feed computes on): the storage precision, or
        for a scaled codec the dequantised float32 of what it would store."""
        return values.to(self.torch_dtype)


CODECS: Registry[type[StorageCodec]] = Registry("storage dtype", "layercache.store.codecs",
                                                first=("float16", "bfloat16", "float32", "int8", "int4"),
                                                skip=("base",))
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


def check_width(storage_dtype: str, width: int, *, projected: bool) -> None:
    """Refuse (:class:`ConfigError`, one sentence) states ``width`` wide that ``storage_dtype`` cannot store;
    ``projected``: the width is a ``project=K`` (else the model's)."""
    problem = codec(storage_dtype).width_problem(width)
    if problem is None:
        return
    fix = (f"choose another {option('project')}" if projected
           else f"choose another {option('storage_dtype')}, or a {option('project')} it can store")
    raise ConfigError(f"{option('storage_dtype', storage_dtype)} cannot store states {width} wide ({problem}); "
                      f"{fix}.")


POOLED_BESIDE_SCALED = "float16"
"""The dtype of the pooled vectors stored beside scaled (int8, int4) token states (:func:`pooled_dtype_for`)."""


def pooled_dtype_for(storage_dtype: str, store: str) -> str:
    """The on-disk dtype of a cache's pooled vectors: ``storage_dtype``, except beside scaled (int8, int4) token
    states: float16.

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
