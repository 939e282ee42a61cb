"""Every storage codec: what it writes, what it reads back, its range and its bytes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layercache.errors import ConfigError
from layercache.store.codecs import AUTO, check_storage_dtype, codec, codec_names
from layercache.store.codecs.float16 import FP16_MAX

NAMES = codec_names()
UNSCALED = [n for n in NAMES if not codec(n).scaled]


def test_the_built_in_codecs():
    assert NAMES == ["float16", "bfloat16", "float32", "int8"]
    assert [codec(n).bytes_per_value for n in NAMES] == [2, 2, 4, 1]
    assert [codec(n).limit for n in NAMES] == [FP16_MAX, None, None, None]
    assert [codec(n).scaled for n in NAMES] == [False, False, False, True]
    assert [codec(n).vector_bytes(384) for n in NAMES] == [768, 768, 1536, 384 + 4]  # int8: + a float32 scale


@pytest.mark.parametrize("name", UNSCALED)
def test_encode_then_decode_is_the_storage_precision(name):
    stored_as = codec(name)
    values = torch.randn(4, 7, 5) * 100  # (S, t, D)
    array, scales = stored_as.encode(values)
    assert scales is None
    assert array.dtype == stored_as.file_dtype and array.shape == (4, 7, 5)
    expected = values.to(stored_as.torch_dtype).float()
    np.testing.assert_array_equal(stored_as.decode(array), expected.numpy())
    torch.testing.assert_close(stored_as.widen(array), expected, rtol=0, atol=0)
    as_read = stored_as.as_torch(array)
    assert as_read.dtype == stored_as.torch_dtype and torch.equal(as_read.float(), expected)
    assert torch.equal(stored_as.round(values), values.to(stored_as.torch_dtype))


@pytest.mark.parametrize("name", UNSCALED)
def test_a_filled_buffer_is_written_as_encode_writes_it(name):
    stored_as = codec(name)
    values = torch.randn(2, 9, 3)
    buffer = stored_as.empty(2, 9, 3)
    buffer.copy_(values)
    np.testing.assert_array_equal(stored_as.file_view(buffer), stored_as.encode(values)[0])


def test_float16_clamps_beyond_its_range_instead_of_writing_inf():
    values = torch.tensor([1.0, 7e4, -1e6, 65504.0])
    array, _ = codec("float16").encode(values)
    assert np.isfinite(array).all()
    np.testing.assert_array_equal(array, np.array([1.0, FP16_MAX, -FP16_MAX, FP16_MAX], np.float16))
    assert np.isfinite(codec("bfloat16").decode(codec("bfloat16").encode(values)[0])).all()


# --- int8: symmetric absmax scale per vector -------------------------------------------------------
def _heavy_tailed(*shape: int, seed: int = 0) -> torch.Tensor:
    """Like hidden states: mostly small values, a few dimensions hundreds of times larger, one zero vector."""
    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(*shape, generator=gen)
    values[..., 3] *= 300.0  # an outlier dimension (a decoder's massive activation)
    values[0, 0] = 0.0
    return values


def test_int8_is_within_half_a_step_of_every_value():
    int8 = codec("int8")
    values = _heavy_tailed(6, 50, 64)  # (S, t, D)
    stored, scales = int8.quantize(values)
    assert stored.dtype == torch.int8 and scales.shape == (6, 50, 1) and scales.dtype == torch.float32
    assert int(stored.abs().max()) == 127 and int(stored.min()) >= -127  # symmetric: -128 never used
    back = int8.dequantize(stored, scales)  # (S, t, D) float32
    bound = int8.error_bound(values)  # (S, t, 1) = max|x| / 254
    torch.testing.assert_close(bound, values.abs().amax(-1, keepdim=True) / 254)
    assert bool(((back - values).abs() <= bound * (1 + 1e-6)).all())
    assert torch.equal(back[0, 0], torch.zeros(64))  # the zero vector stays zero (scale 0)
    # each vector's largest magnitude is stored exactly (it is 127 steps)
    torch.testing.assert_close(back.abs().amax(-1), values.abs().amax(-1), rtol=1e-6, atol=0)
    assert torch.equal(int8.round(values), back)


def test_int8_encode_decode_and_widen_agree_with_quantize():
    int8 = codec("int8")
    values = _heavy_tailed(3, 11, 8, seed=1)
    array, scales = int8.encode(values)
    assert array.dtype == np.int8 and scales.dtype == np.float32 and scales.shape == (3, 11, 1)
    expected = int8.dequantize(*int8.quantize(values))
    np.testing.assert_array_equal(int8.decode(array, scales), expected.numpy())
    assert torch.equal(int8.widen(array, scales), expected)
    # reading a subset of vectors with the same index reads their scales: decode still agrees
    np.testing.assert_array_equal(int8.decode(array[:, [4, 2]], scales[:, [4, 2]]), expected[:, [4, 2]].numpy())
    with pytest.raises(ValueError, match="need their scales"):
        int8.decode(array)


def test_int8_keeps_small_dimensions_beside_an_outlier_to_a_step_of_their_vector():
    """The cost of a per-vector scale: an outlier coarsens its own vector only, never another."""
    int8 = codec("int8")
    calm, loud = torch.randn(1, 32), torch.randn(1, 32)
    loud[0, 0] = 5000.0
    back = int8.round(torch.cat([calm, loud]))  # (2, 32)
    assert float((back[0] - calm[0]).abs().max()) <= float(calm.abs().max()) / 254 * (1 + 1e-6)
    assert float((back[1] - loud[0]).abs().max()) <= 5000.0 / 254 * (1 + 1e-6)


def test_unknown_storage_dtypes_are_one_sentence():
    with pytest.raises(ConfigError, match="Storage dtype 'int3' is not supported; choose one of float16, bfloat16"):
        codec("int3")
    assert check_storage_dtype(AUTO, allow_auto=True) == AUTO
    with pytest.raises(ConfigError, match="choose one of float16"):
        check_storage_dtype(AUTO)
