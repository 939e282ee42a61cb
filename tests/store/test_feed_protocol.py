"""One feed contract and one batch layout: both feeds are a Feed, every producer pads and aligns labels alike."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import layercache as lc
from layercache.backbone.loader import load_backbone
from layercache.core.tasks import IGNORE_INDEX
from layercache.live.feed import LiveFeed
from layercache.sources.builtin import load_builtin
from layercache.store.batches import (
    CacheBatch,
    consecutive_starts,
    first_subtoken_labels,
    first_subtokens,
    padded_positions,
)
from layercache.store.cache_feed import CacheFeed
from layercache.store.feed import Feed
from layercache.store.reader import CacheBatch as ReaderCacheBatch

SIZES = {"train": 12, "validation": 6}
TASKS = ["sentiment", "negation_scope", "intensity"]  # sequence, token, regression


@pytest.fixture(scope="module")
def cache_and_backbone(tiny_models, tmp_path_factory):
    import layercache.sources.builtin as builtin

    root = tmp_path_factory.mktemp("feed-protocol")
    original = builtin.load_builtin
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        mp.setattr(builtin, "load_builtin", lambda seed=0, sizes=None: original(seed, sizes or SIZES))
        path = lc.extract(str(tiny_models["bert"]), "builtin", root / "cache", progress=False, batch_size=5).path
    backbone = load_backbone(str(tiny_models["bert"]), device="cpu", words_input=True)
    with lc.LayerCache.open(path) as cache:
        yield cache, backbone


@pytest.fixture(scope="module")
def feeds(cache_and_backbone):
    cache, backbone = cache_and_backbone
    records = load_builtin(sizes=SIZES)
    return {"cache": CacheFeed(cache, "train", tasks=TASKS, batch_size=5),
            "live": LiveFeed.matching_cache(cache, "train", backbone, records, tasks=TASKS, batch_size=5),
            "live without a cache": LiveFeed(backbone, records, "validation", tasks=TASKS, batch_size=4)}


def protocol_members() -> tuple[dict[str, object], dict[str, inspect.Signature]]:
    """The Feed protocol's attributes (name -> annotation) and methods (name -> signature)."""
    methods = {name: inspect.signature(value) for name, value in vars(Feed).items()
               if callable(value) and (not name.startswith("_") or name == "__len__")}
    attributes = dict(Feed.__annotations__)
    attributes["n_examples"] = "int"  # a property
    return attributes, methods


def test_the_feed_protocol_names_what_trainer_and_evaluation_read():
    attributes, methods = protocol_members()
    assert set(methods) == {"__len__", "epoch", "n_words", "gold"}
    assert set(attributes) == {"split", "tasks", "kinds", "layer_names", "rows", "n_examples"}
    assert list(methods["epoch"].parameters) == ["self", "shuffle", "seed"]


@pytest.mark.parametrize("kind", ["cache", "live", "live without a cache"])
def test_both_feeds_satisfy_the_protocol(feeds, kind):
    feed = feeds[kind]
    assert isinstance(feed, Feed)
    # Structurally too: every method with the protocol's parameters and defaults, every attribute typed.
    attributes, methods = protocol_members()
    for name, expected in methods.items():
        got = inspect.signature(getattr(type(feed), name))
        assert [(p.name, p.default) for p in got.parameters.values()] == \
               [(p.name, p.default) for p in expected.parameters.values()], name
    assert isinstance(feed.split, str) and isinstance(feed.n_examples, int)
    assert feed.tasks == TASKS and set(feed.kinds) == set(TASKS)
    assert feed.kinds == {"sentiment": "sequence", "negation_scope": "token", "intensity": "regression"}
    assert isinstance(feed.rows, np.ndarray) and len(feed.rows) == feed.n_examples
    assert all(isinstance(n, str) for n in feed.layer_names)
    # What the protocol promises: len() batches, every row once per epoch, the same seed the same order.
    batches = list(feed.epoch(shuffle=True, seed=3))
    assert len(batches) == len(feed) and all(isinstance(b, CacheBatch) for b in batches)
    assert sorted(np.concatenate([b.rows for b in batches]).tolist()) == feed.rows.tolist()
    again = [b.rows.tolist() for b in feed.epoch(shuffle=True, seed=3)]
    assert again == [b.rows.tolist() for b in batches]
    assert len(feed.gold("negation_scope")) == feed.n_examples
    assert feed.n_words(feed.rows).shape == (feed.n_examples,)


