"""The write and merge steps of an extraction, shared by every writer backend.

:func:`write_share` forwards one writer's share of the remaining batches and commits its shards
under that writer's manifest part; :func:`merge_shares` folds the parts into the manifest once all
writers have finished and finishes the splits; :func:`list_committed` folds them after a stop. The
single process (:mod:`.run`) and torchrun's ranks (:mod:`.distributed`) call the same three.
"""

from __future__ import annotations

import functools
import logging

from ..errors import CacheError
from ..progress import extraction_progress
from ..store.manifest import Manifest, write_manifest
from ..store.parts import ManifestPart, merge_parts
from ..store.writer import ExtractedBatch
from .background import BackgroundWriter, BufferPool
from .forward import run_batch
from .housekeeping import write_errors
from .job import ExtractionJob
from .memory import HeapTrimmer
from .shards import SplitShards
from .shares import Share, remaining_batches
from .stats import split_stats

log = logging.getLogger("layercache")


def write_share(job: ExtractionJob, share: Share, progress: bool = True) -> ManifestPart:
    """Forward the share's batches; shards are committed under the writer's manifest part (returned).

    Whatever stops it (a failed write, NaN from the model, Ctrl-C) removes the shard being written
    and keeps the committed ones, listed in the part, so the same command resumes; a failed write
    arrives as :class:`~layercache.errors.CacheWriteError`. Writes only the writer's own files.
    """
    part = ManifestPart(writer=share.writer, config_hash=job.manifest.config_hash)
    job.held.keep_only(share.batches)  # another writer's batches are forwarded by that writer
    try:
        with write_errors(job.out), extraction_progress(progress) as bars:
            for name in job.plans:
                batches = share.batches.get(name, ())
                if batches:
                    _write_split(job, share, part, name, batches, bars)
    finally:
        job.held.clear()  # held states serve this run only; a stopped run's are never used again
    return part


def _write_split(job: ExtractionJob, share: Share, part: ManifestPart, name: str, batches: tuple[int, ...],
                 bars) -> None:
    """The share's batches of one split, forwarded in order; the writer appends them to shards (background.py)."""
    info, plan = job.manifest.splits[name], job.plans[name]
    mine = share.rows(name, plan)  # the bar counts this writer's rows on top of what was committed before
    task = bars.add_task(name, total=info.rows_written + mine, completed=info.rows_written,
                         completed_start=info.rows_written, tokens=0, tokens_start=0)
    shards = SplitShards(job.out, job.manifest, part, name, plan, batches, n_states=len(job.keep),
                         dim=job.manifest.hidden_size)
    trimmer = HeapTrimmer()
    buffers = job.buffers
    try:
        with BackgroundWriter(threaded=job.threaded) as writer:
            for b in batches:
                examples = [plan.examples[i] for i in plan.batches[b]]
                buffer = None if buffers is None else buffers.take(writer.check)
                batch = run_batch(job.backbone, examples, job.records.splits[name], keep=job.keep,
                                  tasks=job.manifest.tasks, packer=job.packer, out=buffer, split=name,
                                  first_row=int(plan.first_rows[b]),  # the batch's cache row, for a NaN refusal
                                  hidden=job.held.take(name, b))  # a forward that ran while preparing
                writer.submit(functools.partial(_write_batch, shards, b, batch, buffers, buffer))
                trimmer.batch_done()
                bars.update(task, advance=batch.n_examples,
                            tokens=bars.tasks[task].fields["tokens"] + batch.n_tokens)
    except BaseException:
        shards.abort()  # the writer thread has stopped: nothing else touches the shard
        raise


def _write_batch(shards: SplitShards, b: int, batch: ExtractedBatch, buffers: BufferPool | None, buffer) -> None:
    """The writer thread's job for one batch: append it, free its buffer, commit the shard if complete."""
    try:
        complete = shards.append(b, batch)
    finally:
        if buffer is not None:  # the data is in the file now; the forward side may refill it
            buffers.give_back(buffer)
    if complete:
        shards.commit()


def list_committed(job: ExtractionJob) -> None:
    """Merge the writers' parts into the manifest after a stopped run, so it lists what they committed.

    Best effort, while another error is on its way up (a full disk, Ctrl-C): when the merge fails
    too, the parts stay and the next run merges them.
    """
    try:
        merge_parts(job.out, job.manifest)
    except Exception as err:  # noqa: BLE001 - the error being handled is the one to report
        log.debug("Merging the manifest parts of %s after a stopped run failed: %s", job.out, err)


def merge_shares(job: ExtractionJob) -> Manifest:
    """The merge step, once every writer has finished: fold the parts into the manifest and finish the splits.

    A split whose batches are all covered gets its statistics (read back from its shards' sums)
    and is marked complete; the cache is complete when every split is. A batch still uncovered
    (a writer that failed) is refused naming the split, with the fix: the same command resumes.
    """
    out, manifest = job.out, job.manifest
    with write_errors(out):
        merge_parts(out, manifest)
        left = remaining_batches(manifest, job.plans)
        for name, info in manifest.splits.items():
            if left[name] or info.complete:
                continue
            info.stats, overflow = split_stats(out, info, manifest.layer_names)
            # Per split, then the total: a repair recomputes a split's count, so adding would double it.
            counts = manifest.extraction
            counts.fp16_overflow_by_split = {**(counts.fp16_overflow_by_split or {}), name: overflow}
            counts.fp16_overflow = sum(counts.fp16_overflow_by_split.values())
            info.complete = True
        manifest.complete = all(info.complete for info in manifest.splits.values())
        write_manifest(out, manifest)
    if not manifest.complete:
        name = next(n for n, batches in left.items() if batches)
        raise CacheError(f"Split {name!r} of {out} still has {len(left[name])} batches no writer committed; run "
                         "the same command again to extract them.")
    return manifest
