"""Extraction end to end on tiny random backbones: states, pooling, windows, storage options."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import layercache as lc
from layercache.backbone.loader import load_backbone
from layercache.extraction.forward import pool
from layercache.sources.builtin import load_builtin

SIZES = {"train": 24, "validation": 8}


def fresh_states(model_dir, words: list[str], **load) -> np.ndarray:
    """All states of one example run alone (no padding): (T, L+1, D)."""
    backbone = load_backbone(str(model_dir), device="cpu", words_input=True, **load)
    enc = backbone.tokenizer(words, is_split_into_words=True, truncation=True, max_length=backbone.max_length,
                             return_tensors="pt")
    states = backbone.hidden_states(enc["input_ids"], enc["attention_mask"])
    return torch.stack(states, dim=2)[0].float().numpy()


def builtin_words(split: str, index: int) -> list[str]:
    return load_builtin(sizes={"train": SIZES["train"], "validation": SIZES["validation"]}).splits[split].words[index]


KIND_OF = {"bert": "encoder", "roberta": "encoder", "deberta": "encoder", "mpnet": "encoder", "gpt2": "decoder",
           "llama": "decoder", "t5": "encoder-decoder", "bart": "encoder-decoder"}


@pytest.mark.parametrize("kind", list(KIND_OF))
def test_cached_states_equal_a_fresh_forward(tiny_models, tmp_path, small_builtin, kind):
    result = lc.extract(str(tiny_models[kind]), "builtin", tmp_path / "cache", progress=False,
                        pooling=["mean", "first", "last"])
    cache = lc.LayerCache.open(result.path)
    n_layers = result.manifest.model.n_layers
    assert cache.layer_names == ["embeddings"] + [f"layer_{i}" for i in range(1, n_layers + 1)]
    assert result.manifest.model.kind == KIND_OF[kind]
    rng = np.random.default_rng(0)
    for split in ("train", "validation"):
        rows = rng.choice(cache.num_examples(split), size=4, replace=False)
        source_rows = cache.example_index(split)[rows]
        for row, states in zip(source_rows, cache.tokens(split, rows)):
            expected = fresh_states(tiny_models[kind], builtin_words(split, int(row)))
            assert states.shape == expected.shape
            scale = np.abs(expected).max()
            np.testing.assert_allclose(states, expected, atol=2e-3 * scale, rtol=2e-3)  # fp16 rounding


def test_final_norm_is_recorded(tiny_models, tmp_path, small_builtin):
    bert = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "b", progress=False, limit=4)
    llama = lc.extract(str(tiny_models["llama"]), "builtin", tmp_path / "l", progress=False, limit=4)
    t5 = lc.extract(str(tiny_models["t5"]), "builtin", tmp_path / "t", progress=False, limit=4)
    bart = lc.extract(str(tiny_models["bart"]), "builtin", tmp_path / "a", progress=False, limit=4)
    assert bert.manifest.storage.final_norm == "none"  # post-LN encoder: no separate final norm
    assert bart.manifest.storage.final_norm == "none"  # BART's encoder layers are post-LN too
    assert llama.manifest.storage.final_norm == "applied"  # HF returns layer_L after model.norm
    assert t5.manifest.storage.final_norm == "applied"  # ... and after the T5 encoder's final_layer_norm


def test_pooled_vectors_equal_pooling_of_stored_tokens(tiny_models, tmp_path, small_builtin):
    result = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "cache", progress=False,
                        pooling=["mean", "first", "last"])
    cache = lc.LayerCache.open(result.path)
    rows = np.arange(cache.num_examples("train"))
    tokens = cache.tokens("train", rows)
    flat = torch.from_numpy(np.concatenate(tokens))
    lengths = torch.tensor([len(t) for t in tokens])
    expected = pool(flat, lengths, ["mean", "first", "last"])
    for mode in ("mean", "first", "last"):
        got = cache.pooled("train", mode)
        np.testing.assert_allclose(got, expected[mode].numpy(), atol=2e-3, rtol=2e-3)
    assert cache.pooled("train", "mean", layers=[-1], rows=[3, 1]).shape == (2, 1, 32)
    np.testing.assert_array_equal(cache.pooled("train", "first", layers=["layer_1"], rows=[3, 1])[:, 0],
                                  cache.pooled("train", "first")[[3, 1], 1])


def test_labels_follow_their_examples(tiny_models, tmp_path, small_builtin):
    result = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "cache", progress=False)
    cache = lc.LayerCache.open(result.path)
    source = load_builtin(sizes=SIZES).splits["train"]
    index = cache.example_index("train")
    assert sorted(index) == list(range(SIZES["train"]))  # every example once, in cache (length) order
    np.testing.assert_array_equal(cache.labels("train", "topic"), np.array(source.labels["topic"])[index])
    np.testing.assert_allclose(cache.labels("train", "intensity"), np.array(source.labels["intensity"])[index])
    scope = cache.labels("train", "negation_scope")
    for row, src in enumerate(index):
        np.testing.assert_array_equal(scope[row], source.labels["negation_scope"][src])
    # Token labels sit on the first sub-token of each word, -100 elsewhere.
    batch = cache.batch("train", [0, 1, 2], tasks=["negation_scope"])
    for i, row in enumerate([0, 1, 2]):
        word_ids = batch.word_ids[i]
        labels = batch.labels["negation_scope"][i]
        first = [t for t in range(len(word_ids)) if word_ids[t] >= 0 and (t == 0 or word_ids[t - 1] != word_ids[t])]
        assert labels[first].tolist() == list(source.labels["negation_scope"][index[row]])
        assert (labels[[t for t in range(len(word_ids)) if t not in first]] == -100).all()


def test_truncation_is_counted(tiny_models, tmp_path, small_builtin):
    result = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "cache", progress=False, max_length=12)
    source = load_builtin(sizes=SIZES).splits["train"]
    tok = load_backbone(str(tiny_models["bert"]), device="cpu").tokenizer
    longer = sum(len(tok(w, is_split_into_words=True)["input_ids"]) > 12 for w in source.words)
    assert longer > 0
    assert result.manifest.splits["train"].n_truncated == longer
    assert lc.LayerCache.open(result.path).lengths("train").max() == 12


@pytest.mark.parametrize("kind", ["bert", "llama"])
def test_stride_windows_keep_every_token(tiny_models, tmp_path, small_builtin, kind):
    result = lc.extract(str(tiny_models[kind]), "builtin", tmp_path / "cache", progress=False,
                        max_length=12, stride=4, pooling=["mean", "first", "last"])
    info = result.manifest.splits["train"]
    assert info.n_windowed > 0 and info.n_truncated == 0
    cache = lc.LayerCache.open(result.path)
    tok = load_backbone(str(tiny_models[kind]), device="cpu").tokenizer
    source = load_builtin(sizes=SIZES).splits["train"]
    index = cache.example_index("train")
    ids = cache.token_arrays("train", "input_ids", range(len(index)))
    words = cache.token_arrays("train", "word_ids", range(len(index)))
    for row, src in enumerate(index):
        full = tok(source.words[src], is_split_into_words=True)
        assert ids[row].tolist() == full["input_ids"]  # the stitched sequence is the whole text
        assert words[row].tolist() == [-1 if w is None else w for w in full.word_ids()]
    # A stitched token taken from the first window equals a forward pass of that window alone.
    long_row = int(np.argmax(cache.lengths("train")))
    words_of = source.words[index[long_row]]
    backbone = load_backbone(str(tiny_models[kind]), device="cpu", max_length=12, words_input=True)
    enc = backbone.tokenizer(words_of, is_split_into_words=True, truncation=True, max_length=12, return_tensors="pt")
    window0 = torch.stack(backbone.hidden_states(enc["input_ids"], enc["attention_mask"]), 2)[0].numpy()
    stored = cache.tokens("train", [long_row])[0]
    np.testing.assert_allclose(stored[:6], window0[:6], atol=2e-3 * np.abs(window0).max())


@pytest.mark.parametrize("storage_dtype", ["bfloat16", "float32", "int8"])
def test_other_storage_dtypes_round_trip(tiny_models, tmp_path, small_builtin, storage_dtype):
    half = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "f16", progress=False)
    other = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / storage_dtype, progress=False,
                       storage_dtype=storage_dtype)
    a = lc.LayerCache.open(half.path).tokens("train", [0, 5])
    b = lc.LayerCache.open(other.path).tokens("train", [0, 5])
    tol = {"bfloat16": 1e-2, "float32": 2e-3, "int8": 1 / 127}[storage_dtype]
    for x, y in zip(a, b):
        assert y.dtype == np.float32
        np.testing.assert_allclose(x, y, atol=tol * np.abs(y).max())
    import h5py

    with h5py.File(other.path / other.manifest.splits["train"].shards[0].file) as h:
        on_disk = {"bfloat16": np.uint16, "float32": np.float32, "int8": np.int8}[storage_dtype]  # bf16: raw bits
        assert h["hidden"].dtype == on_disk and h["hidden"].attrs["dtype"] == storage_dtype
        assert ("scales" in h) == (storage_dtype == "int8")


def test_layer_subset_and_pooled_only(tiny_models, tmp_path, small_builtin):
    result = lc.extract(str(tiny_models["roberta"]), "builtin", tmp_path / "cache", progress=False,
                        layers=["0", "layer_2", "-1"], store="pooled", pooling=["mean", "last"])
    cache = lc.LayerCache.open(result.path)
    assert cache.layer_names == ["embeddings", "layer_2", "layer_3"]
    assert cache.pooled("train", "last").shape == (SIZES["train"], 3, 32)
    full = lc.LayerCache.open(lc.extract(str(tiny_models["roberta"]), "builtin", tmp_path / "all",
                                         progress=False, pooling=["last"]).path)
    np.testing.assert_array_equal(cache.pooled("train", "last", layers="layer_2"),
                                  full.pooled("train", "last", layers="layer_2"))
    with pytest.raises(lc.CacheError, match="pooled vectors only"):
        cache.tokens("train", [0])
    with pytest.raises(lc.ConfigError, match="not in this cache"):
        cache.layer_index("layer_1")
    with pytest.raises(lc.ConfigError, match="does not exist"):
        lc.extract(str(tiny_models["roberta"]), "builtin", tmp_path / "bad", progress=False, layers=["layer_9"])



def test_one_layer_resolver_sorts_for_the_extractor_and_keeps_order_for_readers():
    from layercache.core.layers import DOES_NOT_EXIST, parse_layer_spec, resolve_layers

    names = ["embeddings", "layer_1", "layer_2", "layer_3"]
    assert resolve_layers(None, names) == [0, 1, 2, 3]
    assert resolve_layers(["layer_3", "0", -1, np.int64(1)], names, sort=True) == [0, 1, 3]
    assert resolve_layers(["layer_3", "0", -1, "layer_3"], names) == [3, 0, 3, 3]
    assert resolve_layers("layer_2", names) == [2] and resolve_layers(-4, names) == [0]
    assert [parse_layer_spec(v) for v in ["-1", "3", "layer_2", "+1"]] == [-1, 3, "layer_2", "+1"]
    with pytest.raises(lc.ConfigError, match=r"Layer 'layer_9' is not in this cache, which has embeddings, layer_1, "
                                             r"layer_2, layer_3 \(or give an index from -4 to 3\)\.$"):
        resolve_layers(["layer_9"], names, "this cache")
    with pytest.raises(lc.ConfigError, match=r"^Layer 4 does not exist; the model has embeddings, layer_1, layer_2, "
                                             r"layer_3 \(or indices -4 to 3\)\.$"):
        resolve_layers([4], names, sort=True, refusal=DOES_NOT_EXIST)
    with pytest.raises(lc.ConfigError, match="layers is empty"):
        resolve_layers([], names)
    with pytest.raises(lc.ConfigError, match="not in the states"):
        resolve_layers([True], names)


def test_grouped_specs_make_the_same_cache_as_flat_keywords(tiny_models, tmp_path, small_builtin):
    from layercache.extraction.specs import BatchSpec, DataSpec, StorageSpec

    flat = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "flat", progress=False, limit=10,
                      layers=["0", "layer_2"], store="pooled", pooling=["mean", "last"], batch_size=4)
    grouped = lc.extract(str(tiny_models["bert"]), out=tmp_path / "grouped", progress=False,
                         data=DataSpec("builtin", limit=10),
                         storage=StorageSpec(layers=[0, "layer_2"], store="pooled", pooling=("mean", "last")),
                         batching=BatchSpec(batch_size=4))
    assert grouped.manifest.config_hash == flat.manifest.config_hash
    assert grouped.manifest.storage.layers == [0, 2]
    with pytest.raises(lc.ConfigError, match=r"Pass limit inside data=DataSpec\(...\), not beside it"):
        lc.extract(str(tiny_models["bert"]), out=tmp_path / "both", data=DataSpec("builtin"), limit=3)
    with pytest.raises(lc.ConfigError, match="storage= takes a StorageSpec"):
        lc.extract(str(tiny_models["bert"]), out=tmp_path / "wrong", storage=BatchSpec())
    assert not (tmp_path / "both").exists() and not (tmp_path / "wrong").exists()

def test_stats_match_the_stored_tokens(tiny_models, tmp_path, small_builtin):
    result = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "cache", progress=False,
                        storage_dtype="float32")
    cache = lc.LayerCache.open(result.path)
    flat = np.concatenate(cache.tokens("train", range(cache.num_examples("train"))))  # (t, S, D)
    stats = cache.layer_stats("train")
    np.testing.assert_allclose(stats["mean"], flat.mean(0), atol=1e-5)
    np.testing.assert_allclose(stats["std"], flat.std(0), atol=1e-4)
    summary = result.manifest.splits["train"].stats["layer_1"]
    assert summary["mean"] == pytest.approx(float(flat[:, 1].mean()), abs=1e-5)
    assert summary["std"] == pytest.approx(float(flat[:, 1].std()), abs=1e-4)


def test_sentence_pairs_from_a_local_file(tiny_models, tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text("premise,hypothesis,label\n" + "\n".join(
        f"the keys are good {i},the lamp is bad,{'yes' if i % 2 else 'no'}" for i in range(10)) + "\n")
    result = lc.extract(str(tiny_models["bert"]), str(path), tmp_path / "cache", progress=False)
    cache = lc.LayerCache.open(result.path)
    assert cache.tasks[0].label_names == ("no", "yes")
    ids = cache.token_arrays("train", "input_ids", [0])[0]
    assert (ids == 3).sum() == 2  # [CLS] a [SEP] b [SEP]


def test_shards_split_and_rows_run_on(tiny_models, tmp_path, small_builtin):
    result = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "cache", progress=False,
                        shard_bytes=20_000, batch_tokens=64)
    shards = result.manifest.splits["train"].shards
    assert len(shards) > 2
    assert [s.first_row for s in shards] == list(np.cumsum([0] + [s.n_examples for s in shards[:-1]]))
    cache = lc.LayerCache.open(result.path)
    one = lc.LayerCache.open(lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "one",
                                        progress=False, batch_tokens=64).path)
    rows = np.arange(cache.num_examples("train"))
    for a, b in zip(cache.tokens("train", rows), one.tokens("train", rows)):
        np.testing.assert_array_equal(a, b)
    seen = np.concatenate([b.rows for b in cache.iter_batches("train", 5, shuffle=True, seed=1, block_size=7)])
    assert sorted(seen) == list(rows)
    assert list(seen) != list(rows)


def test_torch_dataset_with_worker_processes(tiny_models, tmp_path, small_builtin):
    result = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "cache", progress=False)
    cache = lc.LayerCache.open(result.path)
    cache.tokens("train", [0])  # open handles in the parent: workers must reopen their own
    dataset = cache.torch_dataset("train", layers=[-1], tasks=["topic", "negation_scope"])
    loader = torch.utils.data.DataLoader(dataset, batch_size=5, collate_fn=dataset.collate, num_workers=2)
    batches = list(loader)
    assert sum(len(b.rows) for b in batches) == len(dataset) == SIZES["train"]
    first = batches[0]
    assert first.states.shape[2:] == (1, 32) and first.labels["negation_scope"].shape == first.mask.shape
    np.testing.assert_array_equal(first.states[0, : first.mask[0].sum(), 0].numpy(),
                                  cache.tokens("train", [0], layers=[-1])[0][:, 0])


def test_bfloat16_bits_round_trip_exactly():
    from layercache.store.codecs import codec

    values = torch.randn(100) * 1e4
    stored, _ = codec("bfloat16").encode(values)
    assert stored.dtype == np.uint16
    np.testing.assert_array_equal(codec("bfloat16").decode(stored), values.to(torch.bfloat16).float().numpy())


# --- the chunked packing of a batch's states ----------------------------------------------------
def _reference_pack(hidden, keep, index, lengths, modes, storage_dtype):
    """The whole-batch computation the packer must reproduce: gather, pool, sums, overflow, cast."""
    from layercache.store.codecs import codec
    from layercache.store.codecs.float16 import FP16_MAX

    encode = codec(storage_dtype).encode  # -> (values, scales or None)
    flat = torch.stack([hidden[i].reshape(-1, hidden[i].shape[-1])[index] for i in keep], dim=1)  # (t, S, D)
    pooled = {m: encode(v) for m, v in pool(flat, lengths, modes).items()}
    overflow = int((flat.abs() > FP16_MAX).sum()) if storage_dtype == "float16" else 0
    return (encode(flat), pooled, flat.double().sum(0).numpy(),
            (flat.double() ** 2).sum(0).numpy(), overflow)


@pytest.mark.parametrize("storage_dtype", ["float16", "bfloat16", "float32", "int8"])
@pytest.mark.parametrize("block_tokens", [1, 7, None])
def test_packer_matches_the_whole_batch_computation(storage_dtype, block_tokens):
    from layercache.extraction.forward import token_index
    from layercache.extraction.packing import StatePacker, storage_array, storage_buffer
    from layercache.extraction.tokenize import EncodedExample

    gen = torch.Generator().manual_seed(0)
    windows = [[5, 3], [4], [6]]  # window lengths of three examples; the first is windowed
    take = np.array([(0, 0), (0, 1), (0, 2), (0, 3), (1, 2)], np.int32)  # 4 tokens of window 0, 1 of window 1
    examples = [EncodedExample(row=i, windows=[np.arange(n, dtype=np.int32) for n in lens],
                               take=take if i == 0 else None, word_ids=None) for i, lens in enumerate(windows)]
    R, W, D, keep = 4, 6, 8, [0, 2, 3]
    hidden = [torch.randn((R, W, D), generator=gen) * 4 for _ in range(4)]  # (R, W, D) each
    hidden[2][0, 1, 3] = 7e4  # beyond the float16 range
    hidden[3][1, 2, 0] = -1e5  # the token taken from window 1
    hidden[3][2, 5, 5] = 1e6  # in padding: never stored, never counted
    hidden[0][1, 0, 0] = 1e6  # in a window overlap that is taken from the other window
    mask = torch.zeros((R, W), dtype=torch.long)
    for r, n in enumerate(n for lens in windows for n in lens):
        mask[r, :n] = 1
    index = token_index(examples, mask)
    lengths = torch.tensor([ex.n_tokens for ex in examples])
    assert index.tolist() == [0, 1, 2, 3, 6 + 2, 12, 13, 14, 15, 18, 19, 20, 21, 22, 23]

    modes = ["mean", "first", "last"]
    packer = StatePacker(len(keep), D, storage_dtype=storage_dtype, pooling=modes, device=torch.device("cpu"))
    packer.block_tokens = block_tokens or packer.block_tokens
    t = int(lengths.sum())
    buffer = storage_buffer(t + 3, len(keep), D, storage_dtype).head(t)
    packed = packer.pack(hidden, keep, index, lengths, buffer.values, buffer.scales)
    (tokens, token_scales), pooled, stat_sum, stat_sumsq, overflow = _reference_pack(hidden, keep, index, lengths,
                                                                                      modes, storage_dtype)
    np.testing.assert_array_equal(storage_array(buffer.values, storage_dtype), tokens.transpose(1, 0, 2))  # bit for bit
    if token_scales is None:
        assert buffer.scales is None and packed.pooled_scales == {}
    else:  # int8: the scales too, (S, t, 1)
        np.testing.assert_array_equal(buffer.scales.numpy(), token_scales.transpose(1, 0, 2))
    for mode in modes:
        np.testing.assert_array_equal(packed.pooled[mode], pooled[mode][0])
        if token_scales is not None:
            np.testing.assert_array_equal(packed.pooled_scales[mode], pooled[mode][1])
    np.testing.assert_allclose(packed.stat_sum, stat_sum, rtol=1e-6, atol=1e-3)
    np.testing.assert_allclose(packed.stat_sumsq, stat_sumsq, rtol=1e-6)
    assert packed.overflow == overflow == (2 if storage_dtype == "float16" else 0)


def test_pad_windows_pads_right_with_a_mask():
    from layercache.extraction.forward import pad_windows
    from layercache.extraction.tokenize import EncodedExample

    examples = [EncodedExample(row=0, windows=[np.array([7, 8, 9], np.int32)], take=None, word_ids=None),
                EncodedExample(row=1, windows=[np.array([4], np.int32), np.array([5, 6], np.int32)],
                               take=np.array([(0, 0), (1, 1)], np.int32), word_ids=None)]
    ids, mask = pad_windows(examples, pad_id=0)
    assert ids.dtype == mask.dtype == torch.long
    assert ids.tolist() == [[7, 8, 9], [4, 0, 0], [5, 6, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert examples[1].stitched_ids().tolist() == [4, 6]


def test_plan_holds_ids_as_int32_arrays(tiny_models, small_builtin):
    from layercache.extraction.tokenize import encode_split

    backbone = load_backbone(str(tiny_models["bert"]), device="cpu", max_length=12, words_input=True)
    split = load_builtin(sizes=SIZES).splits["train"]
    for stride in (None, 4):
        for ex in encode_split(backbone.tokenizer, split, max_length=12, stride=stride, causal=False):
            assert all(w.dtype == np.int32 for w in ex.windows)
            assert ex.stitched_ids().dtype == np.int32 and len(ex.stitched_ids()) == ex.n_tokens
