"""Turn a dataset source into :class:`DatasetRecords`.

Sources, tried in this order:

- ``builtin`` / ``builtin:<seed>``: the generated task set of :mod:`layercache.sources.builtin`;
- ``split_files={"train": path, ...}``: one local file per split;
- a local file: ``.csv``, ``.tsv``, ``.jsonl``/``.json`` (JSON lines, a JSON array of records, or
  a JSON object of equal-length columns), ``.parquet``, and CoNLL token files (``.conll``, and
  ``.txt``/``.iob``/``.bio`` when they hold one token per line); a single file is split ``train``;
- a folder written by ``datasets.save_to_disk``;
- anything else is a Hugging Face Hub id (``imdb``, ``glue`` with ``config="cola"``).

Every source becomes a table per split (columns of Python values). Column choice, label
encoding and split selection are then the same for all of them; see
:func:`load_dataset_records` for the rules.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import math
import numbers
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from layercache.errors import ConfigError, DatasetError
from layercache.sources.conll import looks_like_conll, read_conll
from layercache.sources.records import TASK_KINDS, DatasetRecords, LabelTask, SplitRecords

__all__ = [
    "load_dataset_records",
    "TEXT_COLUMN_CANDIDATES",
    "PAIR_COLUMN_CANDIDATES",
    "WORD_COLUMN_CANDIDATES",
    "LABEL_COLUMN_CANDIDATES",
    "SUPPORTED_EXTENSIONS",
]

TEXT_COLUMN_CANDIDATES: tuple[str, ...] = ("text", "sentence", "content", "review", "document", "question")
PAIR_COLUMN_CANDIDATES: tuple[tuple[str, str], ...] = (
    ("sentence1", "sentence2"),
    ("premise", "hypothesis"),
    ("question1", "question2"),
    ("question", "sentence"),
    ("sentence_a", "sentence_b"),
)
WORD_COLUMN_CANDIDATES: tuple[str, ...] = ("tokens", "words")
LABEL_COLUMN_CANDIDATES: tuple[str, ...] = (
    "label", "labels", "ner_tags", "tags", "pos_tags", "score", "target", "class", "category", "y")

_TABLE_EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
_CONLL_EXTENSIONS = (".conll",)
_SNIFFED_CONLL_EXTENSIONS = (".txt", ".iob", ".bio")
SUPPORTED_EXTENSIONS: tuple[str, ...] = (*_TABLE_EXTENSIONS, *_CONLL_EXTENSIONS, *_SNIFFED_CONLL_EXTENSIONS)
_SUPPORTED_TEXT = "csv, tsv, jsonl, json, parquet, or a CoNLL token file (.conll/.txt/.iob/.bio)"

_KNOWN_COLUMN_NAMES = frozenset(
    name.lower() for name in (*TEXT_COLUMN_CANDIDATES, *WORD_COLUMN_CANDIDATES, *LABEL_COLUMN_CANDIDATES,
                              *[n for pair in PAIR_COLUMN_CANDIDATES for n in pair]))
_SAMPLE_ROWS = 1000
_MANY_CLASSES = 100
_INT_RE = re.compile(r"[+-]?\d+")
_FLOAT_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_ .\-/]{0,40}")


# --------------------------------------------------------------------------------------------
# Splits as tables


class _Split:
    """One split as a table: named columns of Python values, fetched on demand."""

    name: str
    origin: str  # how messages name it: "file 'x.csv'" or "split 'test' of 'imdb'"
    column_names: list[str]
    num_rows: int
    class_names: dict[str, tuple[tuple[str, ...], bool]]  # column -> (ClassLabel names, per-word?)

    def column(self, name: str, stop: int | None = None) -> list:
        raise NotImplementedError

    def where(self, rows: list[int]) -> str:
        """Name the split and these (0-based) rows for a message: file and lines when known."""
        raise NotImplementedError


class _MemorySplit(_Split):
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
        values = self.columns[name]
        return values if stop is None else values[:stop]

    def where(self, rows: list[int]) -> str:
        if callable(self._lines):
            self._lines = self._lines()
        if self._lines is None:
            return f"split '{self.name}' ({self.origin}, {_numbered('row', rows)})"
        return f"split '{self.name}' ({self.origin}, {_numbered('line', [self._lines[r] for r in rows])})"

    def rename(self, names: Mapping[str, str]) -> None:
        """Rename columns (``old -> new``); the others keep their names."""
        self.columns = {names.get(k, k): v for k, v in self.columns.items()}
        self.column_names = list(self.columns)


class _HubSplit(_Split):
    def __init__(self, name: str, origin: str, dataset: Any) -> None:
        self.name, self.origin = name, origin
        self.dataset = dataset.with_format(None) if hasattr(dataset, "with_format") else dataset
        self.column_names = list(dataset.column_names)
        self.num_rows = len(dataset)
        self.class_names = _feature_class_names(getattr(dataset, "features", None) or {})
        self._cache: dict[str, list] = {}

    def column(self, name: str, stop: int | None = None) -> list:
        full = self._cache.get(name)
        if full is not None:
            return full if stop is None else full[:stop]
        n = self.num_rows if stop is None else min(stop, self.num_rows)
        values = list(self.dataset.select_columns([name])[:n][name])
        if n == self.num_rows:
            self._cache[name] = values
        return values

    def where(self, rows: list[int]) -> str:
        return f"{self.origin} ({_numbered('row', rows)})"


def _numbered(what: str, numbers: list[int], shown: int = 5) -> str:
    """``line 7``, ``lines 3 and 7``, ``lines 3, 7, 9, 12, 15 and 4 more``."""
    if len(numbers) == 1:
        return f"{what} {numbers[0]}"
    if len(numbers) <= shown:
        return f"{what}s {', '.join(map(str, numbers[:-1]))} and {numbers[-1]}"
    return f"{what}s {', '.join(map(str, numbers[:shown]))} and {len(numbers) - shown} more"


def _feature_class_names(features: Mapping[str, Any]) -> dict[str, tuple[tuple[str, ...], bool]]:
    """ClassLabel names per column from hub features (``Sequence``/``List`` of ClassLabel: per word)."""
    try:
        from datasets import ClassLabel
    except ImportError:  # pragma: no cover - datasets is a dependency
        return {}
    hints: dict[str, tuple[tuple[str, ...], bool]] = {}
    for column, feature in features.items():
        if isinstance(feature, ClassLabel):
            hints[column] = (tuple(feature.names), False)
            continue
        inner = getattr(feature, "feature", None)
        if inner is None and isinstance(feature, list) and len(feature) == 1:
            inner = feature[0]
        if isinstance(inner, ClassLabel):
            hints[column] = (tuple(inner.names), True)
    return hints


@dataclass
class _Loaded:
    name: str
    splits: dict[str, _Split]
    fingerprint_parts: list[Any]
    config: str | None = None
    headerless: bool = False
    default_labels: list[str] | None = None  # CoNLL: the last column
    default_words: str | None = None  # CoNLL: "tokens"
    columns: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # local sources: split -> file


# --------------------------------------------------------------------------------------------
# Public entry point


def load_dataset_records(
    source: str | None,
    config: str | None = None,
    splits: list[str] | None = None,
    split_files: dict[str, str] | None = None,
    text_columns: list[str] | None = None,
    label_columns: list[str] | None = None,
    no_labels: bool = False,
    task_kind: str | None = None,
    limit: int | None = None,
) -> DatasetRecords:
    """Load a dataset from the built-in generator, local files, a saved folder or the Hub.

    Args:
        source: ``"builtin"`` (or ``"builtin:<seed>"``), a hub id, a local file, or a folder saved by
            ``datasets.save_to_disk``; may be ``None``/``""`` when ``split_files`` is given.
        config: hub configuration (``"cola"`` for ``glue``); hub datasets only.
        splits: which splits to keep (default: every split that has labels; unlabelled splits are
            skipped with a warning, and asking for one explicitly is an error unless ``no_labels``).
        split_files: one local file per split, ``{"train": path, "validation": path}``.
        text_columns: the input column, or two columns for a sentence pair; detected when ``None``.
            A column holding lists of strings is used as pre-split words.
        label_columns: one or more label columns (several give several tasks); detected when ``None``.
        no_labels: read no labels at all (an inference-only cache); every split is kept.
        task_kind: force ``"sequence"``, ``"token"`` or ``"regression"`` for every label column.
        limit: keep only the first ``limit`` rows of each split (for quick runs).

    Detection rules:
        - Text: the first present pair of ``PAIR_COLUMN_CANDIDATES``; else, when a label column
          holds per-word lists, a word-list column (``tokens``/``words``); else the first of
          ``TEXT_COLUMN_CANDIDATES``; else a word-list column. Names match case-insensitively.
        - Labels: the first of ``LABEL_COLUMN_CANDIDATES``; else (hub) the first ClassLabel column;
          CoNLL files use their last column.
        - Headerless csv/tsv (columns ``"0"``, ``"1"``, ...): text = the column with the longest
          mean length among those holding free text (mostly containing spaces); label = the
          remaining column with the fewest distinct values (the only one when two columns).
        - Label kinds: ClassLabel names when the hub has them; lists -> ``token``; numbers with a
          non-integer value -> ``regression``; anything else is classes, named by their sorted
          distinct values (integer-looking values sorted numerically, so ``0``/``1`` keep ids 0/1),
          one vocabulary over all splits.

    Raises:
        DatasetError: the data cannot be found, read or understood.
        ConfigError: an option value cannot be used.
    """
    splits = _check_list_option("splits", splits)
    text_columns = _check_list_option("text_columns", text_columns)
    label_columns = _check_list_option("label_columns", label_columns)
    if text_columns is not None and len(text_columns) > 2:
        raise ConfigError(f"text_columns takes one column, or two for a sentence pair, not {len(text_columns)} "
                          f"({', '.join(text_columns)}).")
    if task_kind is not None and task_kind not in TASK_KINDS:
        raise ConfigError(f"task_kind {task_kind!r} is not one of {', '.join(TASK_KINDS)}.")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"limit must be a positive number of examples, not {limit!r}.")
    if no_labels and label_columns:
        raise ConfigError("no_labels and label_columns contradict each other; pass one of them.")
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    source = (source or "").strip()
    split_files = dict(split_files) if split_files else None

    if split_files:
        if source:
            raise ConfigError(f"Pass either a source ({source!r}) or split_files, not both; "
                              f"put every file in split_files.")
        if config:
            raise ConfigError("config only applies to Hugging Face Hub datasets, not to local split files.")
        loaded = _load_split_files(split_files)
    elif not source:
        raise ConfigError("No dataset given; pass 'builtin', a Hugging Face Hub id, a local file or folder, "
                          "or split_files.")
    elif source == "builtin" or source.startswith("builtin:"):
        return _load_builtin_records(source, config=config, splits=splits, text_columns=text_columns,
                                     label_columns=label_columns, no_labels=no_labels,
                                     task_kind=task_kind, limit=limit)
    else:
        path = Path(source).expanduser()
        if path.is_file():
            if config:
                raise ConfigError(f"config only applies to Hugging Face Hub datasets, not to the local file {source}.")
            loaded = _load_split_files({"train": str(path)}, name=source)
        elif path.is_dir():
            loaded = _load_saved(path, source) if _is_saved_dataset(path) else _load_hub(source, config)
        elif _looks_like_path(source):
            raise DatasetError(f"No file or folder {source!r} exists; check the path "
                               f"(supported files: {_SUPPORTED_TEXT}).")
        else:
            loaded = _load_hub(source, config)
    return _build_records(loaded, splits=splits, text_columns=text_columns, label_columns=label_columns,
                          no_labels=no_labels, task_kind=task_kind, limit=limit)


def _check_list_option(name: str, value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    value = list(value)
    if not value:
        return None
    if not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{name} must be a list of non-empty names, not {value!r}.")
    return list(dict.fromkeys(v.strip() for v in value))


def _looks_like_path(source: str) -> bool:
    if source.startswith((".", "/", "~", "\\")) or os.sep in source.replace("/", "") or ":\\" in source:
        return True
    suffix = Path(source).suffix.lower()
    return suffix in SUPPORTED_EXTENSIONS or suffix in (".conllu", ".gz", ".xlsx", ".arrow")


# --------------------------------------------------------------------------------------------
# Built-in task set


def _load_builtin_records(source: str, *, config, splits, text_columns, label_columns, no_labels, task_kind,
                          limit) -> DatasetRecords:
    seed_text = source.partition(":")[2].strip()
    try:
        seed = int(seed_text) if seed_text else 0
    except ValueError:
        raise ConfigError(f"The built-in dataset takes an integer seed ('builtin:7'), not {seed_text!r}.") from None
    for option, value in (("config", config), ("text_columns", text_columns), ("task_kind", task_kind)):
        if value:
            raise ConfigError(f"{option} does not apply to the built-in dataset; leave it out.")
    from layercache.sources.builtin import load_builtin

    records = load_builtin(seed=seed)
    if splits is not None:
        unknown = [s for s in splits if s not in records.splits]
        if unknown:
            raise DatasetError(f"Split {unknown[0]!r} is not in the built-in dataset; choose from "
                               f"{', '.join(records.splits)}.")
        chosen = {s: records.splits[s] for s in splits}
    else:
        chosen = dict(records.splits)
    tasks = list(records.tasks)
    if no_labels:
        tasks = []
    elif label_columns:
        names = [t.name for t in tasks]
        missing = [c for c in label_columns if c not in names]
        if missing:
            raise DatasetError(f"The built-in dataset has no task {missing[0]!r}; its tasks are {', '.join(names)}.")
        tasks = [records.task(c) for c in label_columns]
    keep = [t.name for t in tasks]
    out = {}
    for name, split in chosen.items():
        stop = len(split) if limit is None else min(limit, len(split))
        out[name] = SplitRecords(
            texts=None if split.texts is None else split.texts[:stop],
            text_pairs=None if split.text_pairs is None else split.text_pairs[:stop],
            words=None if split.words is None else split.words[:stop],
            labels={k: split.labels[k][:stop] for k in keep if k in split.labels},
            source_index=list(split.source_index[:stop]) if split.source_index is not None else None,
        )
    fingerprint = _hash({"builtin": records.fingerprint, "seed": seed, "splits": list(out), "tasks": keep,
                         "limit": limit})
    return DatasetRecords(name=records.name or "builtin", splits=out, tasks=tasks, config=records.config,
                          fingerprint=fingerprint, columns=list(records.columns),
                          text_columns=list(records.text_columns))


# --------------------------------------------------------------------------------------------
# Local files


def _load_split_files(split_files: Mapping[str, str], name: str | None = None) -> _Loaded:
    splits: dict[str, _Split] = {}
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
        split, is_headerless, labels, words = _read_local_file(split_name, path)
        if split.num_rows == 0:
            raise DatasetError(f"{path} has no examples; add rows or pass another file.")
        splits[split_name] = split
        headerless.append(is_headerless)
        if labels is not None:
            default_labels = labels
            default_words = words
        parts.append({"split": split_name, "sha256": _file_sha256(path)})
        files[split_name] = str(path)
    if name is None:
        name = str(next(iter(split_files.values())))
    return _Loaded(name=name, splits=splits, fingerprint_parts=parts,
                   headerless=bool(headerless) and all(headerless),
                   default_labels=default_labels, default_words=default_words, files=files)


def _read_local_file(split_name: str, path: Path) -> tuple[_Split, bool, list[str] | None, str | None]:
    """Read one file: (table, headerless?, default label columns, default word column)."""
    suffix = path.suffix.lower()
    origin = f"file '{path}'"
    if suffix in (".csv", ".tsv"):
        columns, headerless = _read_delimited(path, suffix == ".tsv")
        n_rows = len(next(iter(columns.values()))) if columns else 0
        lines = functools.partial(_record_lines, path, suffix == ".tsv", not headerless, n_rows)
        return _MemorySplit(split_name, origin, columns, lines=lines), headerless, None, None
    if suffix in (".jsonl", ".json"):
        columns, lines = _read_json(path)
        return _MemorySplit(split_name, origin, columns, lines=lines), False, None, None
    if suffix == ".parquet":
        return _MemorySplit(split_name, origin, _read_parquet(path)), False, None, None
    if suffix in _CONLL_EXTENSIONS or suffix in _SNIFFED_CONLL_EXTENSIONS:
        if suffix in _SNIFFED_CONLL_EXTENSIONS and path.stat().st_size and not looks_like_conll(path):
            raise DatasetError(f"{path} is not a CoNLL token file (one token and its tags per line, blank lines "
                               f"between sentences); save tables as .csv, .tsv, .jsonl or .parquet instead.")
        conll = read_conll(path)
        table = _MemorySplit(split_name, origin, dict(conll.columns), num_rows=len(conll), lines=conll.line_numbers)
        default = conll.default_label_column
        return table, False, [default] if default else [], "tokens"
    if suffix == ".conllu":
        raise DatasetError(f"{path} is CoNLL-U, which layercache does not read; convert it to one "
                           f"'token tag' pair per line (.conll) or to jsonl with tokens and tags lists.")
    raise DatasetError(f"{path} has an unsupported extension '{suffix or '(none)'}'; use {_SUPPORTED_TEXT}.")


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
        raise DatasetError(f"Could not parse {path} ({_short(exc)}); give every row the same number of "
                           f"{'tab-separated' if tab else 'comma-separated'} fields.") from exc
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                           f"save it with UTF-8 encoding.") from exc
    raw = [[None if _is_nan(v) else v for v in frame[c].tolist()] for c in frame.columns]
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
    if any(v.lower() in _KNOWN_COLUMN_NAMES for v in values):
        return True
    strong_header = strong_data = weak_data = 0
    for value, column in zip(values, rest):
        sample = [str(x).strip() for x in column[:_SAMPLE_ROWS] if x is not None and str(x).strip()]
        if not value:
            continue
        if _as_number(value) is not None or len(value.split()) >= 4:
            strong_data += 1
        elif sample and all(_as_number(x) is not None for x in sample):
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
                raise DatasetError(f"{path} holds columns of different lengths; give every column one value per example.")
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
        raise DatasetError(f"Could not read the parquet file {path} ({_short(exc)}); check that it is a "
                           f"valid parquet file.") from exc
    return {str(k): v for k, v in table.to_pydict().items()}


# --------------------------------------------------------------------------------------------
# Hub and saved folders


def _is_saved_dataset(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or (
        (path / "state.json").is_file() and (path / "dataset_info.json").is_file())


def _load_saved(path: Path, source: str) -> _Loaded:
    import datasets as hf_datasets

    try:
        data = hf_datasets.load_from_disk(str(path))
    except Exception as exc:
        raise DatasetError(f"Could not load the saved dataset folder {source} ({_short(exc)}); check that it "
                           f"was written by datasets.save_to_disk and is complete.") from exc
    return _from_hf(data, name=source, config=None)


def _load_hub(source: str, config: str | None) -> _Loaded:
    import datasets as hf_datasets

    try:
        data = hf_datasets.load_dataset(source, config)
    except Exception as exc:
        raise DatasetError(f"Could not load dataset {source!r} from the Hugging Face Hub or a local path: "
                           f"{_short(exc)}. Check the name, or pass a local file (csv/tsv/jsonl/parquet/CoNLL).") \
            from exc
    return _from_hf(data, name=source, config=config)


def _from_hf(data: Any, name: str, config: str | None) -> _Loaded:
    if isinstance(getattr(data, "column_names", None), list):  # a single Dataset
        items = [("train", data)]
    else:  # a DatasetDict
        items = list(data.items())
    splits: dict[str, _Split] = {}
    parts: list[Any] = []
    for split_name, ds in items:
        if not hasattr(ds, "column_names") or not hasattr(ds, "__len__"):
            raise DatasetError(f"Split '{split_name}' of {name!r} is not a regular (non-streaming) dataset; "
                               f"load it without streaming.")
        split_name = str(split_name)
        splits[split_name] = _HubSplit(split_name, f"split '{split_name}' of '{name}'", ds)
        parts.append({"split": split_name,
                      "fingerprint": getattr(ds, "_fingerprint", None) or _hash([name, config, split_name, len(ds)])})
    return _Loaded(name=name, splits=splits, fingerprint_parts=parts, config=config)


# --------------------------------------------------------------------------------------------
# From tables to records


@dataclass
class _TaskPlan:
    task: LabelTask
    encode: Callable[[Any], Any]  # one cell -> id / float / list of ids, or None when unlabelled
    unlabelled_splits: set[str]


def _build_records(loaded: _Loaded, *, splits, text_columns, label_columns, no_labels, task_kind,
                   limit) -> DatasetRecords:
    name = loaded.name
    all_splits = loaded.splits
    if not all_splits or all(s.num_rows == 0 for s in all_splits.values()):
        raise DatasetError(f"Dataset {name!r} has no examples; pass a dataset with rows.")
    explicit = splits is not None
    if explicit:
        unknown = [s for s in splits if s not in all_splits]
        if unknown:
            raise DatasetError(f"Split {unknown[0]!r} is not in {name!r}; choose from {', '.join(all_splits)}.")
        selected = list(splits)
    else:
        selected = list(all_splits)
    for split_name in selected:
        if all_splits[split_name].num_rows == 0:
            raise DatasetError(f"The {all_splits[split_name].origin} has no examples; leave it out of the splits.")
    columns = list(dict.fromkeys(c for s in all_splits.values() for c in s.column_names))
    chosen = [all_splits[s] for s in selected]

    # ---- columns
    requested = [*(text_columns or []), *(label_columns or [])]
    for column in requested:
        if column not in columns:
            raise DatasetError(f"Column {column!r} is not in {name!r}; available columns: {', '.join(columns)}.")
    labels = [] if no_labels else (
        label_columns or _detect_label_columns(loaded, columns, chosen, text_columns))
    if not labels and not no_labels:
        raise DatasetError(f"No label column found in {name!r} (columns: {', '.join(columns)}); pass "
                           f"--label-column NAME, or --no-labels to cache it without labels.")
    per_word_labels = any(_holds_lists(all_splits.values(), c) for c in labels)
    texts, mode = _choose_text_columns(loaded, columns, chosen, text_columns, labels, per_word_labels)
    overlap = [c for c in texts if c in labels]
    if overlap:
        raise ConfigError(f"Column {overlap[0]!r} cannot be both the text and a label; choose another column "
                          f"for one of them.")
    if loaded.headerless:
        labels, texts, columns = _name_headerless_columns(all_splits, labels, texts, columns)
    for split in chosen:
        for column in texts:
            if column not in split.column_names:
                raise DatasetError(f"Text column {column!r} is missing from the {split.origin}; available columns "
                                   f"there: {', '.join(split.column_names)}.")

    # ---- labels, one vocabulary over all splits
    plans = [_plan_task(c, all_splits, task_kind) for c in labels]
    for plan in plans:
        if plan.task.kind == "token" and mode != "words":
            raise DatasetError(f"Label column {plan.task.name!r} holds one label per word but the input "
                               f"{', '.join(texts)} is raw text; pass a word-list column (tokens/words) with "
                               f"--text-column.")

    # ---- splits
    out: dict[str, SplitRecords] = {}
    for split in chosen:
        records = _split_records(split, name, texts, mode, plans, limit, explicit)
        if records is not None:
            out[split.name] = records
    if not out:
        raise DatasetError(f"No split of {name!r} has labels in {', '.join(labels)}; pass --label-column NAME "
                           f"for another column, or --no-labels to cache it without labels.")

    fingerprint = _hash({
        "version": 1, "source": loaded.fingerprint_parts, "config": loaded.config, "splits": list(out),
        "text_columns": texts, "mode": mode, "label_columns": labels, "task_kind": task_kind,
        "no_labels": bool(no_labels), "limit": limit, "tasks": [p.task.to_json() for p in plans],
    })
    return DatasetRecords(name=name, splits=out, tasks=[p.task for p in plans], config=loaded.config,
                          fingerprint=fingerprint, columns=columns, text_columns=texts,
                          files={s: f for s, f in loaded.files.items() if s in out})


def _find(columns: Iterable[str], wanted: str) -> str | None:
    """The column named ``wanted``, matched exactly first, then case-insensitively."""
    columns = list(columns)
    if wanted in columns:
        return wanted
    for column in columns:
        if column.lower() == wanted.lower():
            return column
    return None


def _detect_label_columns(loaded: _Loaded, columns: list[str], chosen: list[_Split],
                          text_columns: list[str] | None) -> list[str]:
    if loaded.default_labels is not None:
        return list(loaded.default_labels)
    taken = set(text_columns or [])
    for candidate in LABEL_COLUMN_CANDIDATES:
        found = _find(columns, candidate)
        if found and found not in taken:
            return [found]
    for split in loaded.splits.values():  # hub: any ClassLabel column
        for column in split.column_names:
            if column in split.class_names and column not in taken:
                return [column]
    if loaded.headerless:
        text = text_columns or _detect_text_by_content(chosen[0], columns)
        found = _detect_label_by_content(chosen[0], columns, text)
        return [found] if found else []
    return []


def _choose_text_columns(loaded: _Loaded, columns: list[str], chosen: list[_Split], text_columns: list[str] | None,
                         labels: list[str], per_word_labels: bool) -> tuple[list[str], str]:
    """The input column(s) and the mode: ``"texts"``, ``"pairs"`` or ``"words"``."""
    if text_columns:
        if len(text_columns) == 2:
            return list(text_columns), "pairs"
        column = text_columns[0]
        return [column], "words" if _holds_lists(chosen, column) else "texts"
    available = [c for c in columns if c not in labels]
    for first, second in PAIR_COLUMN_CANDIDATES:
        a, b = _find(available, first), _find(available, second)
        if a and b and not per_word_labels:
            return [a, b], "pairs"
    words = [w for w in (loaded.default_words, *WORD_COLUMN_CANDIDATES) if w]
    if per_word_labels:
        for candidate in words:
            found = _find(available, candidate)
            if found and _holds_lists(chosen, found):
                return [found], "words"
        raise DatasetError(f"Label column(s) {', '.join(labels)} hold a list of tags per example, which needs a "
                           f"column of word lists (tokens/words), and none is among {', '.join(columns)}; pass "
                           f"--text-column NAME for the word lists, or --label-column NAME for a single label.")
    for candidate in TEXT_COLUMN_CANDIDATES:
        found = _find(available, candidate)
        if found:
            return [found], "words" if _holds_lists(chosen, found) else "texts"
    for candidate in words:
        found = _find(available, candidate)
        if found and _holds_lists(chosen, found):
            return [found], "words"
    if loaded.headerless:
        found = _detect_text_by_content(chosen[0], available)
        if found:
            return [found], "texts"
    raise DatasetError(f"No text column found in {loaded.name!r} (columns: {', '.join(columns)}); pass "
                       f"--text-column NAME (or two names for a sentence pair).")


def _name_headerless_columns(splits: Mapping[str, _Split], labels: list[str], texts: list[str],
                             columns: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Give the columns of a file without a header the names a header would have given them.

    Their names are positions ("0", "1"); once detection (or ``--label-column 0``) has told label
    from text, the task is called ``label`` (``label_<position>`` for several) and the text
    ``text`` (``text``/``text_pair`` for pairs), so runs and reports do not speak of task "0".
    """
    names = {c: "label" if len(labels) == 1 else f"label_{c}" for c in labels}
    names.update(zip(texts, ["text"] if len(texts) == 1 else ["text", "text_pair"]))
    clash = set(names.values()) & (set(columns) - set(names))
    if clash:  # cannot happen with positional names, but never shadow a real column
        return labels, texts, columns
    for split in splits.values():
        if isinstance(split, _MemorySplit):
            split.rename(names)
    return [names[c] for c in labels], [names[c] for c in texts], [names.get(c, c) for c in columns]


