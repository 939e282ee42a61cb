"""How many threads torch computes with: never more than the cores this process may use, and by
default no more than those other processes leave idle.

torch runs its CPU kernels on an OpenMP team; every parallel region ends at a barrier that waits
for all the team's threads. When another busy process holds one of the cores, the thread that lost
its core stalls the barrier until the scheduler gives it back, at every region, thousands of times
per training step. On this project's 2-core machines an ``adaptive`` head trained 10-16x slower
with 2 threads beside one busy process than with 1 thread, and libgomp's wait policy
(``OMP_WAIT_POLICY=PASSIVE``, a low ``GOMP_SPINCOUNT``) only traded that for a slower quiet machine
(``benchmarks/threads.py`` has the figures). So the default counts the idle cores first:

- :func:`usable_cores`: the CPUs this process may run on (its affinity mask), capped by a cgroup
  CPU quota (a container limited to 1.5 CPUs gets 1);
- :func:`idle_cores`: how many of those other processes leave idle, sampled over 0.1 s from
  ``/proc/stat`` (Linux; elsewhere unknown, and every usable core counts);
- :func:`resolve_threads`: ``None`` / ``"auto"`` -> the idle cores rounded (at least 1); a number
  is used as given, and refused when it exceeds the usable cores.

:func:`use_threads` applies the choice to torch (``torch.set_num_threads``) for the rest of the process:
the CLI's ``--threads``, or a user who wants a count for every call. Load that starts after the choice
is not followed; pass ``--threads`` to decide yourself.

The library's computing calls (a head's fit, score and predict, the probes, the probe report,
``extract``, ``verify_cache`` ...) follow the same policy without the CLI: each is decorated with
:func:`computes`, which runs it under :func:`computing_threads`. That uses the threads the process
chose for itself and otherwise the idle cores for the call's duration, and puts torch's count back
after it:

- a choice the process made is kept: :func:`use_threads` (``--threads``), ``torch.set_num_threads``
  (seen as a count other than torch's own default, which is the size torch gives its inter-op pool
  unless told otherwise) or ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` in the environment;
- otherwise ``auto``. The idle sample costs 0.1 s, so it is taken at most once a minute
  (:data:`AUTO_REFRESH_S`) and never where one core is usable; a small call in a loop pays for it
  once;
- calls nest: a sweep's fits, a report's probes run under the outermost call's choice, which
  only the outermost call makes and undoes (also across Python threads: the last call to end
  puts the count back).
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ParamSpec, TypeVar

from ..errors import ConfigError
from .option_names import flag, option

P = ParamSpec("P")
R = TypeVar("R")

IDLE_SAMPLE_S = 0.1
"""Seconds over which idle time is sampled: long enough to span several scheduler slices."""
AUTO_REFRESH_S = 60.0
"""How long a library call's ``auto`` choice stands before the idle cores are sampled again."""
THREAD_ENVIRONMENT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""Variables torch reads its thread count from at start: a user who sets one has chosen."""
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
PROC_STAT = Path("/proc/stat")

log = logging.getLogger(__name__)


def usable_cores() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup v2 CPU quota (at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota is not None:
        cores = min(cores, max(1, math.floor(quota)))
    return max(1, cores)


def _cgroup_quota() -> float | None:
    """CPUs' worth of time the cgroup may use (``cpu.max`` ``quota period``), or None when unlimited/unknown."""
    try:
        quota, period = CGROUP_CPU_MAX.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _cpu_times(cpus: set[int]) -> tuple[int, int] | None:
    """(idle, total) jiffies summed over ``cpus``, from ``/proc/stat``; None where it cannot be read."""
    try:
        lines = PROC_STAT.read_text().splitlines()
    except OSError:
        return None
    idle = total = 0
    found = 0
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        # user nice system idle iowait irq softirq steal (guest time is already inside user)
        values = [int(v) for v in fields[:8]]
        idle += values[3] + values[4]
        total += sum(values)
        found += 1
    return (idle, total) if found else None


def idle_cores(sample_s: float = IDLE_SAMPLE_S) -> float | None:
    """How many of this process's usable CPUs other processes leave idle, over ``sample_s`` seconds.

    Measured while this process sleeps, so it counts everything else. None where ``/proc/stat``
    is missing (not Linux) or shows nothing.
    """
    try:
        cpus = set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    before = _cpu_times(cpus)
    if before is None:
        return None
    time.sleep(sample_s)
    after = _cpu_times(cpus)
    if after is None or after[1] <= before[1]:
        return None
    fraction = (after[0] - before[0]) / (after[1] - before[1])
    return fraction * len(cpus)


@dataclass(frozen=True)
class ThreadChoice:
    """The threads torch will use, and why (for the user: one line of output)."""

    threads: int
    usable: int
    idle: float | None
    asked: bool

    def describe(self, override: str | None = None) -> str:
        """``"2 threads (2 cores)"`` or why fewer than the cores were taken, and ``override``, how to take them
        all anyway (default: the CLI's ``--threads N``)."""
        plural = "s" if self.threads != 1 else ""
        if self.asked or self.threads == self.usable:
            return f"{self.threads} thread{plural} ({self.usable} core{'s' if self.usable != 1 else ''})"
        return (f"{self.threads} thread{plural}: other processes keep {self.usable - self.idle:.1f} of the "
                f"{self.usable} cores busy, and torch's threads stall when one loses its core "
                f"({override or flag('threads', self.usable)} to use them all anyway)")


def environment_threads() -> int | None:
    """The thread count the environment set before the process started: the first of :data:`THREAD_ENVIRONMENT`
    that holds a whole number of at least 1 (as torch reads it), or None."""
    for name in THREAD_ENVIRONMENT:
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) >= 1:
            return int(value)
    return None


