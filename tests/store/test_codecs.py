"""Every storage codec: what it writes, what it reads back, its range and its bytes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layercache.errors import ConfigError
from layercache.store.codecs import AUTO, check_storage_dtype, check_width, codec, codec_names
from layercache.store.codecs.float16 import FP16_MAX
from layercache.store.codecs.int4 import GROUP

NAMES = codec_names()
UNSCALED = [n for n in NAMES if not codec(n).scaled]


def test_the_built_in_codecs():
    assert NAMES == ["float16", "bfloat16", "float32", "int8", "int4"]
    assert [codec(n).bytes_per_value for n in NAMES] == [2, 2, 4, 1, 0.5]
    assert [codec(n).limit for n in NAMES] == [FP16_MAX, None, None, None, None]
    assert [codec(n).scaled for n in NAMES] == [False, False, False, True, True]
    # int8: + a float32 scale; int4: 192 bytes of codes + 12 bfloat16 scales, 0.281 of float16
    assert [codec(n).vector_bytes(384) for n in NAMES] == [768, 768, 1536, 384 + 4, 192 + 2 * 12]
    assert [codec(n).stored_width(384) for n in NAMES] == [384, 384, 384, 384, 192]
    assert [codec(n).scales_width(384) for n in NAMES] == [0, 0, 0, 1, 12]


@pytest.mark.parametrize("name", NAMES)
def test_every_codec_writes_the_shapes_and_bytes_it_declares(name):
    """What the packer, the writer, the layout checks and the estimate ask a codec is what it writes."""
    stored_as = codec(name)
    D = 40  # not a multiple of int4's groups: a shorter last group
    array, scales = stored_as.encode(torch.randn(3, 7, D))
    assert array.dtype == stored_as.file_dtype and array.shape == (3, 7, stored_as.stored_width(D))
    assert stored_as.values_bytes(D) == array[0, 0].nbytes
    if stored_as.scaled:
        assert scales.dtype == stored_as.scale_codec.file_dtype and scales.shape == (3, 7, stored_as.scales_width(D))
        assert stored_as.scales_bytes(D) == scales[0, 0].nbytes
    else:
        assert scales is None and stored_as.scales_bytes(D) == 0 and stored_as.empty_scales(3, 7, D) is None
    assert stored_as.vector_bytes(D) == stored_as.values_bytes(D) + stored_as.scales_bytes(D)
    assert stored_as.cut_bytes(D) == max(stored_as.vector_bytes(D), 2 * D)  # cut where float16 is
    assert tuple(stored_as.empty(3, 7, D).shape) == array.shape
    assert stored_as.decode(array, scales).shape == (3, 7, D) and stored_as.width_problem(D) is None


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


# --- int4: symmetric absmax scale per group of 32 values, two codes a byte -----------------------------------------
def _codes(packed: np.ndarray) -> np.ndarray:
    """Packed int4 bytes ``(..., W)`` -> their signed codes ``(..., 2W)``: low nibbles (values 0..W-1), then high."""
    low, high = (packed & 15).astype(np.int8), (packed >> 4).astype(np.int8)
    return np.concatenate([np.where(low > 7, low - 16, low), np.where(high > 7, high - 16, high)], -1)


def test_int4_is_within_half_a_step_of_its_group_and_the_bound_is_tight():
    int4 = codec("int4")
    values = _heavy_tailed(6, 50, 128)  # (S, t, D): an outlier dimension, a zero vector
    stored, scales = int4.quantize(values)
    assert stored.dtype == torch.uint8 and stored.shape == (6, 50, 64)
    assert scales.dtype == torch.bfloat16 and scales.shape == (6, 50, 4)
    codes = _codes(stored.numpy())
    assert codes.min() >= -7 and codes.max() == 7  # symmetric: -8 is never written
    groups = values.unflatten(-1, (4, GROUP)).abs().amax(-1)  # (S, t, 4) each group's largest magnitude
    assert bool((scales.float() >= groups / 7).all()) and bool((scales.float() <= groups / 7 * (1 + 2**-7)).all())
    back = int4.dequantize(stored, scales)  # (S, t, D) float32
    bound = int4.error_bound(values)  # (S, t, D): half a step of each value's group
    assert bound.shape == values.shape
    assert bool(((back - values).abs() <= bound).all())  # the zero vector: bound 0, exact
    ratio = (back - values).abs()[bound > 0] / bound[bound > 0]
    assert float(ratio.max()) <= 1.0 and float(ratio.max()) > 0.95  # never above it, and not loose
    assert torch.equal(back[0, 0], torch.zeros(128))  # the zero vector stays zero
    assert torch.equal(int4.round(values), back)
    assert torch.equal(int4.round(back), back)  # a served vector quantised again is unchanged (the live path)


def test_int4_packs_value_j_and_j_plus_half_the_width_in_one_byte():
    """Odd and even positions alike: value j in the low nibble of byte j, value j + D/2 in its high nibble."""
    int4 = codec("int4")
    D = 64
    values = torch.zeros(D)
    values[0], values[1], values[31] = 7.0, -3.0, 1.0  # group 0: its scale is 1
    values[32], values[33], values[63] = -7.0, 2.0, 5.0  # group 1: its scale is 1
    stored, scales = int4.quantize(values)
    assert scales.float().tolist() == [1.0, 1.0]
    packed = stored.numpy()
    assert packed[0] == (7 | (-7 & 15) << 4) and packed[1] == ((-3 & 15) | 2 << 4) and packed[31] == (1 | 5 << 4)
    assert torch.equal(int4.dequantize(stored, scales), values)  # multiples of the step: exact
    assert torch.equal(int4.round(values[None].repeat(3, 1))[1], values)  # the same in any row of a batch


def test_int4_stores_an_all_zero_group_as_exact_zeros():
    int4 = codec("int4")
    values = torch.randn(2, 96)
    values[:, 32:64] = 0.0  # the middle group of each vector
    stored, scales = int4.quantize(values)
    assert scales[:, 1].float().tolist() == [0.0, 0.0] and bool((scales[:, [0, 2]].float() > 0).all())
    back = int4.dequantize(stored, scales)
    assert torch.equal(back[:, 32:64], torch.zeros(2, 32)) and bool(torch.isfinite(back).all())
    assert torch.equal(int4.round(torch.zeros(3, 64)), torch.zeros(3, 64))


def test_int4_an_outlier_coarsens_its_own_group_only():
    """What a group-wise scale is for: a massive activation in one group leaves the other groups' steps small."""
    int4 = codec("int4")
    calm = torch.randn(128)
    loud = calm.clone()
    loud[3] = 27_000.0  # a decoder's massive activation, in group 0
    back = int4.round(loud)
    for g in range(1, 4):
        group = slice(g * GROUP, (g + 1) * GROUP)
        largest = float(calm[group].abs().max())
        assert float((back[group] - calm[group]).abs().max()) <= largest / 14 * (1 + 2**-7)  # its own step
    assert float((back[:GROUP] - loud[:GROUP]).abs().max()) <= 27_000.0 / 14 * (1 + 2**-7)
    # one scale per vector (int8) lets the outlier set every value's step
    assert float((codec("int8").round(loud)[GROUP:] - calm[GROUP:]).abs().max()) > 5 * float(
        (back[GROUP:] - calm[GROUP:]).abs().max())


