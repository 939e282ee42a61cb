"""One writer per cache folder: an advisory file lock that dies with its process.

Two extractions into one folder would destroy each other: with the same configuration the second
deletes the first's half-written shard as a stray, with different ``--layers`` both crash and the
cache is stuck. :class:`CacheLock` takes an exclusive ``flock`` on ``<cache>/.layercache.lock``
before extraction looks at the folder. The kernel releases the lock when the process exits, however
it exits (SIGKILL included), so a killed run never leaves a stale lock behind: the file may stay,
the lock does not. The holder writes its pid and command line into the file so the refusal can
name it.

The file is never deleted while the cache exists: unlinking a lock file lets a waiting process
lock the old inode while a newcomer locks a new one, and both would write.

The lock file is the first thing written into a folder, so it is opened the way every write inside
a cache is (:mod:`layercache.core.confine`): a link planted in its place (``.layercache.lock ->
~/notes.txt``), dangling or not, is refused with ``O_NOFOLLOW`` rather than written through (or
created outside), and a FIFO or device is refused rather than opened.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

from ..core.confine import OwnedFolder, open_regular
from ..core.files import free_space_or, why_unwritable
from ..core.option_names import option
from ..errors import CacheLockedError, CacheWriteError

LOCK_NAME = ".layercache.lock"

try:  # POSIX; elsewhere (Windows) there is no flock and the lock is a no-op
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None


class CacheLock:
    """``with CacheLock(folder):`` holds the folder's writer lock, or raises :class:`CacheLockedError`.

    ``what`` names the folder in refusals (``cache``, ``run folder``). A lock file that is a link, a
    FIFO or anything but a regular file is refused with :class:`~layercache.errors.UnsafePathError`.
    """

    def __init__(self, folder: str | os.PathLike, what: str = "cache") -> None:
        self.owner = OwnedFolder.at(folder, what)
        self.path = Path(folder) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> "CacheLock":
        """Take the lock without waiting and record this process in the file; returns ``self``."""
        try:
            path = self.owner.file(LOCK_NAME)  # lstat: a link or a FIFO in its place is refused, not followed
            fd = open_regular(path, os.O_RDWR | os.O_CREAT, 0o666, what="lock file")  # O_NOFOLLOW, no FIFO wait
        except OSError as err:
            raise _unwritable(self.path, "create", err) from None
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                holder = _read_holder(fd)
                os.close(fd)
                if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise CacheWriteError(f"Cannot lock {self.path} ({os.strerror(err.errno)}); "
                                          f"choose an {option('out')} folder on a local disk.") from None
                raise CacheLockedError(
                    f"{self.path.parent} is being written by another layercache process ({holder}); wait for it "
                    f"to finish or stop it, or choose another {option('out')}.") from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n{' '.join(sys.argv)[:500]}\n".encode(errors="replace"))
        except OSError as err:  # a full disk: give the lock up at once, never hold it past the refusal
            os.close(fd)
            raise _unwritable(self.path, "write", err) from None
        self._fd = fd
        return self

    def release(self) -> None:
        """Give the lock up (closes the file); does nothing when not held."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> "CacheLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _unwritable(path: Path, doing: str, err: OSError) -> CacheWriteError:
    """The refusal of a lock file that cannot be made or written, saying why and what to do."""
    fix = free_space_or(err, f"choose an {option('out')} folder you can write to")
    return CacheWriteError(f"Cannot {doing} the lock file {path} ({why_unwritable(err)}); {fix}.")


def _read_holder(fd: int) -> str:
    """``pid 1234: layercache extract ...`` from the lock file, as its holder wrote it."""
    try:
        text = os.pread(fd, 600, 0).decode(errors="replace")
    except OSError:
        return "pid unknown"
    pid, _, command = text.partition("\n")
    command = " ".join(command.split())
    if not pid.strip().isdigit():
        return "pid unknown"
    return f"pid {pid.strip()}" + (f": {command}" if command else "")
