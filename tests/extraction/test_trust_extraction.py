"""Extraction that can be trusted: NaN from the model, failed writes, an honest size estimate, a damaged pointer.

Every refusal is one sentence with exit code 2, and leaves the cache as a killed run would: the
committed shards listed and intact, no temp shard, so the same command resumes.
"""

from __future__ import annotations

import errno
import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
from cli_support import assert_refused, invoke

import layercache as lc
import layercache.extraction.job as job
import layercache.extraction.run as run
from layercache.backbone.loader import Backbone
from layercache.core.tasks import LabelTask
from layercache.errors import NonFiniteStatesError
from layercache.store.writer import ExtractedBatch, ShardWriter

MARKER = "7"  # a vocabulary piece used by one row only: the row the tests poison
POISONED_ROW = 9


BUILTIN_SIZES = {"train": 40, "validation": 12}
"""The builtin splits these tests extract (the ``small_builtin`` fixture of tests/conftest.py)."""


@pytest.fixture
def tsv(tmp_path):
    """12 reviews of different lengths; row 9, the shortest, carries the marker (so it comes last in cache order)."""
    path = tmp_path / "reviews.tsv"
    rows = [f"the lamp {'is good' if i % 2 else 'is not good'} today {'and the keys are bad ' * (i % 4)}"
            for i in range(12)]
    rows[POISONED_ROW] = f"{MARKER} good"
    path.write_text("text\tlabel\n" + "".join(f"{text}\t{'pos' if i % 2 else 'neg'}\n" for i, text in enumerate(rows)))
    return path


# Every batch its own shard (1-byte target), two examples a batch: committed shards before any failure.
SMALL = ("--batch-size", "2", "--shard-size", "1", "--quiet")


def committed(out: Path) -> list[str]:
    manifest = json.loads((out / "manifest.json").read_text())
    return [s["file"] for split in manifest["splits"].values() for s in split["shards"]]


def assert_consistent(out: Path, at_least: int = 1) -> None:
    """What a killed run leaves: no temp shard, every listed shard present, no unlisted one."""
    assert not list(out.rglob("*.tmp")), list(out.rglob("*.tmp"))
    listed = committed(out)
    assert len(listed) >= at_least
    assert sorted(listed) == sorted(str(p.relative_to(out)) for p in out.glob("*/shard-*.h5"))


def poison(monkeypatch, model_dir: Path, value: float, states: tuple[int, ...] = (1, 2)) -> None:
    """Make the backbone return ``value`` in the given states for every row holding the marker token."""
    from transformers import AutoTokenizer

    marker = AutoTokenizer.from_pretrained(model_dir).convert_tokens_to_ids(MARKER)
    original = Backbone.hidden_states

    def hidden_states(self, ids, mask):
        hidden = list(original(self, ids, mask))
        rows = (ids == marker).any(1)  # (R,)
        for i in states:
            hidden[i] = hidden[i].clone()
            hidden[i][rows] = value
        return hidden

    monkeypatch.setattr(Backbone, "hidden_states", hidden_states)


# --- 1. NaN or inf from the model --------------------------------------------------------
@pytest.mark.parametrize("value, shown", [(float("nan"), "NaN"), (float("inf"), "inf")])
def test_nan_from_the_model_is_refused_naming_split_row_and_layer(tiny_models, tsv, tmp_path, monkeypatch,
                                                                  value, shown):
    clean = lc.extract(str(tiny_models["bert"]), str(tsv), tmp_path / "clean", progress=False, batch_size=2,
                       shard_bytes=1)
    cache_row = int(np.flatnonzero(lc.LayerCache.open(clean.path).example_index("train") == POISONED_ROW)[0])
    out = tmp_path / "cache"
    with monkeypatch.context() as mp:
        poison(mp, tiny_models["bert"], value)
        refused = invoke("extract", tiny_models["bert"], tsv, "--out", out, *SMALL)
    assert_refused(refused, f"produced {shown} in state layer_1 for source row {POISONED_ROW} of split 'train' "
                            f"(cache row {cache_row})", "--overwrite")
    assert_consistent(out)
    resumed = invoke("extract", tiny_models["bert"], tsv, "--out", out, *SMALL)  # the model fixed: it resumes
    assert resumed.exit_code == 0 and "resumed and completed" in resumed.output, resumed.output
    a, b = lc.LayerCache.open(out), lc.LayerCache.open(clean.path)
    np.testing.assert_array_equal(a.example_index("train"), b.example_index("train"))
    for x, y in zip(a.tokens("train", range(12)), b.tokens("train", range(12))):
        np.testing.assert_array_equal(x, y)


