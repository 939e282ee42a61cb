"""Tables that stay readable in a narrow terminal: values are never cut, headers wrap, wide tables split.

rich shrinks a table that is wider than the console by cutting cells with an ellipsis, so at 80
columns a column of layer names reads ``layer…`` in every row. :func:`fitted_tables` lays a table
out for a width instead, in this order, stopping at the first that fits:

1. the table as it is;
2. its headers wrapped at spaces, the widest first (``mean prediction depth`` over three lines);
3. prose columns (``wrap=True``: notes, reasons, texts) folded to what is left;
4. the columns split over several tables of the same rows, each repeating the key columns
   (``key=True``: the task, the state), so every value is shown whole next to its row's name.

Values of the other columns are never wrapped nor cut.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class Column:
    """One column of a :func:`fitted_tables` table."""

    header: str
    justify: str = "left"
    """``left``, ``right`` or ``center``."""
    key: bool = False
    """Names its row (the task, the state): repeated in every part when the table is split."""
    wrap: bool = False
    """Prose (a note, a reason, a text): may wrap to fit; other columns keep every value on one line."""
    min_width: int = 10
    """The narrowest a ``wrap`` column may become."""


def fitted_tables(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int, *,
                  title: str | None = None, caption: str | None = None, **options) -> list[Table]:
    """The table of ``rows`` under ``columns``, as one or more rich tables no wider than ``width`` (see the module).

    Cells may hold rich markup. ``options`` go to every :class:`rich.table.Table` (``title_justify``,
    ``box``...). A table that is split gives its title to the first part, ``(continued)`` to the
    others, and its caption to the last.
    """
    columns = list(columns)
    headers = [c.header for c in columns]
    indices = list(range(len(columns)))
    if _width(columns, headers, rows, indices, options) <= width:
        return [_table(columns, headers, rows, indices, title, caption, options)]
    # Wrap headers, the one that gains most first, until the table fits or no header can wrap further.
    order = sorted(indices, key=lambda i: _header_excess(columns[i], rows, i), reverse=True)
    for i in order:
        if _header_excess(columns[i], rows, i) <= 0:
            break
        headers[i] = _wrapped_header(columns[i], rows, i)
        if _width(columns, headers, rows, indices, options) <= width:
            return [_table(columns, headers, rows, indices, title, caption, options)]
    if _width(columns, headers, rows, indices, options, folded=True) <= width:
        return [_table(columns, headers, rows, indices, title, caption, options)]
    keys = [i for i in indices if columns[i].key]
    parts: list[list[int]] = []
    current = list(keys)
    for i in indices:
        if i in keys:
            continue
        if len(current) > len(keys) and _width(columns, headers, rows, [*current, i], options, folded=True) > width:
            parts.append(current)
            current = list(keys)
        current.append(i)
    parts.append(current)
    parts = [sorted(part) for part in parts]  # each part in the table's own column order
    out = []
    for n, part in enumerate(parts):
        part_title = title if n == 0 else ("(continued)" if title else None)
        plain = [c.header for c in columns]  # a part may fit with the headers on one line
        shown = plain if _width(columns, plain, rows, part, options, folded=True) <= width else headers
        out.append(_table(columns, shown, rows, part, part_title, caption if n == len(parts) - 1 else None,
                          options))
    return out


def print_fitted(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]], *,
                 title: str | None = None, caption: str | None = None, **options) -> None:
    """Print :func:`fitted_tables` at ``console``'s width; the caption of a split table follows it as plain lines."""
    tables = fitted_tables(columns, rows, console.width, title=title, caption=caption, **options)
    if len(tables) > 1 and caption:
        tables[-1].caption = None
    for table in tables:
        console.print(table)
    if len(tables) > 1 and caption:
        console.print(caption, style="table.caption", highlight=False)


def _cell_width(cell: str) -> int:
    return max((Text.from_markup(line).cell_len for line in str(cell).split("\n")), default=0)


def _values_width(rows: Sequence[Sequence[str]], i: int) -> int:
    return max((_cell_width(row[i]) for row in rows), default=0)


def _header_excess(column: Column, rows: Sequence[Sequence[str]], i: int) -> int:
    """How many cells wrapping this column's header saves."""
    return _cell_width(column.header) - max(_values_width(rows, i), _longest_word(column.header))


def _longest_word(text: str) -> int:
    return max((Text(w).cell_len for w in text.split()), default=0)


def _wrapped_header(column: Column, rows: Sequence[Sequence[str]], i: int) -> str:
    room = max(_values_width(rows, i), _longest_word(column.header))
    return "\n".join(textwrap.wrap(column.header, room, break_long_words=False, break_on_hyphens=False))


def _table(columns, headers, rows, indices, title, caption, options, folded: bool = False) -> Table:
    table = Table(title=title, caption=caption, **options)
    for i in indices:
        c = columns[i]
        narrowest = c.wrap and folded
        table.add_column(Text(headers[i]) if "\n" in headers[i] else headers[i], justify=c.justify,
                         no_wrap=not c.wrap, overflow="fold" if c.wrap else "ellipsis",
                         min_width=min(c.min_width, _values_width(rows, i)) if narrowest else None,
                         max_width=c.min_width if narrowest else None)
    for row in rows:
        table.add_row(*(row[i] for i in indices))
    return table


def _width(columns, headers, rows, indices, options, folded: bool = False) -> int:
    """The width ``indices`` of the table need with ``headers`` (``folded``: prose columns at their narrowest)."""
    table = _table(columns, headers, rows, indices, None, None, options, folded=folded)
    console = Console(width=10_000, file=_Null(), color_system=None)
    return Measurement.get(console, console.options, table).maximum


class _Null:
    """A file that keeps nothing (the measuring console never prints)."""

    def write(self, text: str) -> int:
        """Discard ``text``."""
        return len(text)

    def flush(self) -> None:
        """Nothing to flush."""
