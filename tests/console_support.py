"""Checking what a command prints at 80 columns: a recording console of that width, and what readable means."""

from __future__ import annotations

import io

from rich.console import Console


def narrow(width: int = 80) -> Console:
    """A console ``width`` columns wide, without colour, that records what it prints (``export_text()``)."""
    return Console(width=width, record=True, color_system=None, file=io.StringIO())


BOX = set("│┃━─┏┓┗┛┡┩└┘")


def assert_readable(text: str, width: int = 80) -> None:
    """Nothing cut with an ellipsis, no table line wider than ``width``.

    (A sentence printed with ``soft_wrap`` is one long line the terminal wraps; a table must fit.)
    """
    assert "…" not in text, text
    assert all(len(line) <= width for line in text.splitlines() if BOX & set(line)), text
