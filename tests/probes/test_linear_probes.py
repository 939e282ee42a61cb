"""LinearProbes: every layer's probe fitted at once, checked against scikit-learn and planted signals."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression, Ridge

import layercache
from layercache.errors import CacheError, ConfigError
from layercache.probes import PROBES, ControlTask, LinearProbes, probe_class, selectivity


def planted(n: int, layers: int = 4, dim: int = 16, signal_layer: int = 2, classes: int = 2, seed: int = 0):
    """Features (n, layers, dim) that are noise except at ``signal_layer``, where the class is linear
    in them (class means apart along random directions); labels (n,)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    X = rng.normal(size=(n, layers, dim)).astype(np.float32) * 2.0 + 3.0  # not centred, not unit scale
    means = np.random.default_rng(99).normal(size=(classes, dim)) * 3.0  # same class means for every call
    X[:, signal_layer] += means[y].astype(np.float32)
    return X, y


# --- synthetic arrays -------------------------------------------------------------------------


def test_planted_layer_is_best_and_others_are_at_chance():
    X, y = planted(800)
    X_val, y_val = planted(400, seed=1)
    X_test, y_test = planted(1000, seed=2)
    probes = LinearProbes().fit_arrays(X, y, X_val, y_val)
    assert probes.best_layer_ == 2
    assert probes.scores_[2] > 0.97
    test = probes.score_arrays(X_test, y_test)
    assert test[2] > 0.97
    assert np.all(np.abs(np.delete(test, 2) - 0.5) < 0.07)  # chance, within sampling noise
    assert probes.coef_.shape == (4, 16, 1) and probes.intercept_.shape == (4, 1)  # binomial: one logit
    assert probes.grid_scores_.shape == (4, 4) and probes.C_.shape == (4,)
    assert set(probes.C_) <= set(probes.C_grid_)
    assert probes.predict_arrays(X_test).shape == (4, 1000)


@pytest.mark.parametrize("classes", [2, 3])
def test_each_layer_matches_sklearn_for_the_chosen_C(classes):
    X, y = planted(600, classes=classes, seed=3)
    X[:, 1] += 0.4 * X[:, 2]  # a weaker, correlated signal: a layer where C matters
    X_test, y_test = planted(800, classes=classes, seed=4)
    X_test[:, 1] += 0.4 * X_test[:, 2]
    probes = LinearProbes(C_grid=(0.001, 0.01, 0.1, 1.0)).fit_arrays(X, y)
    ours = probes.score_arrays(X_test, y_test)
    # scikit-learn on the same standardised features and the same training part (the probes held
    # a seeded validation slice out), one layer at a time with the C the probes chose
    Z, Z_test = [(A - probes.mean_) / probes.scale_ for A in (X, X_test)]
    keep = np.setdiff1d(np.arange(len(y)), _validation_rows(probes, len(y), y))
    for layer in range(X.shape[1]):
        sk = LogisticRegression(C=probes.C_[layer], max_iter=5000, tol=1e-8).fit(Z[keep, layer], y[keep])
        assert abs(ours[layer] - sk.score(Z_test[:, layer], y_test)) <= 0.01, layer
        if classes == 2:
            # weakly regularised layers (C = 1, chosen by validation loss on the separable layer) stop at
            # tol = 1e-4 within about 1 % of the weights
            diff = np.linalg.norm(probes.coef_[layer, :, 0] - sk.coef_[0])
            assert diff <= max(2e-3, 0.01 * np.linalg.norm(sk.coef_[0])), (layer, probes.C_[layer], diff)


def _validation_rows(probes, n, y):
    from layercache.core.holdout import stratified_holdout

    return stratified_holdout(n, probes.val_fraction, probes.seed, y)[1]


