"""A run (or sweep) folder as one unit: claimed, locked, written aside, then committed whole or not at all.

``train-head`` and ``sweep`` write a folder the user names (``--out``) or one beside the cache
(``<cache>.runs/<mixer>-NNN``). Three things can go wrong there, and this module is where each is
handled:

- **Two writers.** Two runs into one ``--out`` would both report success and one run would be
  lost. :meth:`RunFolder.claim` takes the folder's writer lock, the same advisory lock a cache has
  (:class:`~layercache.store.lock.CacheLock`, ``.layercache.lock``, released by the kernel however
  the process ends), before it looks inside; a second writer is refused, naming the first. A
  default name is claimed by creating the folder (``mkdir`` fails when it exists, so two processes
  never get the same ``NNN``).
- **Half a run.** Everything is written into a hidden staging folder inside the run folder
  (``.layercache-partial-<random>``) and moved into place by :meth:`RunFolder.commit` only once it
  is complete, ``config.json`` (or a sweep's ``sweep.json``) last: that is the file that makes a
  folder a run. A run that fails (a full disk) or is interrupted removes its staging folder, and a
  folder it created itself, so the same command can run again; what a killed process left staged
  is removed by the next writer, under the lock (only what layercache writes there: a file or folder
  someone else put into a staging folder stays, and so does the staging folder holding it).
- **Links and foreign files.** Every path below the folder goes through
  :class:`~layercache.core.confine.OwnedFolder` (a link, a FIFO or a device where layercache would
  write is refused). A folder that is not empty is refused unless ``overwrite``; then only
  layercache's own entries (:data:`OWN_FILES`, and :data:`OWN_RUNS` holding only those) are
  replaced, at commit, and anything else in the folder is left as it was.

The lock file is removed again by the process that created it (while it still holds the lock);
a folder that holds only a lock file, or a stale staging folder, counts as empty.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...core.confine import OwnedFolder, kind_of, lstat_or_none, open_regular
from ...core.files import free_space_or, why_unwritable
from ...core.option_names import option
from ...errors import CacheLockedError, ConfigError, LayercacheError, RunInterrupted, UnsafePathError
from ...store.lock import LOCK_NAME, CacheLock

log = logging.getLogger("layercache")

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "weights.safetensors"
SWEEP_FILE = "sweep.json"
BEST_RUN = "best"
ENSEMBLE_RUN = "ensemble"
RUN_FILES = (WEIGHTS_FILE, "metrics.json", "layer_weights.json", "layer_weights.png", CONFIG_FILE)
"""Every file of a run folder, in the order a commit moves them (the config, which makes a folder a run, last)."""
OWN_FILES = frozenset((*RUN_FILES, SWEEP_FILE))
"""Files layercache writes into a run or sweep folder: the only files ``overwrite`` replaces."""
OWN_RUNS = (BEST_RUN, ENSEMBLE_RUN)
"""Run folders a sweep writes inside its folder: replaced by ``overwrite`` when they hold only :data:`OWN_FILES`."""
LAST = (CONFIG_FILE, SWEEP_FILE)
"""What a commit moves last: the file that makes a folder a run, or a sweep."""
STAGING_PREFIX = ".layercache-partial-"
IGNORED = (LOCK_NAME,)
"""Entries that do not make a folder occupied (with any name starting with :data:`STAGING_PREFIX`)."""


@dataclass(frozen=True)
class StagedRun:
    """A run folder being written: its files go into ``folder`` (fresh, layercache's own), which becomes ``final``."""

    folder: Path
    final: Path

    def file(self, name: str) -> Path:
        """The path to write the file ``name`` at (refused when a link or a special file stands there)."""
        return OwnedFolder(self.folder, "run folder").file(name)


class RunFolder:
    """A folder this process writes a run or a sweep into; use :meth:`claim` or :meth:`claim_new`, then ``with``.

    Inside the ``with`` block, :meth:`run` hands out staged run folders and :meth:`file` staged
    files; :meth:`commit` moves them into place. Leaving the block without a commit (an error, Ctrl-C)
    removes what was staged and a folder the claim created; Ctrl-C becomes
    :class:`~layercache.errors.RunInterrupted`, whose message says so.
    """

    def __init__(self, owner: OwnedFolder, created: bool) -> None:
        self.owner = owner
        self.created = created
        """Whether the claim made the folder (then a run that does not commit removes it)."""
        self._lock = CacheLock(owner.root)
        self._lock_created = False
        self._staging: Path | None = None
        self.committed = False
        self.resume_hint: Callable[[], str | None] | None = None
        """What running the same command again resumes after Ctrl-C (training checkpoints kept), as the end of a
        sentence, or None: set by the caller that keeps them; without it the message says the run starts afresh."""

    @property
    def path(self) -> Path:
        """The folder (absolute, resolved)."""
        return self.owner.root

    @property
    def what(self) -> str:
        """How messages name it: ``run folder`` or ``sweep folder``."""
        return self.owner.what

    # --- claiming -----------------------------------------------------------------------------
    @classmethod
    def claim(cls, path: str | os.PathLike, *, overwrite: bool = False, what: str = "run folder") -> "RunFolder":
        """Lock the folder ``path`` (created when missing), refusing one that is occupied unless ``overwrite``."""
        owner = OwnedFolder.at(path, what)
        _refuse_occupied(owner, overwrite)  # before anything is written: a refusal leaves no lock file behind
        created = False
        try:
            owner.root.parent.mkdir(parents=True, exist_ok=True)  # FileExistsError: a file in its place
            try:
                os.mkdir(owner.root)
                created = True
            except FileExistsError:
                pass  # there already (or made meanwhile): check_root() below says whether it is a folder
        except (NotADirectoryError, FileExistsError):
            raise ConfigError(f"The {what} {path} cannot be created: a file stands on its path; give a folder "
                              f"path for the {what.split()[0]}.") from None
        except OSError as err:
            raise unwritable_folder(what, Path(path), err) from None
        owner.check_root()
        return cls(owner, created)._locked(overwrite)

    @classmethod
    def claim_new(cls, parent: str | os.PathLike, prefix: str, what: str = "run folder") -> "RunFolder":
        """Create and lock a new folder ``parent/<prefix>-NNN``, the first number no other folder has.

        The folder is made with ``mkdir``, which fails when the name exists (even as a link), so two
        processes never claim the same number. ``parent`` (``<cache>.runs``) is created when missing
        and must be a real folder: layercache made it, so a link there is refused.
        """
        parent = Path(parent)
        st = lstat_or_none(parent)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise UnsafePathError(f"{parent} is {kind_of(st)}, where layercache keeps the runs of a cache in a real "
                                  f"folder (it never writes through a link); replace it with a folder, or pass "
                                  f"{option('out')}.")
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise unwritable_folder(what, parent, err) from None
        for n in range(1, 100_000):
            candidate = parent / f"{prefix}-{n:03d}"
            try:
                os.mkdir(candidate)
            except FileExistsError:
                continue
            except OSError as err:
                raise unwritable_folder(what, candidate, err) from None
            return cls(OwnedFolder.at(candidate, what), created=True)._locked(overwrite=False)
        raise ConfigError(f"{parent} already holds 99,999 folders named {prefix}-NNN; pass {option('out')}.")

    def _locked(self, overwrite: bool) -> "RunFolder":
        """Take the lock, clear stale staging folders and check the folder again, now that no one else writes it."""
        self.owner.file(LOCK_NAME)  # a link or a FIFO in its place is refused, never followed
        self._lock_created = lstat_or_none(self.owner.path(LOCK_NAME)) is None
        try:
            self._lock.acquire()
        except BaseException as err:
            if not isinstance(err, CacheLockedError):  # the lock file could not be made or written (a full disk)
                self.release()  # removes a lock file and a folder this claim made: nothing is left behind
            self._lock_created = False
            raise
        try:
            self._check_lock_is_ours()
            for entry in self._entries(staging=True):
                clear_staging(entry)
            _refuse_occupied(self.owner, overwrite)
        except BaseException:
            self.release()
            raise
        return self

    def _check_lock_is_ours(self) -> None:
        """Refuse a lock taken on a file another process has meanwhile removed (its last writer removes it)."""
        try:
            fd = open_regular(self.owner.path(LOCK_NAME), what="lock file")
            try:
                holder = os.pread(fd, 32, 0).decode(errors="replace").partition("\n")[0].strip()
            finally:
                os.close(fd)
        except (OSError, LayercacheError):
            holder = ""
        if holder != str(os.getpid()):
            self._lock_created = False
            raise CacheLockedError(f"{self.path} was just claimed by another layercache process; wait for it to "
                                   f"finish, or choose another {option('out')}.")

    # --- writing ------------------------------------------------------------------------------
    @property
    def staging(self) -> Path:
        """The hidden folder everything is written into before :meth:`commit` (made on first use)."""
        if self._staging is None:
            staging = self.owner.path(STAGING_PREFIX + secrets.token_hex(4))
            try:
                os.mkdir(staging)  # fails on anything already there, a link included
            except OSError as err:
                raise unwritable_folder(self.what, self.path, err) from None
            self._staging = staging
        return self._staging

    def run(self, name: str | None = None) -> StagedRun:
        """A run folder to write: this folder itself, or a fresh sub-folder ``name`` (a sweep's ``best``)."""
        if name is None:
            return StagedRun(self.staging, self.path)
        folder = OwnedFolder(self.staging, self.what)
        if lstat_or_none(folder.path(name)) is not None:  # rewritten: the previous one goes
            self._remove_tree(folder.path(name))
        try:
            return StagedRun(folder.folder(name, create=True), self.path / name)
        except OSError as err:
            raise unwritable_folder(self.what, self.path, err) from None

    def file(self, name: str) -> Path:
        """The staged path of the file ``name`` (``sweep.json``)."""
        return OwnedFolder(self.staging, self.what).file(name)

    def commit(self) -> Path:
        """Replace layercache's own entries in the folder by everything staged, the config last; returns the folder."""
        staged = sorted(os.listdir(self.staging), key=lambda n: (n in LAST, n))
        for name in self._own_entries():
            self._remove_own(name)
        try:
            for name in staged:
                os.rename(self.staging / name, self.owner.path(name))  # replaces a link, never what it points to
            os.rmdir(self.staging)
        except OSError as err:  # a foreign entry of the same name that is not ours to replace (a file named best)
            raise ConfigError(f"The {self.what} {self.path} cannot take the new {name} ({err.strerror or err}); "
                              f"move the entry of that name away or choose another {option('out')}.") from None
        self._staging = None
        self.committed = True
        return self.path

    # --- ending -------------------------------------------------------------------------------
    def abort(self) -> None:
        """Remove what was staged (the folder's own entries stay as they were)."""
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)  # never follows a link inside
            self._staging = None

    def release(self) -> None:
        """Give the lock up; remove the lock file this process made, and the folder if it made it and did not commit."""
        self.abort()
        try:
            if self._lock_created:
                self.owner.remove(LOCK_NAME)  # while still held: whoever opened it meanwhile is refused
            if self.created and not self.committed:
                os.rmdir(self.path)  # only when empty: anything someone else put there stays
        except (OSError, LayercacheError):
            pass
        finally:
            self._lock_created = False
            self._lock.release()

    def __enter__(self) -> "RunFolder":
        return self

    def __exit__(self, kind, err, trace) -> None:
        self.release()
        if kind is not None and issubclass(kind, KeyboardInterrupt) and not isinstance(err, RunInterrupted):
            kept = "removed" if self.created and not self.path.exists() else "left as it was"
            noun = self.what.split()[0]
            resumes = self.resume_hint() if self.resume_hint is not None else None
            again = resumes or f"run the same command again to start the {noun} afresh"
            raise RunInterrupted(f"Interrupted before the {noun} was complete, so nothing of it was written ("
                                 f"{self.path} was {kept}); {again}.") from None

    # --- what is in the folder ----------------------------------------------------------------
    def _entries(self, staging: bool) -> list[Path]:
        """The folder's staging folders (``staging``), or everything else but the lock file."""
        return [self.owner.path(n) for n in os.listdir(self.path)
                if n.startswith(STAGING_PREFIX) == staging and n not in IGNORED]

    def _own_entries(self) -> list[str]:
        """The entries a commit replaces: own files, and own run folders (or a link or FIFO in their place: removing
        one touches nothing else; a regular file of that name is someone's, and stays)."""
        own = []
        for path in self._entries(staging=False):
            st = lstat_or_none(path)
            if path.name in OWN_FILES or (path.name in OWN_RUNS and st is not None and not stat.S_ISREG(st.st_mode)):
                own.append(path.name)
        return own

    def _remove_own(self, name: str) -> None:
        """Remove the folder's own file ``name``, or its own run folder (a link is removed, never followed)."""
        st = lstat_or_none(self.owner.path(name))
        if name in OWN_RUNS and st is not None and stat.S_ISDIR(st.st_mode):
            inner = OwnedFolder(self.owner.path(name), self.what)
            for entry in os.listdir(inner.root):
                if entry in OWN_FILES or entry in IGNORED:
                    inner.remove(entry)
                else:  # a stale staging folder: _refuse_occupied let nothing else through
                    clear_staging(inner.path(entry))
            os.rmdir(inner.root)
        else:
            self.owner.remove(name)

    def _remove_tree(self, path: Path) -> None:
        """Remove ``path``: a run folder staged by this process, or a link or file standing in its place."""
        st = lstat_or_none(path)
        if st is None:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)  # safe against links inside: it removes them, never what they point to
        else:
            os.unlink(path)


