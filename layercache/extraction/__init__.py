"""Extraction: run a frozen backbone once over records and write a resumable cache of its states.

:func:`~layercache.extraction.run.extract` is the entry point; the modules beside it each hold
one step of the run. What this package exports (``__all__``) is public: the typed option groups
(:class:`DataSpec`, :class:`StorageSpec`, :class:`BatchSpec`), the storage choices the plan prices,
the inputs a run loads (:func:`load_inputs`) and a run of inputs already loaded (:func:`extract_loaded`),
the size estimate and the length-bucketed batch plan.
The modules themselves are internal.
"""

from __future__ import annotations

from ..core.lazy_exports import lazy_exports

# public name -> the module that defines it (imported when first asked for: a submodule imported alone
# does not load its siblings)
_PUBLIC = {
    "ExtractResult": ".job",
    "DataSpec": ".specs",
    "StorageSpec": ".specs",
    "BatchSpec": ".specs",
    "StorageChoice": ".storage_choices",
    "load_inputs": ".job",
    "extract_loaded": ".run",
    "JobInputs": ".job",
    "estimate_bytes": ".estimate",
    "BatchCost": ".batching",
    "plan_batches": ".batching",
    "fixed_batches": ".batching",
    "padded_tokens": ".batching",
}


__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
__all__ = sorted(_PUBLIC)
