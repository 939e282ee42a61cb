"""The extraction run: data + frozen backbone -> a resumable cache of every layer's states.

Order of work, cheapest checks first so bad input fails in a second, not after a model load:
options -> output folder -> data -> backbone -> tokenization and batch plan -> compare with an
existing cache (resume / done / refuse) -> size estimate and disk check -> forward passes,
shard by shard, updating the manifest atomically after each commit.

``--storage-dtype auto`` (the default) is resolved before the configuration is hashed, by one
probe forward pass: the first planned batch of the first split (batches are planned longest
first, so it holds the longest examples). float16 unless that batch has a kept state value beyond
the float16 range, then bfloat16. That batch is the split's first forward pass anyway, so its
states are kept and packed when the batch's turn comes: the probe costs no forward pass of its
own. The manifest and the hash hold only the resolved dtype, so an ``auto`` run and an explicit
run with the dtype it resolved to are the same configuration and resume each other. A resume of
a cache that ``auto`` chose reuses the recorded choice without a probe. Values beyond the range
that the probe did not see are clamped and counted, as with an explicit float16.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import torch

from ..core.units import human_bytes
from ..core.version import __version__
from ..errors import (CacheError, CacheMismatchError, CacheWriteError, ConfigError, InsufficientDiskError,
                      LayercacheError)
from ..store.paths import default_cache_path, record_latest
from ..progress import checking_progress, extraction_progress
from ..backbone.loader import DEFAULT_MODEL, Backbone, load_backbone
from ..sources.datasets import load_dataset_records
from ..sources.records import DatasetRecords
from ..store.dtypes import AUTO, BYTES_PER_VALUE, FP16_MAX, check_storage_dtype
from ..core.checksum import checksum_matches
from ..store.manifest import (FORMAT_VERSION, MANIFEST_NAME, Manifest, SplitInfo, confined_path, read_manifest,
                              stable_hash, write_manifest)
from ..store.lock import LOCK_NAME, CacheLock
from ..store.schema import is_safe_name
from ..store.writer import CHUNK_TOKENS, IDS_CHUNK, INDEX_CHUNK, POOLED_CHUNK, ExtractedBatch, ShardWriter
from .background import BackgroundWriter, BufferPool, writer_thread_helps
from .batching import PLANNER, BatchCost, plan_batches
from .forward import POOLING_MODES, pad_windows, run_batch
from .memory import HeapTrimmer
from .packing import StatePacker, storage_tensor
from .shards import SplitShards
from .tokenize import EncodedExample, encode_split

log = logging.getLogger("layercache")

STORE_MODES = ("tokens", "pooled")
DEFAULT_SHARD_BYTES = 256 * 2**20
DISK_MARGIN = 1.05  # slack on top of the estimate, which already counts chunk padding and HDF5 metadata
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


@dataclass
class _ProbeStates:
    """The storage-dtype probe's forward pass (the first planned batch of ``split``), kept for that
    batch's extraction so it does not run twice; handed out once, then forgotten."""

    split: str
    hidden: tuple | None
    """L+1 x (R, W, D) states, as :meth:`~layercache.backbone.loader.Backbone.hidden_states` returns them."""

    def take(self, split: str, b: int) -> tuple | None:
        if split != self.split or b != 0:
            return None
        hidden, self.hidden = self.hidden, None
        return hidden


@dataclass
class _SplitPlan:
    examples: list[EncodedExample]
    batches: list[np.ndarray]
    n_tokens: int
    n_truncated: int
    n_windowed: int


