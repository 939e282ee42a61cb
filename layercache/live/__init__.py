"""The live backbone joined to trained heads: the one package that imports both.

:class:`~layercache.live.feed.LiveFeed` computes states with the backbone in the loop in the shape a
cache feed gives them (training and scoring without a cache); :class:`~layercache.live.bundle.LiveBundle`
serves trained runs on raw text with one stopped-early forward pass per batch
(:func:`~layercache.live.bundle.attach` on a model already in memory).
:func:`~layercache.live.verify.verify_cache` re-runs a cache's backbone on sampled examples and
compares the stored states; :func:`~layercache.live.parity.parity` compares a run's cache and live
predictions; :func:`~layercache.live.training.train_head_live` trains a head with the backbone in the loop.
"""

from .bundle import LiveBundle, attach
from .feed import LiveFeed
from .parity import ParityResult, parity
from .results import BundlePredictions, HeadPredictions
from .training import train_head_live
from .verify import VerifyResult, verify_cache

__all__ = ["LiveFeed", "LiveBundle", "attach", "BundlePredictions", "HeadPredictions", "verify_cache",
           "VerifyResult", "parity", "ParityResult", "train_head_live"]
