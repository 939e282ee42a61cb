"""An int8 cache end to end: what extraction writes, what every reader serves, verify, repair and refusals.

int8 stores each token's state as ``round(x / s)`` with ``s = max|x| / 127`` and keeps ``s`` beside it
(``scales/hidden``, ``(N, S, 1)`` float32). The pooled vectors beside them are float16 (caches written before
that kept them int8 with ``scales/pooled/<mode>``, and still read). Every read must apply the scales it read
with the same index, and nothing may serve int8 values unscaled.
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
    """The same 40 built-in examples per split through the tiny BERT, stored as float32, float16 and int8."""
    root = tmp_path_factory.mktemp("int8")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        for dtype in ("float32", "float16", "int8"):
            out[dtype] = lc.extract(str(tiny_models["bert"]), "builtin", root / dtype, limit=40, progress=False,
                                    storage_dtype=dtype, pooling=["mean", "first"], shard_bytes=4_000,
                                    batch_size=8).path
    return out


def test_int8_shards_hold_int8_values_and_one_scale_per_vector(caches):
    """Token states int8 with one scale per token and state; the pooled vectors beside them float16, no scales
    (a mean is read as one vector, and there is one per example: see ``pooled_dtype_for``)."""
    cache = lc.LayerCache.open(caches["int8"])
    assert cache.manifest.storage.dtype == "int8" and cache.manifest.storage.stored_pooled_dtype == "float16"
    S, D = len(cache.layer_names), cache.hidden_size
    info = cache.split_info("train")
    assert len(info.shards) > 1  # rows cross shard boundaries below
    with h5py.File(caches["int8"] / info.shards[0].file) as h:
        t, n = info.shards[0].n_tokens, info.shards[0].n_examples
        assert h["hidden"].dtype == np.int8 and h["hidden"].shape == (t, S, D)
        assert h["scales/hidden"].dtype == np.float32 and h["scales/hidden"].shape == (t, S, 1)
        for mode in ("mean", "first"):
            assert h[f"pooled/{mode}"].dtype == np.float16 and h[f"pooled/{mode}"].shape == (n, S, D)
            assert f"scales/pooled/{mode}" not in h
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
        np.testing.assert_array_equal(y, x.astype(np.float16).astype(np.float32))  # float16 beside int8 tokens
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
    assert pooled.states.dtype == torch.float16 and pooled.scales is None  # pooled vectors beside int8: float16
    np.testing.assert_array_equal(pooled.states_on()[:, 0].float().numpy(), cache.pooled("train", "first", rows=rows))
    # an epoch serves the same values as the single batches
    seen = {int(r): b.states_on()[j] for b in feed.epoch(shuffle=True, seed=3) for j, r in enumerate(b.rows)}
    assert torch.equal(seen[17][:len(cache.tokens("train", [17])[0])], served[2, :len(cache.tokens("train", [17])[0])])


def test_an_int8_cache_is_cut_and_served_as_its_float16_twin(caches):
    """Shards and feed blocks count int8 states as float16: the same shards, and for a seed the same batches, so a
    head trained on either differs only by the rounding."""
    half, int8 = (lc.LayerCache.open(caches[d]) for d in ("float16", "int8"))
    for split in half.splits:
        cut = [(s.first_row, s.n_examples) for s in half.split_info(split).shards]
        assert len(cut) > 1 and cut == [(s.first_row, s.n_examples) for s in int8.split_info(split).shards]
    feeds = [CacheFeed(c, "train", tasks=["topic"], batch_size=4, block_bytes=6_000) for c in (half, int8)]
    assert len(feeds[0]._blocks) > 1
    for a, b in zip(*(f.epoch(shuffle=True, seed=5) for f in feeds)):
        np.testing.assert_array_equal(a.rows, b.rows)


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


def test_a_pooled_dataset_in_another_dtype_than_the_manifest_says_is_refused(caches, tmp_path):
    import shutil

    copy = tmp_path / "cache"
    shutil.copytree(caches["int8"], copy)
    shard = lc.LayerCache.open(copy).split_info("train").shards[0].file
    with h5py.File(copy / shard, "r+") as h:  # the shape is right, the dtype the manifest promises is not
        values = h["pooled/mean"][:]
        del h["pooled/mean"]
        h.create_dataset("pooled/mean", data=values.astype(np.int8)).attrs["dtype"] = "int8"
    with pytest.raises(CacheError, match="stores pooled/mean as int8, the manifest says float16"):
        lc.LayerCache.open(copy).pooled("train", "mean")


def test_an_int8_cache_written_before_float16_pooled_vectors_still_reads(caches, tiny_models, tmp_path, monkeypatch):
    """Its manifest has no ``pooled_dtype``, and its pooled vectors are int8 with scales: served dequantised."""
    from layercache.extraction import configuration

    monkeypatch.setenv("LAYERCACHE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(configuration, "pooled_dtype_for", lambda storage_dtype, store: storage_dtype)
    old = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "old", limit=40, progress=False,
                     storage_dtype="int8", pooling=["mean", "first"], shard_bytes=4_000, batch_size=8).path
    assert "pooled_dtype" not in (old / "manifest.json").read_text()
    cache, exact = lc.LayerCache.open(old), lc.LayerCache.open(caches["float32"])
    assert cache.manifest.storage.stored_pooled_dtype == "int8"
    x, y = exact.pooled("train", "mean"), cache.pooled("train", "mean")  # (n, S, D)
    assert not np.array_equal(x, y)
    assert (np.abs(x - y) <= np.abs(x).max(-1, keepdims=True) / 254 * (1 + 1e-5) + 1e-7).all()
    batch = CacheFeed(cache, "train", source="pooled:mean").batch([0, 39])
    assert batch.states.dtype == torch.int8 and batch.scales is not None
    np.testing.assert_array_equal(batch.states_on()[:, 0].numpy(), y[[0, 39]])
    np.testing.assert_array_equal(cache.tokens("train", [3])[0], lc.LayerCache.open(caches["int8"]).tokens(
        "train", [3])[0])  # token states: the same int8 either way
    assert verify_cache(old, sample=8).passed
    monkeypatch.undo()  # this version again: the same command names why it will not add to that cache
    monkeypatch.setenv("LAYERCACHE_HOME", str(tmp_path / "home"))
    with pytest.raises(CacheError, match="different pooled-vector dtype .*; pass overwrite=True to replace it"):
        lc.extract(str(tiny_models["bert"]), "builtin", old, limit=40, progress=False, storage_dtype="int8",
                   pooling=["mean", "first"], shard_bytes=4_000, batch_size=8)


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
