"""What is checked of a cache's side files (``manifest.side_files``: the vocabulary, the lens, the projection).

Each side file the manifest lists must be a regular file inside the cache whose bytes have the
checksum the manifest recorded. A link is a problem even where it points at the right bytes:
extraction writes only real files in the cache, and ``--repair`` replaces the link. Asked for
explicitly (``layercache info --check``, a resume, ``--repair``): :func:`side_file_problems`.

Each reader checks its own file when it reads it (:mod:`.vocabulary`, :mod:`.lens`, :mod:`.projection`),
through one :class:`SideFileCheck`: the file's place inside the cache, its checksum against the manifest's,
its bytes loaded as its format, and every refusal in one sentence of one shape, ``<path> <what is wrong>;
<the fix>.``, the fix being the reader's own (write the file again, or re-extract for the projection).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ..core.checksum import data_checksum, file_checksum, file_problem
from ..core.confine import kind_of
from ..errors import CacheError
from .manifest import Manifest, SideFile, confined_path

T = TypeVar("T")

LOAD_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError, TypeError, RuntimeError)
"""What loading a side file's bytes as its format raises when they are not that format (a reader may name others)."""


def side_file_problem(cache_dir: str | os.PathLike[str], entry: SideFile) -> str | None:
    """Why the side file ``entry`` names is not the one extraction wrote (None when it is): ``missing``,
    ``is a symbolic link, not a regular file``, ``cannot be read (...)``, ``changed since extraction``."""
    return file_problem(Path(cache_dir) / entry.file, entry.checksum, follow_links=False)


def side_file_problems(cache_dir: str | os.PathLike[str], manifest: Manifest) -> dict[str, str]:
    """Every listed side file that is not as extraction wrote it: file name -> what is wrong with it."""
    found = {entry.file: side_file_problem(cache_dir, entry) for entry in manifest.side_files.values()}
    return {file: problem for file, problem in found.items() if problem is not None}


@dataclass(frozen=True)
class SideFileCheck:
    """How one reader loads its side file and refuses it: ``path`` inside the cache, ``what`` the file is in a
    refusal (``a lens file``) and the ``fix`` every refusal of it ends with.

    Build with :meth:`at`, which refuses a path that leads outside the cache before anything reads it.
    """

    path: Path
    what: str
    fix: str

    @classmethod
    def at(cls, cache_dir: str | os.PathLike[str], name: str, what: str, fix: str) -> SideFileCheck:
        """The check of side file ``name`` of the cache at ``cache_dir`` (:func:`~.manifest.confined_path`)."""
        return cls(confined_path(cache_dir, name, "Side file"), what, fix)

    def refusal(self, problem: str) -> CacheError:
        """The :class:`CacheError` ``<path> <problem>; <fix>.``"""
        return CacheError(f"{self.path} {problem}; {self.fix}.")

    def require_recorded(self, entry: SideFile | None) -> None:
        """Refuse, in one sentence, a file the manifest does not list (``entry`` None), that is not a regular file
        (a link is followed) or whose checksum is not the recorded one."""
        if entry is None or not self.path.is_file() or file_checksum(self.path) != entry.checksum:
            raise self.refusal("is missing or has changed since extraction (its checksum differs from the "
                               "manifest's)")

    def recorded_bytes(self, entry: SideFile) -> bytes:
        """The file's bytes, read once (the bytes checked are the bytes used), after refusing what is not a regular
        file (reading a FIFO would block forever) or cannot be read, and bytes that are not the recorded ones."""
        try:
            st = os.stat(self.path)
            if not stat.S_ISREG(st.st_mode):
                raise self.refusal(f"is {kind_of(st)}, not a regular file")
            data = self.path.read_bytes()
        except OSError as err:
            raise self.refusal(f"cannot be read ({err.strerror or err})") from None
        if data_checksum(data) != entry.checksum:
            raise self.refusal("has changed since extraction (its checksum differs from the manifest's)")
        return data

    def load(self, read: Callable[[], T], errors: tuple[type[BaseException], ...] = LOAD_ERRORS) -> T:
        """``read()``, the file's contents as its format; ``errors`` it raises become the refusal that the file
        is not one this layercache can read, naming the first 120 characters of the error."""
        try:
            return read()
        except errors as err:
            raise self.refusal(f"is not {self.what} this layercache can read ({str(err)[:120]})") from None
