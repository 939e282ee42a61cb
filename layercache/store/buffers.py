"""Large host buffers whose pages are mapped up front, for reads that fill them at once.

A fresh ``np.empty`` of hundreds of MB costs one page fault per 4 KiB page the first time it is
written, and on a virtual machine a fault is expensive: mapping the pages in one call first
(Linux ``MAP_POPULATE``) makes a large read into fresh memory markedly faster (figures in
``benchmarks/README.md``). Elsewhere, and for small buffers, this is plain ``np.empty``.
"""

from __future__ import annotations

import math
import mmap

import numpy as np

#: Below this size a buffer is small enough that faulting it in page by page does not matter.
POPULATE_MIN_BYTES = 16 << 20


def populated_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised array like ``np.empty(shape, dtype)`` whose memory is already mapped in.

    The array owns an anonymous private mapping, released when the array (and every view of
    it) is garbage-collected.
    """
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    flags = getattr(mmap, "MAP_POPULATE", None)
    if nbytes < POPULATE_MIN_BYTES or flags is None:
        return np.empty(shape, dtype)
    try:
        region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | flags)
    except (OSError, ValueError):  # no room for the mapping at once: let the allocator try
        return np.empty(shape, dtype)
    return np.frombuffer(region, dtype).reshape(shape)
