"""The cache folder: created and locked for one writer, inspected, cleaned, and its write errors worded.

Nothing here touches a file that is not the cache's own. A folder is a cache only when its
``manifest.json`` is one layercache wrote (:func:`~layercache.store.schema.foreign_manifest_problem`);
any other folder with files in it is refused, ``--overwrite`` or not. Clearing a cache removes only
what its manifest names (its split folders and side files) and, inside those split folders, only
names layercache itself writes (:func:`is_own_shard_file`); every path is checked on the way with
``lstat`` (:class:`~layercache.core.confine.OwnedFolder`), so a link is removed itself, never
followed, and a folder that still holds other files stays.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from pathlib import Path

from ..core.confine import OwnedFolder, lstat_or_none
from ..core.files import free_space_or, is_disk_full
from ..core.option_names import option
from ..errors import CacheError, CacheWriteError, ConfigError, LayercacheError
from ..store.lock import LOCK_NAME, CacheLock
from ..store.manifest import MANIFEST_NAME, Manifest, SplitInfo, load_manifest_json
from ..store.parts import PART_FILE
from ..store.schema import SHARD_FILE, SIDE_FILES, ManifestSchemaError, split_name_problem


class DamagedCache:
    """What :func:`inspect_output` returns (with --overwrite) for a layercache manifest that fails its schema."""

    def __init__(self, split_names: list[str]):
        self.split_names = split_names
        """The split folders the damaged manifest names (those that can be split folders at all)."""


_SHARD_TMP = re.compile(SHARD_FILE.pattern + r"\.tmp")


def is_own_shard_file(name: str) -> bool:
    """Whether ``name`` is a file layercache writes in a split folder: ``shard-NNNNN.h5`` or its ``.tmp``."""
    return SHARD_FILE.fullmatch(name) is not None or _SHARD_TMP.fullmatch(name) is not None


def _atomic_temp(name: str) -> re.Pattern:
    """What a killed atomic write of ``name`` leaves beside it (``core.files``: ``.<name>-<random>.tmp``)."""
    return re.compile(rf"\.{re.escape(name)}-[A-Za-z0-9_]+\.tmp")


_OWN_TEMPS = [_atomic_temp(name) for name in (MANIFEST_NAME, *SIDE_FILES.values())] + [
    re.compile(rf"\.{PART_FILE.pattern}-[A-Za-z0-9_]+\.tmp")]


@contextlib.contextmanager
def locked_output(out: Path):
    """Create ``out`` if needed and hold its writer lock; remove the folder again if this run made it and
    left nothing in it (a refusal before the first write leaves no empty folder behind)."""
    _check_out_path(out)
    owner = OwnedFolder.at(out)
    created = lstat_or_none(owner.root) is None
    try:
        owner.check_root(create=True)
    except OSError as err:
        fix = free_space_or(err, f"choose an {option('out')} folder you can write to")
        raise CacheWriteError(f"Cannot create the cache folder {out} ({os.strerror(err.errno)}); {fix}.") from None
    lock_created = lstat_or_none(owner.path(LOCK_NAME)) is None
    lock = CacheLock(out).acquire()
    try:
        yield
    finally:
        if lock_created and not created and _not_a_cache(out):
            # A refused run leaves a folder that is not layercache's as it found it. No other layercache
            # process can be writing it (each would be refused the same way), so the lock file may go.
            with contextlib.suppress(OSError):
                owner.remove(LOCK_NAME)
        lock.release()
        if created and {p.name for p in owner.root.iterdir()} <= {LOCK_NAME}:
            with contextlib.suppress(OSError):
                owner.remove(LOCK_NAME)
                os.rmdir(owner.root)


def _not_a_cache(out: Path) -> bool:
    """Whether ``out`` holds something other than a layercache cache: a foreign manifest, or files without one."""
    if os.path.lexists(out / MANIFEST_NAME):
        try:
            load_manifest_json(out)
        except CacheError:
            return True
        return False
    return any(p.name != LOCK_NAME for p in out.iterdir())


def _check_out_path(out: Path) -> None:
    """Refuse an --out that is a file, lies below a file, or cannot be written, before touching anything."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{option('out', out)} is a file; give a folder for the cache.")
    probe = out if out.is_dir() else nearest_existing(out)
    if not probe.is_dir():
        raise ConfigError(f"{option('out', out)} lies below {probe}, which is a file; give a folder for the cache.")
    if not os.access(probe, os.W_OK):
        raise CacheWriteError(f"Cannot write to {probe}; make it writable (then the same command resumes an "
                              f"existing cache) or choose another {option('out')}.")


def check_split_names(names) -> None:
    """Refuse, in one sentence, a split name that cannot be a folder of the cache (before any work)."""
    for name in names:
        problem = split_name_problem(name)
        if problem:
            shown = repr(name) if len(str(name)) <= 60 else repr(str(name)[:60]) + "..."
            example = option("split_files", {"train": "train.tsv"}, typed="train=train.tsv")
            raise ConfigError(f"Split name {shown} cannot be a folder of the cache: it {problem}; choose another "
                              f"split name, e.g. {example}.")


