"""Ensemble heads: ``LayerHead(seeds=M)``, ``LayerHead.from_seeds`` and ``LayerHead.from_members`` average
their members' predictions, and save, load and score as any run.

The cache is the built-in task set (a sequence, a token and a regression task at once) through the
tiny BERT; the seed members are ``scalar`` heads of two epochs, which differ by seed.
"""

from __future__ import annotations

import numpy as np
import pytest
from cli_support import assert_refused, invoke
from conftest import tiny_builtin_cache

import layercache as lc
from layercache.errors import ConfigError
from layercache.heads import LayerHead
from layercache.heads.ensembles.model import EnsembleModel

QUICK = {"epochs": 2, "patience": 0, "device": "cpu", "progress": False, "batch_size": 16}


@pytest.fixture(scope="module")
def cache_path(tiny_models, tmp_path_factory):
    return tiny_builtin_cache(tiny_models, tmp_path_factory, "seeds", 120)


@pytest.fixture(scope="module")
def cache(cache_path):
    with lc.LayerCache.open(cache_path) as handle:
        yield handle


@pytest.fixture(scope="module")
def members(cache):
    """Two heads differing only in their seed, validated on the same slice."""
    return [LayerHead("scalar", seed=s, val_seed=0, **QUICK).fit(cache) for s in (0, 1)]


@pytest.fixture(scope="module")
def ensemble(members, cache):
    return LayerHead.from_seeds(members, cache)


def test_the_ensemble_averages_its_members_probabilities(members, ensemble, cache):
    assert isinstance(ensemble.model_, EnsembleModel) and ensemble.fit_["seeds"] == [0, 1]
    got = ensemble.predict(cache, "test").predictions
    each = [m.predict(cache, "test").predictions for m in members]
    kinds = set()
    for task, p in got.items():
        kinds.add(p.task.kind)
        if p.task.kind == "regression":
            np.testing.assert_allclose(p.labels, np.mean([e[task].labels for e in each], axis=0), rtol=1e-5, atol=1e-5)
        elif p.task.kind == "sequence":
            mean = np.mean([e[task].probabilities for e in each], axis=0)  # (n, C)
            np.testing.assert_allclose(p.probabilities, mean, atol=1e-5)
            np.testing.assert_array_equal(p.labels, mean.argmax(-1))
        else:  # per word: the mean of the members' first-sub-token probabilities
            for i, words in enumerate(p.probabilities):
                mean = np.mean([e[task].probabilities[i] for e in each], axis=0)  # (n_words, C)
                np.testing.assert_allclose(words, mean, atol=1e-5)
                np.testing.assert_array_equal(p.labels[i], mean.argmax(-1))
    assert kinds == {"sequence", "token", "regression"}
    # The members really differ, so the average is not one of them.
    a, b = (e["topic"].probabilities for e in each)
    assert np.abs(a - b).max() > 1e-3


def test_its_validation_metrics_are_what_its_model_scores(ensemble, cache):
    """The metrics combined from the members' validation passes equal a pass of the ensemble's own model."""
    _, val_feed, _ = ensemble.validation_data(cache, "train", None, ensemble.tasks_, ensemble.layer_names_,
                                              ensemble.source_, None)
    metrics, _ = lc.heads.scoring.evaluation.evaluate(ensemble.model_, val_feed)
    for task, values in metrics.items():
        for key, value in values.items():
            if isinstance(value, float):
                assert ensemble.validation_metrics_[task][key] == pytest.approx(value, abs=1e-6), (task, key)


def test_seeds_trains_the_same_ensemble_as_from_seeds(ensemble, cache):
    head = LayerHead("scalar", seeds=2, **QUICK)
    assert head.fit(cache) is head
    assert head.get_params()["seeds"] == 2 and head.get_params()["val_seed"] is None  # fit leaves settings alone
    assert head.fit_["seeds"] == [0, 1] and head.history_.summary("mcc").startswith("2 seeds averaged")
    for task, p in head.predict(cache, "test").predictions.items():
        q = ensemble.predict(cache, "test").predictions[task]
        if p.task.kind == "token":
            assert all(np.array_equal(x, y) for x, y in zip(p.labels, q.labels))
        else:
            np.testing.assert_allclose(p.labels, q.labels, rtol=1e-6)


def test_save_and_load(ensemble, cache, tmp_path):
    loaded = LayerHead.load(ensemble.save(tmp_path / "saved"))
    assert isinstance(loaded.model_, EnsembleModel) and loaded.seeds == 2
    for task, p in loaded.predict(cache, "test").predictions.items():
        q = ensemble.predict(cache, "test").predictions[task]
        if p.task.kind == "token":
            assert all(np.array_equal(x, y) for x, y in zip(p.labels, q.labels))
        else:
            np.testing.assert_array_equal(p.labels, q.labels)


def test_refusals(members, cache, cache_path):
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ConfigError, match="seeds is the number of heads"):
            LayerHead("scalar", seeds=bad, **QUICK).fit(cache)
    with pytest.raises(ConfigError, match="at least 2"):
        LayerHead.from_seeds(members[:1], cache)
    other = LayerHead("last", seed=2, val_seed=0, solver="adamw", **QUICK).fit(cache)
    with pytest.raises(ConfigError, match="other settings"):
        LayerHead.from_seeds([members[0], other], cache)
    with pytest.raises(ConfigError, match="convex solver"):
        LayerHead("layer:1", tasks=["topic"], seeds=2, **QUICK).fit(cache)
    assert_refused(invoke("train-head", cache_path, "--seeds", 0), "seeds")


