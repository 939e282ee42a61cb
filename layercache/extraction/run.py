"""The extraction run: data + frozen backbone -> a resumable cache of every layer's states.

Order of work, cheapest checks first so bad input fails in a second, not after a model load:
options -> output folder -> data -> backbone -> tokenization and batch plan -> compare with an
existing cache (resume / done / refuse) -> size estimate and disk check -> forward passes,
shard by shard, updating the manifest atomically after each commit.

This module only orchestrates; each step lives beside it: the options (:mod:`.specs`), the
cache folder (:mod:`.housekeeping`), the plan (:mod:`.plan`), ``--storage-dtype auto``
(:mod:`.dtype_probe`), the manifest and its hash (:mod:`.configuration`), the size estimate
(:mod:`.estimate`), shard verification and repair (:mod:`.repair`) and the statistics read back
from the shards (:mod:`.stats`).
"""

from __future__ import annotations

import functools
import logging
import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..backbone.loader import DEFAULT_MODEL, load_backbone
from ..core.devices import DEFAULT_DEVICE
from ..core.extraction_defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BATCH_TOKENS,
    DEFAULT_DATASET,
    DEFAULT_FORWARD_DTYPE,
    DEFAULT_POOLING,
    DEFAULT_SHARD_BYTES,
    DEFAULT_STORE,
)
from ..core.layers import DOES_NOT_EXIST, LayerSpec, resolve_layers
from ..core.units import human_bytes
from ..errors import CacheMismatchError, ConfigError, InsufficientDiskError
from ..progress import extraction_progress
from ..sources.datasets import load_dataset_records
from ..store.dtypes import AUTO, check_storage_dtype
from ..store.manifest import Manifest, write_manifest
from ..store.paths import default_cache_path, record_latest
from ..store.schema import POOLING_MODES, STORE_MODES
from ..store.writer import ExtractedBatch
from .background import BackgroundWriter, BufferPool, writer_thread_helps
from .configuration import difference, new_manifest
from .dtype_probe import ProbeStates, resolve_storage_dtype
from .estimate import DISK_MARGIN, estimate_bytes, free_disk_bytes, remaining_bytes
from .forward import run_batch
from .housekeeping import (
    DamagedCache,
    check_split_names,
    clean_strays,
    inspect_output,
    locked_output,
    nearest_existing,
    remove_cache_files,
    write_errors,
)
from .memory import HeapTrimmer
from .packing import StatePacker, storage_tensor
from .plan import SplitPlan, plan_split
from .repair import reextract_shard, verify_shards
from .shards import SplitShards
from .side_files import ensure_side_files
from .specs import BatchSpec, DataSpec, StorageSpec, merged_spec
from .stats import split_stats

__all__ = ["extract", "ExtractResult", "DataSpec", "StorageSpec", "BatchSpec", "DEFAULT_SHARD_BYTES",
           "STORE_MODES", "estimate_bytes", "remaining_bytes", "free_disk_bytes", "write_errors"]

log = logging.getLogger("layercache")

IN_FLIGHT_BATCHES = 2  # token-state buffers: one being filled by the forward side, one being written


@dataclass
class ExtractResult:
    """What :func:`extract` did."""

    path: Path
    manifest: Manifest
    resumed: bool = False
    """True when the run continued a cache a previous run had started."""
    already_complete: bool = False
    """True when the cache was already complete and nothing was computed."""
    repaired: list[str] = field(default_factory=list)
    """Shards (``split/shard-NNNNN.h5``) that failed their checksum and were extracted again."""