def inspect_output(out: Path, overwrite: bool = False):
    """The existing cache's manifest, None for an empty folder, a :class:`DamagedCache` for a layercache
    manifest that fails its schema (only with ``overwrite``); refuse anything else. Runs under the
    folder's lock.

    A ``manifest.json`` that layercache did not write (or that cannot be read, so nobody can tell)
    is refused even with ``overwrite``: layercache clears only folders it can tell are its own.
    """
    if os.path.lexists(out / MANIFEST_NAME):
        try:
            data = load_manifest_json(out)
        except CacheError as err:
            problem = str(err).split("; ")[0].rstrip(".")  # the problem half of the sentence, without its fix
            raise CacheError(f"{problem}; layercache never reads, resumes or clears a folder it cannot tell it "
                             f"wrote (not even with {option('overwrite', True)}), so choose a new or empty "
                             f"{option('out')}.") from err
        try:
            return Manifest.from_json(data)
        except (CacheError, ManifestSchemaError) as err:
            if overwrite:
                splits = data.get("splits")
                return DamagedCache([n for n in splits if split_name_problem(n) is None]
                                    if isinstance(splits, dict) else [])
            raise CacheError(f"{out} holds a cache this run cannot read ({err}); pass {option('overwrite', True)} to "
                             f"replace it, or choose another {option('out')}.") from err
    if any(p.name != LOCK_NAME for p in out.iterdir()):
        raise ConfigError(f"{option('out', out)} is not empty and is not a layercache cache; choose a new or empty "
                          "folder.")
    return None


def nearest_existing(path: Path) -> Path:
    """``path`` itself when it exists, else its nearest existing parent (absolute)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def remove_cache_files(out: Path, split_names) -> None:
    """Delete a cache's own files, nothing else: its manifest, its writers' manifest parts, side files and, in
    the split folders its manifest names, shards and temp shards.

    ``split_names`` come from the cache's manifest (a damaged one's too, :class:`DamagedCache`).
    Nothing is followed: a split folder or file that is a link is unlinked (the link, never its
    target), and a split folder is removed only when nothing else is left in it. Entries that are
    not layercache's (other names, a folder where a file should be) stay where they are.
    """
    owner = OwnedFolder.at(out)
    for name in split_names:
        st = lstat_or_none(owner.path(name))
        if st is None:
            continue
        if not stat.S_ISDIR(st.st_mode):
            if stat.S_ISLNK(st.st_mode):
                owner.remove(name)  # a link where the split folder should be: the link goes, its target stays
            continue
        folder = owner.folder(name)
        for entry in os.scandir(folder):
            if is_own_shard_file(entry.name) and not entry.is_dir(follow_symlinks=False):
                owner.remove(name, entry.name)
        owner.remove_folder_if_empty(name)
    for entry in os.scandir(owner.root):
        if entry.is_dir(follow_symlinks=False):
            continue
        if entry.name in SIDE_FILES.values() or entry.name == MANIFEST_NAME or PART_FILE.fullmatch(entry.name) or \
                any(p.fullmatch(entry.name) for p in _OWN_TEMPS):
            owner.remove(entry.name)


def clean_strays(out: Path, split: str, info: SplitInfo) -> Path:
    """Remove what a killed run left in a split's folder (temp shards, a shard committed after the last
    manifest write); returns the folder, checked to be a real folder inside the cache (created if missing).

    Only layercache's own shard names are removed (links unlinked, never followed); a listed shard
    that is missing or not a regular file is refused.
    """
    owner = OwnedFolder.at(out)
    folder = owner.folder(split, create=True)
    listed = {Path(s.file).name for s in info.shards}
    for entry in os.scandir(folder):
        if is_own_shard_file(entry.name) and entry.name not in listed and not entry.is_dir(follow_symlinks=False):
            owner.remove(split, entry.name)
    for name in sorted(listed):
        st = lstat_or_none(folder / name)
        if st is None or not stat.S_ISREG(st.st_mode):
            raise CacheError(f"Shard {folder / name} is listed in the manifest but "
                             f"{'missing' if st is None else 'not a regular file'}; re-run the same command with "
                             f"{option('repair', True)} to re-extract it.")
    return folder


@contextlib.contextmanager
def write_errors(out: Path):
    """Turn a failed system call while writing the cache (full disk, read-only folder) into one sentence.

    Only errors with an ``errno`` are translated, and a library's own error that says the disk is
    full (``safetensors`` writing the lens: ``os error 28``); anything else is a bug and keeps its
    traceback. The caller has already removed its half-written shard; committed shards stay, so the
    message says to resume.
    """
    try:
        yield
    except LayercacheError:
        raise  # already a sentence (CacheWriteError and InsufficientDiskError are OSErrors too)
    except OSError as err:
        if err.errno is None:
            raise
        raise CacheWriteError(_write_error_text(out, err)) from err
    except Exception as err:
        if not is_disk_full(err):
            raise
        raise CacheWriteError(_write_error_text(out, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))) from err


def _write_error_text(out: Path, err: OSError) -> str:
    what = f"{err.filename}" if err.filename else str(out)
    reason = os.strerror(err.errno)
    if err.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG):
        return (f"Writing {what} failed: {reason}; committed shards are kept, so free space on that disk and run "
                f"the same command again to resume (or choose another {option('out')}).")
    if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return (f"Cannot write {what}: {reason}; make the cache folder {out} writable and run the same command "
                f"again to resume, or choose another {option('out')}.")
    if err.errno == errno.ENOTDIR:
        return f"Cannot write {what}: part of that path is a file, not a folder; choose another {option('out')}."
    return (f"Writing {what} failed: {reason}; committed shards are kept, so fix the cause and run the same "
            "command again to resume.")
