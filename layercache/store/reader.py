"""Read a cache lazily: :class:`LayerCache` opens shards on demand and never loads a split whole.

Rows are numbered per split in cache order (the order extraction wrote them, longest examples
first); ``example_index(split)`` maps a row back to its row in the source dataset. Layers can be
named (``"layer_3"``, ``"embeddings"``) or indexed among the kept states (``-1`` = last).

Batches have the layout of :mod:`layercache.store.batches` (where :class:`CacheBatch` is defined;
it stays importable from here).
"""

from __future__ import annotations

import bisect
import functools
import inspect
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import h5py
import numpy as np
import torch

from ..core.layers import LayerSpec, resolve_layers
from ..core.tasks import LabelTask
from ..errors import CacheError, ConfigError, LayercacheError
from .batches import CacheBatch, consecutive_starts, example_labels, padded_positions, zero_padding
from .batches import first_subtoken_labels as align_word_labels
from .dtypes import as_torch, from_storage
from .feature_source import parse_source
from .lens import LensWeights, read_lens
from .manifest import Manifest, SplitInfo, confined_path, read_manifest
from .mapped import MappedStates
from .shard_checks import check_shard_labels, check_shard_layout, open_shard, shard_problem
from .vocabulary import Vocabulary, read_vocabulary

VALIDATION_NAMES = ("validation", "valid", "dev", "val")
"""Usual names of a validation split, in the order :meth:`LayerCache.validation_split` tries them."""


def state_positions(layers: LayerSpec | Sequence[LayerSpec] | None, names: Sequence[str],
                    owner: str = "the states") -> list[int]:
    """Positions in ``names`` of state names or (negative) indices, in the order given; None = all.

    ``owner`` names what holds the states in the refusal: "Layer 'x' is not in this cache, ...".
    The rules are :func:`layercache.core.layers.resolve_layers`'s.
    """
    return resolve_layers(layers, names, owner)


def translate_read_errors(method):
    """Turn HDF5's ``OSError`` for damaged bytes inside a shard into one :class:`CacheError` sentence.

    The layout of every shard is checked when it is opened (:func:`check_shard_layout`), but HDF5
    keeps more metadata than that (chunk B-trees, heaps) and reads it lazily; a damaged byte there
    surfaces as ``OSError`` in the middle of a read. Works for plain methods and generators.
    """
    def refusal(reader, err: OSError) -> CacheError:
        path = getattr(reader, "path", None) or reader.cache.path  # a LayerCache, or a feed over one
        return CacheError(f"A shard of {path} cannot be read ({_first_line(err)}); find it with "
                          "`layercache info --check` and re-extract it with `layercache extract ... --repair`.")

    if inspect.isgeneratorfunction(method):
        @functools.wraps(method)
        def generator(self, *args, **kwargs):
            try:
                yield from method(self, *args, **kwargs)
            except LayercacheError:
                raise
            except OSError as err:
                raise refusal(self, err) from None
        return generator

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except LayercacheError:
            raise
        except OSError as err:
            raise refusal(self, err) from None
    return wrapper


