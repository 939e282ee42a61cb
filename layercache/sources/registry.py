"""The one registry of local data files: extension -> reader.

Every list of supported files, the ``--help`` text and the refusals of an unknown or wrong file
are derived from :data:`FILE_SOURCES`. Adding a file format is one new reader module (a function
``read(split_name, path) -> FileTable``, see :mod:`layercache.sources.tables`), one
:class:`FileSource` line here, and its test.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from layercache.errors import DatasetError

from .conll import looks_like_conll, read_conll_table, refuse_conllu
from .splits import FileTable
from .tables import read_csv_table, read_json_table, read_parquet_table, read_tsv_table

FILE_KINDS = ("table", "tokens")
"""``table``: rows of named columns; ``tokens``: one token and its tags per line (CoNLL)."""


@dataclass(frozen=True)
class FileSource:
    """One format of local data file: its extensions and the reader that turns a file into a table."""

    name: str
    """How short lists name it: ``csv``, ``CoNLL``."""
    extensions: tuple[str, ...]
    """Lower-case, with the dot; the first is the one to suggest."""
    read: Callable[[str, Path], FileTable]
    """``read(split_name, path)``: the file as one split."""
    kind: str = "table"
    """One of :data:`FILE_KINDS`."""
    listed: str = "{names}"
    """How the list of supported files names it: ``{names}`` are the extensions without their dot,
    comma-separated; ``{suffixes}`` the extensions with it, ``/``-separated."""
    sniffed: tuple[str, ...] = ()
    """Extensions other formats use too (``.txt``): a non-empty file with one must pass ``sniff``."""
    sniff: Callable[[Path], bool] | None = None
    """Whether the start of a file looks like this format."""
    looks: str = ""
    """What ``sniff`` wants, for the refusal: "a CoNLL token file (one token ... per line)"."""
    supported: bool = True
    """False for a known format that is refused with a hint (its ``read`` raises)."""

    def describe(self) -> str:
        """How the list of supported files names this format."""
        return self.listed.format(names=", ".join(e.lstrip(".") for e in self.extensions),
                                  suffixes="/".join(self.extensions))


FILE_SOURCES: tuple[FileSource, ...] = (
    FileSource("csv", (".csv",), read_csv_table),
    FileSource("tsv", (".tsv",), read_tsv_table),
    FileSource("jsonl", (".jsonl", ".json"), read_json_table),
    FileSource("parquet", (".parquet",), read_parquet_table),
    FileSource("CoNLL", (".conll", ".txt", ".iob", ".bio"), read_conll_table, kind="tokens",
               listed="a CoNLL token file ({suffixes})", sniffed=(".txt", ".iob", ".bio"), sniff=looks_like_conll,
               looks="a CoNLL token file (one token and its tags per line, blank lines between sentences)"),
    FileSource("CoNLL-U", (".conllu",), refuse_conllu, kind="tokens", supported=False),
)
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
