"""Read table files: csv, tsv, JSON (lines, an array of records, or an object of columns) and parquet.

Each reader turns one file into a :class:`~layercache.sources.splits.FileTable` whose rows keep
their file line where the format has lines, so messages can point at them. csv/tsv cells stay
strings; a csv/tsv first row is a header unless it looks like data (see :func:`_detect_header`).
Their :data:`FILE_SOURCES` are collected by :mod:`layercache.sources.registry`.
"""

from __future__ import annotations

import csv
import functools
import json
import re
from pathlib import Path

from layercache.errors import DatasetError

from ..columns import KNOWN_COLUMN_NAMES, SAMPLE_ROWS
from ..messages import short_reason
from ..splits import FileTable, MemorySplit
from ..values import as_number, is_nan
from .base import FileSource

_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_ .\-/]{0,40}")


def read_csv_table(split_name: str, path: Path) -> FileTable:
    """A comma-separated file, with or without a header row."""
    return _delimited_table(split_name, path, tab=False)


def read_tsv_table(split_name: str, path: Path) -> FileTable:
    """A tab-separated file (no quoting), with or without a header row."""
    return _delimited_table(split_name, path, tab=True)


def read_json_table(split_name: str, path: Path) -> FileTable:
    """JSON lines, a JSON array of records, or a JSON object of equal-length columns."""
    columns, lines = _read_json(path)
    return FileTable(MemorySplit(split_name, f"file '{path}'", columns, lines=lines))


def read_parquet_table(split_name: str, path: Path) -> FileTable:
    """A parquet file, every column as Python values."""
    return FileTable(MemorySplit(split_name, f"file '{path}'", _read_parquet(path)))


FILE_SOURCES = (
    FileSource("csv", (".csv",), read_csv_table),
    FileSource("tsv", (".tsv",), read_tsv_table),
    FileSource("jsonl", (".jsonl", ".json"), read_json_table),
    FileSource("parquet", (".parquet",), read_parquet_table),
)
"""The table formats, in the order lists name them."""


def _delimited_table(split_name: str, path: Path, tab: bool) -> FileTable:
    columns, headerless = _read_delimited(path, tab)
    n_rows = len(next(iter(columns.values()))) if columns else 0
    lines = functools.partial(_record_lines, path, tab, not headerless, n_rows)
    return FileTable(MemorySplit(split_name, f"file '{path}'", columns, lines=lines), headerless=headerless)


def _read_delimited(path: Path, tab: bool) -> tuple[dict[str, list], bool]:
    """Read csv/tsv as strings; returns (columns, headerless?)."""
    import pandas as pd

    try:
        frame = pd.read_csv(path, sep="\t" if tab else ",", header=None, dtype=str, keep_default_na=False,
                            quoting=csv.QUOTE_NONE if tab else csv.QUOTE_MINIMAL, encoding="utf-8-sig",
                            skip_blank_lines=True)
    except pd.errors.EmptyDataError:
        return {}, False
    except pd.errors.ParserError as exc:
        raise DatasetError(f"Could not parse {path} ({short_reason(exc)}); give every row the same number of "
                           f"{'tab-separated' if tab else 'comma-separated'} fields.") from exc
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                           f"save it with UTF-8 encoding.") from exc
    raw = [[None if is_nan(v) else v for v in frame[c].tolist()] for c in frame.columns]
    if not raw or not raw[0]:
        return {}, False
    first = [column[0] for column in raw]
    rest = [column[1:] for column in raw]
    if _detect_header(first, rest, path, tab):
        names = _unique_names([("" if v is None else str(v).strip()) for v in first])
        return dict(zip(names, rest)), False
    return {str(i): column for i, column in enumerate(raw)}, True


def _record_lines(path: Path, tab: bool, header: bool, n_rows: int) -> list[int] | None:
    """The 1-based line where each data row of a csv/tsv starts, read the way pandas read the rows.

    Blank lines are skipped and a quoted csv field may span lines, so a row's line is not its
    index plus one. ``None`` when the count disagrees with the rows pandas found (messages then
    name rows instead).
    """
    starts = []
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle, delimiter="\t" if tab else ",",
                                quoting=csv.QUOTE_NONE if tab else csv.QUOTE_MINIMAL)
            previous = 0
            for row in reader:
                if len(row) > 1 or (row and row[0].strip()):  # pandas skips blank and whitespace-only lines
                    starts.append(previous + 1)
                previous = reader.line_num
    except (csv.Error, OSError, UnicodeDecodeError):
        return None
    starts = starts[1:] if header else starts
    return starts if len(starts) == n_rows else None


