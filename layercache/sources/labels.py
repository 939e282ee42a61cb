"""Label encoding: from a label column's values to a :class:`LabelTask` and an encoder for its cells.

Kinds: ClassLabel names when the hub has them; lists -> ``token``; numbers with a non-integer
value -> ``regression``; anything else is classes, named by their sorted distinct values
(integer-looking values sorted numerically, so ``0``/``1`` keep ids 0/1), one vocabulary over
all splits. A split whose labels are all missing (or all ``-1`` while others are not, the hub's
"no label") is unlabelled.
"""

from __future__ import annotations

import logging
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from layercache.errors import DatasetError

from ..core.option_names import option
from .records import LabelTask
from .splits import Split
from .values import INT_RE, as_number, is_missing

log = logging.getLogger("layercache")
"""Warnings go where every layercache warning goes (the CLI prints them as its own lines, not as Python warnings)."""

MANY_CLASSES = 100
"""More distinct integer labels than this read as classes get a hint that the column may be a score."""


@dataclass
class TaskPlan:
    """How one label column becomes a task: its :class:`LabelTask`, how a cell is encoded, which splits have none."""

    task: LabelTask
    encode: Callable[[Any], Any]  # one cell -> id / float / list of ids, or None when unlabelled
    unlabelled_splits: set[str]



def _number_key(number: int | float) -> int | float:
    return int(number) if float(number).is_integer() else float(number)


def _string_key(value: Any) -> str:
    number = as_number(value)
    if number is not None and float(number).is_integer():
        return str(int(number))
    return value.strip() if isinstance(value, str) else str(value)


def _class_vocabulary(values: list) -> tuple[tuple[str, ...], Callable[[Any], Any], dict]:
    """(names in id order, key function, key -> id) for a list of non-missing class values."""
    numbers_ = [as_number(v) for v in values]
    if values and all(n is not None for n in numbers_):
        keys = sorted(set(_number_key(n) for n in numbers_))
        index = {k: i for i, k in enumerate(keys)}
        return tuple(str(k) for k in keys), lambda v: _number_key(as_number(v)) if as_number(v) is not None \
            else None, index

    def order(key: str) -> tuple:
        return (0, int(key), "") if INT_RE.fullmatch(key) else (1, 0, key)

    keys = sorted(set(_string_key(v) for v in values), key=order)
    index = {k: i for i, k in enumerate(keys)}
    return tuple(keys), _string_key, index


def plan_task(column: str, splits: Mapping[str, Split], task_kind: str | None) -> TaskPlan:
    """Plan the task of label column ``column`` from its values in every split: one vocabulary for all."""
    values = {name: split.column(column) for name, split in splits.items() if column in split.column_names}
    unlabelled = {name for name in splits if name not in values}
    hint = next((s.class_names[column] for s in splits.values() if column in s.class_names), None)
    present = {name: [v for v in vals if not is_missing(v)] for name, vals in values.items()}
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
            if is_missing(value) or value == -1:
                return None
            if not isinstance(value, numbers.Integral) or not 0 <= int(value) < len(names):
                raise DatasetError(f"Label column {column!r} has the value {value!r}, outside its {len(names)} "
                                   f"classes; fix the dataset's labels.")
            return int(value)

        for name, vals in present.items():
            if all(v == -1 for v in vals):
                unlabelled.add(name)
        if task_kind == "regression":
            return TaskPlan(LabelTask(column, "regression"),
                            lambda v: None if class_id(v) is None else float(class_id(v)), unlabelled)
        _warn_single_class(column, [names[i] for name, vals in present.items() if name not in unlabelled
                                    for i in map(class_id, vals) if i is not None])
        return TaskPlan(LabelTask(column, "sequence", tuple(names)), class_id, unlabelled)

    # A split that is -1 throughout while others are not: the hub's "no label" convention.
    minus_one = {name for name, vals in present.items() if vals and all(as_number(v) == -1 for v in vals)}
    if minus_one and any(name not in minus_one and vals for name, vals in present.items()):
        unlabelled |= minus_one
    for name, vals in present.items():
        if not vals:
            unlabelled.add(name)
    pool = [v for name, vals in present.items() if name not in unlabelled for v in vals]
    if not pool:
        return TaskPlan(LabelTask(column, "regression"), lambda v: None, set(splits))
    _refuse_non_finite(column, {name: vals for name, vals in values.items() if name not in unlabelled}, splits)
    numbers_ = [as_number(v) for v in pool]
    all_numeric = all(n is not None for n in numbers_)
    fractional = all_numeric and any(not float(n).is_integer() for n in numbers_)
    if task_kind == "regression" or (task_kind is None and fractional):
        if not all_numeric:
            bad = next(v for v, n in zip(pool, numbers_) if n is None)
            raise DatasetError(f"Label column {column!r} has the non-numeric value {bad!r}, so it cannot be a "
                               f"regression target; fix the value or leave task_kind out.")

        def to_float(value: Any) -> float | None:
            if is_missing(value):
                return None
            number = as_number(value)
            if number is None:
                raise DatasetError(f"Label column {column!r} has the non-numeric value {value!r}, so it cannot "
                                   f"be a regression target; fix the value.")
            return float(number)

        return TaskPlan(LabelTask(column, "regression"), to_float, unlabelled)
    names, key, index = _class_vocabulary(pool)
    _warn_single_class(column, names)
    if all_numeric and len(names) > MANY_CLASSES and task_kind is None:
        log.warning(f"Label column {column!r} has {len(names)} distinct integer values and is read as "
                      f"{len(names)} classes; pass {option('task_kind', 'regression')} if it is a score.")

    def encode(value: Any) -> int | None:
        if is_missing(value):
            return None
        return index.get(key(value))  # only values of unlabelled splits fall outside

    return TaskPlan(LabelTask(column, "sequence", names), encode, unlabelled)


