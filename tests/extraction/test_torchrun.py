"""``torchrun -m layercache extract``: one writer per rank (gloo on CPU), the same cache as one process.

Each test starts real torchrun process groups (two CPU ranks), so they take a few seconds each.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import layercache as lc

from .test_writers import contents

HERE = Path(__file__).parent
OPTIONS = ["--limit", "40", "--shard-size", "12KB", "--batch-tokens", "96", "--quiet", "--threads", "1"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(ranks: int, model: Path, out: Path, *, fault: dict | None = None) -> subprocess.CompletedProcess:
    """``torchrun --nproc_per_node ranks -m layercache extract MODEL builtin --out OUT`` (with a planted fault)."""
    target = [str(HERE / "rank_faults.py")] if fault else ["-m", "layercache"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(fault or {})}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--master_port",
               str(_free_port()), *target, "extract", str(model), "builtin", "--out", str(out), *OPTIONS]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)


def single(model: Path, out: Path) -> Path:
    return lc.extract(str(model), "builtin", out, limit=40, shard_bytes=12_000, batch_tokens=96,
                      progress=False).path


def assert_same_cache(a: Path, b: Path) -> None:
    """Same rows, states, labels and order after the merge, and the same statistics; complete."""
    left, right = contents(a), contents(b)
    assert sorted(left) == sorted(right)
    for key in left:
        assert (left[key] == right[key]).all(), key
    ma, mb = lc.LayerCache.open(a).manifest, lc.LayerCache.open(b).manifest
    assert ma.complete and mb.complete
    for name, split in ma.splits.items():  # float64 sums of per-shard sums: the shards differ, the rounding too
        for state, values in split.stats.items():
            assert values == pytest.approx(mb.splits[name].stats[state], rel=1e-9, abs=1e-9), (name, state)


@pytest.fixture(scope="module")
def reference(tiny_models, tmp_path_factory) -> Path:
    return single(tiny_models["bert"], tmp_path_factory.mktemp("torchrun") / "single")


def test_two_ranks_write_the_cache_one_process_writes(tiny_models, tmp_path, reference):
    result = torchrun(2, tiny_models["bert"], tmp_path / "two")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("Cache written") == 1, result.stdout  # rank 0 speaks for both
    assert_same_cache(tmp_path / "two", reference)
    manifest = lc.LayerCache.open(tmp_path / "two").manifest
    firsts = [s.first_batch for s in manifest.splits["train"].shards]
    assert firsts == sorted(firsts) and not list((tmp_path / "two").glob("manifest-part-*"))


def test_a_killed_rank_loses_nothing_and_resumes_with_one_or_two_ranks(tiny_models, tmp_path, reference):
    killed = tmp_path / "killed"
    result = torchrun(2, tiny_models["bert"], killed, fault={"FAULT_RANK": "1", "FAULT_AFTER": "4", "FAULT": "kill"})
    assert result.returncode != 0
    parts = sorted(p.name for p in killed.glob("manifest-part-*.json"))
    assert "manifest-part-00001.json" in parts  # the killed rank's commits are on disk, for the next run
    committed = lc.LayerCache.open(killed, allow_incomplete=True).committed
    assert not committed.complete and sum(len(s.shards) for s in committed.splits.values()) > 0
    again = tmp_path / "again"
    shutil.copytree(killed, again)
    single(tiny_models["bert"], killed)  # resumed by one process
    assert_same_cache(killed, reference)
    result = torchrun(2, tiny_models["bert"], again)  # resumed by two ranks
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_cache(again, reference)


def test_ranks_resuming_a_cache_say_which_damaged_side_file_they_wrote_again(tiny_models, tmp_path, reference):
    out = tmp_path / "resumed"
    shutil.copytree(reference, out)
    manifest = json.loads((out / "manifest.json").read_text())
    for split in manifest["splits"].values():  # as if stopped after each split's first shard
        for shard in split["shards"][1:]:
            (out / shard["file"]).unlink()
        split.update(shards=split["shards"][:1], complete=False, stats={})
    manifest["complete"] = False
    (out / "manifest.json").write_text(json.dumps(manifest))
    vocabulary = (out / "vocab.json").read_bytes()
    (out / "vocab.json").unlink()
    result = torchrun(2, tiny_models["bert"], out)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed and completed (vocab.json written again)" in " ".join(result.stdout.split()), result.stdout
    assert (out / "vocab.json").read_bytes() == vocabulary
    assert_same_cache(out, reference)


def test_a_failing_rank_is_named_with_its_error_and_what_it_committed_is_listed(tiny_models, tmp_path, reference):
    out = tmp_path / "failed"
    result = torchrun(2, tiny_models["bert"], out, fault={"FAULT_RANK": "1", "FAULT_AFTER": "3", "FAULT": "error"})
    assert result.returncode != 0
    assert result.stderr.count("Extraction stopped on rank 1 (CacheWriteError: ") == 1, result.stderr  # by rank 0
    assert "Rank 1 stopped: CacheWriteError: " in result.stderr  # rank 1's own failure, by rank 1
    assert "No space left on device" in result.stderr and "the same command resumes" in result.stderr
    manifest = lc.LayerCache.open(out, allow_incomplete=True).manifest  # merged at the stop: no part is left
    assert sum(len(s.shards) for s in manifest.splits.values()) > 0 and not list(out.glob("manifest-part-*"))
    single(tiny_models["bert"], out)
    assert_same_cache(out, reference)


def test_a_second_unrelated_writer_is_refused_while_ranks_hold_the_cache(tiny_models, tmp_path):
    from layercache.errors import CacheLockedError
    from layercache.extraction.housekeeping import locked_output

    out = tmp_path / "locked"
    out.mkdir()
    with locked_output(out):  # as rank 0 holds it for the whole run
        result = torchrun(2, tiny_models["bert"], out)
    assert result.returncode != 0 and "lock" in result.stderr.lower()
    # Rank 1 heard and did not wait (the run ended), and left the telling to rank 0, which printed its own error.
    assert "Rank 0 could not prepare the run" not in result.stderr and result.stderr.lower().count("lock") >= 1
    with pytest.raises(CacheLockedError):
        with locked_output(out):
            with locked_output(out):
                pass
