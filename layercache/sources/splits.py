"""Every data source read as tables: one :class:`Split` per split, columns of Python values.

A file reader returns a :class:`FileTable` (one split, plus what its format says about labels);
each source as a whole becomes a :class:`LoadedSource`. Column choice, label encoding and split
selection then work on these tables alone, the same for every source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .messages import numbered


class Split:
    """One split as a table: named columns of Python values, fetched on demand."""

    name: str
    origin: str  # how messages name it: "file 'x.csv'" or "split 'test' of 'imdb'"
    column_names: list[str]
    num_rows: int
    class_names: dict[str, tuple[tuple[str, ...], bool]]  # column -> (ClassLabel names, per-word?)

    def column(self, name: str, stop: int | None = None) -> list:
        """The values of column ``name``, of the first ``stop`` rows (all rows when ``None``)."""
        raise NotImplementedError

    def where(self, rows: list[int]) -> str:
        """Name the split and these (0-based) rows for a message: file and lines when known."""
        raise NotImplementedError


class MemorySplit(Split):
    """A split held in memory as lists, as the local file readers produce it."""

    def __init__(self, name: str, origin: str, columns: dict[str, list], num_rows: int | None = None,
                 lines: list[int] | Callable[[], list[int] | None] | None = None) -> None:
        """``lines``: the 1-based file line of each row, or a function that finds them when a message needs them."""
        self.name, self.origin = name, origin
        self.columns = columns
        self.column_names = list(columns)
        self.num_rows = num_rows if num_rows is not None else (len(next(iter(columns.values()))) if columns else 0)
        self.class_names = {}
        self._lines = lines

    def column(self, name: str, stop: int | None = None) -> list:
        """The values of column ``name``, of the first ``stop`` rows (all rows when ``None``)."""
        values = self.columns[name]
        return values if stop is None else values[:stop]

    def where(self, rows: list[int]) -> str:
        """Name the split and these (0-based) rows: file lines when known, else row numbers."""
        if callable(self._lines):
            self._lines = self._lines()
        if self._lines is None:
            return f"split '{self.name}' ({self.origin}, {numbered('row', rows)})"
        return f"split '{self.name}' ({self.origin}, {numbered('line', [self._lines[r] for r in rows])})"

    def rename(self, names: Mapping[str, str]) -> None:
        """Rename columns (``old -> new``); the others keep their names."""
        self.columns = {names.get(k, k): v for k, v in self.columns.items()}
        self.column_names = list(self.columns)


@dataclass
class FileTable:
    """What a file reader returns: the file as one split, and what its format says about its columns."""

    split: MemorySplit
    headerless: bool = False
    """A csv/tsv without a header row: its columns are named by position (``"0"``, ``"1"``, ...)."""
    default_labels: list[str] | None = None
    """The label column(s) the format implies (CoNLL-2003: pos, chunk, ner; other CoNLL: the last
    column), or ``None`` to detect them."""
    default_words: str | None = None
    """The word-list column the format implies (CoNLL: ``tokens``), or ``None``."""


@dataclass
class LoadedSource:
    """A whole source read into tables, before any column is chosen."""

    name: str
    splits: dict[str, Split]
    fingerprint_parts: list[Any]
    config: str | None = None
    headerless: bool = False
    default_labels: list[str] | None = None  # CoNLL: its tag column(s)
    default_words: str | None = None  # CoNLL: "tokens"
    columns: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # local sources: split -> file
