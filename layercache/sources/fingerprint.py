"""Fingerprints that tell data apart: a hash of JSON-able content, and of a file's bytes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def content_hash(data: Any) -> str:
    """SHA-256 of ``data`` written as JSON with sorted keys (anything else written as its ``str``)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
