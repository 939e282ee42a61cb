"""Pieces of the sentences that data sources say to the user: row lists and short reasons."""

from __future__ import annotations


def numbered(what: str, numbers: list[int], shown: int = 5) -> str:
    """``line 7``, ``lines 3 and 7``, ``lines 3, 7, 9, 12, 15 and 4 more``."""
    if len(numbers) == 1:
        return f"{what} {numbers[0]}"
    if len(numbers) <= shown:
        return f"{what}s {', '.join(map(str, numbers[:-1]))} and {numbers[-1]}"
    return f"{what}s {', '.join(map(str, numbers[:shown]))} and {len(numbers) - shown} more"


def short_reason(exc: BaseException) -> str:
    """The first line of an exception's text (at most 300 characters, no final period), for a message."""
    text = str(exc).strip()
    line = text.splitlines()[0].strip() if text else type(exc).__name__
    line = line.rstrip(".")
    return line if len(line) <= 300 else line[:297] + "..."
