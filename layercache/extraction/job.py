"""Preparing an extraction run: everything one process does before writers start, under the cache's lock.

Cheapest checks first, so bad input fails in a second, not after a model load: output folder ->
data -> backbone -> tokenization and batch plan -> compare with an existing cache (merge what its
writers committed, fit a damaged projection again, then resume / done / refuse) -> re-read committed
shards against their checksums and re-extract damaged ones -> size estimate and disk check ->
manifest and side files (a missing or changed one written again).
The result is an :class:`ExtractionJob`: what every writer needs (:mod:`.run` writes a share of it,
then merges).
"""

from __future__ import annotations

import contextlib
import logging
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..backbone.loader import Backbone, load_backbone
from ..core.confine import OwnedFolder
from ..core.layers import DOES_NOT_EXIST, resolve_layers
from ..core.option_names import option
from ..core.units import human_bytes
from ..errors import CacheMismatchError, ConfigError, InsufficientDiskError
from ..sources.datasets import DatasetRecords, load_dataset_records
from ..store.manifest import Manifest, read_manifest, write_manifest
from ..store.parts import merge_parts, remove_parts
from ..store.paths import record_latest
from ..store.projection import PROJECTION_NAME, read_projection, write_projection
from ..store.storage import check_width
from .background import BufferPool, writer_thread_helps
from .configuration import difference, new_manifest
from .dtype_probe import resolve_storage_dtype
from .estimate import DISK_MARGIN, estimate_bytes, free_disk_bytes, remaining_bytes
from .held import HeldStates, held_budget
from .housekeeping import (
    DamagedCache,
    check_split_names,
    clean_strays,
    inspect_output,
    nearest_existing,
    remove_cache_files,
    write_errors,
)
from .packing import StatePacker, storage_buffer
from .plan import SplitPlan, plan_split
from .projection_fit import fit_projection
from .repair import drop_unplanned_shards, reextract_shard, verify_shards
from .shares import remaining_batches
from .side_files import ensure_side_files, restore_projection
from .specs import BatchSpec, DataSpec, StorageSpec
from .storage_choices import recommend, size_choices, sizes_text, standard_choices, your_choice

log = logging.getLogger("layercache")

IN_FLIGHT_BATCHES = 2  # token-state buffers: one being filled by the forward side, one being written


@dataclass
class ExtractResult:
    """What :func:`~layercache.extraction.run.extract` did."""

    path: Path
    manifest: Manifest
    resumed: bool = False
    """True when the run continued a cache a previous run had started."""
    already_complete: bool = False
    """True when the cache was already complete and nothing was computed."""
    repaired: list[str] = field(default_factory=list)
    """Shards (``split/shard-NNNNN.h5``) that failed their checksum and were extracted again."""
    rewritten: list[str] = field(default_factory=list)
    """Side files (``vocab.json``, ``lens.safetensors``, ``projection.safetensors``) that were missing or
    changed and were written again (the projection only as the very bytes the manifest recorded)."""

    @property
    def quality(self) -> dict | None:
        """What the stored states cost on the data's labels, as the manifest records it
        (``extraction.quality``, :func:`layercache.planning.extract`); None when not measured."""
        return self.manifest.extraction.quality


@dataclass
class ExtractionJob:
    """A prepared run: the loaded backbone and data, the plans and the manifest every writer works from."""

    out: Path
    backbone: Backbone
    records: DatasetRecords
    plans: dict[str, SplitPlan]
    manifest: Manifest
    keep: list[int]
    """Kept hidden states, in storage order."""
    packer: StatePacker
    buffers: BufferPool | None
    """Reused host buffers for token states (None for a pooled-only cache)."""
    threaded: bool
    """Whether shards are written on a background thread (:func:`.background.writer_thread_helps`)."""
    held: HeldStates
    """Forward passes that ran while preparing (the ``--storage-dtype auto`` probe's, the ``--project``
    fit's), reused for their batches by the process that made them; empty in every other writer."""
    resumed: bool = False
    repaired: list[str] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)


@dataclass
class JobInputs:
    """What every writer loads itself before it extracts: the data, the frozen backbone, the kept states, the plans."""

    records: DatasetRecords
    backbone: Backbone
    keep: list[int]
    plans: dict[str, SplitPlan]


