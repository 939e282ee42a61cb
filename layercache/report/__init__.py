"""Human summaries of caches, runs and probes: ``info``, metrics tables, layer-weight bars, and the probe report.

    from layercache.report import probe_report, ProbeReport
    report, paths = probe_report(cache, "runs/report")     # report.json + a self-contained report.html
    ProbeReport.load(paths.json) == report

Importing this package stays light (no torch): :func:`probe_report` loads the probes when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .probing import ProbeReport, probe_report

__all__ = ["ProbeReport", "probe_report"]


def __getattr__(name: str):
    if name in __all__:
        from . import probing as module

        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
