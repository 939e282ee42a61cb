"""Writing a file so that readers see the old content or the new, never half of it.

One rule for every file layercache writes (manifests, side files, run weights, JSON, figures): it
lands with the permissions of any new file, ``0666`` less the process's umask, whoever wrote its
bytes. ``mkstemp`` alone would leave ``0600``, and a library that writes its own temporary file and
renames it (``safetensors``' ``save_file``) leaves whatever it chose, so the mode is set on what is
about to land, just before the rename; a teammate then reads a cache or a run like its other files.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from .confine import open_regular
from .option_names import option


def current_umask() -> int:
    """This process's umask, read without changing it where the system says (Linux), else set and restored."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """``0o666`` less the umask: the mode ``open()`` gives a new file, and the mode every written file gets."""
    return 0o666 & ~current_umask()


NO_SPACE = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG)


def is_disk_full(err: BaseException) -> bool:
    """Whether ``err`` says the disk (or the user's quota) is full: an ``OSError`` with its number, or a library's
    own error that carries the text (``safetensors`` reports a full disk as ``os error 28``)."""
    text = str(err)
    return getattr(err, "errno", None) in NO_SPACE or "No space left" in text or "os error 28" in text


def free_space_or(err: BaseException, fix: str | None = None) -> str:
    """What to do about a failed write: ``fix`` (default: choose another ``out``), led by ``free space on that
    disk or`` when the disk is full."""
    fix = fix or f"choose another {option('out')}"
    return f"free space on that disk or {fix}" if is_disk_full(err) else fix


def why_unwritable(err: BaseException) -> str:
    """Why a write failed, in the words every refusal of an unwritable path uses (``the disk is full`` ...).

    ``err`` is an ``OSError`` or a library's own error that carries its text (:func:`is_disk_full`).
    """
    code = getattr(err, "errno", None)
    text = str(err)
    if is_disk_full(err):
        return "the disk is full"
    if code in (errno.ENOTDIR, errno.EEXIST):
        return "a file stands where a folder of its path should be"
    if code == errno.EROFS:
        return "the file system is read-only"
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if isinstance(err, OSError) and err.strerror:
        return err.strerror[:1].lower() + err.strerror[1:]
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(err).__name__)
    return first.rstrip(".")[:200]


def write_text_atomic(path: str | os.PathLike, text: str, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``text`` in one step: a temporary file beside it, synced, then renamed.

    The file gets the permissions of any new file (:func:`new_file_mode`), so a cache or a run
    shared by a team reads like its other files. ``fsync=False`` skips the flush to disk where a
    lost write only costs a convenience (the "latest cache" pointer). The temporary file is removed
    on any failure, and the error propagates. The rename replaces a link or a special file standing
    at ``path`` (never what a link points to).
    """
    write_texts_atomic({Path(path): text}, fsync=fsync)


def write_file_atomic(path: str | os.PathLike, write: Callable[[Path], None],
                      after: Callable[[Path], object] | None = None) -> object:
    """Replace ``path`` with what ``write(tmp)`` puts into a temporary file beside it, synced, then renamed.

    For files some library writes itself (``safetensors``' ``save_file``, a matplotlib figure).
    Whatever ``write`` did (a library may replace ``tmp`` by its own file, with its own mode), the
    file that lands must be a regular file and gets the permissions of any new file
    (:func:`new_file_mode`). Without ``after`` it is synced before the rename; ``after(tmp)`` takes
    the place of that sync, so it must sync the file itself
    (:func:`~layercache.core.checksum.fsync_and_checksum` syncs and checksums exactly the bytes
    that land), and its result is returned. The temporary file is removed on any failure.
    """
    target = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}-", suffix=".tmp", dir=target.parent)
    tmp = Path(name)
    try:
        os.close(fd)
        write(tmp)
        fd = open_regular(tmp, os.O_RDONLY, what="file just written")
        try:
            os.fchmod(fd, new_file_mode())
            if after is None:
                os.fsync(fd)
        finally:
            os.close(fd)
        result = after(tmp) if after is not None else None
        os.replace(tmp, target)
        return result
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_texts_atomic(texts: Mapping[Path, str], *, fsync: bool = True) -> None:
    """Replace several files together: each text is written to a temporary file beside its path (synced unless
    ``fsync=False``), and only once every one is written are they renamed into place.

    For files that belong together (a report's ``report.json`` and ``report.html``): a failure while
    writing (a full disk) removes the temporary files and leaves every old file as it was, never a new
    one beside an old one. Each file gets the mode of any new file (:func:`new_file_mode`).
    """
    staged: dict[Path, Path] = {}
    try:
        for path, text in texts.items():
            target = Path(path)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}-", suffix=".tmp", dir=target.parent)
            staged[target] = Path(tmp)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                os.fchmod(handle.fileno(), new_file_mode())
                handle.write(text)
                if fsync:
                    handle.flush()
                    os.fsync(handle.fileno())
        for target, tmp in staged.items():
            os.replace(tmp, target)
    except BaseException:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)
        raise
