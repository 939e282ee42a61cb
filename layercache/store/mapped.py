"""Zero-copy reads of a shard's states through a memory map of its uncompressed HDF5 chunks.

A state dataset ``(N, S, D)`` (``hidden`` or ``pooled/<mode>``) is chunked ``(C, Sc, D)``: a chunk
holds C consecutive rows of Sc states, and with no filters its bytes in the file *are* those
values, row-major. HDF5 says where every chunk sits (``H5Dchunk_iter``), so the D values of row r,
state s start at element

    start[r // C, s // Sc] + (r % C) · Sc · D + (s % Sc) · D

of the file viewed as the dataset's dtype, and a minibatch is one numpy gather from a read-only
memory map of the file: no HDF5 call, no intermediate buffer, no copy of the shard into process
memory. What a feed touches stays in the page cache (shared, reclaimable) instead of in private
copies, so a cache larger than memory streams through the OS the same way.

Why: reading a shard through h5py into buffers pays twice, for the kernel to map fresh pages
and for HDF5 to scatter the per-state chunks into a ``(t, S, D)`` array; mapping the same shard
costs a small fraction of that, and a batch gathered from the mapping costs the same as one
gathered from a copy (figures in ``benchmarks/README.md``).

Only layouts where the formula is exact are mapped: chunked (or contiguous) storage, no filters,
native byte order, every chunk present, all at one byte skew and inside the file. Anything else gets ``None``
and the caller reads through h5py. Checking the chunk index against the file's size matters: a
read past the end of a mapped file is a ``SIGBUS`` that kills the process, not an exception. A
committed shard is never written in place (extraction renames a finished file into place), so an
open mapping cannot shrink unless someone truncates the file by hand.
"""

from __future__ import annotations

import mmap
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np
import torch

from ..errors import CacheError
from .codecs import codec, codec_names

FAULT_AROUND_BYTES = 64 << 10
"""How far around a faulting page Linux maps cached pages too (``fault_around_bytes``, 64 KiB by default)."""


