"""Trust no committed shard unread: check each entry against the plan, re-read every shard against its checksum,
re-extract the damaged ones."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

from ..core.confine import OwnedFolder, lstat_or_none
from ..core.option_names import option
from ..errors import CacheError
from ..progress import checking_progress
from ..store.manifest import Manifest, ShardInfo, write_manifest
from ..store.shard_checks import shard_problem
from ..store.writer import ShardWriter
from .background import BufferPool
from .forward import run_batch
from .packing import StatePacker
from .plan import SplitPlan

log = logging.getLogger("layercache")


def drop_unplanned_shards(out: Path, manifest: Manifest, plans: dict[str, SplitPlan]) -> list[str]:
    """Take out of ``manifest`` every shard entry that is not what the plan cuts for its batches; returns their files.

    The configuration hash matched, so the plan is the one every listed shard was cut from: an entry
    whose rows or tokens differ from its batches' (a manifest part edited by hand, or copied from
    elsewhere) describes no shard this run can trust, nor re-extract in its place. Its batches become
    work again, extracted like any other, and its file, if any, goes with the strays. Each is named
    in a warning, with the state of its file.
    """
    dropped = []
    for name, info in manifest.splits.items():
        plan = plans[name]
        wrong = [(shard, expected) for shard in info.shards if (expected := _planned(shard, plan)) != _listed(shard)]
        for shard, (first_row, rows, tokens) in wrong:
            state = "missing" if lstat_or_none(out / shard.file) is None else "on disk"  # read by nobody
            log.warning("Shard %s is %s, and its entry (in a writer's manifest part, or the manifest) lists %d rows "
                        "and %d tokens from row %d, where this cache's plan has %d rows and %d tokens from row %d for "
                        "its batches: the entry was edited or copied from elsewhere, so its batches are extracted "
                        "again.", shard.file, state, shard.n_examples, shard.n_tokens, shard.first_row, rows,
                        tokens, first_row)
            info.shards.remove(shard)
            info.complete = manifest.complete = False
            dropped.append(shard.file)
    return dropped


def _listed(shard: ShardInfo) -> tuple[int, int, int]:
    return shard.first_row, shard.n_examples, shard.n_tokens


def _planned(shard: ShardInfo, plan: SplitPlan) -> tuple[int, int, int]:
    """First row, rows and tokens the plan gives the entry's batches (-1 for each when they are not planned)."""
    batches = range(shard.first_batch, shard.first_batch + shard.n_batches)
    if not batches or batches.start < 0 or batches.stop > len(plan.batches):
        return -1, -1, -1
    return (int(plan.first_rows[batches.start]), sum(len(plan.batches[b]) for b in batches),
            sum(plan.batch_tokens(b) for b in batches))


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
                         first_batch=old.first_batch, pooled_dtype=manifest.storage.stored_pooled_dtype,
                         compression=manifest.storage.stored_compression)
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
    if (new.n_examples, new.n_tokens) != (old.n_examples, old.n_tokens):  # the entry was checked against the plan
        raise CacheError(f"Re-extracting {old.file} gave {new.n_examples} rows and {new.n_tokens} tokens where the "
                         f"manifest lists {old.n_examples} and {old.n_tokens}; the data or model changed, so "
                         f"re-extract with {option('overwrite', True)}.")
    info.shards[index] = new
    write_manifest(out, manifest)
