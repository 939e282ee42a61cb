"""Writing a file so that readers see the old content or the new, never half of it."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def _new_file_mode() -> int:
    """``0o666`` less this process's umask: the mode ``open()`` gives a new file."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


NEW_FILE_MODE = _new_file_mode()
"""What a plain ``open()`` would give a new file; ``mkstemp`` alone would leave it ``0600``."""


def write_text_atomic(path: str | os.PathLike, text: str, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``text`` in one step: a temporary file beside it, synced, then renamed.

    The file gets the permissions of any new file (``0666`` less the umask), so a cache or a run
    shared by a team reads like its other files. ``fsync=False`` skips the flush to disk where a
    lost write only costs a convenience (the "latest cache" pointer). The temporary file is removed
    on any failure, and the error propagates.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}-", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, NEW_FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_file_atomic(path: str | os.PathLike, write: Callable[[Path], None],
                      after: Callable[[Path], object] | None = None) -> object:
    """Replace ``path`` with what ``write(tmp)`` puts into a temporary file beside it, synced, then renamed.

    For files some library writes itself (``safetensors``' ``save_file``). Without ``after`` the
    file is synced before the rename; ``after(tmp)`` takes the place of that sync, so it must sync the
    file itself (:func:`~layercache.core.checksum.fsync_and_checksum` syncs and checksums exactly the
    bytes that land), and its result is returned. The file gets the permissions of any new file, and
    the temporary file is removed on any failure.
    """
    target = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}-", suffix=".tmp", dir=target.parent)
    tmp = Path(name)
    try:
        os.fchmod(fd, NEW_FILE_MODE)
        os.close(fd)
        write(tmp)
        if after is not None:
            result = after(tmp)
        else:
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
            result = None
        os.replace(tmp, target)
        return result
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
