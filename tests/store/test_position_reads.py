"""``LayerCache.gather_positions``: the states at split-wide token positions, as ``layer_tokens`` decodes them.

Position ``p`` is the split's ``p``-th stored token in cache order. Whatever the storage (every codec, a projected
cache, a compressed one read through HDF5) the read must give, bit for bit, what streaming the split with
``layer_tokens`` and picking the positions gives; uncompressed it reads only those rows from the memory maps.
"""

from __future__ import annotations

import numpy as np
import pytest

import layercache as lc
from layercache.errors import CacheError
from layercache.store import position_reads
from layercache.store.mapped import MappedStates

OPTIONS = dict(limit=40, progress=False, pooling=["mean"], shard_bytes=3_000, batch_size=8, quality_examples=0)
STORAGE = {"float16": {"storage_dtype": "float16"}, "bfloat16": {"storage_dtype": "bfloat16"},
           "float32": {"storage_dtype": "float32"}, "int8": {"storage_dtype": "int8"},
           "int4": {"storage_dtype": "int4"}, "projected": {"storage_dtype": "int8", "project": 8},
           "compressed": {"storage_dtype": "float16", "compression": "zstd"}}
LAYERS = [2, 0]


@pytest.fixture(scope="module")
def caches(tiny_models, tmp_path_factory):
    """The same 40 built-in examples per split through the tiny BERT, in 5 shards a split, stored each way."""
    root = tmp_path_factory.mktemp("positions")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        return {name: lc.extract(str(tiny_models["bert"]), "builtin", root / name, **OPTIONS, **storage).path
                for name, storage in STORAGE.items()}


def streamed(cache: lc.LayerCache, split: str = "train") -> dict[int, np.ndarray]:
    """Each of :data:`LAYERS` over every token of ``split``, (t, D) float32, as ``layer_tokens`` streams it."""
    return {layer: np.concatenate(list(cache.layer_tokens(split, layer))) for layer in LAYERS}


def assert_bits_equal(got: np.ndarray, want: np.ndarray) -> None:
    """The same float32 values to the bit (a NaN's payload and the sign of a zero included)."""
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def some_positions(cache: lc.LayerCache, seed: int = 0) -> list[np.ndarray]:
    """Three parts: sorted positions across the split, the same shuffled with repeats, and none at all."""
    total = int(cache.lengths("train").sum())
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(total, size=total // 3, replace=False))
    return [chosen, rng.permutation(np.concatenate([chosen[::4], chosen[:7]])), np.empty(0, np.int64)]


def shard_bounds(cache: lc.LayerCache) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([s.n_tokens for s in cache.split_info("train").shards])])


@pytest.mark.parametrize("storage", list(STORAGE))
def test_positions_read_what_layer_tokens_decodes(caches, storage):
    cache = lc.LayerCache.open(caches[storage])
    mappable = storage != "compressed"
    shards = len(cache.split_info("train").shards)
    assert shards > 2 and all((cache.mapped_states("train", s) is not None) == mappable for s in range(shards))
    whole = streamed(cache)
    parts = some_positions(cache)
    bounds = shard_bounds(cache)
    assert len(np.unique(np.searchsorted(bounds, parts[0], side="right"))) == shards  # every shard has positions
    got = cache.gather_positions("train", parts, layers=[f"layer_{LAYERS[0]}", LAYERS[1]])
    assert len(got) == len(parts)
    for positions, X in zip(parts, got):  # (L, n, D) each
        assert X.shape == (len(LAYERS), len(positions), cache.hidden_size)
        for li, layer in enumerate(LAYERS):
            assert_bits_equal(X[li], whole[layer][positions])


def test_positions_on_either_side_of_every_shard_boundary(caches):
    cache = lc.LayerCache.open(caches["int4"])
    whole = streamed(cache)
    bounds = shard_bounds(cache)
    edges = np.concatenate([bounds[1:-1] - 1, bounds[1:-1], [0, bounds[-1] - 1]])  # last and first of each shard
    for positions in (np.sort(edges), edges[::-1]):
        (X,) = cache.gather_positions("train", [positions], layers=LAYERS)
        for li, layer in enumerate(LAYERS):
            assert_bits_equal(X[li], whole[layer][positions])


