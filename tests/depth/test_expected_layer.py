"""Expected layer of scalar-mix weights and cumulative scoring, on numbers worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from layercache.depth import cumulative_scoring, expected_layer
from layercache.errors import ConfigError


def test_expected_layer_by_hand():
    assert expected_layer(np.eye(6)[3]) == 3.0  # one-hot at layer 3
    assert expected_layer(np.ones(5)) == pytest.approx(2.0)  # uniform over 0..4
    assert expected_layer([0.5, 0.0, 0.5]) == pytest.approx(1.0)
    assert expected_layer([1.0, 3.0]) == pytest.approx(0.75)  # normalised first: 0*0.25 + 1*0.75
    assert expected_layer([2.0, 0.0, 0.0, 6.0]) == pytest.approx(2.25)  # (0*2 + 3*6) / 8


@pytest.mark.parametrize("bad", [[0.0, 0.0], [1.0, -0.5, 0.5], [np.nan, 1.0], [], [[0.5, 0.5]]])
def test_expected_layer_refuses_what_are_not_weights(bad):
    with pytest.raises(ConfigError):
        expected_layer(bad)


def test_cumulative_scoring_by_hand():
    # scores of probes on the mix of layers 0..l, l = 0..4
    result = cumulative_scoring([0.50, 0.60, 0.90, 0.95, 0.95])
    np.testing.assert_allclose(result.gains, [0.0, 0.10, 0.30, 0.05, 0.0], atol=1e-12)
    # (1*0.10 + 2*0.30 + 3*0.05 + 4*0) / (0.10 + 0.30 + 0.05) = 0.85 / 0.45
    assert result.expected_layer == pytest.approx(0.85 / 0.45)
    np.testing.assert_array_equal(result.scores, [0.50, 0.60, 0.90, 0.95, 0.95])


def test_cumulative_scoring_with_a_negative_gain():
    result = cumulative_scoring([0.2, 0.6, 0.5, 0.8])  # gains 0.4, -0.1, 0.3
    np.testing.assert_allclose(result.gains, [0.0, 0.4, -0.1, 0.3], atol=1e-12)
    assert result.expected_layer == pytest.approx((0.4 - 0.2 + 0.9) / 0.6)


@pytest.mark.parametrize("scores", [[0.7, 0.7, 0.7], [0.8, 0.9, 0.6]])
def test_no_positive_total_gain_gives_nan(scores):
    assert math.isnan(cumulative_scoring(scores).expected_layer)


def test_cumulative_scoring_refuses_too_few_scores():
    with pytest.raises(ConfigError, match="at least 2"):
        cumulative_scoring([0.5])