def extract(
    model: str = DEFAULT_MODEL,
    dataset: str = "builtin",
    out: str | os.PathLike | None = None,
    *,
    dataset_config: str | None = None,
    splits: Sequence[str] | None = None,
    split_files: dict[str, str] | None = None,
    text_columns: Sequence[str] | None = None,
    label_columns: Sequence[str] | None = None,
    no_labels: bool = False,
    task_kind: str | None = None,
    limit: int | None = None,
    layers: Sequence[int | str] | None = None,
    store: str = "tokens",
    pooling: Sequence[str] = ("mean",),
    storage_dtype: str = AUTO,
    mean_skip_first: bool = False,
    dtype: str = "auto",
    device: str = "auto",
    max_length: int | None = None,
    stride: int | None = None,
    batch_tokens: int = 8192,
    batch_size: int = 256,
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
    :func:`layercache.paths.default_cache_path`. Running the same call again resumes an interrupted
    run from its last committed shard, after re-reading every committed shard against its checksum
    and re-extracting any that changed. A different configuration into an existing cache is refused;
    ``overwrite`` deletes the cache's files and starts afresh (whatever its configuration), and
    ``repair`` re-extracts only the shards of a cache (complete or not) whose checksums fail.
    ``allow_pickle`` lets a model with only pickle weights (``pytorch_model.bin``) load; see
    :func:`~layercache.backbone.loader.load_backbone`.

    ``storage_dtype="auto"`` stores float16 unless one probe batch (the longest examples of the
    first split) has states beyond the float16 range, then bfloat16 (see the module docstring);
    float16 values beyond the range are clamped to +-65,504 and counted (``extraction.fp16_overflow``).
    ``mean_skip_first`` leaves each example's first token (a decoder's BOS / attention sink) out of
    the mean pooled vector when it has more than one; the manifest records it as
    ``storage.mean_skip_first`` so heads pool token states the same way.

    One process writes a cache folder at a time (:class:`~layercache.store.lock.CacheLock`); a
    second gets :class:`~layercache.errors.CacheLockedError` naming the first.
    """
    pooling = _check_options(store, pooling, storage_dtype, shard_bytes, limit)
    if overwrite and repair:
        raise ConfigError("--overwrite starts afresh and --repair keeps the good shards; pass only one of them.")
    out = Path(out).expanduser() if out is not None else default_cache_path(
        model, dataset or "files", dataset_config)
    with _locked_output(out):
        existing = _inspect_output(out, overwrite)

        records = load_dataset_records(
            dataset, config=dataset_config, splits=list(splits) if splits else None, split_files=split_files,
            text_columns=list(text_columns) if text_columns else None,
            label_columns=list(label_columns) if label_columns else None,
            no_labels=no_labels, task_kind=task_kind, limit=limit)
        for name in records.splits:
            if not is_safe_name(name):
                raise ConfigError(f"Split name {name!r} cannot be a folder of the cache; name splits without '/', "
                                  "'\\' or a leading '.', e.g. --split train=train.tsv.")
        words_input = any(s.words is not None for s in records.splits.values())
        backbone = load_backbone(model, device=device, dtype=dtype, max_length=max_length, words_input=words_input,
                                 allow_pickle=allow_pickle)
        keep = resolve_layers(layers, backbone.layer_names)

        plans = {name: _plan_split(backbone, split, stride, batch_tokens, batch_size)
                 for name, split in records.splits.items()}
        storage_dtype, dtype_choice, probe = _resolve_storage_dtype(
            storage_dtype, existing if isinstance(existing, Manifest) and not overwrite else None,
            backbone, records, plans, keep)
        manifest = _new_manifest(backbone, records, plans, keep=keep, store=store, pooling=pooling,
                                 storage_dtype=storage_dtype, mean_skip_first=mean_skip_first, stride=stride,
                                 batch_tokens=batch_tokens, batch_size=batch_size, shard_bytes=shard_bytes,
                                 limit=limit, dtype_choice=dtype_choice)

        resumed, damaged = False, {}
        if existing is _DAMAGED or (existing is not None and overwrite):
            _remove_cache_files(out)  # --overwrite always starts afresh, even with the same configuration
        elif existing is not None:
            if existing.config_hash != manifest.config_hash:
                raise CacheMismatchError(
                    f"{out} already holds a cache made with a different {_difference(existing, manifest)}; "
                    "pass --overwrite to replace it, or choose another --out."
                )
            if existing.complete and not repair:
                log.info("The cache at %s is already complete; nothing to do.", out)
                record_latest(out)
                return ExtractResult(out, existing, already_complete=True)
            manifest, resumed = existing, True
            # A resume (or --repair) trusts no committed shard it has not re-read: a shard damaged since
            # its commit would otherwise be kept, and its statistics would break the split's.
            damaged = _verify_shards(out, manifest, progress)
            if repair and not damaged and manifest.complete:
                log.info("All %d shards of %s match their checksums; nothing to repair.",
                         sum(len(s.shards) for s in manifest.splits.values()), out)
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
        record_latest(out)
        storage = manifest.storage
        packer = StatePacker(len(keep), backbone.hidden_size, storage_dtype=storage["dtype"],
                             pooling=storage["pooling"], device=backbone.device,
                             mean_skip_first=storage.get("mean_skip_first", False))
        threaded = writer_thread_helps(backbone.device)
        buffers = (_storage_buffers(plans, len(keep), backbone.hidden_size, storage["dtype"],
                                    IN_FLIGHT_BATCHES if threaded else 1)
                   if storage["store"] == "tokens" else None)
        for name, indices in damaged.items():
            for index in indices:
                with write_errors(out):
                    _reextract_shard(backbone, records, name, plans[name], manifest, out, keep, packer, buffers,
                                     index)
        with extraction_progress(progress) as bars:
            for name, plan in plans.items():
                _extract_split(backbone, records, name, plan, manifest, out, keep, bars, packer, buffers, threaded,
                               probe)
        manifest.complete = True
        with write_errors(out):
            write_manifest(out, manifest)
    overflow = manifest.extraction.get("fp16_overflow", 0)
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


_DAMAGED = object()
"""What :func:`_inspect_output` returns for a folder whose manifest cannot be read (only with --overwrite)."""


@contextlib.contextmanager
def _locked_output(out: Path):
    """Create ``out`` if needed and hold its writer lock; remove the folder again if this run made it and
    left nothing in it (a refusal before the first write leaves no empty folder behind)."""
    _check_out_path(out)
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CacheWriteError(f"Cannot create the cache folder {out} ({os.strerror(err.errno)}); "
                              "choose an --out folder you can write to.") from None
    lock = CacheLock(out).acquire()
    try:
        yield
    finally:
        lock.release()
        if created and {p.name for p in out.iterdir()} <= {LOCK_NAME}:
            shutil.rmtree(out, ignore_errors=True)


def _check_out_path(out: Path) -> None:
    """Refuse an --out that is a file, lies below a file, or cannot be written, before touching anything."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a folder for the cache.")
    probe = out if out.is_dir() else _nearest_existing(out)
    if not probe.is_dir():
        raise ConfigError(f"--out {out} lies below {probe}, which is a file; give a folder for the cache.")
    if not os.access(probe, os.W_OK):
        raise CacheWriteError(f"Cannot write to {probe}; make it writable (then the same command resumes an "
                              "existing cache) or choose another --out.")


