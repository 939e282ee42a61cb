"""The standardisation every probe applies: moments accumulated in float64, and non-finite states refused."""

from __future__ import annotations

import numpy as np
import pytest

from layercache.errors import CacheError
from layercache.probes.features import MOMENT_ROWS, layer_moments, standardise


def test_layer_moments_match_float64_moments_across_runs_of_rows():
    rng = np.random.default_rng(0)
    n = 2 * MOMENT_ROWS + 37  # three runs, the last one short
    X = (rng.standard_normal((3, n, 5)) * [1e-3, 1.0, 1e3, 1.0, 1.0] + 1e4).astype(np.float32)  # (L, n, D)
    mean, std = layer_moments(X)
    wide = X.astype(np.float64)
    assert mean.dtype == std.dtype == np.float64 and mean.shape == std.shape == (3, 5)
    np.testing.assert_allclose(mean, wide.mean(1), rtol=1e-9)
    # the spread about the float32 mean, which is what standardising subtracts
    about = np.sqrt(((wide - mean.astype(np.float32)[:, None]) ** 2).mean(1))
    np.testing.assert_allclose(std, about, rtol=1e-5)
    assert layer_moments(np.zeros((2, 0, 4), np.float32))[0].shape == (2, 4)  # no rows: zeros, not an error


def test_standardise_gives_numpys_bits_in_place():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((2, 50, 4)).astype(np.float32)
    mean, scale = rng.standard_normal((2, 4)), rng.random((2, 4)) + 0.5
    scale[1, 2] = 0.0  # a constant dimension: centred, not scaled
    expected = (X - mean.astype(np.float32)[:, None]) / np.where(scale > 1e-12, scale, 1.0).astype(np.float32)[:, None]
    out = standardise(X, mean, scale, ["a", "b"])
    assert out is X and np.array_equal(out, expected)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_standardise_refuses_a_layer_that_is_not_finite_and_names_it(bad):
    X = np.ones((3, 10, 4), np.float32)
    X[2, 7, 1] = bad
    with pytest.raises(CacheError, match=r"states of layer_2 of split 'train' are not finite"):
        standardise(X, np.zeros((3, 4)), np.ones((3, 4)), ["embeddings", "layer_1", "layer_2"], "train")


def test_standardise_keeps_huge_finite_states_whose_sum_overflows_float32():
    X = np.full((1, 8, 2), 3e38, np.float32)  # every value finite; their float32 sum is not
    out = standardise(X, np.zeros((1, 2)), np.ones((1, 2)), ["layer_0"])
    assert np.isfinite(out).all()
