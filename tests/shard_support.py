"""Reading every dataset of a cache's shards, to compare two caches byte for byte."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np


def shard_contents(cache: Path) -> dict[str, np.ndarray]:
    """Every dataset of every shard, by split/shard/name (what two runs must agree on)."""
    out = {}
    for shard in sorted(Path(cache).glob("*/shard-*.h5")):
        with h5py.File(shard) as h:
            h.visititems(lambda name, obj: out.__setitem__(f"{shard.parent.name}/{shard.name}/{name}", obj[()])
                         if isinstance(obj, h5py.Dataset) else None)
    return out
