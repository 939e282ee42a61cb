"""OnlineCodeMDL: the online code of Voita & Titov (2020) for every layer at once, on planted signals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.base import clone

from layercache.errors import ConfigError
from layercache.probes import PROBES, probe_class
from layercache.probes.mdl import DEFAULT_PORTIONS, OnlineCodeMDL

from .test_linear_probes import planted


def random_labels(n: int, classes: int = 4, layers: int = 2, dim: int = 4, seed: int = 3):
    """Features and labels drawn independently: no probe can learn anything."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, layers, dim)).astype(np.float32), rng.integers(0, classes, n)


def test_planted_layer_has_the_shortest_code_and_noise_layers_do_not_compress():
    X, y = planted(1000)  # binary, linear at layer 2, noise at 0, 1, 3
    mdl = OnlineCodeMDL().fit_arrays(X, y)
    assert mdl.best_layer_ == 2 and mdl.n_classes_ == 2 and mdl.n_train_ == 1000
    assert mdl.uniform_codelength_ == pytest.approx(1000.0)  # log2(2) = 1 bit per label
    assert mdl.codelength_.shape == mdl.compression_.shape == (4,)
    assert mdl.compression_[2] > 8, mdl.compression_
    noise = np.delete(mdl.compression_, 2)
    assert np.all((noise > 0.8) & (noise < 1.05)), mdl.compression_  # about 1 (a little below: overfitting)
    assert np.all(mdl.codelength_[2] < 0.2 * np.delete(mdl.codelength_, 2))
    assert mdl.layer_names_ == ["layer_0", "layer_1", "layer_2", "layer_3"]
    assert np.all(np.isfinite(mdl.block_codelengths_))
    # C is picked per block and layer: the separable layer ends on a weaker penalty than the noise layers
    assert mdl.C_.shape == mdl.block_codelengths_.shape and np.all(np.isnan(mdl.C_[0]))
    assert mdl.C_[-1, 2] > np.delete(mdl.C_[-1], 2).max()


def test_random_labels_cost_log2_K_bits_each_so_nats_are_converted():
    """Nothing to learn: the code costs about log2 K bits a label. Summing nats as bits would give
    about ln K nats = 0.69 log2 K, well outside the 10 % band."""
    n, k = 2000, 4
    X, y = random_labels(n, k)
    mdl = OnlineCodeMDL().fit_arrays(X, y)
    per_example = mdl.codelength_ / n
    assert np.all(np.abs(per_example / math.log2(k) - 1) < 0.1), per_example
    assert np.all(per_example >= 0.98 * math.log2(k))  # no code beats the uniform one on random labels (much)
    np.testing.assert_allclose(mdl.compression_, n * math.log2(k) / mdl.codelength_)


def test_block_accounting():
    X, y = random_labels(1000, 3, layers=3, dim=5, seed=7)
    mdl = OnlineCodeMDL().fit_arrays(X, y)
    t = mdl.portions_
    assert list(t) == [1, 2, 4, 8, 16, 32, 62, 125, 250, 500, 1000]  # round(p * N), at least 1
    assert mdl.block_codelengths_.shape == (len(t), 3)
    np.testing.assert_array_equal(mdl.block_codelengths_[0], t[0] * math.log2(3))  # the uniform first block
    np.testing.assert_allclose(mdl.block_codelengths_.sum(0), mdl.codelength_)
    assert mdl.uniform_codelength_ == pytest.approx(1000 * math.log2(3))
    # n_classes counts classes that never occur: the uniform code then spends log2(5) bits
    wide = OnlineCodeMDL(portions=(0.1, 0.5, 1.0)).fit_arrays(X, y, n_classes=5)
    assert wide.n_classes_ == 5 and list(wide.portions_) == [100, 500, 1000]
    np.testing.assert_array_equal(wide.block_codelengths_[0], 100 * math.log2(5))


def test_block_cross_entropy_matches_a_direct_computation():
    """The second block's bits are the cross-entropy (in bits) of an independently fitted probe."""
    from sklearn.linear_model import LogisticRegression

    X, y = planted(400, layers=2, dim=6, signal_layer=1, seed=11)
    mdl = OnlineCodeMDL(portions=(0.5, 1.0), C_grid=(1.0,), tol=1e-8, max_iter=2000).fit_arrays(X, y)
    order = np.random.default_rng(0).permutation(400)
    Z = (X - X.mean(0)) / X.std(0)
    first, second = order[:200], order[200:]
    for layer in range(2):
        sk = LogisticRegression(C=1.0, tol=1e-10, max_iter=10000).fit(Z[first, layer], y[first])
        p = sk.predict_proba(Z[second, layer])[np.arange(200), y[second]]
        expected = -np.log(p).sum() / math.log(2)
        assert mdl.block_codelengths_[1, layer] == pytest.approx(expected, rel=2e-3), layer