class MappedStates:
    """Rows of one ``(N, S, D)`` state dataset, read straight from a memory map of its shard.

    Build with :meth:`open`, which returns ``None`` for a dataset that cannot be mapped exactly.
    """

    def __init__(self, path: Path, shape: tuple[int, int, int], chunk: tuple[int, int], starts: np.ndarray,
                 skew: int, values: torch.Tensor, region: mmap.mmap) -> None:
        self.path = path
        self.shape = shape
        self.rows_per_chunk, self.states_per_chunk = chunk
        self._starts = starts  # (N / C, S / Sc) element index of each chunk's first value
        self._skew = skew  # byte where element 0 of ``values`` sits in the file
        self._rows = values  # (elements - D + 1, D) overlapping view of the read-only map: row i = values i..i+D-1
        self._region = region

    @classmethod
    def open(cls, path: str | os.PathLike, ds: h5py.Dataset) -> "MappedStates | None":
        """Map dataset ``ds`` of the shard file at ``path``; ``None`` when its layout cannot be mapped.

        Raises :class:`CacheError` when the file is shorter than its chunk index says (a truncated
        shard), which a mapping would turn into a crash on first touch.
        """
        path = Path(path)
        stored = ds.attrs.get("dtype", str(ds.dtype))  # bf16 is kept as uint16 bits tagged "bfloat16"
        stored = stored.decode() if isinstance(stored, bytes) else str(stored)
        dtype = codec(stored).torch_dtype if stored in codec_names() else None
        if (ds.ndim != 3 or ds.shape[0] == 0 or not ds.dtype.isnative or dtype is None
                or dtype.itemsize != ds.dtype.itemsize):
            return None
        plist = ds.id.get_create_plist()
        if plist.get_nfilters():
            return None
        N, S, D = ds.shape
        itemsize = ds.dtype.itemsize
        size = path.stat().st_size
        layout = plist.get_layout()
        if layout == h5py.h5d.CONTIGUOUS:
            offset = ds.id.get_offset()
            if offset is None:  # never written: HDF5 would return fill values
                return None
            C, Sc = N, S
            table = [((0, 0, 0), offset, N * S * D * itemsize)]
        elif layout == h5py.h5d.CHUNKED:
            C, Sc, Dc = ds.chunks
            if Dc != D:
                return None
            table = []

            def record(info) -> None:
                table.append((info.chunk_offset, info.byte_offset, info.size) if info.filter_mask == 0 else None)

            if hasattr(ds.id, "chunk_iter"):  # one pass over HDF5's index (h5py >= 3.8, HDF5 >= 1.12.3)
                ds.id.chunk_iter(record)
            else:
                for i in range(ds.id.get_num_chunks()):
                    record(ds.id.get_chunk_info(i))
        else:
            return None
        grid = (-(-N // C), -(-S // Sc))
        chunk_bytes = C * Sc * D * itemsize
        starts = np.full(grid, -1, dtype=np.int64)
        skew = {entry[1] % itemsize for entry in table if entry is not None}
        if None in table or len(skew) != 1:  # a chunk that skipped a filter, or chunks on different skews
            return None
        # HDF5 does not align chunks to the value size (a float32 chunk may start at an odd multiple
        # of 2). The chunks of one dataset normally lie a multiple of it apart, so they share one
        # skew and one view of the file starting at that byte serves them all (checked above).
        skew = skew.pop()
        for (row, state, _), byte_offset, nbytes in table:
            if nbytes != chunk_bytes:
                return None
            if byte_offset + nbytes > size:
                raise CacheError(f"Shard {path} is shorter than its own chunk index ({size:,} bytes, a chunk "
                                 f"ends at {byte_offset + nbytes:,}): it was truncated; re-extract the cache.")
            starts[row // C, state // Sc] = (byte_offset - skew) // itemsize
        if (starts < 0).any():  # unwritten chunks read as fill values through HDF5, not from the file
            return None
        with open(path, "rb") as f:
            region = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        with warnings.catch_warnings():  # torch warns that the buffer is read-only: it is only ever read
            warnings.simplefilter("ignore", UserWarning)
            flat = torch.frombuffer(region, dtype=dtype, count=(size - skew) // itemsize, offset=skew)
        # Row i of this view is values i .. i+D-1: every (row, state) vector is one row, wherever it starts.
        rows = flat.as_strided((flat.numel() - D + 1, D), (1, 1))
        return cls(path, (N, S, D), (C, Sc), starts, skew, rows, region)

    def positions(self, rows: np.ndarray, states: Sequence[int]) -> np.ndarray:
        """Element index of the first value of each (row, state): ``rows (...)`` -> ``(..., S')``."""
        C, Sc, D = self.rows_per_chunk, self.states_per_chunk, self.shape[2]
        s = np.asarray(states, dtype=np.int64)  # (S',)
        r = np.asarray(rows, dtype=np.int64)[..., None]  # (..., 1)
        return self._starts[r // C, s // Sc] + (r % C) * (Sc * D) + (s % Sc) * D  # (..., S')

    def gather(self, rows: np.ndarray, states: Sequence[int]) -> torch.Tensor:
        """Stored values of ``rows (...)`` for ``states``: a new ``(..., S', D)`` tensor in the stored precision."""
        at = self.positions(rows, states)  # (..., S')
        # torch's index_select copies the rows on all threads; numpy's fancy indexing uses one.
        return self._rows.index_select(0, torch.from_numpy(at.reshape(-1))).view(*at.shape, self.shape[2])

    def will_need(self, lo: int, hi: int, states: Sequence[int]) -> None:
        """Ask the OS to read rows ``[lo, hi)`` of ``states`` ahead, so a cold shard streams in large reads.

        A hint: without it the first touch of each page faults it in a little at a time. Whole
        chunks are advised, merged where they are adjacent in the file.
        """
        self._advise("MADV_WILLNEED", lo, hi, states)

    def dont_need(self, lo: int, hi: int, states: Sequence[int]) -> None:
        """Drop the pages of rows ``[lo, hi)`` of ``states`` from this process (``MADV_DONTNEED``).

        The mapping is a read-only view of a file, so nothing is lost: the pages stay in the OS page cache
        (shared, reclaimable) and a later touch maps them again. What it changes is the process's resident
        memory: a feed that drops each block's pages when it is done with it keeps its RSS at about one
        block, however large the cache it streams. Whole chunks are dropped (a neighbouring row of the
        same chunk faults its page back in if it is read again).

        One call drops the whole span from the first chunk to the last, other states' chunks between them
        included, plus :data:`FAULT_AROUND_BYTES` on each side: a page fault maps the cached pages around
        the one touched too (Linux's fault-around), and on a sparse read (a validation slice: rows far
        apart) those neighbours belong to chunks no block ever drops, so they piled up in the process.
        """
        self._advise("MADV_DONTNEED", lo, hi, states, margin=FAULT_AROUND_BYTES)

    def _advise(self, name: str, lo: int, hi: int, states: Sequence[int], margin: int | None = None) -> None:
        """``madvise(name)`` on the whole chunks holding rows ``[lo, hi)`` of ``states`` (where the OS has it).

        ``margin``: one call over the span of those chunks widened by ``margin`` bytes on each side, instead
        of one call per run of adjacent chunks.
        """
        advise = getattr(self._region, "madvise", None)
        flag = getattr(mmap, name, None)
        if advise is None or flag is None or hi <= lo:
            return
        C, Sc = self.rows_per_chunk, self.states_per_chunk
        itemsize = self._rows.element_size()
        chunk_bytes = C * Sc * self.shape[2] * itemsize
        cells = self._starts[lo // C:(hi - 1) // C + 1][:, sorted({s // Sc for s in states})]
        begins = np.sort(cells.ravel()) * itemsize + self._skew
        page = mmap.PAGESIZE
        if margin is not None:
            start = max(0, int(begins[0]) - margin) // page * page
            advise(flag, start, min(int(begins[-1]) + chunk_bytes + margin, len(self._region)) - start)
            return
        # Runs of chunks that follow each other in the file become one call each.
        breaks = np.nonzero(np.diff(begins) != chunk_bytes)[0] + 1
        for run in np.split(begins, breaks):
            start = int(run[0]) // page * page
            advise(flag, start, min(int(run[-1]) + chunk_bytes, len(self._region)) - start)
