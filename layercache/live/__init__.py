"""The live backbone joined to trained heads: the one package that imports both.

Today the live feed (:class:`~layercache.live.feed.LiveFeed`), which computes states with the
backbone in the loop in the shape a cache feed gives them; the bundle, ``predict`` and ``verify``
come here next.
"""

from .feed import LiveFeed

__all__ = ["LiveFeed"]
