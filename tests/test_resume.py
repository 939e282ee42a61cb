"""Kill a real extraction with SIGKILL, start it again, and get the same cache as an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

import layercache as lc

# The child runs the real CLI; appends are slowed so the kill lands mid-run, with a shard half written.
CHILD = textwrap.dedent("""
    import sys, time
    import layercache.sources.builtin as builtin
    from layercache.store.writer import ShardWriter
    original, append = builtin.load_builtin, ShardWriter.append
    builtin.load_builtin = lambda seed=0, sizes=None: original(seed, {"train": 60, "validation": 20})
    def slow_append(self, batch):
        append(self, batch)
        time.sleep(float(sys.argv[1]))
    ShardWriter.append = slow_append
    from layercache.cli import app
    app(sys.argv[2:])
""")


def run_cli(args: list[str], delay: float, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(delay), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def committed_shards(cache: Path) -> int:
    try:
        manifest = json.loads((cache / "manifest.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return 0
    return sum(len(s["shards"]) for s in manifest["splits"].values())


def read_all(path: Path) -> dict[str, np.ndarray]:
    out = {}
    for shard in sorted(path.glob("*/shard-*.h5")):
        with h5py.File(shard) as h:
            h.visititems(lambda name, obj: out.__setitem__(f"{shard.parent.name}/{shard.name}/{name}", obj[()])
                         if isinstance(obj, h5py.Dataset) else None)
    return out


def test_sigkill_then_resume_matches_an_uninterrupted_run(tiny_models, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    args = ["extract", str(tiny_models["bert"]), "builtin", "--quiet", "--shard-size", "12KB",
            "--batch-tokens", "96", "--pooling", "mean,last"]
    killed, clean = tmp_path / "killed", tmp_path / "clean"

    child = run_cli(args + ["--out", str(killed)], delay=0.15, env=env)
    deadline = time.time() + 120
    # Kill while a shard is half written (its .tmp exists), after a few shards were committed.
    while time.time() < deadline and child.poll() is None:
        if committed_shards(killed) >= 3 and list(killed.glob("*/*.tmp")):
            break
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL, "the child finished before it could be killed"
    before = lc.read_manifest(killed)
    assert not before.complete and committed_shards(killed) >= 3
    assert list(killed.glob("*/*.tmp")), "the kill should interrupt a shard being written"
    with pytest.raises(lc.CacheError, match="incomplete"):
        lc.LayerCache.open(killed)

    resumed = run_cli(args + ["--out", str(killed)], delay=0, env=env)
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out.decode()
    assert b"resumed" in out
    fresh = run_cli(args + ["--out", str(clean)], delay=0, env=env)
    out, _ = fresh.communicate(timeout=300)
    assert fresh.returncode == 0, out.decode()

    a, b = lc.read_manifest(killed), lc.read_manifest(clean)
    assert a.complete and a.config_hash == b.config_hash
    assert not list(killed.glob("*/*.tmp"))
    for split in a.splits:
        assert [s.sha256 for s in a.splits[split].shards] == [s.sha256 for s in b.splits[split].shards]
        assert a.splits[split].stats == b.splits[split].stats
    left, right = read_all(killed), read_all(clean)
    assert left.keys() == right.keys()
    for key in left:
        np.testing.assert_array_equal(left[key], right[key], err_msg=key)
