"""float16 storage: half the bytes of float32, and a range of +-65,504, beyond which values are clamped.

float16 storage never holds inf: a finite value beyond its range (decoders' "massive activations"
reach a third of it, larger models pass it) is clamped to +-FP16_MAX, and extraction counts how
many were (see :mod:`layercache.extraction.packing`). An inf on disk would poison every mean, norm
and loss that reads it; a clamped value is only wrong in magnitude, and the count says so.
"""

from __future__ import annotations

import numpy as np

from .base import StorageCodec, register_codec

FP16_MAX = 65504.0
"""The largest finite float16."""


@register_codec
class Float16(StorageCodec):
    """IEEE half precision, stored as HDF5 float16."""

    name = "float16"
    torch_dtype_name = "float16"
    file_dtype = np.dtype(np.float16)
    limit = FP16_MAX