def extract(
    model: str = DEFAULT_MODEL,
    dataset: str | None = DEFAULT_DATASET,
    out: str | os.PathLike | None = None,
    *,
    data: DataSpec | None = None,
    storage: StorageSpec | None = None,
    batching: BatchSpec | None = None,
    dataset_config: str | None = None,
    splits: Sequence[str] | None = None,
    split_files: Mapping[str, str] | None = None,
    text_columns: Sequence[str] | None = None,
    label_columns: Sequence[str] | None = None,
    no_labels: bool = False,
    task_kind: str | None = None,
    limit: int | None = None,
    layers: LayerSpec | Sequence[LayerSpec] | None = None,
    store: str = DEFAULT_STORE,
    pooling: Sequence[str] = DEFAULT_POOLING,
    storage_dtype: str = AUTO,
    mean_skip_first: bool = False,
    dtype: str = DEFAULT_FORWARD_DTYPE,
    device: str = DEFAULT_DEVICE,
    max_length: int | None = None,
    stride: int | None = None,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    overwrite: bool = False,
    repair: bool = False,
    allow_pickle: bool = False,
    progress: bool = True,
) -> ExtractResult:
    """Run ``model`` frozen over ``dataset`` once and write every kept layer's states to a cache.

    ``model`` is a hub id, a bundled alias (``minilm``) or a local folder; ``dataset`` is
    ``builtin``, a hub id, a local csv/tsv/jsonl/parquet/CoNLL file, or a saved datasets folder
    (``split_files`` maps split names to several local files). Without ``out`` the cache goes to
    :func:`layercache.store.paths.default_cache_path`. Running the same call again resumes an interrupted
    run from its last committed shard, after re-reading every committed shard against its checksum
    and re-extracting any that changed. A different configuration into an existing cache is refused;
    ``overwrite`` deletes the cache's files and starts afresh (whatever its configuration), and
    ``repair`` re-extracts only the shards of a cache (complete or not) whose checksums fail.
    ``allow_pickle`` lets a model with only pickle weights (``pytorch_model.bin``) load; see
    :func:`~layercache.backbone.loader.load_backbone`.

    The options come grouped as ``data`` (:class:`~.specs.DataSpec`: ``dataset`` ... ``limit``),
    ``storage`` (:class:`~.specs.StorageSpec`: ``layers`` ... ``shard_bytes``) and ``batching``
    (:class:`~.specs.BatchSpec`: ``batch_tokens`` ... ``device``), or as the flat keyword
    arguments of the same names (``dataset_config`` is ``DataSpec.config``), which build them; a
    group given as a spec takes none of its flat arguments.

    ``storage_dtype="auto"`` stores float16 unless one probe batch (the longest examples of the
    first split) has states beyond the float16 range, then bfloat16 (see :mod:`.dtype_probe`);
    float16 values beyond the range are clamped to +-65,504 and counted (``extraction.fp16_overflow``).
    ``mean_skip_first`` leaves each example's first token (a decoder's BOS / attention sink) out of
    the mean pooled vector when it has more than one; the manifest records it as
    ``storage.mean_skip_first`` so heads pool token states the same way.

    One process writes a cache folder at a time (:class:`~layercache.store.lock.CacheLock`); a
    second gets :class:`~layercache.errors.CacheLockedError` naming the first.
    """
    data = merged_spec(DataSpec, data, dict(
        dataset=dataset, config=dataset_config, splits=splits, split_files=split_files, text_columns=text_columns,
        label_columns=label_columns, no_labels=no_labels, task_kind=task_kind, limit=limit), "data")
    storage = merged_spec(StorageSpec, storage, dict(
        layers=layers, store=store, pooling=pooling, storage_dtype=storage_dtype, mean_skip_first=mean_skip_first,
        shard_bytes=shard_bytes), "storage")
    batching = merged_spec(BatchSpec, batching, dict(
        batch_tokens=batch_tokens, batch_size=batch_size, max_length=max_length, stride=stride, dtype=dtype,
        device=device), "batching")
    return _extract(model, data, storage, batching, out, overwrite=overwrite, repair=repair,
                    allow_pickle=allow_pickle, progress=progress)


