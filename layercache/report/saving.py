"""Writing a report: ``report.json`` (the data model as JSON) and the self-contained ``report.html`` beside it.

Above both the data model (:mod:`.model`) and the HTML renderer (:mod:`.html`), so the data model
imports no renderer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..core.files import free_space_or, why_unwritable, write_texts_atomic
from ..errors import OutputWriteError
from .html import render_html
from .model import HTML_NAME, JSON_NAME, ProbeReport, ReportPaths


def save_report(report: ProbeReport, folder: str | os.PathLike) -> ReportPaths:
    """Write ``report.json`` and a self-contained ``report.html`` (figures embedded) into ``folder``.

    Both are rendered first and written together (:func:`~layercache.core.files.write_texts_atomic`): a
    write that fails (a full disk) leaves an earlier report there whole, never a new ``report.json``
    beside an old ``report.html``, and is refused in one sentence
    (:class:`~layercache.errors.OutputWriteError`).
    """
    folder = Path(folder)
    paths = ReportPaths(folder, folder / JSON_NAME, folder / HTML_NAME)
    texts = {paths.json: json.dumps(report.to_json(), indent=1, allow_nan=False) + "\n",
             paths.html: render_html(report)}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_texts_atomic(texts)
    except OSError as err:
        raise OutputWriteError(f"The report folder {folder} cannot be written ({why_unwritable(err)}), so no report "
                               f"was written and an earlier one there is as it was; {free_space_or(err)}.") from None
    return paths
