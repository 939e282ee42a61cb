"""Heads trained from a cache: every mixer learns, runs reload exactly, bad caches are refused.

The tiny backbones are random, so the built-in *sentence* tasks (built to defeat bag-of-words) are
out of their reach; the token task ``negation_scope`` is not: negation cues are word identity and
their scope is the words that follow, which even random attention mixes into a token's state. A
majority-class tagger scores macro-F1 0.29 on it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import layercache as lc
from layercache.core.holdout import validation_slice
from layercache.errors import CacheMismatchError, ConfigError
from layercache.heads import HeadModel, LayerHead, train_head
from layercache.heads.mixers import MIXERS
from layercache.heads.scoring.evaluation import predict
from layercache.heads.training.trainer import clip_gradients
from layercache.store.cache_feed import CacheFeed

FAST = {"epochs": 6, "patience": 0, "progress": False, "device": "cpu"}
SMALL_ADAPTIVE = {"k": 16}
MAJORITY_MACRO_F1 = 0.29


@pytest.fixture(scope="module")
def bert_cache(tiny_models, tmp_path_factory):
    out = tmp_path_factory.mktemp("heads") / "bert-builtin"
    return lc.extract(str(tiny_models["bert"]), "builtin", out, progress=False, limit=1000).path


@pytest.fixture(scope="module")
def cache(bert_cache):
    with lc.LayerCache.open(bert_cache) as opened:
        yield opened


def options(mixer: str) -> dict:
    return {"mixer_options": SMALL_ADAPTIVE} if mixer == "adaptive" else {}


@pytest.mark.parametrize("mixer", [f"{name}:1" if cls.spec_argument else name for name, cls in MIXERS.items()])
def test_every_mixer_learns_negation_scope(cache, mixer):
    head = LayerHead(mixer, tasks=["negation_scope"], **FAST, **options(mixer)).fit(cache)
    metrics = head.score(cache, "test")["negation_scope"]
    assert metrics["macro_f1"] > MAJORITY_MACRO_F1 + 0.12, metrics
    weights = head.layer_weights()["shared"]
    assert weights is not None and len(weights) == len(cache.layer_names)
    assert sum(weights) == pytest.approx(1.0, abs=1e-5)


def test_saved_run_reloads_to_identical_predictions(cache, tmp_path):
    head = LayerHead("scalar", tasks=["negation_scope", "sentiment", "intensity"], epochs=2, progress=False,
                     device="cpu").fit(cache)
    head.save(tmp_path / "run")
    assert not list(tmp_path.glob("run/*.pt")) and not list(tmp_path.glob("run/*.pkl"))
    loaded = LayerHead.load(tmp_path / "run")
    before, after = head.predict(cache, "test").predictions, loaded.predict(cache, "test").predictions
    for task in before:
        if before[task].probabilities is not None:  # (n, C), or one (n_words, C) per example for a token task
            for a, b in zip(before[task].probabilities, after[task].probabilities):
                np.testing.assert_array_equal(a, b)
        for a, b in zip(before[task].labels, after[task].labels):
            np.testing.assert_array_equal(a, b)
    assert loaded.get_params() == head.get_params()


def test_training_is_repeatable_with_a_seed(cache):
    a = LayerHead("attention", tasks=["negation_scope"], epochs=2, progress=False, device="cpu", seed=3).fit(cache)
    b = LayerHead("attention", tasks=["negation_scope"], epochs=2, progress=False, device="cpu", seed=3).fit(cache)
    for (name, x), (_, y) in zip(a.model_.state_dict().items(), b.model_.state_dict().items()):
        assert torch.equal(x, y), name


def test_act_depths_lie_between_one_and_the_number_of_layers(cache):
    head = LayerHead("act", tasks=["negation_scope"], **FAST).fit(cache)
    L = len(cache.layer_names) - 1
    feed = CacheFeed(cache, "test", tasks=["negation_scope"], batch_size=64)
    head.model_.eval()
    for batch in feed.epoch():
        usage = head.model_(batch.states, batch.mask).usage["shared"]
        steps, depth = usage["steps"][batch.mask], usage["depth"][batch.mask]
        assert steps.min() >= 1 and steps.max() <= L
        assert depth.min() >= 1 and depth.max() <= L + 1
    assert 1 <= predict(head.model_, feed).usage["shared"]["mean_depth"] <= L + 1


def test_gumbel_keeps_to_its_budget(cache):
    head = LayerHead("gumbel", tasks=["negation_scope"], mixer_options={"budget": 1}, **FAST).fit(cache)
    usage = head.predict(cache, "test").usage["shared"]["mean_states_used"]
    assert usage == pytest.approx(1.0, abs=0.25)


def test_joint_heads_with_separate_mixers_and_loss_weights(cache):
    head = LayerHead("scalar", tasks=["negation_scope", "intensity"], share_mixer=False,
                     loss_weights={"intensity": 0.5}, epochs=2, progress=False, device="cpu").fit(cache)
    assert set(head.layer_weights()) == {"negation_scope", "intensity"}
    values = head.predict(cache, "test").predictions["intensity"].labels
    gold = cache.labels("test", "intensity")
    # Standardised targets come back in their own units.
    assert abs(values.mean() - gold.mean()) < gold.std()


def test_validation_slice_is_stratified_and_disjoint(cache):
    tasks = [cache.manifest.task("sentiment")]
    train, val = validation_slice(cache, "train", tasks, 0.1, seed=0)
    assert len(np.intersect1d(train, val)) == 0 and len(train) + len(val) == cache.num_examples("train")
    labels = cache.labels("train", "sentiment")
    assert labels[val].mean() == pytest.approx(labels.mean(), abs=0.02)
    again = validation_slice(cache, "train", tasks, 0.1, seed=0)[1]
    assert np.array_equal(val, again)


def test_a_cache_without_validation_uses_a_slice_of_train(tiny_models, tmp_path):
    path = tmp_path / "data.jsonl"
    rows = [{"text": f"the lamp is {'good' if i % 2 else 'bad'} and the room is quiet", "label": i % 2}
            for i in range(60)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    cache = lc.extract(str(tiny_models["bert"]), str(path), tmp_path / "c", progress=False).path
    result = train_head(cache, "last", out=tmp_path / "run", epochs=1, progress=False, device="cpu")
    assert "slice" in result.metrics["data"]["validation"]
    assert result.metrics["data"]["n_validation"] == 6 and result.metrics["data"]["n_train"] == 54


def test_mismatched_backbone_is_refused(cache, tiny_models, tmp_path):
    head = LayerHead("last", tasks=["sentiment"], epochs=1, progress=False, device="cpu").fit(cache)
    other = lc.extract(str(tiny_models["roberta"]), "builtin", tmp_path / "other", progress=False, limit=20).path
    with lc.LayerCache.open(other) as opened, pytest.raises(CacheMismatchError, match="backbone weights"):
        head.predict(opened, "test")
    backbone = lc.load_backbone(str(tiny_models["roberta"]), device="cpu")
    with pytest.raises(CacheMismatchError, match="different weights"):
        head.check_backbone(backbone)
    head.check_backbone(lc.load_backbone(str(tiny_models["bert"]), device="cpu"))


def test_missing_states_are_refused(cache, tiny_models, tmp_path):
    head = LayerHead("scalar", tasks=["sentiment"], epochs=1, progress=False, device="cpu").fit(cache)
    subset = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "subset", progress=False, limit=20,
                        layers=[-1]).path
    with lc.LayerCache.open(subset) as opened, pytest.raises(CacheMismatchError, match="embeddings"):
        head.predict(opened, "test")


def test_bad_requests_are_config_errors(cache, tiny_models, tmp_path):
    with pytest.raises(ConfigError, match="known: last"):
        LayerHead("nope").fit(cache)
    with pytest.raises(ConfigError, match="no task 'genre'"):
        LayerHead("last", tasks=["genre"]).fit(cache)
    with pytest.raises(ConfigError, match="no split 'dev'"):
        LayerHead("last", epochs=1, progress=False).fit(cache, val_split="dev")
    pooled = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "pooled", progress=False, limit=20,
                        store="pooled").path
    with lc.LayerCache.open(pooled) as opened:
        with pytest.raises(ConfigError, match="needs token states"):
            LayerHead("last", tasks=["negation_scope"]).fit(opened)
        head = LayerHead("last", tasks=["sentiment"], epochs=1, progress=False, device="cpu").fit(opened)
        assert head.source_ == "pooled:mean"
    with pytest.raises(ConfigError, match="not trained yet"):
        LayerHead("last").predict(cache, "test")


def test_unlabelled_cache_is_refused(tiny_models, tmp_path):
    path = tmp_path / "texts.txt.csv"
    path.write_text("text\n" + "\n".join(f"the lamp {i} is good" for i in range(10)) + "\n")
    cache = lc.extract(str(tiny_models["bert"]), str(path), tmp_path / "c", progress=False, no_labels=True).path
    with lc.LayerCache.open(cache) as opened, pytest.raises(ConfigError, match="no labels"):
        LayerHead("last").fit(opened)


def test_head_model_config_round_trip(cache):
    tasks = [cache.manifest.task("sentiment"), cache.manifest.task("negation_scope")]
    model = HeadModel(3, 32, tasks, mixer="adaptive", mixer_options={"k": 8})
    again = HeadModel.from_config(json.loads(json.dumps(model.get_config())))
    again.load_state_dict(model.state_dict())
    assert again.get_config() == model.get_config()


def test_linear_heads_read_pooled_vectors_with_identical_results(cache):
    auto = LayerHead("scalar", tasks=["sentiment", "intensity"], epochs=2, progress=False, device="cpu").fit(cache)
    tokens = LayerHead("scalar", tasks=["sentiment", "intensity"], epochs=2, progress=False, device="cpu",
                       source="tokens").fit(cache)
    assert auto.source_ == "pooled:mean" and tokens.source_ == "tokens"
    a, b = auto.predict(cache, "test").predictions, tokens.predict(cache, "test").predictions
    # Same model, same data: only fp16 rounding of the stored pooled vectors differs.
    np.testing.assert_allclose(a["sentiment"].probabilities, b["sentiment"].probabilities, atol=2e-3)
    np.testing.assert_allclose(a["intensity"].labels, b["intensity"].labels, atol=2e-2)
    for mixer, options in (("adaptive", {"mixer_options": SMALL_ADAPTIVE}), ("attention", {}),
                           ("last", {"head_options": {"pooling": "first"}})):
        head = LayerHead(mixer, tasks=["sentiment"], epochs=1, progress=False, device="cpu", **options).fit(cache)
        assert head.source_ == "tokens", mixer


@pytest.mark.parametrize("max_norm", [0.5, 100.0], ids=["clipped", "unchanged"])
def test_gradient_clipping_matches_torch(max_norm):
    torch.manual_seed(0)
    shapes = [(7, 16, 32), (64,), (3, 5)]
    mine = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    ref = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    for a, b in zip(mine, ref):
        a.grad = torch.randn(a.shape)
        b.grad = a.grad.clone()
    mine.append(torch.nn.Parameter(torch.zeros(2)))  # no gradient: skipped
    clip_gradients(mine, max_norm)
    torch.nn.utils.clip_grad_norm_(ref, max_norm)
    for a, b in zip(mine, ref):
        assert torch.equal(a.grad, b.grad)  # the same numbers, not merely close
