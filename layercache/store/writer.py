"""Write one shard: a single HDF5 file holding a run of consecutive examples, without padding.

Layout of ``shard-NNNNN.h5`` (n examples, t tokens, S kept states, D hidden width)::

    hidden         (t, S, D)   token states, storage dtype (absent for pooled-only caches; int4: (t, S, D / 2))
    offsets        (n + 1,)    int64, example i owns tokens offsets[i]:offsets[i+1]
    input_ids      (t,)        int32
    word_ids       (t,)        int32, word index inside the example, -1 for special tokens (when known)
    example_index  (n,)        int64, the example's row in the source split
    pooled/<mode>  (n, S, D)   mean / first / last token, mask-aware
    scales/<state dataset>     a scaled codec's scales, (t or n, S, 1) for int8, (.., S, ceil(D / 32)) for int4
    labels/<task>  (n,) or (w,) per-example labels, or per-word labels for token tasks
    word_offsets   (n + 1,)    int64, word ranges into per-word labels (token tasks only)
    stats/sum, stats/sumsq (S, D) float64 over the shard's real tokens; attrs["count"]

The file is written as ``.tmp`` and renamed into place only when complete, so a crash can
lose at most the shard being written, and a reader never sees a half-written shard. Chunks of
``hidden`` hold one state for a run of tokens, so reading one layer across the whole split
touches only that layer's bytes.

Token states arrive state-major, (S, t, D), so each chunk's bytes are one contiguous slice of
a batch and are written as raw chunks (``write_direct_chunk``): HDF5 then only copies them to
the file, instead of gathering every chunk out of a (t, S, D) array through its hyperslab
machinery (~40 % of the append time). Uncompressed, the file is the same HDF5 dataset either way
and reads the same. A compressed cache (:mod:`.compression`) must pass each chunk through its filter,
so there each is written as a selection of exactly that chunk, which HDF5 filters straight to the file.

The ``.tmp`` file is created exclusively (HDF5's ``x`` mode, ``O_EXCL``): whatever stood at its
name (a temp shard a killed run left, a planted link) is unlinked first, never opened, so a write
cannot land outside the split folder through a link; the rename that commits the shard replaces a
link at the final name, never its target. That the split folder itself is a real folder inside the
cache is the caller's check (:class:`~layercache.core.confine.OwnedFolder`).

A failed system call (full disk, read-only folder) leaves this module as an :class:`OSError`
with its ``errno``, whatever form h5py gave it, and :meth:`ShardWriter.abort` always removes the
``.tmp`` file without raising, so the caller can report the one error that matters.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from ..core.checksum import fsync_and_checksum
from ..core.confine import lstat_or_none
from ..core.tasks import LabelTask
from ..errors import UnsafePathError
from .codecs import codec, scales_dataset
from .compression import NONE, filter_options, is_state_dataset, require_filters
from .manifest import ShardInfo

log = logging.getLogger("layercache")

CHUNK_TOKENS = 512
"""Tokens per chunk of ``hidden``; the other datasets' chunk lengths are in :meth:`ShardWriter._open`."""
POOLED_CHUNK = 64
"""Examples per chunk of ``pooled/<mode>``."""
INDEX_CHUNK = 4096
"""Entries per chunk of the int64 datasets (offsets, example_index, word_offsets, labels)."""
IDS_CHUNK = 8192
"""Entries per chunk of the int32 per-token datasets (input_ids, word_ids)."""


@dataclass
class ExtractedBatch:
    """What one forward pass produced, unpadded and ready to append to a shard."""

    hidden: np.ndarray | None
    """(S, t, W) token states in storage form (W: the codec's stored width of D), state-major, examples back to
    back; None for pooled-only."""
    lengths: np.ndarray
    """(b,) tokens per example."""
    input_ids: np.ndarray
    """(t,) int32."""
    word_ids: np.ndarray | None
    """(t,) int32 or None when words are unknown."""
    pooled: dict[str, np.ndarray]
    """mode -> (b, S, W) in storage form."""
    labels: dict[str, list]
    """task -> b entries (per-word lists for token tasks)."""
    example_index: np.ndarray
    """(b,) int64 rows in the source split."""
    stat_sum: np.ndarray
    """(S, D) float64 sum over real tokens."""
    stat_sumsq: np.ndarray
    stat_count: int
    overflow: int = 0
    """Values beyond the float16 range (clamped to ±65,504 when stored) in this batch; 0 for other dtypes."""
    hidden_scales: np.ndarray | None = None
    """(S, t, scales width) scales of the token states as written (a scaled codec: int8, int4); None otherwise."""
    pooled_scales: dict[str, np.ndarray] = field(default_factory=dict)
    """mode -> (b, S, scales width) scales of the pooled vectors (a scaled codec); empty otherwise."""

    @property
    def n_examples(self) -> int:
        """Examples in the batch (b)."""
        return int(len(self.lengths))

    @property
    def n_tokens(self) -> int:
        """Real tokens in the batch (t), all examples together."""
        return int(self.lengths.sum())


