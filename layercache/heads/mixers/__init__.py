"""Layer mixers: turn the cached states of every layer into one vector per token.

A mixer reads ``states`` of shape ``(B, T, S, D)`` — B examples, T tokens (T = 1 for pooled
vectors), S cached states in order (embeddings first, then layers 1..L), D hidden width — and a
``mask`` of shape ``(B, T)`` (True = real token), and returns a :class:`MixOutput` whose ``mixed``
tensor ``(B, T, D_out)`` feeds a task head. Each mixer is one method from ``METHODS.md``, in a
module of its own:

===============  ===============  ========================================================================
spec             module           method
===============  ===============  ========================================================================
``last``         ``select``       the last cached state (the usual baseline)
``layer:<i>``    ``select``       one chosen state; 0 = embeddings, negative indexes count from the end
``scalar``       ``scalar``       ELMo / Tenney scalar mix ``γ · Σ softmax(w)_l · N(h_l)``
``adaptive``     ``adaptive``     adalayers: per-state projection + layer norm, sharpened softmax weights
``attention``    ``attention``    input-dependent attention over layers, per token
``gumbel``       ``gumbel``       SpotTune / BlockDrop per-example hard choice of states (Gumbel-softmax)
``act``          ``act``          adaptive computation time over the layers, per token (Graves 2016)
===============  ===============  ========================================================================

Build one with :func:`make_mixer` (``make_mixer("layer:-2", n_states, dim)``); the registry
:data:`MIXERS` (:mod:`.registry`) is the single list of names (the CLI takes its choices from
:func:`mixer_names`). :class:`LayerMixer` (:mod:`.base`) is what they share.

Every mixer zeroes ``mixed`` at padded positions and never lets a padded token change a real
one, whatever (finite) values the padding holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from layercache.core.lazy_exports import lazy_exports

# public name -> the module that defines it, imported when first asked for: the registry (names, spec forms, building
# one) loads no mixer module and no torch until a mixer is built
_PUBLIC = {
    "MixOutput": ".base",
    "dequantized": ".base",
    "LayerMixer": ".base",
    "SelectLayer": ".select",
    "LastLayer": ".select",
    "ScalarMix": ".scalar",
    "AdaptiveMix": ".adaptive",
    "AttentionMix": ".attention",
    "GumbelMix": ".gumbel",
    "ACTMix": ".act",
    "MIXERS": ".registry",
    "make_mixer": ".registry",
    "mixer_from_config": ".registry",
    "mixer_names": ".registry",
    "mixer_spec_forms": ".registry",
    "usage_labels": ".registry",
    "register_mixer": ".base",
    "mean_mask": ".base",
    "masked_mean": ".base",
    "bare_layer_norm": ".base",
    "sinusoidal_positions": ".adaptive",
    "MATMUL_DTYPES": ".adaptive",
}

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from layercache.heads.mixers.act import ACTMix
    from layercache.heads.mixers.adaptive import MATMUL_DTYPES, AdaptiveMix, sinusoidal_positions
    from layercache.heads.mixers.attention import AttentionMix
    from layercache.heads.mixers.base import (
        LayerMixer,
        MixOutput,
        bare_layer_norm,
        dequantized,
        masked_mean,
        mean_mask,
        register_mixer,
    )
    from layercache.heads.mixers.gumbel import GumbelMix
    from layercache.heads.mixers.registry import (
        MIXERS,
        make_mixer,
        mixer_from_config,
        mixer_names,
        mixer_spec_forms,
        usage_labels,
    )
    from layercache.heads.mixers.scalar import ScalarMix
    from layercache.heads.mixers.select import LastLayer, SelectLayer

_exported, __dir__ = lazy_exports(__name__, _PUBLIC)


def __getattr__(name: str) -> Any:
    if name == "_masked_mean":  # the name masked_mean had when the mixers were one module
        return _exported("masked_mean")
    return _exported(name)


__all__ = ["MixOutput", "dequantized", "LayerMixer", "SelectLayer", "LastLayer", "ScalarMix", "AdaptiveMix",
           "AttentionMix", "GumbelMix", "ACTMix", "MIXERS", "make_mixer", "mixer_from_config", "mixer_names",
           "mixer_spec_forms", "usage_labels", "register_mixer", "mean_mask", "masked_mean", "bare_layer_norm",
           "sinusoidal_positions", "MATMUL_DTYPES"]
