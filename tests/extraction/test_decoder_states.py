"""Decoder states (issue 14): values beyond the float16 range, the automatic storage dtype, and
mean pooling without the first token (a decoder's BOS / attention sink).

Real decoders carry "massive activations" of ~27,000 on their first token, within 3x of the
float16 limit (65,504); larger ones pass it. The tiny random Llama cannot, so ``huge_llama`` is
the same model with its token embeddings scaled by 1e7: every state before the final norm is far
beyond the float16 range and still finite in float32, and ``layer_L`` (after the final norm) is not.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from cli_support import assert_refused, invoke
from tiny_models import huge_llama as make_huge_llama

import layercache as lc
from layercache.backbone.loader import Backbone, load_backbone
from layercache.extraction.forward import pool, token_index
from layercache.extraction.packing import StatePacker, storage_array, storage_tensor
from layercache.extraction.tokenize import EncodedExample
from layercache.store.codecs.float16 import FP16_MAX
from layercache.store.schema import ManifestSchemaError, validate_manifest

SMALL = ("--batch-size", "2", "--shard-size", "1", "--quiet")  # every batch its own shard


@pytest.fixture(scope="module")
def huge_llama(tiny_models, tmp_path_factory) -> Path:
    """The tiny Llama with states up to ~1e6 before its final norm (finite in float32)."""
    folder = make_huge_llama(tiny_models["llama"], tmp_path_factory.mktemp("huge-llama"))
    backbone = load_backbone(str(folder), device="cpu")
    enc = backbone.tokenizer(["the lamp is good today"], return_tensors="pt")
    states = backbone.hidden_states(enc["input_ids"], enc["attention_mask"])
    assert all(torch.isfinite(s).all() for s in states)
    assert states[1].abs().max() > 4 * FP16_MAX and states[-1].abs().max() < 100  # beyond fp16, then normed
    return folder


@pytest.fixture
def tsv(tmp_path) -> Path:
    """13 rows of different lengths; the last is one token long for the tiny decoders (no BOS added)."""
    path = tmp_path / "reviews.tsv"
    rows = [f"the lamp {'is good' if i % 2 else 'is not good'} today {'and the keys are bad ' * (i % 4)}"
            for i in range(12)] + ["a"]
    path.write_text("text\tlabel\n" + "".join(f"{t}\t{'pos' if i % 2 else 'neg'}\n" for i, t in enumerate(rows)))
    return path


def text_of(result) -> str:
    return " ".join(result.output.split())


def stored_arrays(out: Path, name: str) -> list[np.ndarray]:
    """Every shard's raw ``name`` dataset (hidden, pooled/<mode>) as written, read with h5py."""
    manifest = lc.read_manifest(out)
    arrays = []
    for split in manifest.splits.values():
        for shard in split.shards:
            with h5py.File(out / shard.file, "r") as h:
                arrays.append(h[name][:])
    return arrays


# --- 1. float16 storage clamps: never inf on disk ------------------------------------------------
def test_float16_packing_clamps_values_beyond_the_range_and_counts_them():
    D, keep = 4, [0, 1]
    hidden = [torch.ones((2, 3, D)) for _ in range(2)]  # (R, W, D) each
    hidden[0][0, 0, 1] = 1e5  # an example's first token: stored, pooled as "first"
    hidden[1][1, 1, 2] = -7e4  # the second example's last token
    hidden[1][1, 2, 3] = 1e9  # padding: neither stored nor counted
    examples = [EncodedExample(row=i, windows=[np.arange(n, dtype=np.int32)], take=None, word_ids=None)
                for i, n in enumerate((3, 2))]
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    index, lengths = token_index(examples, mask), torch.tensor([3, 2])
    packer = StatePacker(2, D, storage_dtype="float16", pooling=["mean", "first", "last"],
                         device=torch.device("cpu"))
    out = storage_tensor(5, 2, D, "float16")
    packed = packer.pack(hidden, keep, index, lengths, out)
    tokens = storage_array(out, "float16")  # (S, t, D)
    assert np.isfinite(tokens).all()
    assert tokens[0, 0, 1] == FP16_MAX and tokens[1, 4, 2] == -FP16_MAX
    assert packed.overflow == 2
    for mode, vectors in packed.pooled.items():
        assert np.isfinite(vectors).all(), mode
    assert packed.pooled["first"][0, 0, 1] == FP16_MAX and packed.pooled["last"][1, 1, 2] == -FP16_MAX


