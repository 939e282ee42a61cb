"""From a split's table to :class:`SplitRecords`: the input read and checked, incomplete rows left out.

A row whose input is empty (a blank or missing text such as JSON ``null``, either text of a pair, a
word list with no word) cannot run through the model; a row without one of the labels cannot teach
a head. Both are skipped with a warning that names their lines, and the kept rows remember their
source row.
"""

from __future__ import annotations

import logging

from layercache.errors import DatasetError

from ..core.option_names import option
from .labels import TaskPlan
from .records import SplitRecords
from .splits import Split
from .values import is_nan

log = logging.getLogger("layercache")
"""Warnings go where every layercache warning goes (the CLI prints them as its own lines, not as Python warnings)."""


def split_records(split: Split, name: str, texts: list[str], mode: str, plans: list[TaskPlan],
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
                           f"{option('text_columns')}, or pass data with text.")
    kept = [i for i in range(stop) if i not in skip]
    if not kept:
        raise DatasetError(f"No row of the {split.origin} has both text and every label in {label_names}; "
                           f"pass a split with complete rows.")
    dropped = len(unlabelled_rows - set(empty))
    if dropped:
        log.warning(f"Skipping {dropped} of {stop} rows of the {split.origin} that have no label in "
                      f"{label_names}.")
    if empty:
        rows, they = ("1 row", "it is") if len(empty) == 1 else (f"{len(empty)} rows", "they are")
        log.warning(f"Skipping {rows} of {split.where(empty)} with empty {what}; {they} left out of the cache "
                      f"and counted as skipped by `layercache info`.")
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


def _unlabelled(split: Split, label_names: str, explicit: bool) -> None:
    if explicit:
        raise DatasetError(f"The {split.origin} has no labels in {label_names}; leave it out of the splits, or "
                           f"pass {option('no_labels', True)} to cache it without labels.")
    log.warning(f"Skipping the {split.origin}: it has no labels in {label_names} (pass {option('no_labels', True)} and "
                  f"choose the split to cache it without labels).")
    return None


def _text_column(split: Split, column: str, stop: int) -> list[str]:
    out = []
    for i, value in enumerate(split.column(column, stop)):
        if value is None or is_nan(value):  # JSON null, an empty numeric cell: empty, so skipped and counted
            out.append("")
            continue
        if isinstance(value, (list, tuple, dict)):
            raise DatasetError(f"Row {i} of the {split.origin} holds a {type(value).__name__} in the text column "
                               f"{column!r}; pass a column of strings (lists of words only as a single column).")
        out.append(value if isinstance(value, str) else str(value))
    return out


def _word_column(split: Split, column: str, stop: int) -> list[list[str]]:
    out = []
    for i, value in enumerate(split.column(column, stop)):
        if value is None or is_nan(value):  # no word list at all: empty, so skipped and counted like []
            out.append([])
            continue
        if not isinstance(value, (list, tuple)) or any(w is None or is_nan(w) for w in value):
            raise DatasetError(f"Row {i} of the {split.origin} has no list of words in column {column!r}; give "
                               f"every row a list of strings.")
        out.append([w if isinstance(w, str) else str(w) for w in value])
    return out
