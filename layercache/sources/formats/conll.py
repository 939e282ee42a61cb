"""Read CoNLL-style token files: one token per line, blank lines between sentences.

Each token line holds whitespace-separated columns, the token first and its tags after it
(CoNLL-2003 has ``token POS chunk NER``). ``-DOCSTART-`` lines (and the blank line after them)
only separate documents and are skipped. Columns are named by their count:

- 1 column: ``tokens`` (no labels);
- 4 columns: ``tokens``, ``pos``, ``chunk``, ``ner`` (the CoNLL-2003 layout);
- otherwise: ``tokens``, ``col1``, ``col2``, ... and the last column ``tags``.

The default label columns are every tag column of the CoNLL-2003 layout (``pos``, ``chunk`` and
``ner``: three token tasks, so one extraction serves per-tag analyses as well as NER), and the last
column of any other layout; ``--label-column`` still picks the ones to keep. CoNLL-U (``.conllu``)
is a different format and is refused with a hint (:func:`refuse_conllu`). A file with no blank
line at all reads as one example; when that example looks like several sentences, a warning says so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from layercache.errors import DatasetError

from ..splits import FileTable, MemorySplit
from .base import FileSource

log = logging.getLogger("layercache")
"""Warnings go where every layercache warning goes (the CLI prints them as its own lines, not as Python warnings)."""

DOCSTART = "-DOCSTART-"
SENTENCE_ENDS = frozenset({".", "!", "?"})
LONG_EXAMPLE = 100
"""Tokens beyond which a file that is one single example is taken for unseparated sentences."""
CONLL2003_COLUMNS = ["tokens", "pos", "chunk", "ner"]
"""Column names of a 4-column file: the CoNLL-2003 layout."""


@dataclass
class ConllFile:
    """A CoNLL file, columnar: ``columns[name][sentence][word]``."""

    path: Path
    column_names: list[str]
    columns: dict[str, list[list[str]]] = field(default_factory=dict)
    line_numbers: list[int] = field(default_factory=list)
    """The 1-based line number where each sentence starts (for messages)."""

    def __len__(self) -> int:
        return len(self.line_numbers)

    @property
    def default_label_columns(self) -> list[str]:
        """The columns kept as labels when none are named: ``pos``, ``chunk`` and ``ner`` for the CoNLL-2003
        layout, else the last column; ``[]`` for a tokens-only file."""
        if self.column_names == CONLL2003_COLUMNS:
            return list(CONLL2003_COLUMNS[1:])
        return self.column_names[-1:] if len(self.column_names) > 1 else []


def conll_column_names(count: int) -> list[str]:
    """Column names for a CoNLL file with ``count`` columns per token line."""
    if count < 1:
        raise ValueError("a CoNLL file has at least one column")
    if count == 1:
        return ["tokens"]
    if count == 4:
        return list(CONLL2003_COLUMNS)
    return ["tokens", *[f"col{i}" for i in range(1, count - 1)], "tags"]


def _is_docstart(fields: list[str]) -> bool:
    return bool(fields) and fields[0] == DOCSTART


def _read_lines(path: Path, max_lines: int | None = None) -> list[str]:
    try:
        with open(path, encoding="utf-8-sig") as handle:
            if max_lines is None:
                return handle.read().splitlines()
            lines = []
            for line in handle:
                lines.append(line.rstrip("\r\n"))
                if len(lines) >= max_lines:
                    break
            return lines
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                           f"save it with UTF-8 encoding.") from exc
    except OSError as exc:
        raise DatasetError(f"Could not read {path}: {exc.strerror or exc}; check the path and its "
                           f"permissions.") from exc


def looks_like_conll(path: str | Path, max_lines: int = 2000) -> bool:
    """Whether the start of a text file looks like token-per-line CoNLL data.

    True when a ``-DOCSTART-`` line is present, or when every token line in the sample has the
    same number of columns (at most 10) and the file either separates sentences with blank lines
    or has at least two columns.
    """
    lines = _read_lines(Path(path), max_lines)
    counts: set[int] = set()
    blank_after_token = False
    seen_token = False
    for line in lines:
        fields = line.split()
        if not fields:
            blank_after_token = blank_after_token or seen_token
            continue
        if _is_docstart(fields):
            return True
        seen_token = True
        counts.add(len(fields))
    if len(counts) != 1:
        return False
    count = counts.pop()
    return count <= 10 and (blank_after_token or count >= 2)


def _several_sentences(tokens: list[str]) -> bool:
    """Whether one example's tokens look like more than one sentence: long, or ended and then continued."""
    return len(tokens) > LONG_EXAMPLE or any(t in SENTENCE_ENDS for t in tokens[:-1])


def read_conll(path: str | Path) -> ConllFile:
    """Read a CoNLL token file; raises :class:`DatasetError` on inconsistent column counts."""
    path = Path(path)
    lines = _read_lines(path)
    width: int | None = None
    width_line = 0
    sentences: list[list[list[str]]] = []
    starts: list[int] = []
    current: list[list[str]] = []
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields or _is_docstart(fields):
            if current:
                sentences.append(current)
                current = []
            continue
        if width is None:
            width, width_line = len(fields), number
        elif len(fields) != width:
            raise DatasetError(
                f"{path}, line {number}: found {len(fields)} columns where line {width_line} has {width}; "
                f"give every token line the same number of whitespace-separated columns.")
        if not current:
            starts.append(number)
        current.append(fields)
    if current:
        sentences.append(current)
    if len(sentences) == 1 and _several_sentences([row[0] for row in sentences[0]]):
        log.warning(f"{path} has no blank lines between sentences, so all {len(sentences[0])} tokens form one "
                      f"example; separate sentences with blank lines.")
    names = conll_column_names(width or 1)
    columns = {name: [[row[i] for row in sentence] for sentence in sentences] for i, name in enumerate(names)}
    return ConllFile(path=path, column_names=names, columns=columns, line_numbers=starts)


def read_conll_table(split_name: str, path: Path) -> FileTable:
    """A CoNLL token file as a table: one row per sentence; its tag columns are the default labels
    (:attr:`ConllFile.default_label_columns`)."""
    conll = read_conll(path)
    table = MemorySplit(split_name, f"file '{path}'", dict(conll.columns), num_rows=len(conll),
                        lines=conll.line_numbers)
    return FileTable(table, default_labels=conll.default_label_columns, default_words="tokens")


def refuse_conllu(split_name: str, path: Path) -> FileTable:
    """CoNLL-U is not read: refuse it, saying what to convert it to."""
    raise DatasetError(f"{path} is CoNLL-U, which layercache does not read; convert it to one "
                       f"'token tag' pair per line (.conll) or to jsonl with tokens and tags lists.")


FILE_SOURCES = (
    FileSource("CoNLL", (".conll", ".txt", ".iob", ".bio"), read_conll_table, kind="tokens",
               listed="a CoNLL token file ({suffixes})", sniffed=(".txt", ".iob", ".bio"), sniff=looks_like_conll,
               looks="a CoNLL token file (one token and its tags per line, blank lines between sentences)"),
    FileSource("CoNLL-U", (".conllu",), refuse_conllu, kind="tokens", supported=False),
)
"""CoNLL token files, and CoNLL-U (refused with a hint)."""
