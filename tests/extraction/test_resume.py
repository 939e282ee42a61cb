"""Kill a real extraction with SIGKILL, start it again, and get the same cache as an uninterrupted run."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from shard_support import shard_contents

import layercache as lc
from layercache.store.parts import read_committed

# The child runs the real CLI. Once 3 shards are committed and the next one is half written (its
# .tmp on disk), it tells the parent through a pipe and blocks in that append: the parent's SIGKILL
# then always lands mid-shard, with no timing to tune.
CHILD = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    import layercache.sources.builtin as builtin
    from layercache.store.writer import ShardWriter
    original, append = builtin.load_builtin, ShardWriter.append
    builtin.load_builtin = lambda seed=0, sizes=None: original(seed, {"train": 60, "validation": 20})
    ready = int(sys.argv[1])
    from layercache.errors import CacheError
    from layercache.store.parts import read_committed
    def committed(cache):  # shards in the manifest and in the writer's part
        try:
            return sum(len(s.shards) for s in read_committed(cache).splits.values())
        except CacheError:
            return 0
    def append_then_wait(self, batch):
        append(self, batch)
        cache = Path(self.tmp_path).parent.parent
        if ready >= 0 and committed(cache) >= 3 and Path(self.tmp_path).exists():
            os.write(ready, b"x")
            while True:
                time.sleep(60)  # until killed
    ShardWriter.append = append_then_wait
    from layercache.cli import app
    app(sys.argv[2:])
""")


BUILTIN_SIZES = {"train": 40, "validation": 12}
"""The builtin splits these tests extract (the ``small_builtin`` fixture of tests/conftest.py)."""