def test_an_ensemble_of_different_heads_reads_token_states_and_nests(members, ensemble, cache, tmp_path):
    """A convex layer:1 head on pooled vectors, an attention head on token states and a seed ensemble."""
    linear = LayerHead("layer:1", tasks=["topic"], val_seed=0, **QUICK).fit(cache)
    attention = LayerHead("attention", tasks=["topic"], val_seed=0, **QUICK).fit(cache)
    assert linear.source_.startswith("pooled") and attention.source_ == "tokens"
    seeds = LayerHead("scalar", tasks=["topic"], seeds=2, val_seed=0, **QUICK).fit(cache)
    mixed = LayerHead.from_members([linear, attention, seeds], cache, labels=["linear", "attention", "seeds"])
    assert mixed.source_ == "tokens" and mixed.fit_["members"] == ["linear", "attention", "seeds"]
    assert mixed.mixer == "ensemble of layer:1, attention, scalar"
    assert mixed.history_.summary("mcc").startswith("3 heads averaged (linear, attention, seeds)")
    got = mixed.predict(cache, "test").predictions["topic"].probabilities
    each = [h.predict(cache, "test").predictions["topic"].probabilities for h in (linear, attention, seeds)]
    # The linear head reads token states here, and the cache's pooled vectors were rounded to fp16.
    np.testing.assert_allclose(got, np.mean(each, axis=0), atol=2e-3)
    loaded = LayerHead.load(mixed.save(tmp_path / "mixed"))
    np.testing.assert_array_equal(loaded.predict(cache, "test").predictions["topic"].probabilities, got)
    assert set(loaded.layer_weights()) == {"shared[0]", "shared[1]", "shared[2][0]", "shared[2][1]"}
    # Members must predict the same tasks from the same states.
    other = LayerHead("layer:1", tasks=["sentiment"], val_seed=0, **QUICK).fit(cache)
    with pytest.raises(ConfigError, match="predicts other tasks"):
        LayerHead.from_members([linear, other], cache)
    narrow = LayerHead("scalar", tasks=["topic"], layers=["layer_1", "layer_2"], val_seed=0, **QUICK).fit(cache)
    with pytest.raises(ConfigError, match="reads other states"):
        LayerHead.from_members([linear, narrow], cache)


def test_the_ensembles_use_a_heads_public_surface_only():
    """Issue 39: the ensembles compose heads through EnsembleHead (settings, fit, check_fitted, validation_data,
    fitted_state / set_fitted_state): no private name and no fitted attribute of a head is read or set there."""
    import ast
    import inspect

    from layercache.heads.ensembles import members

    tree = ast.parse(inspect.getsource(members))
    touched = sorted({node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                      and (node.attr.startswith("_") or node.attr.endswith("_"))})
    assert touched == []
    surface = {name for name in vars(members.EnsembleHead) if not name.startswith("_")}
    assert surface == {"get_params", "set_params", "fit", "check_fitted", "validation_data", "fitted_state",
                       "set_fitted_state"}
    assert all(callable(getattr(LayerHead, name)) for name in surface)


def test_a_loaded_head_is_refused_as_a_member_in_one_sentence(members, cache, tmp_path):
    """A loaded head keeps no validation pass to combine (it crashed with an AttributeError)."""
    loaded = LayerHead.load(members[1].save(tmp_path / "member"))
    assert loaded.fitted_state().validation_pass is None and loaded.fitted_state().cache == members[1].cache_info_
    with pytest.raises(ConfigError, match="Head 1 of the ensemble has no validation pass: it was loaded"):
        LayerHead.from_members([members[0], loaded], cache)


def test_ensembles_of_a_projected_cache_keep_its_basis_and_load(tiny_models, tmp_path):
    """A seed ensemble, and an ensemble of members, of a --project cache saved no basis, so its run could not be
    loaded (nor served live): the ensemble head now keeps its first member's, as a single head does."""
    projected = tmp_path / "projected"
    lc.extract(str(tiny_models["bert"]), "builtin", projected, limit=120, project=8, progress=False)
    with lc.LayerCache.open(projected) as opened:
        seeds = LayerHead("scalar", seeds=2, **QUICK).fit(opened)
        single = [LayerHead("scalar", seed=s, val_seed=0, **QUICK).fit(opened) for s in (0, 1)]
        members = LayerHead.from_members(single, opened)
        for name, head in (("seeds", seeds), ("members", members)):
            assert head.projection_ is not None
            assert np.array_equal(head.projection_.basis.numpy(), single[0].projection_.basis.numpy())
            head.save(tmp_path / name)
            loaded = LayerHead.load(tmp_path / name)
            assert np.array_equal(loaded.projection_.basis.numpy(), single[0].projection_.basis.numpy())
            assert np.array_equal(loaded.predict(opened, "validation").predictions["sentiment"].probabilities,
                                  head.predict(opened, "validation").predictions["sentiment"].probabilities)
