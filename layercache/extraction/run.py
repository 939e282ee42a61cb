"""The extraction run: data + frozen backbone -> a resumable cache of every layer's states.

A run has three steps, and the single process is the case of one writer:

1. *prepare* (:func:`~.job.prepare_job`), under the cache's lock: options, output folder, data,
   backbone, plan; compare with an existing cache, merge what its writers committed, re-read
   committed shards, disk check, manifest;
2. *write* (:func:`write_share`): each writer extracts its share of the remaining batches
   (:func:`~.shares.assign_shares`), commits shards under its own manifest part
   (:mod:`layercache.store.parts`) and never touches another writer's files;
3. *merge* (:func:`merge_shares`): one step folds the parts into the manifest, reads each newly
   finished split's statistics back from its shards and marks the cache complete.

Under ``torchrun`` each rank is one writer (:mod:`.distributed`), with the same steps (:mod:`.steps`).
This module only orchestrates; each step lives beside it: the options (:mod:`.specs`), the
cache folder (:mod:`.housekeeping`), the plan (:mod:`.plan`), ``--storage-dtype auto``
(:mod:`.dtype_probe`), the manifest and its hash (:mod:`.configuration`), the size estimate
(:mod:`.estimate`), shard verification and repair (:mod:`.repair`) and the statistics read back
from the shards (:mod:`.stats`).
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..backbone.loader import DEFAULT_MODEL
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
from ..core.layers import LayerSpec
from ..core.option_names import option, options
from ..core.option_specs import check_options, spec_from_keywords
from ..core.threads import computes
from ..errors import ConfigError
from ..store.compression import require_filters
from ..store.paths import default_cache_path
from ..store.projection import check_projection_basis
from ..store.schema import POOLING_MODES, STORE_MODES
from ..store.storage import AUTO, check_storage_dtype
from .distributed import extract_on_ranks, torchrun_world
from .estimate import estimate_bytes, free_disk_bytes, remaining_bytes
from .held import HeldStates
from .housekeeping import check_split_names, locked_output, write_errors
from .job import ExtractResult, JobInputs, prepare_job
from .shares import assign_shares
from .specs import BatchSpec, DataSpec, StorageSpec
from .steps import list_committed, merge_shares, write_share

__all__ = ["extract", "ExtractResult", "ExtractionCall", "extraction_call", "run_extraction", "DataSpec",
           "StorageSpec", "BatchSpec", "DEFAULT_SHARD_BYTES",
           "STORE_MODES", "estimate_bytes", "remaining_bytes", "free_disk_bytes", "write_errors",
           "write_share", "merge_shares", "list_committed", "assign_shares"]

log = logging.getLogger("layercache")


@computes
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
    project: int | None = None,
    project_basis: str = "pca",
    compression: str = "none",
    dtype: str = DEFAULT_FORWARD_DTYPE,
    device: str = DEFAULT_DEVICE,
    device_map: str | None = None,
    max_memory: Mapping[str, int | str] | None = None,
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
    (:class:`~.specs.BatchSpec`: ``batch_tokens`` ... ``device``, ``device_map``, ``max_memory``), or as the
    flat keyword arguments of the same names (``dataset_config`` is ``DataSpec.config``), which build them; a
    group given as a spec takes none of its flat arguments.

    ``storage_dtype="auto"`` stores float16 unless one probe batch (the longest examples of the
    first split) has states beyond the float16 range, then bfloat16 (see :mod:`.dtype_probe`);
    float16 values beyond the range are clamped to +-65,504 and counted (``extraction.fp16_overflow``).
    ``mean_skip_first`` leaves each example's first token (a decoder's BOS / attention sink) out of
    the mean pooled vector when it has more than one; the manifest records it as
    ``storage.mean_skip_first`` so heads pool token states the same way. ``project=K`` stores every state
    as its coordinates in K principal directions fitted on a seeded sample of the first split's tokens
    (:mod:`.projection_fit`; the basis is ``projection.safetensors``, ``info`` shows the variance kept);
    ``project_basis="standardized"`` fits it on the states standardised per dimension (the correlation matrix's
    principal directions), so a few dimensions of outsized variance do not take the basis.
    ``compression="zstd"`` stores the states losslessly compressed (:mod:`layercache.store.compression`; needs
    hdf5plugin, ``pip install 'layercache[compress]'``): about 0.86 of float16's bytes and 0.81 of int8's, every
    read decompressing what it reads.

    One process writes a cache folder at a time (:class:`~layercache.store.lock.CacheLock`); a
    second gets :class:`~layercache.errors.CacheLockedError` naming the first.
    """
    return run_extraction(_grouped(locals()))


@dataclass(frozen=True)
class ExtractionCall:
    """One call of :func:`extract`, its options grouped as the specs that carry them."""

    model: str
    out: str | os.PathLike | None
    data: DataSpec
    storage: StorageSpec
    batching: BatchSpec
    overwrite: bool = False
    repair: bool = False
    allow_pickle: bool = False
    progress: bool = True


def extraction_call(*args, **kwargs) -> ExtractionCall:
    """What ``extract(*args, **kwargs)`` would be asked, grouped (a keyword :func:`extract` does not take is a
    TypeError, as in the call): for a call that adds to an extraction (:func:`layercache.planning.extract`)."""
    bound = inspect.signature(extract).bind(*args, **kwargs)
    bound.apply_defaults()
    return _grouped(bound.arguments)


