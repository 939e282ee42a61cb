"""The cache folder: created and locked for one writer, inspected, cleaned, and its write errors worded.

Nothing here touches a file that is not the cache's own: removal works from the folder's shard
names, never follows a link, and a folder this run created is removed again if it stays empty.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path

from ..errors import CacheError, CacheWriteError, ConfigError, LayercacheError
from ..store.lock import LOCK_NAME, CacheLock
from ..store.manifest import MANIFEST_NAME, SplitInfo, read_manifest
from ..store.schema import SIDE_FILES

DAMAGED = object()
"""What :func:`inspect_output` returns for a folder whose manifest cannot be read (only with --overwrite)."""


@contextlib.contextmanager
def locked_output(out: Path):
    """Create ``out`` if needed and hold its writer lock; remove the folder again if this run made it and
    left nothing in it (a refusal before the first write leaves no empty folder behind)."""
    _check_out_path(out)
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CacheWriteError(f"Cannot create the cache folder {out} ({os.strerror(err.errno)}); "
                              "choose an --out folder you can write to.") from None
    lock = CacheLock(out).acquire()
    try:
        yield
    finally:
        lock.release()
        if created and {p.name for p in out.iterdir()} <= {LOCK_NAME}:
            shutil.rmtree(out, ignore_errors=True)


def _check_out_path(out: Path) -> None:
    """Refuse an --out that is a file, lies below a file, or cannot be written, before touching anything."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a folder for the cache.")
    probe = out if out.is_dir() else nearest_existing(out)
    if not probe.is_dir():
        raise ConfigError(f"--out {out} lies below {probe}, which is a file; give a folder for the cache.")
    if not os.access(probe, os.W_OK):
        raise CacheWriteError(f"Cannot write to {probe}; make it writable (then the same command resumes an "
                              "existing cache) or choose another --out.")


def inspect_output(out: Path, overwrite: bool = False):
    """The existing cache's manifest, None for an empty folder, ``DAMAGED`` for an unreadable manifest
    that ``overwrite`` may replace; refuse anything else. Runs under the folder's lock."""
    if (out / MANIFEST_NAME).exists():
        try:
            return read_manifest(out)
        except CacheError as err:
            if overwrite:
                return DAMAGED
            raise CacheError(f"{out} holds a cache this run cannot read ({err}); pass --overwrite to replace "
                             "it, or choose another --out.") from err
    if any(p.name != LOCK_NAME for p in out.iterdir()):
        raise ConfigError(f"--out {out} is not empty and is not a layercache cache; choose a new or empty folder.")
    return None


def nearest_existing(path: Path) -> Path:
    """``path`` itself when it exists, else its nearest existing parent (absolute)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def remove_cache_files(out: Path) -> None:
    """Delete a cache's own files (manifest, side files, shards and temp shards in its split folders), nothing else.

    Works from the folder, not the manifest, so a damaged manifest can be replaced too; a split
    folder that is a link is unlinked, never followed, so nothing outside the cache is touched.
    """
    for folder in out.iterdir():
        if folder.is_symlink() or not folder.is_dir():
            continue
        for f in folder.iterdir():
            if f.name.startswith("shard-") and (f.is_symlink() or f.is_file()):
                f.unlink()
        if not any(folder.iterdir()):
            folder.rmdir()
    for name in SIDE_FILES.values():  # vocab.json, lens.safetensors, and what a killed atomic write left of them
        for f in [out / name, *out.glob(f".{name}-*.tmp")]:
            if f.is_symlink() or f.is_file():
                f.unlink()
    (out / MANIFEST_NAME).unlink(missing_ok=True)


def clean_strays(folder: Path, info: SplitInfo) -> None:
    """Remove files a killed run left behind (temp shards, a shard committed after the last manifest write)."""
    listed = {Path(s.file).name for s in info.shards}
    for f in folder.iterdir():
        if f.name.startswith("shard-") and f.name not in listed:
            f.unlink()
    for name in listed:
        if not (folder / name).is_file():
            raise CacheError(f"Shard {folder / name} is listed in the manifest but missing; "
                             "re-run the same command with --repair to re-extract it.")


@contextlib.contextmanager
def write_errors(out: Path):
    """Turn a failed system call while writing the cache (full disk, read-only folder) into one sentence.

    Only errors with an ``errno`` are translated; anything else is a bug and keeps its traceback.
    The caller has already removed its half-written shard; committed shards stay, so the message
    says to resume.
    """
    try:
        yield
    except LayercacheError:
        raise  # already a sentence (CacheWriteError and InsufficientDiskError are OSErrors too)
    except OSError as err:
        if err.errno is None:
            raise
        raise CacheWriteError(_write_error_text(out, err)) from err


def _write_error_text(out: Path, err: OSError) -> str:
    what = f"{err.filename}" if err.filename else str(out)
    reason = os.strerror(err.errno)
    if err.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG):
        return (f"Writing {what} failed: {reason}; committed shards are kept, so free space on that disk and run "
                "the same command again to resume (or choose another --out).")
    if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return (f"Cannot write {what}: {reason}; make the cache folder {out} writable and run the same command "
                "again to resume, or choose another --out.")
    if err.errno == errno.ENOTDIR:
        return f"Cannot write {what}: part of that path is a file, not a folder; choose another --out."
    return (f"Writing {what} failed: {reason}; committed shards are kept, so fix the cause and run the same "
            "command again to resume.")
