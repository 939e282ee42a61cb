"""A plan before writing: what each way of storing a cache costs, on this machine, for this data.

The model of cost
-----------------
A transformer's forward pass costs about ``2 x parameters`` floating-point operations per token
(plus attention, which grows with the length): RoBERTa-large's 355M parameters make ~0.7 GFLOP a
token. Its states are ``(layers + 1) x width x bytes`` per token: 25 x 1024 x 2 = 51 KB a token
in float16, about a tenth of a floating-point operation per byte stored. So the same states are
either computed again (at the device's FLOP rate) or read back (at the disk's, or the page
cache's, bytes per second). On a CPU the forward is slow and a cache pays after an epoch or two;
on a GPU a forward runs at hundreds of TFLOP/s while a disk reads a few GB/s, so reading full
states can be *slower* than recomputing them, and only a smaller cache (int8, a projection to
``K < D`` dimensions, pooled vectors) or one that fits in memory is worth writing.

:func:`layercache.planning.plan_cache` measures the two rates instead of assuming them (and each
choice's quality on the user's labels), and :func:`price_choices` prices every choice from them. The plan
tokenizes and plans every
split exactly as ``extract`` would (no full forward), times the forward on a few planned batches
of the first split on the chosen device (:func:`.measure.forward_speed`), measures the disk's
write and cold read speeds beside ``out`` (:func:`.measure.disk_speed`), and reads the free space
and the memory available. For each choice (:mod:`.storage_choices`):

- *extraction* = forward time of every split's tokens + the cache's bytes at the write speed
  (the two overlap on a GPU run, so this is an upper bound; a projection's basis fit is not counted);
- *epoch read* = the bytes one epoch reads (the ``train`` split, else the largest) at the cold read
  speed, the pessimistic case: an epoch that fits in the page cache is read at memory speed after
  the first, which the row's notes say;
- *recompute* = the forward time of that split's tokens: one epoch without a cache;
- *pays after* = the first whole number of epochs ``E`` with
  ``extraction + E x read < shared + E x recompute``, i.e. ``E > (extraction - shared) / (recompute - read)``,
  where *shared* is the forward time of the other splits, which a run without a cache spends too
  (evaluating them once); never when reading is not faster than recomputing.

The recommendation is the most faithful choice that fits and pays: token states before pooled
vectors, the full width before a projection (wider first), more bytes per value before fewer
(float32, then the 16-bit type ``--storage-dtype auto`` would pick, then int8); no cache when none
fits or pays. The user's own choice is never changed: the plan says how it differs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from ..core.memory import available_bytes
from ..core.option_names import option
from ..core.option_specs import check_options
from ..core.units import human_bytes
from ..errors import ConfigError
from ..store.manifest import Manifest
from ..store.projection import check_projection_size
from ..store.storage import AUTO, FP16_MAX
from .configuration import new_manifest
from .estimate import free_disk_bytes
from .housekeeping import nearest_existing
from .job import JobInputs
from .measure import DISK_PROBE_BYTES, DiskSpeed, ForwardSpeed, disk_speed
from .run import check_storage
from .specs import BatchSpec, DataSpec, StorageSpec
from .storage_choices import (
    NO_CACHE,
    PricedChoice,
    epoch_split,
    recommend,
    size_choices,
    standard_choices,
    your_choice,
)

__all__ = ["PricedInputs", "price_choices", "recommend", "SAMPLE_BATCHES", "check_plan_options"]

SAMPLE_BATCHES = 3
"""Planned batches timed by default (after one warm-up batch)."""


@dataclass
class PricedInputs:
    """What :func:`price_choices` measured and sized: the inputs of a plan's table, one priced row per choice."""

    manifest: Manifest
    """The manifest the given options would write (the storage dtype resolved as extract resolves ``auto``)."""
    folder: Path
    """The existing folder nearest ``out``: where free space and disk speed were measured."""
    free_bytes: int
    space_bytes: int
    """What ``fits`` is judged against: the free space, or a smaller ``disk_budget``."""
    memory_bytes: int | None
    forward: ForwardSpeed | None
    disk: DiskSpeed | None
    storage_dtype: str
    storage_dtype_reason: str | None
    rows: list[PricedChoice]
    epoch_split: str | None
    notes: list[str] = field(default_factory=list)