def occupying(folder: Path, what: str) -> list[str]:
    """The names in ``folder`` that make it occupied: anything but a lock file and what a killed run left staged.
    A folder that cannot be read is refused in one sentence naming it as ``what`` (``run folder``)."""
    try:
        return [n for n in os.listdir(folder) if n not in IGNORED and not n.startswith(STAGING_PREFIX)]
    except OSError as err:
        raise ConfigError(f"The {what} {folder} cannot be read ({err.strerror or err}); choose another "
                          f"{option('out')}.") from None


def refuse_occupied(folder: Path, what: str, names: list[str], overwrite: bool) -> None:
    """Refuse ``folder`` holding ``names`` (:func:`occupying`) unless ``overwrite``, in one sentence."""
    if names and not overwrite:
        raise ConfigError(f"The {what} {folder} is not empty; choose another {option('out')} or pass "
                          f"{option('overwrite', True)}.")


def _refuse_occupied(owner: OwnedFolder, overwrite: bool) -> None:
    """Refuse a folder holding anything but a lock file and stale staging unless ``overwrite``; with it, refuse an
    own run folder (``best/``) that holds files layercache did not write, since replacing it would delete them."""
    st = lstat_or_none(owner.root)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{option('out', owner.root)} is a file; give a folder for the {owner.what.split()[0]}.")
    names = occupying(owner.root, owner.what)
    refuse_occupied(owner.root, owner.what, names, overwrite)
    for name in names:
        st = lstat_or_none(owner.path(name))
        if name in OWN_RUNS and st is not None and stat.S_ISDIR(st.st_mode):
            foreign = [n for n in os.listdir(owner.path(name)) if n not in OWN_FILES and n not in IGNORED
                       and not (n.startswith(STAGING_PREFIX) and is_stale_staging(owner.path(name, n)))]
            if foreign:
                raise ConfigError(f"{owner.path(name)} holds {foreign[0]!r}, which layercache did not write, so "
                                  f"{option('overwrite', True)} cannot replace it; move it away or choose another "
                                  f"{option('out')}.")


