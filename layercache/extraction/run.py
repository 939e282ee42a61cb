"""The extraction run: data + frozen backbone -> a resumable cache of every layer's states.

Order of work, cheapest checks first so bad input fails in a second, not after a model load:
options -> output folder -> data -> backbone -> tokenization and batch plan -> compare with an
existing cache (resume / done / refuse) -> size estimate and disk check -> forward passes,
shard by shard, updating the manifest atomically after each commit.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from .. import __version__
from ..errors import CacheError, CacheMismatchError, ConfigError, InsufficientDiskError
from ..paths import default_cache_path, record_latest
from ..progress import extraction_progress
from ..sources.backbone import DEFAULT_MODEL, Backbone, load_backbone
from ..sources.datasets import load_dataset_records
from ..sources.records import DatasetRecords
from ..store.dtypes import BYTES_PER_VALUE, check_storage_dtype
from ..store.manifest import (FORMAT_VERSION, MANIFEST_NAME, Manifest, SplitInfo, read_manifest, stable_hash,
                              write_manifest)
from ..store.writer import ExtractedBatch
from .background import BackgroundWriter, BufferPool, writer_thread_helps
from .batching import PLANNER, BatchCost, plan_batches
from .forward import POOLING_MODES, run_batch
from .memory import HeapTrimmer
from .packing import StatePacker, storage_tensor
from .shards import SplitShards
from .tokenize import EncodedExample, encode_split

log = logging.getLogger("layercache")

STORE_MODES = ("tokens", "pooled")
DEFAULT_SHARD_BYTES = 256 * 2**20
DISK_MARGIN = 1.05  # HDF5 metadata and chunk slack on top of the raw estimate
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
    storage_dtype: str = "float16",
    dtype: str = "auto",
    device: str = "auto",
    max_length: int | None = None,
    stride: int | None = None,
    batch_tokens: int = 8192,
    batch_size: int = 256,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    overwrite: bool = False,
    progress: bool = True,
) -> ExtractResult:
    """Run ``model`` frozen over ``dataset`` once and write every kept layer's states to a cache.

    ``model`` is a hub id, a bundled alias (``minilm``) or a local folder; ``dataset`` is
    ``builtin``, a hub id, a local csv/tsv/jsonl/parquet/CoNLL file, or a saved datasets folder
    (``split_files`` maps split names to several local files). Without ``out`` the cache goes to
    :func:`layercache.paths.default_cache_path`. Running the same call again resumes an interrupted
    run from its last committed shard; a different configuration into an existing cache is
    refused unless ``overwrite``.
    """
    pooling = _check_options(store, pooling, storage_dtype, shard_bytes, limit)
    out = Path(out).expanduser() if out is not None else default_cache_path(
        model, dataset or "files", dataset_config)
    existing = _inspect_output(out)

    records = load_dataset_records(
        dataset, config=dataset_config, splits=list(splits) if splits else None, split_files=split_files,
        text_columns=list(text_columns) if text_columns else None,
        label_columns=list(label_columns) if label_columns else None,
        no_labels=no_labels, task_kind=task_kind, limit=limit)
    words_input = any(s.words is not None for s in records.splits.values())
    backbone = load_backbone(model, device=device, dtype=dtype, max_length=max_length, words_input=words_input)
    keep = resolve_layers(layers, backbone.layer_names)

    plans = {name: _plan_split(backbone, split, stride, batch_tokens, batch_size)
             for name, split in records.splits.items()}
    manifest = _new_manifest(backbone, records, plans, keep=keep, store=store, pooling=pooling,
                             storage_dtype=storage_dtype, stride=stride, batch_tokens=batch_tokens,
                             batch_size=batch_size, shard_bytes=shard_bytes, limit=limit)

    resumed = False
    if existing is not None:
        if existing.config_hash == manifest.config_hash:
            if existing.complete:
                log.info("The cache at %s is already complete; nothing to do.", out)
                record_latest(out)
                return ExtractResult(out, existing, already_complete=True)
            manifest, resumed = existing, True
            log.info("Resuming the cache at %s (%s).", out, _done_text(manifest))
        elif overwrite:
            _remove_cache_files(out)
        else:
            raise CacheMismatchError(
                f"{out} already holds a cache made with a different {_difference(existing, manifest)}; "
                "pass --overwrite to replace it, or choose another --out."
            )

    for name, plan in plans.items():
        if plan.n_truncated:
            log.warning("%s: %d of %d examples are longer than %d tokens and were truncated "
                        "(use --stride to keep every token).", name, plan.n_truncated, len(plan.examples),
                        backbone.max_length)
    _check_disk(out, manifest)

    out.mkdir(parents=True, exist_ok=True)
    write_manifest(out, manifest)
    record_latest(out)
    storage = manifest.storage
    packer = StatePacker(len(keep), backbone.hidden_size, storage_dtype=storage["dtype"], pooling=storage["pooling"],
                         device=backbone.device)
    threaded = writer_thread_helps(backbone.device)
    buffers = (_storage_buffers(plans, len(keep), backbone.hidden_size, storage["dtype"],
                                IN_FLIGHT_BATCHES if threaded else 1)
               if storage["store"] == "tokens" else None)
    with extraction_progress(progress) as bars:
        for name, plan in plans.items():
            _extract_split(backbone, records, name, plan, manifest, out, keep, bars, packer, buffers, threaded)
    manifest.complete = True
    write_manifest(out, manifest)
    overflow = manifest.extraction.get("fp16_overflow", 0)
    if overflow:
        log.warning("%d state values exceeded the float16 range and are stored as inf; re-extract with "
                    "--storage-dtype bfloat16 for this model.", overflow)
    return ExtractResult(out, manifest, resumed=resumed)


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
    check_storage_dtype(storage_dtype)
    if shard_bytes < 1:
        raise ConfigError(f"--shard-size must be positive, got {shard_bytes}.")
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be at least 1, got {limit}.")
    return pooling


def _inspect_output(out: Path) -> Manifest | None:
    """The existing cache's manifest, None for a new or empty folder; refuse anything else."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a folder for the cache.")
    if out.is_dir():
        if (out / MANIFEST_NAME).exists():
            try:
                return read_manifest(out)
            except CacheError as err:
                raise CacheError(f"{out} holds a cache this run cannot read ({err}); "
                                 "pass --overwrite after removing it, or choose another --out.") from err
        if any(out.iterdir()):
            raise ConfigError(f"--out {out} is not empty and is not a layercache cache; choose a new or empty folder.")
    probe = out if out.is_dir() else _nearest_existing(out)
    if not os.access(probe, os.W_OK):
        raise ConfigError(f"Cannot write to {probe}; choose an --out folder you can write to.")
    return None


