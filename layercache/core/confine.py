"""Writing only inside a folder layercache owns: real folders and files under it, never through a link.

A cache, a run folder or a report is a folder the user named; everything layercache writes, renames
or deletes lies *below* it. Checking a path with ``resolve()`` is not enough: a link planted inside
(``validation -> /elsewhere``, ``.layercache.lock -> ~/notes.txt``) resolves happily and the write
lands outside. So every component from the owned folder down is checked with ``lstat`` (which never
follows a link) to be a real directory, and the last one to be absent or a regular file; a link, a
FIFO, a device or a loop is refused in one sentence before anything is touched. The owned folder
itself may be reached through a link the user chose (``--out /fast/disk-link``): it is resolved
once, and the checks start below it.

What this cannot stop is a link swapped in by another process *between* the check and the write; the
writes themselves help where the system allows (new files are created with ``O_EXCL`` by ``mkstemp``
and HDF5's exclusive mode, which refuse an existing link; ``rename`` replaces a link, never its
target), and a folder being written is locked against other layercache processes.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import UnsafePathError

NAME_MAX = 255
"""Longest file name, in bytes, that Linux and macOS file systems take."""


def lstat_or_none(path: str | os.PathLike) -> os.stat_result | None:
    """``os.lstat(path)``, or None when nothing (not even a dangling link) is there."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None  # a file stands where a parent folder should be; the caller's own check names it


def kind_of(st: os.stat_result) -> str:
    """What a non-regular entry is, in words: ``a symbolic link``, ``a FIFO`` ..."""
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


@dataclass(frozen=True)
class OwnedFolder:
    """A folder layercache writes into (a cache, a run, a report), and the one gate for paths below it.

    ``OwnedFolder.at(path, "cache")`` resolves ``path`` once; :meth:`folder` and :meth:`file` then hand
    out paths below it, refusing any link, FIFO or other non-regular entry on the way with
    :class:`~layercache.errors.UnsafePathError`.
    """

    root: Path
    """Absolute and resolved: the real folder (which may not exist yet)."""
    what: str = "cache"
    """How messages name it: ``cache``, ``run folder``, ``report folder``."""

    @classmethod
    def at(cls, path: str | os.PathLike, what: str = "cache") -> "OwnedFolder":
        """The owned folder at ``path`` (a link the user gave as the folder itself is followed once)."""
        try:
            root = Path(path).expanduser().resolve()
        except (RuntimeError, OSError) as err:  # a loop of links (RuntimeError before Python 3.13)
            raise UnsafePathError(f"The {what} path {path} cannot be resolved ({_why(err)}); give a real folder "
                                  "path.") from None
        return cls(root, what)

    def path(self, *parts: str) -> Path:
        """``root / parts`` with no check (for messages and for reads that check themselves)."""
        return self.root.joinpath(*parts)

    def check_root(self, create: bool = False) -> Path:
        """The root as a real folder (created with its parents when ``create``)."""
        st = lstat_or_none(self.root)
        if st is None:
            if not create:
                raise UnsafePathError(f"The {self.what} {self.root} does not exist.")
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except FileExistsError:
                pass
            st = lstat_or_none(self.root)
        if st is None or not stat.S_ISDIR(st.st_mode):
            shown = "missing" if st is None else kind_of(st)
            raise UnsafePathError(f"The {self.what} {self.root} is {shown}, not a folder; give a folder path.")
        return self.root

    def folder(self, *parts: str, create: bool = False) -> Path:
        """``root / parts`` as a real folder below the root, every component checked (created when ``create``)."""
        current = self.root
        for part in parts:
            _check_name(part, self)
            current = current / part
            st = lstat_or_none(current)
            if st is None and create:
                try:
                    os.mkdir(current)
                except FileExistsError:
                    pass  # made meanwhile: checked just below like any other
                st = lstat_or_none(current)
            if st is None:
                raise UnsafePathError(f"{current} is missing from the {self.what} {self.root}.")
            if not stat.S_ISDIR(st.st_mode):
                raise self._refusal(current, st, "a real folder")
        return current

    def file(self, *parts: str, create_parents: bool = False) -> Path:
        """``root / parts`` as a file to write: its folders real, itself absent or a regular file (no link)."""
        if not parts:
            raise ValueError("file() needs a name")
        parent = self.folder(*parts[:-1], create=create_parents)
        _check_name(parts[-1], self)
        target = parent / parts[-1]
        st = lstat_or_none(target)
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise self._refusal(target, st, "a regular file")
        return target

    def remove(self, *parts: str) -> bool:
        """Delete the file ``root / parts`` if it is there; a link is removed itself, never what it points to.

        Returns whether something was removed. A folder in its place is refused.
        """
        parent = self.folder(*parts[:-1])
        target = parent / parts[-1]
        st = lstat_or_none(target)
        if st is None:
            return False
        if stat.S_ISDIR(st.st_mode):
            raise self._refusal(target, st, "a file")
        os.unlink(target)  # unlink never follows a link: it removes the link
        return True

    def remove_folder_if_empty(self, *parts: str) -> bool:
        """Remove the real folder ``root / parts`` when nothing is left in it; returns whether it was removed.

        A folder that still holds anything stays (it is not layercache's to empty), and so does the
        root itself (``parts`` must name a folder below it).
        """
        if not parts:
            raise ValueError("remove_folder_if_empty() needs a folder below the root")
        folder = self.folder(*parts)
        try:
            os.rmdir(folder)  # fails on a folder that is not empty, and never follows a link (folder() refused one)
        except OSError as err:
            if err.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return False
            raise
        return True

    def _refusal(self, path: Path, st: os.stat_result, wanted: str) -> UnsafePathError:
        what = kind_of(st)
        noun = "folder" if "folder" in wanted else "file"
        fix = f"replace the link with a real {noun}" if what == "a symbolic link" else "move it away"
        return UnsafePathError(
            f"{path} is {what}, where layercache writes only {wanted} inside the {self.what} {self.root} (it never "
            f"writes through a link or into a special file); {fix}, or choose another folder.")


