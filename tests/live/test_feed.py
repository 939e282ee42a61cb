"""LiveFeed: batches computed by the backbone equal the cache's batches, and heads train on them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import LIVE_OPTIONS, LIVE_SIZES

import layercache as lc
from layercache.backbone.loader import load_backbone
from layercache.errors import CacheMismatchError, ConfigError, DatasetError
from layercache.heads import HeadModel, TrainConfig, train_model
from layercache.heads.scoring.evaluation import evaluate, primary_metric
from layercache.live.feed import LiveFeed
from layercache.sources.builtin import load_builtin
from layercache.store.cache_feed import CacheFeed
from layercache.store.feed import Feed

TASKS = ["topic", "sentiment", "negation_scope", "intensity"]  # sequence, sequence, token, regression


def live_and_cache(name, live_caches, tiny_models, records):
    """The cache ``name`` and the backbone that extracted it, loaded the way extraction loads it."""
    backbone = load_backbone(str(tiny_models[name.split("-")[0]]), device="cpu", words_input=True,
                             max_length=LIVE_OPTIONS[name].get("max_length"))
    cache = lc.LayerCache.open(live_caches[name])
    return cache, backbone


def assert_batches_equal(live, cached, fp16: bool):
    np.testing.assert_array_equal(live.rows, cached.rows)
    assert live.states.shape == cached.states.shape
    assert live.states.dtype == torch.float32
    assert torch.equal(live.mask, cached.mask)
    assert torch.equal(live.word_ids, cached.word_ids)
    assert set(live.labels) == set(cached.labels)
    for task, value in cached.labels.items():
        assert live.labels[task].dtype == value.dtype
        assert torch.equal(live.labels[task], value), task
    expected, got = cached.states.numpy(), live.states.numpy()
    scale = np.abs(expected).max()
    if fp16:  # both rounded to fp16: equal up to one fp16 step where padding moved the fp32 value
        np.testing.assert_allclose(got, expected, atol=1e-3 * scale, rtol=1e-3)
    else:  # fp32 live vs fp16 cache: fp16 rounding
        np.testing.assert_allclose(got, expected, atol=2e-3 * scale, rtol=2e-3)


@pytest.mark.parametrize("name", ["bert", "gpt2", "bert-stride"])
@pytest.mark.parametrize("fp16", [False, True])
def test_live_batches_equal_cache_batches(live_caches, tiny_models, records, name, fp16):
    cache, backbone = live_and_cache(name, live_caches, tiny_models, records)
    for split in ("train", "validation"):
        cached_feed = CacheFeed(cache, split, tasks=TASKS, batch_size=7)
        live = LiveFeed.matching_cache(cache, split, backbone, records, tasks=TASKS, batch_size=7,
                                       storage_dtype="float16" if fp16 else None)
        assert live.n_examples == cached_feed.n_examples == LIVE_SIZES[split]
        np.testing.assert_array_equal(live.lengths, cached_feed.lengths)
        seen = []
        for cached in cached_feed.epoch(shuffle=False):
            assert_batches_equal(live.batch(cached.rows), cached, fp16)
            seen.extend(cached.rows)
        assert sorted(seen) == list(range(LIVE_SIZES[split]))
        # Gold labels and word counts in row order, as evaluation reads them.
        for task in TASKS:
            a, b = live.gold(task), cached_feed.gold(task)
            if task == "negation_scope":
                assert all(np.array_equal(x, y) for x, y in zip(a, b)) and len(a) == len(b)
            else:
                np.testing.assert_array_equal(a, b)
        rows = np.arange(LIVE_SIZES[split])
        np.testing.assert_array_equal(live.n_words(rows), cached_feed.n_words(rows))
    if name == "bert-stride":
        assert cache.manifest.splits["train"].n_windowed > 0  # the windowed path was exercised


def test_padding_repeats_first_token_and_states_follow_layers(live_caches, tiny_models, records):
    cache, backbone = live_and_cache("bert", live_caches, tiny_models, records)
    live = LiveFeed.matching_cache(cache, "train", backbone, records, tasks=[], layers=["layer_2", 0])
    assert live.layer_names == ["layer_2", "embeddings"]
    rows = np.argsort(live.lengths)[[0, -1]]  # the shortest and the longest: padding on the first
    batch = live.batch(rows)
    assert batch.states.shape == (2, int(live.lengths.max()), 2, backbone.hidden_size)
    assert batch.labels == {}
    n = int(live.lengths[rows[0]])
    assert not batch.mask[0, n:].any() and batch.mask[0, :n].all()
    assert torch.equal(batch.states[0, n:], batch.states[0, :1].expand_as(batch.states[0, n:]))
    assert (batch.word_ids[0, n:] == -1).all()
    full = LiveFeed.matching_cache(cache, "train", backbone, records, tasks=[]).batch(rows)
    torch.testing.assert_close(batch.states[:, :, 0], full.states[:, :, 2])
    torch.testing.assert_close(batch.states[:, :, 1], full.states[:, :, 0])
    assert not batch.states.is_inference() and not batch.states.requires_grad
    assert live.real_tokens == int(live.lengths[rows].sum()) and 0 < live.padding_efficiency < 1
    assert live.forward_seconds > 0


def test_epochs_cover_every_row_once_in_a_seeded_order(live_caches, tiny_models, records):
    cache, backbone = live_and_cache("bert", live_caches, tiny_models, records)
    live = LiveFeed(backbone, records, "train", tasks=["sentiment"], batch_size=5, rows=range(3, 23))
    assert len(live) == 4 and live.n_examples == 20
    for shuffle, bucket in ((False, 0), (True, 0), (True, 2)):
        live.bucket_batches = bucket
        plan = live.plan(shuffle, seed=1)
        assert sorted(np.concatenate(plan).tolist()) == list(range(3, 23))
        assert len(plan) == len(live)
    live.bucket_batches = 0
    a, b, c = (np.concatenate(live.plan(True, seed=s)) for s in (1, 1, 2))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    ordered = np.concatenate(live.plan(False))
    assert np.all(np.diff(live.lengths[ordered]) >= 0)  # evaluation: sorted by length
    # Without a cache, rows are the records' order: labels come straight from the records.
    batch = next(live.epoch(shuffle=True, seed=3))
    expected = [records.splits["train"].labels["sentiment"][r] for r in batch.rows]
    assert batch.labels["sentiment"].tolist() == expected


def test_train_model_runs_on_a_live_feed_and_scores_like_the_cache(live_caches, tiny_models, records):
    cache, backbone = live_and_cache("bert", live_caches, tiny_models, records)
    tasks = [t for t in cache.tasks if t.name in ("sentiment", "negation_scope")]
    names = [t.name for t in tasks]
    train = LiveFeed.matching_cache(cache, "train", backbone, records, tasks=names, batch_size=8)
    val = LiveFeed.matching_cache(cache, "validation", backbone, records, tasks=names, batch_size=8,
                                  storage_dtype="float16")
    torch.manual_seed(0)
    model = HeadModel(len(cache.layer_names), cache.hidden_size, tasks, mixer="scalar")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert isinstance(train, Feed) and isinstance(val, Feed)  # what train_model and evaluate take
    history = train_model(model, train, val, TrainConfig(epochs=2, lr=1e-2, patience=0), progress=False)
    assert len(history.epochs) == 2
    assert all(np.isfinite(e.train_loss) for e in history.epochs)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert train.real_tokens == 2 * int(train.lengths.sum())  # every row once per epoch
    # The trained head scores the same on the cache and on the live backbone.
    live_metrics, live_pass = evaluate(model, val)
    cache_metrics, cache_pass = evaluate(model, CacheFeed(cache, "validation", tasks=names, batch_size=8))
    np.testing.assert_allclose(live_pass.predictions["sentiment"].probabilities,
                               cache_pass.predictions["sentiment"].probabilities, atol=1e-3)
    assert live_metrics["sentiment"]["accuracy"] == cache_metrics["sentiment"]["accuracy"]
    token_metric = primary_metric(next(t for t in tasks if t.kind == "token"))
    assert live_metrics["negation_scope"][token_metric] == pytest.approx(
        cache_metrics["negation_scope"][token_metric], abs=1e-6)


def test_refuses_what_does_not_match(live_caches, tiny_models, records):
    cache, bert = live_and_cache("bert", live_caches, tiny_models, records)
    gpt2 = load_backbone(str(tiny_models["gpt2"]), device="cpu", words_input=True)
    with pytest.raises(CacheMismatchError, match="different weights"):
        LiveFeed.matching_cache(cache, "train", gpt2, records)
    fewer = load_builtin(sizes={"train": 10, "validation": 8})
    with pytest.raises(DatasetError, match="same limit"):
        LiveFeed.matching_cache(cache, "train", bert, fewer)
    with pytest.raises(ConfigError, match="no task"):
        LiveFeed(bert, records, "train", tasks=["nope"])
    with pytest.raises(ConfigError, match="not in the backbone"):
        LiveFeed(bert, records, "train", layers=["layer_9"])
    with pytest.raises(ConfigError, match="no split"):
        LiveFeed(bert, records, "test")
    with pytest.raises(ConfigError, match="rows must lie"):
        LiveFeed(bert, records, "train", rows=[LIVE_SIZES["train"]])