def test_explicit_float16_is_clamped_counted_warned_and_shown_by_info(huge_llama, tsv, tmp_path):
    out = tmp_path / "cache"
    result = invoke("extract", huge_llama, tsv, "--out", out, "--storage-dtype", "float16",
                    "--pooling", "mean,first,last", "--quiet")
    assert result.exit_code == 0, result.output
    manifest = lc.read_manifest(out)
    assert manifest.storage.dtype == "float16"
    overflow = manifest.extraction.fp16_overflow
    assert overflow > 0 and manifest.extraction.fp16_overflow_by_split == {"train": overflow}
    assert manifest.extraction.storage_dtype_auto is None  # chosen by the user, not by the probe
    said = text_of(result)
    assert f"{overflow:,} state values exceeded the float16 range and were clamped to ±65,504" in said, said
    assert "--storage-dtype bfloat16" in said
    for name in ("hidden", "pooled/mean", "pooled/first", "pooled/last"):
        for array in stored_arrays(out, name):
            assert array.dtype == np.float16 and np.isfinite(array).all(), name
    hidden = np.concatenate(stored_arrays(out, "hidden"))  # (t, S, D)
    assert np.abs(hidden).max() == FP16_MAX
    assert (np.abs(hidden) == FP16_MAX).sum() >= overflow  # every counted value is stored clamped
    cache = lc.LayerCache.open(out)
    assert all(np.isfinite(states).all() for states in cache.tokens("train", range(13)))
    info = text_of(invoke("info", out))
    assert f"{overflow:,} values exceeded the float16 range and were clamped to ±65,504" in info, info
    assert "--storage-dtype bfloat16" in info and "stored as inf" not in info


# --- 2. --storage-dtype auto ----------------------------------------------------------------
def test_auto_is_the_default_and_stores_bfloat16_when_the_probe_batch_overflows(huge_llama, tsv, tmp_path):
    out = tmp_path / "cache"
    result = invoke("extract", huge_llama, tsv, "--out", out, "--quiet")  # no --storage-dtype
    assert result.exit_code == 0, result.output
    said = text_of(result)
    assert "Storing bfloat16 (--storage-dtype auto)" in said and "exceed the float16 range" in said, said
    manifest = lc.read_manifest(out)
    assert manifest.storage.dtype == "bfloat16"  # the resolved dtype, never "auto"
    assert manifest.extraction.fp16_overflow == 0
    why = manifest.extraction.storage_dtype_auto
    assert why.startswith("auto: ") and "first batch of split 'train'" in why and "exceed ±65,504" in why
    with h5py.File(out / manifest.splits["train"].shards[0].file, "r") as h:
        assert h["hidden"].attrs["dtype"] == "bfloat16"
    tokens = lc.LayerCache.open(out).tokens("train", range(13))
    assert max(np.abs(t).max() for t in tokens) > 4 * FP16_MAX  # kept, not clamped
    info = text_of(invoke("info", out))
    assert f"bfloat16 ({why})" in info, info
    assert "clamped" not in info
    # The same configuration as an explicit bfloat16 run; float16 is another one.
    again = invoke("extract", huge_llama, tsv, "--out", out, "--storage-dtype", "bfloat16", "--quiet")
    assert again.exit_code == 0 and "already complete" in again.output, again.output
    assert_refused(invoke("extract", huge_llama, tsv, "--out", out, "--storage-dtype", "float16"),
                   "different storage", "--overwrite")


