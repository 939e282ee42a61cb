"""A split's batches, in plan order, into consecutive shards, each recorded in the manifest once committed.

The order of effects is what makes a run resumable: a shard is written as ``.tmp``, fsynced and
renamed into place when full (or after the split's last batch), and only then listed in the
manifest, which is rewritten atomically. A run killed at any point leaves the manifest listing
only complete shards; a resumed run deletes any other shard file and continues with the batch
after the last listed one.
"""

from __future__ import annotations

from pathlib import Path

from ..core.confine import OwnedFolder
from ..store.manifest import Manifest, write_manifest
from ..store.writer import ExtractedBatch, ShardWriter, shard_name


class SplitShards:
    """Appends a split's batches to its shards; not thread-safe (one writer thread owns it)."""

    def __init__(self, out: Path, manifest: Manifest, split: str, *, n_states: int, dim: int, n_batches: int):
        self.out, self.manifest, self.split = out, manifest, split
        self.info = manifest.splits[split]
        self.owner = OwnedFolder.at(out)
        self.n_states, self.dim, self.n_batches = n_states, dim, n_batches
        self._writer: ShardWriter | None = None
        self._next_batch = self.info.batches_written

    def append(self, b: int, batch: ExtractedBatch) -> bool:
        """Append planned batch ``b`` (batches must come in plan order).

        Returns True when the shard is complete (full, or the split's last batch): call :meth:`commit`.
        """
        if b != self._next_batch:
            raise ValueError(f"batch {b} of split {self.split!r} arrived, expected batch {self._next_batch}")
        storage = self.manifest.storage
        if self._writer is None:
            # Checked at each new shard: the split folder real, the shard's name free of links and FIFOs.
            path = self.owner.file(self.split, shard_name(len(self.info.shards)))
            self._writer = ShardWriter(path, n_states=self.n_states,
                                       dim=self.dim, dtype=storage.dtype,
                                       store_tokens=storage.stores_tokens, pooling=storage.pooling,
                                       tasks=self.manifest.tasks, first_row=self.info.rows_written, first_batch=b)
        self._writer.append(batch)
        self._next_batch = b + 1
        return self._writer.payload_bytes >= storage.shard_bytes or b == self.n_batches - 1

    def commit(self) -> None:
        """Commit the shard being written and list it in the manifest (rewritten atomically)."""
        shard = self._writer.commit()
        self._writer = None
        self.info.shards.append(shard)
        write_manifest(self.out, self.manifest)

    def abort(self) -> None:
        """Delete the shard being written, if any (after an error or an interruption)."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.abort()
