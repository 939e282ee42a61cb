"""What is checked of a shard before any row is read from it: a regular file, its layout, its labels.

A reader trusts a shard only after these cheap checks, done once, when the shard is first opened
(:meth:`~layercache.store.reader.LayerCache._handle`):

- it is a regular file (:func:`open_shard`): a FIFO would block the open forever, a folder or a
  device is no shard;
- its datasets have the shapes the manifest implies and its offsets index its rows
  (:func:`check_shard_layout`);
- its labels lie inside their tasks' classes (:func:`check_shard_labels`): a class id beyond a
  task's ``label_names`` (a damaged byte, or a manifest edited by hand) would otherwise surface as
  a ``ValueError`` deep inside a loss, or an ``IndexError`` when a prediction is named.

Each costs one read of the small per-row datasets (offsets, labels), not of the states. The full
check of a shard's bytes against its checksum (:func:`shard_problem`) reads the whole file and is
asked for explicitly (``layercache info --check``, a resume, ``--repair``).
"""

from __future__ import annotations

import os
import stat

import h5py
import numpy as np

from ..core.checksum import file_problem
from ..core.confine import kind_of
from ..core.option_names import call, option
from ..core.tasks import IGNORE_INDEX
from ..errors import CacheError
from .codecs import codec, scales_dataset
from .compression import dataset_compression, is_state_dataset
from .manifest import Manifest, ShardInfo

SHARD_METADATA_CACHE = 1 << 20
"""Largest HDF5 metadata cache of an open shard, in bytes (see :func:`open_shard`)."""



def _refetch() -> str:
    """What fixes a damaged shard: find it, then re-extract it (naming the call as the reader makes it)."""
    return f"check it with `layercache info --check` and re-extract it with {call('extract', repair=True)}"


