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

:func:`plan_cache` measures the two rates instead of assuming them: it tokenizes and plans every
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
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..core.memory import available_bytes
from ..core.option_names import option
from ..core.threads import computes
from ..core.units import human_bytes, human_seconds
from ..errors import ConfigError
from ..progress import steps_progress
from ..store.codecs import AUTO, codec
from ..store.codecs.float16 import FP16_MAX
from ..store.paths import default_cache_path
from ..store.projection import check_projection_size
from .configuration import new_manifest
from .estimate import DISK_MARGIN, free_disk_bytes
from .housekeeping import nearest_existing
from .job import load_inputs
from .measure import DISK_PROBE_BYTES, DiskSpeed, ForwardSpeed, disk_speed, forward_speed
from .run import _check_options
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

__all__ = ["CachePlan", "plan_cache", "recommend", "SAMPLE_BATCHES"]

SAMPLE_BATCHES = 3
"""Planned batches timed by default (after one warm-up batch)."""


@dataclass
class CachePlan:
    """What :func:`plan_cache` found: the measured inputs, one priced row per choice, and the recommendation."""

    model: str
    device: str
    forward_dtype: str
    splits: dict[str, dict[str, int]]
    """split -> {"examples": n, "tokens": t} as planned."""
    epoch_split: str | None
    folder: Path
    """The existing folder nearest ``out``: where free space and disk speed were measured."""
    free_bytes: int
    space_bytes: int
    """What ``fits`` is judged against: the free space, or a smaller ``disk_budget``."""
    memory_bytes: int | None
    forward: ForwardSpeed | None
    disk: DiskSpeed | None
    storage_dtype: str
    """The storage dtype of the user's choice (``auto`` resolved, see :attr:`storage_dtype_reason`)."""
    storage_dtype_reason: str | None
    rows: list[PricedChoice]
    recommended: str
    recommendation: str
    notes: list[str] = field(default_factory=list)

    @property
    def yours(self) -> PricedChoice:
        """The row of the choice the given options make."""
        return next(r for r in self.rows if r.yours)

    def to_json(self) -> dict:
        """The plan as plain JSON (bytes, seconds, bytes per second; null where not measured)."""
        forward = self.forward
        disk = self.disk
        return {
            "model": self.model, "device": self.device, "forward_dtype": self.forward_dtype, "splits": self.splits,
            "epoch_split": self.epoch_split, "folder": str(self.folder), "free_bytes": self.free_bytes,
            "space_bytes": self.space_bytes, "disk_margin": DISK_MARGIN, "memory_available_bytes": self.memory_bytes,
            "forward": None if forward is None else {
                "tokens": forward.tokens, "seconds": forward.seconds, "batches": forward.batches,
                "tokens_per_second": forward.tokens_per_second, "largest_state_value": forward.largest},
            "disk": None if disk is None else {
                "probe_bytes": disk.probe_bytes, "write_bytes_per_second": disk.write_bytes_per_second,
                "read_bytes_per_second": disk.read_bytes_per_second, "evicted": disk.evicted,
                "filesystem": disk.filesystem},
            "storage_dtype": self.storage_dtype, "storage_dtype_reason": self.storage_dtype_reason,
            "choices": [r.to_json() for r in self.rows], "yours": self.yours.name,
            "recommended": self.recommended, "recommendation": self.recommendation, "notes": list(self.notes),
        }