def test_auto_keeps_float16_for_a_model_within_range_and_equals_an_explicit_float16_run(tiny_models, tsv,
                                                                                        tmp_path, monkeypatch):
    original, calls = Backbone.hidden_states, []
    with monkeypatch.context() as mp:
        mp.setattr(Backbone, "hidden_states", lambda self, ids, mask: calls.append(1) or original(self, ids, mask))
        auto = lc.extract(str(tiny_models["llama"]), str(tsv), tmp_path / "auto", progress=False, batch_size=4)
    assert len(calls) == auto.manifest.splits["train"].n_batches == 4  # the probe's forward is batch 0's
    assert auto.manifest.storage.dtype == "float16"
    assert "stays within ±65,504" in auto.manifest.extraction.storage_dtype_auto
    explicit = lc.extract(str(tiny_models["llama"]), str(tsv), tmp_path / "explicit", progress=False,
                          storage_dtype="float16", batch_size=4)
    assert explicit.manifest.config_hash == auto.manifest.config_hash
    for a, b in zip(lc.LayerCache.open(auto.path).tokens("train", range(13)),
                    lc.LayerCache.open(explicit.path).tokens("train", range(13))):
        np.testing.assert_array_equal(a, b)  # batch 0 packed from the probe's forward is the same
    same = lc.extract(str(tiny_models["llama"]), str(tsv), tmp_path / "auto", progress=False,
                      storage_dtype="float16", batch_size=4)
    assert same.already_complete


def test_a_resume_with_auto_keeps_the_dtype_without_probing_again(huge_llama, tsv, tmp_path, monkeypatch):
    out = tmp_path / "cache"
    original, calls = Backbone.hidden_states, []

    def interrupted(self, ids, mask):
        calls.append(len(ids))
        if len(calls) == 4:  # the probe (batch 0), batches 1 and 2, then Ctrl-C
            raise KeyboardInterrupt
        return original(self, ids, mask)

    with monkeypatch.context() as mp:
        mp.setattr(Backbone, "hidden_states", interrupted)
        with pytest.raises(KeyboardInterrupt):
            lc.extract(str(huge_llama), str(tsv), out, progress=False, batch_size=2, shard_bytes=1)
    partial = lc.read_manifest(out)
    assert not partial.complete and partial.storage.dtype == "bfloat16"
    done = partial.splits["train"].batches_written
    assert done >= 1

    calls.clear()
    monkeypatch.setattr(Backbone, "hidden_states",
                        lambda self, ids, mask: calls.append(len(ids)) or original(self, ids, mask))
    resumed = lc.extract(str(huge_llama), str(tsv), out, progress=False, batch_size=2, shard_bytes=1)
    assert resumed.resumed and resumed.manifest.complete
    assert resumed.manifest.storage.dtype == "bfloat16"
    assert resumed.manifest.config_hash == partial.config_hash
    assert len(calls) == partial.splits["train"].n_batches - done  # the remaining batches, no probe
    fresh = lc.extract(str(huge_llama), str(tsv), tmp_path / "fresh", progress=False, batch_size=2, shard_bytes=1,
                       storage_dtype="bfloat16")
    assert fresh.manifest.config_hash == resumed.manifest.config_hash
    for a, b in zip(lc.LayerCache.open(out).tokens("train", range(13)),
                    lc.LayerCache.open(fresh.path).tokens("train", range(13))):
        np.testing.assert_array_equal(a, b)


def test_auto_clamps_and_counts_what_the_probe_batch_did_not_see(tiny_models, tsv, tmp_path, monkeypatch):
    """The probe sees the longest examples only; a later overflow is stored float16, clamped and counted."""
    original = Backbone.hidden_states

    def short_rows_overflow(self, ids, mask):
        hidden = list(original(self, ids, mask))
        short = mask.sum(1) == 1  # (R,) only the one-token row "a" (the last batch)
        hidden[1] = hidden[1].clone()
        hidden[1][short.to(hidden[1].device)] = 1e6
        return hidden

    monkeypatch.setattr(Backbone, "hidden_states", short_rows_overflow)
    result = invoke("extract", tiny_models["llama"], tsv, "--out", tmp_path / "cache", "--batch-size", "2",
                    "--quiet")
    assert result.exit_code == 0, result.output
    manifest = lc.read_manifest(tmp_path / "cache")
    assert manifest.storage.dtype == "float16" and manifest.extraction.fp16_overflow == 32  # 1 token x D
    assert "clamped to ±65,504" in text_of(result) and "--storage-dtype bfloat16" in text_of(result)
    assert all(np.isfinite(a).all() for a in stored_arrays(tmp_path / "cache", "hidden"))