def test_int4_has_no_range_to_clamp():
    """bfloat16 scales have float32's range: beyond float16's 7 x 65,504 nothing is clamped, and tiny groups keep a
    scale of their own."""
    int4 = codec("int4")
    values = torch.tensor([[5e5, -1e6, 3.0] + [0.0] * 29, [1e-30, -7e-31] + [0.0] * 30, [3e37, -1.0] + [0.0] * 30])
    stored, scales = int4.quantize(values)
    back = int4.dequantize(stored, scales)
    assert bool(torch.isfinite(back).all()) and bool(torch.isfinite(scales.float()).all())
    assert bool(((back - values).abs() <= int4.error_bound(values)).all())
    assert float(back[0, 1]) == pytest.approx(-1e6, rel=2**-7)  # the largest magnitude of each group kept
    assert float(back[1, 0]) == pytest.approx(1e-30, rel=2**-7) and float(back[2, 0]) == pytest.approx(3e37, rel=2**-7)
    assert int4.limit is None and torch.equal(int4.clamp(values), values)


def test_int4_encode_decode_widen_and_a_filled_buffer_agree_with_quantize():
    int4 = codec("int4")
    values = _heavy_tailed(3, 11, 40, seed=1)  # 40 wide: a group of 32 and one of 8
    array, scales = int4.encode(values)
    assert array.dtype == np.uint8 and array.shape == (3, 11, 20)
    assert scales.dtype == np.uint16 and scales.shape == (3, 11, 2)  # bfloat16 bit patterns, as the bf16 codec
    expected = int4.dequantize(*int4.quantize(values))
    assert bool(((expected - values).abs() <= int4.error_bound(values)).all())  # the short group too
    np.testing.assert_array_equal(int4.decode(array, scales), expected.numpy())
    assert torch.equal(int4.widen(array, scales), expected)
    np.testing.assert_array_equal(int4.decode(array[:, [4, 2]], scales[:, [4, 2]]), expected[:, [4, 2]].numpy())
    buffer, factors = int4.empty(3, 11, 40), int4.empty_scales(3, 11, 40)  # what the packer fills
    stored, scale = int4.quantize(values)
    buffer.copy_(stored)
    factors.copy_(scale)
    np.testing.assert_array_equal(int4.file_view(buffer), array)
    np.testing.assert_array_equal(int4.scales_view(factors), scales)
    served, none = int4.served(int4.as_torch(array), int4.scales_as_torch(scales))
    assert none is None and served.dtype == torch.float32 and torch.equal(served, expected)
    with pytest.raises(ValueError, match="need their scales"):
        int4.decode(array)


def test_int4_refuses_an_odd_width_in_one_sentence():
    int4 = codec("int4")
    assert int4.width_problem(33) is not None and int4.width_problem(34) is None
    said = (r"^storage_dtype='int4' cannot store states 33 wide \(it packs two values into each byte, so the width "
            r"must be even\); choose another project=\.\.\.\.$")
    with pytest.raises(ConfigError, match=said):
        check_width("int4", 33, projected=True)
    with pytest.raises(ConfigError, match="choose another storage_dtype=..., or a project=... it can store"):
        check_width("int4", 33, projected=False)
    for name in NAMES:
        if name != "int4":
            check_width(name, 33, projected=False)  # any width
    with pytest.raises(ValueError, match="even number"):
        int4.quantize(torch.randn(2, 33))


def test_only_int4_decodes_in_the_feed():
    values, scales = torch.randint(-127, 128, (2, 3), dtype=torch.int8), torch.rand(2, 1)
    served, kept = codec("int8").served(values, scales)
    assert served is values and kept is scales  # int8: dequantised where the head widens it
    half = torch.randn(2, 3).half()
    assert codec("float16").served(half, None) == (half, None)