def _nearest_existing(path: Path) -> Path:
    path = path.resolve()
    while not path.exists():
        path = path.parent
    return path


def free_disk_bytes(path: Path) -> int:
    """Free bytes on the disk that holds (or will hold) ``path``."""
    return shutil.disk_usage(_nearest_existing(path)).free


def estimate_bytes(manifest: Manifest) -> int:
    """Bytes the finished cache will take: states, pooled vectors and per-token ids."""
    storage = manifest.storage
    vector = len(storage["layers"]) * manifest.hidden_size * BYTES_PER_VALUE[storage["dtype"]]
    total = 0
    for split in manifest.splits.values():
        tokens = split.n_tokens if storage["store"] == "tokens" else 0
        total += vector * (tokens + split.n_examples * len(storage["pooling"]))
        total += 8 * split.n_tokens + 16 * split.n_examples  # input_ids, word_ids, offsets, index
    return total


def _check_disk(out: Path, manifest: Manifest) -> None:
    need = estimate_bytes(manifest)
    done = sum(s.bytes_written for s in manifest.splits.values())
    remaining = max(need - done, 0)
    free = free_disk_bytes(out)
    log.info("Estimated cache size: %s (%s still to write); %s free at %s.", human_bytes(need),
             human_bytes(remaining), human_bytes(free), _nearest_existing(out))
    if remaining * DISK_MARGIN > free:
        raise InsufficientDiskError(
            f"The cache needs about {human_bytes(remaining * DISK_MARGIN)} but only {human_bytes(free)} is free "
            f"at {_nearest_existing(out)}; free space, choose another --out, keep fewer --layers, "
            "or use --store pooled."
        )


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} B"


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