def load_inputs(model: str, data: DataSpec, storage: StorageSpec, batching: BatchSpec, *,
                allow_pickle: bool) -> JobInputs:
    """Load the data and the backbone and plan every split (the same plan in every writer: it is deterministic)."""
    records = load_dataset_records(
        data.dataset, config=data.config, splits=list(data.splits) if data.splits else None,
        split_files=data.split_files, text_columns=list(data.text_columns) if data.text_columns else None,
        label_columns=list(data.label_columns) if data.label_columns else None,
        no_labels=data.no_labels, task_kind=data.task_kind, limit=data.limit)
    check_split_names(records.splits)  # names the source chose (a hub's, a saved dataset's)
    words_input = any(s.words is not None for s in records.splits.values())
    backbone = load_backbone(model, device=batching.device, dtype=batching.dtype, max_length=batching.max_length,
                             words_input=words_input, allow_pickle=allow_pickle, device_map=batching.device_map,
                             max_memory=batching.max_memory)
    layers = None if not storage.layers and not isinstance(storage.layers, numbers.Integral) else storage.layers
    keep = resolve_layers(layers, backbone.layer_names, sort=True, refusal=DOES_NOT_EXIST)
    plans = {name: plan_split(backbone, split, batching.stride, batching.batch_tokens, batching.batch_size)
             for name, split in records.splits.items()}
    return JobInputs(records, backbone, keep, plans)


def _configured(inputs: JobInputs, data: DataSpec, storage: StorageSpec, batching: BatchSpec, pooling: list[str],
                existing: Manifest | None, held: HeldStates | None = None) -> Manifest:
    """The manifest this run's options give (its configuration hash included); the ``auto`` probe's pass goes
    to ``held``."""
    storage_dtype, dtype_choice = resolve_storage_dtype(storage.storage_dtype, existing, inputs.backbone,
                                                        inputs.records, inputs.plans, inputs.keep, held)
    manifest = new_manifest(inputs.backbone, inputs.records, inputs.plans, keep=inputs.keep, store=storage.store,
                            pooling=pooling, storage_dtype=storage_dtype, mean_skip_first=storage.mean_skip_first,
                            stride=batching.stride, batch_tokens=batching.batch_tokens,
                            batch_size=batching.batch_size, shard_bytes=storage.shard_bytes, limit=data.limit,
                            dtype_choice=dtype_choice, project=storage.project,
                            project_basis=storage.project_basis, compression=storage.compression)
    for dtype in {manifest.storage.dtype, manifest.storage.stored_pooled_dtype}:  # int4: an even width
        check_width(dtype, manifest.hidden_size, projected=bool(manifest.storage.project))
    return manifest


def join_job(model: str, data: DataSpec, storage: StorageSpec, batching: BatchSpec, out: Path, pooling: list[str],
             *, allow_pickle: bool) -> ExtractionJob:
    """The job of a writer other than the one that prepared the run: load, then take the prepared manifest.

    Writes nothing. The writer computes the configuration its own options, data and model give and
    refuses to write when it differs from the prepared cache's (every writer must run the same
    command on the same files); ``--storage-dtype auto`` takes the choice the preparing writer recorded.
    """
    inputs = load_inputs(model, data, storage, batching, allow_pickle=allow_pickle)
    prepared = read_manifest(out)
    manifest = _configured(inputs, data, storage, batching, pooling, prepared)
    if manifest.config_hash != prepared.config_hash:
        raise CacheMismatchError(
            f"This writer's {difference(prepared, manifest)} differs from the one the cache at {out} was prepared "
            "with; every writer must run the same command on the same model and data.")
    return _writer_job(out, inputs, prepared, HeldStates())  # held states serve only the process that made them


