"""How a cache stores state values, as the code outside the store asks: the storage dtypes and the codec of each.

The codecs live in :mod:`.codecs` (one module per storage dtype, registered by name), and the memory-mapped
shard reads that decode them in :mod:`.mapped`; nothing outside ``layercache.store`` imports either (a
forbidden contract of ``lint-imports``), so a new codec or filter is one file there and nowhere else. What the
rest of the package needs of them is this surface: the names a manifest and ``--storage-dtype`` take, the
checks of a choice, and :func:`codec`, whose :class:`StorageCodec` each user asks what it does with values
(extraction's packer encodes states with it, the live feed rounds fresh states to what a cache would serve,
``verify`` bounds the difference, the planner prices its bytes). States are read through
:class:`~layercache.store.reader.LayerCache` and the feeds, never from the shards' bytes.
"""

from __future__ import annotations

from .codecs import AUTO, StorageCodec, check_storage_dtype, check_width, codec, codec_names, pooled_dtype_for
from .codecs.float16 import FP16_MAX

__all__ = ["AUTO", "FP16_MAX", "StorageCodec", "check_storage_dtype", "check_width", "codec", "codec_names",
           "pooled_dtype_for"]