def test_a_feed_missing_a_member_is_not_a_feed(feeds):
    class NoGold:
        split, tasks, kinds, layer_names, rows, n_examples = "train", [], {}, [], np.arange(2), 2

        def __len__(self):
            return 1

        def epoch(self, shuffle=False, seed=0):
            return iter(())

        def n_words(self, rows):
            return np.zeros(len(rows), dtype=np.int64)

    assert not isinstance(NoGold(), Feed)


def test_cache_batch_is_one_class_wherever_it_is_imported():
    assert ReaderCacheBatch is CacheBatch is lc.CacheBatch


def test_padded_positions_repeat_each_rows_first_token():
    at = padded_positions(np.array([5, 0, 9]), np.array([2, 3, 1]))
    np.testing.assert_array_equal(at.token, [[5, 6, 5], [0, 1, 2], [9, 9, 9]])
    np.testing.assert_array_equal(at.real, [[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    assert at.mask.dtype == torch.bool and at.mask.shape == (3, 3)
    word_ids = np.arange(12) % 4
    np.testing.assert_array_equal(at.word_ids(word_ids).numpy(), [[1, 2, -1], [0, 1, 2], [1, -1, -1]])
    np.testing.assert_array_equal(consecutive_starts(np.array([2, 3, 1])), [0, 2, 5])


def test_labels_sit_on_the_first_sub_token_of_each_word():
    # row 0: [CLS] w0 w0 w1 [SEP] pad; row 1: [CLS] w0 w1 w1 w2 [SEP], only 2 labelled words
    word_ids = np.array([[-1, 0, 0, 1, -1, -1], [-1, 0, 1, 1, 2, -1]])
    labels = np.array([7, 8, 3, 4])  # row 0's words, then row 1's
    n_words = np.array([2, 2])
    out = first_subtoken_labels(word_ids, labels, np.array([0, 2]), n_words)
    x = IGNORE_INDEX
    assert out.dtype == torch.int64
    np.testing.assert_array_equal(out.numpy(), [[x, 7, x, 8, x, x], [x, 3, 4, x, x, x]])
    np.testing.assert_array_equal(first_subtokens(word_ids, n_words), out.numpy() != x)


def test_every_producer_lays_a_batch_out_alike(cache_and_backbone, feeds):
    """The cache feed, the live feed and the reader agree on mask, word ids and labels, and all three pad by
    repeating the row's first token: the reader is the cache feed's gather widened to float32, so it no longer
    writes zeros at padded positions (it did before it shared the feed's gather)."""
    cache, _ = cache_and_backbone
    feed, live = feeds["cache"], feeds["live"]
    for batch in feed.epoch(shuffle=False):
        read = cache.batch("train", batch.rows, tasks=TASKS)
        computed = live.batch(batch.rows)
        for other in (read, computed):
            assert torch.equal(other.mask, batch.mask) and torch.equal(other.word_ids, batch.word_ids)
            for task in TASKS:
                assert torch.equal(other.labels[task], batch.labels[task]), task
        pad = ~batch.mask
        if pad.any():
            first = batch.states[:, :1].expand_as(batch.states)
            assert torch.equal(batch.states[pad], first[pad])
            assert torch.equal(computed.states[pad], computed.states[:, :1].expand_as(computed.states)[pad])
        assert torch.equal(read.states, batch.states.float())  # padded positions included