def prepare_job(model: str, data: DataSpec, storage: StorageSpec, batching: BatchSpec, out: Path, pooling: list[str],
                *, overwrite: bool, repair: bool, allow_pickle: bool, progress: bool, inputs: JobInputs | None = None,
                held: HeldStates | None = None, latest: bool = True,
                on_loaded: Callable[[JobInputs], None] | None = None) -> ExtractionJob | ExtractResult:
    """Load, plan, compare with what ``out`` holds and make it ready for writers; the caller holds the lock.

    Returns an :class:`ExtractResult` when there is nothing to write (the cache is complete, or a
    repair found every shard intact). ``inputs``: data, backbone and plans already loaded (``model`` and
    ``data`` then only name them); ``held``: batches already forwarded, whose states every pass reads
    instead of running the model (default: an empty holder within :func:`.held.held_budget`). ``latest``:
    record the cache as the most recent one (``layercache info`` without a folder); not for a scratch cache.
    ``on_loaded(inputs)``: called with the inputs once they are loaded (or given).
    """
    remember = record_latest if latest else (lambda path: None)
    existing = inspect_output(out, overwrite)
    if inputs is None:
        inputs = load_inputs(model, data, storage, batching, allow_pickle=allow_pickle)
    if on_loaded is not None:
        on_loaded(inputs)
    backbone, records, plans, keep = inputs.backbone, inputs.records, inputs.plans, inputs.keep
    if held is None:
        held = HeldStates(held_budget())
    manifest = _configured(inputs, data, storage, batching, pooling,
                           existing if isinstance(existing, Manifest) and not overwrite else None, held)

    resumed, damaged, rewritten = False, {}, []
    if isinstance(existing, DamagedCache):
        remove_cache_files(out, existing.split_names)
    elif existing is not None and overwrite:
        remove_cache_files(out, list(existing.splits))  # starts afresh, even with the same configuration
    elif existing is not None:
        if existing.config_hash != manifest.config_hash:
            raise CacheMismatchError(
                f"{out} already holds a cache made with a different {difference(existing, manifest)}; "
                f"pass {option('overwrite', True)} to replace it, or choose another {option('out')}."
            )
        with write_errors(out):
            merge_parts(out, existing)  # what the writers of an interrupted run committed
            # Every shard was projected with the basis: a damaged one is fitted again before anything else.
            rewritten = restore_projection(out, existing, backbone, plans, keep, held)
        if existing.complete and not repair:
            rewritten += _side_files(out, existing, backbone, allow_pickle)  # an older cache gets them now
            if not rewritten:
                log.info("The cache at %s is already complete; nothing to do.", out)
            remember(out)
            return ExtractResult(out, existing, already_complete=True, rewritten=rewritten)
        manifest, resumed = existing, True
        # A resume (or --repair) trusts no committed shard it has not re-read: a shard damaged since
        # its commit would otherwise be kept, and its statistics would break the split's.
        dropped = drop_unplanned_shards(out, manifest, plans)
        damaged = verify_shards(out, manifest, progress)
        if repair and not damaged and not dropped and manifest.complete:
            rewritten += _side_files(out, manifest, backbone, allow_pickle)
            if not rewritten:
                log.info("All %d shards and side files of %s match their checksums; nothing to repair.",
                         sum(len(s.shards) for s in manifest.splits.values()), out)
            remember(out)
            return ExtractResult(out, manifest, already_complete=True, rewritten=rewritten)
        if damaged:
            log.warning("Re-extracting %d damaged shard(s): %s.", sum(map(len, damaged.values())),
                        ", ".join(manifest.splits[n].shards[i].file for n, ix in damaged.items() for i in ix))
        else:
            log.info("Resuming the cache at %s (%s).", out, _done_text(manifest))
    elif repair:
        raise ConfigError(f"There is no cache at {out} to repair; run the command without {option('repair', True)} "
                          "to create it.")
    else:
        remove_parts(out)  # parts without a manifest belong to no cache this run can trust

    for name, plan in plans.items():
        if plan.n_truncated:
            log.warning("%s: %d of %d examples are longer than %d tokens and were truncated "
                        "(use %s to keep every token).", name, plan.n_truncated, len(plan.examples),
                        backbone.max_length, option("stride"))
    check_disk(out, manifest, plans)
    if manifest.storage.project and not resumed:  # fitted once, before the first shard; never refitted
        _fit_projection(out, manifest, inputs, held)

    for name in damaged:  # the cache is not complete until every damaged shard is rewritten
        manifest.splits[name].complete = False
    if damaged:
        manifest.complete = False
    # A held batch that committed shards cover (a damaged one is re-extracted below, by its own forward) is
    # never packed from them: free its states now.
    held.keep_only(remaining_batches(manifest, plans))
    try:
        with write_errors(out):
            write_manifest(out, manifest)
    except BaseException:
        if manifest.storage.project and not resumed:  # this run's basis, which no manifest lists: it goes too
            with contextlib.suppress(OSError):
                OwnedFolder.at(out).remove(PROJECTION_NAME)
        raise
    rewritten += _side_files(out, manifest, backbone, allow_pickle)  # after the manifest: the folder is a cache
    remember(out)
    job = _writer_job(out, inputs, manifest, held)
    for name, indices in damaged.items():
        for index in indices:
            with write_errors(out):
                reextract_shard(backbone, records, name, plans[name], manifest, out, keep, job.packer, job.buffers,
                                index)
    with write_errors(out):
        for name, info in manifest.splits.items():  # before any writer starts: they never clean up for each other
            clean_strays(out, name, info)  # also checks that each split folder is a real folder inside the cache
    job.resumed = resumed
    job.repaired = [manifest.splits[n].shards[i].file for n, ix in damaged.items() for i in ix]
    job.rewritten = rewritten
    return job