def _inspect_output(out: Path, overwrite: bool = False):
    """The existing cache's manifest, None for an empty folder, ``_DAMAGED`` for an unreadable manifest
    that ``overwrite`` may replace; refuse anything else. Runs under the folder's lock."""
    if (out / MANIFEST_NAME).exists():
        try:
            return read_manifest(out)
        except CacheError as err:
            if overwrite:
                return _DAMAGED
            raise CacheError(f"{out} holds a cache this run cannot read ({err}); pass --overwrite to replace "
                             "it, or choose another --out.") from err
    if any(p.name != LOCK_NAME for p in out.iterdir()):
        raise ConfigError(f"--out {out} is not empty and is not a layercache cache; choose a new or empty folder.")
    return None


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_disk_bytes(path: Path) -> int:
    """Free bytes on the disk that holds (or will hold) ``path``."""
    return shutil.disk_usage(_nearest_existing(path)).free


# What a shard file holds beyond its values, fitted on shards from 1 to 100k tokens (within ~1 %
# of their real size together with the chunk rounding below): a fixed part, each dataset's object
# header and first chunk-index node, and each chunk's index entry.
SHARD_FILE_METADATA = 1024
DATASET_METADATA = 2700
CHUNK_METADATA = 64
MANIFEST_BYTES, MANIFEST_SHARD_BYTES = 8192, 400  # manifest.json: header, and one entry per shard


def estimate_bytes(manifest: Manifest, plans: dict[str, _SplitPlan] | None = None) -> int:
    """Bytes the finished cache will take on disk: every shard file as written, and the manifest.

    A shard's size is its values plus what the format adds: every chunk is stored whole, so the
    last chunk of each dataset is padded (``hidden`` by up to 511 tokens, each pooled mode by up to
    63 examples, the id and label datasets by up to 4-8k entries), and HDF5 metadata per dataset
    and chunk. Small shards are mostly that overhead, so the shard count matters; it follows from
    the batch plan and ``shard_bytes`` exactly as :class:`~.shards.SplitShards` draws the
    boundaries. Without ``plans`` every batch counts as its split's average batch.
    """
    sizes = [size for name in manifest.splits for size in _shard_estimates(manifest, name, plans, 0)]
    return sum(sizes) + MANIFEST_BYTES + MANIFEST_SHARD_BYTES * len(sizes)