class LayerCache:
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
        self._handles: dict[str, h5py.File] = {}
        self._maps: dict[tuple[str, str], MappedStates | None] = {}
        self._pid = os.getpid()
        self._offsets: dict[str, np.ndarray] = {}
        self._word_offsets: dict[str, np.ndarray] = {}
        self._vocabulary: Vocabulary | None = None

    # --- opening ----------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike | None = None, *, allow_incomplete: bool = False) -> "LayerCache":
        """Open a cache folder (default: the most recently written cache).

        An unfinished cache is refused unless ``allow_incomplete`` (then only its committed
        shards are visible), because training on part of a split silently would be wrong.
        """
        from .paths import resolve_cache_path

        path = resolve_cache_path(path)
        manifest = read_manifest(path)
        if not manifest.complete and not allow_incomplete:
            raise CacheError(
                f"The cache {path} is incomplete ({_progress_text(manifest)}); re-run the same "
                "`layercache extract` command to finish it."
            )
        return cls(path, manifest)

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
        for name in VALIDATION_NAMES:
            if name in self.manifest.splits and name != exclude:
                return name
        return None

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

    # --- shard access -----------------------------------------------------------------
    def _handle(self, file: str) -> h5py.File:
        """The open shard ``file``, checked against its manifest entry the first time it is opened."""
        if os.getpid() != self._pid:  # h5py handles must not cross a fork (DataLoader workers)
            self._handles = {}
            self._pid = os.getpid()
        handle = self._handles.get(file)
        if handle is None:
            handle = open_shard(confined_path(self.path, file))  # a FIFO is refused, never opened
            try:
                check_shard_layout(handle, self._shard_entries[file], self.manifest)
                check_shard_labels(handle, self._shard_entries[file], self.manifest)
            except BaseException:
                handle.close()
                raise
            self._handles[file] = handle
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

    # --- states -----------------------------------------------------------------------
    @translate_read_errors
    def pooled(self, split: str, mode: str = "mean", layers: LayerSpec | Sequence[LayerSpec] | None = None,
               rows: Sequence[int] | None = None) -> np.ndarray:
        """Pooled vectors, float32 (n, S', D); ``rows`` picks examples (default all)."""
        if mode not in self.manifest.pooling:
            have = ", ".join(self.manifest.pooling) or "none"
            raise CacheError(f"The cache has no pooled {mode!r} vectors (it has: {have}); "
                             "re-extract with --pooling " + mode + ".")
        index = self.layer_index(layers)
        dtype = self.manifest.storage.dtype
        name = f"pooled/{mode}"
        if rows is None:
            parts = [_read_states(self._handle(s.file)[name], slice(None), index)
                     for s in self.split_info(split).shards]
            return from_storage(np.concatenate(parts), dtype)
        return from_storage(self._gather_rows(split, np.asarray(rows), name, index), dtype)

    @translate_read_errors
    def pooled_stored(self, split: str, mode: str = "mean",
                      layers: LayerSpec | Sequence[LayerSpec] | None = None) -> torch.Tensor:
        """Pooled vectors of a whole split, (n, S', D), as a tensor in the stored precision (float16,
        bfloat16 or float32): half the bytes of :meth:`pooled` to gather rows from, for a consumer
        that widens (and transposes) them in its own single pass."""
        if mode not in self.manifest.pooling:
            have = ", ".join(self.manifest.pooling) or "none"
            raise CacheError(f"The cache has no pooled {mode!r} vectors (it has: {have}); "
                             "re-extract with --pooling " + mode + ".")
        index = self.layer_index(layers)
        name = f"pooled/{mode}"
        parts = [_read_states(self._handle(s.file)[name], slice(None), index) for s in self.split_info(split).shards]
        return as_torch(np.concatenate(parts), self.manifest.storage.dtype)

    def _gather_rows(self, split: str, rows: np.ndarray, name: str, index: list[int]) -> np.ndarray:
        out = None
        for shard, local, where in self._group_by_shard(split, rows):
            ds = self._handle(self.split_info(split).shards[shard].file)[name]
            order = np.argsort(local)
            block = _read_states(ds, local[order], index)
            if out is None:
                out = np.empty((len(rows),) + block.shape[1:], block.dtype)
            out[where[order]] = block
        return out

    def _group_by_shard(self, split: str, rows: np.ndarray):
        starts = np.asarray(self._shard_starts(split))
        n = self.num_examples(split)
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            raise IndexError(f"rows must lie in [0, {n}) for split {split!r}")
        shard_of = np.searchsorted(starts, rows, side="right") - 1
        for shard in np.unique(shard_of):
            where = np.nonzero(shard_of == shard)[0]
            yield int(shard), rows[where] - starts[shard], where

    @translate_read_errors
    def tokens(self, split: str, rows: Sequence[int], layers: LayerSpec | Sequence[LayerSpec] | None = None
               ) -> list[np.ndarray]:
        """Token states of the given rows: one float32 array (t_i, S', D) per row."""
        self.require_tokens()
        index = self.layer_index(layers)
        dtype = self.manifest.storage.dtype
        rows = np.asarray(rows, dtype=np.int64)
        out: list[np.ndarray | None] = [None] * len(rows)
        for shard, local, where in self._group_by_shard(split, rows):
            offsets = self.shard_offsets(split, shard)
            ds = self._handle(self.split_info(split).shards[shard].file)["hidden"]
            # One read per run of consecutive rows: far fewer HDF5 calls than one per example.
            order = np.argsort(local)
            for run in _consecutive_runs(local[order]):
                a, b = offsets[run[0]], offsets[run[-1] + 1]
                block = from_storage(_read_states(ds, slice(a, b), index), dtype)
                for r in run:
                    pos = where[order][np.searchsorted(local[order], r)]
                    out[pos] = block[offsets[r] - a: offsets[r + 1] - a]
        return out  # type: ignore[return-value]

    @translate_read_errors
    def layer_tokens(self, split: str, layer: LayerSpec) -> Iterator[np.ndarray]:
        """Stream one layer across all tokens of a split: yields float32 (t_shard, D) per shard."""
        self.require_tokens()
        (index,) = self.layer_index(layer)
        dtype = self.manifest.storage.dtype
        for info in self.split_info(split).shards:
            yield from_storage(self._handle(info.file)["hidden"][:, index, :], dtype)

    @translate_read_errors
    def token_arrays(self, split: str, name: str, rows: Sequence[int]) -> list[np.ndarray]:
        """Per-token integer arrays (``input_ids`` or ``word_ids``) for the given rows."""
        out = []
        for row in rows:
            shard, local = self._locate(split, int(row))
            offsets = self.shard_offsets(split, shard)
            h = self._handle(self.split_info(split).shards[shard].file)
            if name not in h:
                raise CacheError(f"The cache stores no {name} (words were unknown at extraction).")
            out.append(h[name][offsets[local]:offsets[local + 1]])
        return out

    def require_tokens(self) -> None:
        """Refuse (:class:`CacheError`) a cache that holds pooled vectors only, before token states are read."""
        if not self.stores_tokens:
            raise CacheError("This cache holds pooled vectors only; re-extract with --store tokens "
                             "for token states.")

    # --- batches ----------------------------------------------------------------------
    @translate_read_errors
    def iter_batches(self, split: str, batch_size: int = 32, *, layers=None, source: str = "tokens",
                     tasks: Sequence[str] | None = None, shuffle: bool = False, seed: int = 0,
                     block_size: int = 1024) -> Iterator[CacheBatch]:
        """Yield padded float32 minibatches.

        ``source`` is ``"tokens"`` or ``"pooled:<mode>"``. With ``shuffle``, blocks of
        ``block_size`` consecutive rows are read in a random order and shuffled inside a buffer:
        random enough for SGD, while each read stays one large contiguous slab (a fully random
        order would cost one small HDF5 read per example).
        """
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}.")
        n = self.num_examples(split)
        tasks = [t.name for t in self.tasks] if tasks is None else list(tasks)
        rng = np.random.default_rng(seed)
        blocks = [np.arange(a, min(a + block_size, n)) for a in range(0, n, block_size)]
        if shuffle:
            blocks = [blocks[i] for i in rng.permutation(len(blocks))]
        for block in blocks:
            if shuffle:
                block = rng.permutation(block)
            for start in range(0, len(block), batch_size):
                yield self.batch(split, block[start:start + batch_size], layers=layers, source=source, tasks=tasks)

    @translate_read_errors
    def batch(self, split: str, rows: Sequence[int], *, layers=None, source: str = "tokens",
              tasks: Sequence[str] | None = None) -> CacheBatch:
        """Read the given rows as one padded float32 :class:`CacheBatch`, zeros at padded positions.

        The layout is :mod:`layercache.store.batches`'s (word ids -1 and labels ``IGNORE_INDEX`` at
        padded positions), except for the fill: the feeds that serve heads repeat each row's first
        token there, while this reader has always returned zeros (a plain sum over ``T`` is then a
        masked sum), and keeps doing so.
        """
        rows = np.asarray(rows, dtype=np.int64)
        tasks = [t.name for t in self.tasks] if tasks is None else list(tasks)
        parsed = parse_source(source, allow_auto=False)
        if parsed.is_pooled:
            pooled = self.pooled(split, parsed.mode, layers, rows)  # (B, S, D)
            per_row, word_ids = [p[None] for p in pooled], None
        else:
            per_row = self.tokens(split, rows, layers)
            word_ids = (self.token_arrays(split, "word_ids", rows)
                        if any(self.manifest.task(t).kind == "token" for t in tasks) else None)
        lengths = np.array([len(x) for x in per_row], dtype=np.int64)  # (B,) tokens of each row
        at = padded_positions(consecutive_starts(lengths), lengths)  # (B, T) rows' tokens one after another
        flat = torch.from_numpy(np.concatenate(per_row))  # (t, S, D) float32
        states = zero_padding(flat[torch.from_numpy(at.token)], at.mask)  # (B, T, S, D), zeros at padding
        wid = None if word_ids is None else at.word_ids(np.concatenate(word_ids))  # (B, T)
        labels = {t: self._batch_labels(split, t, rows, wid) for t in tasks}
        return CacheBatch(states=states, mask=at.mask, rows=rows, labels=labels, word_ids=wid)

    def _batch_labels(self, split, task, rows, word_ids: torch.Tensor | None) -> torch.Tensor:
        """(B,) labels of a sequence or regression task, or (B, T) token labels (first sub-token of each word)."""
        spec = self.manifest.task(task)
        if spec.kind != "token":
            return example_labels(np.concatenate([self._label_slice(split, task, r) for r in rows]), spec.kind)
        if word_ids is None:
            raise CacheError(f"Token task {task!r} needs token states with word ids; this cache has none.")
        words = [self._label_slice(split, task, r) for r in rows]  # (W_i,) word labels of each row
        n_words = np.array([len(w) for w in words], dtype=np.int64)  # (B,)
        return align_word_labels(word_ids.numpy(), np.concatenate(words), consecutive_starts(n_words), n_words)

    def _label_slice(self, split: str, task: str, row: int) -> np.ndarray:
        shard, local = self._locate(split, int(row))
        h = self._handle(self.split_info(split).shards[shard].file)
        if self.manifest.task(task).kind != "token":
            return h[f"labels/{task}"][local:local + 1]
        key = (split, shard)
        if key not in self._word_offsets:
            self._word_offsets[key] = h["word_offsets"][:]
        wo = self._word_offsets[key]
        return h[f"labels/{task}"][wo[local]:wo[local + 1]]

    def torch_dataset(self, split: str, *, layers=None, source: str = "tokens",
                      tasks: Sequence[str] | None = None) -> "CacheDataset":
        """A map-style torch ``Dataset`` over one split; pair it with ``dataset.collate``."""
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