def open_shard(path: str | os.PathLike, chunk_cache: int = 0) -> h5py.File:
    """The shard at ``path`` opened read-only, after refusing anything that is not a regular file.

    The check comes before the open, because opening a FIFO blocks until someone writes to it.
    ``chunk_cache``: bytes of HDF5 chunk cache per dataset, for a compressed shard
    (:func:`~layercache.store.compression.read_chunk_cache`); none for an uncompressed one.
    """
    try:
        st = os.stat(path)
    except (OSError, RuntimeError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else "a loop of symbolic links"
        raise CacheError(f"Shard {path} cannot be reached ({why}); {_refetch()}.") from None
    if not stat.S_ISREG(st.st_mode):
        raise CacheError(f"Shard {path} is {kind_of(st)}, not a regular file; replace it with the shard file, or "
                         f"re-extract it with {call('extract', repair=True)}.")
    try:
        # No HDF5 chunk cache for an uncompressed shard: a read can fetch exactly the bytes it
        # selects. With the default 1 MiB cache, a read of a few rows pulls each whole (512-token)
        # chunk through the cache first, which makes sparse row reads (a validation slice) several
        # times slower (benchmarks/README.md). A compressed chunk is decompressed whole anyway.
        handle = h5py.File(path, "r", rdcc_nbytes=chunk_cache)
    except OSError as err:
        raise CacheError(f"Shard {path} cannot be read ({_first_line(err)}); {_refetch()}.") from None
    # A small metadata cache: HDF5's default (2 MiB to start, up to 32 MiB) kept the chunk index of
    # every state dataset mapped or read, a few MiB per open shard that no memory budget counted. The
    # states are read through memory maps that need the index once; the datasets read through HDF5
    # afterwards are small and read whole (same read speed at 1 MiB, benchmarks/README.md).
    config = handle.id.get_mdc_config()
    config.set_initial_size = True
    config.initial_size = config.min_size = SHARD_METADATA_CACHE // 16
    config.max_size = SHARD_METADATA_CACHE
    handle.id.set_mdc_config(config)
    return handle


def shard_problem(path: str | os.PathLike, checksum: str) -> str | None:
    """Why the shard at ``path`` is not the one the manifest committed (None when its bytes match ``checksum``).

    ``missing``, ``is a FIFO (named pipe)`` ..., ``cannot be read (Permission denied)`` or
    ``changed since extraction`` (:func:`~layercache.core.checksum.file_problem`). Reads the whole file.
    """
    return file_problem(path, checksum)


def check_shard_layout(h: h5py.File, info: ShardInfo, manifest: Manifest) -> None:
    """Refuse a shard whose datasets disagree with its manifest entry, before any row is read from it.

    A shard whose ``offsets`` were damaged would hand out other rows' tokens, or index past the end
    of ``hidden``; one with a missing dataset would fail deep inside a read. Everything checked here
    is small (shapes, and the ``(n + 1,)`` offsets), so the check costs one read per shard.
    """
    S, D = len(manifest.layer_names), manifest.hidden_size
    n, t = info.n_examples, info.n_tokens
    expected: dict[str, tuple[int, ...]] = {"offsets": (n + 1,), "input_ids": (t,), "example_index": (n,)}
    if manifest.stores_tokens:
        expected["hidden"] = (t, S, D)
    for mode in manifest.pooling:
        expected[f"pooled/{mode}"] = (n, S, D)
    states = [name for name in expected if name == "hidden" or name.startswith("pooled/")]
    dtypes = {name: manifest.storage.dataset_dtype(name) for name in states}  # what each dataset's attrs must say
    for name in states:  # the codec's widths; a scaled codec's scales beside (pooled vectors beside int8 tokens: none)
        stored_as, (rows, _, _) = codec(dtypes[name]), expected[name]
        expected[name] = (rows, S, stored_as.stored_width(D))
        if stored_as.scaled:
            expected[scales_dataset(name)] = (rows, S, stored_as.scales_width(D))
            dtypes[scales_dataset(name)] = stored_as.scale_dtype
    token_tasks = [task for task in manifest.tasks if task.kind == "token"]
    if token_tasks:
        expected["word_offsets"] = (n + 1,)
    for task in manifest.tasks:
        if task.kind != "token":
            expected[f"labels/{task.name}"] = (n,)
    expected["stats/sum"] = expected["stats/sumsq"] = (S, D)
    problem = None
    try:
        for name, shape in expected.items():
            ds = h.get(name)
            if not isinstance(ds, h5py.Dataset):
                problem = f"has no dataset {name!r}"
            elif ds.shape != shape:
                problem = f"has {name} of shape {ds.shape}, the manifest implies {shape}"
            elif name in dtypes and _stored_dtype(ds) not in (None, dtypes[name]):
                problem = f"stores {name} as {_stored_dtype(ds)}, the manifest says {dtypes[name]}"
            elif is_state_dataset(name) and dataset_compression(ds) != manifest.storage.stored_compression:
                problem = (f"stores {name} with compression {dataset_compression(ds)}, the manifest says "
                           f"{manifest.storage.stored_compression}")
            if problem:
                break
        else:
            problem = _offsets_problem(h["offsets"][:], t, "offsets")
            if problem is None and token_tasks:
                word_offsets = h["word_offsets"][:]
                problem = _offsets_problem(word_offsets, None, "word_offsets")
                for task in token_tasks if problem is None else []:
                    if h[f"labels/{task.name}"].shape != (int(word_offsets[-1]),):
                        problem = f"has labels/{task.name} of another length than its words"
                        break
    except (OSError, KeyError, ValueError, TypeError) as err:  # h5py on damaged metadata
        problem = f"cannot be read ({_first_line(err)})"
    if problem:
        raise CacheError(f"Shard {info.file} {problem}: it is damaged or from another cache; {_refetch()}.")


def _stored_dtype(ds: h5py.Dataset) -> str | None:
    """The storage dtype a state dataset's ``dtype`` attribute names (None where it has none)."""
    stored = ds.attrs.get("dtype")
    return stored.decode() if isinstance(stored, bytes) else None if stored is None else str(stored)


def check_shard_labels(h: h5py.File, info: ShardInfo, manifest: Manifest) -> None:
    """Refuse a shard with a label outside its task: a class id beyond the task's ``label_names`` (or
    negative, other than a token task's ignored words), or a regression target that is not finite.

    Run after :func:`check_shard_layout` (the label datasets exist with the right shapes).
    """
    split = info.file.split("/")[0]
    for task in manifest.tasks:
        try:
            values = h[f"labels/{task.name}"][:]
        except (OSError, KeyError, ValueError, TypeError) as err:
            raise CacheError(f"Shard {info.file} cannot be read ({_first_line(err)}); {_refetch()}.") from None
        if task.kind == "regression":
            bad = np.flatnonzero(~np.isfinite(values))
            if len(bad):
                raise CacheError(
                    f"Shard {info.file} (split {split!r}) holds the regression target {values[bad[0]]} for task "
                    f"{task.name!r}, which is not a finite number: the shard is damaged; {_refetch()}.")
            continue
        n_classes = len(task.label_names or ())
        labelled = values[values != IGNORE_INDEX] if task.kind == "token" else values
        bad = np.flatnonzero((labelled < 0) | (labelled >= n_classes))
        if len(bad):
            raise CacheError(
                f"Shard {info.file} (split {split!r}) holds the label {int(labelled[bad[0]])} for task "
                f"{task.name!r}, whose manifest names {n_classes} classes (ids 0 to {n_classes - 1}): the shard "
                "is damaged or the manifest's label_names were edited; re-extract the shard with "
                f"{call('extract', repair=True)}, or the whole cache with {option('overwrite', True)} if the manifest "
                "was edited.")


def _offsets_problem(offsets: np.ndarray, total: int | None, name: str) -> str | None:
    """Why ``offsets`` cannot index its rows (None when it can): start at 0, never decrease, end at ``total``."""
    if offsets.dtype.kind not in "iu" or offsets.ndim != 1:
        return f"has {name} of type {offsets.dtype}"
    if offsets[0] != 0 or (np.diff(offsets) < 0).any() or (total is not None and offsets[-1] != total):
        return f"has {name} that do not run from 0 to {total if total is not None else 'its end'} in order"
    return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:160] if text else type(err).__name__