def test_control_task_lowers_the_score_at_the_planted_layer():
    """Hewitt & Liang: random labels per word type can only be memorised, not read off the states."""
    rng = np.random.default_rng(5)
    vocab, dim, layers = 300, 12, 3
    embeddings = rng.normal(size=(layers, vocab, dim))  # each word type has a vector per layer
    direction = rng.normal(size=dim)
    task_of_type = (embeddings[1] @ direction > 0).astype(np.int64)  # linear in layer 1 only

    def words(n, seed):
        types = np.random.default_rng(seed).integers(0, vocab, n)
        noise = 0.1 * np.random.default_rng(seed + 1).normal(size=(n, layers, dim))
        X = embeddings[:, types].transpose(1, 0, 2) + noise
        return X.astype(np.float32), task_of_type[types], [(int(t),) for t in types]

    X, y, types = words(3000, 6)
    X_test, y_test, types_test = words(2000, 7)
    control = ControlTask(seed=0).fit(y, 2)
    y_control, y_control_test = control.word_labels(types), control.word_labels(types_test)
    assert np.array_equal(control.word_labels(types), y_control)  # fixed per type
    assert all(len({int(c) for c, t in zip(y_control, types) if t == w}) == 1 for w in set(types[:50]))
    task = LinearProbes().fit_arrays(X, y).score_arrays(X_test, y_test)
    ctrl = LinearProbes().fit_arrays(X, y_control).score_arrays(X_test, y_control_test)
    assert task[1] > 0.93
    assert task[1] - ctrl[1] > 0.25, (task, ctrl)  # selectivity at the planted layer


def test_sequence_control_is_a_seeded_permutation():
    labels = np.arange(100) % 3
    a = ControlTask(seed=1).sequence_labels(labels, "train")
    assert np.array_equal(np.sort(a), np.sort(labels)) and not np.array_equal(a, labels)
    assert np.array_equal(a, ControlTask(seed=1).sequence_labels(labels, "train"))
    assert not np.array_equal(a, ControlTask(seed=1).sequence_labels(labels, "test"))


def test_ridge_recovers_a_planted_linear_target():
    rng = np.random.default_rng(8)
    n, layers, dim = 500, 3, 10
    X = rng.normal(size=(n, layers, dim)).astype(np.float32) * 3 + 1
    w = rng.normal(size=dim)
    y = (X[:, 2] @ w + 0.05 * rng.normal(size=n) + 4.0).astype(np.float32)
    probes = LinearProbes(C_grid=(0.1, 1.0, 10.0, 100.0)).fit_arrays(X, y)
    assert probes.kind_ == "regression" and probes.metric_ == "r2"
    assert probes.best_layer_ == 2 and probes.scores_[2] > 0.99
    assert np.all(probes.scores_[:2] < 0.2)
    # back in the raw feature space the weights are the planted ones
    np.testing.assert_allclose(probes.coef_[2, :, 0] / probes.scale_[2], w, atol=0.02)
    # and the same as scikit-learn's Ridge(alpha=1/C) on the same standardised training part
    Z = (X - probes.mean_) / probes.scale_
    keep = np.setdiff1d(np.arange(n), _validation_rows_regression(probes, n))
    sk = Ridge(alpha=1 / probes.C_[2]).fit(Z[keep, 2], y[keep])
    np.testing.assert_allclose(probes.coef_[2, :, 0], sk.coef_, rtol=1e-3, atol=1e-3)
    assert probes.predict_arrays(X).dtype.kind == "f"


def _validation_rows_regression(probes, n):
    from layercache.core.holdout import stratified_holdout

    return stratified_holdout(n, probes.val_fraction, probes.seed, None)[1]


def test_solver_warm_start_and_inputs_left_alone():
    from layercache.solvers import fit_logistic

    X, y = planted(300, layers=2, dim=6, signal_layer=1, classes=3)
    Xt = torch.from_numpy(np.ascontiguousarray(((X - X.mean(0)) / X.std(0)).transpose(1, 0, 2)))
    Cs = torch.tensor([0.1, 1.0])
    cold = fit_logistic(Xt, torch.from_numpy(y), 3, Cs)
    assert cold.converged and cold.coef.shape == (2, 2, 6, 3) and cold.intercept.shape == (2, 2, 3)
    assert torch.allclose(cold.coef.sum(-1), torch.zeros(2, 2, 6), atol=1e-5)  # class contrasts only
    warm = fit_logistic(Xt, torch.from_numpy(y), 3, Cs, init=cold)
    assert warm.converged and warm.n_iter <= 10
    assert torch.allclose(warm.coef, cold.coef, atol=1e-3)
    before = X.copy()
    LinearProbes().fit_arrays(X[:, :1], y).predict_arrays(X[:, :1])  # one layer: no view is standardised
    assert np.array_equal(X, before)


