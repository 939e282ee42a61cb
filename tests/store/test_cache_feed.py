"""The cache feed (store/cache_feed.py): its epochs serve every row once in the one layout, and its reads stay
local."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import layercache as lc
from layercache.store.cache_feed import CacheFeed


@pytest.fixture(autouse=True, scope="module")
def one_thread(one_torch_thread):
    """torch on one thread (see the root conftest)."""


@pytest.fixture(scope="module")
def cache(tiny_models, tmp_path_factory):
    out = tmp_path_factory.mktemp("cache-feed") / "bert-builtin"
    path = lc.extract(str(tiny_models["bert"]), "builtin", out, progress=False, limit=1000).path
    with lc.LayerCache.open(path) as opened:
        yield opened


def test_feed_batches_match_the_reader(cache):
    feed = CacheFeed(cache, "validation", tasks=["negation_scope", "sentiment"], batch_size=16, block_bytes=50_000)
    assert len(feed._blocks) > 1  # small blocks: rows are still served exactly once
    seen = []
    for batch in feed.epoch(shuffle=True, seed=1):
        seen.extend(batch.rows.tolist())
        ref = cache.batch("validation", batch.rows, tasks=["negation_scope", "sentiment"])
        real = batch.mask
        assert torch.equal(real, ref.mask)
        assert torch.equal(batch.states[real].float(), ref.states[real])
        assert torch.equal(batch.labels["negation_scope"], ref.labels["negation_scope"])
        assert torch.equal(batch.labels["sentiment"], ref.labels["sentiment"])
    assert sorted(seen) == list(range(cache.num_examples("validation")))
    order = lambda seed: np.concatenate([b.rows for b in feed.epoch(shuffle=True, seed=seed)])  # noqa: E731
    assert not np.array_equal(order(1), order(2))
    assert np.array_equal(order(1), order(1))


@pytest.mark.parametrize("keep_bytes", [0, 120_000, 1 << 30], ids=["stream", "some-kept", "all-kept"])
def test_kept_slabs_give_the_same_batches_and_bound_memory(cache, monkeypatch, keep_bytes):
    mapped = CacheFeed(cache, "validation", tasks=["sentiment"], batch_size=16, block_bytes=50_000)
    assert all(m is not None for m in mapped._maps)
    feed = CacheFeed(cache, "validation", tasks=["sentiment"], batch_size=16, block_bytes=50_000,
                     keep_bytes=keep_bytes, memory_map=False)
    reads = []
    original = feed._read
    monkeypatch.setattr(feed, "_read", lambda block, keep=False: reads.append(block) or original(block, keep=keep))
    for seed in (1, 2, 3):
        for mine, ref in zip(feed.epoch(shuffle=True, seed=seed), mapped.epoch(shuffle=True, seed=seed),
                             strict=True):
            assert np.array_equal(mine.rows, ref.rows) and torch.equal(mine.states, ref.states)
    n_blocks = len(feed._blocks)
    assert feed._kept_bytes <= keep_bytes
    if keep_bytes == 0:
        assert len(reads) == 3 * n_blocks and not feed._kept
    elif keep_bytes == 1 << 30:
        assert len(reads) == n_blocks  # each block read from disk once, then served from memory
    else:
        assert 0 < len(feed._kept) < n_blocks and n_blocks < len(reads) < 3 * n_blocks


@pytest.mark.parametrize("keep_bytes,memory_map", [(0, False), (1 << 30, False), (0, True)],
                         ids=["stream", "kept", "mapped"])
def test_a_state_subset_in_any_order_reads_those_states(cache, keep_bytes, memory_map):
    layers = ["layer_2", "embeddings"]
    rows = np.arange(0, cache.num_examples("train"), 3)  # runs with gaps: several reads per block
    feed = CacheFeed(cache, "train", tasks=["sentiment"], rows=rows, layers=layers, batch_size=16,
                     block_bytes=40_000, keep_bytes=keep_bytes, memory_map=memory_map)
    for epoch in (1, 2):  # the second epoch serves kept slabs, or refills the streaming buffer
        for batch in feed.epoch(shuffle=True, seed=epoch):
            ref = cache.batch("train", batch.rows, layers=layers, tasks=["sentiment"])
            assert batch.states.shape[2] == 2
            assert torch.equal(batch.states[batch.mask].float(), ref.states[ref.mask])


def test_a_sparse_row_subset_reads_only_near_its_rows(cache):
    rows = np.arange(0, cache.num_examples("train"), 10)
    feed = CacheFeed(cache, "train", tasks=["negation_scope"], rows=rows, batch_size=8, memory_map=False)
    read = sum(len(feed._read(block).values) for block in feed._blocks)
    assert read == cache.lengths("train")[rows].sum()  # gaps of 9 rows are skipped, not read through
    for batch in feed.epoch(shuffle=True, seed=0):
        ref = cache.batch("train", batch.rows, tasks=["negation_scope"])
        assert torch.equal(batch.states[batch.mask].float(), ref.states[ref.mask])
        assert torch.equal(batch.labels["negation_scope"], ref.labels["negation_scope"])
