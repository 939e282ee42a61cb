"""An int8 cache end to end: what extraction writes, what every reader serves, verify, repair and refusals.

int8 stores each vector (a token's state, an example's pooled state) as ``round(x / s)`` with
``s = max|x| / 127`` and keeps ``s`` beside it (``scales/<dataset>``, ``(N, S, 1)`` float32). Every
read must apply the scales it read with the same index, and nothing may serve int8 values unscaled.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

import layercache as lc
from layercache.errors import CacheError
from layercache.live.verify import verify_cache
from layercache.store.cache_feed import CacheFeed
from layercache.store.codecs import codec


@pytest.fixture(scope="module")
def caches(tiny_models, tmp_path_factory):
    """The same 40 built-in examples per split through the tiny BERT, stored as float32 and as int8."""
    root = tmp_path_factory.mktemp("int8")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        for dtype in ("float32", "int8"):
            out[dtype] = lc.extract(str(tiny_models["bert"]), "builtin", root / dtype, limit=40, progress=False,
                                    storage_dtype=dtype, pooling=["mean", "first"], shard_bytes=4_000,
                                    batch_size=8).path
    return out


def test_int8_shards_hold_int8_values_and_one_scale_per_vector(caches):
    cache = lc.LayerCache.open(caches["int8"])
    assert cache.manifest.storage.dtype == "int8"
    S, D = len(cache.layer_names), cache.hidden_size
    info = cache.split_info("train")
    assert len(info.shards) > 1  # rows cross shard boundaries below
    with h5py.File(caches["int8"] / info.shards[0].file) as h:
        t, n = info.shards[0].n_tokens, info.shards[0].n_examples
        assert h["hidden"].dtype == np.int8 and h["hidden"].shape == (t, S, D)
        assert h["scales/hidden"].dtype == np.float32 and h["scales/hidden"].shape == (t, S, 1)
        assert h["scales/pooled/mean"].shape == h["scales/pooled/first"].shape == (n, S, 1)
        assert int(np.abs(h["hidden"][:]).max()) == 127


def test_every_read_is_the_float32_cache_within_half_a_step(caches):
    exact, int8 = (lc.LayerCache.open(caches[d]) for d in ("float32", "int8"))
    rows = [0, 3, 17, 39, 38]
    for x, y in zip(exact.tokens("train", rows), int8.tokens("train", rows)):  # (t, S, D) each
        assert y.dtype == np.float32
        bound = np.abs(x).max(-1, keepdims=True) / 254 * (1 + 1e-5) + 1e-7  # half a step of each vector
        assert (np.abs(x - y) <= bound).all()
    for mode in ("mean", "first"):
        x, y = exact.pooled("train", mode), int8.pooled("train", mode)  # (n, S, D)
        assert (np.abs(x - y) <= np.abs(x).max(-1, keepdims=True) / 254 * (1 + 1e-5) + 1e-7).all()
        np.testing.assert_array_equal(int8.pooled("train", mode, rows=rows), y[rows])
        np.testing.assert_array_equal(int8.pooled_stored("train", mode).numpy(), y)
    layer = np.concatenate(list(int8.layer_tokens("train", "layer_2")))  # (t, D)
    every = np.concatenate(int8.tokens("train", range(int8.num_examples("train"))))  # (t, S, D)
    np.testing.assert_array_equal(layer, every[:, int8.layer_names.index("layer_2")])


@pytest.mark.parametrize("memory_map", [True, False])
def test_the_feed_carries_int8_values_and_scales_and_dequantises_where_asked(caches, memory_map):
    cache = lc.LayerCache.open(caches["int8"])
    feed = CacheFeed(cache, "train", tasks=["topic"], layers=["layer_2", "embeddings"], memory_map=memory_map)
    rows = [39, 0, 17, 5]  # several shards, any order
    batch = feed.batch(rows)
    assert batch.states.dtype == torch.int8 and batch.scales.shape == batch.states.shape[:3] + (1,)
    served = batch.states_on("cpu")  # (B, T, S, D) float32
    index = [cache.layer_names.index("layer_2"), cache.layer_names.index("embeddings")]
    for i, states in enumerate(cache.tokens("train", rows)):
        np.testing.assert_array_equal(served[i, :len(states)].numpy(), states[:, index])
    np.testing.assert_array_equal(lc.LayerCache.open(caches["int8"]).batch("train", rows, layers=index).states,
                                  served.numpy())
    pooled = CacheFeed(cache, "train", source="pooled:first", memory_map=memory_map).batch(rows)
    assert pooled.scales.shape == pooled.states.shape[:3] + (1,)
    np.testing.assert_array_equal(pooled.states_on()[:, 0].numpy(), cache.pooled("train", "first", rows=rows))
    # an epoch serves the same values as the single batches
    seen = {int(r): b.states_on()[j] for b in feed.epoch(shuffle=True, seed=3) for j, r in enumerate(b.rows)}
    assert torch.equal(seen[17][:len(cache.tokens("train", [17])[0])], served[2, :len(cache.tokens("train", [17])[0])])


def test_a_head_trains_on_int8_as_on_float32(caches, one_torch_thread):
    scores = {}
    for dtype, path in caches.items():
        cache = lc.LayerCache.open(path)
        head = lc.LayerHead(mixer="scalar", epochs=3, seed=0, tasks=["negation_scope"], progress=False).fit(cache)
        metrics, _ = head.evaluate(cache, "validation")
        scores[dtype] = metrics["negation_scope"]["accuracy"]
    assert abs(scores["int8"] - scores["float32"]) < 0.03, scores


def test_verify_holds_an_int8_cache_to_its_quantisation_step(caches):
    result = verify_cache(caches["int8"], sample=8)
    assert result.passed, result.failure
    worst = max(r.worst for r in result.rows)
    assert 0.3 < worst <= 0.55  # half a step of rounding, measured in full steps: about 0.5, never 1
    assert max(r.max_rel for r in result.rows) < 0.05


def test_an_edited_scale_fails_verify_and_the_checksum(caches, tmp_path):
    import shutil

    copy = tmp_path / "cache"
    shutil.copytree(caches["int8"], copy)
    shard = lc.LayerCache.open(copy).split_info("validation").shards[0].file
    with h5py.File(copy / shard, "r+") as h:
        h["scales/hidden"][0:40, 2, 0] *= 1.5  # 40 tokens of one state, 50 % too large
    result = verify_cache(copy, sample=40, split="validation")
    assert not result.passed and "'validation'" in result.failure
    assert lc.LayerCache.open(copy).damaged_shards() == [shard]  # the checksum says so too


def test_a_shard_without_its_scales_is_refused_in_one_sentence(caches, tmp_path):
    import shutil

    copy = tmp_path / "cache"
    shutil.copytree(caches["int8"], copy)
    shard = lc.LayerCache.open(copy).split_info("train").shards[0].file
    with h5py.File(copy / shard, "r+") as h:
        del h["scales/hidden"]
    with pytest.raises(CacheError, match="has no dataset 'scales/hidden'"):
        lc.LayerCache.open(copy).tokens("train", [0])


def test_repair_re_extracts_a_damaged_int8_shard_to_the_same_bytes(caches, tiny_models, tmp_path):
    import shutil

    copy = tmp_path / "cache"
    shutil.copytree(caches["int8"], copy)
    info = lc.LayerCache.open(copy).split_info("train").shards[1]
    before = (copy / info.file).read_bytes()
    with h5py.File(copy / info.file, "r+") as h:
        h["hidden"][5, 0, :] = 0
    result = lc.extract(str(tiny_models["bert"]), "builtin", copy, limit=40, progress=False, storage_dtype="int8",
                        pooling=["mean", "first"], shard_bytes=4_000, batch_size=8, repair=True)
    assert result.repaired == [info.file]
    with h5py.File(copy / info.file) as h, h5py.File(caches["int8"] / info.file) as g:
        np.testing.assert_array_equal(h["hidden"][:], g["hidden"][:])
        np.testing.assert_array_equal(h["scales/hidden"][:], g["scales/hidden"][:])
    assert len(before) > 0


def test_int8_quantises_on_the_values_it_is_given_so_live_rounding_matches_the_cache():
    int8 = codec("int8")
    values = torch.randn(2, 5, 3, 16) * 3  # (B, T, S, D)
    q, s = int8.quantize(values)
    assert torch.equal(int8.round(values), int8.dequantize(q, s))
    # a stored vector read back and quantised again is unchanged (the live path quantises cache values once)
    assert torch.equal(int8.round(int8.round(values)), int8.round(values))
