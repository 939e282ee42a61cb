"""The cache feed (store/cache_feed.py): its epochs serve every row once in the one layout, its reads stay
local, and the cache's public batch reads (``batch``, ``iter_batches``, ``torch_dataset``) are its gather."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import layercache as lc
from layercache.store.cache_feed import CacheFeed

TOKEN_TASKS = ["negation_scope", "sentiment", "intensity"]  # token, sequence, regression


@pytest.fixture(autouse=True, scope="module")
def one_thread(one_torch_thread):
    """torch on one thread (see the root conftest)."""


@pytest.fixture(scope="module")
def cache(tiny_models, tmp_path_factory):
    out = tmp_path_factory.mktemp("cache-feed") / "bert-builtin"
    path = lc.extract(str(tiny_models["bert"]), "builtin", out, progress=False, limit=1000).path
    with lc.LayerCache.open(path) as opened:
        yield opened


@pytest.fixture(scope="module")
def sharded(tiny_models, tmp_path_factory):
    """A cache whose splits span several shards, with pooled vectors too."""
    out = tmp_path_factory.mktemp("cache-feed-shards") / "cache"
    path = lc.extract(str(tiny_models["bert"]), "builtin", out, progress=False, limit=60, batch_size=8,
                      shard_bytes=40_000, pooling=["mean", "first"]).path
    with lc.LayerCache.open(path) as opened:
        assert len(opened.split_info("train").shards) > 2
        yield opened


def assert_same_batch(a, b):
    """Two batches hold the same rows, states (padding included), mask, word ids and labels."""
    np.testing.assert_array_equal(a.rows, b.rows)
    assert a.states.dtype == b.states.dtype and torch.equal(a.states, b.states)
    assert torch.equal(a.mask, b.mask)
    assert (a.word_ids is None) == (b.word_ids is None)
    if a.word_ids is not None:
        assert torch.equal(a.word_ids, b.word_ids)
    assert a.labels.keys() == b.labels.keys()
    for task in a.labels:
        assert torch.equal(a.labels[task], b.labels[task]), task


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
    original = feed._slabs.read
    monkeypatch.setattr(feed._slabs, "read",
                        lambda block, keep=False: reads.append(block) or original(block, keep=keep))
    for seed in (1, 2, 3):
        for mine, ref in zip(feed.epoch(shuffle=True, seed=seed), mapped.epoch(shuffle=True, seed=seed),
                             strict=True):
            assert np.array_equal(mine.rows, ref.rows) and torch.equal(mine.states, ref.states)
    n_blocks = len(feed._blocks)
    assert feed._slabs.kept_bytes <= keep_bytes
    if keep_bytes == 0:
        assert len(reads) == 3 * n_blocks and not feed._slabs.kept
    elif keep_bytes == 1 << 30:
        assert len(reads) == n_blocks  # each block read from disk once, then served from memory
    else:
        assert 0 < len(feed._slabs.kept) < n_blocks and n_blocks < len(reads) < 3 * n_blocks


@pytest.mark.parametrize("keep_bytes", [0, 1 << 30], ids=["drops", "keeps"])
def test_a_mapped_feed_keeps_its_pages_only_when_an_epoch_s_fit_what_it_may_keep(cache, monkeypatch, keep_bytes):
    """Dropping a block's pages bounds resident memory for a large cache; for one whose epoch fits ``keep_bytes``
    it only made the next epoch fault them back (7 % of SST-2's head training), so they stay, as kept slabs do."""
    feed = CacheFeed(cache, "validation", tasks=["sentiment"], batch_size=16, block_bytes=50_000,
                     keep_bytes=keep_bytes)
    assert all(m is not None for m in feed._maps) and len(feed._blocks) > 1
    dropped = []
    for values, _scales in feed._maps:
        monkeypatch.setattr(values, "dont_need", lambda lo, hi, index: dropped.append((lo, hi)))
    batches = [b.states.clone() for b in feed.epoch(shuffle=True, seed=1)]
    assert feed.keeps_pages == (keep_bytes > 0)
    assert bool(dropped) == (keep_bytes == 0)
    other = CacheFeed(cache, "validation", tasks=["sentiment"], batch_size=16, block_bytes=50_000, keep_bytes=0)
    assert all(torch.equal(a, b.states) for a, b in zip(batches, other.epoch(shuffle=True, seed=1), strict=True))


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
    read = sum(len(feed._slabs.read(block).values) for block in feed._blocks)
    assert read == cache.lengths("train")[rows].sum()  # gaps of 9 rows are skipped, not read through
    for batch in feed.epoch(shuffle=True, seed=0):
        ref = cache.batch("train", batch.rows, tasks=["negation_scope"])
        assert torch.equal(batch.states[batch.mask].float(), ref.states[ref.mask])
        assert torch.equal(batch.labels["negation_scope"], ref.labels["negation_scope"])


@pytest.mark.parametrize("source", ["tokens", "pooled:first"])
def test_iter_batches_are_the_feeds_batches(sharded, source):
    """``LayerCache.iter_batches`` (and ``batch``, ``torch_dataset``) hand out exactly what the cache feed gathers
    for the same rows, widened to float32: the same states at every position (padded positions repeat the row's
    first token, where the reader used to write zeros), mask, word ids and labels."""
    tasks = TOKEN_TASKS if source == "tokens" else ["sentiment", "intensity"]
    feed = CacheFeed(sharded, "train", tasks=tasks, source=source, batch_size=7)
    batches = list(sharded.iter_batches("train", 7, source=source, tasks=tasks, shuffle=True, seed=3, block_size=20))
    assert sorted(np.concatenate([b.rows for b in batches]).tolist()) == list(range(sharded.num_examples("train")))
    dataset = sharded.torch_dataset("train", source=source, tasks=tasks)
    for batch in batches:
        gathered = feed.batch(batch.rows)
        assert batch.states.dtype == torch.float32
        gathered.states = gathered.states.float()
        assert_same_batch(batch, gathered)
        assert_same_batch(sharded.batch("train", batch.rows, source=source, tasks=tasks), gathered)
        assert_same_batch(dataset.collate(list(batch.rows)), gathered)
    for batch in feed.epoch(shuffle=True, seed=0):  # the feed's own epochs: the same gather
        assert_same_batch(feed.batch(batch.rows), batch)


def test_a_batch_across_shards_in_any_order_reads_each_row(sharded):
    lengths = sharded.lengths("train")
    starts = [s.first_row for s in sharded.split_info("train").shards]
    rows = np.array([starts[2], 0, starts[1] + 1, 0, starts[-1]])  # three shards, out of order, a repeat
    for memory_map in (True, False):
        feed = CacheFeed(sharded, "train", tasks=TOKEN_TASKS, memory_map=memory_map)
        batch = feed.batch(rows)
        np.testing.assert_array_equal(batch.rows, rows)
        assert batch.states.shape[1] == lengths[rows].max()
        for i, row in enumerate(rows):
            tokens = sharded.tokens("train", [row])[0]  # (t, S, D) float32
            n = len(tokens)
            assert batch.mask[i].sum() == n == lengths[row]
            np.testing.assert_array_equal(batch.states[i, :n].float().numpy(), tokens)
            assert torch.equal(batch.states[i, n:], batch.states[i, :1].expand_as(batch.states[i, n:]))
            alone = feed.batch([row])
            assert torch.equal(batch.word_ids[i, :n], alone.word_ids[0]) and (batch.word_ids[i, n:] == -1).all()
            for task in TOKEN_TASKS:
                label = batch.labels[task][i]
                if label.dim():  # a token task: the row's labels, IGNORE_INDEX on padding
                    assert torch.equal(label[:n], alone.labels[task][0]) and (label[n:] == -100).all()
                else:
                    assert torch.equal(label, alone.labels[task][0])
    with pytest.raises(IndexError):
        feed.batch([sharded.num_examples("train")])