def _new_manifest(backbone, records: DatasetRecords, plans, *, keep, store, pooling, storage_dtype, stride,
                  batch_tokens, batch_size, shard_bytes, limit) -> Manifest:
    names = backbone.layer_names
    model = backbone.describe()
    tokenizer = {**backbone.describe_tokenizer(), "stride": stride}
    dataset = {"name": records.name, "config": records.config, "fingerprint": records.fingerprint,
               "columns": records.columns, "text_columns": records.text_columns, "limit": limit}
    storage = {"dtype": storage_dtype, "layers": keep, "layer_names": [names[i] for i in keep],
               "all_layer_names": names, "store": store, "pooling": pooling, "shard_bytes": shard_bytes,
               "final_norm": backbone.final_norm}
    extraction = {"batch_tokens": batch_tokens, "batch_size": batch_size, "planner": PLANNER,
                  "device": str(backbone.device),
                  "forward_dtype": model["forward_dtype"]}
    splits = {name: SplitInfo(n_examples=len(p.examples), n_tokens=p.n_tokens, n_batches=len(p.batches),
                              n_truncated=p.n_truncated, n_windowed=p.n_windowed) for name, p in plans.items()}
    content = {"format": FORMAT_VERSION, "model": model["fingerprint"], "tokenizer": tokenizer,
               "dataset": dataset, "tasks": [t.to_json() for t in records.tasks], "splits": list(plans),
               "storage": storage, "forward_dtype": model["forward_dtype"], "batching": [batch_tokens, batch_size, PLANNER]}
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
              ("storage (layers, dtype, store, pooling or shard size)", old.storage, new.storage),
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
    """Delete a cache's own files (manifest and split folders of shards), nothing else."""
    manifest = read_manifest(out)
    for name in manifest.splits:
        folder = out / name
        if folder.is_dir():
            for f in folder.glob("shard-*.h5*"):
                f.unlink()
            if not any(folder.iterdir()):
                folder.rmdir()
    (out / MANIFEST_NAME).unlink()


# --- the work ----------------------------------------------------------------------------
def _extract_split(backbone, records, name, plan: _SplitPlan, manifest: Manifest, out: Path, keep, bars,
                   packer: StatePacker, buffers: BufferPool | None, threaded: bool) -> None:
    """Forward the split's remaining batches; the writer appends them to shards and commits them (see background.py)."""
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
    try:
        with BackgroundWriter(threaded=threaded) as writer:
            for b in range(info.batches_written, len(plan.batches)):
                examples = [plan.examples[i] for i in plan.batches[b]]
                buffer = None if buffers is None else buffers.take(writer.check)
                batch = run_batch(backbone, examples, split_records, keep=keep, tasks=manifest.tasks,
                                  packer=packer, out=buffer)
                writer.submit(functools.partial(_write_batch, shards, b, batch, buffers, buffer))
                trimmer.batch_done()
                bars.update(task, advance=batch.n_examples,
                            tokens=bars.tasks[task].fields["tokens"] + batch.n_tokens)
    except BaseException:
        shards.abort()  # the writer thread has stopped: nothing else touches the shard
        raise
    info.stats, overflow = _split_stats(out, info, manifest.layer_names)
    manifest.extraction["fp16_overflow"] = manifest.extraction.get("fp16_overflow", 0) + overflow
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


def _clean_strays(folder: Path, info: SplitInfo) -> None:
    """Remove files a killed run left behind (temp shards, a shard committed after the last manifest write)."""
    listed = {Path(s.file).name for s in info.shards}
    for f in folder.iterdir():
        if f.name.startswith("shard-") and f.name not in listed:
            f.unlink()
    for name in listed:
        if not (folder / name).is_file():
            raise CacheError(f"Shard {folder / name} is listed in the manifest but missing; "
                             "re-run with --overwrite to rebuild the cache.")


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