def clear_staging(path: Path) -> bool:
    """Remove a staging folder that a killed process left, if it holds only what layercache writes there
    (:data:`OWN_FILES`, their temporary files, own run folders holding those); returns whether it was removed.

    One that holds anything else (a file someone put there) stays whole, named in a warning: it does
    not make its folder occupied, and nothing in it is layercache's to delete. So does a file or a link
    of a staging folder's name, which layercache never makes.
    """
    if not is_stale_staging(path):
        if lstat_or_none(path) is not None:
            log.warning("Left %s in place: it holds files layercache did not write; move them away and delete it.",
                        path)
        return False
    shutil.rmtree(path)  # only layercache's own files, checked just above; it never follows a link inside
    return True


def is_stale_staging(path: Path) -> bool:
    """Whether ``path`` is a real folder holding nothing but what layercache stages (see :func:`clear_staging`)."""
    st = lstat_or_none(path)
    if st is None or not stat.S_ISDIR(st.st_mode):
        return False
    for entry in os.listdir(path):
        mode = os.lstat(path / entry).st_mode
        if stat.S_ISDIR(mode):
            if entry not in OWN_RUNS or not is_stale_staging(path / entry):
                return False
        elif entry not in OWN_FILES and not _temporary_of_own(entry):
            return False
    return True


def _temporary_of_own(name: str) -> bool:
    """Whether ``name`` is the temporary file of an atomic write of an own file (``.config.json-x1y2.tmp``)."""
    return name.startswith(".") and name.endswith(".tmp") and any(name.startswith(f".{own}-") for own in OWN_FILES)


def unwritable_folder(what: str, path: Path, err: OSError) -> ConfigError:
    """The one sentence for a run or sweep folder that cannot be written: why (a full disk ...) and what to do."""
    return ConfigError(f"The {what} {path} cannot be written ({why_unwritable(err)}); {free_space_or(err)}.")