def run_cli(args: list[str], env: dict, ready_fd: int = -1) -> subprocess.Popen:
    """The CLI in a child process; with ``ready_fd`` it stops mid-shard and writes one byte there."""
    fds = (ready_fd,) if ready_fd >= 0 else ()
    return subprocess.Popen([sys.executable, "-c", CHILD, str(ready_fd), *args], env=env, pass_fds=fds,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def committed_shards(cache: Path) -> int:
    """Shards committed so far: listed in the manifest, or in a writer's part the next run merges."""
    return sum(len(s.shards) for s in read_committed(cache).splits.values())


def test_sigkill_then_resume_matches_an_uninterrupted_run(tiny_models, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    args = ["extract", str(tiny_models["bert"]), "builtin", "--quiet", "--shard-size", "12KB",
            "--batch-tokens", "96", "--pooling", "mean,last"]
    killed, clean = tmp_path / "killed", tmp_path / "clean"

    read_end, write_end = os.pipe()
    child = run_cli(args + ["--out", str(killed)], env, ready_fd=write_end)
    os.close(write_end)
    # Kill while a shard is half written, after a few were committed: the child says when.
    readable, _, _ = select.select([read_end], [], [], 120)
    signalled = bool(readable) and os.read(read_end, 1) == b"x"
    os.close(read_end)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert signalled, child.stdout.read().decode()[-2000:]
    assert child.returncode == -signal.SIGKILL
    before = lc.read_manifest(killed)
    assert not before.complete and committed_shards(killed) >= 3
    assert list(killed.glob("*/*.tmp")), "the kill should interrupt a shard being written"
    with pytest.raises(lc.CacheError, match="incomplete"):
        lc.LayerCache.open(killed)

    resumed = run_cli(args + ["--out", str(killed)], env)
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out.decode()
    assert b"resumed" in out
    fresh = run_cli(args + ["--out", str(clean)], env)
    out, _ = fresh.communicate(timeout=300)
    assert fresh.returncode == 0, out.decode()

    a, b = lc.read_manifest(killed), lc.read_manifest(clean)
    assert a.complete and a.config_hash == b.config_hash
    assert not list(killed.glob("*/*.tmp"))
    for split in a.splits:
        assert [(s.file, s.first_row, s.n_batches, s.checksum) for s in a.splits[split].shards] == \
            [(s.file, s.first_row, s.n_batches, s.checksum) for s in b.splits[split].shards]
        assert a.splits[split].stats == b.splits[split].stats
    left, right = shard_contents(killed), shard_contents(clean)
    assert left.keys() == right.keys()
    for key in left:
        np.testing.assert_array_equal(left[key], right[key], err_msg=key)


# --- errors in the writer thread and in the forward pass -------------------------------------------
def _shard_files(cache: Path) -> set[str]:
    return {f"{p.parent.name}/{p.name}" for p in cache.glob("*/shard-*")}


def _assert_only_committed_shards(cache: Path) -> None:
    """What an interrupted run must leave: no temp file, and every shard on disk listed with its hash."""
    from layercache.core.checksum import file_checksum

    manifest = lc.read_manifest(cache)
    assert not manifest.complete
    listed = {s.file: s for split in manifest.splits.values() for s in split.shards}
    assert _shard_files(cache) == set(listed)
    for name, shard in listed.items():
        assert file_checksum(cache / name) == shard.checksum


def _extract(path: Path, model: Path):
    return lc.extract(str(model), "builtin", path, progress=False, shard_bytes=12_000, batch_tokens=96,
                      pooling=["mean", "last"])


@pytest.mark.parametrize("threaded", [True, False], ids=["writer-thread", "inline-writer"])
@pytest.mark.parametrize("where", ["append", "commit", "forward"])
def test_an_error_surfaces_and_the_run_resumes_to_the_same_cache(tiny_models, tmp_path, small_builtin,
                                                                 monkeypatch, where, threaded):
    import layercache.extraction.job as job_mod
    import layercache.extraction.steps as steps_mod
    from layercache.store import writer as writer_mod

    monkeypatch.setattr(job_mod, "writer_thread_helps", lambda device: threaded)

    calls = {"n": 0}

    def failing(original):
        def wrapper(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 5:
                raise OSError(f"injected failure in {where}")
            return original(*args, **kwargs)
        return wrapper

    owner, attr = {"append": (writer_mod.ShardWriter, "append"), "commit": (writer_mod, "fsync_and_checksum"),
                   "forward": (steps_mod, "run_batch")}[where]
    if where == "commit":
        calls["n"] = 2  # fail the third commit: two shards are committed before it
    with monkeypatch.context() as patch:
        patch.setattr(owner, attr, failing(getattr(owner, attr)))
        with pytest.raises(OSError, match=f"injected failure in {where}"):
            _extract(tmp_path / "broken", tiny_models["bert"])
    _assert_only_committed_shards(tmp_path / "broken")
    assert lc.read_manifest(tmp_path / "broken").splits["train"].shards  # some work was kept

    resumed = _extract(tmp_path / "broken", tiny_models["bert"])
    clean = _extract(tmp_path / "clean", tiny_models["bert"])
    assert resumed.resumed and resumed.manifest.complete
    for split in clean.manifest.splits:
        assert ([s.checksum for s in resumed.manifest.splits[split].shards]
                == [s.checksum for s in clean.manifest.splits[split].shards])


def test_writer_thread_and_inline_writer_write_identical_caches(tiny_models, tmp_path, small_builtin,
                                                                 monkeypatch):
    import layercache.extraction.job as job_mod

    digests = {}
    for threaded in (True, False):
        monkeypatch.setattr(job_mod, "writer_thread_helps", lambda device: threaded)
        result = _extract(tmp_path / str(threaded), tiny_models["bert"])
        digests[threaded] = {name: [s.checksum for s in split.shards]
                             for name, split in result.manifest.splits.items()}
    assert digests[True] == digests[False]
    assert sum(len(d) for d in digests[True].values()) > 2  # several shards, so the comparison means something


def test_inline_writer_runs_jobs_at_once_and_raises_in_the_caller():
    from layercache.extraction.background import BackgroundWriter

    done = []
    with BackgroundWriter(threaded=False, name="inline-under-test") as writer:
        assert "inline-under-test" not in {t.name for t in threading.enumerate()}  # no thread started
        writer.submit(lambda: done.append(1))
        assert done == [1]  # ran before submit returned
        with pytest.raises(ValueError, match="boom"):
            writer.submit(lambda: (_ for _ in ()).throw(ValueError("boom")))


def test_background_writer_runs_jobs_in_order_and_reraises_the_first_error():
    from layercache.extraction.background import BackgroundWriter

    done = []
    with BackgroundWriter() as writer:
        for i in range(5):
            writer.submit(lambda i=i: done.append(i))
    assert done == [0, 1, 2, 3, 4]

    def boom():
        raise ValueError("boom")

    writer = BackgroundWriter(max_pending=1)
    writer.submit(boom)
    with pytest.raises(ValueError, match="boom"):
        for _ in range(100):  # a later submit (or finish) raises it in the caller
            writer.submit(lambda: done.append("after the error"))
    with pytest.raises(ValueError, match="boom"):
        writer.finish()
    assert "after the error" not in done

    gate = threading.Event()
    writer = BackgroundWriter(max_pending=4)
    writer.submit(gate.wait)
    writer.submit(lambda: done.append("queued"))
    canceller = threading.Thread(target=writer.cancel)
    canceller.start()
    assert writer._cancelled.wait(10)  # cancel() has set its flag and now waits for the running job
    gate.set()
    canceller.join()
    assert "queued" not in done  # a cancelled writer finishes the running job and drops the rest
