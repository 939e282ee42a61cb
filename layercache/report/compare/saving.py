"""Writing a comparison: ``report.json`` (the data model as JSON) and the self-contained ``report.html`` beside it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ...core.files import free_space_or, why_unwritable, write_texts_atomic
from ...errors import OutputWriteError
from .html import render_comparison_html
from .model import HTML_NAME, JSON_NAME, Comparison, ComparisonPaths


def save_comparison(comparison: Comparison, folder: str | os.PathLike[str]) -> ComparisonPaths:
    """Write ``report.json`` and a self-contained ``report.html`` (figures embedded) into ``folder``.

    Both are rendered first and written together (:func:`~layercache.core.files.write_texts_atomic`): a write that
    fails (a full disk) leaves an earlier comparison there whole, and is refused in one sentence
    (:class:`~layercache.errors.OutputWriteError`).
    """
    folder = Path(folder)
    paths = ComparisonPaths(folder, folder / JSON_NAME, folder / HTML_NAME)
    texts = {paths.json: json.dumps(comparison.to_json(), indent=1, allow_nan=False) + "\n",
             paths.html: render_comparison_html(comparison)}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_texts_atomic(texts)
    except OSError as err:
        raise OutputWriteError(f"The comparison folder {folder} cannot be written ({why_unwritable(err)}), so "
                               f"nothing was written and an earlier one there is as it was; {free_space_or(err)}.") \
            from None
    return paths