@dataclass
class ShardWriter:
    """Append batches to one shard file and commit it atomically."""

    path: Path
    """Final path; data goes to ``path + '.tmp'`` until :meth:`commit`."""
    n_states: int
    dim: int
    dtype: str
    store_tokens: bool
    pooling: list[str]
    tasks: list[LabelTask]
    first_row: int
    first_batch: int
    pooled_dtype: str | None = None
    """The pooled vectors' dtype where it is not ``dtype`` (float16 beside scaled token states); None: ``dtype``."""
    compression: str = NONE
    """The filter on the state datasets and their scales (:mod:`.compression`); ``none``: stored as they are."""
    _file: h5py.File | None = field(default=None, init=False, repr=False)
    _datasets: dict[str, h5py.Dataset] = field(default_factory=dict, init=False, repr=False)
    """Every dataset of the shard, open from its creation until the file is flushed (or discarded). Opening
    one per append would close it after each, and HDF5 writes a dataset's cached chunks when it closes:
    from h5py's deallocator, where a full disk can only be printed and ignored, not raised (:meth:`_create`)."""
    _tokens: _TokenChunks | None = field(default=None, init=False, repr=False)
    _n_examples: int = field(default=0, init=False)
    _n_tokens: int = field(default=0, init=False)
    _n_words: int = field(default=0, init=False)
    _n_batches: int = field(default=0, init=False)
    _has_word_ids: bool | None = field(default=None, init=False)
    _sum: np.ndarray | None = field(default=None, init=False, repr=False)
    _sumsq: np.ndarray | None = field(default=None, init=False, repr=False)
    _count: int = field(default=0, init=False)
    _overflow: int = field(default=0, init=False)

    @property
    def tmp_path(self) -> Path:
        """Where the shard is written until :meth:`commit`: ``<path>.tmp``."""
        return self.path.with_name(self.path.name + ".tmp")

    @property
    def n_examples(self) -> int:
        """Examples appended so far."""
        return self._n_examples

    @property
    def n_batches(self) -> int:
        """Batches appended so far."""
        return self._n_batches

    @property
    def payload_bytes(self) -> int:
        """Bytes of state data appended so far as the shard-size target counts them (int8, int4 as float16:
        :meth:`~layercache.store.codecs.StorageCodec.cut_bytes`)."""
        token_bytes = self.n_states * codec(self.dtype).cut_bytes(self.dim)
        pooled_bytes = self.n_states * codec(self._pooled_dtype).cut_bytes(self.dim)
        tokens = self._n_tokens if self.store_tokens else 0
        return token_bytes * tokens + pooled_bytes * self._n_examples * len(self.pooling)

    @property
    def _pooled_dtype(self) -> str:
        return self.pooled_dtype or self.dtype

    # --- writing ------------------------------------------------------------------------
    def _open(self, batch: ExtractedBatch) -> h5py.File:
        require_filters(self.compression)  # hdf5plugin's filters known to HDF5 before a dataset names one
        self.path.parent.mkdir(exist_ok=True)
        _clear_temp(self.tmp_path)
        # Held at once, so that a failure while laying out the datasets still closes it in abort().
        # "x": created exclusively, so nothing that appeared at the name meanwhile is written through.
        self._file = f = h5py.File(self.tmp_path, "x", track_order=True)
        S, D = self.n_states, self.dim
        stored_as = codec(self.dtype)
        vec_dtype, W = stored_as.file_dtype, stored_as.stored_width(D)  # W: D, or D / 2 for int4
        resizable = dict(maxshape=(None,), track_times=False)
        if self.store_tokens:
            hidden = self._create("hidden", shape=(0, S, W), maxshape=(None, S, W), dtype=vec_dtype,
                                  chunks=(CHUNK_TOKENS, 1, W), track_times=False)
            hidden.attrs["dtype"] = self.dtype
            self._tokens = _TokenChunks(hidden, vec_dtype)
            if stored_as.scaled:  # every state's scales of a run of tokens in one chunk: small, read with the values
                self._create_scales("hidden", CHUNK_TOKENS, self.dtype)
        self._create("offsets", data=np.zeros(1, np.int64), chunks=(INDEX_CHUNK,), **resizable)
        self._create("input_ids", shape=(0,), dtype=np.int32, chunks=(IDS_CHUNK,), **resizable)
        self._has_word_ids = batch.word_ids is not None
        if self._has_word_ids:
            self._create("word_ids", shape=(0,), dtype=np.int32, chunks=(IDS_CHUNK,), **resizable)
        self._create("example_index", shape=(0,), dtype=np.int64, chunks=(INDEX_CHUNK,), **resizable)
        pooled_as = codec(self._pooled_dtype)
        Wp = pooled_as.stored_width(D)
        for mode in self.pooling:
            ds = self._create(f"pooled/{mode}", shape=(0, S, Wp), maxshape=(None, S, Wp), dtype=pooled_as.file_dtype,
                              chunks=(POOLED_CHUNK, 1, Wp), track_times=False)
            ds.attrs["dtype"] = self._pooled_dtype
            if pooled_as.scaled:
                self._create_scales(f"pooled/{mode}", POOLED_CHUNK, self._pooled_dtype)
        if any(t.kind == "token" for t in self.tasks):
            self._create("word_offsets", data=np.zeros(1, np.int64), chunks=(INDEX_CHUNK,), **resizable)
        for task in self.tasks:
            dtype = np.float32 if task.kind == "regression" else np.int64
            self._create(f"labels/{task.name}", shape=(0,), dtype=dtype, chunks=(INDEX_CHUNK,), **resizable)
        self._sum = np.zeros((S, D), np.float64)
        self._sumsq = np.zeros((S, D), np.float64)
        return f

    def _create(self, name: str, **options) -> h5py.Dataset:
        """Create dataset ``name`` and keep it open in :attr:`_datasets` until the file is flushed or discarded.

        Never let go of a dataset object before then: the last one open of a dataset writes its
        cached chunks when it is collected, and on a full disk that write fails inside h5py's
        deallocator, where it is printed, not raised, and leaves HDF5 with a dataset half closed,
        which crashes the process when the file is closed (a segmentation fault, not a sentence).
        """
        ds = self._datasets[name] = self._file.create_dataset(name, **options, **self._filters(name, options))
        return ds

    def _filters(self, name: str, options: dict) -> dict:
        """The compression filter of state dataset ``name`` (and its chunk cache while written); none for the others,
        small next to the states, or for an uncompressed shard. Only ``hidden`` is written a whole chunk at a time."""
        if self.compression == NONE or not is_state_dataset(name):
            return {}
        return filter_options(self.compression, options["dtype"], options["chunks"], options["maxshape"],
                              appended=name != "hidden")

    def _create_scales(self, name: str, rows_per_chunk: int, dtype: str) -> None:
        """The resizable (0, S, scales width) dataset for the scales of state dataset ``name``, stored as ``dtype``
        (a scaled codec) says: int8's one float32 a vector, int4's bfloat16 per 32 values."""
        stored_as = codec(dtype)
        shape = (self.n_states, stored_as.scales_width(self.dim))
        ds = self._create(scales_dataset(name), shape=(0, *shape), maxshape=(None, *shape),
                          dtype=stored_as.scale_codec.file_dtype, chunks=(rows_per_chunk, *shape), track_times=False)
        ds.attrs["dtype"] = stored_as.scale_dtype

    @staticmethod
    def _append(ds: h5py.Dataset, values: np.ndarray) -> None:
        start = ds.shape[0]
        ds.resize(start + len(values), axis=0)
        ds[start:] = values

    def append(self, batch: ExtractedBatch) -> None:
        """Append one batch of examples (in order) to the shard."""
        try:
            self._append_batch(batch)
        except (OSError, RuntimeError) as err:
            error = _system_error(err, self.tmp_path)
            if error is err:
                raise
            raise error from err

    def _append_batch(self, batch: ExtractedBatch) -> None:
        if self._file is None:
            self._open(batch)
        if (batch.word_ids is not None) != self._has_word_ids:
            raise ValueError("every batch of a shard must agree on having word ids")
        if (codec(self.dtype).scaled and self.store_tokens and batch.hidden_scales is None
                or codec(self._pooled_dtype).scaled and any(m not in batch.pooled_scales for m in self.pooling)):
            raise ValueError(f"{self.dtype} states arrived without their scales")
        ds = self._datasets
        if self.store_tokens:
            self._tokens.append(batch.hidden)
            if batch.hidden_scales is not None:
                self._append(ds[scales_dataset("hidden")], batch.hidden_scales.transpose(1, 0, 2))  # (t, S, widths)
        self._append(ds["offsets"], self._n_tokens + np.cumsum(batch.lengths, dtype=np.int64))
        self._append(ds["input_ids"], batch.input_ids)
        if self._has_word_ids:
            self._append(ds["word_ids"], batch.word_ids)
        self._append(ds["example_index"], batch.example_index)
        for mode in self.pooling:
            self._append(ds[f"pooled/{mode}"], batch.pooled[mode])
            if mode in batch.pooled_scales:
                self._append(ds[scales_dataset(f"pooled/{mode}")], batch.pooled_scales[mode])
        token_tasks = [t for t in self.tasks if t.kind == "token"]
        if token_tasks:
            word_counts = np.array([len(w) for w in batch.labels[token_tasks[0].name]], np.int64)
            self._append(ds["word_offsets"], self._n_words + np.cumsum(word_counts))
            self._n_words += int(word_counts.sum())
        for task in self.tasks:
            values = batch.labels[task.name]
            if task.kind == "token":
                flat = np.fromiter((v for row in values for v in row), np.int64)
            else:
                flat = np.asarray(values, np.float32 if task.kind == "regression" else np.int64)
            self._append(ds[f"labels/{task.name}"], flat)
        self._sum += batch.stat_sum
        self._sumsq += batch.stat_sumsq
        self._count += batch.stat_count
        self._overflow += batch.overflow
        self._n_examples += batch.n_examples
        self._n_tokens += batch.n_tokens
        self._n_batches += 1

    def commit(self) -> ShardInfo:
        """Finish the file, fsync and checksum it, and rename it into place; returns its manifest entry."""
        if self._file is None:
            raise ValueError("cannot commit an empty shard")
        try:
            return self._commit()
        except (OSError, RuntimeError) as err:
            error = _system_error(err, self.tmp_path)
            if error is err:
                raise
            raise error from err

    def _commit(self) -> ShardInfo:
        f = self._file
        if self._tokens is not None:
            self._tokens.finish()
        self._create("stats/sum", data=self._sum, track_times=False)
        self._create("stats/sumsq", data=self._sumsq, track_times=False)
        f["stats"].attrs["count"] = self._count
        f.attrs["first_row"] = self.first_row
        f.attrs["first_batch"] = self.first_batch
        f.attrs["fp16_overflow"] = self._overflow
        f.flush()  # where a full disk shows: the cached chunks and metadata are written here
        self._datasets.clear()  # only now: their chunks are written, so closing them writes nothing
        # Forgotten before closing: a close that fails must not be tried again by abort() (see there).
        self._file = None
        f.close()
        digest = fsync_and_checksum(self.tmp_path)
        size = self.tmp_path.stat().st_size
        os.replace(self.tmp_path, self.path)
        return ShardInfo(
            file=f"{self.path.parent.name}/{self.path.name}", first_row=self.first_row,
            n_examples=self._n_examples, n_tokens=self._n_tokens, first_batch=self.first_batch,
            n_batches=self._n_batches, bytes=size, checksum=digest,
        )

    def abort(self) -> None:
        """Close and delete the temporary file (on error or interruption); never raises.

        It runs while another error is on its way up, often a full disk, and must neither replace
        that error nor leave the ``.tmp`` behind. Closing makes HDF5 write its cached chunks and
        metadata, which fails on a full or read-only disk, and HDF5 (2.0) crashes the process when
        a file whose close failed is closed again, as h5py does once the object is collected. The
        data is being thrown away, so the file's descriptor is first pointed at an anonymous
        in-memory file: the last writes land there and the close succeeds.
        """
        f, self._file = self._file, None
        if f is not None:
            _discard_writes(f)
            try:
                f.close()
            except Exception as err:  # noqa: BLE001 - the error being handled is the one to report
                log.debug("Closing the aborted shard %s failed: %s", self.tmp_path, err)
        self._datasets.clear()  # closed with the file: nothing is left for a deallocator to write
        self._tokens = None
        try:
            self.tmp_path.unlink(missing_ok=True)
        except OSError as err:  # a read-only folder: the next run removes stray temp shards
            log.debug("Could not remove %s: %s", self.tmp_path, err)


