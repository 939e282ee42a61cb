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

:func:`use_threads` applies the choice to torch (``torch.set_num_threads``). Load that starts after
the choice is not followed; pass ``--threads`` to decide yourself.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError

IDLE_SAMPLE_S = 0.1
"""Seconds over which idle time is sampled: long enough to span several scheduler slices."""
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
PROC_STAT = Path("/proc/stat")


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

    def describe(self) -> str:
        """``"2 threads (2 cores)"`` or why fewer than the cores were taken."""
        plural = "s" if self.threads != 1 else ""
        if self.asked or self.threads == self.usable:
            return f"{self.threads} thread{plural} ({self.usable} core{'s' if self.usable != 1 else ''})"
        return (f"{self.threads} thread{plural}: other processes keep {self.usable - self.idle:.1f} of the "
                f"{self.usable} cores busy, and torch's threads stall when one loses its core "
                f"(--threads {self.usable} to use them all anyway)")


def resolve_threads(threads: int | str | None = None) -> ThreadChoice:
    """The number of torch threads for ``threads``: None or ``"auto"`` (the idle cores), or a number.

    A number above :func:`usable_cores` is refused: more threads than cores only wait for each other.
    """
    usable = usable_cores()
    if threads is None or threads == "auto":
        idle = idle_cores()
        chosen = usable if idle is None else min(usable, max(1, math.floor(idle + 0.5)))
        return ThreadChoice(chosen, usable, idle, asked=False)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"--threads must be a whole number of at least 1 (or auto), got {threads!r}.")
    if threads > usable:
        raise ConfigError(f"--threads {threads} is more than the {usable} core(s) this process may use; more "
                          f"threads than cores only wait for each other, so pass at most {usable} (or leave it out).")
    return ThreadChoice(threads, usable, None, asked=True)


def use_threads(threads: int | str | None = None) -> ThreadChoice:
    """Resolve ``threads`` (see :func:`resolve_threads`) and set torch's intra-op thread count to it."""
    choice = resolve_threads(threads)
    import torch  # here, so that importing layercache.core never loads torch

    torch.set_num_threads(choice.threads)
    return choice