def test_warm_start_reaches_the_cold_optimum_from_the_previous_fit():
    """``warm_start`` (scikit-learn's): a refit starts from the previous fit's weights. On the same states stored
    another way (here: rounded to float16) it reaches the optimum a cold fit reaches, in fewer iterations."""
    X, y = planted(400, layers=3, dim=12, signal_layer=1, classes=3)
    first = LinearProbes(C_grid=(1.0,)).fit_arrays(X, y)
    rounded = X.astype(np.float16).astype(np.float32)
    cold = LinearProbes(C_grid=(1.0,)).fit_arrays(rounded, y)
    warm = copy.deepcopy(first).set_params(warm_start=True).fit_arrays(rounded, y)
    assert warm.n_iter_ < cold.n_iter_
    assert np.allclose(warm.coef_, cold.coef_, atol=2e-3)
    assert np.array_equal(warm.predict_arrays(rounded), cold.predict_arrays(rounded))
    with pytest.raises(ConfigError, match="warm_start=True starts from the previous fit, which has 3 states"):
        warm.fit_arrays(X[:, :2], y)  # other states: refused in one sentence, not a shape error
    assert LinearProbes(warm_start=True).fit_arrays(X, y).converged_  # no previous fit: a cold start


def test_sklearn_params_set_params_and_clone():
    probes = LinearProbes(task="sentiment", C_grid=(0.5, 2.0), max_iter=50, control=True, seed=3)
    params = probes.get_params()
    assert params["task"] == "sentiment" and params["C_grid"] == (0.5, 2.0) and params["control"] is True
    assert probes.set_params(seed=4, source="tokens") is probes and probes.seed == 4 and probes.source == "tokens"
    copy = clone(probes)
    assert copy is not probes and copy.get_params() == probes.get_params()
    X, y = planted(200, layers=2, dim=4, signal_layer=1)
    fitted = LinearProbes().fit_arrays(X, y)
    assert not hasattr(clone(fitted), "coef_")  # clone drops learned state


def test_bad_parameters_and_arrays_are_refused_in_one_sentence():
    X, y = planted(100, layers=2, dim=4, signal_layer=1)
    for params in ({"C_grid": ()}, {"C_grid": (0.1, -1)}, {"max_iter": 0}, {"val_fraction": 1.5}, {"seed": -1}):
        with pytest.raises(ConfigError):
            LinearProbes(**params).fit_arrays(X, y)
    with pytest.raises(ConfigError, match="shape"):
        LinearProbes().fit_arrays(X[:, 0], y)
    with pytest.raises(ConfigError, match="one class"):
        LinearProbes().fit_arrays(X, np.zeros(100, np.int64))
    with pytest.raises(ConfigError, match="Unknown probe"):
        probe_class("mlp-xyz")
    assert PROBES["linear"] is LinearProbes and probe_class("linear") is LinearProbes


# --- a real (tiny) cache ----------------------------------------------------------------------


