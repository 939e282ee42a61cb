"""The frozen model: loading it from the hub or a folder, its fingerprint, and how its tokenizer treats words.

Only :mod:`layercache.extraction` and :mod:`layercache.live` import this package; heads, probes,
depth analyses and reports work from the cache and never load a model. Public (``__all__``): loading a
backbone and the fingerprints a cache records of it; the modules themselves are internal.
"""

from __future__ import annotations

from ..core.lazy_exports import lazy_exports

# public name -> the module that defines it (imported when first asked for: a submodule imported alone
# does not load its siblings)
_PUBLIC = {
    "load_backbone": ".loader",
    "Backbone": ".loader",
    "DEFAULT_MODEL": ".loader",
    "resolve_model_source": ".location",
    "weight_files": ".loader",
    "model_fingerprint": ".loader",
    "tokenizer_fingerprint": ".loader",
}


__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
__all__ = sorted(_PUBLIC)
