"""Several models compared from their caches over the same examples: probes by relative depth, CKA across models.

    from layercache.report.compare import compare_caches, save_comparison, Comparison
    comparison = compare_caches(["runs/minilm", "runs/gpt2"], tasks=["sentiment"])
    paths = save_comparison(comparison, "runs/minilm-vs-gpt2")     # report.json + a self-contained report.html
    Comparison.load(paths.json) == comparison

Like the probe report it sits beside, it has three parts imported one way: the data model (:mod:`.model`), the
orchestration that computes it (:mod:`.comparing` over :mod:`.examples`, :mod:`.scores`, :mod:`.similarity` and
:mod:`.cross_cka`), and the renderers that only read the data model (:mod:`.html`, :mod:`.figures`,
:mod:`.summary`; :mod:`.saving` writes the files). Importing this package stays light (no torch): the calls load
the probes when called.
"""

from __future__ import annotations

from ...core.lazy_exports import lazy_exports

# public name -> the module that defines it (imported when first asked for)
_PUBLIC = {
    "Comparison": ".model",
    "ComparisonPaths": ".model",
    "CompareOptions": ".options",
    "compare_caches": ".comparing",
    "cross_cka": ".cross_cka",
    "save_comparison": ".saving",
}

__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
__all__ = sorted(_PUBLIC)
