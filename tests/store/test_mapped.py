"""Memory-mapped shard reads: exactly what h5py reads, or no mapping at all, never a crash."""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import layercache as lc
from layercache.store.cache_feed import CacheFeed
from layercache.store.codecs import codec
from layercache.store.mapped import MappedStates

SIZES = {"train": 40, "validation": 8}


def bits(values: torch.Tensor) -> np.ndarray:
    """A gathered tensor as the numpy values h5py reads (bf16 is stored as its uint16 bits)."""
    return values.view(torch.int16).numpy().view(np.uint16) if values.dtype == torch.bfloat16 else values.numpy()


@pytest.mark.parametrize("storage_dtype", ["float16", "bfloat16", "float32"])
def test_mapped_rows_equal_h5py_reads(tiny_models, tmp_path, small_builtin, storage_dtype):
    result = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "cache", progress=False,
                        storage_dtype=storage_dtype, pooling=["mean"])
    rng = np.random.default_rng(0)
    for shard in result.manifest.splits["train"].shards:
        path = result.path / shard.file
        with h5py.File(path, "r") as h:
            for name in ("hidden", "pooled/mean"):
                ds = h[name]
                mapped = MappedStates.open(path, ds)
                assert mapped is not None, name
                stored = ds[:]  # (N, S, D)
                rows = rng.integers(0, len(stored), size=(5, 7))  # any shape of rows, repeats included
                states = [ds.shape[1] - 1, 0, 1]  # a subset in any order
                got = mapped.gather(rows, states)
                assert got.dtype == codec(storage_dtype).torch_dtype and got.shape == (5, 7, 3, stored.shape[2])
                np.testing.assert_array_equal(bits(got), stored[rows][:, :, states])
                np.testing.assert_array_equal(bits(mapped.gather(np.arange(len(stored)), range(stored.shape[1]))),
                                              stored)
                mapped.will_need(0, len(stored), states)  # a hint: must not fail


@pytest.mark.parametrize("storage_dtype", ["float16", "bfloat16", "float32", "int8"])
def test_a_whole_pooled_split_is_gathered_from_the_map(tiny_models, tmp_path, small_builtin, monkeypatch,
                                                       storage_dtype):
    """``pooled_stored`` (what the probes read) equals h5py's read of every shard: an unscaled codec's vectors come
    from one gather per shard of its memory map (a scaled codec's would be dequantised from h5py's read)."""
    result = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "cache", progress=False,
                        storage_dtype=storage_dtype, pooling=["mean"], shard_bytes=4_000, batch_size=8)
    cache = lc.LayerCache.open(result.path)
    shards = cache.split_info("train").shards
    assert len(shards) > 1  # the split's shards are joined in order
    gathers = []
    real_gather = MappedStates.gather
    monkeypatch.setattr(MappedStates, "gather", lambda self, *a: gathers.append(self.path) or real_gather(self, *a))
    layers = [2, 0]
    got = cache.pooled_stored("train", "mean", layers=layers)
    pooled_as = codec(cache.manifest.storage.stored_pooled_dtype)  # an int8 cache pools in float16
    assert len(gathers) == (0 if pooled_as.scaled else len(shards))
    if pooled_as.scaled:
        np.testing.assert_array_equal(got.numpy(), cache.pooled("train", "mean", layers=layers))
        return
    stored = []
    for shard in shards:
        with h5py.File(result.path / shard.file, "r") as h:
            stored.append(h["pooled/mean"][:][:, layers])
    assert got.dtype == pooled_as.torch_dtype
    np.testing.assert_array_equal(bits(got), np.concatenate(stored))


def write(path, **dataset) -> tuple[h5py.File, h5py.Dataset, np.ndarray]:
    f = h5py.File(path, "w")
    data = dataset.pop("data")
    ds = f.create_dataset("hidden", shape=data.shape, dtype=data.dtype, **dataset)
    return f, ds, data


@pytest.mark.parametrize("layout", ["contiguous", "chunks of 2 states", "chunks of all states"])
def test_other_plain_layouts_are_mapped_too(tmp_path, layout):
    data = np.arange(300 * 3 * 8, dtype=np.float32).reshape(300, 3, 8)
    chunks = {"contiguous": None, "chunks of 2 states": (64, 2, 8), "chunks of all states": (50, 3, 8)}[layout]
    f, ds, _ = write(tmp_path / "s.h5", data=data, chunks=chunks)
    ds[:] = data
    f.close()
    with h5py.File(tmp_path / "s.h5", "r") as h:
        mapped = MappedStates.open(tmp_path / "s.h5", h["hidden"])
        rows = np.array([0, 63, 64, 299, 128])
        np.testing.assert_array_equal(mapped.gather(rows, [2, 1]).numpy(), data[rows][:, [2, 1]])


@pytest.mark.parametrize("layout", ["compressed", "unwritten chunks", "chunks split the width"])
def test_layouts_that_cannot_be_mapped_are_left_to_h5py(tmp_path, layout):
    data = np.ones((256, 2, 8), dtype=np.float16)
    options = {"compressed": dict(chunks=(64, 1, 8), compression="gzip"),
               "unwritten chunks": dict(chunks=(64, 1, 8)),
               "chunks split the width": dict(chunks=(64, 1, 4))}[layout]
    f, ds, _ = write(tmp_path / "s.h5", data=data, **options)
    if layout == "unwritten chunks":
        ds[:100] = data[:100]  # chunks past row 127 are never allocated; HDF5 reads them as fill values
    else:
        ds[:] = data
    f.close()
    with h5py.File(tmp_path / "s.h5", "r") as h:
        assert MappedStates.open(tmp_path / "s.h5", h["hidden"]) is None