class _TokenChunks:
    """Append state-major (S, n, D) batches to a (t, S, D) dataset chunked (CHUNK_TOKENS, 1, D), chunk by chunk.

    A chunk is CHUNK_TOKENS consecutive tokens of one state. Batches do not end on chunk
    boundaries, so the tokens after a batch's last full chunk wait in ``_carry`` (S, C, D) until
    the next batch fills it, and :meth:`finish` writes the last, partial chunk zero-padded (what
    HDF5 itself stores past the end of an edge chunk).
    """

    def __init__(self, ds: h5py.Dataset, dtype: np.dtype):
        self.ds = ds
        n_states, dim = ds.shape[1:]
        self._carry = np.zeros((n_states, CHUNK_TOKENS, dim), dtype)
        self._carried = 0  # tokens waiting in _carry
        self._size = 0  # tokens appended so far
        self._filtered = ds.id.get_create_plist().get_nfilters() > 0  # raw chunks would skip the filter

    def _write(self, start: int, chunk_per_state) -> None:
        for j, chunk in enumerate(chunk_per_state):  # chunk: (C, D), contiguous
            if self._filtered:  # compressed: HDF5 filters a selection of one whole chunk (the last up to the end)
                end = min(start + len(chunk), self.ds.shape[0])
                self.ds[start:end, j] = chunk[:end - start]
            else:
                self.ds.id.write_direct_chunk((start, j, 0), chunk)

    def append(self, values: np.ndarray) -> None:
        n = values.shape[1]
        start = self._size - self._carried  # first token of the open chunk
        self._size += n
        self.ds.resize(self._size, axis=0)
        used = 0
        if self._carried:
            used = min(CHUNK_TOKENS - self._carried, n)
            self._carry[:, self._carried:self._carried + used] = values[:, :used]
            self._carried += used
            if self._carried < CHUNK_TOKENS:
                return
            self._write(start, self._carry)
            start, self._carried = start + CHUNK_TOKENS, 0
        while n - used >= CHUNK_TOKENS:
            self._write(start, values[:, used:used + CHUNK_TOKENS])
            start, used = start + CHUNK_TOKENS, used + CHUNK_TOKENS
        self._carried = n - used
        self._carry[:, :self._carried] = values[:, used:]

    def finish(self) -> None:
        if self._carried:
            self._carry[:, self._carried:] = 0
            self._write(self._size - self._carried, self._carry)
            self._carried = 0