def _extract(model: str, data: DataSpec, storage: StorageSpec, batching: BatchSpec, out: str | os.PathLike | None,
             *, overwrite: bool, repair: bool, allow_pickle: bool, progress: bool) -> ExtractResult:
    """:func:`extract` with its options grouped."""
    pooling = _check_options(storage.store, storage.pooling, storage.storage_dtype, storage.shard_bytes, data.limit)
    if overwrite and repair:
        raise ConfigError("--overwrite starts afresh and --repair keeps the good shards; pass only one of them.")
    check_split_names([*(data.splits or []), *(data.split_files or {})])  # before any folder is touched
    out = Path(out).expanduser() if out is not None else default_cache_path(
        model, data.dataset or "files", data.config)
    with locked_output(out):
        existing = inspect_output(out, overwrite)

        records = load_dataset_records(
            data.dataset, config=data.config, splits=list(data.splits) if data.splits else None,
            split_files=data.split_files,
            text_columns=list(data.text_columns) if data.text_columns else None,
            label_columns=list(data.label_columns) if data.label_columns else None,
            no_labels=data.no_labels, task_kind=data.task_kind, limit=data.limit)
        check_split_names(records.splits)  # names the source chose (a hub's, a saved dataset's)
        words_input = any(s.words is not None for s in records.splits.values())
        backbone = load_backbone(model, device=batching.device, dtype=batching.dtype, max_length=batching.max_length,
                                 words_input=words_input, allow_pickle=allow_pickle)
        layers = None if not storage.layers and not isinstance(storage.layers, numbers.Integral) else storage.layers
        keep = resolve_layers(layers, backbone.layer_names, sort=True, refusal=DOES_NOT_EXIST)

        plans = {name: plan_split(backbone, split, batching.stride, batching.batch_tokens, batching.batch_size)
                 for name, split in records.splits.items()}
        storage_dtype, dtype_choice, probe = resolve_storage_dtype(
            storage.storage_dtype, existing if isinstance(existing, Manifest) and not overwrite else None,
            backbone, records, plans, keep)
        manifest = new_manifest(backbone, records, plans, keep=keep, store=storage.store, pooling=pooling,
                                storage_dtype=storage_dtype, mean_skip_first=storage.mean_skip_first,
                                stride=batching.stride, batch_tokens=batching.batch_tokens,
                                batch_size=batching.batch_size, shard_bytes=storage.shard_bytes, limit=data.limit,
                                dtype_choice=dtype_choice)

        resumed, damaged = False, {}
        if isinstance(existing, DamagedCache):
            remove_cache_files(out, existing.split_names)
        elif existing is not None and overwrite:
            remove_cache_files(out, list(existing.splits))  # starts afresh, even with the same configuration
        elif existing is not None:
            if existing.config_hash != manifest.config_hash:
                raise CacheMismatchError(
                    f"{out} already holds a cache made with a different {difference(existing, manifest)}; "
                    "pass --overwrite to replace it, or choose another --out."
                )
            if existing.complete and not repair:
                log.info("The cache at %s is already complete; nothing to do.", out)
                _side_files(out, existing, backbone, allow_pickle)  # a cache older than them gets them now
                record_latest(out)
                return ExtractResult(out, existing, already_complete=True)
            manifest, resumed = existing, True
            # A resume (or --repair) trusts no committed shard it has not re-read: a shard damaged since
            # its commit would otherwise be kept, and its statistics would break the split's.
            damaged = verify_shards(out, manifest, progress)
            if repair and not damaged and manifest.complete:
                log.info("All %d shards of %s match their checksums; nothing to repair.",
                         sum(len(s.shards) for s in manifest.splits.values()), out)
                _side_files(out, manifest, backbone, allow_pickle)
                record_latest(out)
                return ExtractResult(out, manifest, already_complete=True)
            if damaged:
                log.warning("Re-extracting %d damaged shard(s): %s.", sum(map(len, damaged.values())),
                            ", ".join(manifest.splits[n].shards[i].file for n, ix in damaged.items() for i in ix))
            else:
                log.info("Resuming the cache at %s (%s).", out, _done_text(manifest))
        elif repair:
            raise ConfigError(f"There is no cache at {out} to repair; run the command without --repair to create it.")

        for name, plan in plans.items():
            if plan.n_truncated:
                log.warning("%s: %d of %d examples are longer than %d tokens and were truncated "
                            "(use --stride to keep every token).", name, plan.n_truncated, len(plan.examples),
                            backbone.max_length)
        _check_disk(out, manifest, plans)

        for name in damaged:  # the cache is not complete until every damaged shard is rewritten
            manifest.splits[name].complete = False
        if damaged:
            manifest.complete = False
        if probe is not None and (damaged or manifest.splits[probe.split].batches_written):
            probe = None  # its batch is written already: free its states now
        with write_errors(out):
            write_manifest(out, manifest)
        _side_files(out, manifest, backbone, allow_pickle)  # after the manifest: the folder is a cache by then
        record_latest(out)
        stored = manifest.storage
        packer = StatePacker(len(keep), backbone.hidden_size, storage_dtype=stored.dtype,
                             pooling=stored.pooling, device=backbone.device,
                             mean_skip_first=stored.skips_first_in_mean)
        threaded = writer_thread_helps(backbone.device)
        buffers = (_storage_buffers(plans, len(keep), backbone.hidden_size, stored.dtype,
                                    IN_FLIGHT_BATCHES if threaded else 1)
                   if stored.stores_tokens else None)
        for name, indices in damaged.items():
            for index in indices:
                with write_errors(out):
                    reextract_shard(backbone, records, name, plans[name], manifest, out, keep, packer, buffers,
                                    index)
        with extraction_progress(progress) as bars:
            for name, plan in plans.items():
                _extract_split(backbone, records, name, plan, manifest, out, keep, bars, packer, buffers, threaded,
                               probe)
        manifest.complete = True
        with write_errors(out):
            write_manifest(out, manifest)
    overflow = manifest.extraction.overflow
    if overflow:
        log.warning("%s state values exceeded the float16 range and were clamped to ±65,504; re-extract with "
                    "--storage-dtype bfloat16 --overwrite to keep them.", f"{overflow:,}")
    return ExtractResult(out, manifest, resumed=resumed,
                         repaired=[manifest.splits[n].shards[i].file for n, ix in damaged.items() for i in ix])


