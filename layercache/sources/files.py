"""Local files as a source: one file per split, each read by the reader its extension is registered for."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from layercache.errors import ConfigError, DatasetError

from ..core.checksum import file_sha256
from .registry import read_file
from .splits import LoadedSource, Split


def load_split_files(split_files: Mapping[str, str], name: str | None = None) -> LoadedSource:
    """Read ``{"train": path, ...}``; the source is named ``name``, or by its first file.

    A CoNLL file's tag columns become the default label columns; a csv/tsv counts as headerless
    only when every file is.
    """
    splits: dict[str, Split] = {}
    parts: list[Any] = []
    headerless: list[bool] = []
    default_labels: list[str] | None = None
    default_words: str | None = None
    files: dict[str, str] = {}
    for split_name, file in split_files.items():
        if not isinstance(split_name, str) or not split_name.strip():
            raise ConfigError(f"split_files needs split names as keys, not {split_name!r}.")
        path = Path(os.fspath(file)).expanduser()
        if not path.is_file():
            what = "a folder, not a file" if path.is_dir() else "missing"
            raise DatasetError(f"The file for split '{split_name}' ({file}) is {what}; check the path.")
        table = read_file(split_name, path)
        if table.split.num_rows == 0:
            raise DatasetError(f"{path} has no examples; add rows or pass another file.")
        splits[split_name] = table.split
        headerless.append(table.headerless)
        if table.default_labels is not None:
            default_labels = table.default_labels
            default_words = table.default_words
        parts.append({"split": split_name, "sha256": file_sha256(path)})
        files[split_name] = str(path)
    if name is None:
        name = str(next(iter(split_files.values())))
    return LoadedSource(name=name, splits=splits, fingerprint_parts=parts,
                        headerless=bool(headerless) and all(headerless),
                        default_labels=default_labels, default_words=default_words, files=files)
