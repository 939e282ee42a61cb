"""Extraction on torch.distributed: ``torchrun --nproc_per_node N -m layercache extract ...``, one writer per rank.

The several-writer protocol of :mod:`.run` on the engine users already run: every rank runs the
same command, and

1. rank 0 takes the cache's lock and prepares the run (:func:`~.job.prepare_job`: merges what an
   earlier run's writers committed, verifies, repairs, checks the disk, writes the manifest), then
   tells the others whether there is work; it holds the lock until the end, so an unrelated
   ``extract`` into the folder is still refused;
2. every other rank joins read-only (:func:`~.job.join_job`: loads the data and the backbone on its
   own device, and refuses a configuration that differs from the prepared one);
3. each rank writes its share (:func:`~.shares.assign_shares`: contiguous runs of the remaining
   batches, balanced by tokens, the same cut on every rank) under its own manifest part;
4. the ranks gather how each ended; rank 0 merges the parts (:func:`~.run.merge_shares`) when all
   succeeded. Otherwise it lists what was committed and every rank raises one error naming each
   failed rank and its error: nothing committed is lost, and the same command, with any number of
   ranks, resumes.

A rank killed outright (out of memory, SIGKILL) cannot report: torchrun stops the others, the
parts of every rank stay on disk, and the next run merges them before it plans. The cache folder
must be on a file system every rank sees (one node, or a shared file system across nodes); ranks
never write the same file. The process group uses NCCL when the ranks extract on CUDA devices
(each on ``cuda:LOCAL_RANK``) and gloo on CPUs; only a few small objects cross it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from ..core.option_names import option
from ..errors import ConfigError, LayercacheError
from .housekeeping import locked_output
from .job import ExtractionJob, ExtractResult, join_job, prepare_job
from .shares import assign_shares
from .specs import BatchSpec, DataSpec, StorageSpec
from .steps import list_committed, merge_shares, write_share

log = logging.getLogger("layercache")

GROUP_TIMEOUT = timedelta(minutes=30)
"""How long a rank waits for the others at a meeting point (rank 0's preparation, the end of every share)."""


class RankFailedError(LayercacheError):
    """One or more ranks of a distributed extraction stopped with an error (each named with its rank)."""

    reported_by_rank_zero = True
    """Every rank raises it to stop; only rank 0 prints it (the failed rank has printed its own error)."""


@dataclass(frozen=True)
class World:
    """This process's place among torchrun's: global rank, number of ranks, rank on its node."""

    rank: int
    size: int
    local_rank: int

    @property
    def leader(self) -> bool:
        """Rank 0: prepares, holds the lock and merges."""
        return self.rank == 0


def torchrun_world() -> World | None:
    """The torchrun environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) when it has more than one rank, else None."""
    try:
        size = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return None
    if size <= 1 or "RANK" not in os.environ:
        return None
    rank = int(os.environ["RANK"])
    return World(rank=rank, size=size, local_rank=int(os.environ.get("LOCAL_RANK", rank)))


def rank_device(device: str, world: World) -> str:
    """The device a rank extracts on: its own GPU (``cuda:LOCAL_RANK``) where the run asks for CUDA, else as given."""
    import torch

    wants_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if wants_cuda and device in ("auto", "cuda"):
        return f"cuda:{world.local_rank}"
    return device


def extract_on_ranks(model: str, data: DataSpec, storage: StorageSpec, batching: BatchSpec, out: Path,
                     pooling: list[str], world: World, *, overwrite: bool, repair: bool, allow_pickle: bool,
                     progress: bool) -> ExtractResult:
    """Run this rank's part of a distributed extraction (see the module docstring); every rank returns the result."""
    import torch
    import torch.distributed as dist

    if batching.device_map is not None:
        # Every rank would place its copy over all the node's GPUs at once; one process per model copy is the rule.
        raise ConfigError(f"{option('device_map')} splits one model over every device, so {world.size} torchrun ranks "
                          f"would each claim them all; run one process with {option('device_map')}, or torchrun with "
                          "one GPU per rank.")
    device = rank_device(batching.device, world)
    batching = BatchSpec(**{**batching.__dict__, "device": device})
    started_group = not dist.is_initialized()
    if started_group:
        backend = "nccl" if device.startswith("cuda") else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(torch.device(device))
        dist.init_process_group(backend=backend, timeout=GROUP_TIMEOUT)
    try:
        if world.leader:
            told = []  # whether the others have heard how the preparation went
            try:
                with locked_output(out):  # held until the merge: an unrelated writer is refused meanwhile
                    return _lead(model, data, storage, batching, out, pooling, world, told, overwrite=overwrite,
                                 repair=repair, allow_pickle=allow_pickle, progress=progress)
            except BaseException as err:
                if not told:  # the lock or the preparation failed: the others must not wait for the news
                    _broadcast({"failed": f"{type(err).__name__}: {err}"})
                raise
        return _follow(model, data, storage, batching, out, pooling, world, allow_pickle=allow_pickle)
    finally:
        if started_group:
            dist.destroy_process_group()


def _lead(model, data, storage, batching, out, pooling, world, told: list, *, overwrite, repair, allow_pickle,
          progress) -> ExtractResult:
    job = prepare_job(model, data, storage, batching, out, pooling, overwrite=overwrite, repair=repair,
                      allow_pickle=allow_pickle, progress=progress)
    told.append(True)
    if isinstance(job, ExtractResult):
        _broadcast({"done": True})
        return job
    _broadcast({"write": True})
    return _write_and_merge(job, world, progress=progress)


def _follow(model, data, storage, batching, out, pooling, world, *, allow_pickle) -> ExtractResult:
    news = _broadcast(None)
    if "failed" in news:
        raise RankFailedError(f"Rank 0 could not prepare the run ({news['failed']}); its own error says why.")
    if "done" in news:
        from ..store.manifest import read_manifest

        return ExtractResult(out, read_manifest(out), already_complete=True)
    job = join_job(model, data, storage, batching, out, pooling, allow_pickle=allow_pickle)
    return _write_and_merge(job, world, progress=False)


def _write_and_merge(job: ExtractionJob, world: World, *, progress: bool) -> ExtractResult:
    """Write this rank's share, meet the others, and (rank 0) merge; every rank learns the outcome."""
    import torch.distributed as dist

    share = assign_shares(job.manifest, job.plans, world.size)[world.rank]
    error = None
    try:
        write_share(job, share, progress)
    except Exception as err:  # reported to every rank below; a KeyboardInterrupt ends the process as it is
        error = f"{type(err).__name__}: {err}"
        log.error("Rank %d stopped: %s", world.rank, error)
    errors: list = [None] * world.size
    dist.all_gather_object(errors, error)
    failed = {rank: e for rank, e in enumerate(errors) if e is not None}
    if failed:
        if world.leader:
            list_committed(job)  # what every rank committed is in the manifest now
        raise RankFailedError(
            "Extraction stopped on " + "; ".join(f"rank {r} ({e.rstrip('.')})" for r, e in failed.items())
            + ". Every shard any rank committed is kept, and the same command resumes, with any number of ranks.")
    outcome = None
    if world.leader:
        try:
            outcome = {"manifest": merge_shares(job)}
        except Exception as err:  # noqa: BLE001 - sent to the others, then raised here
            outcome = {"failed": f"{type(err).__name__}: {err}"}
            _broadcast(outcome)
            raise
    outcome = _broadcast(outcome)
    if "failed" in outcome:
        raise RankFailedError(f"Rank 0 could not merge the ranks' shards ({outcome['failed']}).")
    return ExtractResult(job.out, outcome["manifest"], resumed=job.resumed, repaired=job.repaired,
                         rewritten=job.rewritten)


def _broadcast(value):
    """Rank 0's ``value`` on every rank (a small picklable object)."""
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]
