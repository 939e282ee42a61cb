"""Read a cache lazily: :class:`LayerCache` opens shards on demand and never loads a split whole.

Rows are numbered per split in cache order (the order extraction wrote them, longest examples
first); ``example_index(split)`` maps a row back to its row in the source dataset. Layers can be
named (``"layer_3"``, ``"embeddings"``) or indexed among the kept states (``-1`` = last).

This module holds the cache itself: opening it, its metadata and side files, access to its shards
(each checked against the manifest when first opened), labels and statistics. Its reads of states
by row are in :mod:`.state_reads` (a base class of ``LayerCache``), its reads at split-wide token positions
(:meth:`LayerCache.gather_positions`) in :mod:`.position_reads`, and the translation of damaged shard bytes
into one sentence in :mod:`.read_errors`. Its padded batches (:meth:`LayerCache.batch`,
``iter_batches``, ``torch_dataset``) are the functions of :mod:`.batch_reads`, which read through the
cache feed (:mod:`.cache_feed`) and take the cache as an argument: this module imports them, and
nothing it imports refers back to ``LayerCache``.

Batches have the layout of :mod:`layercache.store.batches` (where :class:`CacheBatch` is defined;
it stays importable from here, as :class:`CacheDataset` does).
"""

from __future__ import annotations

import bisect
import copy
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np

from ..core.layers import LayerSpec, resolve_layers
from ..core.tasks import LabelTask
from ..errors import CacheError, ConfigError
from . import batch_reads, position_reads
from .batch_reads import CacheDataset
from .batches import CacheBatch
from .codecs import codec
from .compression import read_chunk_cache, require_filters
from .lens import LensWeights, read_lens
from .manifest import Manifest, SplitInfo, confined_path, read_manifest
from .mapped import MappedStates
from .parts import fold_parts, read_parts
from .projection import Projection, read_projection
from .read_errors import translate_read_errors
from .shard_checks import check_shard_labels, check_shard_layout, open_shard, shard_problem
from .side_checks import side_file_problems
from .state_reads import StateReads
from .vocabulary import Vocabulary, read_vocabulary
from .writer import CHUNK_TOKENS

__all__ = ["LayerCache", "CacheBatch", "CacheDataset", "VALIDATION_NAMES", "TEST_NAMES", "state_positions",
           "translate_read_errors", "using_cache"]

VALIDATION_NAMES = ("validation", "valid", "dev", "val")
"""Usual names of a validation split, in the order :meth:`LayerCache.validation_split` tries them."""

TEST_NAMES = ("test",)
"""Names of a test split, which :meth:`LayerCache.report_split` tries for a head's held-out scores."""

OPEN_SHARDS = 4
"""How many shard files a :class:`LayerCache` keeps open through HDF5 at once (the least recently used is let go).

Why a bound: an open HDF5 file holds about 0.5 MiB of its own, and its metadata cache keeps the chunk index
of every dataset read (a few MiB for a shard of small chunks) until the file is closed, so a reader that kept
every shard open grew with the cache: a head's feed over hundreds of shards held hundreds of MiB that no
memory budget counted. The states themselves do not need the handle: a memory map
(:mod:`layercache.store.mapped`) outlives it.
"""


def state_positions(layers: LayerSpec | Sequence[LayerSpec] | None, names: Sequence[str],
                    owner: str = "the states") -> list[int]:
    """Positions in ``names`` of state names or (negative) indices, in the order given; None = all.

    ``owner`` names what holds the states in the refusal: "Layer 'x' is not in this cache, ...".
    The rules are :func:`layercache.core.layers.resolve_layers`'s.
    """
    return resolve_layers(layers, names, owner)


@contextmanager
def using_cache(cache: str | os.PathLike | LayerCache | None) -> Iterator[LayerCache]:
    """``with using_cache(cache) as handle:`` the open cache a library call was given, or the one at a path.

    A :class:`LayerCache` is used as it is and left open (its caller owns it); a path (None: the
    most recent cache, as :meth:`LayerCache.open`) is opened here and closed on leaving the block.
    """
    if isinstance(cache, LayerCache):
        yield cache
        return
    with LayerCache.open(cache) as handle:
        yield handle