@computes
def plan_cache(model: str = "minilm", data: DataSpec | None = None, storage: StorageSpec | None = None,
               batching: BatchSpec | None = None, *, out: str | os.PathLike | None = None, project: int | None = None,
               disk_budget: int | None = None, sample_batches: int = SAMPLE_BATCHES,
               disk_probe_bytes: int = DISK_PROBE_BYTES, allow_pickle: bool = False,
               progress: bool = True) -> CachePlan:
    """Price every way to store ``model``'s states of ``data`` before writing any: see the module for the model.

    The options are ``extract``'s (``data``, ``storage``, ``batching``, ``out``); ``project`` is the
    projection width the user has in mind (priced beside D/2, D/4, D/8 and marked as their choice);
    ``disk_budget`` judges ``fits`` against at most that many bytes. ``sample_batches`` planned batches
    are timed (0: no forward, timings not measured); ``disk_probe_bytes`` is the size of the temporary
    file that measures the disk. Writes nothing but that file, which it removes. ``progress`` shows the
    measurement running (:func:`~layercache.progress.steps_progress`).
    """
    data, storage, batching = data or DataSpec(), storage or StorageSpec(), batching or BatchSpec()
    if project is None:
        project = storage.project  # extract's own --project
    pooling = _check_options(storage.store, storage.pooling, storage.storage_dtype, storage.shard_bytes, data.limit)
    _check_plan_options(project, disk_budget, sample_batches, disk_probe_bytes)
    out = Path(out).expanduser() if out is not None else default_cache_path(model, data.dataset or "files",
                                                                            data.config)
    with steps_progress(progress, 3, "plan") as step:
        step("loading the data and the model, tokenizing")
        inputs = load_inputs(model, data, storage, batching, allow_pickle=allow_pickle)
        backbone, plans = inputs.backbone, inputs.plans
        if project is not None:
            check_projection_size(project, backbone.hidden_size)  # the sentence extract would give
        first = next((n for n, p in plans.items() if p.batches), None)
        step("timing the forward pass")
        forward = forward_speed(backbone, plans[first], inputs.keep, sample_batches) \
            if first and sample_batches else None
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
    recommended, text = recommend(rows, space, preferred16=dtype if codec(dtype).bytes_per_value == 2 else "float16")
    return CachePlan(
        model=manifest.model.name, device=str(backbone.device), forward_dtype=manifest.model.forward_dtype,
        splits={n: {"examples": len(p.examples), "tokens": p.n_tokens} for n, p in plans.items()},
        epoch_split=split, folder=folder, free_bytes=free, space_bytes=space, memory_bytes=memory, forward=forward,
        disk=disk, storage_dtype=dtype, storage_dtype_reason=reason, rows=rows, recommended=recommended.name,
        recommendation=text, notes=notes)


def _check_plan_options(project, disk_budget, sample_batches, disk_probe_bytes) -> None:
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


def describe_measurements(plan: CachePlan) -> list[tuple[str, str]]:
    """(what, value) lines of the measured inputs, for the command's output."""
    forward, disk = plan.forward, plan.disk
    lines = [("device", f"{plan.device} ({plan.forward_dtype} forward)")]
    lines.append(("forward", "not measured" if forward is None else
                  f"{forward.tokens_per_second:,.0f} tokens/s ({forward.tokens:,} tokens in {forward.batches} planned "
                  f"batch{'es' if forward.batches != 1 else ''}, {human_seconds(forward.seconds)})"))
    lines.append(("tokens", ", ".join(f"{n}: {s['examples']:,} examples, {s['tokens']:,} tokens"
                                      for n, s in plan.splits.items())))
    if disk is None:
        lines.append(("disk", "not measured"))
    else:
        fs = f", {disk.filesystem}" if disk.filesystem else ""
        lines.append(("disk", f"read {disk.read_bytes_per_second / 1e6:,.0f} MB/s cold, write "
                              f"{disk.write_bytes_per_second / 1e6:,.0f} MB/s with fsync "
                              f"({human_bytes(disk.probe_bytes)} probe{fs})"))
    space = ("" if plan.space_bytes == plan.free_bytes else
             f" (judged against a budget of {human_bytes(plan.space_bytes)})")
    lines.append(("free", f"{human_bytes(plan.free_bytes)} at {plan.folder}{space}"))
    lines.append(("memory", "unknown" if plan.memory_bytes is None else f"{human_bytes(plan.memory_bytes)} available"))
    if plan.storage_dtype_reason:
        lines.append(("storage dtype", plan.storage_dtype_reason))
    return lines
