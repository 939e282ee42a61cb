"""train-head under a memory budget (issue 28): its peak memory does not grow with the cache it streams.

In a fresh interpreter each, a head is trained for one epoch on token states of 1,500 and of 15,000 examples
(a cache ten times the size): the peak resident memory above the interpreter's own grows by far less than the
cache does, because the feed drops the pages of each block it has served from the process (without that, every
page of a memory-mapped shard read once stays resident). What does grow with the examples is small: their
lengths, offsets, labels and predictions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

CHILD = textwrap.dedent("""
    import json, sys
    from pathlib import Path

    import torch

    torch.set_num_threads(1)
    from layercache import LayerCache
    from layercache.heads.workflow import train_head
    from layercache.store import mapped

    def status(key):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024

    cache_path, out, drop = sys.argv[1], sys.argv[2], sys.argv[3] == "drop"
    if not drop:
        mapped.MappedStates.dont_need = lambda self, lo, hi, states: None
    with LayerCache.open(cache_path) as cache:
        cache.lengths("train")
        baseline = status("VmRSS")
        train_head(cache, "scalar", out=out, overwrite=True, epochs=1, progress=False, source="tokens",
                   memory_budget=64 << 20)
        print(json.dumps({"used": status("VmHWM") - baseline}))
""")


@pytest.fixture(scope="module")
def two_caches(tiny_models, tmp_path_factory) -> dict[int, Path]:
    import layercache

    folder = tmp_path_factory.mktemp("budget")
    rng = np.random.default_rng(0)
    words = ["the", "a", "cat", "dog", "sat", "on", "mat", "and", "ran", "far", "away", "home", "good", "bad"]
    rows = [" ".join(words[i] for i in rng.integers(len(words), size=40)) + f"\t{'pn'[rng.integers(2)]}"
            for _ in range(15_000)]
    data = folder / "train.tsv"
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = {}
    for n in (1_500, 15_000):
        out[n] = folder / f"cache-{n}"
        layercache.extract(str(tiny_models["bert"]), None, out[n], split_files={"train": str(data)}, limit=n,
                           progress=False, shard_bytes=8 << 20)
    return out


def used(cache: Path, out: Path, drop: bool = True) -> int:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(cache), str(out), "drop" if drop else "keep"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])["used"]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc to measure peak memory")
def test_train_head_peak_stays_flat_as_the_cache_grows(two_caches, tmp_path):
    small = used(two_caches[1_500], tmp_path / "small")
    large = used(two_caches[15_000], tmp_path / "large")
    kept = used(two_caches[15_000], tmp_path / "kept", drop=False)
    states = sum(f.stat().st_size for f in two_caches[15_000].glob("train/shard-*.h5"))
    print(f"peak above the baseline: {small / 2**20:.1f} MiB (1.5k), {large / 2**20:.1f} MiB (15k), "
          f"{kept / 2**20:.1f} MiB (15k, pages kept); the 15k cache's shards {states / 2**20:.0f} MiB")
    assert large - small < 0.25 * states, "the peak grew with the cache"
    assert kept - large > 0.5 * states, "the pages of the blocks served were not what grew"
