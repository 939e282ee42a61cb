"""Turn a dataset source into :class:`DatasetRecords`.

Sources, tried in this order:

- ``builtin`` / ``builtin:<seed>``: the generated task set of :mod:`layercache.sources.builtin`;
- ``split_files={"train": path, ...}``: one local file per split;
- a local file, read by the reader registered for its extension in
  :mod:`~layercache.sources.registry`: ``.csv``, ``.tsv``, ``.jsonl``/``.json`` (JSON lines, a
  JSON array of records, or a JSON object of equal-length columns), ``.parquet``, and CoNLL token
  files (``.conll``, and ``.txt``/``.iob``/``.bio`` when they hold one token per line); a single
  file is split ``train``;
- a folder written by ``datasets.save_to_disk``;
- anything else is a Hugging Face Hub id (``imdb``, ``glue`` with ``config="cola"``).

Every source becomes a table per split (columns of Python values, :mod:`~.splits`). Column
choice (:mod:`~.columns`), label encoding (:mod:`~.labels`), and rows to records (:mod:`~.rows`)
are then the same for all of them; see :func:`load_dataset_records` for the rules. This module
only picks the source and chains those steps.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from layercache.errors import ConfigError, DatasetError

from ..core.checksum import json_sha256
from ..core.option_names import option
from .builtin_records import load_builtin_records
from .columns import (
    LABEL_COLUMN_CANDIDATES,
    PAIR_COLUMN_CANDIDATES,
    TEXT_COLUMN_CANDIDATES,
    WORD_COLUMN_CANDIDATES,
    choose_text_columns,
    detect_label_columns,
    holds_lists,
    name_headerless_columns,
)
from .files import load_split_files
from .hub import is_saved_dataset, load_hub, load_saved
from .labels import plan_task
from .records import TASK_KINDS, DatasetRecords, SplitRecords
from .registry import SUPPORTED_EXTENSIONS, SUPPORTED_FILES, names_a_file
from .rows import split_records
from .splits import LoadedSource

__all__ = [
    "load_dataset_records",
    "TEXT_COLUMN_CANDIDATES",
    "PAIR_COLUMN_CANDIDATES",
    "WORD_COLUMN_CANDIDATES",
    "LABEL_COLUMN_CANDIDATES",
    "SUPPORTED_EXTENSIONS",
]


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
          CoNLL-2003 files use pos, chunk and ner (three token tasks), other CoNLL files their last
          column.
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
        loaded = load_split_files(split_files)
    elif not source:
        raise ConfigError("No dataset given; pass 'builtin', a Hugging Face Hub id, a local file or folder, "
                          "or split_files.")
    elif source == "builtin" or source.startswith("builtin:"):
        return load_builtin_records(source, config=config, splits=splits, text_columns=text_columns,
                                    label_columns=label_columns, no_labels=no_labels,
                                    task_kind=task_kind, limit=limit)
    else:
        path = Path(source).expanduser()
        if path.is_file():
            if config:
                raise ConfigError(f"config only applies to Hugging Face Hub datasets, not to the local file {source}.")
            loaded = load_split_files({"train": str(path)}, name=source)
        elif path.is_dir():
            loaded = load_saved(path, source) if is_saved_dataset(path) else load_hub(source, config)
        elif _looks_like_path(source):
            raise DatasetError(f"No file or folder {source!r} exists; check the path "
                               f"(supported files: {SUPPORTED_FILES}).")
        else:
            loaded = load_hub(source, config)
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
    return names_a_file(Path(source).suffix)


def _build_records(loaded: LoadedSource, *, splits, text_columns, label_columns, no_labels, task_kind,
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
        label_columns or detect_label_columns(loaded, columns, chosen, text_columns))
    if not labels and not no_labels:
        raise DatasetError(f"No label column found in {name!r} (columns: {', '.join(columns)}); pass "
                           f"{option('label_columns', typed='NAME')}, or {option('no_labels', True)} to cache it "
                           "without labels.")
    per_word_labels = any(holds_lists(all_splits.values(), c) for c in labels)
    texts, mode = choose_text_columns(loaded, columns, chosen, text_columns, labels, per_word_labels)
    overlap = [c for c in texts if c in labels]
    if overlap:
        raise ConfigError(f"Column {overlap[0]!r} cannot be both the text and a label; choose another column "
                          f"for one of them.")
    if loaded.headerless:
        labels, texts, columns = name_headerless_columns(all_splits, labels, texts, columns)
    for split in chosen:
        for column in texts:
            if column not in split.column_names:
                raise DatasetError(f"Text column {column!r} is missing from the {split.origin}; available columns "
                                   f"there: {', '.join(split.column_names)}.")

    # ---- labels, one vocabulary over all splits
    plans = [plan_task(c, all_splits, task_kind) for c in labels]
    for plan in plans:
        if plan.task.kind == "token" and mode != "words":
            raise DatasetError(f"Label column {plan.task.name!r} holds one label per word but the input "
                               f"{', '.join(texts)} is raw text; pass a word-list column (tokens/words) with "
                               f"{option('text_columns')}.")

    # ---- splits
    out: dict[str, SplitRecords] = {}
    for split in chosen:
        records = split_records(split, name, texts, mode, plans, limit, explicit)
        if records is not None:
            out[split.name] = records
    if not out:
        raise DatasetError(f"No split of {name!r} has labels in {', '.join(labels)}; pass "
                           f"{option('label_columns', typed='NAME')} for another column, or "
                           f"{option('no_labels', True)} to cache it without labels.")

    fingerprint = json_sha256({
        "version": 1, "source": loaded.fingerprint_parts, "config": loaded.config, "splits": list(out),
        "text_columns": texts, "mode": mode, "label_columns": labels, "task_kind": task_kind,
        "no_labels": bool(no_labels), "limit": limit, "tasks": [p.task.to_json() for p in plans],
    })
    return DatasetRecords(name=name, splits=out, tasks=[p.task for p in plans], config=loaded.config,
                          fingerprint=fingerprint, columns=columns, text_columns=texts,
                          files={s: f for s, f in loaded.files.items() if s in out})