def test_auto_ignores_padding_and_refuses_nan_in_the_probe_batch(tiny_models, tsv, tmp_path, monkeypatch):
    """Padding is never stored, so only real tokens count; a NaN in the probe batch is refused naming its row."""
    original = Backbone.hidden_states

    def patched(value, where):
        def hidden_states(self, ids, mask):
            hidden = list(original(self, ids, mask))
            hidden[1] = hidden[1].clone()
            hidden[1][where(mask).to(hidden[1].device)] = value
            return hidden
        return hidden_states

    with monkeypatch.context() as mp:
        mp.setattr(Backbone, "hidden_states", patched(1e6, lambda mask: mask == 0))
        padded = lc.extract(str(tiny_models["llama"]), str(tsv), tmp_path / "padded", progress=False, batch_size=4)
    assert padded.manifest.storage.dtype == "float16" and padded.manifest.extraction.fp16_overflow == 0
    longest = int(np.argmax([len(t) for t in tsv.read_text().splitlines()[1:]]))
    monkeypatch.setattr(Backbone, "hidden_states", patched(float("nan"), lambda mask: mask.sum(1) == mask.shape[1]))
    refused = invoke("extract", tiny_models["llama"], tsv, "--out", tmp_path / "nan", "--batch-size", "4")
    assert_refused(refused, f"produced NaN in state layer_1 for source row {longest} of split 'train' (cache row 0)")