def _check_name(part: str, owner: OwnedFolder) -> None:
    if part in ("", ".", "..") or "/" in part or "\0" in part:
        raise UnsafePathError(f"{part!r} cannot name an entry inside the {owner.what} {owner.root}.")
    if len(os.fsencode(part)) > NAME_MAX:
        raise UnsafePathError(f"The name {part[:40]!r}... is longer than {NAME_MAX} bytes, which file systems refuse; "
                              "choose a shorter name.")


def open_regular(path: str | os.PathLike, flags: int = os.O_RDONLY, mode: int = 0o666, *, what: str = "file") -> int:
    """``os.open`` that never follows a final link nor blocks on a FIFO, and refuses anything but a regular file.

    Returns the descriptor; raises :class:`~layercache.errors.UnsafePathError` for a link, a FIFO, a
    device or a folder (an ``OSError`` of any other kind propagates, e.g. permissions).
    """
    extra = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | extra, mode)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnsafePathError(f"The {what} {path} is a symbolic link, which layercache does not open for writing; "
                                  "remove the link, or choose another folder.") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafePathError(f"The {what} {path} is {kind_of(st)}, not a regular file; remove it, or choose another "
                              "folder.")
    if extra & getattr(os, "O_NONBLOCK", 0):
        os.set_blocking(fd, True)
    return fd


def check_regular_file(path: str | os.PathLike, what: str = "file") -> None:
    """Refuse, before any open, a path that is not a regular file (a FIFO would block the reader forever).

    Follows links: whether a link may lead outside is the reader's own check.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UnsafePathError(f"The {what} {path} is missing.") from None
    except (RuntimeError, OSError) as err:
        raise UnsafePathError(f"The {what} {path} cannot be reached ({_why(err)}).") from None
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(f"The {what} {path} is {kind_of(st)}, not a regular file; replace it with the real "
                              "file.")


def _why(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    if isinstance(err, RuntimeError):
        return "a loop of symbolic links"
    return str(err) or type(err).__name__
