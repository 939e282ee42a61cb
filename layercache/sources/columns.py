"""Which columns are the input and which the labels, when the user does not say.

The rules, in order (names match case-insensitively):

- Labels: the format's own label columns (CoNLL-2003: ``pos``, ``chunk`` and ``ner``; other
  CoNLL: the last); else the first of ``LABEL_COLUMN_CANDIDATES``; else (hub) the first
  ClassLabel column; else, for a headerless csv/tsv, the column with the fewest distinct values.
- Text: the first present pair of ``PAIR_COLUMN_CANDIDATES``; else, when a label column holds
  per-word lists, a word-list column (``tokens``/``words``); else the first of
  ``TEXT_COLUMN_CANDIDATES``; else a word-list column; else, for a headerless csv/tsv, the column
  with the longest mean length among those holding free text.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from layercache.errors import DatasetError

from ..core.option_names import option
from .splits import LoadedSource, MemorySplit, Split
from .values import as_number, is_missing

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

KNOWN_COLUMN_NAMES = frozenset(
    name.lower() for name in (*TEXT_COLUMN_CANDIDATES, *WORD_COLUMN_CANDIDATES, *LABEL_COLUMN_CANDIDATES,
                              *[n for pair in PAIR_COLUMN_CANDIDATES for n in pair]))
"""Every candidate name, lower-case: one of them in a csv's first row makes that row a header."""
SAMPLE_ROWS = 1000
"""Rows read to judge what a column holds."""


def find_column(columns: Iterable[str], wanted: str) -> str | None:
    """The column named ``wanted``, matched exactly first, then case-insensitively."""
    columns = list(columns)
    if wanted in columns:
        return wanted
    for column in columns:
        if column.lower() == wanted.lower():
            return column
    return None


def detect_label_columns(loaded: LoadedSource, columns: list[str], chosen: list[Split],
                         text_columns: list[str] | None) -> list[str]:
    """The label column(s) to use when none were named; ``[]`` when none is found."""
    if loaded.default_labels is not None:
        return list(loaded.default_labels)
    taken = set(text_columns or [])
    for candidate in LABEL_COLUMN_CANDIDATES:
        found = find_column(columns, candidate)
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


def choose_text_columns(loaded: LoadedSource, columns: list[str], chosen: list[Split],
                        text_columns: list[str] | None, labels: list[str],
                        per_word_labels: bool) -> tuple[list[str], str]:
    """The input column(s) and the mode: ``"texts"``, ``"pairs"`` or ``"words"``."""
    if text_columns:
        if len(text_columns) == 2:
            return list(text_columns), "pairs"
        column = text_columns[0]
        return [column], "words" if holds_lists(chosen, column) else "texts"
    available = [c for c in columns if c not in labels]
    for first, second in PAIR_COLUMN_CANDIDATES:
        a, b = find_column(available, first), find_column(available, second)
        if a and b and not per_word_labels:
            return [a, b], "pairs"
    words = [w for w in (loaded.default_words, *WORD_COLUMN_CANDIDATES) if w]
    if per_word_labels:
        for candidate in words:
            found = find_column(available, candidate)
            if found and holds_lists(chosen, found):
                return [found], "words"
        raise DatasetError(f"Label column(s) {', '.join(labels)} hold a list of tags per example, which needs a "
                           f"column of word lists (tokens/words), and none is among {', '.join(columns)}; pass "
                           f"{option('text_columns', typed='NAME')} for the word lists, or "
                           f"{option('label_columns', typed='NAME')} for a single label.")
    for candidate in TEXT_COLUMN_CANDIDATES:
        found = find_column(available, candidate)
        if found:
            return [found], "words" if holds_lists(chosen, found) else "texts"
    for candidate in words:
        found = find_column(available, candidate)
        if found and holds_lists(chosen, found):
            return [found], "words"
    if loaded.headerless:
        found = _detect_text_by_content(chosen[0], available)
        if found:
            return [found], "texts"
    raise DatasetError(f"No text column found in {loaded.name!r} (columns: {', '.join(columns)}); pass "
                       f"{option('text_columns', typed='NAME')} (or two names for a sentence pair).")


def name_headerless_columns(splits: Mapping[str, Split], labels: list[str], texts: list[str],
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
        if isinstance(split, MemorySplit):
            split.rename(names)
    return [names[c] for c in labels], [names[c] for c in texts], [names.get(c, c) for c in columns]


def holds_lists(splits: Iterable[Split], column: str) -> bool:
    """Whether ``column`` holds lists (words, or tags per word): its first present value decides."""
    for split in splits:
        if column not in split.column_names:
            continue
        for value in split.column(column, SAMPLE_ROWS):
            if isinstance(value, (list, tuple)):
                return True
            if not is_missing(value):
                return False
    return False


def _column_profile(split: Split, column: str) -> dict[str, Any]:
    values = [v for v in split.column(column, SAMPLE_ROWS) if not is_missing(v)]
    strings = [v if isinstance(v, str) else str(v) for v in values if not isinstance(v, (list, tuple, dict))]
    numeric = bool(strings) and all(as_number(s) is not None for s in strings)
    return {
        "n": len(strings),
        "numeric": numeric,
        "mean_length": sum(map(len, strings)) / len(strings) if strings else 0.0,
        "spaced": sum(" " in s.strip() for s in strings) / len(strings) if strings else 0.0,
        "distinct": len(set(s.strip() for s in strings)),
    }


def _detect_text_by_content(split: Split, columns: list[str]) -> str | None:
    """Headerless tables: the longest free-text column (mostly containing spaces), else the longest non-numeric one."""
    profiles = {c: _column_profile(split, c) for c in columns if c in split.column_names}
    candidates = [c for c, p in profiles.items() if p["n"] and not p["numeric"]]
    spaced = [c for c in candidates if profiles[c]["spaced"] >= 0.5]
    pool = spaced or candidates
    if not pool:
        return None
    return max(pool, key=lambda c: profiles[c]["mean_length"])


def _detect_label_by_content(split: Split, columns: list[str], text: list[str] | str | None) -> str | None:
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

