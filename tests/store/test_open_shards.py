"""A reader keeps a bounded number of shards open through HDF5, whatever the size of the cache.

Each open HDF5 file costs memory of its own (its structures and its metadata cache, which holds the chunk
index of every dataset read), so a reader that kept every shard open grew with the cache. The states do not
need the handle (a memory map outlives it), and a shard opened again is checked again only if it changed.
"""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest

import layercache as lc
from layercache.errors import CacheError
from layercache.store import reader
from layercache.store.cache_feed import CacheFeed
from layercache.store.shard_checks import SHARD_METADATA_CACHE, open_shard


def open_files() -> int:
    return len(h5py.h5f.get_obj_ids(types=h5py.h5f.OBJ_FILE))


@pytest.fixture(scope="module")
def many_shards(tiny_models, tmp_path_factory):
    """A cache of 600 examples in more shards than a reader keeps open."""
    folder = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(0)
    words = ["the", "a", "cat", "dog", "sat", "on", "mat", "and", "ran", "far"]
    data = folder / "train.tsv"
    data.write_text("\n".join(" ".join(words[i] for i in rng.integers(len(words), size=30))
                              + f"\t{'pn'[i % 2]}" for i in range(600)) + "\n", encoding="utf-8")
    path = lc.extract(str(tiny_models["bert"]), None, folder / "cache", split_files={"train": str(data)},
                      progress=False, shard_bytes=64 << 10, batch_size=32).path
    with lc.LayerCache.open(path) as cache:
        assert len(cache.split_info("train").shards) > 2 * reader.OPEN_SHARDS
    return path


def test_a_feed_over_many_shards_keeps_few_open_and_reads_the_same(many_shards):
    before = open_files()
    with lc.LayerCache.open(many_shards) as cache:
        shards = len(cache.split_info("train").shards)
        feed = CacheFeed(cache, "train", tasks=["label"], batch_size=16)
        seen = np.concatenate([batch.rows for batch in feed.epoch(shuffle=True)])
        assert open_files() - before <= reader.OPEN_SHARDS < shards
        rows = np.array([0, 599, 300, 1, 598])
        whole = cache.batch("train", rows).states  # shards let go and opened again
        assert open_files() - before <= reader.OPEN_SHARDS
    np.testing.assert_array_equal(np.sort(seen), np.arange(600))
    with lc.LayerCache.open(many_shards) as fresh:  # a reader that never let a shard go reads the same
        reader_bound = reader.OPEN_SHARDS
        try:
            reader.OPEN_SHARDS = 10_000
            np.testing.assert_array_equal(fresh.batch("train", rows).states.numpy(), whole.numpy())
        finally:
            reader.OPEN_SHARDS = reader_bound
    assert open_files() == before


def test_a_shard_that_changed_while_let_go_is_checked_again(many_shards, tmp_path):
    path = tmp_path / "cache"
    shutil.copytree(many_shards, path)
    with lc.LayerCache.open(path) as cache:
        first = cache.split_info("train").shards[0].file
        cache.shard_offsets("train", 0)
        for shard in range(1, reader.OPEN_SHARDS + 1):  # the first shard is let go
            cache.shard_offsets("train", shard)
        assert first not in cache._handles
        with h5py.File(path / first, "r+") as h:  # its labels now name a class the task does not have
            h["labels/label"][0] = 99
        with pytest.raises(CacheError, match="label"):
            cache.shard_dataset("train", 0, "labels/label")


def test_a_shard_is_opened_with_a_small_metadata_cache(many_shards):
    with lc.LayerCache.open(many_shards) as cache:
        file = cache.split_info("train").shards[0].file
    with open_shard(many_shards / file) as h:
        assert h.id.get_mdc_config().max_size == SHARD_METADATA_CACHE


def test_token_arrays_read_each_shard_once_and_keep_the_asked_order(many_shards):
    """Rows in any order, repeated, across shards: each row's ids as a read of that row alone gives them."""
    rng = np.random.default_rng(1)
    with lc.LayerCache.open(many_shards) as cache:
        rows = np.concatenate([rng.permutation(600)[:200], [5, 5, 599, 0]])
        together = cache.token_arrays("train", "input_ids", rows)
        assert len(together) == len(rows)
        for row, ids in zip(rows, together):
            alone = cache.token_arrays("train", "input_ids", [int(row)])[0]
            assert ids.dtype == alone.dtype and ids.tolist() == alone.tolist()
            assert len(ids) == cache.lengths("train")[row]
        with pytest.raises(IndexError):
            cache.token_arrays("train", "input_ids", [0, 600])
