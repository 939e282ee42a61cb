"""An int4 cache end to end: what extraction writes, what every reader serves, verify, repair, resume and refusals.

int4 stores two 4-bit codes a byte (``hidden`` ``(t, S, D / 2)`` uint8) and one bfloat16 scale per 32 values beside
them (``scales/hidden`` ``(t, S, ceil(D / 32))``, uint16 bit patterns); the pooled vectors beside them are float16.
The model here is 80 wide, so every vector has two full groups and a shorter one. Every read must be exactly the
codec's rounding of what the model computed (the float32 cache of the same run), and nothing may serve the codes
undecoded.
"""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest
import torch
import transformers
from cli_support import assert_refused, invoke
from tiny_models import MAX_POSITIONS, make_tokenizer

import layercache as lc
from layercache.errors import CacheMismatchError, ConfigError
from layercache.live.verify import verify_cache
from layercache.store.cache_feed import CacheFeed
from layercache.store.codecs import codec
from layercache.store.manifest import write_manifest

INT4 = codec("int4")
OPTIONS = dict(limit=40, progress=False, pooling=["mean", "first"], shard_bytes=8_000, batch_size=8)


def bert_of_width(folder, width: int, heads: int = 4):
    """A tiny random BERT ``width`` wide (the shared tiny models are 32 wide: one group of 32)."""
    tok = make_tokenizer(folder)
    config = transformers.BertConfig(vocab_size=len(tok), hidden_size=width, num_hidden_layers=2,
                                     num_attention_heads=heads, intermediate_size=64,
                                     max_position_embeddings=MAX_POSITIONS)
    torch.manual_seed(0)
    transformers.AutoModel.from_config(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    return bert_of_width(tmp_path_factory.mktemp("bert80"), 80)


def _extract(model, out, **options):
    return lc.extract(str(model), "builtin", out, **{**OPTIONS, **options}).path


@pytest.fixture(scope="module")
def caches(wide, tmp_path_factory):
    """The same 40 built-in examples per split through the 80-wide BERT: float32, float16 and int4, and int4 and
    float32 projected to 16 dimensions."""
    root = tmp_path_factory.mktemp("int4")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        out = {dtype: _extract(wide, root / dtype, storage_dtype=dtype) for dtype in ("float32", "float16", "int4")}
        for dtype in ("float32", "int4"):
            out[f"{dtype}+16"] = _extract(wide, root / f"{dtype}+16", storage_dtype=dtype, project=16)
    return out


def test_int4_shards_hold_packed_codes_and_a_bfloat16_scale_per_32_values(caches):
    cache = lc.LayerCache.open(caches["int4"])
    m = cache.manifest
    assert m.storage.dtype == "int4" and m.storage.stored_pooled_dtype == "float16" and cache.hidden_size == 80
    S = len(cache.layer_names)
    info = cache.split_info("train")
    assert len(info.shards) > 1  # rows cross shard boundaries below
    with h5py.File(caches["int4"] / info.shards[0].file) as h:
        t, n = info.shards[0].n_tokens, info.shards[0].n_examples
        assert h["hidden"].dtype == np.uint8 and h["hidden"].shape == (t, S, 40)
        assert h["hidden"].attrs["dtype"] == "int4"
        scales = h["scales/hidden"]
        assert scales.dtype == np.uint16 and scales.shape == (t, S, 3) and scales.attrs["dtype"] == "bfloat16"
        for mode in ("mean", "first"):
            assert h[f"pooled/{mode}"].dtype == np.float16 and h[f"pooled/{mode}"].shape == (n, S, 80)
            assert f"scales/pooled/{mode}" not in h
        assert h["stats/sum"].shape == (S, 80)  # statistics of the model's values, at full width
        stored = h["hidden"].nbytes + scales.nbytes
    with h5py.File(caches["float16"] / info.shards[0].file) as h:
        assert stored / h["hidden"].nbytes == (40 + 2 * 3) / (2 * 80)  # 0.29 of float16's token states at D = 80


def test_every_read_is_the_codecs_rounding_of_the_float32_cache(caches):
    """Tokens, one layer's tokens, the public batches: exactly ``codec('int4').round`` of the same run's float32
    states (the forward is the same; the codec's rounding is the only difference)."""
    exact, int4 = (lc.LayerCache.open(caches[d]) for d in ("float32", "int4"))
    rows = [0, 3, 17, 39, 38]
    for x, y in zip(exact.tokens("train", rows), int4.tokens("train", rows)):  # (t, S, D) each
        assert y.dtype == np.float32
        np.testing.assert_array_equal(y, INT4.round(torch.from_numpy(x)).numpy())
    for mode in ("mean", "first"):
        x, y = exact.pooled("train", mode), int4.pooled("train", mode)  # (n, S, D)
        np.testing.assert_array_equal(y, x.astype(np.float16).astype(np.float32))  # float16 beside int4 tokens
    layer = np.concatenate(list(int4.layer_tokens("train", "layer_2")))  # (t, D)
    every = np.concatenate(int4.tokens("train", range(int4.num_examples("train"))))  # (t, S, D)
    np.testing.assert_array_equal(layer, every[:, int4.layer_names.index("layer_2")])
    batch = int4.batch("train", rows)  # (B, T, S, D) float32
    for i, states in enumerate(int4.tokens("train", rows)):
        np.testing.assert_array_equal(batch.states[i, :len(states)].numpy(), states)


@pytest.mark.parametrize("memory_map", [True, False])
def test_the_feed_serves_int4_decoded_to_float32(caches, memory_map):
    """The feed's gather decodes the codes (mapped or read through h5py): a head sees float32 states, no scales."""
    cache, rows = lc.LayerCache.open(caches["int4"]), [39, 0, 17, 5]  # several shards, any order
    index = [cache.layer_names.index(name) for name in ("layer_2", "embeddings")]
    feed = CacheFeed(cache, "train", tasks=["topic"], layers=index, memory_map=memory_map)
    batch = feed.batch(rows)
    assert batch.states.dtype == torch.float32 and batch.scales is None and batch.states.shape[-1] == 80
    for i, states in enumerate(cache.tokens("train", rows)):
        np.testing.assert_array_equal(batch.states[i, :len(states)].numpy(), states[:, index])
    seen = {int(r): b.states[j] for b in feed.epoch(shuffle=True, seed=3) for j, r in enumerate(b.rows)}
    n = len(cache.tokens("train", [17])[0])
    assert torch.equal(seen[17][:n], batch.states[2, :n])
    pooled = CacheFeed(cache, "train", source="pooled:first", memory_map=memory_map).batch(rows)
    assert pooled.states.dtype == torch.float16 and pooled.scales is None


def test_an_int4_cache_is_cut_and_served_as_its_float16_twin(caches):
    half, int4 = (lc.LayerCache.open(caches[d]) for d in ("float16", "int4"))
    for split in half.splits:
        cut = [(s.first_row, s.n_examples) for s in half.split_info(split).shards]
        assert cut == [(s.first_row, s.n_examples) for s in int4.split_info(split).shards]
    feeds = [CacheFeed(c, "train", tasks=["topic"], batch_size=4, block_bytes=6_000) for c in (half, int4)]
    assert len(feeds[0]._blocks) > 1
    for a, b in zip(*(f.epoch(shuffle=True, seed=5) for f in feeds)):
        np.testing.assert_array_equal(a.rows, b.rows)


def test_a_head_trains_on_int4_as_on_float32(caches, one_torch_thread):
    def accuracy(dtype: str) -> float:
        cache = lc.LayerCache.open(caches[dtype])
        head = lc.LayerHead(mixer="scalar", epochs=3, seed=0, tasks=["negation_scope"], progress=False).fit(cache)
        return head.evaluate(cache, "validation")[0]["negation_scope"]["accuracy"]

    exact, int4 = accuracy("float32"), accuracy("int4")
    assert abs(int4 - exact) < 0.05, (exact, int4)


def test_verify_holds_an_int4_cache_to_its_groups_steps(caches):
    result = verify_cache(caches["int4"], sample=8)
    assert result.passed, result.failure
    worst = max(r.worst for r in result.rows if r.what == "tokens")
    assert 0.3 < worst <= 0.55  # half a step of rounding, measured in full steps of each group: about 0.5, never 1
    assert result.clamping() is None  # nothing to clamp: no range


def test_changed_codes_fail_verify_and_the_checksum(caches, tmp_path):
    copy = tmp_path / "cache"
    shutil.copytree(caches["int4"], copy)
    shard = lc.LayerCache.open(copy).split_info("validation").shards[0].file
    with h5py.File(copy / shard, "r+") as h:
        h["hidden"][0:40, 2, :] ^= np.uint8(0x44)  # every code of 40 tokens of one state moved by +-4 steps
    result = verify_cache(copy, sample=40, split="validation")
    assert not result.passed and "'validation'" in result.failure and "int4 tolerance" in result.failure
    assert lc.LayerCache.open(copy).damaged_shards() == [shard]


def test_repair_re_extracts_a_damaged_int4_shard_to_the_same_bytes(caches, wide, tmp_path):
    copy = tmp_path / "cache"
    shutil.copytree(caches["int4"], copy)
    info = lc.LayerCache.open(copy).split_info("train").shards[1]
    with h5py.File(copy / info.file, "r+") as h:
        h["scales/hidden"][5, 0, :] = 0
    result = lc.extract(str(wide), "builtin", copy, storage_dtype="int4", repair=True, **OPTIONS)
    assert result.repaired == [info.file]
    with h5py.File(copy / info.file) as h, h5py.File(caches["int4"] / info.file) as g:
        for name in ("hidden", "scales/hidden", "pooled/mean"):
            np.testing.assert_array_equal(h[name][:], g[name][:])


def test_an_int8_cache_is_not_resumed_as_int4(wide, tmp_path, monkeypatch):
    """A cache holds one storage dtype: adding int4 shards to an int8 cache is refused in one sentence."""
    monkeypatch.setenv("LAYERCACHE_HOME", str(tmp_path / "home"))
    out = _extract(wide, tmp_path / "cache", storage_dtype="int8", limit=16)
    manifest = lc.read_manifest(out)
    manifest.complete = manifest.splits["validation"].complete = False  # as if stopped: a resume would add shards
    write_manifest(out, manifest)
    with pytest.raises(CacheMismatchError, match=r"already holds a cache made with a different storage \(layers, "
                                                 r"dtype.*; pass overwrite=True to replace it"):
        _extract(wide, out, storage_dtype="int4", limit=16)
    assert lc.read_manifest(out).storage.dtype == "int8"
    assert_refused(invoke("extract", wide, "builtin", "--out", out, "--limit", "16", "--storage-dtype", "int4",
                          "--pooling", "mean", "--pooling", "first", "--shard-size", "8000", "--batch-size", "8"),
                   "already holds a cache made with a different storage")


def test_int4_with_a_projection_is_the_projected_states_rounded(caches):
    """``--project 16`` then int4: 16 coordinates a vector, one group of 16 (a shorter group), within half a step
    of the float32 projected cache (whose basis is fitted alike, to float rounding)."""
    projected, int4 = lc.LayerCache.open(caches["float32+16"]), lc.LayerCache.open(caches["int4+16"])
    assert int4.hidden_size == 16 and int4.manifest.storage.dtype == "int4"
    for z, q in zip(projected.tokens("test", range(10)), int4.tokens("test", range(10))):
        bound = INT4.error_bound(torch.from_numpy(z)).numpy()  # (t, S, 16) half a step of each value's group
        assert (np.abs(q - z) <= bound * (1 + 1e-3) + 1e-4).all()
    with h5py.File(caches["int4+16"] / int4.split_info("test").shards[0].file) as h:
        assert h["hidden"].shape[2] == 8 and h["scales/hidden"].shape[2] == 1
    assert verify_cache(caches["int4+16"], sample=8).passed


def test_an_odd_width_is_refused_in_one_sentence(wide, tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERCACHE_HOME", str(tmp_path / "home"))
    said = (r"^storage_dtype='int4' cannot store states 15 wide \(it packs two values into each byte, so the width "
            r"must be even\); choose another project=\.\.\.\.$")
    with pytest.raises(ConfigError, match=said):
        _extract(wide, tmp_path / "odd", storage_dtype="int4", project=15)
    assert not (tmp_path / "odd" / "manifest.json").exists()
    assert_refused(invoke("extract", wide, "builtin", "--out", tmp_path / "odd", "--limit", "8",
                          "--storage-dtype", "int4", "--project", "15"),
                   "--storage-dtype int4 cannot store states 15 wide")
    odd = bert_of_width(tmp_path / "bert33", 33, heads=3)
    with pytest.raises(ConfigError, match="cannot store states 33 wide .*; choose another storage_dtype=..., or a "
                                          "project=... it can store"):
        _extract(odd, tmp_path / "odd33", storage_dtype="int4")
    assert _extract(odd, tmp_path / "odd33-int8", storage_dtype="int8", limit=8)  # any width for the others


def test_a_pooled_only_int4_cache_stores_its_vectors_int4(wide, caches, tmp_path, monkeypatch):
    """With pooled vectors only, the vectors are all the cache holds: stored as asked, with their group scales."""
    monkeypatch.setenv("LAYERCACHE_HOME", str(tmp_path / "home"))
    out = _extract(wide, tmp_path / "pooled", storage_dtype="int4", store="pooled")
    cache, exact = lc.LayerCache.open(out), lc.LayerCache.open(caches["float32"])
    assert cache.manifest.storage.stored_pooled_dtype == "int4"
    with h5py.File(out / cache.split_info("train").shards[0].file) as h:
        assert h["pooled/mean"].dtype == np.uint8 and h["scales/pooled/mean"].shape[2] == 3
    x = exact.pooled("train", "mean")
    np.testing.assert_array_equal(cache.pooled("train", "mean"), INT4.round(torch.from_numpy(x)).numpy())
    batch = CacheFeed(cache, "train", source="pooled:mean").batch([0, 39])
    assert batch.states.dtype == torch.float32 and batch.scales is None
    np.testing.assert_array_equal(batch.states[:, 0].numpy(), cache.pooled("train", "mean", rows=[0, 39]))
    assert verify_cache(out, sample=8).passed


def test_a_float16_cache_whose_manifest_says_int4_is_refused_not_decoded(caches, tmp_path):
    """The layout check asks the codec for the widths it implies: float16 values are never read as int4 codes."""
    import json

    copy = tmp_path / "cache"
    shutil.copytree(caches["float16"], copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["storage"]["dtype"] = "int4"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(lc.CacheError, match=r"has hidden of shape \(\d+, 3, 80\), the manifest implies \(\d+, 3, 40\)"):
        lc.LayerCache.open(copy).tokens("train", [0])