def test_nan_refusal_from_the_library_names_the_fix_for_a_half_precision_forward(tiny_models, tsv, tmp_path,
                                                                                  monkeypatch):
    poison(monkeypatch, tiny_models["bert"], float("nan"), states=(2,))
    fix = r"re-extract with dtype='float32', overwrite=True\.$"  # the keywords of the call, not the command's flags
    with pytest.raises(NonFiniteStatesError, match=r"NaN in state layer_2 .* " + fix):
        lc.extract(str(tiny_models["bert"]), str(tsv), tmp_path / "cache", progress=False, dtype="bfloat16")


def test_huge_finite_states_are_not_taken_for_nan(tiny_models, tsv, tmp_path, monkeypatch):
    """1e20 squares to inf in float32, so the sums look non-finite; the search finds every value finite."""
    poison(monkeypatch, tiny_models["bert"], 1e20)
    result = lc.extract(str(tiny_models["bert"]), str(tsv), tmp_path / "cache", progress=False,
                        storage_dtype="float16")  # explicit: auto would see 1e20 in its probe and store bfloat16
    assert result.manifest.complete and result.manifest.extraction.fp16_overflow > 0  # counted, as before


# --- 2. Failed writes ----------------------------------------------------------------------
def fail_on_append(monkeypatch, call: int, error: OSError) -> None:
    """The ``call``-th append writes its batch, then fails: the shard being written has data in its .tmp."""
    original, calls = ShardWriter.append, []

    def append(self, batch):
        calls.append(1)
        original(self, batch)
        if len(calls) == call:
            assert self.tmp_path.exists()
            raise error

    monkeypatch.setattr(ShardWriter, "append", append)


def test_disk_full_mid_run_is_one_sentence_and_resumes(tiny_models, tsv, tmp_path, monkeypatch):
    out = tmp_path / "cache"
    with monkeypatch.context() as mp:
        fail_on_append(mp, 3, OSError(errno.ENOSPC, "No space left on device"))
        result = invoke("extract", tiny_models["bert"], tsv, "--out", out, *SMALL)
    assert_refused(result, "No space left on device", "free space", "run the same command again to resume")
    assert_consistent(out, at_least=2)
    resumed = invoke("extract", tiny_models["bert"], tsv, "--out", out, *SMALL)
    assert resumed.exit_code == 0 and "resumed and completed" in resumed.output, resumed.output


def test_a_full_disk_at_flush_reported_by_h5py_without_errno(tiny_models, tsv, tmp_path, monkeypatch):
    """h5py raises a failed flush as RuntimeError, the errno only in its text; it is still a full disk."""
    import h5py

    original, calls = h5py.File.flush, []

    def flush(self):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("Unable to flush file's cached information (file write failed: time = now, "
                               "filename = 'x', file descriptor = 3, errno = 28, error message = 'No space left "
                               "on device', buf = 0x1, total write size = 6795, bytes this sub-write = 6795)")
        original(self)

    out = tmp_path / "cache"
    with monkeypatch.context() as mp:
        mp.setattr(h5py.File, "flush", flush)
        result = invoke("extract", tiny_models["bert"], tsv, "--out", out, *SMALL)
    assert_refused(result, "No space left on device", "resume")
    assert_consistent(out)