def remaining_bytes(manifest: Manifest, plans: dict[str, _SplitPlan] | None = None) -> int:
    """Bytes a resumed run still writes: the shards from each split's first unwritten batch on.

    A resumed split opens a new shard at that batch, so this is the same sum as
    :func:`estimate_bytes` over the shards not committed yet; it is positive while any work remains.
    """
    sizes = [size for name, split in manifest.splits.items() if not split.complete
             for size in _shard_estimates(manifest, name, plans, split.batches_written)]
    return sum(sizes) + (MANIFEST_BYTES + MANIFEST_SHARD_BYTES * len(sizes) if sizes else 0)


def _shard_estimates(manifest: Manifest, name: str, plans: dict[str, _SplitPlan] | None, start: int) -> list[int]:
    """Estimated file size of each shard a split writes from planned batch ``start`` to its end."""
    split, storage = manifest.splits[name], manifest.storage
    plan = plans.get(name) if plans else None
    if plan is not None:
        lengths = np.fromiter((ex.n_tokens for ex in plan.examples), np.int64, len(plan.examples))  # (n,)
        batches = [(len(batch), int(lengths[batch].sum())) for batch in plan.batches]
        word_ids = bool(plan.examples) and plan.examples[0].word_ids is not None
    else:  # the split's average batch, repeated
        n_batches = max(split.n_batches, 1)
        batches = [(split.n_examples / n_batches, split.n_tokens / n_batches)] * split.n_batches
        word_ids = any(task.kind == "token" for task in manifest.tasks)
    vector = len(storage["layers"]) * manifest.hidden_size * BYTES_PER_VALUE[storage["dtype"]]
    per_token = vector if storage["store"] == "tokens" else 0
    per_example = vector * len(storage["pooling"])
    sizes, n, t = [], 0, 0
    for b in range(start, len(batches)):
        n, t = n + batches[b][0], t + batches[b][1]
        if per_token * t + per_example * n >= storage["shard_bytes"] or b == len(batches) - 1:  # as SplitShards.append
            sizes.append(_shard_file_bytes(manifest, round(n), round(t), word_ids))
            n = t = 0
    return sizes


