"""Keep a long extraction's resident memory flat: hand freed heap memory back to the OS between batches.

Each forward pass allocates and frees a few hundred MB of activations. glibc serves allocations
below its mmap threshold (up to 32 MB) from its heap and keeps freed chunks for reuse. If a batch
needs slightly larger activations than the last one, they do not fit the freed chunks, so the
heap grows and the old chunks stay behind, fragmented: with a greedy batch plan, peak RSS rose
7-20 % from 1k to 10k AG News examples with nothing leaking. The main cure is in the plan
(batching.py: a batch is never larger than the one before it), which keeps the peak flat:
1,134-1,154 MB at 1k and 1,154-1,162 MB at 10k examples, against 1,117-1,183 and 1,263-1,344
MB greedy (two runs each; benchmarks/extract.py --only rss: 1,084 MB at 1k, 1,119 MB at 10k).

:class:`HeapTrimmer` is the backstop for what the plan cannot see (tokenizer and writer memory,
other allocators in the process): ``malloc_trim(0)`` returns the free pages inside the heap to
the OS. Trimming after every batch is not free: the free memory at a batch boundary is mostly
the next forward pass's working set, which it then faults back in (~0.3 M page faults per 9
batches of MiniLM, 5-8 % of the run). So it takes the resident size at the first batch boundary
(working set included) as its reference and trims only when resident memory has grown ``slack``
beyond it; the boundary after a trim sets the reference again. Elsewhere than glibc on Linux
(macOS, musl, Windows) it does nothing.

Pinning glibc's mmap threshold instead (``MALLOC_MMAP_THRESHOLD_=4194304``: every large tensor
its own mapping, returned when freed) also keeps the peak flat, but faults every activation in
afresh and made extraction 10 % slower; the non-growing plan costs nothing, so extraction leaves
the allocator alone.
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
        """Note a batch boundary; trim the heap when it has grown ``slack`` bytes since the last trim."""
        if not self.enabled:
            return
        now = resident_bytes()
        if self._reference is None:  # first boundary, or the first after a trim
            self._reference = now
        elif now > self._reference + self.slack:
            _MALLOC_TRIM(0)
            self.trims += 1
            self._reference = None
