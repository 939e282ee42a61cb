"""What ``extract`` and ``plan`` share beside their specs' options.

``plan`` prices exactly what ``extract`` with the same options would write: both take the data, storage and batching
options of :class:`~layercache.extraction.specs.DataSpec`, ``StorageSpec`` and ``BatchSpec``, made from the specs'
fields (:mod:`.spec_options`); the model argument and the quality sample's default are here.
"""

from __future__ import annotations

import typer

QUALITY_EXAMPLES = 2000
"""planning.sample.DEFAULT_EXAMPLES (the quality sample of plan and extract), not imported: `--help` loads no
model code."""


def model_argument():
    """MODEL: a hub id, the bundled alias or a local model folder."""
    return typer.Argument("minilm", help="Hub id, bundled alias (minilm) or local model folder.")
