"""What a data-file format declares: its extensions, its reader, and how lists and messages name it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..splits import FileTable

FILE_KINDS = ("table", "tokens")
"""``table``: rows of named columns; ``tokens``: one token and its tags per line (CoNLL)."""


@dataclass(frozen=True)
class FileSource:
    """One format of local data file: its extensions and the reader that turns a file into a table."""

    name: str
    """How short lists name it: ``csv``, ``CoNLL``."""
    extensions: tuple[str, ...]
    """Lower-case, with the dot; the first is the one to suggest."""
    read: Callable[[str, Path], FileTable]
    """``read(split_name, path)``: the file as one split."""
    kind: str = "table"
    """One of :data:`FILE_KINDS`."""
    listed: str = "{names}"
    """How the list of supported files names it: ``{names}`` are the extensions without their dot,
    comma-separated; ``{suffixes}`` the extensions with it, ``/``-separated."""
    sniffed: tuple[str, ...] = ()
    """Extensions other formats use too (``.txt``): a non-empty file with one must pass ``sniff``."""
    sniff: Callable[[Path], bool] | None = None
    """Whether the start of a file looks like this format."""
    looks: str = ""
    """What ``sniff`` wants, for the refusal: "a CoNLL token file (one token ... per line)"."""
    supported: bool = True
    """False for a known format that is refused with a hint (its ``read`` raises)."""

    def describe(self) -> str:
        """How the list of supported files names this format."""
        return self.listed.format(names=", ".join(e.lstrip(".") for e in self.extensions),
                                  suffixes="/".join(self.extensions))
