"""Write shards on a background thread while the next batch runs through the model, when that helps.

Appending a batch to HDF5, fsyncing and hashing a finished shard are I/O and hashing that
release the GIL, so they can overlap the next forward pass instead of following it. The
extraction loop hands each batch to a :class:`BackgroundWriter` as a job; jobs run one at a
time, in submission order, on one thread, so the shard and manifest updates happen in exactly
the order (and with the same crash guarantees) as if they ran inline.

Overlap only pays when the writer has a core of its own: a forward pass on a GPU, or a CPU pass
that leaves cores free. When torch's threads already use every core, a writer thread steals
time slices from them, and because the forward pass's parallel regions wait for their slowest
thread, a little stolen time costs a lot: with every core busy, the forward pass runs measurably
slower with the writer thread than with the same writes done inline between batches (figures in
``benchmarks/README.md``, "Why the code is shaped this way").
:func:`writer_thread_helps` makes that call, and ``BackgroundWriter(threaded=False)`` runs each
job at once in the caller, with the same interface.

Memory stays bounded: the token states of a batch live in one of a few reused buffers of a
:class:`BufferPool`, and the forward side waits for a free one, which is also what keeps it from
running ahead of a slow disk.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable

import torch

from .packing import StorageBuffer

POLL_SECONDS = 0.05
"""How often a blocked caller looks for an error on the writer thread."""
WRITER_NICENESS = 5
"""Scheduling niceness of the writer thread (Linux), so that on a CPU run the forward pass's
threads win a core when both want it; the writer has slack, a stalled forward does not."""


class BackgroundWriter:
    """One thread that runs submitted jobs in order; its first error is raised in the caller.

    Use as a context manager around the loop that submits jobs: leaving it normally waits for
    every job; leaving it with an exception drops the jobs not yet started and waits for the
    running one, so the caller can clean up knowing nothing else will touch its files.
    """

    def __init__(self, max_pending: int = 2, name: str = "layercache-writer", threaded: bool = True):
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=max_pending)
        self._error: BaseException | None = None
        self._cancelled = threading.Event()
        self._thread: threading.Thread | None = None  # None: jobs run inline, in submit()
        if threaded:
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        _lower_priority()
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if self._error is not None or self._cancelled.is_set():
                continue  # skip what follows a failure; keep draining so no caller blocks on a full queue
            try:
                job()
            except BaseException as err:  # noqa: BLE001 - handed to the caller, who re-raises it
                self._error = err

    def check(self) -> None:
        """Raise the writer thread's error, if it had one."""
        if self._error is not None:
            raise self._error

    def submit(self, job: Callable[[], None]) -> None:
        """Queue ``job``, waiting while ``max_pending`` jobs are queued; raises an earlier job's error."""
        if self._thread is None:
            job()
            return
        while True:
            self.check()
            try:
                self._jobs.put(job, timeout=POLL_SECONDS)
                return
            except queue.Full:
                continue

    def _stop(self) -> None:
        if self._thread is None:
            return
        while self._thread.is_alive():
            try:
                self._jobs.put(None, timeout=POLL_SECONDS)
                break
            except queue.Full:
                continue
        self._thread.join()

    def finish(self) -> None:
        """Wait for every submitted job; raise the first error."""
        self._stop()
        self.check()

    def cancel(self) -> None:
        """Skip the jobs not started yet and wait for the running one; errors are not raised."""
        self._cancelled.set()
        self._stop()

    def __enter__(self) -> "BackgroundWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finish()
        else:
            self.cancel()


class BufferPool:
    """A fixed set of reused host tensors handed to the forward side and back once written.

    Reusing them avoids a fresh multi-megabyte allocation per batch (page faults on every first
    touch, and memory the allocator may keep); their number bounds how many batches are in flight.
    """

    def __init__(self, count: int, make: Callable[[], StorageBuffer]):
        self._free: queue.Queue[StorageBuffer] = queue.Queue()
        for _ in range(count):
            self._free.put(make())

    def take(self, check: Callable[[], None] = lambda: None) -> StorageBuffer:
        """A free buffer, waiting for one; ``check`` runs while waiting (to raise a writer error)."""
        while True:
            check()
            try:
                return self._free.get(timeout=POLL_SECONDS)
            except queue.Empty:
                continue

    def give_back(self, buffer: StorageBuffer) -> None:
        """Return a buffer taken with :meth:`take`, once its data is written."""
        self._free.put(buffer)


def writer_thread_helps(device: torch.device) -> bool:
    """Whether a writer thread would have a core to itself: a non-CPU forward, or spare CPU cores."""
    if device.type != "cpu":
        return True
    try:
        cores = len(os.sched_getaffinity(0))  # the cores this process may use (containers, taskset)
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return cores > torch.get_num_threads()


def _lower_priority() -> None:
    """Raise the calling thread's niceness; Linux schedules threads separately, elsewhere skip."""
    if not sys.platform.startswith("linux"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICENESS)
    except OSError:  # not permitted in some sandboxes: run at normal priority
        pass
