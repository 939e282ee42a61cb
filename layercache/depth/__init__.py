"""Depth analyses from the cache: which layer knows what, and how deep each example needs to go.

Works from a cache or from plain arrays, never from a model (this package imports no backbone,
extractor or ``transformers``), like :mod:`layercache.heads` and :mod:`layercache.probes`:

- :mod:`.similarity`: linear CKA between layers (:func:`linear_cka`, :func:`cka_matrix`, and
  :func:`layer_similarity` on a cache's pooled vectors);
- :mod:`.expected_layer`: expected layer of scalar-mix weights and cumulative scoring;
- :mod:`.prediction`: prediction depth of each example, its distribution and accuracy by depth.

See ARCHITECTURE.md and the "Probing metrics" section of METHODS.md for the definitions.
"""

from .expected_layer import CumulativeScores, cumulative_scoring, expected_layer
from .prediction import PredictionDepth, prediction_depth
from .similarity import LayerSimilarity, cka_matrix, layer_similarity, linear_cka

__all__ = [
    "CumulativeScores",
    "LayerSimilarity",
    "PredictionDepth",
    "cka_matrix",
    "cumulative_scoring",
    "expected_layer",
    "layer_similarity",
    "linear_cka",
    "prediction_depth",
]
