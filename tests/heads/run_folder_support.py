"""Helpers of the run-folder safety tests: a folder tree's hash that never opens a FIFO; a call under a deadline."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from pathlib import Path


def snapshot(root: Path) -> dict:
    """Every entry below ``root``: a file's hash, a link's target, a folder, a FIFO (never opened)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[str(path)] = ("link", os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                out[str(path)] = ("file", hashlib.sha256(path.read_bytes()).hexdigest(), stat.S_IMODE(st.st_mode))
            else:
                out[str(path)] = (stat.S_IFMT(st.st_mode),)
    return out


def in_thread(call):
    """Start ``call()`` in a daemon thread; returns the thread and a dict that gets ``result`` or ``error``."""
    box: dict = {}

    def target():
        try:
            box["result"] = call()
        except BaseException as err:  # noqa: BLE001 - handed to the test
            box["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def within(seconds: float, call):
    """``call()`` under a deadline: a FIFO opened for writing would block forever."""
    thread, box = in_thread(call)
    thread.join(seconds)
    assert not thread.is_alive(), "the run hung (a FIFO was opened)"
    if "error" in box:
        raise box["error"]
    return box["result"]
