"""Trust no committed shard unread: re-read every shard against its checksum, re-extract the damaged ones."""

from __future__ import annotations

from pathlib import Path

from ..core.checksum import checksum_matches
from ..errors import CacheError
from ..progress import checking_progress
from ..store.manifest import Manifest, confined_path, write_manifest
from ..store.writer import ShardWriter
from .background import BufferPool
from .forward import run_batch
from .packing import StatePacker
from .plan import SplitPlan


def verify_shards(out: Path, manifest: Manifest, progress: bool) -> dict[str, list[int]]:
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


def reextract_shard(backbone, records, name: str, plan: SplitPlan, manifest: Manifest, out: Path, keep,
                    packer: StatePacker, buffers: BufferPool | None, index: int) -> None:
    """Forward shard ``index``'s batches again and write it in place of the damaged file.

    The plan is the one the shard was cut from (the configuration hash matched), so the rows,
    batches and shard boundaries are the same; only its checksum entry is renewed.
    """
    info = manifest.splits[name]
    old = info.shards[index]
    writer = ShardWriter(confined_path(out, old.file), n_states=len(keep), dim=backbone.hidden_size,
                         dtype=manifest.storage.dtype, store_tokens=manifest.stores_tokens,
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