def _holds_lists(splits: Iterable[_Split], column: str) -> bool:
    for split in splits:
        if column not in split.column_names:
            continue
        for value in split.column(column, _SAMPLE_ROWS):
            if isinstance(value, (list, tuple)):
                return True
            if not _is_missing(value):
                return False
    return False


def _column_profile(split: _Split, column: str) -> dict[str, Any]:
    values = [v for v in split.column(column, _SAMPLE_ROWS) if not _is_missing(v)]
    strings = [v if isinstance(v, str) else str(v) for v in values if not isinstance(v, (list, tuple, dict))]
    numeric = bool(strings) and all(_as_number(s) is not None for s in strings)
    return {
        "n": len(strings),
        "numeric": numeric,
        "mean_length": sum(map(len, strings)) / len(strings) if strings else 0.0,
        "spaced": sum(" " in s.strip() for s in strings) / len(strings) if strings else 0.0,
        "distinct": len(set(s.strip() for s in strings)),
    }


def _detect_text_by_content(split: _Split, columns: list[str]) -> str | None:
    """Headerless tables: the longest free-text column (mostly containing spaces), else the longest non-numeric one."""
    profiles = {c: _column_profile(split, c) for c in columns if c in split.column_names}
    candidates = [c for c, p in profiles.items() if p["n"] and not p["numeric"]]
    spaced = [c for c in candidates if profiles[c]["spaced"] >= 0.5]
    pool = spaced or candidates
    if not pool:
        return None
    return max(pool, key=lambda c: profiles[c]["mean_length"])


