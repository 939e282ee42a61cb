"""A split's state statistics, read back from its shards' sums when the split is complete."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..store.manifest import SplitInfo
from ..store.shard_checks import open_shard


def split_stats(out: Path, info: SplitInfo, names: list[str]) -> tuple[dict, int]:
    """Per-state mean / std / rms over all values of a split, combined from the shards' sums."""
    total = total_sq = None
    count = overflow = 0
    for shard in info.shards:
        with open_shard(out / shard.file) as h:
            s, sq = h["stats/sum"][:], h["stats/sumsq"][:]
            count += int(h["stats"].attrs["count"])
            overflow += int(h.attrs.get("fp16_overflow", 0))
        total = s if total is None else total + s
        total_sq = sq if total_sq is None else total_sq + sq
    values = count * total.shape[1]
    mean = total.sum(1) / values  # (S,)
    mean_sq = total_sq.sum(1) / values  # (S,)
    std = np.sqrt(np.maximum(mean_sq - mean**2, 0.0))
    stats = {name: {"mean": float(m), "std": float(s), "rms": float(np.sqrt(q))}
             for name, m, s, q in zip(names, mean, std, mean_sq)}
    return stats, overflow