def _shard_file_bytes(manifest: Manifest, n: int, t: int, word_ids: bool) -> int:
    """Bytes of one shard file of ``n`` examples and ``t`` tokens, chunk padding and metadata included.

    Mirrors :meth:`~layercache.store.writer.ShardWriter._open`; per-word labels are counted as one
    per token (an upper bound that only matters in 4096-entry chunks).
    """
    storage = manifest.storage
    S, D = len(storage["layers"]), manifest.hidden_size
    vector = S * D * BYTES_PER_VALUE[storage["dtype"]]
    token_tasks = any(task.kind == "token" for task in manifest.tasks)
    chunks = {  # dataset -> (chunks, bytes per chunk)
        "offsets": (_n_chunks(n + 1, INDEX_CHUNK), 8 * INDEX_CHUNK),
        "input_ids": (_n_chunks(t, IDS_CHUNK), 4 * IDS_CHUNK),
        "example_index": (_n_chunks(n, INDEX_CHUNK), 8 * INDEX_CHUNK),
    }
    if storage["store"] == "tokens":
        chunks["hidden"] = (S * _n_chunks(t, CHUNK_TOKENS), CHUNK_TOKENS * D * BYTES_PER_VALUE[storage["dtype"]])
    for mode in storage["pooling"]:
        chunks[f"pooled/{mode}"] = (S * _n_chunks(n, POOLED_CHUNK), POOLED_CHUNK * vector // S)
    if word_ids:
        chunks["word_ids"] = (_n_chunks(t, IDS_CHUNK), 4 * IDS_CHUNK)
    if token_tasks:
        chunks["word_offsets"] = (_n_chunks(n + 1, INDEX_CHUNK), 8 * INDEX_CHUNK)
    for task in manifest.tasks:
        chunks[f"labels/{task.name}"] = (_n_chunks(t if task.kind == "token" else n, INDEX_CHUNK),
                                         (4 if task.kind == "regression" else 8) * INDEX_CHUNK)
    stats = 2 * S * D * 8  # stats/sum, stats/sumsq: float64, contiguous
    n_datasets = len(chunks) + 2
    return (sum(count * size for count, size in chunks.values()) + stats + SHARD_FILE_METADATA
            + DATASET_METADATA * n_datasets + CHUNK_METADATA * sum(count for count, _ in chunks.values()))


def _n_chunks(count: int, chunk: int) -> int:
    return -(-count // chunk)


def _check_disk(out: Path, manifest: Manifest, plans: dict[str, _SplitPlan] | None = None) -> None:
    need = estimate_bytes(manifest, plans)
    remaining = remaining_bytes(manifest, plans)
    free = free_disk_bytes(out)
    log.info("Estimated cache size: %s (%s still to write); %s free at %s.", human_bytes(need),
             human_bytes(remaining), human_bytes(free), _nearest_existing(out))
    if remaining * DISK_MARGIN > free:
        raise InsufficientDiskError(
            f"The cache needs about {human_bytes(remaining * DISK_MARGIN)} but only {human_bytes(free)} is free "
            f"at {_nearest_existing(out)}; free space, choose another --out, keep fewer --layers, "
            "or use --store pooled."
        )


def resolve_layers(layers: Sequence[int | str] | None, names: list[str]) -> list[int]:
    """State indices to keep, sorted: names (``layer_3``), indices (0 = embeddings, -1 = last)."""
    if not layers:
        return list(range(len(names)))
    keep = set()
    for layer in layers:
        if isinstance(layer, str) and layer in names:
            keep.add(names.index(layer))
            continue
        try:
            index = int(layer)
        except (TypeError, ValueError):
            index = None
        if index is None or not -len(names) <= index < len(names):
            raise ConfigError(f"Layer {layer!r} does not exist; the model has {', '.join(names)} "
                              f"(or indices {-len(names)} to {len(names) - 1}).")
        keep.add(index % len(names))
    return sorted(keep)


# --- planning ----------------------------------------------------------------------------
def _plan_split(backbone: Backbone, split, stride, batch_tokens, batch_size) -> _SplitPlan:
    examples = list(encode_split(backbone.tokenizer, split, max_length=backbone.max_length, stride=stride,
                                 causal=backbone.is_causal))
    costs = [BatchCost(ex.n_rows, ex.width, ex.n_tokens) for ex in examples]
    return _SplitPlan(
        examples=examples, batches=plan_batches(costs, batch_tokens, batch_size),
        n_tokens=sum(ex.n_tokens for ex in examples), n_truncated=sum(ex.truncated for ex in examples),
        n_windowed=sum(ex.n_rows > 1 for ex in examples))


def _resolve_storage_dtype(requested: str, existing: Manifest | None, backbone: Backbone, records: DatasetRecords,
                           plans: dict[str, _SplitPlan],
                           keep: list[int]) -> tuple[str, str | None, _ProbeStates | None]:
    """The storage dtype to write; for ``auto`` also why it was chosen (recorded in the manifest) and
    the probe's forward pass, which the extraction of its batch reuses.

    ``auto``: the dtype an existing cache recorded as chosen by ``auto`` (a resume repeats the
    choice without a forward pass); else float16 unless the probe batch (the first planned batch
    of the first split: its longest examples) has a kept state value beyond the float16 range.
    One ``aminmax`` per kept state decides the common case (~0.2 % of the batch's forward pass for
    MiniLM); only when some value, padding included, is beyond the range are the real tokens' values
    counted, by the same :class:`StatePacker` code that counts overflow during the run.
    """
    if requested != AUTO:
        return requested, None, None
    if existing is not None and existing.extraction.get("storage_dtype_auto"):
        return existing.storage["dtype"], existing.extraction["storage_dtype_auto"], None
    name = next((n for n, plan in plans.items() if plan.batches), None)
    if name is None:
        return "float16", "auto: no examples to probe", None
    examples = [plans[name].examples[i] for i in plans[name].batches[0]]
    ids, mask = pad_windows(examples, backbone.tokenizer.pad_token_id)
    hidden = backbone.hidden_states(ids, mask)  # L+1 x (R, W, D)
    probe = _ProbeStates(name, hidden)
    largest = max(max(-float(low), float(high)) for low, high in (torch.aminmax(hidden[i]) for i in keep))
    overflow = 0
    if largest > FP16_MAX:  # NaN compares false here and is refused, with its row, when the batch is packed
        counter = StatePacker(len(keep), backbone.hidden_size, storage_dtype="float16", pooling=[],
                              device=backbone.device)
        overflow = run_batch(backbone, examples, records.splits[name], keep=keep, tasks=[], packer=counter,
                             out=None, split=name, first_row=0, hidden=hidden).overflow  # real tokens only
    where = f"the first batch of split {name!r} ({len(examples)} longest examples)"
    if not overflow:
        return "float16", f"auto: {where} stays within ±{FP16_MAX:,.0f}", probe
    log.info("Storing bfloat16 (--storage-dtype auto): %s state values of %s exceed the float16 range "
             "(±%s); pass --storage-dtype float16 to store them clamped instead.",
             f"{overflow:,}", where, f"{FP16_MAX:,.0f}")
    return "bfloat16", f"auto: {overflow:,} values of {where} exceed ±{FP16_MAX:,.0f}", probe


def _hashed_storage(storage: dict) -> dict:
    """The storage section as the configuration hash sees it: ``mean_skip_first`` only when set, so caches
    written before the option existed keep their hash (absent means false)."""
    return {k: v for k, v in storage.items() if k != "mean_skip_first" or v}


def _new_manifest(backbone, records: DatasetRecords, plans, *, keep, store, pooling, storage_dtype, stride,
                  batch_tokens, batch_size, shard_bytes, limit, mean_skip_first: bool = False,
                  dtype_choice: str | None = None) -> Manifest:
    names = backbone.layer_names
    model = backbone.describe()
    tokenizer = {**backbone.describe_tokenizer(), "stride": stride}
    dataset = {"name": records.name, "config": records.config, "fingerprint": records.fingerprint,
               "columns": records.columns, "text_columns": records.text_columns, "limit": limit,
               "files": records.files}
    storage = {"dtype": storage_dtype, "layers": keep, "layer_names": [names[i] for i in keep],
               "all_layer_names": names, "store": store, "pooling": pooling, "shard_bytes": shard_bytes,
               "final_norm": backbone.final_norm, "mean_skip_first": mean_skip_first}
    extraction = {"batch_tokens": batch_tokens, "batch_size": batch_size, "planner": PLANNER,
                  "device": str(backbone.device),
                  "forward_dtype": model["forward_dtype"]}
    if dtype_choice is not None:  # not hashed: auto and the explicit dtype it resolved to are one configuration
        extraction["storage_dtype_auto"] = dtype_choice
    splits = {name: SplitInfo(n_examples=len(p.examples), n_tokens=p.n_tokens, n_batches=len(p.batches),
                              n_truncated=p.n_truncated, n_windowed=p.n_windowed,
                              n_skipped_empty=records.splits[name].n_skipped_empty) for name, p in plans.items()}
    content = {"format": FORMAT_VERSION, "model": model["fingerprint"], "tokenizer": tokenizer,
               "dataset": dataset, "tasks": [t.to_json() for t in records.tasks], "splits": list(plans),
               "storage": _hashed_storage(storage), "forward_dtype": model["forward_dtype"],
               "batching": [batch_tokens, batch_size, PLANNER]}
    return Manifest(model=model, tokenizer=tokenizer, dataset=dataset, tasks=list(records.tasks), storage=storage,
                    extraction=extraction, splits=splits, config_hash=stable_hash(content),
                    layercache_version=__version__)


def _storage_buffers(plans: dict[str, _SplitPlan], n_states: int, dim: int, storage_dtype: str,
                     count: int) -> BufferPool:
    """``count`` reused host buffers for batches' token states, each big enough for the largest planned batch.

    With a writer thread, two: one filled by the forward side while the writer appends the other.
    """
    most = max((sum(plan.examples[i].n_tokens for i in batch) for plan in plans.values() for batch in plan.batches),
               default=1)
    return BufferPool(count, lambda: storage_tensor(most, n_states, dim, storage_dtype))


def _difference(old: Manifest, new: Manifest) -> str:
    """Name the first thing that differs between two caches' configurations, for the refusal."""
    checks = [("model", old.model.get("fingerprint"), new.model.get("fingerprint")),
              ("tokenizer or max length", old.tokenizer, new.tokenizer),
              ("dataset", old.dataset, new.dataset),
              ("set of splits", list(old.splits), list(new.splits)),
              ("storage (layers, dtype, store, pooling, --mean-skip-first or shard size)",
               _hashed_storage(old.storage), _hashed_storage(new.storage)),
              ("forward dtype", old.model.get("forward_dtype"), new.model.get("forward_dtype")),
              ("batching (--batch-tokens, --batch-size)",
               [old.extraction.get("batch_tokens"), old.extraction.get("batch_size")],
               [new.extraction.get("batch_tokens"), new.extraction.get("batch_size")]),
              ("batch planner (an older layercache)", old.extraction.get("planner"), new.extraction.get("planner"))]
    for what, a, b in checks:
        if a != b:
            return what
    return "configuration"


def _done_text(manifest: Manifest) -> str:
    return ", ".join(f"{n}: {s.rows_written}/{s.n_examples}" for n, s in manifest.splits.items())


def _remove_cache_files(out: Path) -> None:
    """Delete a cache's own files (manifest, shards and temp shards in its split folders), nothing else.

    Works from the folder, not the manifest, so a damaged manifest can be replaced too; a split
    folder that is a link is unlinked, never followed, so nothing outside the cache is touched.
    """
    for folder in out.iterdir():
        if folder.is_symlink() or not folder.is_dir():
            continue
        for f in folder.iterdir():
            if f.name.startswith("shard-") and (f.is_symlink() or f.is_file()):
                f.unlink()
        if not any(folder.iterdir()):
            folder.rmdir()
    (out / MANIFEST_NAME).unlink(missing_ok=True)


def _verify_shards(out: Path, manifest: Manifest, progress: bool) -> dict[str, list[int]]:
    """Re-read every committed shard against its checksum: ``split -> [shard numbers]`` that are missing or changed."""
    damaged: dict[str, list[int]] = {}
    shards = [(name, i, shard) for name, split in manifest.splits.items() for i, shard in enumerate(split.shards)]
    with checking_progress(progress, total=sum(s.bytes for _, _, s in shards)) as advance:
        for name, i, shard in shards:
            path = confined_path(out, shard.file)
            if not checksum_matches(path, shard.checksum):
                damaged.setdefault(name, []).append(i)
            advance(shard.bytes)
    return damaged


def _reextract_shard(backbone, records, name: str, plan: _SplitPlan, manifest: Manifest, out: Path, keep,
                     packer: StatePacker, buffers: BufferPool | None, index: int) -> None:
    """Forward shard ``index``'s batches again and write it in place of the damaged file.

    The plan is the one the shard was cut from (the configuration hash matched), so the rows,
    batches and shard boundaries are the same; only its checksum entry is renewed.
    """
    info = manifest.splits[name]
    old = info.shards[index]
    writer = ShardWriter(confined_path(out, old.file), n_states=len(keep), dim=backbone.hidden_size,
                         dtype=manifest.storage["dtype"], store_tokens=manifest.stores_tokens,
                         pooling=manifest.pooling, tasks=manifest.tasks, first_row=old.first_row,
                         first_batch=old.first_batch)
    try:
        row = old.first_row
        for b in range(old.first_batch, old.first_batch + old.n_batches):
            examples = [plan.examples[i] for i in plan.batches[b]]
            buffer = None if buffers is None else buffers.take()
            try:
                writer.append(run_batch(backbone, examples, records.splits[name], keep=keep, tasks=manifest.tasks,
                                        packer=packer, out=buffer, split=name, first_row=row))
            finally:
                if buffer is not None:
                    buffers.give_back(buffer)
            row += len(examples)
        new = writer.commit()
    except BaseException:
        writer.abort()
        raise
    if (new.n_examples, new.n_tokens) != (old.n_examples, old.n_tokens):
        raise CacheError(f"Re-extracting {old.file} gave {new.n_examples} rows where the manifest lists "
                         f"{old.n_examples}; the data or model changed, so re-extract with --overwrite.")
    info.shards[index] = new
    write_manifest(out, manifest)


# --- the work ----------------------------------------------------------------------------
def _extract_split(backbone, records, name, plan: _SplitPlan, manifest: Manifest, out: Path, keep, bars,
                   packer: StatePacker, buffers: BufferPool | None, threaded: bool,
                   probe: _ProbeStates | None = None) -> None:
    """Forward the split's remaining batches; the writer appends them to shards and commits them (see background.py).

    Whatever stops it (a failed write, NaN from the model, Ctrl-C) removes the shard being written
    and keeps the committed ones, so the same command resumes; a failed write arrives as
    :class:`~layercache.errors.CacheWriteError`.
    """
    with write_errors(out):
        _extract_split_batches(backbone, records, name, plan, manifest, out, keep, bars, packer, buffers, threaded,
                               probe)


def _extract_split_batches(backbone, records, name, plan: _SplitPlan, manifest: Manifest, out: Path, keep, bars,
                           packer: StatePacker, buffers: BufferPool | None, threaded: bool,
                           probe: _ProbeStates | None = None) -> None:
    info = manifest.splits[name]
    folder = out / name
    folder.mkdir(exist_ok=True)
    _clean_strays(folder, info)
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
    info.stats, overflow = _split_stats(out, info, manifest.layer_names)
    # Per split, then the total: a resume recomputes every split's count, so adding would double it.
    by_split = manifest.extraction.setdefault("fp16_overflow_by_split", {})
    by_split[name] = overflow
    manifest.extraction["fp16_overflow"] = sum(by_split.values())
    info.complete = True
    write_manifest(out, manifest)


@contextlib.contextmanager
def write_errors(out: Path):
    """Turn a failed system call while writing the cache (full disk, read-only folder) into one sentence.

    Only errors with an ``errno`` are translated; anything else is a bug and keeps its traceback.
    The caller has already removed its half-written shard; committed shards stay, so the message
    says to resume.
    """
    try:
        yield
    except LayercacheError:
        raise  # already a sentence (CacheWriteError and InsufficientDiskError are OSErrors too)
    except OSError as err:
        if err.errno is None:
            raise
        raise CacheWriteError(_write_error_text(out, err)) from err


def _write_error_text(out: Path, err: OSError) -> str:
    what = f"{err.filename}" if err.filename else str(out)
    reason = os.strerror(err.errno)
    if err.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG):
        return (f"Writing {what} failed: {reason}; committed shards are kept, so free space on that disk and run "
                "the same command again to resume (or choose another --out).")
    if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return (f"Cannot write {what}: {reason}; make the cache folder {out} writable and run the same command "
                "again to resume, or choose another --out.")
    if err.errno == errno.ENOTDIR:
        return f"Cannot write {what}: part of that path is a file, not a folder; choose another --out."
    return (f"Writing {what} failed: {reason}; committed shards are kept, so fix the cause and run the same "
            "command again to resume.")


def _write_batch(shards: SplitShards, b: int, batch: ExtractedBatch, buffers: BufferPool | None, buffer) -> None:
    """The writer thread's job for one batch: append it, free its buffer, commit the shard if complete."""
    try:
        complete = shards.append(b, batch)
    finally:
        if buffer is not None:  # the data is in the file now; the forward side may refill it
            buffers.give_back(buffer)
    if complete:
        shards.commit()


def _clean_strays(folder: Path, info: SplitInfo) -> None:
    """Remove files a killed run left behind (temp shards, a shard committed after the last manifest write)."""
    listed = {Path(s.file).name for s in info.shards}
    for f in folder.iterdir():
        if f.name.startswith("shard-") and f.name not in listed:
            f.unlink()
    for name in listed:
        if not (folder / name).is_file():
            raise CacheError(f"Shard {folder / name} is listed in the manifest but missing; "
                             "re-run the same command with --repair to re-extract it.")


def _split_stats(out: Path, info: SplitInfo, names: list[str]) -> tuple[dict, int]:
    """Per-state mean / std / rms over all values of a split, combined from the shards' sums."""
    total = total_sq = None
    count = overflow = 0
    for shard in info.shards:
        with h5py.File(out / shard.file, "r") as h:
            s, sq = h["stats/sum"][:], h["stats/sumsq"][:]
            count += int(h["stats"].attrs["count"])
            overflow += int(h.attrs.get("fp16_overflow", 0))
        total = s if total is None else total + s
        total_sq = sq if total_sq is None else total_sq + sq
    values = count * total.shape[1]
    mean = total.sum(1) / values  # (S,)
    mean_sq = total_sq.sum(1) / values  # (S,)
    std = np.sqrt(np.maximum(mean_sq - mean**2, 0.0))
    stats = {name: {"mean": float(m), "std": float(s), "rms": float(np.sqrt(q))}
             for name, m, s, q in zip(names, mean, std, mean_sq)}
    return stats, overflow