def price_choices(inputs: JobInputs, data: DataSpec, storage: StorageSpec, batching: BatchSpec, *, out: Path,
                  project: int | None, disk_budget: int | None, forward: ForwardSpeed | None,
                  disk_probe_bytes: int = DISK_PROBE_BYTES, step=lambda description: None) -> PricedInputs:
    """Measure the disk at ``out`` and price every way to store ``inputs`` (loaded data, backbone and plans) at the
    ``forward`` speed measured on them (None: not measured): see the module for the model of cost.

    ``step(description)`` is called before the disk is measured (a progress display).
    """
    backbone, plans = inputs.backbone, inputs.plans
    check_options(DataSpec, vars(data))
    pooling = check_storage(storage)
    if project is not None:
        check_projection_size(project, backbone.hidden_size)  # the sentence extract would give
    folder = nearest_existing(out)
    free = free_disk_bytes(out)
    step(f"measuring the disk at {folder}")
    notes = []
    disk = None
    try:
        disk = disk_speed(folder, max(min(disk_probe_bytes, free // 4), 1))
    except OSError as err:
        notes.append(f"disk speed not measured: {err.strerror or err} at {folder}")
    dtype, reason = _storage_dtype(storage.storage_dtype, forward)
    manifest = new_manifest(backbone, inputs.records, plans, keep=inputs.keep, store=storage.store, pooling=pooling,
                            storage_dtype=dtype, mean_skip_first=storage.mean_skip_first, stride=batching.stride,
                            batch_tokens=batching.batch_tokens, batch_size=batching.batch_size,
                            shard_bytes=storage.shard_bytes, limit=data.limit, dtype_choice=reason)
    space = min(free, disk_budget) if disk_budget else free
    memory = available_bytes()
    yours = your_choice(manifest, project)
    if project and storage.storage_dtype == AUTO:  # the projected choices are priced as int8 + project K
        yours = dataclasses.replace(yours, dtype="int8")
    rows = size_choices(manifest, plans, space, standard_choices(manifest, yours, project), yours)
    split = epoch_split(manifest)
    total_tokens = sum(p.n_tokens for p in plans.values())
    epoch_tokens = plans[split].n_tokens if split else 0
    for row in rows:
        _time_row(row, forward, disk, total_tokens, epoch_tokens, memory)
    notes += _measurement_notes(forward, disk, split)
    notes += _memory_notes(rows, memory)
    return PricedInputs(manifest, folder, free, space, memory, forward, disk, dtype, reason, rows, split, notes)


def check_plan_options(project, disk_budget, sample_batches, disk_probe_bytes) -> None:
    """Refuse, in one sentence each, a plan's own options that cannot be used."""
    if project is not None and project < 1:
        raise ConfigError(f"{option('project')} must be at least 1, got {project}.")
    if disk_budget is not None and disk_budget < 1:
        raise ConfigError(f"{option('disk_budget')} must be positive, got {disk_budget}.")
    if sample_batches < 0:
        raise ConfigError(f"{option('sample_batches')} must be 0 or more, got {sample_batches}.")
    if disk_probe_bytes < 1:
        raise ConfigError(f"The disk probe must write at least one byte, got {disk_probe_bytes}.")


def _storage_dtype(requested: str, forward: ForwardSpeed | None) -> tuple[str, str | None]:
    """The user's storage dtype with ``auto`` resolved as extract would, from the timed batches' largest value."""
    if requested != AUTO:
        return requested, None
    if forward is None:
        return "float16", "auto: float16 (not probed: no forward pass was timed)"
    if forward.largest > FP16_MAX:
        return "bfloat16", f"auto: a timed batch has a state value of {forward.largest:,.0f}, beyond float16's range"
    return "float16", "auto: the timed batches' states are within float16's range"


def _time_row(row: PricedChoice, forward: ForwardSpeed | None, disk: DiskSpeed | None, total_tokens: int,
              epoch_tokens: int, memory: int | None) -> None:
    """Fill a sized row's timings (those that were measured) and its page-cache note."""
    if forward is not None:
        row.recompute_s = forward.seconds_for(epoch_tokens)
        row.shared_s = forward.seconds_for(total_tokens - epoch_tokens)
    if row.choice.store == NO_CACHE:
        row.extraction_s = 0.0
        return
    if forward is not None and disk is not None:
        row.extraction_s = forward.seconds_for(total_tokens) + row.bytes / disk.write_bytes_per_second
    if disk is not None:
        row.epoch_read_s = row.epoch_bytes / disk.read_bytes_per_second
    if memory is not None:
        row.epoch_in_memory = row.epoch_bytes <= memory


def _memory_notes(rows: list[PricedChoice], memory: int | None) -> list[str]:
    """Which choices' epochs fit in the page cache: after the first epoch they are read at memory speed."""
    cached = [r.name for r in rows if r.epoch_in_memory and r.choice.store != NO_CACHE]
    if memory is None or not cached:
        return []
    which = "every cache's epoch fits" if len(cached) == sum(r.choice.store != NO_CACHE for r in rows) else \
        f"an epoch of {', '.join(cached)} fits"
    return [f"{which} in the page cache ({human_bytes(memory)} available): after the first epoch it is read at "
            "memory speed, faster than the cold read shown"]


def _measurement_notes(forward: ForwardSpeed | None, disk: DiskSpeed | None, split: str | None) -> list[str]:
    notes = []
    if forward is None:
        notes.append("forward speed not measured: extraction and recompute times are unknown")
    if split is not None:
        notes.append(f"an epoch is one pass over the {split!r} split; extraction covers every split, and the "
                     "other splits' forward is counted once without a cache too")
    if disk is not None:
        if not disk.evicted:
            notes.append("this system cannot drop a file from the page cache (no posix_fadvise): the read "
                         "speed may be memory's")
        if disk.filesystem in ("tmpfs", "ramfs"):
            notes.append(f"the folder is on {disk.filesystem}: memory, not a disk")
        notes.append("the read speed is sequential; a head's shuffled batches read smaller ranges and may be slower")
    return notes