def _clear_temp(path: Path) -> None:
    """Unlink whatever a killed run (or anyone) left at a temp shard's name; a link goes, its target stays."""
    st = lstat_or_none(path)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{path} is a folder where layercache writes a temporary shard; move it away, or "
                              "choose another folder.")
    os.unlink(path)


def shard_name(index: int) -> str:
    """File name of the ``index``-th shard of a split: ``shard-00007.h5``."""
    return f"shard-{index:05d}.h5"


_ERRNO = re.compile(r"errno = (\d+)")


def _system_error(err: Exception, path: Path) -> Exception:
    """``err`` as an :class:`OSError` with its ``errno`` when it reports a failed system call, else ``err``.

    HDF5 puts the failed call's errno in its message (``..., errno = 28, error message = 'No space
    left on device', ...``); h5py raises some of these as OSError with ``errno`` set and others,
    such as a failed flush, as a RuntimeError without it.
    """
    if isinstance(err, OSError) and err.errno is not None:
        return err
    match = _ERRNO.search(str(err))
    if match is None or int(match.group(1)) == 0:
        return err
    code = int(match.group(1))
    new = OSError(code, os.strerror(code), str(path))
    new.__cause__ = err
    return new


def _discard_writes(f: h5py.File) -> None:
    """Point an open file's descriptor at an anonymous in-memory file (Linux), so closing it writes nothing to disk.

    Only for a file about to be deleted. Elsewhere, or for another HDF5 driver, nothing changes.
    """
    try:
        if f.driver != "sec2" or not hasattr(os, "memfd_create"):
            return
        fd = f.id.get_vfd_handle()
        sink = os.memfd_create("layercache-discarded-shard")
    except Exception:  # noqa: BLE001 - best effort: a plain close follows either way
        return
    try:
        os.dup2(sink, fd)
    except OSError:
        pass
    finally:
        os.close(sink)
