"""Every storage codec: what it writes, what it reads back, its range and its bytes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layercache.errors import ConfigError
from layercache.store.codecs import AUTO, check_storage_dtype, codec, codec_names
from layercache.store.codecs.float16 import FP16_MAX

NAMES = codec_names()


def test_the_built_in_codecs():
    assert NAMES == ["float16", "bfloat16", "float32"]
    assert [codec(n).bytes_per_value for n in NAMES] == [2, 2, 4]
    assert [codec(n).limit for n in NAMES] == [FP16_MAX, None, None]


@pytest.mark.parametrize("name", NAMES)
def test_encode_then_decode_is_the_storage_precision(name):
    stored_as = codec(name)
    values = torch.randn(4, 7, 5) * 100  # (S, t, D)
    array = stored_as.encode(values)
    assert array.dtype == stored_as.file_dtype and array.shape == (4, 7, 5)
    expected = values.to(stored_as.torch_dtype).float()
    np.testing.assert_array_equal(stored_as.decode(array), expected.numpy())
    torch.testing.assert_close(stored_as.widen(array), expected, rtol=0, atol=0)
    as_read = stored_as.as_torch(array)
    assert as_read.dtype == stored_as.torch_dtype and torch.equal(as_read.float(), expected)
    assert torch.equal(stored_as.round(values), values.to(stored_as.torch_dtype))


@pytest.mark.parametrize("name", NAMES)
def test_a_filled_buffer_is_written_as_encode_writes_it(name):
    stored_as = codec(name)
    values = torch.randn(2, 9, 3)
    buffer = stored_as.empty(2, 9, 3)
    buffer.copy_(values)
    np.testing.assert_array_equal(stored_as.file_view(buffer), stored_as.encode(values))


def test_float16_clamps_beyond_its_range_instead_of_writing_inf():
    values = torch.tensor([1.0, 7e4, -1e6, 65504.0])
    array = codec("float16").encode(values)
    assert np.isfinite(array).all()
    np.testing.assert_array_equal(array, np.array([1.0, FP16_MAX, -FP16_MAX, FP16_MAX], np.float16))
    assert np.isfinite(codec("bfloat16").decode(codec("bfloat16").encode(values))).all()


def test_unknown_storage_dtypes_are_one_sentence():
    with pytest.raises(ConfigError, match="Storage dtype 'int3' is not supported; choose one of float16, bfloat16"):
        codec("int3")
    assert check_storage_dtype(AUTO, allow_auto=True) == AUTO
    with pytest.raises(ConfigError, match="choose one of float16"):
        check_storage_dtype(AUTO)