def test_sequence_and_token_tasks_on_a_real_cache(builtin_cache):
    cache = builtin_cache
    L = len(cache.layer_names)
    seq = LinearProbes(task="sentiment").fit(cache)
    assert seq.source_ == "pooled:mean" and seq.validation_ == "validation"
    assert seq.layer_names_ == cache.layer_names and seq.coef_.shape == (L, cache.hidden_size, 1)
    assert seq.predict(cache, "test").shape == (L, cache.num_examples("test"))
    assert np.all((seq.score(cache, "test") >= 0) & (seq.score(cache, "test") <= 1))

    tok = LinearProbes(task="negation_scope").fit(cache)
    assert tok.source_ == "tokens" and tok.coef_.shape == (L, cache.hidden_size, 3)
    n_words = sum(len(w) for w in cache.labels("test", "negation_scope"))
    pred = tok.predict(cache, "test")
    assert pred.shape[0] == L and 0 < pred.shape[1] <= n_words  # words cut by truncation have no state
    assert tok.score(cache, "test").shape == (L,)
    assert tok.scores_.max() > 0.6  # the tags are easy to read off the word states

    reg = LinearProbes(task="intensity").fit(cache)
    assert reg.metric_ == "r2" and reg.score(cache, "test").shape == (L,)

    two = LinearProbes(task="sentiment", layers=["embeddings", -1], source="tokens").fit(cache, val_split="test")
    assert two.layer_names_ == ["embeddings", cache.layer_names[-1]] and two.validation_ == "test"
    assert two.source_ == "tokens" and two.predict(cache, "validation").shape == (2, cache.num_examples("validation"))


def test_selectivity_on_a_real_cache(builtin_cache):
    """The plumbing on real word types (the tiny random BERT's layers are nearly alike and carry little
    of the task, so the size of the selectivity is tested on planted data above, not here)."""
    cache = builtin_cache
    result = selectivity(cache, "negation_scope", eval_split="test", C_grid=(0.1, 1.0))
    assert result.layer_names == cache.layer_names and result.split == "test"
    assert np.allclose(result.selectivity, result.task_scores - result.control_scores)
    control = result.control_probe
    assert control.control and not result.task_probe.control
    words = np.concatenate(cache.labels("train", "negation_scope"))
    train_words = np.bincount(words, minlength=3) / len(words)  # the train part holds all but the slice
    np.testing.assert_allclose(control.control_task_.distribution_, train_words, atol=0.05)
    # control labels are a function of the word type: the same in every split
    from layercache.probes.features import read_inputs, resolve_task

    spec = resolve_task(cache, "negation_scope")
    seen = {}
    for split in ("train", "test"):
        inputs = read_inputs(cache, split, spec, "tokens", [0], want_types=True)
        for word, label in zip(inputs.types, control.control_task_.word_labels(inputs.types)):
            assert seen.setdefault(word, label) == label
    assert len(set(seen.values())) > 1
    seq = selectivity(cache, "sentiment", C_grid=(0.1,))
    assert seq.split == "validation" and np.all(np.abs(seq.control_scores - 0.5) < 0.15)  # permuted: chance


def test_refusals_on_a_cache(builtin_cache, tiny_models, tmp_path):
    cache = builtin_cache
    with pytest.raises(ConfigError, match="several label tasks"):
        LinearProbes().fit(cache)
    with pytest.raises(ConfigError, match="no task 'nope'"):
        LinearProbes(task="nope").fit(cache)
    with pytest.raises(ConfigError, match="word states, not pooled"):
        LinearProbes(task="negation_scope", source="pooled:mean").fit(cache)
    with pytest.raises(ConfigError, match="no split"):
        LinearProbes(task="sentiment").fit(cache, split="nope")
    with pytest.raises(ConfigError, match="fit_arrays"):
        LinearProbes().fit_arrays(*planted(60, layers=2, dim=3, signal_layer=1)).score(cache, "test")
    pooled = layercache.extract(str(tiny_models["bert"]), "builtin", tmp_path / "pooled", store="pooled",
                                limit=40, progress=False).path
    with layercache.LayerCache.open(pooled) as only_pooled:
        with pytest.raises(CacheError, match="pooled vectors only"):
            LinearProbes(task="negation_scope").fit(only_pooled)
    unlabelled = layercache.extract(str(tiny_models["bert"]), "builtin", tmp_path / "nolabels", no_labels=True,
                                    limit=40, progress=False).path
    with layercache.LayerCache.open(unlabelled) as no_labels:
        with pytest.raises(CacheError, match="holds no labels"):
            LinearProbes().fit(no_labels)