def _detect_label_by_content(split: _Split, columns: list[str], text: list[str] | str | None) -> str | None:
    """Headerless tables: the only other column, else the one with the fewest distinct values (fewer than rows)."""
    taken = {text} if isinstance(text, str) else set(text or [])
    others = [c for c in columns if c not in taken and c in split.column_names]
    profiles = {c: _column_profile(split, c) for c in others}
    others = [c for c in others if profiles[c]["n"]]
    if len(others) == 1:
        return others[0]
    low = [c for c in others if profiles[c]["distinct"] < profiles[c]["n"] or profiles[c]["numeric"]]
    if not low:
        return None
    return min(low, key=lambda c: (profiles[c]["distinct"], profiles[c]["spaced"]))


# ---- label encoding


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _is_missing(value: Any) -> bool:
    return value is None or _is_nan(value) or (isinstance(value, str) and not value.strip())


def _as_number(value: Any) -> int | float | None:
    """The number a label value stands for (``"3"`` -> 3, ``"0.5"`` -> 0.5), or ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, str):
        text = value.strip()
        if _INT_RE.fullmatch(text):
            return int(text)
        if _FLOAT_RE.fullmatch(text):
            return float(text)
    return None


def _number_key(number: int | float) -> int | float:
    return int(number) if float(number).is_integer() else float(number)


def _string_key(value: Any) -> str:
    number = _as_number(value)
    if number is not None and float(number).is_integer():
        return str(int(number))
    return value.strip() if isinstance(value, str) else str(value)


def _class_vocabulary(values: list) -> tuple[tuple[str, ...], Callable[[Any], Any], dict]:
    """(names in id order, key function, key -> id) for a list of non-missing class values."""
    numbers_ = [_as_number(v) for v in values]
    if values and all(n is not None for n in numbers_):
        keys = sorted(set(_number_key(n) for n in numbers_))
        index = {k: i for i, k in enumerate(keys)}
        return tuple(str(k) for k in keys), lambda v: _number_key(_as_number(v)) if _as_number(v) is not None \
            else None, index

    def order(key: str) -> tuple:
        return (0, int(key), "") if _INT_RE.fullmatch(key) else (1, 0, key)

    keys = sorted(set(_string_key(v) for v in values), key=order)
    index = {k: i for i, k in enumerate(keys)}
    return tuple(keys), _string_key, index


def _plan_task(column: str, splits: Mapping[str, _Split], task_kind: str | None) -> _TaskPlan:
    values = {name: split.column(column) for name, split in splits.items() if column in split.column_names}
    unlabelled = {name for name in splits if name not in values}
    hint = next((s.class_names[column] for s in splits.values() if column in s.class_names), None)
    present = {name: [v for v in vals if not _is_missing(v)] for name, vals in values.items()}
    is_list = [isinstance(v, (list, tuple)) for vals in present.values() for v in vals]
    if any(is_list) and not all(is_list):
        raise DatasetError(f"Label column {column!r} mixes single labels and lists of labels; give every row "
                           f"the same kind of label.")
    per_word = any(is_list) or bool(hint and hint[1])
    if per_word:
        if task_kind in ("sequence", "regression"):
            raise DatasetError(f"Label column {column!r} holds one label per word, so it cannot be a {task_kind} "
                               f"task; leave task_kind out or choose another label column.")
        return _plan_token_task(column, present, unlabelled, hint)
    if task_kind == "token":
        raise DatasetError(f"Label column {column!r} has one label per example, but a token task needs one label "
                           f"per word (lists of tags, as in a CoNLL file); leave task_kind out.")

    if hint:  # hub ClassLabel: ids as they are, -1 = no label
        names = hint[0]

        def class_id(value: Any) -> int | None:
            if _is_missing(value) or value == -1:
                return None
            if not isinstance(value, numbers.Integral) or not 0 <= int(value) < len(names):
                raise DatasetError(f"Label column {column!r} has the value {value!r}, outside its {len(names)} "
                                   f"classes; fix the dataset's labels.")
            return int(value)

        for name, vals in present.items():
            if all(v == -1 for v in vals):
                unlabelled.add(name)
        if task_kind == "regression":
            return _TaskPlan(LabelTask(column, "regression"),
                             lambda v: None if class_id(v) is None else float(class_id(v)), unlabelled)
        _warn_single_class(column, [names[i] for name, vals in present.items() if name not in unlabelled
                                    for i in map(class_id, vals) if i is not None])
        return _TaskPlan(LabelTask(column, "sequence", tuple(names)), class_id, unlabelled)

    # A split that is -1 throughout while others are not: the hub's "no label" convention.
    minus_one = {name for name, vals in present.items() if vals and all(_as_number(v) == -1 for v in vals)}
    if minus_one and any(name not in minus_one and vals for name, vals in present.items()):
        unlabelled |= minus_one
    for name, vals in present.items():
        if not vals:
            unlabelled.add(name)
    pool = [v for name, vals in present.items() if name not in unlabelled for v in vals]
    if not pool:
        return _TaskPlan(LabelTask(column, "regression"), lambda v: None, set(splits))
    numbers_ = [_as_number(v) for v in pool]
    all_numeric = all(n is not None for n in numbers_)
    fractional = all_numeric and any(not float(n).is_integer() for n in numbers_)
    if task_kind == "regression" or (task_kind is None and fractional):
        if not all_numeric:
            bad = next(v for v, n in zip(pool, numbers_) if n is None)
            raise DatasetError(f"Label column {column!r} has the non-numeric value {bad!r}, so it cannot be a "
                               f"regression target; fix the value or leave task_kind out.")

        def to_float(value: Any) -> float | None:
            if _is_missing(value):
                return None
            number = _as_number(value)
            if number is None:
                raise DatasetError(f"Label column {column!r} has the non-numeric value {value!r}, so it cannot "
                                   f"be a regression target; fix the value.")
            return float(number)

        return _TaskPlan(LabelTask(column, "regression"), to_float, unlabelled)
    names, key, index = _class_vocabulary(pool)
    _warn_single_class(column, names)
    if all_numeric and len(names) > _MANY_CLASSES and task_kind is None:
        warnings.warn(f"Label column {column!r} has {len(names)} distinct integer values and is read as "
                      f"{len(names)} classes; pass task_kind='regression' (--task-kind regression) if it is a score.",
                      UserWarning, stacklevel=3)

    def encode(value: Any) -> int | None:
        if _is_missing(value):
            return None
        return index.get(key(value))  # only values of unlabelled splits fall outside

    return _TaskPlan(LabelTask(column, "sequence", names), encode, unlabelled)


def _warn_single_class(column: str, classes: Iterable[str]) -> None:
    """Warn when every labelled row (or word) of ``column`` has the same class: nothing to learn."""
    distinct = set(classes)
    if len(distinct) == 1:
        warnings.warn(f"Label column {column!r} has a single class {distinct.pop()!r} in every labelled row: a "
                      f"head cannot learn from it; check --label-column, or pass --no-labels to cache unlabelled "
                      f"data.", UserWarning, stacklevel=4)


def _plan_token_task(column: str, present: dict[str, list], unlabelled: set[str],
                     hint: tuple[tuple[str, ...], bool] | None) -> _TaskPlan:
    for name, vals in present.items():
        if not vals:
            unlabelled.add(name)
    if hint:
        names = hint[0]

        def tag_id(value: Any) -> int:
            if not isinstance(value, numbers.Integral) or not 0 <= int(value) < len(names):
                raise DatasetError(f"Token label column {column!r} has the tag {value!r}, outside its {len(names)} "
                                   f"classes; fix the dataset's tags.")
            return int(value)

        _warn_single_class(column, [names[tag_id(t)] for name, vals in present.items() if name not in unlabelled
                                    for v in vals for t in v])
        return _TaskPlan(LabelTask(column, "token", tuple(names)),
                         lambda v: None if _is_missing(v) else [tag_id(t) for t in v], unlabelled)
    tags = [t for name, vals in present.items() if name not in unlabelled for v in vals for t in v]
    if any(_is_missing(t) for t in tags):
        raise DatasetError(f"Token label column {column!r} has an empty tag; give every word a tag.")
    if not tags:
        return _TaskPlan(LabelTask(column, "token", ("O",)), lambda v: None, set(present) | unlabelled)
    names, key, index = _class_vocabulary(tags)
    _warn_single_class(column, names)
    return _TaskPlan(LabelTask(column, "token", names),
                     lambda v: None if _is_missing(v) else [index[key(t)] for t in v], unlabelled)


def _split_records(split: _Split, name: str, texts: list[str], mode: str, plans: list[_TaskPlan],
                   limit: int | None, explicit: bool) -> SplitRecords | None:
    """The split's rows as records: rows with empty input or a missing label are left out (and reported).

    An empty input (a blank text, either text of a pair, or a word list with no word) cannot be
    run through the model. Such rows are skipped with a warning that names their lines and
    counted in ``n_skipped_empty``; ``source_index`` keeps the source row of every kept example.
    """
    stop = split.num_rows if limit is None else min(limit, split.num_rows)
    first: list = []
    second: list | None = None
    if mode == "words":
        first = _word_column(split, texts[0], stop)
    else:
        first = _text_column(split, texts[0], stop)
        if mode == "pairs":
            second = _text_column(split, texts[1], stop)
    empty = [i for i in range(stop) if _is_empty_input(first[i]) or (second is not None and _is_empty_input(second[i]))]
    skip = set(empty)
    labels: dict[str, list] = {}
    label_names = ", ".join(repr(p.task.name) for p in plans)
    unlabelled_rows: set[int] = set()
    for plan in plans:
        column = plan.task.name
        if split.name in plan.unlabelled_splits:
            return _unlabelled(split, label_names, explicit)
        encoded = [plan.encode(v) for v in split.column(column, stop)]
        for i, value in enumerate(encoded):
            if value is None:
                unlabelled_rows.add(i)
            elif plan.task.kind == "token" and i not in skip and len(value) != len(first[i]):
                raise DatasetError(f"Row {i} of the {split.origin} has {len(first[i])} words but {len(value)} "
                                   f"{column!r} tags; give every word exactly one tag.")
        skip |= unlabelled_rows
        labels[column] = encoded
    if plans and all(value is None for encoded in labels.values() for value in encoded):
        return _unlabelled(split, label_names, explicit)
    what = _empty_input_name(mode, texts)
    if len(empty) == stop:
        raise DatasetError(f"Every row of the {split.origin} has empty {what}; choose the input column with "
                           f"--text-column, or pass data with text.")
    kept = [i for i in range(stop) if i not in skip]
    if not kept:
        raise DatasetError(f"No row of the {split.origin} has both text and every label in {label_names}; "
                           f"pass a split with complete rows.")
    dropped = len(unlabelled_rows - set(empty))
    if dropped:
        warnings.warn(f"Skipping {dropped} of {stop} rows of the {split.origin} that have no label in "
                      f"{label_names}.", UserWarning, stacklevel=4)
    if empty:
        rows, they = ("1 row", "it is") if len(empty) == 1 else (f"{len(empty)} rows", "they are")
        warnings.warn(f"Skipping {rows} of {split.where(empty)} with empty {what}; {they} left out of the cache "
                      f"and counted as skipped by `layercache info`.",
                      UserWarning, stacklevel=4)
    pick = (lambda column: column) if len(kept) == stop else (lambda column: [column[i] for i in kept])
    return SplitRecords(
        texts=None if mode == "words" else pick(first),
        text_pairs=None if second is None else pick(second),
        words=pick(first) if mode == "words" else None,
        labels={k: pick(v) for k, v in labels.items()},
        source_index=kept,
        n_skipped_empty=len(empty),
    )


def _is_empty_input(value: str | list[str]) -> bool:
    """A blank text, or a word list with no non-blank word: nothing for the model to read."""
    if isinstance(value, list):
        return not any(word.strip() for word in value)
    return not value.strip()


def _empty_input_name(mode: str, texts: list[str]) -> str:
    if mode == "words":
        return f"word lists in column {texts[0]!r}"
    if mode == "pairs":
        return f"text in column {texts[0]!r} or {texts[1]!r}"
    return f"text in column {texts[0]!r}"


def _unlabelled(split: _Split, label_names: str, explicit: bool) -> None:
    if explicit:
        raise DatasetError(f"The {split.origin} has no labels in {label_names}; leave it out of the splits, or "
                           f"pass --no-labels to cache it without labels.")
    warnings.warn(f"Skipping the {split.origin}: it has no labels in {label_names} (pass --no-labels and "
                  f"choose the split to cache it without labels).", UserWarning, stacklevel=5)
    return None


def _text_column(split: _Split, column: str, stop: int) -> list[str]:
    out = []
    for i, value in enumerate(split.column(column, stop)):
        if value is None or _is_nan(value):
            raise DatasetError(f"Row {i} of the {split.origin} has no value in the text column {column!r}; fill "
                               f"it in or remove the row.")
        if isinstance(value, (list, tuple, dict)):
            raise DatasetError(f"Row {i} of the {split.origin} holds a {type(value).__name__} in the text column "
                               f"{column!r}; pass a column of strings (lists of words only as a single column).")
        out.append(value if isinstance(value, str) else str(value))
    return out


def _word_column(split: _Split, column: str, stop: int) -> list[list[str]]:
    out = []
    for i, value in enumerate(split.column(column, stop)):
        if not isinstance(value, (list, tuple)) or any(w is None or _is_nan(w) for w in value):
            raise DatasetError(f"Row {i} of the {split.origin} has no list of words in column {column!r}; give "
                               f"every row a list of strings.")
        out.append([w if isinstance(w, str) else str(w) for w in value])
    return out


# --------------------------------------------------------------------------------------------
# Small helpers


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0].strip() if text else type(exc).__name__
    line = line.rstrip(".")
    return line if len(line) <= 300 else line[:297] + "..."


def _hash(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode("utf-8")).hexdigest()
