"""bfloat16 storage: float32's range in 16 bits, kept in HDF5 as raw bit patterns.

HDF5 (and numpy) have no bfloat16, so bf16 states are stored as their raw 16-bit patterns in a
``uint16`` dataset tagged with ``attrs["dtype"] = "bfloat16"``; the reader turns them back into
float32 by shifting the bits into the top half of a float32 (exact: bf16 is truncated fp32).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .base import StorageCodec, register_codec

if TYPE_CHECKING:
    import torch


@register_codec
class BFloat16(StorageCodec):
    """Brain float: 8 exponent bits, 7 mantissa bits; uint16 bit patterns on disk."""

    name = "bfloat16"
    torch_dtype_name = "bfloat16"
    file_dtype = np.dtype(np.uint16)

    def file_view(self, values: torch.Tensor) -> np.ndarray:
        """The bf16 tensor's bit patterns as uint16 (no copy)."""
        import torch

        return values.view(torch.int16).numpy().view(np.uint16)

    def as_torch(self, array: np.ndarray) -> torch.Tensor:
        """uint16 bit patterns as a bf16 tensor sharing their memory."""
        import torch

        return torch.from_numpy(np.ascontiguousarray(array).view(np.int16)).view(torch.bfloat16)

    def decode(self, array: np.ndarray, scales: np.ndarray | None = None) -> np.ndarray:
        """Bit patterns shifted into the top half of float32 (exact)."""
        return (array.astype(np.uint32) << 16).view(np.float32)
