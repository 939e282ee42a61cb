"""Lossless compression of a cache's state values: an HDF5 filter on the state datasets of every shard.

``compression="zstd"`` (``--compression zstd``) writes the state datasets of each shard (``hidden``,
``pooled/<mode>`` and a scaled codec's ``scales/...``) through an HDF5 filter from hdf5plugin, chosen by
the width of the stored values:

- wider than a byte (float16, bfloat16, float32, and the scales): Blosc2 running Zstandard at level 1
  after a byte shuffle, which puts the sign-and-exponent bytes of neighbouring values together (they
  are alike; the mantissa bytes are noise): 0.86 of a MiniLM float16 cache's bytes, against 0.92 for
  Zstandard on the values as they are;
- one byte (int8, packed int4): Zstandard level 1 alone: a shuffle of one-byte values changes nothing,
  and Blosc2's blocks cut the context short (0.81 of the bytes, against 0.83 through Blosc2).

Level 1 because higher levels save almost nothing on these values (Blosc2 level 3: the same bytes,
level 5: 0.5 % fewer) and compress several times slower, and extraction compresses every byte it writes.
The layout is unchanged: a chunk is still ``CHUNK_TOKENS`` tokens of one state (2,048-token chunks
save 0.1 % of a float16 cache and 1 % of an int8 one, and a read of one row decompresses four times
as much), and shards are cut by the bytes of their values before compression, so a compressed cache
has the very shards, feed blocks and batches of its uncompressed twin and reads back bit for bit the same.

What it costs is every read: a filtered chunk cannot be memory-mapped (:mod:`.mapped` returns None),
so the readers go through h5py, which decompresses whole chunks (figures in ``benchmarks/README.md``).
A compressed shard is opened with a chunk cache (:func:`read_chunk_cache`) so that rows read one run
after another decompress each chunk once.

hdf5plugin registers its filters with HDF5 when it is imported: :func:`require_filters` imports it
only when a compressed cache is written or one of its shards is opened, so ``import layercache`` and
uncompressed caches never load it; without it, either is refused in one sentence.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.option_names import option
from ..errors import CacheError, ConfigError

if TYPE_CHECKING:
    import h5py

NONE = "none"
"""No filter: the chunks hold the values as they are (memory-mapped when read). Never recorded in a manifest."""
ZSTD = "zstd"
COMPRESSIONS = (NONE, ZSTD)
"""What ``compression=`` / ``--compression`` takes."""
LEVEL = 1
"""The Zstandard level of :data:`ZSTD` (see the module docstring)."""
BLOSC2_FILTER, ZSTD_FILTER = 32026, 32015
"""HDF5's registered ids of the Blosc2 and Zstandard filters (hdf5plugin's ``BLOSC2_ID`` and ``ZSTD_ID``)."""
FILTERS = {ZSTD: (BLOSC2_FILTER, ZSTD_FILTER)}
"""Compression -> the HDF5 filters its datasets may carry (one of them, chosen by the values' width)."""
INSTALL = "pip install 'layercache[compress]'"
"""What installs hdf5plugin, as a message names it."""
MAX_READ_CHUNK_CACHE = 64 << 20
"""Most bytes of decompressed chunks an open compressed dataset keeps for the next read (:func:`read_chunk_cache`)."""


def check_compression(name: object) -> str:
    """``name`` when it is one of :data:`COMPRESSIONS`, else a :class:`ConfigError` naming them."""
    if name not in COMPRESSIONS:
        raise ConfigError(f"{option('compression', name, typed=repr(name))} is not known; choose one of "
                          f"{', '.join(COMPRESSIONS)}.")
    return name


def filters_available() -> bool:
    """Whether hdf5plugin can be imported (importing it registers its filters with HDF5)."""
    try:
        import hdf5plugin  # noqa: F401
    except ImportError:
        return False
    return True


def require_filters(compression: str, cache: str | Path | None = None) -> None:
    """Make ``compression``'s filters known to HDF5 (import hdf5plugin) before a shard is written or opened.

    Nothing is imported for :data:`NONE`. A missing hdf5plugin is a :class:`ConfigError` naming the option (a run
    that asks for compression) or, with ``cache``, a :class:`CacheError` naming the cache it would read.
    """
    if check_compression(compression) == NONE or filters_available():
        return
    if cache is not None:
        raise CacheError(f"The cache at {cache} stores its states compressed ({compression}), which needs the "
                         f"hdf5plugin package to read; install it with {INSTALL}.")
    raise ConfigError(f"{option('compression', compression)} needs the hdf5plugin package; install it with "
                      f"{INSTALL}, or pass {option('compression', NONE)}.")


def is_state_dataset(name: str) -> bool:
    """Whether shard dataset ``name`` holds state values or their scales: what a compression filters."""
    return name == "hidden" or name.startswith(("pooled/", "scales/"))


def filter_options(compression: str, dtype, chunks: tuple[int, ...], maxshape: tuple, appended: bool) -> dict:
    """``create_dataset`` keywords that store a state dataset of ``dtype`` under ``compression``: none for
    :data:`NONE`; else its filter (by the values' width, see the module docstring) and its chunk cache while written.

    ``appended``: the dataset grows a batch at a time, so a chunk is filled over several writes. It is kept in
    the cache (a row of chunks along the first axis, every state's, and one more) until it is full and compressed
    once; evicted half-filled, as from HDF5's default 1 MiB cache for a wide model, it would be read back,
    decompressed and compressed again at each append, its old bytes left as a hole in the file. A dataset written a
    whole chunk at a time (``hidden``) needs no cache: each chunk goes through the filter to the file at once.
    Call :func:`require_filters` first: the filters come from hdf5plugin.
    """
    if check_compression(compression) == NONE:
        return {}
    import hdf5plugin

    itemsize = np.dtype(dtype).itemsize
    if itemsize == 1:
        found = dict(hdf5plugin.Zstd(clevel=LEVEL))
    else:
        found = dict(hdf5plugin.Blosc2(cname="zstd", clevel=LEVEL, filters=hdf5plugin.Blosc2.SHUFFLE))
    chunk = int(np.prod(chunks)) * itemsize
    row = chunks[0] * int(np.prod(maxshape[1:])) * itemsize
    return {**found, **(dict(rdcc_nbytes=row + chunk, rdcc_w0=1.0) if appended else dict(rdcc_nbytes=0))}


def dataset_compression(ds: "h5py.Dataset") -> str:
    """The compression dataset ``ds`` is stored with, as a manifest names it: ``none``, ``zstd``, or for a filter
    layercache does not write, ``HDF5 filter <id>``."""
    plist = ds.id.get_create_plist()
    ids = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
    if not ids:
        return NONE
    found = next((name for name, known in FILTERS.items() if len(ids) == 1 and ids[0] in known), None)
    return found or "HDF5 filter " + " + ".join(str(i) for i in ids)


def read_chunk_cache(compression: str, row_bytes: int) -> int:
    """Bytes of HDF5 chunk cache a shard's datasets are opened with: 0 uncompressed (a read fetches exactly the
    bytes it selects); compressed, two rows of ``hidden``'s chunks (``row_bytes``: every state's chunk of the
    same tokens), at most :data:`MAX_READ_CHUNK_CACHE`.

    Readers read rows in runs, in ascending order, every state at once: with the chunks of the run before kept,
    a run that starts inside them finds them decompressed. Beyond the cap (a wide model with many states), such a
    run decompresses them again. A dataset's cache lives while it is open (one read) and holds only chunks read.
    """
    if compression == NONE:
        return 0
    return min(2 * row_bytes, MAX_READ_CHUNK_CACHE)