def resolve_threads(threads: int | str | None = None) -> ThreadChoice:
    """The number of torch threads for ``threads``: None or ``"auto"``, or a number.

    ``auto``: the count ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` set (:func:`environment_threads`, a choice made
    before the process started, as :func:`computing_threads` keeps it; at most the usable cores), else the idle
    cores. A number above :func:`usable_cores` is refused: more threads than cores only wait for each other.
    """
    usable = usable_cores()
    if threads is None or threads == "auto":
        chosen = environment_threads()
        if chosen is not None:
            return ThreadChoice(min(chosen, usable), usable, None, asked=True)
        if usable == 1:  # nothing to choose: no sample
            return ThreadChoice(1, 1, None, asked=False)
        idle = idle_cores()
        chosen = usable if idle is None else min(usable, max(1, math.floor(idle + 0.5)))
        return ThreadChoice(chosen, usable, idle, asked=False)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"{option('threads')} must be a whole number of at least 1 (or auto), got {threads!r}.")
    if threads > usable:
        raise ConfigError(f"{option('threads', threads)} is more than the {usable} core(s) this process may use; more "
                          f"threads than cores only wait for each other, so pass at most {usable} (or leave it out).")
    return ThreadChoice(threads, usable, None, asked=True)


def use_threads(threads: int | str | None = None) -> ThreadChoice:
    """Resolve ``threads`` (see :func:`resolve_threads`) and set torch's intra-op thread count to it, for the rest
    of the process: every later computing call keeps it (``layercache.use_threads(2)`` in a notebook, as
    ``--threads 2`` does for a command)."""
    global _chosen
    choice = resolve_threads(threads)
    import torch  # here, so that importing layercache.core never loads torch

    with _lock:
        torch.set_num_threads(choice.threads)
        _chosen = choice.threads
    return choice


_lock = threading.RLock()
_chosen: int | None = None
"""The count :func:`use_threads` set: the process's own choice, kept while torch still has it."""
_auto: tuple[float, ThreadChoice] | None = None
"""(when, what) of the last ``auto`` choice a computing call made: reused for :data:`AUTO_REFRESH_S` seconds."""
_running = 0
"""Computing calls running now (nested, or on several Python threads): only the first chooses."""
_restore: int | None = None
"""The count torch had before the first running call changed it, put back when the last one ends."""


def _users_choice(torch) -> bool:
    """Whether torch's thread count was chosen by this process rather than left at torch's default.

    Chosen: by :func:`use_threads` (while torch still has that count), by ``OMP_NUM_THREADS`` /
    ``MKL_NUM_THREADS``, or by ``torch.set_num_threads`` to a count other than torch's default. torch
    gives its inter-op pool that default unless told otherwise, so it is the reference; a count set
    equal to it cannot be told from the default (pass it through :func:`use_threads` to keep it).
    """
    current = torch.get_num_threads()
    if _chosen is not None and current == _chosen:
        return True
    if any(os.environ.get(name) for name in THREAD_ENVIRONMENT):
        return True
    return current != torch.get_num_interop_threads()


def _auto_choice() -> ThreadChoice:
    """``auto``, sampled at most once per :data:`AUTO_REFRESH_S` seconds (logged when it leaves cores idle)."""
    global _auto
    now = time.monotonic()
    if _auto is not None and now - _auto[0] < AUTO_REFRESH_S:
        return _auto[1]
    choice = resolve_threads("auto")
    if choice.threads < choice.usable and (_auto is None or _auto[1].threads != choice.threads):
        log.info("Computing with %s.", choice.describe(f"layercache.use_threads({choice.usable})"))
    _auto = (now, choice)
    return choice


@contextmanager
def computing_threads(threads: int | str | None = "auto"):
    """Torch's threads for the duration of one computing call; torch's count is put back when the call ends.

    ``threads``: ``auto`` (the default) keeps a count the process chose itself (:func:`use_threads`,
    ``torch.set_num_threads``, ``OMP_NUM_THREADS``: see :func:`_users_choice`) and otherwise takes the
    idle cores (:func:`resolve_threads`, sampled at most once per :data:`AUTO_REFRESH_S`); a number is
    used as given (``with computing_threads(1): head.fit(cache)``).

    Calls nest: only the outermost running call chooses, and the last running call to end restores (calls on
    several Python threads count together); the calls inside it (a sweep's fits) run under its choice.
    """
    global _running, _restore
    import torch  # here, so that importing layercache.core never loads torch

    with _lock:
        if _running == 0:
            _restore = None
            if threads not in (None, "auto") or not _users_choice(torch):
                choice = resolve_threads(threads) if threads not in (None, "auto") else _auto_choice()
                before = torch.get_num_threads()
                if choice.threads != before:
                    torch.set_num_threads(choice.threads)
                    _restore = before
        _running += 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            if _running == 0 and _restore is not None:
                torch.set_num_threads(_restore)
                _restore = None


def computes(function: Callable[P, R]) -> Callable[P, R]:
    """Decorate a public call that computes with torch: it runs under :func:`computing_threads` (``auto``).

    One policy for every entry point of the library (a head's ``fit``, a probe's ``score``, ``extract`` ...),
    as ``--threads auto`` is for every command. Not for a generator, whose body runs after the call returns.
    """
    if inspect.isgeneratorfunction(function):
        raise TypeError(f"{function.__qualname__} is a generator: its work runs outside the call @computes wraps")

    @functools.wraps(function)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        with computing_threads():
            return function(*args, **kwargs)

    call.computes = True  # type: ignore[attr-defined]  # what tests/core/test_threads.py checks on every public computing call
    return call
