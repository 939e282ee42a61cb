"""train_head_live (the backbone in the loop) and parity of a run's cache vs live-bundle predictions.

The train-head --live command is tested in tests/cli/test_live_train.py."""

from __future__ import annotations

import json

import numpy as np

import layercache as lc
from layercache.live.parity import parity
from layercache.live.training import train_head_live


def test_parity_of_cache_trained_runs_is_one(live_caches, runs):
    for cache_name in ("bert", "bert-stride", "gpt2"):
        for name in ("topic", "scope", "sentiment"):
            report = parity(runs[cache_name][name], live_caches[cache_name], "validation")
            assert report.agreement == 1.0, (cache_name, name, report.describe())
        report = parity(runs[cache_name]["intensity"], live_caches[cache_name], "validation")
        assert report.agreement is None and report.max_abs_diff < 1e-3
    scope = parity(runs["bert"]["scope"], live_caches["bert"], "validation", rows=[0, 3])
    assert scope.examples == 2 and scope.tasks["negation_scope"]["compared"] > 2  # per word


def test_train_head_live_writes_a_run_that_matches_the_cache_trained_one(live_caches, tmp_path):
    cache = live_caches["bert"]
    options = {"tasks": ["topic"], "layers": ["layer_1"], "progress": False, "batch_size": 8}
    live = train_head_live(cache, "last", out=tmp_path / "live", **options)
    cached = lc.train_head(cache, "last", out=tmp_path / "cached", **options)
    metrics = json.loads((tmp_path / "live" / "metrics.json").read_text())
    assert metrics["data"]["trained"] == "live" and metrics["data"]["live"]["forward_seconds"] > 0
    assert "trained" not in cached.metrics["data"]
    # The convex fit on states rounded to the cache's dtype: the same features, so the same head.
    head = lc.LayerHead.load(live.run)
    with lc.LayerCache.open(cache) as handle:
        mine = head.predict(handle, "validation").predictions["topic"].labels
        theirs = lc.LayerHead.load(cached.run).predict(handle, "validation").predictions["topic"].labels
    assert np.mean(np.asarray(mine) == np.asarray(theirs)) >= 0.9
    assert abs(live.metrics["validation"]["topic"]["accuracy"] - cached.metrics["validation"]["topic"]["accuracy"]) \
        <= 0.1


def test_train_head_live_takes_its_feeds_through_the_public_hook(live_caches, tmp_path, monkeypatch):
    """LiveLayerHead swaps the source of batches through LayerHead.make_feed, the estimator's public extension
    point, and no private method of LayerHead: every feed of the fit is a LiveFeed made there."""
    from layercache.heads.estimator import LayerHead
    from layercache.live.feed import LiveFeed
    from layercache.live.training import LiveLayerHead

    assert "make_feed" in vars(LiveLayerHead)
    assert not any(name.startswith("_") and name in vars(LayerHead) for name in vars(LiveLayerHead)
                   if not name.startswith("__"))  # overrides no private method of LayerHead
    made = []
    original = LiveLayerHead.make_feed

    def counting(self, *args, **kwargs):
        feed = original(self, *args, **kwargs)
        made.append(feed)
        return feed

    monkeypatch.setattr(LiveLayerHead, "make_feed", counting)
    train_head_live(live_caches["bert"], "last", out=tmp_path / "live", tasks=["topic"], layers=["layer_1"],
                    progress=False, batch_size=8)
    assert len(made) >= 2 and all(isinstance(feed, LiveFeed) for feed in made)  # training and validation at least
    assert {feed.split for feed in made} >= {"train", "validation"}