_NON_FINITE_WORDS = {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "nan", "+nan", "-nan"}


def _is_non_finite(value: Any) -> bool:
    """An infinite number, or a string spelling one or NaN (``Infinity``, ``-inf``, ``NaN``).

    A float NaN is not counted: it is what tables hold for an empty cell, so it means "no label".
    """
    if isinstance(value, float):
        return math.isinf(value)
    return isinstance(value, str) and value.strip().lower() in _NON_FINITE_WORDS


def _refuse_non_finite(column: str, values: Mapping[str, list], splits: Mapping[str, Split]) -> None:
    """Refuse a column of numbers in which some value is infinite or spells NaN, naming its row.

    Read as they are, such values are not numbers to :func:`~.values.as_number`, so the column
    would become a class task with one class per distinct number (a regression target that is
    suddenly 35 classes). A column with other non-numbers is a class vocabulary, where ``inf`` is
    just a class name.
    """
    found = next(((name, row, v) for name, vals in values.items() for row, v in enumerate(vals)
                  if _is_non_finite(v)), None)
    if found is None:
        return
    if all(_is_non_finite(v) or as_number(v) is not None for vals in values.values() for v in vals
           if not is_missing(v)):
        name, row, value = found
        raise DatasetError(f"Label column {column!r} holds {value!r} in {splits[name].where([row])}, a number that "
                           "is not finite; a label must be a finite number (or empty, to skip the row), so fix or "
                           "remove that row.")


def _warn_single_class(column: str, classes: Iterable[str]) -> None:
    """Warn when every labelled row (or word) of ``column`` has the same class: nothing to learn."""
    distinct = set(classes)
    if len(distinct) == 1:
        log.warning(f"Label column {column!r} has a single class {distinct.pop()!r} in every labelled row: a "
                      f"head cannot learn from it; check {option('label_columns')}, or pass "
                      f"{option('no_labels', True)} to cache unlabelled data.")


def _plan_token_task(column: str, present: dict[str, list], unlabelled: set[str],
                     hint: tuple[tuple[str, ...], bool] | None) -> TaskPlan:
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
        return TaskPlan(LabelTask(column, "token", tuple(names)),
                        lambda v: None if is_missing(v) else [tag_id(t) for t in v], unlabelled)
    tags = [t for name, vals in present.items() if name not in unlabelled for v in vals for t in v]
    if any(is_missing(t) for t in tags):
        raise DatasetError(f"Token label column {column!r} has an empty tag; give every word a tag.")
    if not tags:
        return TaskPlan(LabelTask(column, "token", ("O",)), lambda v: None, set(present) | unlabelled)
    names, key, index = _class_vocabulary(tags)
    _warn_single_class(column, names)
    return TaskPlan(LabelTask(column, "token", names),
                    lambda v: None if is_missing(v) else [index[key(t)] for t in v], unlabelled)