class CacheDataset(torch.utils.data.Dataset):
    """Map-style dataset over one split: item ``i`` is row ``i``; ``collate`` pads a list of rows.

    Reading happens in ``collate`` so that a whole minibatch is one grouped read, and each
    DataLoader worker reopens its own HDF5 handles.
    """

    def __init__(self, cache: LayerCache, split: str, *, layers=None, source="tokens", tasks=None):
        self.cache, self.split = cache, split
        self.layers, self.source, self.tasks = layers, source, tasks
        cache.split_info(split)  # fail early on a bad split name

    def __len__(self) -> int:
        return self.cache.num_examples(self.split)

    def __getitem__(self, row: int) -> int:
        if not 0 <= row < len(self):
            raise IndexError(row)
        return row

    def collate(self, rows: list[int]) -> CacheBatch:
        """Read a list of rows as one padded :class:`CacheBatch` (a DataLoader's ``collate_fn``)."""
        return self.cache.batch(self.split, rows, layers=self.layers, source=self.source, tasks=self.tasks)


def first_subtoken_labels(word_labels: torch.Tensor, word_ids: torch.Tensor) -> torch.Tensor:
    """Spread one row's per-word labels onto its tokens: the first sub-token of each word carries the word's label.

    word_labels: (W,); word_ids: (T,) with -1 for special tokens and padding. Returns (T,) int64 with
    IGNORE_INDEX on special tokens, padding and continuation sub-tokens. The one-row form of
    :func:`layercache.store.batches.first_subtoken_labels`, which every batch producer uses.
    """
    labels = np.asarray(word_labels)  # (W,)
    n_words = np.array([len(labels)], dtype=np.int64)  # (1,)
    return align_word_labels(np.asarray(word_ids)[None], labels, np.zeros(1, dtype=np.int64), n_words)[0]  # (T,)


def _read_states(ds: h5py.Dataset, rows, index: list[int]) -> np.ndarray:
    """Read ds[rows, index, :]; h5py needs increasing indices, so sort and restore the order."""
    if index == list(range(ds.shape[1])):
        return ds[rows]
    order = np.argsort(index)
    sorted_index = [index[i] for i in order]
    if isinstance(rows, np.ndarray):
        data = ds[rows.tolist(), :, :][:, sorted_index, :] if len(rows) else ds[0:0, sorted_index, :]
    else:
        data = ds[rows, sorted_index, :]
    return data[:, np.argsort(order), :]


def _consecutive_runs(values: np.ndarray) -> list[np.ndarray]:
    if len(values) == 0:
        return []
    breaks = np.nonzero(np.diff(values) != 1)[0] + 1
    return np.split(values, breaks)


def _progress_text(manifest: Manifest) -> str:
    parts = []
    for name, split in manifest.splits.items():
        parts.append(f"{name}: {split.rows_written}/{split.n_examples} examples")
    return "; ".join(parts)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:160] if text else type(err).__name__
