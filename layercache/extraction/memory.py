"""Keep a long extraction's resident memory flat: hand freed heap memory back to the OS between batches.

Each forward pass allocates and frees a few hundred MB of activations whose sizes change from
batch to batch (the plan goes from wide to narrow batches). glibc serves allocations below its
mmap threshold (up to 32 MB) from its heap and keeps the freed chunks, fragmented, for reuse, so
resident memory creeps up over a long run with nothing leaking: +25 % between 1k and 10k
examples of AG News. ``malloc_trim(0)`` returns the free pages inside the heap to the OS.

Trimming after every batch would keep memory flattest but is not free: the free memory at a
batch boundary is mostly the next forward pass's working set, which it then faults back in
(~0.3 M page faults per 9 batches of MiniLM, 5-8 % of the run). So :class:`HeapTrimmer` takes
the resident size at the first batch boundary (working set included) as its reference and
trims only when resident memory has grown ``slack`` beyond it; the boundary after a trim sets
the reference again. Elsewhere than glibc on Linux (macOS, musl, Windows) it does nothing.
Measured with it: peak RSS 1,046 MB at the first 1k AG News examples, 1,127 MB at 1k examples
that include the 10k's longest, 1,237 MB at 10k (benchmarks/extract.py --only rss).

Pinning glibc's mmap threshold instead (every large tensor its own mapping, returned when freed)
keeps peak RSS flatter still but faults every activation in afresh. Measured on the first 4,000 AG
News examples (two runs each): default 1,221-1,274 MB peak in 42.8-45.8 s;
``MALLOC_MMAP_THRESHOLD_=4194304`` in the environment 982-992 MB in 48.3-49.2 s. That is a
user's memory-for-speed choice (an environment variable, read when the process starts), so
extraction does not make it for them. Growth levels off within a run: in a 10k-example run the
peak rose by ~10 MB over the second half of the batches.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

TRIM_SLACK_BYTES = 64 * 2**20


def _load_malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim  # glibc only
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_MALLOC_TRIM = _load_malloc_trim()


def resident_bytes() -> int | None:
    """This process's resident set size (Linux), None where unknown."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class HeapTrimmer:
    """Call :meth:`batch_done` at each batch boundary; it trims the heap once it has grown ``slack``."""

    def __init__(self, slack: int = TRIM_SLACK_BYTES):
        self.slack = slack
        self.enabled = _MALLOC_TRIM is not None and resident_bytes() is not None
        self._reference: int | None = None
        self.trims = 0

    def batch_done(self) -> None:
        if not self.enabled:
            return
        now = resident_bytes()
        if self._reference is None:  # first boundary, or the first after a trim
            self._reference = now
        elif now > self._reference + self.slack:
            _MALLOC_TRIM(0)
            self.trims += 1
            self._reference = None
