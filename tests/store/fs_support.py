"""File-system helpers for the confinement tests: a fingerprint of a folder tree, and a guard against hangs."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import stat
from pathlib import Path


def tree_state(root: Path, skip: Path | None = None) -> dict[str, tuple]:
    """Every entry below ``root`` (links never followed): its kind, a link's target, a file's bytes and mode.

    Two equal states mean nothing below ``root`` was created, deleted, renamed, written or chmod-ed;
    ``skip`` leaves one sub-tree out (the cache inside a sandbox).
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


@contextlib.contextmanager
def no_hang(seconds: float = 30.0):
    """Fail (TimeoutError) instead of blocking forever, e.g. on opening a FIFO nobody writes to.

    A signal interrupts the blocking system call; the handler's exception ends it.
    """
    def alarm(signum, frame):
        raise TimeoutError(f"blocked for more than {seconds} s (opened a FIFO?)")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
