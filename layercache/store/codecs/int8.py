"""int8 storage: a quarter of float32's bytes, with one float32 scale per vector (symmetric absmax).

Each stored vector, one token's state (or one example's pooled state), is quantised on its own:
its scale is its largest magnitude over 127, and each value is stored as the nearest integer
multiple of that scale in [-127, 127]. A value read back is ``q * scale``, within half a step
(``scale / 2``, 0.4 % of the vector's largest magnitude) of what the model produced, and the range
adapts to every vector, so nothing is ever clamped: a decoder's massive activations only make that
vector's step coarser. A scale costs 4 bytes next to the vector's D bytes (1 % at D = 384).

The scales are dequantised where the head computes (:meth:`Int8.dequantize`, on the GPU when training
runs there), so the bus and the page cache carry one byte per value. The per-state statistics of a
cache are those of the model's values before quantisation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .base import StorageCodec, register_codec

if TYPE_CHECKING:
    import torch

LEVELS = 127
"""Largest stored magnitude: symmetric, so -128 is never used and zero is exact."""


@register_codec
class Int8(StorageCodec):
    """Symmetric per-vector int8: values ``round(x / s)`` with ``s = max|x| / 127`` per vector, scales as float32."""

    name = "int8"
    torch_dtype_name = "int8"
    file_dtype = np.dtype(np.int8)
    scale_dtype = "float32"

    def quantize(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Float ``values (..., D)`` -> int8 ``(..., D)`` and float32 scales ``(..., 1)``, on their device."""
        import torch

        values = values.float()
        scales = values.abs().amax(-1, keepdim=True) / LEVELS  # (..., 1)
        # An all-zero vector has scale 0 and stores zeros.
        inverse = torch.where(scales > 0, 1.0 / scales, torch.zeros_like(scales))  # (..., 1)
        return torch.round(values * inverse).clamp_(-LEVELS, LEVELS).to(torch.int8), scales

    def dequantize(self, stored: torch.Tensor, scales: torch.Tensor | None) -> torch.Tensor:
        """int8 ``(..., D)`` times scales ``(..., 1)`` as float32, on the values' device."""
        import torch

        return stored.float().mul_(self.require_scales(scales).to(stored.device, torch.float32))

    def decode(self, array: np.ndarray, scales: np.ndarray | None = None) -> np.ndarray:
        """int8 values ``(..., D)`` and their scales ``(..., 1)`` as float32 numpy."""
        return array.astype(np.float32) * np.asarray(self.require_scales(scales), np.float32)

    def round(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` quantised and dequantised: float32, exactly what an int8 cache serves."""
        return self.dequantize(*self.quantize(values))

    def error_bound(self, values: torch.Tensor) -> torch.Tensor:
        """Half a step per vector: ``max|x| / 254`` ``(..., 1)`` (float32 rounding of the scale aside)."""
        return values.abs().amax(-1, keepdim=True).float() / (2 * LEVELS)
