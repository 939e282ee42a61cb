"""Trust no committed shard unread: re-read every shard against its checksum, re-extract the damaged ones."""

from __future__ import annotations

import stat
from pathlib import Path

from ..core.confine import OwnedFolder, lstat_or_none
from ..errors import CacheError
from ..progress import checking_progress
from ..store.manifest import Manifest, write_manifest
from ..store.shard_checks import shard_problem
from ..store.writer import ShardWriter
from .background import BufferPool
from .forward import run_batch
from .packing import StatePacker
from .plan import SplitPlan


def verify_shards(out: Path, manifest: Manifest, progress: bool) -> dict[str, list[int]]:
    """Re-read every committed shard against its checksum: ``split -> [shard numbers]`` that are missing or changed.

    The run goes on to write into these split folders, so each must be a real folder inside the
    cache (a link is refused, :class:`~layercache.core.confine.OwnedFolder`); a listed shard that is
    not a regular file (a link, a FIFO) or cannot be read counts as damaged (a FIFO is never
    opened), and is re-extracted in its place.
    """
    damaged: dict[str, list[int]] = {}
    owner = OwnedFolder.at(out)
    for name, split in manifest.splits.items():  # before any forward pass: a linked split folder is refused
        if split.shards or lstat_or_none(owner.path(name)) is not None:
            owner.folder(name)
    shards = [(name, i, shard) for name, split in manifest.splits.items() for i, shard in enumerate(split.shards)]
    with checking_progress(progress, total=sum(s.bytes for _, _, s in shards)) as advance:
        for name, i, shard in shards:
            path = owner.path(shard.file)
            st = lstat_or_none(path)
            if st is None or not stat.S_ISREG(st.st_mode) or shard_problem(path, shard.checksum) is not None:
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
    split, file = old.file.split("/")
    owner = OwnedFolder.at(out)
    st = lstat_or_none(owner.path(split, file))
    if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        owner.remove(split, file)  # a link or FIFO listed as the shard: it goes (a link's target stays)
    writer = ShardWriter(owner.file(split, file), n_states=len(keep), dim=manifest.hidden_size,
                         dtype=manifest.storage.dtype, store_tokens=manifest.stores_tokens,
                         pooling=manifest.pooling, tasks=manifest.tasks, first_row=old.first_row,
                         first_batch=old.first_batch, pooled_dtype=manifest.storage.stored_pooled_dtype)
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