def _grouped(a: Mapping) -> ExtractionCall:
    """:func:`extract`'s arguments by name -> the call, the flat keywords merged into their specs."""
    data = spec_from_keywords(DataSpec, a["data"], a, "data")  # each field's flat keyword (dataset_config, ...)
    storage = spec_from_keywords(StorageSpec, a["storage"], a, "storage")
    batching = spec_from_keywords(BatchSpec, a["batching"], a, "batching")
    return ExtractionCall(a["model"], a["out"], data, storage, batching, overwrite=a["overwrite"],
                          repair=a["repair"], allow_pickle=a["allow_pickle"], progress=a["progress"])


def run_extraction(call: ExtractionCall, *, on_loaded: Callable[[JobInputs], None] | None = None) -> ExtractResult:
    """:func:`extract` with its options grouped: check them, prepare, write the one share (or this rank's), merge.

    ``on_loaded(inputs)`` is given the data and backbone once a single process has loaded them (never under
    torchrun), so a caller can work on them after the run without loading them again.
    """
    data, storage, batching = call.data, call.storage, call.batching
    check_options(DataSpec, vars(data))
    pooling = check_storage(storage)
    require_filters(storage.compression)  # an unknown name or a missing hdf5plugin, before anything loads
    if call.overwrite and call.repair:
        raise ConfigError(f"{option('overwrite', True)} starts afresh and {option('repair', True)} keeps the good "
                          "shards; pass only one of them.")
    check_split_names([*(data.splits or []), *(data.split_files or {})])  # before any folder is touched
    out = Path(call.out).expanduser() if call.out is not None else default_cache_path(
        call.model, data.dataset or "files", data.config)
    world = torchrun_world()
    if world is not None:  # under torchrun: this process is one rank of several writers
        return extract_on_ranks(call.model, data, storage, batching, out, pooling, world, overwrite=call.overwrite,
                                repair=call.repair, allow_pickle=call.allow_pickle, progress=call.progress)
    return _one_writer(out, lambda: prepare_job(call.model, data, storage, batching, out, pooling,
                                                overwrite=call.overwrite, repair=call.repair,
                                                allow_pickle=call.allow_pickle, progress=call.progress,
                                                on_loaded=on_loaded),
                       call.progress)


def extract_loaded(inputs: JobInputs, out: str | os.PathLike, storage: StorageSpec, *,
                   batching: BatchSpec | None = None, held: HeldStates | None = None, overwrite: bool = False,
                   progress: bool = False) -> ExtractResult:
    """Write a cache of data and a backbone already loaded (``inputs``, as :func:`~.job.load_inputs` gives them),
    in one process: :func:`extract` without loading anything.

    ``held``: batches already forwarded; every pass (the dtype probe, a projection's fit, the main pass)
    reads their states instead of running the model. So one forward of a sample serves caches of it in
    several storages (what ``layercache plan`` prices the quality of, :mod:`layercache.planning`). Such a
    cache is never recorded as the most recent one (``layercache info`` keeps naming the user's).
    """
    batching = batching or BatchSpec()
    pooling = check_storage(storage)
    out = Path(out).expanduser()
    return _one_writer(out, lambda: prepare_job(inputs.backbone.name, DataSpec(), storage, batching, out, pooling,
                                                overwrite=overwrite, repair=False, allow_pickle=False,
                                                progress=progress, inputs=inputs, held=held, latest=False),
                       progress)


def _one_writer(out: Path, prepare, progress: bool) -> ExtractResult:
    """The run of one writer under the cache's lock: ``prepare()`` the job, write its one share, merge."""
    with locked_output(out):
        job = prepare()
        if isinstance(job, ExtractResult):
            return job
        (share,) = assign_shares(job.manifest, job.plans, 1)
        try:
            write_share(job, share, progress)
        except BaseException:
            list_committed(job)  # the one writer stops: what it committed is in the manifest at once
            raise
        manifest = merge_shares(job)
    overflow = manifest.extraction.overflow
    if overflow:
        log.warning("%s state values exceeded the float16 range and were clamped to ±65,504; re-extract with "
                    "%s to keep them.", f"{overflow:,}", options(storage_dtype="bfloat16", overwrite=True))
    return ExtractResult(out, manifest, resumed=job.resumed, repaired=job.repaired, rewritten=job.rewritten)


# --- checks ------------------------------------------------------------------------------
def check_storage(storage: StorageSpec) -> list[str]:
    """Refuse a storage the writer cannot make, naming the option; return its pooling modes, each once."""
    check_options(StorageSpec, vars(storage))  # the fields' own rules (shard size, projection size)
    store = storage.store
    if store not in STORE_MODES:
        raise ConfigError(f"{option('store', store, typed=repr(store))} is not known; choose one of "
                          f"{', '.join(STORE_MODES)}.")
    pooling = list(dict.fromkeys(storage.pooling or []))
    bad = [m for m in pooling if m not in POOLING_MODES]
    if bad:
        raise ConfigError(f"Pooling mode {bad[0]!r} is not known; choose from {', '.join(POOLING_MODES)}.")
    if store == "pooled" and not pooling:
        raise ConfigError(f"{option('store', 'pooled')} needs at least one {option('pooling')} mode (mean, first or "
                          "last).")
    check_storage_dtype(storage.storage_dtype, allow_auto=True)
    check_projection_basis(storage.project, storage.project_basis)
    return pooling