# --- checks ------------------------------------------------------------------------------
def _check_options(store, pooling, storage_dtype, shard_bytes, limit) -> list[str]:
    if store not in STORE_MODES:
        raise ConfigError(f"--store {store!r} is not known; choose one of {', '.join(STORE_MODES)}.")
    pooling = list(dict.fromkeys(pooling or []))
    bad = [m for m in pooling if m not in POOLING_MODES]
    if bad:
        raise ConfigError(f"Pooling mode {bad[0]!r} is not known; choose from {', '.join(POOLING_MODES)}.")
    if store == "pooled" and not pooling:
        raise ConfigError("--store pooled needs at least one --pooling mode (mean, first or last).")
    check_storage_dtype(storage_dtype, allow_auto=True)
    if shard_bytes < 1:
        raise ConfigError(f"--shard-size must be positive, got {shard_bytes}.")
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be at least 1, got {limit}.")
    return pooling


def _check_disk(out: Path, manifest: Manifest, plans: dict[str, SplitPlan] | None = None) -> None:
    need = estimate_bytes(manifest, plans)
    remaining = remaining_bytes(manifest, plans)
    free = free_disk_bytes(out)
    log.info("Estimated cache size: %s (%s still to write); %s free at %s.", human_bytes(need),
             human_bytes(remaining), human_bytes(free), nearest_existing(out))
    if remaining * DISK_MARGIN > free:
        raise InsufficientDiskError(
            f"The cache needs about {human_bytes(remaining * DISK_MARGIN)} but only {human_bytes(free)} is free "
            f"at {nearest_existing(out)}; free space, choose another --out, keep fewer --layers, "
            "or use --store pooled."
        )


def _side_files(out: Path, manifest: Manifest, backbone, allow_pickle: bool) -> None:
    """Write the vocabulary and logit-lens files the cache lacks or that changed (see :mod:`.side_files`),
    and the manifest that lists them."""
    with write_errors(out):
        if ensure_side_files(out, manifest, backbone, allow_pickle=allow_pickle):
            write_manifest(out, manifest)