def test_a_truncated_shard_is_refused_with_a_sentence_not_a_crash(tiny_models, tmp_path, small_builtin):
    result = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "cache", progress=False)
    path = result.path / result.manifest.splits["train"].shards[0].file
    with h5py.File(path, "r") as h:  # open before the damage, as a reader that was already running
        ds = h["hidden"]
        ends = []
        ds.id.chunk_iter(lambda info: ends.append(info.byte_offset + info.size))
        os.truncate(path, max(ends) - 1)  # the last chunk loses its last byte
        with pytest.raises(lc.CacheError, match="truncated; re-extract"):
            MappedStates.open(path, ds)
    with lc.LayerCache.open(result.path) as cache, pytest.raises(lc.CacheError, match="re-extract"):
        CacheFeed(cache, "train", tasks=["sentiment"])


def test_feeds_over_mapped_and_copied_shards_agree(tiny_models, tmp_path, small_builtin):
    result = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "cache", progress=False, pooling=["mean"])
    with lc.LayerCache.open(result.path) as cache:
        for source, block_bytes in (("tokens", 20_000), ("pooled:mean", 2_000)):  # several blocks each
            mapped = CacheFeed(cache, "train", tasks=["sentiment"], source=source, batch_size=8,
                               block_bytes=block_bytes)
            copied = CacheFeed(cache, "train", tasks=["sentiment"], source=source, batch_size=8,
                               block_bytes=block_bytes, memory_map=False)
            assert all(m is not None for m in mapped._maps) and len(mapped._blocks) > 1
            for a, b in zip(mapped.epoch(shuffle=True, seed=4), copied.epoch(shuffle=True, seed=4), strict=True):
                assert np.array_equal(a.rows, b.rows)
                assert a.states.dtype == b.states.dtype and np.array_equal(a.states.numpy(), b.states.numpy())
                assert np.array_equal(a.mask.numpy(), b.mask.numpy())


def test_the_cache_hands_feeds_its_shards_through_public_methods(tiny_models, tmp_path, small_builtin):
    result = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "cache", progress=False, pooling=["mean"])
    with lc.LayerCache.open(result.path) as cache:
        shards = cache.split_info("train").shards
        lengths = cache.lengths("train")
        for shard, info in enumerate(shards):
            offsets = cache.shard_offsets("train", shard)
            assert offsets.shape == (info.n_examples + 1,) and offsets[0] == 0
            np.testing.assert_array_equal(np.diff(offsets),
                                          lengths[info.first_row:info.first_row + info.n_examples])
            hidden = cache.shard_dataset("train", shard, "hidden")
            assert isinstance(hidden, h5py.Dataset) and hidden.shape[0] == offsets[-1]
            assert cache.shard_dataset("train", shard, "labels/sentiment").shape == (info.n_examples,)
            assert cache.shard_dataset("train", shard, "no such data") is None
            assert cache.shard_dataset("train", shard, "labels") is None  # a group, not a dataset
            for name in ("hidden", "pooled/mean"):
                stored = cache.shard_dataset("train", shard, name)[:]  # (N, S, D)
                mapped = cache.mapped_states("train", shard, name)
                assert mapped is cache.mapped_states("train", shard, name)  # one mapping per dataset
                rows = np.array([len(stored) - 1, 0])
                np.testing.assert_array_equal(mapped.gather(rows, [1, 0]).numpy(), stored[rows][:, [1, 0]])
        cache.require_tokens()  # a token cache: no refusal
    pooled = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "pooled", progress=False, store="pooled")
    with lc.LayerCache.open(pooled.path) as cache, pytest.raises(lc.CacheError, match="pooled vectors only"):
        cache.require_tokens()


def _mapped_shard_rss(folder: Path) -> int:
    """Bytes of ``folder``'s shard files resident in this process through memory maps (/proc/self/smaps)."""
    total, name = 0, ""
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5 and ":" not in fields[0]:  # a mapping's header line
            name = fields[5] if len(fields) > 5 else ""
        elif fields[0] == "Rss:" and name.startswith(str(folder)) and name.endswith(".h5"):
            total += int(fields[1]) * 1024
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc to see mapped pages")
def test_a_sparse_read_leaves_no_pages_of_the_shard_behind(tiny_models, tmp_path):
    """A validation slice reads rows far apart; a page fault also maps the cached pages around it (Linux's
    fault-around), in chunks no block of the slice drops. Those stayed resident: 123 MB of a 282 MB shard
    for a 10 % slice, growing with the cache, until each block dropped its whole span and a margin."""
    rng = np.random.default_rng(0)
    words = ["the", "a", "cat", "dog", "sat", "on", "mat", "and", "ran", "far", "away", "home"]
    data = tmp_path / "train.tsv"
    data.write_text("\n".join(" ".join(words[i] for i in rng.integers(len(words), size=40)) + "\tp"
                              for _ in range(3_000)) + "\n", encoding="utf-8")
    path = lc.extract(str(tiny_models["bert"]), None, tmp_path / "cache", split_files={"train": str(data)},
                      progress=False).path
    shards = sum(f.stat().st_size for f in Path(path).glob("train/shard-*.h5"))
    with lc.LayerCache.open(path) as cache:
        feed = CacheFeed(cache, "train", rows=np.arange(0, 3_000, 10), source="tokens", block_bytes=1 << 20,
                         keep_bytes=0)
        for _ in feed.epoch(shuffle=False):
            pass
        left = _mapped_shard_rss(Path(path))
        feed.batch([5, 1_505, 2_995])  # a read outside the epoch's plan drops its pages too
        assert _mapped_shard_rss(Path(path)) <= left
    assert left < 0.02 * shards, f"{left:,} of {shards:,} shard bytes stayed resident"
