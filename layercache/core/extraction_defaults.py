"""What an extraction does when an option is left out: one place for each default.

:func:`~layercache.extraction.run.extract`'s keywords, the specs of :mod:`layercache.extraction.specs`
and ``layercache extract``'s options all read them here; the command line may import this module
without loading the extractor (its ``--help`` stays quick).
"""

from __future__ import annotations

DEFAULT_DATASET = "builtin"
"""The bundled labelled sentences: the dataset of an extraction that names none."""
DEFAULT_STORE = "tokens"
"""Keep every token's states (and the pooled vectors), not the pooled vectors alone."""
DEFAULT_POOLING: tuple[str, ...] = ("mean",)
"""Pooled vectors stored per example."""
DEFAULT_FORWARD_DTYPE = "auto"
"""The forward pass's dtype: float32 on CPU, bfloat16 or float16 on CUDA."""
DEFAULT_BATCH_TOKENS = 8192
"""Padded tokens per forward batch."""
DEFAULT_BATCH_SIZE = 256
"""Most sequences per forward batch."""
DEFAULT_SHARD_BYTES = 256 * 2**20
"""Target bytes of states per shard file (``--shard-size 256MiB``)."""
