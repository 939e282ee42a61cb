"""Prediction depth on a hand-made case: every depth checked, then counts and accuracy by depth."""

from __future__ import annotations

import math

import numpy as np
import pytest

from layercache.depth import prediction_depth
from layercache.errors import ConfigError

# (n, L) = (6, 4) predictions, final layer last; the depth of each row is worked out beside it
PREDICTIONS = np.array([
    [1, 1, 1, 1],  # agrees everywhere -> 0
    [0, 1, 1, 1],  # disagrees only at layer 0 -> 1
    [1, 0, 1, 1],  # flips away and back -> 2 (must agree at every m >= l, not just at l)
    [1, 1, 0, 1],  # flips back late -> 3
    [2, 2, 0, 2],  # same, another class -> 3
    [0, 0, 0, 0],  # agrees everywhere -> 0
])
DEPTHS = [0, 1, 2, 3, 3, 0]
LABELS = np.array([1, 0, 1, 1, 1, 0])  # final predictions right for rows 0, 2, 3, 5


def test_depth_counts_and_accuracy_by_hand():
    result = prediction_depth(PREDICTIONS, LABELS)
    np.testing.assert_array_equal(result.depth, DEPTHS)
    np.testing.assert_array_equal(result.counts, [2, 1, 1, 2])
    # depth 0: rows 0, 5 both right; depth 1: row 1 wrong; depth 2: row 2 right; depth 3: row 3 right, row 4 wrong
    np.testing.assert_allclose(result.accuracy_by_depth, [1.0, 0.0, 1.0, 0.5])
    assert result.mean_depth == pytest.approx(9 / 6)


def test_empty_depths_are_nan_and_labels_optional():
    result = prediction_depth(PREDICTIONS[[0, 3]], LABELS[[0, 3]])
    np.testing.assert_array_equal(result.counts, [1, 0, 0, 1])
    assert result.accuracy_by_depth[0] == 1.0 and result.accuracy_by_depth[3] == 1.0
    assert math.isnan(result.accuracy_by_depth[1]) and math.isnan(result.accuracy_by_depth[2])
    assert prediction_depth(PREDICTIONS).accuracy_by_depth is None


def test_string_predictions_and_a_single_layer():
    words = np.array([["a", "b", "b"], ["b", "b", "b"]])
    np.testing.assert_array_equal(prediction_depth(words).depth, [1, 0])
    one = prediction_depth(np.array([[3], [4]]))
    np.testing.assert_array_equal(one.depth, [0, 0])
    np.testing.assert_array_equal(one.counts, [2])


def test_matches_a_loop_on_random_predictions():
    rng = np.random.default_rng(0)
    pred = rng.integers(0, 3, size=(500, 7))
    expected = [min(k for k in range(7) if all(row[m] == row[-1] for m in range(k, 7))) for row in pred]
    np.testing.assert_array_equal(prediction_depth(pred).depth, expected)


def test_refusals():
    with pytest.raises(ConfigError, match="transpose"):
        prediction_depth(np.array([1, 2, 3]))
    with pytest.raises(ConfigError, match="labels must have shape"):
        prediction_depth(PREDICTIONS, LABELS[:3])