def _fit_projection(out: Path, manifest: Manifest, inputs: JobInputs, held: HeldStates) -> None:
    """Fit the ``--project K`` basis on the first split, write ``projection.safetensors`` and record it.

    The sample's forward passes go to ``held``, so that the main pass does not run them again."""
    split = next(iter(inputs.plans))
    projection = fit_projection(inputs.backbone, inputs.plans[split], inputs.keep, manifest.storage.project,
                                split=split, held=held, basis=manifest.storage.projection_basis)
    with write_errors(out):
        manifest.side_files["projection"] = write_projection(out, projection)
    manifest.extraction.projection_variance = [round(float(v), 6) for v in projection.variance_kept]
    manifest.extraction.projection_tokens = projection.tokens


def _writer_job(out: Path, inputs: JobInputs, manifest: Manifest, held: HeldStates) -> ExtractionJob:
    """The job around loaded inputs and a manifest: the state packer and the host buffers a writer reuses."""
    stored, backbone = manifest.storage, inputs.backbone
    packer = StatePacker(len(inputs.keep), backbone.hidden_size, storage_dtype=stored.dtype, pooling=stored.pooling,
                         device=backbone.device, mean_skip_first=stored.skips_first_in_mean,
                         projection=read_projection(out, manifest),  # checked against its checksum
                         pooled_dtype=stored.stored_pooled_dtype)
    threaded = writer_thread_helps(backbone.device)
    buffers = (_storage_buffers(inputs.plans, len(inputs.keep), manifest.hidden_size, stored.dtype,
                                IN_FLIGHT_BATCHES if threaded else 1)
               if stored.stores_tokens else None)
    return ExtractionJob(out, backbone, inputs.records, inputs.plans, manifest, inputs.keep, packer, buffers,
                         threaded, held)


def check_disk(out: Path, manifest: Manifest, plans: dict[str, SplitPlan] | None = None) -> None:
    """Refuse, before any forward pass, a run whose remaining shards do not fit the free space at ``out``.

    The refusal carries the sizes of every storage choice (:mod:`.storage_choices`, as ``layercache plan``
    prints them) and which would fit; the run's own choice is never changed.
    """
    need = estimate_bytes(manifest, plans)
    remaining = remaining_bytes(manifest, plans)
    free = free_disk_bytes(out)
    # Compressed: the bytes before compression (estimate_bytes), what the filter saves being known only once written.
    upper = " before compression (an upper bound)" if manifest.storage.compression else ""
    log.info("Estimated cache size: %s%s (%s still to write); %s free at %s.", human_bytes(need), upper,
             human_bytes(remaining), human_bytes(free), nearest_existing(out))
    if remaining * DISK_MARGIN > free:
        # The same rows as `layercache plan` (sizes only): which other choice would fit. Nothing is changed.
        yours = your_choice(manifest)
        rows = size_choices(manifest, plans, free, standard_choices(manifest, yours), yours)
        _, recommendation = recommend(rows, free, preferred16=manifest.storage.dtype)
        raise InsufficientDiskError(
            f"The cache needs about {human_bytes(remaining * DISK_MARGIN)}{upper} but only {human_bytes(free)} is free "
            f"at {nearest_existing(out)}; free space, choose another {option('out')}, keep fewer {option('layers')}, "
            f"or store less per token ({option('storage_dtype', 'int8')}, or {option('store', 'pooled')}) as below.\n"
            f"{sizes_text(rows, free)}\n{recommendation}"
        )


def _side_files(out: Path, manifest: Manifest, backbone, allow_pickle: bool) -> list[str]:
    """Write the vocabulary and logit-lens files the cache lacks or that changed (see :mod:`.side_files`),
    and the manifest that lists them; returns those the manifest listed that were written again."""
    before = dict(manifest.side_files)
    with write_errors(out):
        rewritten = ensure_side_files(out, manifest, backbone, allow_pickle=allow_pickle)
        if manifest.side_files != before:
            write_manifest(out, manifest)
    return rewritten


def _storage_buffers(plans: dict[str, SplitPlan], n_states: int, dim: int, storage_dtype: str,
                     count: int) -> BufferPool:
    """``count`` reused host buffers for batches' token states, each big enough for the largest planned batch.

    With a writer thread, two: one filled by the forward side while the writer appends the other.
    """
    most = max((sum(plan.examples[i].n_tokens for i in batch) for plan in plans.values() for batch in plan.batches),
               default=1)
    return BufferPool(count, lambda: storage_buffer(most, n_states, dim, storage_dtype))


def _done_text(manifest: Manifest) -> str:
    return ", ".join(f"{n}: {s.rows_written}/{s.n_examples}" for n, s in manifest.splits.items())

