"""``train_head_live``: the same head and run folder as ``train_head``, with the backbone in the loop.

    result = train_head_live("runs/demo-cache", "adaptive", out="runs/adaptive-live")

Every batch of training, validation and test is computed by the frozen backbone
(:meth:`LiveFeed.from_cache_tokens <layercache.live.feed.LiveFeed.from_cache_tokens>`: the cache's
stored token ids run through the model exactly as extraction ran them, the states rounded to the
cache's storage dtype as the cache holds them). No stored state is read: the cache supplies the
token ids, the labels and what is recorded about it (manifest, per-dimension statistics for
``--normalize standardize``, which are sums written at extraction, not states). So the run is the
reference an end-to-end check or a benchmark compares a cache-trained run with: same data, same
seed, same schedule, the states computed afresh. The run folder has the usual format (``eval``,
``predict`` and :class:`~layercache.live.bundle.LiveBundle` read it); ``metrics.json`` and
``config.json`` record ``data.trained: "live"`` with the backbone's forward time.
"""

from __future__ import annotations

import os

import torch

from ..backbone.loader import Backbone
from ..core.option_names import option
from ..core.threads import computes
from ..errors import ConfigError
from ..extraction.forward import pool
from ..heads.estimator import LayerHead
from ..heads.head_options import DEFAULT_MIXER
from ..heads.workflow import TrainResult, train_head
from ..store.batches import CacheBatch
from ..store.feature_source import parse_source
from ..store.reader import LayerCache, using_cache
from ..store.storage import codec
from .feed import LiveFeed
from .verify import check_backbone, load_cache_backbone


class LiveLayerHead(LayerHead):
    """A :class:`LayerHead` whose feeds run ``backbone`` on every batch instead of reading stored states.

    It overrides :meth:`LayerHead.make_feed`, the estimator's public extension point for its source of
    batches; everything else (validation, selection, scoring, the run folder) is ``LayerHead``'s.

    Set :attr:`backbone` (the cache's, fingerprints checked) before :meth:`fit`; the fitted head
    saves and loads as a plain :class:`LayerHead`.
    """

    backbone: Backbone | None = None

    def make_feed(self, cache, split, tasks, layer_names, source, *, rows=None, batch_size=None, pool=None) -> LiveFeed:
        """A :class:`LiveFeed` of ``split`` (pooled as the cache pools for a ``pooled:<mode>`` source), in place
        of :meth:`LayerHead.make_feed`'s cache feed: the backbone computes every batch (``pool`` is not used)."""
        if self.backbone is None:
            self.backbone = load_cache_backbone(cache, device=self.device or "auto")
        feeds = self.__dict__.setdefault("_live_feeds", [])
        mode = parse_source(source, allow_auto=False).mode
        kind = LiveFeed if mode is None else PooledLiveFeed
        feed = kind.from_cache_tokens(cache, split, self.backbone, tasks=[t.name for t in tasks], rows=rows,
                                      layers=layer_names, batch_size=batch_size or self.batch_size,
                                      storage_dtype=cache.manifest.storage.dtype)
        if mode is not None:
            feed.pool_as(mode, cache.manifest.storage.skips_first_in_mean)
        feeds.append(feed)
        return feed

    @computes
    def fit(self, cache: LayerCache, split: str = "train", val_split: str | None = None, **kwargs) -> "LiveLayerHead":
        """Fit as :meth:`LayerHead.fit` does, every batch from the live backbone (one head: no seed ensemble)."""
        if self.seeds != 1:
            raise ConfigError("Training with the live backbone fits one head, the reference for end-to-end checks; "
                              f"leave out {option('seeds')} (or train the seed ensemble from the cache).")
        super().fit(cache, split, val_split, **kwargs)
        feeds = self.__dict__.pop("_live_feeds", [])
        self.data_["trained"] = "live"
        self.data_["live"] = {"backbone": self.backbone.name, "forward_dtype": str(self.backbone.dtype)[6:],
                              "device": str(self.backbone.device),
                              "forward_seconds": round(sum(f.forward_seconds for f in feeds), 3)}
        return self


@computes
def train_head_live(cache: str | os.PathLike | LayerCache | None = None, mixer: str = DEFAULT_MIXER, *,
                    backbone: Backbone | None = None, allow_pickle: bool = False, **kwargs) -> TrainResult:
    """:func:`~layercache.heads.workflow.train_head` with the backbone in the loop (see the module docstring).

    ``backbone``: one already loaded (checked against the cache's fingerprints); default: the
    model the manifest names, on ``device`` (``allow_pickle``: one that has only pickle weights, as
    ``extract --allow-pickle`` loaded it). Everything else is as for ``train_head``; a head on
    the cache's pooled vectors gets them pooled live, as extraction pooled them.
    """
    with using_cache(cache) as handle:
        if backbone is None:
            backbone = load_cache_backbone(handle, device=kwargs.get("device") or "auto", allow_pickle=allow_pickle)
        else:
            check_backbone(handle, backbone)

        def estimator(mixer_name: str, **params) -> LiveLayerHead:
            head = LiveLayerHead(mixer_name, **params)
            head.backbone = backbone
            return head

        return train_head(handle, mixer, estimator=estimator, **kwargs)


class PooledLiveFeed(LiveFeed):
    """A live feed that serves pooled vectors ``(B, 1, S, D)``, as a cache's ``pooled/<mode>`` holds them.

    Each batch's token states are pooled in float32 from the forward pass by extraction's own
    :func:`~layercache.extraction.forward.pool` (``mean_skip_first`` as the cache recorded), then
    rounded to the storage dtype: extraction's order.
    """

    mode = "mean"
    skip_first = False

    def pool_as(self, mode: str, skip_first: bool) -> None:
        """Pool with ``mode`` (``mean``, ``first``, ``last``); the mean leaves out first tokens when ``skip_first``."""
        self.mode, self.skip_first = mode, skip_first
        self.rounding, self.storage_dtype = self.storage_dtype, None  # round after pooling, not before

    def batch(self, rows):
        """The rows' pooled vectors: states ``(B, 1, S, D)``, mask ``(B, 1)``."""
        out = super().batch(rows)
        states, mask = out.states, out.mask.to(out.states.device)  # (B, T, S, D), (B, T)
        lengths = mask.sum(1)  # (B,)
        # the rows' real tokens one after another (padding is on the right), pooled as extraction pools
        pooled = pool(states[mask], lengths, (self.mode,), mean_skip_first=self.skip_first)[self.mode]  # (B, S, D)
        if self.rounding is not None:
            pooled = codec(self.rounding).round(pooled).float()
        return CacheBatch(states=pooled.unsqueeze(1), mask=torch.ones(len(lengths), 1, dtype=torch.bool),
                          rows=out.rows, labels=out.labels, word_ids=None)
