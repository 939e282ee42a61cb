"""How much memory this process may use: one memory budget that every reader holding data across steps sizes itself by.

The budget is a number of bytes that the work of a command (the features a probe reads, the slabs and pages a
feed keeps) stays under, on top of what the interpreter and its libraries hold before the work starts:

- :func:`memory_budget` turns a requested budget (``--memory-budget SIZE``, ``memory_budget=`` of the library
  calls) into bytes: the request itself, or :data:`DEFAULT_SHARE` of the memory available; a request below
  :data:`MIN_BUDGET` is refused in one sentence;
- :func:`memory_limit` sets it for a block (``with memory_limit(budget):``), and :func:`current_budget` is what
  code inside the block reads (outside any block: the default budget, measured when asked).

The probes read their features in layer groups sized to it (:mod:`layercache.probes.features`), and the cache
feed derives its slab budgets from it and drops the pages of a finished block from the process
(:mod:`layercache.store.cache_feed`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from ..errors import ConfigError
from .option_names import option

DEFAULT_SHARE = 0.5
"""The share of the memory available (``MemAvailable`` when the budget is resolved) that the default budget is."""
MIN_BUDGET = 64 << 20
"""The smallest budget accepted: below it the fixed costs of one read (a shard's layer, a block) do not fit."""
UNKNOWN_AVAILABLE = 4 << 30
"""The default budget where the memory available cannot be read (no ``/proc/meminfo``, no ``sysconf``)."""
TRIM_INTERVAL = 0.1
"""Seconds at least between two :func:`release_free_heap` calls that do work."""
TRIM_SHARE = 0.02
"""Most share of the time that trimming the heap may take: after a trim that took ``t`` seconds the next waits at
least ``t / TRIM_SHARE``. A trim walks the whole heap: under a millisecond on a small one, 11 ms in a head's
training on SST-2 (``train-head``, 2 cores), where one every 0.1 s took 4 % of the run."""


def available_bytes() -> int | None:
    """Memory the system can give without swapping (Linux ``MemAvailable``), else free pages; None when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def memory_budget(requested: int | None = None) -> int:
    """The memory budget in bytes: ``requested``, or (None) :data:`DEFAULT_SHARE` of :func:`available_bytes`.

    Refuses, in one sentence, a requested budget that is not a whole number of bytes of at least
    :data:`MIN_BUDGET`. The default is never below :data:`MIN_BUDGET` either.
    """
    if requested is None:
        available = available_bytes()
        return max(MIN_BUDGET, int(DEFAULT_SHARE * available) if available else UNKNOWN_AVAILABLE)
    if isinstance(requested, bool) or not isinstance(requested, int):
        raise ConfigError(f"memory_budget must be a number of bytes (an integer) or None, got {requested!r}.")
    if requested < MIN_BUDGET:
        raise ConfigError(f"A memory budget of {requested:,} bytes is below the {MIN_BUDGET >> 20} MiB the reads "
                          f"need at least (one shard's layer, one block); give "
                          f"{option('memory_budget', MIN_BUDGET, typed=f'{MIN_BUDGET >> 20}MiB')} or more.")
    return requested


_BUDGET: ContextVar[int | None] = ContextVar("memory_budget", default=None)


@contextmanager
def memory_limit(requested: int | None = None) -> Iterator[int]:
    """Within the block, :func:`current_budget` is :func:`memory_budget` of ``requested`` (checked on entry).

    With ``requested`` None inside an outer block, the outer budget stays (a library call that passes its
    default on does not widen its caller's budget).
    """
    if requested is None and _BUDGET.get() is not None:
        yield _BUDGET.get()
        return
    budget = memory_budget(requested)
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def current_budget() -> int:
    """The budget the innermost :func:`memory_limit` set, else the default budget (:func:`memory_budget`)."""
    budget = _BUDGET.get()
    return budget if budget is not None else memory_budget(None)


def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none (macOS, musl)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()
_last_trim = float("-inf")
_trim_seconds = 0.0


def release_free_heap() -> None:
    """Hand the free pages of the C heap back to the OS (glibc ``malloc_trim``), at most every :data:`TRIM_INTERVAL`.

    Why: a training loop allocates tensors of ever-changing shapes (batches padded to their longest row), and
    glibc serves those of a few hundred KiB from its heap once it has raised its mmap threshold. The free holes
    they leave stay resident, so a process's memory grew with the number of steps, not with anything it kept:
    ``train-head`` under a 64 MiB budget peaked 30 MiB higher on 100k examples than on 10k. A feed calls this
    when it finishes a block; where the C library has no ``malloc_trim`` it does nothing. It spaces its calls so
    that they take at most :data:`TRIM_SHARE` of the time.
    """
    global _last_trim, _trim_seconds
    now = time.monotonic()
    if _TRIM is None or now - _last_trim < max(TRIM_INTERVAL, _trim_seconds / TRIM_SHARE):
        return
    _last_trim = now
    _TRIM(0)
    _trim_seconds = time.monotonic() - now