def _storage_buffers(plans: dict[str, SplitPlan], n_states: int, dim: int, storage_dtype: str,
                     count: int) -> BufferPool:
    """``count`` reused host buffers for batches' token states, each big enough for the largest planned batch.

    With a writer thread, two: one filled by the forward side while the writer appends the other.
    """
    most = max((sum(plan.examples[i].n_tokens for i in batch) for plan in plans.values() for batch in plan.batches),
               default=1)
    return BufferPool(count, lambda: storage_tensor(most, n_states, dim, storage_dtype))


def _done_text(manifest: Manifest) -> str:
    return ", ".join(f"{n}: {s.rows_written}/{s.n_examples}" for n, s in manifest.splits.items())


# --- the work ----------------------------------------------------------------------------
def _extract_split(backbone, records, name, plan: SplitPlan, manifest: Manifest, out: Path, keep, bars,
                   packer: StatePacker, buffers: BufferPool | None, threaded: bool,
                   probe: ProbeStates | None = None) -> None:
    """Forward the split's remaining batches; the writer appends them to shards and commits them (see background.py).

    Whatever stops it (a failed write, NaN from the model, Ctrl-C) removes the shard being written
    and keeps the committed ones, so the same command resumes; a failed write arrives as
    :class:`~layercache.errors.CacheWriteError`.
    """
    with write_errors(out):
        _extract_split_batches(backbone, records, name, plan, manifest, out, keep, bars, packer, buffers, threaded,
                               probe)


def _extract_split_batches(backbone, records, name, plan: SplitPlan, manifest: Manifest, out: Path, keep, bars,
                           packer: StatePacker, buffers: BufferPool | None, threaded: bool,
                           probe: ProbeStates | None = None) -> None:
    info = manifest.splits[name]
    clean_strays(out, name, info)  # also checks that the split folder is a real folder inside the cache
    split_records = records.splits[name]
    task = bars.add_task(name, total=info.n_examples, completed=info.rows_written,
                         completed_start=info.rows_written, tokens=0, tokens_start=0)
    shards = SplitShards(out, manifest, name, n_states=len(keep), dim=backbone.hidden_size,
                         n_batches=len(plan.batches))
    trimmer = HeapTrimmer()
    row = info.rows_written  # cache row of the batch's first example, for a NaN refusal
    try:
        with BackgroundWriter(threaded=threaded) as writer:
            for b in range(info.batches_written, len(plan.batches)):
                examples = [plan.examples[i] for i in plan.batches[b]]
                buffer = None if buffers is None else buffers.take(writer.check)
                batch = run_batch(backbone, examples, split_records, keep=keep, tasks=manifest.tasks,
                                  packer=packer, out=buffer, split=name, first_row=row,
                                  hidden=probe.take(name, b) if probe is not None else None)
                row += len(examples)
                writer.submit(functools.partial(_write_batch, shards, b, batch, buffers, buffer))
                trimmer.batch_done()
                bars.update(task, advance=batch.n_examples,
                            tokens=bars.tasks[task].fields["tokens"] + batch.n_tokens)
    except BaseException:
        shards.abort()  # the writer thread has stopped: nothing else touches the shard
        raise
    info.stats, overflow = split_stats(out, info, manifest.layer_names)
    # Per split, then the total: a resume recomputes every split's count, so adding would double it.
    counts = manifest.extraction
    counts.fp16_overflow_by_split = {**(counts.fp16_overflow_by_split or {}), name: overflow}
    counts.fp16_overflow = sum(counts.fp16_overflow_by_split.values())
    info.complete = True
    write_manifest(out, manifest)


def _write_batch(shards: SplitShards, b: int, batch: ExtractedBatch, buffers: BufferPool | None, buffer) -> None:
    """The writer thread's job for one batch: append it, free its buffer, commit the shard if complete."""
    try:
        complete = shards.append(b, batch)
    finally:
        if buffer is not None:  # the data is in the file now; the forward side may refill it
            buffers.give_back(buffer)
    if complete:
        shards.commit()
