"""One writer's batches of a split into shards, each recorded in the writer's manifest part once committed.

The order of effects is what makes a run resumable: a shard is written as ``.tmp``, fsynced and
renamed into place when full (or at the end of a run of consecutive batches of the writer's
share), and only then listed in the writer's part file (:mod:`layercache.store.parts`), which is
rewritten atomically. A run killed at any point leaves the parts listing only complete shards;
the next run merges them into the manifest, deletes any other shard file and extracts the
batches no listed shard covers.

A shard is named after its first planned batch and starts at that batch's row in the plan, so
writers working on other batches of the same split never need each other's numbers.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..core.confine import OwnedFolder
from ..store.manifest import Manifest
from ..store.parts import ManifestPart, write_part
from ..store.writer import ExtractedBatch, ShardWriter, shard_name
from .plan import SplitPlan


class SplitShards:
    """Appends one writer's batches of a split to shards; not thread-safe (one writer thread owns it)."""

    def __init__(self, out: Path, manifest: Manifest, part: ManifestPart, split: str, plan: SplitPlan,
                 batches: tuple[int, ...], *, n_states: int, dim: int):
        self.out, self.manifest, self.part, self.split, self.plan = out, manifest, part, split, plan
        self.owner = OwnedFolder.at(out)
        self.n_states, self.dim = n_states, dim
        self._writer: ShardWriter | None = None
        self._batches = batches
        self._next = 0  # position in ``batches`` of the batch expected next

    def append(self, b: int, batch: ExtractedBatch) -> bool:
        """Append planned batch ``b`` (the share's batches must come in order).

        Returns True when the shard is complete (full, or the last of a run of consecutive batches
        of the share): call :meth:`commit`.
        """
        if self._next >= len(self._batches) or b != self._batches[self._next]:
            expected = self._batches[self._next] if self._next < len(self._batches) else "none"
            raise ValueError(f"batch {b} of split {self.split!r} arrived, expected batch {expected}")
        storage = self.manifest.storage
        if self._writer is None:
            # Checked at each new shard: the split folder real, the shard's name free of links and FIFOs.
            path = self.owner.file(self.split, shard_name(b))
            self._writer = ShardWriter(path, n_states=self.n_states, dim=self.dim, dtype=storage.dtype,
                                       store_tokens=storage.stores_tokens, pooling=storage.pooling,
                                       tasks=self.manifest.tasks, first_row=int(self.plan.first_rows[b]),
                                       first_batch=b, pooled_dtype=storage.stored_pooled_dtype,
                                       compression=storage.stored_compression)
        self._writer.append(batch)
        self._next += 1
        follows = self._next < len(self._batches) and self._batches[self._next] == b + 1
        return self._writer.payload_bytes >= storage.shard_bytes or not follows

    def commit(self) -> None:
        """Commit the shard being written and list it in the writer's part (rewritten atomically).

        A part that cannot be written (a full disk) takes the shard with it: no file is left that no
        manifest lists, and the next run extracts its batches again, as it would have anyway.
        """
        shard = self._writer.commit()
        self._writer = None
        self.part.add(self.split, shard)
        try:
            write_part(self.out, self.part)
        except BaseException:
            self.part.splits[self.split].remove(shard)
            with contextlib.suppress(OSError):  # the error on its way up is the one to report; a next run cleans up
                self.owner.remove(*shard.file.split("/"))
            raise

    def abort(self) -> None:
        """Delete the shard being written, if any (after an error or an interruption)."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.abort()
