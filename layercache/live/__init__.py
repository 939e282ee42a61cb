"""The live backbone joined to trained heads: the one package that imports both.

:class:`~layercache.live.feed.LiveFeed` computes states with the backbone in the loop in the shape a
cache feed gives them (training and scoring without a cache); :class:`~layercache.live.bundle.LiveBundle`
serves trained runs on raw text with one stopped-early forward pass per batch
(:func:`~layercache.live.bundle.attach` on a model already in memory).
"""

from .bundle import LiveBundle, attach
from .feed import LiveFeed
from .results import BundlePredictions, HeadPredictions

__all__ = ["LiveFeed", "LiveBundle", "attach", "BundlePredictions", "HeadPredictions"]