def _unique_names(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for i, name in enumerate(names):
        name = name or f"Unnamed: {i}"
        if name in seen:
            seen[name] += 1
            name = f"{name}.{seen[name]}"
        else:
            seen[name] = 0
        out.append(name)
    return out


def _detect_header(first: list, rest: list[list], path: Path, tab: bool) -> bool:
    """Whether the first row of a csv/tsv is a header.

    A known column name in the first row settles it. Otherwise each column votes. Strong votes: the
    first value is data when it is a number or a sentence (4+ words); it is a header when the rest
    of the column is numeric while it is not, or when it is a short name above a column of
    sentences. A first value that repeats further down its column is a weak vote for data. Strong
    votes decide when they agree, then weak ones; otherwise ``csv.Sniffer.has_header`` does.
    """
    values = ["" if v is None else str(v).strip() for v in first]
    if any(v.lower() in KNOWN_COLUMN_NAMES for v in values):
        return True
    strong_header = strong_data = weak_data = 0
    for value, column in zip(values, rest):
        sample = [str(x).strip() for x in column[:SAMPLE_ROWS] if x is not None and str(x).strip()]
        if not value:
            continue
        if as_number(value) is not None or len(value.split()) >= 4:
            strong_data += 1
        elif sample and all(as_number(x) is not None for x in sample):
            strong_header += 1
        elif (sample and _IDENTIFIER_RE.fullmatch(value) and len(value.split()) <= 2
              and sum(len(x.split()) >= 3 for x in sample) >= 0.5 * len(sample)):
            strong_header += 1  # a short name above a column of sentences
        elif value in set(sample):
            weak_data += 1
    if strong_header or strong_data:
        if not (strong_header and strong_data):
            return bool(strong_header)
    elif weak_data:
        return False
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            text = "".join(line for _, line in zip(range(50), handle))
        if tab:
            return csv.Sniffer().has_header(text.replace('"', ""))
        return csv.Sniffer().has_header(text) if text else True
    except (csv.Error, OSError, UnicodeDecodeError):
        return True


def _read_json(path: Path) -> tuple[dict[str, list], list[int] | None]:
    """(columns, the line of each record for JSON lines, ``None`` for a JSON array or object)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                           f"save it with UTF-8 encoding.") from exc
    stripped = text.lstrip()
    if not stripped:
        return {}, None
    records: list
    lines: list[int] | None = None
    if stripped[0] in "[{":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if stripped[0] == "{":  # JSON lines start with "{" too
                data = None
            else:
                raise DatasetError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg}); "
                                   f"fix it or save one JSON object per line.") from exc
        if isinstance(data, list):
            records = data
        elif isinstance(data, dict) and data and all(isinstance(v, list) for v in data.values()):
            lengths = {len(v) for v in data.values()}
            if len(lengths) != 1:
                raise DatasetError(f"{path} holds columns of different lengths; give every column one value per "
                                   f"example.")
            return {str(k): list(v) for k, v in data.items()}, None
        elif isinstance(data, dict):
            records = [data]
        else:
            records, lines = _json_lines(path, text)
    else:
        records, lines = _json_lines(path, text)
    columns: dict[str, list] = {}
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise DatasetError(f"Record {i} of {path} is a {type(record).__name__}, not an object; "
                               f"write each example as a JSON object like {{\"text\": ..., \"label\": ...}}.")
        for key in record:
            columns.setdefault(str(key), [None] * i)
        for key, values in columns.items():
            values.append(record.get(key))
    return columns, lines


def _json_lines(path: Path, text: str) -> tuple[list, list[int]]:
    """The records of a JSON lines text and the line each came from (blank lines are skipped)."""
    records, numbers = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}, line {number} is not valid JSON ({exc.msg}); write one JSON object per "
                               f"line.") from exc
        numbers.append(number)
    return records, numbers


def _read_parquet(path: Path) -> dict[str, list]:
    try:
        import pyarrow.parquet as pq

        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise DatasetError(f"Could not read the parquet file {path} ({short_reason(exc)}); check that it is a "
                           f"valid parquet file.") from exc
    return {str(k): v for k, v in table.to_pydict().items()}
