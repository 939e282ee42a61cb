"""A full disk at every write a command makes (issue 36): find its write sites, then fail each one with ENOSPC.

A command's writes are found by watching the system calls that take space under the test's folders
(:class:`DiskFaults` with no site to fail): creating a folder (``os.mkdir``) or a file (``os.open``
with ``O_CREAT``; either only where nothing is yet, as a full disk answers ``EEXIST`` there),
opening a file for writing (``open()``), writing through a descriptor (``os.write``) and flushing
one to disk (``os.fsync``, where a file system that allocates late reports a full disk; the path of
a descriptor is read from ``/proc/self/fd``, so on Linux only). Each call
is named by its kind and its path below the folder watched, with what is random in it (a temporary
file's or a staging folder's suffix, a checkpoint's key) made constant: a *site*. A test then runs
the command once per site with that site's first call failing as a full disk does
(``OSError(ENOSPC)``), so a write site added to a command later is failed too, with no test edited.
Writes made by a library's own code (safetensors, matplotlib, HDF5) are reached through their
``open`` or the ``fsync`` of layercache's atomic write that follows them.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import re
from pathlib import Path

import pytest

RANDOM_PARTS = (
    (re.compile(r"^(\..+)-[A-Za-z0-9_]{6,}\.tmp$"), r"\1-*.tmp"),  # a temporary file beside its target (mkstemp)
    (re.compile(r"^(\.layercache-partial-)[0-9a-f]+$"), r"\1*"),  # a staging folder
    (re.compile(r"fit-[0-9a-f]+\.pt"), "fit-*.pt"),  # a training checkpoint, named by its fit's key
)
WRITE_MODES = frozenset("wax+")


def site_name(path: str | os.PathLike, roots: list[Path]) -> str | None:
    """``path`` relative to the first of ``roots`` holding it, random parts made constant; None outside them."""
    path = Path(os.path.abspath(path))
    for root in roots:
        try:
            parts = path.relative_to(root).parts
        except ValueError:
            continue
        named = []
        for part in parts:
            for pattern, constant in RANDOM_PARTS:
                part = pattern.sub(constant, part)
            named.append(part)
        return f"{root.name}/{'/'.join(named)}"
    return None


class DiskFaults:
    """Records every write below ``roots`` as ``(kind, site)``; with ``fail``, the first write at that site fails as
    a full disk does (once: what the command does next is what is tested).

    Install it with :meth:`install` (a ``pytest.MonkeyPatch``); :attr:`sites` lists the sites in the
    order first written, :attr:`failed` says whether the fault was met.
    """

    def __init__(self, roots: list[Path], fail: tuple[str, str] | None = None) -> None:
        self.roots = [Path(os.path.abspath(r)) for r in roots]
        self.fail = fail
        self.sites: list[tuple[str, str]] = []
        self.failed = False

    # --- what each call writes to -------------------------------------------------------------
    def _hit(self, kind: str, path) -> None:
        site = site_name(path, self.roots) if path is not None else None
        if site is None:
            return
        key = (kind, site)
        if key not in self.sites:
            self.sites.append(key)
        if key == self.fail and not self.failed:
            self.failed = True
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    @staticmethod
    def _fd_path(fd: int) -> str | None:
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None

    def install(self, mp: pytest.MonkeyPatch) -> "DiskFaults":
        """Wrap the system calls that take space; undone with ``mp``."""
        mkdir, os_open, write, fsync, py_open = os.mkdir, os.open, os.write, os.fsync, builtins.open

        def faulty_mkdir(path, mode=0o777, *, dir_fd=None):
            if dir_fd is None and not os.path.lexists(path):  # an existing folder takes no space: EEXIST
                self._hit("mkdir", path)
            return mkdir(path, mode, dir_fd=dir_fd)

        def faulty_os_open(path, flags, mode=0o777, *, dir_fd=None):
            if flags & os.O_CREAT and dir_fd is None and not os.path.lexists(path):
                self._hit("create", path)
            return os_open(path, flags, mode, dir_fd=dir_fd)

        def faulty_write(fd, data):
            self._hit("write", self._fd_path(fd))
            return write(fd, data)

        def faulty_fsync(fd):
            self._hit("fsync", self._fd_path(fd if isinstance(fd, int) else fd.fileno()))
            return fsync(fd)

        def faulty_open(file, mode="r", *args, **kwargs):
            if isinstance(file, (str, bytes, os.PathLike)) and WRITE_MODES & set(mode):
                self._hit("open", os.fsdecode(file))
            return py_open(file, mode, *args, **kwargs)

        mp.setattr(os, "mkdir", faulty_mkdir)
        mp.setattr(os, "open", faulty_os_open)
        mp.setattr(os, "write", faulty_write)
        mp.setattr(os, "fsync", faulty_fsync)
        mp.setattr(builtins, "open", faulty_open)
        mp.setattr(io, "open", faulty_open)
        return self


LEFT_BEHIND = re.compile(r"^(\..+-[A-Za-z0-9_]{6,}\.tmp|\.layercache-partial-[0-9a-f]+)$")


def left_behind(root: Path) -> list[str]:
    """Temporary files and staging folders below ``root``: what a write that stopped half-way would leave."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if LEFT_BEHIND.match(p.name))


def one_sentence(output: str) -> str:
    """The refusal's text after ``Error:``, checked to be one sentence (a single full stop, at its end)."""
    text = " ".join(output.split()).partition("Error: ")[2]
    assert text.endswith(".") and ". " not in text, text
    return text
