"""File-system safety tests (issue 26): a sandbox, what is planted in it, its fingerprint, a guard against hangs.

A test makes ``outside`` (:func:`make_outside`: what a planted link points at, and what must never
change), plants links, FIFOs and foreign entries where layercache reads or writes (:func:`plant`),
fingerprints the sandbox before and after (:func:`tree_state`), and runs under :func:`no_hang`, so
that a FIFO opened by mistake fails the test instead of blocking it forever.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import stat
from pathlib import Path

OUTSIDE_FILE = "important.txt"  # in ``outside``: what a link to a file points at
OUTSIDE_FOLDER = "folder"  # in ``outside``: what a link to a folder points at
DANGLING = "not-there-yet"  # in ``outside``: what a dangling link points at (a write through it would create it)

KINDS = ("link-to-file", "link-to-folder", "dangling", "loop", "loop-of-two", "fifo", "foreign-file",
         "foreign-folder", "no-access")


def make_outside(outside: Path, files: dict[str, str | bytes] | None = None) -> Path:
    """``outside`` with :data:`OUTSIDE_FILE`, an :data:`OUTSIDE_FOLDER` and ``files`` (relative name -> content)."""
    (outside / OUTSIDE_FOLDER).mkdir(parents=True)
    (outside / OUTSIDE_FILE).write_text("the user's own notes\n")
    for name, content in (files or {}).items():
        path = outside / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    return outside


def plant(path: Path, kind: str, outside: Path, *, inside: str = "notes.txt") -> None:
    """Put one of :data:`KINDS` at ``path`` (its folders are made), links pointing into ``outside``.

    ``link-to-file`` / ``link-to-folder``: a link to :data:`OUTSIDE_FILE` / :data:`OUTSIDE_FOLDER`;
    ``dangling``: a link to nothing in ``outside``; ``loop``: a link to itself; ``loop-of-two``:
    ``path`` and ``path-b`` link to each other; ``fifo``: a named pipe (opening it blocks);
    ``foreign-file``: a file of someone else's; ``foreign-folder``: a folder holding a file named
    ``inside``; ``no-access``: a file nobody may read or write (root still may).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "link-to-file":
        path.symlink_to(outside / OUTSIDE_FILE)
    elif kind == "link-to-folder":
        path.symlink_to(outside / OUTSIDE_FOLDER, target_is_directory=True)
    elif kind == "dangling":
        path.symlink_to(outside / DANGLING)
    elif kind == "loop":
        path.symlink_to(path.name)
    elif kind == "loop-of-two":
        other = path.with_name(path.name + "-b")
        path.symlink_to(other)
        other.symlink_to(path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "foreign-file":
        path.write_text("someone's notes\n")
    elif kind == "foreign-folder":
        path.mkdir()
        (path / inside).write_text("someone's own file\n")
    elif kind == "no-access":
        path.write_text("locked\n")
        path.chmod(0o000)
    else:
        raise ValueError(f"nothing to plant called {kind!r}")


def real_parents(root: Path, relative: str | Path) -> bool:
    """Whether every folder from ``root`` to ``relative`` is a real one, making those missing.

    False when one is a link, a file or a FIFO: planting there would write through it.
    """
    here = root
    for part in Path(relative).parts[:-1]:
        here = here / part
        try:
            if not stat.S_ISDIR(os.lstat(here).st_mode):
                return False
        except FileNotFoundError:
            here.mkdir()
    return True


def remove(path: Path) -> None:
    """Remove what is at ``path`` itself (a link as a link, a folder with what it holds); nothing there is fine."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        path.unlink()


def restore_access(root: Path) -> None:
    """Give ``root`` and everything below it (links left alone) back to its owner, so that it can be removed."""
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink() and (path.is_dir() or path.is_file()):
            path.chmod(0o755 if path.is_dir() else 0o644)


def tree_state(root: Path, skip: Path | None = None) -> dict[str, tuple]:
    """Every entry below ``root`` (links never followed, FIFOs never opened): its kind, a link's target,
    a file's bytes and mode.

    Keys are paths relative to ``root``. Two equal states mean nothing below ``root`` was created,
    deleted, renamed, written or chmod-ed; ``skip`` leaves one sub-tree out (the cache inside a sandbox).
    """
    out: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        here = Path(folder)
        if skip is not None and here == skip:
            dirs.clear()
            continue
        for name in dirs + files:
            path = here / name
            if skip is not None and path == skip:
                continue
            st = os.lstat(path)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                value: tuple = ("link", os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                value = ("file", hashlib.sha256(path.read_bytes()).hexdigest(), mode)
            elif stat.S_ISDIR(st.st_mode):
                value = ("folder", mode)
            elif stat.S_ISFIFO(st.st_mode):
                value = ("fifo", mode)
            else:
                value = ("other", mode)
            out[str(path.relative_to(root))] = value
    return out


class Hung(BaseException):
    """A call blocked past :func:`no_hang`'s deadline.

    Not an ``Exception``: no ``except OSError`` or ``except Exception`` in layercache can turn a hang
    into a typed refusal (a ``TimeoutError`` is an ``OSError``).
    """


@contextlib.contextmanager
def no_hang(seconds: float = 30.0):
    """Fail (:class:`Hung`) instead of blocking forever, e.g. on opening a FIFO nobody writes to.

    A signal interrupts the blocking system call in the main thread; the handler's exception ends it.
    """
    def alarm(signum, frame):
        raise Hung(f"blocked for more than {seconds} s (opened a FIFO?)")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


ALIASES = ("itself", "link-to-it", "through-a-linked-folder", "hard-link")
"""How :func:`alias` names an existing file: the path itself, a symbolic link to it, its name through a
link to its folder, and a second hard link."""


def regular_files(root: Path) -> list[Path]:
    """Every regular file below ``root`` (links neither listed nor followed), sorted."""
    out = []
    for folder, _, files in os.walk(root, followlinks=False):
        out += [Path(folder, name) for name in files if stat.S_ISREG(os.lstat(Path(folder, name)).st_mode)]
    return sorted(out)


def alias(file: Path, how: str, where: Path) -> Path:
    """A path naming ``file`` as :data:`ALIASES` ``how`` says, made in the folder ``where`` (a new name each time)."""
    if how == "itself":
        return file
    where.mkdir(parents=True, exist_ok=True)
    made = where / f"{how}-{len(list(where.iterdir()))}"
    if how == "link-to-it":
        made.symlink_to(file)
        return made
    if how == "through-a-linked-folder":
        made.symlink_to(file.parent, target_is_directory=True)
        return made / file.name
    if how == "hard-link":
        os.link(file, made)
        return made
    raise ValueError(f"no alias called {how!r}")
