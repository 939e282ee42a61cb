"""Storage codecs: how a state tensor becomes a shard's bytes and comes back, one module per storage dtype.

Each module holds one :class:`~.base.StorageCodec` subclass registered under the name the manifest
records (``storage.dtype``) and ``--storage-dtype`` takes; the registry imports every module of this
package, so a new codec is one new file (and its test). Everything that writes or reads state
values asks the codec of its cache (:func:`codec`): the extraction's packer and shard writer, the
memory-mapped reads, the cache feed, the live feed's rounding, ``verify``'s comparison.
"""

from .base import (
    AUTO,
    CODECS,
    StorageCodec,
    check_storage_dtype,
    check_width,
    codec,
    codec_names,
    pooled_dtype_for,
    register_codec,
    scales_dataset,
)

__all__ = ["AUTO", "CODECS", "StorageCodec", "check_storage_dtype", "check_width", "codec", "codec_names",
           "pooled_dtype_for", "register_codec", "scales_dataset"]
