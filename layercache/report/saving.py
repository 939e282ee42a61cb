"""Writing a report: ``report.json`` (the data model as JSON) and the self-contained ``report.html`` beside it.

Above both the data model (:mod:`.model`) and the HTML renderer (:mod:`.html`), so the data model
imports no renderer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..core.files import write_text_atomic
from ..errors import ConfigError
from .html import render_html
from .model import HTML_NAME, JSON_NAME, ProbeReport, ReportPaths


def save_report(report: ProbeReport, folder: str | os.PathLike) -> ReportPaths:
    """Write ``report.json`` and a self-contained ``report.html`` (figures embedded) into ``folder``."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"The report folder {folder} cannot be created ({err.strerror or err}); choose "
                          "another --out.") from None
    paths = ReportPaths(folder, folder / JSON_NAME, folder / HTML_NAME)
    write_text_atomic(paths.json, json.dumps(report.to_json(), indent=1, allow_nan=False) + "\n")
    write_text_atomic(paths.html, render_html(report))
    return paths