class LayerCache(StateReads):
    """A cache folder written by ``layercache extract``, opened for reading.

    Use :meth:`open` (or ``with LayerCache.open(path) as cache:``). All reads are lazy: only the
    shards and byte ranges asked for are touched.
    """

    def __init__(self, path: Path, manifest: Manifest):
        self.path = Path(path)
        self.manifest = manifest
        self._shard_entries = {shard.file: shard for split in manifest.splits.values() for shard in split.shards}
        for file in self._shard_entries:  # refuse links out of the cache before any read
            confined_path(self.path, file)
        self._handles: OrderedDict[str, h5py.File] = OrderedDict()  # at most OPEN_SHARDS, least recent first
        self._checked: dict[str, tuple[int, int, int, int]] = {}  # file -> (device, inode, size, mtime) checked
        self._maps: dict[tuple[str, str], MappedStates | None] = {}
        row = CHUNK_TOKENS * len(manifest.layer_names) * codec(manifest.storage.dtype).vector_bytes(self.hidden_size)
        self._chunk_cache = read_chunk_cache(manifest.storage.stored_compression, row)  # a row: every state's chunk
        self._pid = os.getpid()
        self._offsets: dict[str, np.ndarray] = {}
        self._vocabulary: Vocabulary | None = None
        self.committed = manifest
        """What the cache's writers have committed (an unfinished cache's shards beyond the readable rows,
        its writers' manifest parts included): what ``info`` counts as written."""

    # --- opening ----------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike | None = None, *, allow_incomplete: bool = False) -> "LayerCache":
        """Open a cache folder (default: the most recently written cache).

        An unfinished cache is refused unless ``allow_incomplete`` (then each split shows its
        committed rows from the first up to the first row not written yet,
        :meth:`~layercache.store.manifest.SplitInfo.readable_shards`), because training on part of a
        split silently would be wrong.
        """
        from .paths import resolve_cache_path

        path = resolve_cache_path(path)
        manifest = read_manifest(path)
        committed = None
        if not manifest.complete:  # what the writers committed, their parts not merged yet included
            committed = copy.deepcopy(manifest)
            fold_parts(committed, read_parts(path, committed), path)
        if not manifest.complete and not allow_incomplete:
            raise CacheError(
                f"The cache {path} is incomplete ({_progress_text(committed)}); re-run the same "
                "`layercache extract` command to finish it."
            )
        if committed is not None:
            for split in manifest.splits.values():
                split.shards = split.readable_shards()
        cache = cls(path, manifest)
        cache.committed = committed or manifest
        return cache

    def close(self) -> None:
        """Close every open shard; the cache can still be read afterwards (shards reopen on demand)."""
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
        self._maps.clear()  # a mapping is released once no array views it

    def __enter__(self) -> "LayerCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"LayerCache({str(self.path)!r}, model={self.manifest.model.name!r}, "
                f"splits={self.splits}, layers={len(self.layer_names)})")

    # --- metadata ---------------------------------------------------------------------
    @property
    def splits(self) -> list[str]:
        """Split names, in the manifest's order."""
        return list(self.manifest.splits)

    def validation_split(self, exclude: str | None = None) -> str | None:
        """The split called ``validation``, ``valid``, ``dev`` or ``val`` (first found; not ``exclude``), or None."""
        return self.report_split(exclude=exclude)

    def report_split(self, asked: str | None = None, *, names: Sequence[str] = VALIDATION_NAMES,
                     exclude: str | None = None, fallback: str | None = None) -> str | None:
        """The split a score or an analysis is reported on: ``asked`` when given (refused, as
        :meth:`require_split`, when the cache has no such split), else the first of ``names`` the cache has
        other than ``exclude`` (the split trained on), else ``fallback``.

        The defaults give the validation split; a head's held-out scores pass ``names=TEST_NAMES``, the
        probe report ``TEST_NAMES + VALIDATION_NAMES``, a depth analysis a ``fallback`` split.
        """
        if asked is not None:
            self.require_split(asked)
            return asked
        return next((name for name in names if name in self.manifest.splits and name != exclude), fallback)

    def require_split(self, split: str) -> None:
        """Refuse a split the cache does not have, listing those it has."""
        if split not in self.manifest.splits:
            raise ConfigError(f"The cache has no split {split!r}; its splits are: {', '.join(self.splits)}.")

    @property
    def layer_names(self) -> list[str]:
        """Names of the kept states, in stored order (``"embeddings"``, ``"layer_1"``, …)."""
        return self.manifest.layer_names

    @property
    def hidden_size(self) -> int:
        """D, the width of every state."""
        return self.manifest.hidden_size

    @property
    def tasks(self) -> list[LabelTask]:
        """The label tasks the cache holds labels for."""
        return list(self.manifest.tasks)

    @property
    def stores_tokens(self) -> bool:
        """Whether token states are stored (False for a cache of pooled vectors only)."""
        return self.manifest.stores_tokens

    def split_info(self, split: str) -> SplitInfo:
        """The manifest entry of ``split`` (its shards and counts); refuses an unknown split."""
        try:
            return self.manifest.splits[split]
        except KeyError:
            raise CacheError(
                f"The cache has no split {split!r}; its splits are: {', '.join(self.splits)}."
            ) from None

    def num_examples(self, split: str) -> int:
        """Rows of ``split`` in the cache (committed rows only, for an unfinished cache)."""
        return self.split_info(split).rows_written

    def layer_index(self, layers: LayerSpec | Sequence[LayerSpec] | None) -> list[int]:
        """Positions among the kept states for names or (negative) indices, in the order given; None = all."""
        return resolve_layers(layers, self.layer_names, "this cache")

    def damaged_shards(self) -> list[str]:
        """Listed shards whose file is missing or no longer has the checksum the manifest recorded.

        Reads every shard once (at disk speed); an empty list means the cache's bytes are exactly
        what extraction committed.
        """
        return list(self.shard_problems())

    def shard_problems(self) -> dict[str, str]:
        """:meth:`damaged_shards` with what is wrong with each: ``missing``, ``cannot be read (...)``,
        ``is a FIFO (named pipe), not a regular file``, ``changed since extraction``."""
        found = {shard.file: shard_problem(self.path / shard.file, shard.checksum)
                 for split in self.manifest.splits.values() for shard in split.shards}
        return {file: problem for file, problem in found.items() if problem is not None}

    def side_file_problems(self) -> dict[str, str]:
        """The side files the manifest lists (``vocab.json``, ``lens.safetensors``, ``projection.safetensors``)
        that are missing, not a regular file (a link, a folder), unreadable or changed since extraction, with
        what is wrong with each; ``extract ... --repair`` writes them again. Reads each file once."""
        return side_file_problems(self.path, self.manifest)

    # --- side files -------------------------------------------------------------------
    def vocabulary(self) -> Vocabulary:
        """The tokenizer's id -> token table and special ids (``vocab.json``), checked against its checksum.

        Read once and kept. A cache written before layercache saved the file is refused with a
        :class:`CacheError` saying how to add it (the rest of such a cache reads as before).
        """
        if self._vocabulary is None:
            self._vocabulary = read_vocabulary(self.path, self.manifest)
        return self._vocabulary

    def lens_weights(self) -> LensWeights:
        """A decoder's final norm and unembedding (``lens.safetensors``), checked against its checksum.

        Read anew at each call (the unembedding can be large; keep the result while you need it).
        Refused with a :class:`CacheError` for an encoder cache and for a cache without the file.
        """
        return read_lens(self.path, self.manifest)

    def projection(self) -> Projection | None:
        """The ``--project K`` basis every state was stored in (``projection.safetensors``, checked against its
        checksum); None for a cache stored at the model's width. Only paths that join the cache with the model
        need it (live heads, ``verify``, the logit lens): everything else reads the K-wide states as they are."""
        return read_projection(self.path, self.manifest)

    # --- shard access -----------------------------------------------------------------
    def _handle(self, file: str) -> h5py.File:
        """The open shard ``file``, checked against its manifest entry the first time it is opened.

        At most :data:`OPEN_SHARDS` stay open. A handle let go is not closed by force (a caller may still
        hold one of its datasets, which keeps the file open until it is dropped); reopening a file whose
        identity (device, inode, size, modification time) is the one checked skips the checks, and a
        file that changed meanwhile is checked again.
        """
        if os.getpid() != self._pid:  # h5py handles must not cross a fork (DataLoader workers)
            self._handles = OrderedDict()
            self._pid = os.getpid()
        handle = self._handles.get(file)
        if handle is not None:
            self._handles.move_to_end(file)
            return handle
        path = confined_path(self.path, file)
        require_filters(self.manifest.storage.stored_compression, self.path)  # hdf5plugin: before a compressed read
        handle = open_shard(path, self._chunk_cache)  # a FIFO is refused, never opened
        try:
            st = os.fstat(handle.id.get_vfd_handle())
            identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if self._checked.get(file) != identity:
                check_shard_layout(handle, self._shard_entries[file], self.manifest)
                check_shard_labels(handle, self._shard_entries[file], self.manifest)
                self._checked[file] = identity
        except BaseException:
            handle.close()
            raise
        self._handles[file] = handle
        while len(self._handles) > OPEN_SHARDS:
            self._handles.popitem(last=False)  # dropped, not closed: see the docstring
        return handle

    def _mapped(self, file: str, name: str) -> MappedStates | None:
        """Shard ``file``'s state dataset ``name`` memory-mapped, or None when its layout cannot be."""
        key = (file, name)
        if key not in self._maps:
            self._maps[key] = MappedStates.open(self.path / file, self._handle(file)[name])
        return self._maps[key]

    # Shards one at a time, for readers that plan their own reads (a head's CacheFeed). Shard
    # ``shard`` of a split is ``split_info(split).shards[shard]``; it holds the split's rows
    # ``first_row … first_row + n_examples - 1``, and every shard is checked against its manifest
    # entry when it is first opened.
    def shard_dataset(self, split: str, shard: int, name: str) -> h5py.Dataset | None:
        """The HDF5 dataset ``name`` of shard ``shard`` of ``split`` (e.g. ``"hidden"``, ``"word_ids"``,
        ``"labels/<task>"``), or None when the shard has no such dataset.

        Read-only: a committed shard is never written in place.
        """
        found = self._handle(self.split_info(split).shards[shard].file).get(name)
        return found if isinstance(found, h5py.Dataset) else None

    def mapped_states(self, split: str, shard: int, name: str = "hidden") -> MappedStates | None:
        """State dataset ``name`` (``"hidden"`` or ``"pooled/<mode>"``) of a shard, memory-mapped
        (:mod:`layercache.store.mapped`); None when its layout cannot be mapped (read it through
        :meth:`shard_dataset` then). One mapping per dataset, shared by every caller.
        """
        return self._mapped(self.split_info(split).shards[shard].file, name)

    def _shard_starts(self, split: str) -> list[int]:
        return [s.first_row for s in self.split_info(split).shards]

    def _locate(self, split: str, row: int) -> tuple[int, int]:
        """(shard number, row inside the shard) for a split row."""
        n = self.num_examples(split)
        if not 0 <= row < n:
            raise IndexError(f"row {row} is out of range for split {split!r} with {n} examples")
        shard = bisect.bisect_right(self._shard_starts(split), row) - 1
        return shard, row - self.split_info(split).shards[shard].first_row

    def shard_offsets(self, split: str, shard: int) -> np.ndarray:
        """(n + 1,) token offsets of a shard's rows: row ``i`` of the shard holds tokens ``[o[i], o[i + 1])``.

        Read once per shard and kept; do not modify the array.
        """
        info = self.split_info(split).shards[shard]
        if info.file not in self._offsets:
            self._offsets[info.file] = self._handle(info.file)["offsets"][:]
        return self._offsets[info.file]

    def _concat(self, split: str, name: str) -> np.ndarray:
        return np.concatenate([self._handle(s.file)[name][:] for s in self.split_info(split).shards])

    @translate_read_errors
    def lengths(self, split: str) -> np.ndarray:
        """(n,) tokens per example."""
        return np.concatenate([np.diff(self.shard_offsets(split, i))
                               for i in range(len(self.split_info(split).shards))])

    @translate_read_errors
    def example_index(self, split: str) -> np.ndarray:
        """(n,) source-dataset row of each cache row."""
        return self._concat(split, "example_index")

    # --- labels -----------------------------------------------------------------------
    @translate_read_errors
    def labels(self, split: str, task: str) -> np.ndarray | list[np.ndarray]:
        """Labels of a task: an array (n,) for sequence / regression, or one per-word array per example."""
        spec = self.manifest.task(task)
        if spec.kind != "token":
            return self._concat(split, f"labels/{task}")
        out = []
        for info in self.split_info(split).shards:
            h = self._handle(info.file)
            flat, offsets = h[f"labels/{task}"][:], h["word_offsets"][:]
            out.extend(flat[a:b] for a, b in zip(offsets[:-1], offsets[1:]))
        return out

    # --- states at token positions (:mod:`.position_reads`) ---------------------------
    def gather_positions(self, split: str, positions: Sequence[Sequence[int]], *,
                         layers: LayerSpec | Sequence[LayerSpec] | None = None) -> list[np.ndarray]:
        """The states of ``layers`` (default all) at split-wide token positions: one float32 ``(L, n, D)`` array
        per array of positions in ``positions``, every part read in one pass over the split.

        Position ``p`` is the split's ``p``-th stored token in cache order (token ``t`` of row ``r`` is
        ``lengths(split)[:r].sum() + t``); a part's positions may come in any order, repeats allowed. The values
        are those :meth:`layer_tokens` decodes, bit for bit. Only the asked vectors are read, from the shards'
        memory maps, and the pages touched are dropped after each shard and state, so the read holds no more than
        what it returns; when a shard cannot be mapped (a compressed cache) each shard's states are read through
        HDF5 instead. Refuses a cache of pooled vectors only, and (``IndexError``) a position beyond the split.
        """
        return position_reads.gather_positions(self, split, positions, self.layer_index(layers))

    # --- padded batches (the cache feed's gather, widened to float32: :mod:`.batch_reads`) ---
    def batch(self, split: str, rows: Sequence[int], *, layers=None, source: str = "tokens",
              tasks: Sequence[str] | None = None) -> CacheBatch:
        """Read the given rows, in the order given, as one padded float32 :class:`CacheBatch`.

        ``source`` is ``"tokens"`` or ``"pooled:<mode>"``; ``tasks`` (default: all) are the labels
        attached. The batch is the one a head's cache feed gathers for these rows (the layout of
        :mod:`layercache.store.batches`), states widened to float32: padded positions (mask False)
        repeat the row's first token, word ids are -1 and token labels ``IGNORE_INDEX`` there.
        """
        return batch_reads.read_batch(self, split, rows, layers=layers, source=source, tasks=tasks)

    def iter_batches(self, split: str, batch_size: int = 32, *, layers=None, source: str = "tokens",
                     tasks: Sequence[str] | None = None, shuffle: bool = False, seed: int = 0,
                     block_size: int = 1024) -> Iterator[CacheBatch]:
        """Yield padded float32 minibatches of ``split``, as :meth:`batch` reads them.

        Unshuffled, rows come in cache order. With ``shuffle``, blocks of ``block_size``
        consecutive rows are visited in a seeded random order and shuffled inside a buffer:
        random enough for SGD, while each batch's rows stay close together in their shard.
        """
        return batch_reads.iter_batches(self, split, batch_size, layers=layers, source=source, tasks=tasks,
                                        shuffle=shuffle, seed=seed, block_size=block_size)

    def torch_dataset(self, split: str, *, layers=None, source: str = "tokens",
                      tasks: Sequence[str] | None = None) -> CacheDataset:
        """A map-style torch ``Dataset`` over one split; pair it with ``dataset.collate`` (batches as :meth:`batch`)."""
        return CacheDataset(self, split, layers=layers, source=source, tasks=tasks)

    # --- statistics -------------------------------------------------------------------
    @translate_read_errors
    def layer_stats(self, split: str | None = None) -> dict[str, np.ndarray]:
        """Per-state, per-dimension ``mean`` and ``std`` (S, D) over all real tokens of a split."""
        split = split or self.splits[0]
        total = total_sq = None
        count = 0
        for info in self.split_info(split).shards:
            h = self._handle(info.file)
            s, sq = h["stats/sum"][:], h["stats/sumsq"][:]
            total = s if total is None else total + s
            total_sq = sq if total_sq is None else total_sq + sq
            count += int(h["stats"].attrs["count"])
        mean = total / count
        var = np.maximum(total_sq / count - mean**2, 0.0)
        return {"mean": mean, "std": np.sqrt(var), "count": np.asarray(count)}


def _progress_text(manifest: Manifest) -> str:
    parts = []
    for name, split in manifest.splits.items():
        parts.append(f"{name}: {split.rows_written}/{split.n_examples} examples")
    return "; ".join(parts)

