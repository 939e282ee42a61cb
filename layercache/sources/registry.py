"""The one registry of local data files: extension -> reader.

Every list of supported files, the ``--help`` text and the refusals of an unknown or wrong file
are derived from :data:`FILE_SOURCES`, which this module collects from the modules of
:mod:`layercache.sources.formats`. Adding a file format is one new module there (a reader
``read(split_name, path) -> FileTable`` and its ``FILE_SOURCES``) and its test.
"""

from __future__ import annotations

from pathlib import Path

from layercache.core.registry import import_modules
from layercache.errors import DatasetError

from . import formats
from .formats.base import FileSource
from .splits import FileTable

#: Format modules in the order their formats are listed (help, messages); a module not named
#: here is listed after them, alphabetically.
MODULE_ORDER = ("tables", "conll")


def _load_sources() -> tuple[FileSource, ...]:
    """Import every module of :mod:`layercache.sources.formats` and collect their ``FILE_SOURCES``, in order."""
    modules = import_modules(formats.__name__, first=MODULE_ORDER, skip=("base",))
    return tuple(source for module in modules for source in module.FILE_SOURCES)


FILE_SOURCES: tuple[FileSource, ...] = _load_sources()
"""Every local file format, in the order lists name them."""

OTHER_FILE_EXTENSIONS = (".gz", ".xlsx", ".arrow")
"""Extensions of files no source reads: a missing ``x.xlsx`` is a wrong path, not a hub id."""

_BY_EXTENSION = {ext: source for source in FILE_SOURCES for ext in source.extensions}
if len(_BY_EXTENSION) != sum(len(source.extensions) for source in FILE_SOURCES):  # pragma: no cover
    raise RuntimeError("two file sources claim the same extension")
_SUPPORTED = [source for source in FILE_SOURCES if source.supported]


def _or_list(items: list[str], serial_comma: bool = True) -> str:
    """``a, b, or c`` (``a, b or c`` without the serial comma)."""
    if len(items) == 1:
        return items[0]
    return f"{', '.join(items[:-1])}{',' if serial_comma else ''} or {items[-1]}"


SUPPORTED_EXTENSIONS: tuple[str, ...] = tuple(ext for source in _SUPPORTED for ext in source.extensions)
"""Every extension a local file may have: ``.csv``, ``.tsv``, ``.jsonl``, ``.json``, ``.parquet``, ``.conll``, ..."""
SUPPORTED_FILES = _or_list([source.describe() for source in _SUPPORTED])
"""For messages: "csv, tsv, jsonl, json, parquet, or a CoNLL token file (.conll/.txt/.iob/.bio)"."""
SUPPORTED_FORMATS = "/".join(source.name for source in _SUPPORTED)
"""For short mentions: "csv/tsv/jsonl/parquet/CoNLL"."""
TABLE_FILES = _or_list([source.extensions[0] for source in _SUPPORTED if source.kind == "table"], serial_comma=False)
"""For suggestions: ".csv, .tsv, .jsonl or .parquet"."""


def source_for(path: str | Path) -> FileSource | None:
    """The file source registered for the extension of ``path`` (case-insensitive), or ``None``."""
    return _BY_EXTENSION.get(Path(path).suffix.lower())


def names_a_file(suffix: str) -> bool:
    """Whether ``suffix`` is the extension of a data file, read or not (so the name is a path, not a hub id)."""
    return suffix.lower() in _BY_EXTENSION or suffix.lower() in OTHER_FILE_EXTENSIONS


def read_file(split_name: str, path: Path) -> FileTable:
    """Read one local file as split ``split_name`` with the reader registered for its extension."""
    suffix = path.suffix.lower()
    source = _BY_EXTENSION.get(suffix)
    if source is None:
        raise DatasetError(f"{path} has an unsupported extension '{suffix or '(none)'}'; use {SUPPORTED_FILES}.")
    if suffix in source.sniffed and path.stat().st_size and not source.sniff(path):
        raise DatasetError(f"{path} is not {source.looks}; save tables as {TABLE_FILES} instead.")
    return source.read(split_name, path)