# --- 3. --mean-skip-first ---------------------------------------------------------------------
def test_packer_mean_skip_first_matches_the_reference_and_keeps_every_token_in_the_statistics():
    gen = torch.Generator().manual_seed(0)
    take = np.array([(0, 0), (0, 1), (0, 2), (0, 3), (1, 2)], np.int32)  # a windowed example
    windows = [[5, 3], [1], [6]]  # window lengths of three examples; the second has one token
    examples = [EncodedExample(row=i, windows=[np.arange(n, dtype=np.int32) for n in lens],
                               take=take if i == 0 else None, word_ids=None) for i, lens in enumerate(windows)]
    R, W, D, keep = 4, 6, 8, [0, 2]
    hidden = [torch.randn((R, W, D), generator=gen) for _ in range(3)]  # (R, W, D) each
    hidden[0][0, 0] = 3e4  # the first token of example 0: an attention sink
    mask = torch.zeros((R, W), dtype=torch.long)
    for r, n in enumerate(n for lens in windows for n in lens):
        mask[r, :n] = 1
    index, lengths = token_index(examples, mask), torch.tensor([ex.n_tokens for ex in examples])
    packer = StatePacker(len(keep), D, storage_dtype="float32", pooling=["mean", "first"],
                         device=torch.device("cpu"), mean_skip_first=True)
    packer.block_tokens = 3  # several blocks per state
    packed = packer.pack(hidden, keep, index, lengths, None)
    flat = torch.stack([hidden[i].reshape(-1, D)[index] for i in keep], dim=1)  # (t, S, D)
    expected = pool(flat, lengths, ["mean", "first"], mean_skip_first=True)
    np.testing.assert_array_equal(packed.pooled["mean"], expected["mean"].numpy())
    np.testing.assert_array_equal(packed.pooled["first"], expected["first"].numpy())  # "first" unchanged
    np.testing.assert_allclose(packed.pooled["mean"][0], flat[1:5].mean(0).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(packed.pooled["mean"][1], flat[5].numpy())  # a lone token is its own mean
    np.testing.assert_allclose(packed.stat_sum, flat.double().sum(0).numpy(), rtol=1e-6)  # the sink included


@pytest.mark.parametrize("stride", [None, 2])
def test_mean_skip_first_pools_tokens_after_the_first(tiny_models, tsv, tmp_path, stride):
    windows = ("--max-length", "6", "--stride", str(stride)) if stride else ()
    out = tmp_path / "cache"
    result = invoke("extract", tiny_models["llama"], tsv, "--out", out, "--mean-skip-first", "--storage-dtype",
                    "float32", *windows, "--quiet")
    assert result.exit_code == 0, result.output
    manifest = lc.read_manifest(out)
    assert manifest.storage.mean_skip_first is True
    assert json.loads((out / "manifest.json").read_text())["storage"]["mean_skip_first"] is True
    if stride:
        assert manifest.splits["train"].n_windowed > 0
    cache = lc.LayerCache.open(out)
    tokens, means = cache.tokens("train", range(13)), cache.pooled("train", "mean")  # [(t, S, D)], (n, S, D)
    assert sorted(len(t) for t in tokens)[0] == 1  # the row "a"
    for states, mean in zip(tokens, means):
        expected = states[1:].mean(0) if len(states) > 1 else states[0]
        np.testing.assert_allclose(mean, expected, rtol=1e-5, atol=1e-6)
    assert "mean pooling skips each example's first token" in text_of(invoke("info", out))
    # Part of the configuration: the same run without it is another cache.
    assert_refused(invoke("extract", tiny_models["llama"], tsv, "--out", out, "--storage-dtype", "float32",
                          *windows), "different storage", "--mean-skip-first")


def test_mean_skip_first_is_recorded_false_by_default_and_absent_means_false(tiny_models, tsv, tmp_path):
    out = tmp_path / "cache"
    result = lc.extract(str(tiny_models["bert"]), str(tsv), out, progress=False, batch_size=2, shard_bytes=1)
    assert result.manifest.storage.mean_skip_first is False
    assert "skips" not in text_of(invoke("info", out))
    # A cache from before the option (no key, incomplete) resumes: absent means false.
    path = out / "manifest.json"
    data = json.loads(path.read_text())
    del data["storage"]["mean_skip_first"]
    data["splits"]["train"]["shards"].pop()
    data["splits"]["train"]["complete"] = data["complete"] = False
    path.write_text(json.dumps(data))
    resumed = lc.extract(str(tiny_models["bert"]), str(tsv), out, progress=False, batch_size=2, shard_bytes=1)
    assert resumed.resumed and resumed.manifest.complete


def test_schema_checks_mean_skip_first_and_the_auto_note(tiny_models, tsv, tmp_path):
    data = lc.extract(str(tiny_models["bert"]), str(tsv), tmp_path / "cache", progress=False).manifest.to_json()
    validate_manifest(data)
    for section, key, bad in (("storage", "mean_skip_first", "yes"), ("extraction", "storage_dtype_auto", 1)):
        broken = json.loads(json.dumps(data))
        broken[section][key] = bad
        with pytest.raises(ManifestSchemaError, match=f"{section}.{key}"):
            validate_manifest(broken)
    broken = json.loads(json.dumps(data))
    broken["storage"]["dtype"] = "auto"  # a manifest holds the resolved dtype only
    with pytest.raises(ManifestSchemaError, match="storage.dtype"):
        validate_manifest(broken)


def test_pooled_only_packing_counts_the_stored_vectors_not_the_tokens():
    """Issue 26: with ``--store pooled`` the count covered token values that were never stored."""
    D, keep = 4, [0, 1]
    hidden = [torch.ones((2, 3, D)) for _ in range(2)]  # (R, W, D) each
    hidden[0][0, 0, 1] = 1e5  # the first example's first token: in its "first" vector, a third of it in its mean
    hidden[1][0, 1, 2] = -7e4  # a middle token: in no stored vector beyond the range (its mean is -23,333)
    hidden[1][1, 2, 3] = 1e9  # padding: neither stored nor counted
    examples = [EncodedExample(row=i, windows=[np.arange(n, dtype=np.int32)], take=None, word_ids=None)
                for i, n in enumerate((3, 2))]
    index, lengths = token_index(examples, torch.tensor([[1, 1, 1], [1, 1, 0]])), torch.tensor([3, 2])
    for modes, stored in ((["mean"], 0), (["mean", "first"], 1), (["first", "last"], 1)):
        packer = StatePacker(2, D, storage_dtype="float16", pooling=modes, device=torch.device("cpu"))
        packed = packer.pack(hidden, keep, index, lengths, None)
        assert packed.overflow == stored, modes
        assert packed.overflow == sum(int((np.abs(v.astype(np.float32)) == FP16_MAX).sum())
                                      for v in packed.pooled.values())  # every counted value is stored clamped
    tokens = StatePacker(2, D, storage_dtype="float16", pooling=["mean"], device=torch.device("cpu"))
    assert tokens.pack(hidden, keep, index, lengths, storage_tensor(5, 2, D, "float16")).overflow == 2