def test_tiny_training_sets_still_code_every_label():
    X, y = random_labels(5, 2, dim=3)
    y = np.array([0, 1, 0, 1, 1])
    mdl = OnlineCodeMDL().fit_arrays(X, y)
    assert list(mdl.portions_) == [1, 2, 5]  # 0.1 % of 5 examples: still one example in the first block
    assert mdl.block_codelengths_[0, 0] == 1.0 and np.all(np.isfinite(mdl.codelength_))
    one = OnlineCodeMDL().fit_arrays(X[:1], y[:1], n_classes=2)
    assert list(one.portions_) == [1] and one.codelength_[0] == 1.0 and one.compression_[0] == 1.0


def test_same_seed_same_result_other_seed_other_order():
    X, y = planted(500, layers=3, dim=8, signal_layer=1, classes=3, seed=5)
    a = OnlineCodeMDL(seed=1).fit_arrays(X, y)
    b = OnlineCodeMDL(seed=1).fit_arrays(X, y)
    c = OnlineCodeMDL(seed=2).fit_arrays(X, y)
    np.testing.assert_array_equal(a.block_codelengths_, b.block_codelengths_)
    assert not np.allclose(a.codelength_, c.codelength_)
    assert a.best_layer_ == c.best_layer_ == 1


def test_regression_targets_and_bad_parameters_are_refused():
    X, y = planted(100, layers=2, dim=4, signal_layer=1)
    with pytest.raises(ConfigError, match="regression.*class ids"):
        OnlineCodeMDL().fit_arrays(X, y.astype(np.float32))
    with pytest.raises(ConfigError, match="one class"):
        OnlineCodeMDL().fit_arrays(X, np.zeros(100, np.int64))
    with pytest.raises(ConfigError, match=r"\[0, 2\)"):
        OnlineCodeMDL().fit_arrays(X, y + 1, n_classes=2)
    for params in ({"portions": (0.5, 0.9)}, {"portions": (0.5, 0.2, 1.0)}, {"portions": (0.0, 1.0)},
                   {"C_grid": [0]}, {"C_grid": []}, {"selection_fraction": 1.0}, {"max_iter": 0}, {"seed": -1}):
        with pytest.raises(ConfigError):
            OnlineCodeMDL(**params).fit_arrays(X, y)


def test_registered_and_sklearn_style():
    assert PROBES["mdl"] is OnlineCodeMDL and probe_class("mdl") is OnlineCodeMDL
    mdl = OnlineCodeMDL(task="pos", C_grid=(0.5,), seed=3)
    assert mdl.get_params()["portions"] == DEFAULT_PORTIONS and mdl.get_params()["C_grid"] == (0.5,)
    fitted = OnlineCodeMDL().fit_arrays(*planted(100, layers=2, dim=4, signal_layer=1))
    assert not hasattr(clone(fitted), "codelength_")


def test_on_a_real_cache_and_regression_refused(builtin_cache):
    cache = builtin_cache
    L = len(cache.layer_names)
    seq = OnlineCodeMDL(task="sentiment").fit(cache)
    assert seq.source_ == "pooled:mean" and seq.layer_names_ == cache.layer_names and seq.task_ == "sentiment"
    assert seq.portions_[-1] == seq.n_train_ == cache.num_examples("train")
    assert seq.codelength_.shape == (L,) and np.all(np.isfinite(seq.codelength_))
    tok = OnlineCodeMDL(task="negation_scope", layers=[0, -1]).fit(cache)
    n_words = sum(len(w) for w in cache.labels("train", "negation_scope"))
    assert tok.source_ == "tokens" and tok.n_classes_ == 3 and 0 < tok.n_train_ <= n_words
    assert tok.block_codelengths_.shape == (len(tok.portions_), 2)
    np.testing.assert_allclose(tok.block_codelengths_.sum(0), tok.codelength_)
    with pytest.raises(ConfigError, match="regression.*choose a sequence or token task"):
        OnlineCodeMDL(task="intensity").fit(cache)
