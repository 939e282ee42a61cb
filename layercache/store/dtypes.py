"""Storage dtypes: how a state tensor becomes bytes in a shard and comes back.

HDF5 (and numpy) have no bfloat16, so bf16 states are stored as their raw 16-bit patterns in a
``uint16`` dataset tagged with ``attrs["dtype"] = "bfloat16"``; the reader turns them back into
float32 by shifting the bits into the top half of a float32 (exact: bf16 is truncated fp32).

float16 storage never holds inf: a finite value beyond its range (decoders' "massive activations"
reach a third of it, larger models pass it) is clamped to +-FP16_MAX, and extraction counts how
many were (see :mod:`layercache.extraction.packing`). An inf on disk would poison every mean, norm
and loss that reads it; a clamped value is only wrong in magnitude, and the count says so.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import ConfigError
from .schema import STORAGE_DTYPE_NAMES

STORAGE_DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in STORAGE_DTYPE_NAMES}
"""Storage dtype name -> torch dtype (the names the manifest may record)."""
BYTES_PER_VALUE = {name: dtype.itemsize for name, dtype in STORAGE_DTYPES.items()}
FP16_MAX = 65504.0
AUTO = "auto"
"""What extraction resolves before writing: float16, or bfloat16 when a probe batch's states exceed the
float16 range. Never recorded in a manifest."""


def check_storage_dtype(name: str, *, allow_auto: bool = False) -> str:
    """Return ``name`` if it is a storage dtype (or ``auto`` when allowed), else raise :class:`ConfigError`."""
    choices = ((AUTO,) if allow_auto else ()) + tuple(STORAGE_DTYPES)
    if name not in choices:
        raise ConfigError(f"Storage dtype {name!r} is not supported; choose one of {', '.join(choices)}.")
    return name


def to_storage(values: torch.Tensor, dtype: str) -> np.ndarray:
    """Convert a float tensor to the numpy array written to disk for ``dtype`` (float16: clamped to +-FP16_MAX)."""
    if dtype == "float16":
        values = values.clamp(-FP16_MAX, FP16_MAX)  # a finite value beyond the range must not become inf
    cast = values.to(STORAGE_DTYPES[dtype])
    if dtype == "bfloat16":
        return cast.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)
    return cast.cpu().numpy()


def h5_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of the HDF5 dataset for ``dtype`` (``uint16`` bit patterns for bfloat16)."""
    return np.dtype(np.uint16) if dtype == "bfloat16" else np.dtype(dtype)


def from_storage(array: np.ndarray, dtype: str) -> np.ndarray:
    """Turn an array read from a shard back into float32."""
    if dtype == "bfloat16":
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array.astype(np.float32, copy=False)


def as_torch(array: np.ndarray, dtype: str) -> torch.Tensor:
    """An array read from a shard as a torch tensor in its stored precision (float16, bfloat16 or
    float32), sharing its memory: consumers widen it when (and where) they compute."""
    array = np.ascontiguousarray(array)
    if dtype == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def storage_to_tensor(array: np.ndarray, dtype: str) -> torch.Tensor:
    """Like :func:`from_storage`, but the widening to float32 runs in torch on the half-width array:
    torch's cast uses every core, numpy's one."""
    if dtype == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(array).view(np.int16)).view(torch.bfloat16).float()
    return torch.from_numpy(np.ascontiguousarray(array)).float()
