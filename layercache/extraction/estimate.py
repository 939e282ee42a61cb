"""How many bytes a cache will take on disk, and how many are free for it."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..store.manifest import Manifest
from ..store.storage import codec
from ..store.writer import CHUNK_TOKENS, IDS_CHUNK, INDEX_CHUNK, POOLED_CHUNK
from .housekeeping import nearest_existing
from .plan import SplitPlan

DISK_MARGIN = 1.05  # slack on top of the estimate, which already counts chunk padding and HDF5 metadata


def free_disk_bytes(path: Path) -> int:
    """Free bytes on the disk that holds (or will hold) ``path``."""
    return shutil.disk_usage(nearest_existing(path)).free


# What a shard file holds beyond its values, fitted on shards from 1 to 100k tokens (within ~1 %
# of their real size together with the chunk rounding below): a fixed part, each dataset's object
# header and first chunk-index node, and each chunk's index entry.
SHARD_FILE_METADATA = 1024
DATASET_METADATA = 2700
CHUNK_METADATA = 64
MANIFEST_BYTES, MANIFEST_SHARD_BYTES = 8192, 400  # manifest.json: header, and one entry per shard


def estimate_bytes(manifest: Manifest, plans: dict[str, SplitPlan] | None = None) -> int:
    """Bytes the finished cache will take on disk: every shard file as written, and the manifest.

    A shard's size is its values plus what the format adds: every chunk is stored whole, so the
    last chunk of each dataset is padded (``hidden`` by up to 511 tokens, each pooled mode by up to
    63 examples, the id and label datasets by up to 4-8k entries), and HDF5 metadata per dataset
    and chunk. Small shards are mostly that overhead, so the shard count matters; it follows from
    the batch plan and ``shard_bytes`` exactly as :class:`~.shards.SplitShards` draws the
    boundaries. Without ``plans`` every batch counts as its split's average batch.

    A compressed cache (``storage.compression``) is counted before compression: what the filter saves
    depends on the values and is known only once they are written, so a run is refused on this upper
    bound (a chunk that does not compress is stored as it is, with a header of a few dozen bytes, and
    the zero padding of a last chunk compresses away).
    """
    sizes = [size for name, split in manifest.splits.items()
             for size in _shard_estimates(manifest, name, plans, range(split.n_batches))]
    return sum(sizes) + MANIFEST_BYTES + MANIFEST_SHARD_BYTES * len(sizes) + projection_bytes(manifest)


def projection_bytes(manifest: Manifest) -> int:
    """The ``--project K`` basis file: per kept state a ``K x D`` basis and a ``D`` mean, and a ``D`` scale for a
    ``standardized`` basis, float32 (0 without one)."""
    k = manifest.storage.project
    if not k:
        return 0
    rows = k + 1 + (manifest.storage.projection_basis == "standardized")  # basis rows, the mean (and the scale)
    return len(manifest.storage.layers) * rows * manifest.model.hidden_size * 4


def remaining_bytes(manifest: Manifest, plans: dict[str, SplitPlan] | None = None) -> int:
    """Bytes a resumed run still writes: the shards of the batches no committed shard covers.

    A resumed split opens a new shard at each run of uncovered batches, so this is the same sum as
    :func:`estimate_bytes` over the shards not committed yet; it is positive while any work remains.
    """
    sizes = [size for name, split in manifest.splits.items() if not split.complete
             for size in _shard_estimates(manifest, name, plans, split.uncovered_batches())]
    return sum(sizes) + (MANIFEST_BYTES + MANIFEST_SHARD_BYTES * len(sizes) if sizes else 0)


def _shard_estimates(manifest: Manifest, name: str, plans: dict[str, SplitPlan] | None,
                     todo: Sequence[int]) -> list[int]:
    """Estimated file size of each shard a split writes for the planned batches ``todo`` (ascending).

    A shard ends when full, or where ``todo`` skips a batch (one writer's share ends there).
    """
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
    vector = len(storage.layers) * codec(storage.dtype).cut_bytes(manifest.hidden_size)  # as the writer counts
    pooled_vector = len(storage.layers) * codec(storage.stored_pooled_dtype).cut_bytes(manifest.hidden_size)
    per_token = vector if storage.stores_tokens else 0
    per_example = pooled_vector * len(storage.pooling)
    sizes, n, t = [], 0, 0
    for i, b in enumerate(todo):
        n, t = n + batches[b][0], t + batches[b][1]
        ends = i == len(todo) - 1 or todo[i + 1] != b + 1
        if per_token * t + per_example * n >= storage.shard_bytes or ends:  # as SplitShards.append
            sizes.append(_shard_file_bytes(manifest, round(n), round(t), word_ids))
            n = t = 0
    return sizes


def _shard_file_bytes(manifest: Manifest, n: int, t: int, word_ids: bool) -> int:
    """Bytes of one shard file of ``n`` examples and ``t`` tokens, chunk padding and metadata included.

    Mirrors :meth:`~layercache.store.writer.ShardWriter._open`; per-word labels are counted as one
    per token (an upper bound that only matters in 4096-entry chunks).
    """
    storage = manifest.storage
    S, D = len(storage.layers), manifest.hidden_size
    stored_as, pooled_as = codec(storage.dtype), codec(storage.stored_pooled_dtype)
    token_tasks = any(task.kind == "token" for task in manifest.tasks)
    chunks = {  # dataset -> (chunks, bytes per chunk)
        "offsets": (_n_chunks(n + 1, INDEX_CHUNK), 8 * INDEX_CHUNK),
        "input_ids": (_n_chunks(t, IDS_CHUNK), 4 * IDS_CHUNK),
        "example_index": (_n_chunks(n, INDEX_CHUNK), 8 * INDEX_CHUNK),
    }
    if storage.stores_tokens:
        chunks["hidden"] = (S * _n_chunks(t, CHUNK_TOKENS), CHUNK_TOKENS * stored_as.values_bytes(D))
        if stored_as.scaled:  # (t, S, scales width), a chunk holds every state's scales of CHUNK_TOKENS tokens
            chunks["scales/hidden"] = (_n_chunks(t, CHUNK_TOKENS), CHUNK_TOKENS * S * stored_as.scales_bytes(D))
    for mode in storage.pooling:
        chunks[f"pooled/{mode}"] = (S * _n_chunks(n, POOLED_CHUNK), POOLED_CHUNK * pooled_as.values_bytes(D))
        if pooled_as.scaled:
            chunks[f"scales/pooled/{mode}"] = (_n_chunks(n, POOLED_CHUNK), POOLED_CHUNK * S * pooled_as.scales_bytes(D))
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
