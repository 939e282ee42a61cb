"""CumulativeProbes: a probe on the scalar mix of layers 0..l for every l, all prefixes fitted together."""

from __future__ import annotations

import numpy as np
import pytest

from layercache.depth import cumulative_scoring, expected_layer
from layercache.errors import ConfigError
from layercache.probes import PROBES, CumulativeProbes


def planted(n: int, layers: int = 5, dim: int = 12, signal_layer: int = 3, seed: int = 0, regression: bool = False):
    """Noise at every layer, plus the target along one direction at ``signal_layer`` and above (what a
    residual stream that keeps a feature once it is written looks like)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, layers, dim)).astype(np.float32)
    target = rng.normal(size=n) if regression else rng.integers(0, 2, n)
    signal = target if regression else 2 * target - 1
    X[:, signal_layer:, 0] += 2.0 * np.asarray(signal, np.float32)[:, None]
    return X, (target.astype(np.float32) if regression else target)


def test_prefixes_gain_where_the_signal_enters():
    X, y = planted(1000)
    X_val, y_val = planted(400, seed=1)
    cum = CumulativeProbes().fit_arrays(X, y, X_val, y_val)
    assert cum.scores_.shape == (5,) and cum.mix_weights_.shape == (5, 5)
    assert np.all(np.abs(cum.scores_[:3] - 0.5) < 0.1)  # layers 0..2 carry nothing
    assert np.all(cum.scores_[3:] > 0.95)  # from prefix 3 on the signal is in the mix
    gains = cumulative_scoring(cum.scores_)
    assert 2.8 < gains.expected_layer < 3.3
    # each prefix mixes only its own layers, with weights that sum to one
    assert np.allclose(np.triu(cum.mix_weights_, 1), 0)
    assert np.allclose(cum.mix_weights_.sum(1), 1, atol=1e-5)
    assert cum.mix_weights_[3, 3] > 0.9  # prefix 3 reads the one layer with the signal
    assert expected_layer(cum.mix_weights_[-1]) >= 3  # the full mix sits on layers 3 and 4


def test_regression_prefixes_use_r2():
    X, y = planted(800, regression=True, signal_layer=2)
    X_val, y_val = planted(300, seed=1, regression=True, signal_layer=2)
    cum = CumulativeProbes().fit_arrays(X, y, X_val, y_val)
    assert cum.metric_ == "r2"
    assert np.all(cum.scores_[:2] < 0.1)
    # One layer's copy of the target has noise of sd 1/2 on it: R^2 at most 4 / (4 + 1) = 0.8. Every
    # further copy has its own noise, so mixing them averages it down: the score rises with the prefix.
    assert 0.75 < cum.scores_[2] < 0.85 and cum.scores_[4] > cum.scores_[2] + 0.05


def test_embeddings_only_prefix_is_the_plain_probe_on_layer_0():
    """Prefix 0 has one layer, so its mix weight is 1 and it is a linear probe of that layer."""
    X, y = planted(600, signal_layer=0)
    X_val, y_val = planted(300, seed=1, signal_layer=0)
    cum = CumulativeProbes(C_grid=(1.0,)).fit_arrays(X, y, X_val, y_val)
    assert cum.mix_weights_[0, 0] == pytest.approx(1.0)
    assert cum.scores_[0] > 0.95


def test_on_a_cache_every_task_kind(builtin_cache):
    for task in builtin_cache.tasks:
        cum = CumulativeProbes(task=task.name, max_iter=30).fit(builtin_cache)
        L = len(builtin_cache.layer_names)
        assert cum.scores_.shape == (L,) and cum.mix_weights_.shape == (L, L)
        assert cum.predict(builtin_cache, "test").shape[0] == L
        assert cum.score(builtin_cache, "test").shape == (L,)
    assert PROBES["cumulative"] is CumulativeProbes


def test_a_looser_tol_stops_each_prefix_sooner():
    """A looser ``tol`` (the largest gradient entry at which a prefix's L-BFGS stops) stops each prefix sooner,
    never later, at nearly the same scores and validation losses."""
    X, y = planted(800)
    X_val, y_val = planted(300, seed=1)
    tight = CumulativeProbes(tol=1e-7, max_iter=400).fit_arrays(X, y, X_val, y_val)
    loose = CumulativeProbes(tol=1e-3, max_iter=400).fit_arrays(X, y, X_val, y_val)
    assert all(a <= b for a, b in zip(loose.n_iter_, tight.n_iter_)) and sum(loose.n_iter_) < sum(tight.n_iter_)
    assert np.abs(loose.scores_ - tight.scores_).max() <= 0.02
    assert np.abs(loose.losses_ - tight.losses_).max() <= 0.02


@pytest.mark.parametrize("params", [{"C_grid": (0.0,)}, {"max_iter": 0}, {"tol": 0.0}, {"tol": -1.0}, {"max_train": 1},
                                    {"val_fraction": 1.5}])
def test_refuses_bad_settings(params):
    X, y = planted(50)
    with pytest.raises(ConfigError):
        CumulativeProbes(**params).fit_arrays(X, y, X, y)
