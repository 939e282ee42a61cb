"""Depth analyses from the cache: which layer knows what, and how deep each example needs to go.

Works from a cache or from plain arrays, never from a model (this package imports no backbone,
extractor or ``transformers``), like :mod:`layercache.heads` and :mod:`layercache.probes`:

- :mod:`.similarity`: linear CKA between layers (:func:`linear_cka`, :func:`cka_matrix`, and
  :func:`layer_similarity` on a cache's pooled vectors);
- :mod:`.expected_layer`: expected layer of scalar-mix weights and cumulative scoring;
- :mod:`.prediction`: prediction depth of each example, its distribution and accuracy by depth;
- :mod:`.logit_lens`: a decoder's layers read through its own final norm and unembedding (saved in
  the cache at extraction): next-token accuracy and KL to the final layer, per layer
  (:func:`logit_lens`; :func:`layer_logits` for the lens logits of chosen rows);
- :mod:`.tuned_lens`: the tuned lens (Belrose et al. 2023: an affine translator per layer trained on the KL to the
  final distribution) and the linear shortcut (Din et al. 2023: least squares to the last state), fitted from the
  cache (:class:`TunedLens`), scored beside the logit lens per layer (:mod:`.lens_scores`: KL, next-token bits,
  top-1 agreement, prediction depth);
- :mod:`.token_categories`: every cached token labelled as special, punctuation or word,
  word-initial or continuation, by frequency bin and by the dataset's own tags (CoNLL's POS and
  chunk), from the cache's ids, word ids, labels and vocabulary (:func:`token_categories`); and
  any per-token value (a head's halting depth, a prediction depth) summarised by category
  (:func:`depth_by_category`).

See ARCHITECTURE.md and the "Probing metrics" section of METHODS.md for the definitions. The public names
(``__all__``) are imported when first asked for (PEP 562): importing :mod:`.lens_options` alone (``--help`` reads it)
loads no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.lazy_exports import lazy_exports

# public name -> the module that defines it (imported when first asked for)
_PUBLIC = {
    "CategoryFamily": ".token_categories",
    "CategoryStats": ".token_categories",
    "CumulativeScores": ".expected_layer",
    "DepthByCategory": ".token_categories",
    "LayerSimilarity": ".similarity",
    "LensOptions": ".lens_options",
    "LensScores": ".lens_scores",
    "LogitLens": ".logit_lens",
    "PredictionDepth": ".prediction",
    "TokenCategories": ".token_categories",
    "TunedLens": ".tuned_lens",
    "cka_matrix": ".similarity",
    "cumulative_scoring": ".expected_layer",
    "depth_by_category": ".token_categories",
    "expected_layer": ".expected_layer",
    "is_punctuation": ".token_categories",
    "layer_logits": ".logit_lens",
    "layer_similarity": ".similarity",
    "lens_logits": ".logit_lens",
    "linear_cka": ".similarity",
    "logit_lens": ".logit_lens",
    "prediction_depth": ".prediction",
    "score_lenses": ".lens_scores",
    "token_categories": ".token_categories",
}

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from .expected_layer import CumulativeScores, cumulative_scoring, expected_layer
    from .lens_options import LensOptions
    from .lens_scores import LensScores, score_lenses
    from .logit_lens import LogitLens, layer_logits, lens_logits, logit_lens
    from .prediction import PredictionDepth, prediction_depth
    from .similarity import LayerSimilarity, cka_matrix, layer_similarity, linear_cka
    from .token_categories import (
        CategoryFamily,
        CategoryStats,
        DepthByCategory,
        TokenCategories,
        depth_by_category,
        is_punctuation,
        token_categories,
    )
    from .tuned_lens import TunedLens

__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
__all__ = ["CategoryFamily", "CategoryStats", "CumulativeScores", "DepthByCategory", "LayerSimilarity", "LensOptions",
           "LensScores", "LogitLens", "PredictionDepth", "TokenCategories", "TunedLens", "cka_matrix",
           "cumulative_scoring", "depth_by_category", "expected_layer", "is_punctuation", "layer_logits",
           "layer_similarity", "lens_logits", "linear_cka", "logit_lens", "prediction_depth", "score_lenses",
           "token_categories"]
