"""Populated buffers behave like np.empty."""

import numpy as np

from layercache.store.buffers import POPULATE_MIN_BYTES, populated_empty


def test_large_and_small_buffers_are_writable_arrays_of_the_shape_asked_for():
    for shape in [(3, 5), (POPULATE_MIN_BYTES // 8 + 1, 2)]:
        a = populated_empty(shape, np.float32)
        assert a.shape == shape and a.dtype == np.float32 and a.flags.writeable and a.flags.c_contiguous
        a[...] = 1.5
        assert float(a.sum()) == 1.5 * a.size
        view = a[1:]
        del a
        view[...] = 2.0  # a view keeps the mapping alive
        assert float(view.min()) == 2.0