def _batch(n: int = 3, t: int = 10) -> ExtractedBatch:
    lengths = np.full(n, t // n)
    lengths[: t - lengths.sum()] += 1
    return ExtractedBatch(hidden=np.ones((2, t, 8), np.float16), lengths=lengths, input_ids=np.ones(t, np.int32),
                          word_ids=None, pooled={"mean": np.ones((n, 2, 8), np.float16)},
                          labels={"y": [0] * n}, example_index=np.arange(n), stat_sum=np.zeros((2, 8)),
                          stat_sumsq=np.zeros((2, 8)), stat_count=t)


def test_abort_removes_the_temp_shard_even_when_closing_fails(tmp_path, monkeypatch):
    """On a full disk HDF5's close fails too; abort must still delete the .tmp and not raise over the first error."""
    import h5py

    writer = ShardWriter(tmp_path / "train" / "shard-00000.h5", n_states=2, dim=8, dtype="float16",
                         store_tokens=True, pooling=["mean"], tasks=[LabelTask("y", "sequence", ("a", "b"))],
                         first_row=0, first_batch=0)
    writer.append(_batch())
    assert writer.tmp_path.exists()
    with monkeypatch.context() as mp:
        mp.setattr(h5py.File, "close", lambda self: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space")))
        writer.abort()
    assert not writer.tmp_path.exists()


def test_read_only_cache_folder_on_resume(tiny_models, tsv, tmp_path, monkeypatch):
    """As root, chmod does not stop writes, so the read-only file system is simulated where shards are created."""
    out = tmp_path / "cache"
    with monkeypatch.context() as mp:
        fail_on_append(mp, 2, OSError(errno.ENOSPC, "No space left on device"))
        invoke("extract", tiny_models["bert"], tsv, "--out", out, *SMALL)
    before = committed(out)

    def read_only(self, batch):
        raise OSError(errno.EROFS, "Read-only file system", str(self.tmp_path))

    with monkeypatch.context() as mp:
        mp.setattr(ShardWriter, "_open", read_only)
        result = invoke("extract", tiny_models["bert"], tsv, "--out", out, *SMALL)
    assert_refused(result, "Read-only file system", "writable", "resume")
    assert committed(out) == before
    assert_consistent(out)

    def denied(*args):
        raise PermissionError(errno.EACCES, "Permission denied", str(out / ".manifest-x.json.tmp"))

    with monkeypatch.context() as mp:  # the shard commits, the manifest cannot be rewritten
        mp.setattr("layercache.extraction.shards.write_part", denied)
        result = invoke("extract", tiny_models["bert"], tsv, "--out", out, *SMALL)
    assert_refused(result, "Permission denied", "writable")
    assert committed(out) == before
    resumed = invoke("extract", tiny_models["bert"], tsv, "--out", out, *SMALL)  # the unlisted shard is redone
    assert resumed.exit_code == 0 and "resumed and completed" in resumed.output, resumed.output


def test_out_below_a_file(tiny_models, tsv, tmp_path):
    somefile = tmp_path / "somefile"
    somefile.write_text("x")
    assert_refused(invoke("extract", tiny_models["bert"], tsv, "--out", somefile / "cache"), "is a file")
    assert somefile.read_text() == "x"


# --- 3. The size estimate --------------------------------------------------------------------
def cache_bytes(out: Path) -> int:
    return sum(p.stat().st_size for p in out.rglob("*") if p.is_file() and p.suffix in (".h5", ".json"))


def spy_estimate(monkeypatch) -> list[int]:
    seen, original = [], job.estimate_bytes

    def estimate(*args, **kwargs):
        seen.append(original(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(job, "estimate_bytes", estimate)
    return seen


@pytest.mark.parametrize("shard_bytes, options", [
    (12_000, {}), (run.DEFAULT_SHARD_BYTES, {}), (12_000, {"store": "pooled", "pooling": ["mean", "first"]}),
    (200_000, {"layers": [-1], "storage_dtype": "float32"}),
    (12_000, {"storage_dtype": "int8"}), (12_000, {"store": "pooled", "storage_dtype": "int8"}),
])
def test_size_estimate_matches_what_is_written(tiny_models, tmp_path, monkeypatch, small_builtin, shard_bytes,
                                               options):
    seen = spy_estimate(monkeypatch)
    result = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "cache", progress=False,
                        shard_bytes=shard_bytes, batch_size=8, **options)
    real = cache_bytes(result.path)
    assert len(seen) == 1 and 0.75 * real <= seen[0] <= 1.25 * real, (seen, real)


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def test_a_resumed_run_reports_what_is_left_to_write(tiny_models, tmp_path, monkeypatch, small_builtin):
    out = tmp_path / "cache"
    with monkeypatch.context() as mp:
        fail_on_append(mp, 3, OSError(errno.ENOSPC, "No space left on device"))
        with pytest.raises(OSError):  # CacheWriteError (an OSError) here; a bare OSError before the fix
            lc.extract(str(tiny_models["bert"]), "builtin", out, progress=False, shard_bytes=12_000, batch_size=8)
    before = cache_bytes(out)
    logger, lines, level = logging.getLogger("layercache"), Lines(), logging.getLogger("layercache").level
    logger.setLevel(logging.INFO)  # setLevel, not the attribute: it clears the logger's isEnabledFor cache
    logger.addHandler(lines)
    try:
        result = lc.extract(str(tiny_models["bert"]), "builtin", out, progress=False, shard_bytes=12_000,
                            batch_size=8)
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
    assert result.resumed
    said = [m for line in lines.lines if (m := re.search(r"\(([\d,.]+) (\w+) still to write\)", line))]
    assert said, lines.lines
    left = float(said[0].group(1).replace(",", "")) * UNITS[said[0].group(2)]
    written = cache_bytes(out) - before
    assert left > 0 and 0.75 * written <= left <= 1.25 * written, (left, written)


# --- 4. The latest pointer and `list` ------------------------------------------------------------
@pytest.mark.parametrize("content", [
    b"\x00\xff\xfe\x80 binary junk", b"\n", b"relative/cache\n", b"/" + b"a" * 20_000 + b"\n", "NOT-A-CACHE",
    "MISSING",
])
def test_a_damaged_latest_pointer_is_one_sentence(isolated_home, tmp_path, content):
    if content == "NOT-A-CACHE":
        (tmp_path / "plain").mkdir()
        content = f"{tmp_path / 'plain'}\n".encode()
    elif content == "MISSING":
        content = f"{tmp_path / 'gone'}\n".encode()
    pointer = isolated_home / "latest"
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.write_bytes(content)
    for command in (("info",), ("train-head", "--quiet", "--epochs", "1")):
        assert_refused(invoke(*command), f"latest-cache pointer {pointer}", "pass a cache folder")

