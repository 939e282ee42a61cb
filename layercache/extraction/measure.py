"""What ``layercache plan`` measures on this machine: the backbone's forward speed and the disk's speeds.

:func:`forward_speed` times the frozen backbone on a few planned batches of one split, spread over
the plan (batches are planned longest first, so the sample spans the lengths), after an untimed
warm-up (on a GPU, of every sampled batch), synchronising the device so the time is the
computation's. :func:`disk_speed` writes a temporary file beside where the cache would go, fsyncs
it, asks the kernel to drop it from the page cache (``POSIX_FADV_DONTNEED``) and times reading it
back: a cold read, as a cache larger than memory is read. The file is created exclusively under a
unique name and removed whatever happens.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..backbone.loader import Backbone
from .forward import pad_windows, token_index
from .held import HeldStates
from .plan import SplitPlan

DISK_PROBE_BYTES = 256 * 2**20
"""Size of the file :func:`disk_speed` writes and reads back."""
BLOCK_BYTES = 8 * 2**20
PROBE_PREFIX = ".layercache-disk-probe-"


@dataclass(frozen=True)
class ForwardSpeed:
    """The backbone's measured speed: stored tokens per second over a sample of planned batches."""

    tokens: int
    """Stored (real) tokens in the timed batches."""
    seconds: float
    batches: int
    device: str
    largest: float
    """Largest magnitude among the kept states of the timed batches (what ``--storage-dtype auto`` looks at)."""

    @property
    def tokens_per_second(self) -> float:
        """Stored tokens per second (padding is in the time, not in the count)."""
        return self.tokens / self.seconds if self.seconds > 0 else float("inf")

    def seconds_for(self, tokens: int) -> float:
        """The forward time of ``tokens`` stored tokens at this speed."""
        return tokens / self.tokens_per_second


@dataclass(frozen=True)
class DiskSpeed:
    """Sequential write (with fsync) and cold read speeds of the disk that holds ``folder``."""

    folder: Path
    probe_bytes: int
    write_bytes_per_second: float
    read_bytes_per_second: float
    evicted: bool
    """Whether the kernel was asked to drop the file from the page cache before the read (posix_fadvise)."""
    filesystem: str | None
    """The file system type of ``folder`` from /proc/mounts (``ext4``, ``tmpfs``, ``overlay``), None if unknown."""


def sample_batches(plan: SplitPlan, count: int) -> list[int]:
    """Up to ``count`` distinct batch indices spread evenly over the plan, the first (longest) included."""
    n = len(plan.batches)
    if n == 0 or count < 1:
        return []
    return sorted({int(round(i)) for i in np.linspace(0, n - 1, min(count, n))})


def forward_speed(backbone: Backbone, plan: SplitPlan, keep: list[int], count: int = 3) -> ForwardSpeed | None:
    """Time the forward pass on ``count`` batches of ``plan``, after an untimed warm-up (see below).

    None when the plan has no batch.
    """
    chosen = sample_batches(plan, count)
    if not chosen:
        return None
    pad = backbone.tokenizer.pad_token_id
    # Warm-up, untimed: on a GPU every sampled shape once (a new shape loads kernels and grows the allocator,
    # which would otherwise be timed as computation); on a CPU the shortest batch is enough.
    for b in chosen if backbone.device.type == "cuda" else [len(plan.batches) - 1]:
        _forward(backbone, [plan.examples[i] for i in plan.batches[b]], pad)
    tokens, seconds, largest = 0, 0.0, 0.0
    for b in chosen:
        examples = [plan.examples[i] for i in plan.batches[b]]
        start = time.perf_counter()
        hidden = _forward(backbone, examples, pad)
        seconds += time.perf_counter() - start
        tokens += sum(ex.n_tokens for ex in examples)
        largest = max(largest, *(float(hidden[i].abs().max()) for i in keep))
        del hidden
    return ForwardSpeed(tokens, seconds, len(chosen), str(backbone.device), largest)


def forward_all(backbone: Backbone, plans: Mapping[str, SplitPlan], keep: list[int], held: HeldStates) -> ForwardSpeed:
    """Forward every planned batch of ``plans`` once, timed, and hold each batch's kept states in ``held``.

    What ``layercache plan`` runs on its labelled sample (:mod:`layercache.planning.sample`): the timing
    is the plan's forward speed, and the held states make every cache of the sample without another
    forward pass. A warm-up on the shortest batch comes first, untimed, as :func:`forward_speed` does.
    """
    pad = backbone.tokenizer.pad_token_id
    batches = [(name, b) for name, plan in plans.items() for b in range(len(plan.batches))]
    if batches:
        name, _ = batches[-1]
        _forward(backbone, [plans[name].examples[i] for i in plans[name].batches[-1]], pad)
    tokens, seconds, largest = 0, 0.0, 0.0
    for name, b in batches:
        examples = [plans[name].examples[i] for i in plans[name].batches[b]]
        ids, mask = pad_windows(examples, pad)
        start = time.perf_counter()
        hidden = _synchronised(backbone.hidden_states(ids, mask))
        seconds += time.perf_counter() - start
        tokens += sum(ex.n_tokens for ex in examples)
        largest = max(largest, *(float(hidden[i].abs().max()) for i in keep))
        held.hold(name, b, hidden, keep, token_index(examples, mask).to(hidden[keep[0]].device))
        del hidden
    return ForwardSpeed(tokens, seconds, len(batches), str(backbone.device), largest)


def _forward(backbone: Backbone, examples, pad_id: int):
    return _synchronised(backbone.hidden_states(*pad_windows(examples, pad_id)))


def _synchronised(hidden):
    """``hidden``, once every GPU that computed it has finished (the time taken is then the computation's)."""
    for device in {state.device for state in hidden if state.device.type == "cuda"}:  # a split model: every GPU
        torch.cuda.synchronize(device)
    return hidden


def disk_speed(folder: Path, probe_bytes: int = DISK_PROBE_BYTES) -> DiskSpeed:
    """Write ``probe_bytes`` to a new file in ``folder`` (fsync), drop it from the page cache, time reading it back.

    The file is created with ``O_EXCL`` under a unique hidden name and removed in every case, an
    error or Ctrl-C included. An ``OSError`` (no permission, no space) is the caller's to report.
    """
    folder = Path(folder)
    path = folder / f"{PROBE_PREFIX}{os.getpid()}-{secrets.token_hex(8)}.tmp"
    block = os.urandom(min(BLOCK_BYTES, max(probe_bytes, 1)))
    created = False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
        created = True
        try:
            start = time.perf_counter()
            left = probe_bytes
            while left > 0:
                left -= os.write(fd, block[:min(left, len(block))])
            os.fsync(fd)
            write_s = time.perf_counter() - start
        finally:
            os.close(fd)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            evicted = hasattr(os, "posix_fadvise")
            if evicted:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            start = time.perf_counter()
            read = 0
            while chunk := os.read(fd, BLOCK_BYTES):
                read += len(chunk)
            read_s = time.perf_counter() - start
        finally:
            os.close(fd)
    finally:
        if created:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
    return DiskSpeed(folder, probe_bytes, probe_bytes / max(write_s, 1e-9), read / max(read_s, 1e-9), evicted,
                     filesystem_type(folder))


def filesystem_type(folder: Path) -> str | None:
    """The type of the file system that holds ``folder`` (the longest mount point above it in /proc/mounts)."""
    try:
        target = str(Path(folder).resolve())
        best, kind = "", None
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                parts = line.split()
                if len(parts) < 3:
                    continue
                point = parts[1].replace("\\040", " ")
                inside = target == point or target.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, parts[2]
        return kind
    except OSError:
        return None
