"""verify: a good cache passes (fp16 and float32 storage, windows), an edited or foreign one fails in one sentence.

The verify command's table, JSON, exit codes and user errors are tested in tests/cli/test_live_verify.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cli_support import invoke
from tiny_models import make_model

import layercache as lc
import layercache.live.verify as verify_module
from layercache.errors import CacheMismatchError
from layercache.live.cached_inputs import cached_examples
from layercache.live.verify import tolerance, ulp, verify_cache


@pytest.mark.parametrize("name", ["bert", "bert-stride", "gpt2"])
def test_a_good_cache_passes(live_caches, name):
    result = verify_cache(live_caches[name], sample=8, seed=1)
    assert result.passed, result.failure
    assert {r.what for r in result.rows} >= {"tokens", "pooled:mean"}
    assert sum(result.examples.values()) == 16
    assert all(r.worst <= 1.0 and r.values > 0 for r in result.rows)


def test_windows_are_rebuilt_exactly(live_caches, tiny_models, records):
    """The stride cache's long rows run as the same windows extraction ran (stitched ids equal the stored)."""
    from layercache.backbone.loader import load_backbone
    from layercache.extraction.tokenize import encode_split

    cache = lc.LayerCache.open(live_caches["bert-stride"])
    backbone = load_backbone(str(tiny_models["bert"]), words_input=True, max_length=12)
    rebuilt = cached_examples(cache, "train", range(cache.num_examples("train")), backbone.tokenizer, causal=False)
    fresh = list(encode_split(backbone.tokenizer, records.splits["train"], max_length=12, stride=4, causal=False))
    by_source = {int(s): i for i, s in enumerate(records.splits["train"].source_index)}
    windowed = 0
    for ex, source in zip(rebuilt, cache.example_index("train")):
        ref = fresh[by_source[int(source)]]
        assert len(ex.windows) == len(ref.windows)
        for a, b in zip(ex.windows, ref.windows):
            np.testing.assert_array_equal(a, b)
        windowed += ex.take is not None
    assert windowed > 0


def test_float32_storage_passes_with_a_tight_tolerance(tiny_models, tmp_path, monkeypatch):
    import layercache.sources.builtin as builtin

    original = builtin.load_builtin
    monkeypatch.setattr(builtin, "load_builtin", lambda seed=0, sizes=None: original(seed, {"train": 12}))
    path = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "f32", progress=False, batch_size=5,
                      storage_dtype="float32").path
    result = verify_cache(path, sample=6)
    assert result.passed, result.failure
    assert max(r.max_rel for r in result.rows) < 1e-5


def test_tolerance_follows_the_storage_dtype():
    x = torch.tensor([1.0, 3.0])
    assert ulp("float16", x).tolist() == [2**-10, 2**-9]
    assert ulp("bfloat16", x).tolist() == [2**-7, 2**-6]
    assert float(tolerance("float32", "float32", torch.tensor(1.0), 1.0)) < 2e-5


def test_an_edited_cache_fails_naming_split_row_and_state(edited_cache):
    result = verify_cache(edited_cache, sample=5)
    assert not result.passed
    assert "layer_2" in result.failure and "'validation'" in result.failure
    assert "re-extract with `extract(..., overwrite=True)`" in result.failure
    failing = {(r.what, r.state) for r in result.rows if not r.passed}
    assert ("tokens", "layer_2") in failing and ("tokens", "layer_1") not in failing


def other_model_loader(tiny_models, tmp_path, same_fingerprint: bool):
    """A loader that loads a tiny BERT with other random weights (same architecture)."""
    other = make_model(tmp_path / "other-bert", "bert", seed=7)
    real = verify_module.load_backbone

    def load(source, **options):
        backbone = real(str(other), **options)
        if same_fingerprint:  # the weights changed but the fingerprint did not: only the states can tell
            backbone.fingerprint = real(source, **options).fingerprint
        return backbone

    return load


def test_a_cache_of_another_model_is_refused_in_one_sentence(live_caches, tiny_models, tmp_path, monkeypatch):
    monkeypatch.setattr(verify_module, "load_backbone", other_model_loader(tiny_models, tmp_path, False))
    with pytest.raises(CacheMismatchError, match="another model"):
        verify_cache(live_caches["bert"], sample=3)
    out = invoke("verify", live_caches["bert"], "--sample", "3")
    assert out.exit_code == 1, out.output
    assert "Traceback" not in out.output and "different weights" in " ".join(out.output.split())


def test_other_weights_under_the_same_fingerprint_fail_on_the_states(live_caches, tiny_models, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setattr(verify_module, "load_backbone", other_model_loader(tiny_models, tmp_path, True))
    result = verify_cache(live_caches["bert"], sample=3)
    assert not result.passed and "model revision" in result.failure
    assert all(not r.passed for r in result.rows if r.state != "embeddings" or r.what == "tokens")
