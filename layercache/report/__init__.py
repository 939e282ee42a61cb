"""Human summaries of caches, runs and probes: ``info``, metrics tables, layer-weight bars, and the probe report.

    from layercache.report import probe_report, ProbeReport
    report, paths = probe_report(cache, "runs/report")     # report.json + a self-contained report.html
    ProbeReport.load(paths.json) == report

The probe report has three parts, imported one way: the data model (:mod:`.model`), the orchestration
that computes it (:mod:`.probing`, :mod:`.probe_parts`, :mod:`.cumulative_gains`), and the renderers
that only read the data model (:mod:`.html`, :mod:`.figures`, :mod:`.summary`, :mod:`.tables`;
:mod:`.saving` writes the files). Importing this package stays light (no torch): :func:`probe_report`
loads the probes when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import ProbeReport
    from .probing import probe_report

__all__ = ["ProbeReport", "probe_report"]


def __getattr__(name: str):
    if name == "ProbeReport":
        from .model import ProbeReport

        return ProbeReport
    if name == "probe_report":
        from .probing import probe_report

        return probe_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
