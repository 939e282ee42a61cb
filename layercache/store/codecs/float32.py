"""float32 storage: the forward pass's values exactly, at twice the bytes of the 16-bit codecs."""

from __future__ import annotations

import numpy as np

from .base import StorageCodec, register_codec


@register_codec
class Float32(StorageCodec):
    """IEEE single precision, stored as HDF5 float32."""

    name = "float32"
    torch_dtype_name = "float32"
    file_dtype = np.dtype(np.float32)