@pytest.mark.parametrize("storage", ["int8", "bfloat16"])
def test_a_few_positions_at_a_time_read_the_same(caches, storage, monkeypatch):
    cache = lc.LayerCache.open(caches[storage])
    parts = some_positions(cache, seed=1)
    whole = cache.gather_positions("train", parts, layers=LAYERS)
    monkeypatch.setattr(position_reads, "GATHER_POSITIONS", 5)
    for a, b in zip(whole, cache.gather_positions("train", parts, layers=LAYERS)):
        assert_bits_equal(b, a)


def test_the_pages_read_are_dropped_after_each_shard_and_state(caches, monkeypatch):
    cache = lc.LayerCache.open(caches["int8"])
    dropped = []
    monkeypatch.setattr(MappedStates, "dont_need", lambda self, lo, hi, states: dropped.append((self, lo, hi, states)))
    cache.gather_positions("train", some_positions(cache), layers=LAYERS)
    shards = cache.split_info("train").shards
    assert len(dropped) == 2 * len(LAYERS) * len(shards)  # the values and their scales, each shard and state
    assert {(lo, hi) for _, lo, hi, _ in dropped} == {(0, s.n_tokens) for s in shards}
    assert [states for _, _, _, states in dropped[::2 * len(shards)]] == [[layer] for layer in LAYERS]


@pytest.mark.parametrize("storage", ["int8", "float16"])
def test_a_shard_that_cannot_be_mapped_reads_the_split_through_hdf5(caches, storage, monkeypatch):
    cache = lc.LayerCache.open(caches[storage])
    parts = some_positions(cache)
    mapped = cache.gather_positions("train", parts, layers=LAYERS)
    original, streams = cache.mapped_states, []
    monkeypatch.setattr(cache, "mapped_states", lambda split, shard, name="hidden":
                        None if shard == 3 and name.endswith("hidden") else original(split, shard, name))
    stream = cache.layer_tokens
    monkeypatch.setattr(cache, "layer_tokens", lambda split, layer: streams.append(layer) or stream(split, layer))
    for a, b in zip(mapped, cache.gather_positions("train", parts, layers=LAYERS)):
        assert_bits_equal(b, a)
    assert streams == LAYERS  # every state streamed once, none gathered from the maps


def test_scales_that_cannot_be_mapped_read_the_split_through_hdf5(caches, monkeypatch):
    cache = lc.LayerCache.open(caches["int4"])
    parts = some_positions(cache)
    mapped = cache.gather_positions("train", parts, layers=LAYERS)
    original = cache.mapped_states
    monkeypatch.setattr(cache, "mapped_states", lambda split, shard, name="hidden":
                        None if name.startswith("scales/") else original(split, shard, name))
    monkeypatch.setattr(MappedStates, "gather", lambda *args: pytest.fail("gathered from a map"))
    for a, b in zip(mapped, cache.gather_positions("train", parts, layers=LAYERS)):
        assert_bits_equal(b, a)


def test_a_compressed_cache_reads_the_uncompressed_ones_values(caches):
    plain, packed = (lc.LayerCache.open(caches[name]) for name in ("float16", "compressed"))
    parts = some_positions(plain, seed=2)
    for a, b in zip(plain.gather_positions("train", parts), packed.gather_positions("train", parts)):
        assert_bits_equal(b, a)


def test_the_streamed_read_stops_after_the_last_shard_asked_for(caches, monkeypatch):
    cache = lc.LayerCache.open(caches["compressed"])
    first = cache.split_info("train").shards[0].n_tokens
    original, seen = cache.layer_tokens, []

    def counted(split, layer):
        for block in original(split, layer):
            seen.append(layer)
            yield block

    monkeypatch.setattr(cache, "layer_tokens", counted)
    (X,) = cache.gather_positions("train", [np.arange(first - 3, first)], layers=LAYERS)
    assert seen == [LAYERS[0]] * 2 + [LAYERS[1]] * 2  # its shard, and the next one that shows it is past the last
    assert X.shape == (2, 3, cache.hidden_size)


def test_positions_outside_the_split_and_a_cache_without_token_states_are_refused(caches, tiny_models, tmp_path):
    cache = lc.LayerCache.open(caches["float16"])
    total = int(cache.lengths("train").sum())
    for wrong in ([0, total], [-1, 3]):
        with pytest.raises(IndexError, match=rf"token positions must lie in \[0, {total}\) for split 'train'"):
            cache.gather_positions("train", [np.arange(3), np.array(wrong)])
    pooled = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "pooled", store="pooled",
                        **{**OPTIONS, "limit": 8}).path
    with pytest.raises(CacheError, match="holds pooled vectors only"):
        lc.LayerCache.open(pooled).gather_positions("train", [np.arange(3)])
