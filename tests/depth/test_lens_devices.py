"""Where a lens computes its logits and in which dtype: the device plumbing (an explicit CPU, a CUDA request without
a GPU refused), and bfloat16 logits held to float32's within tolerances measured on these caches.

The tolerances below come from the caches of ``conftest.decoder_caches`` (41 texts, 1,001 tokens; GPT-2 with
LayerNorm and a tied head, Llama with RMSNorm and its own head, heads scaled x20 so the distributions are peaked:
logits up to 16, where bfloat16's spacing is 0.0625), a tuned lens fitted 3 epochs at lr 1e-2 on 64-token batches.
Measured on a CPU (torch 2.13, its bfloat16 matmul accumulates in float32 and rounds the logits, as cuBLAS's does):

- the same lens scored with bfloat16 logits against float32's, largest per-layer difference over both lenses:
  KL 1.1e-4 nats (GPT-2) and 4.9e-4 (Llama, on KLs of 0.015 to 0.42); cross-entropy 0.0077 bits; accuracy 0;
  agreement 0 (GPT-2) and 0.020 (Llama: 20 tokens of 1,001 whose top two logits lie 0.01 apart, below the
  logits' rounding, swap);
- a lens fitted with bfloat16 logits, scored in float32, against the float32-fitted one: KL 9e-5 nats (GPT-2),
  5.4e-4 (Llama).

Each tolerance is about twice the largest measured figure: room for another thread count's summation order, not
for a wrong cast (a float16 unembedding, logits left in bfloat16 through the softmax, move KL by 1e-2 and more).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import layercache as lc
from layercache.depth import lens_logits, logit_lens
from layercache.depth.lens_scores import score_lenses
from layercache.depth.lens_tokens import lens_inputs
from layercache.depth.tuned_lens import TunedLens, score_fitted
from layercache.errors import ConfigError

KL_TOLERANCE = 1e-3
"""nats: bfloat16's largest per-layer KL difference from float32's (measured 4.9e-4 scoring, 5.4e-4 fitting)."""
BITS_TOLERANCE = 0.02
"""bits per token: the cross-entropy's (measured 0.0077)."""
TOP1_TOLERANCE = 0.03
"""share of tokens: accuracy's and agreement's (measured 0.020, near-ties swapped by the logits' rounding)."""
FIT = {"epochs": 3, "lr": 1e-2, "batch_tokens": 64, "progress": False}
NO_GPU = "torch sees no CUDA GPU"
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)


@pytest.fixture(scope="module")
def fitted(decoder_caches) -> dict[str, TunedLens]:
    """Per decoder kind, a tuned lens fitted on the CPU with float32 logits."""
    return {kind: TunedLens(device="cpu", **FIT).fit(lc.LayerCache.open(path), "train")
            for kind, path in decoder_caches.items()}


def assert_scores_close(got, expected, *, kl=KL_TOLERANCE, bits=BITS_TOLERANCE, top1=TOP1_TOLERANCE):
    """Two LensScores of the same lens and tokens, per layer within the tolerances."""
    assert got.layer_names == expected.layer_names and got.n_tokens == expected.n_tokens
    np.testing.assert_allclose(got.kl, expected.kl, rtol=0, atol=kl)
    np.testing.assert_allclose(got.cross_entropy, expected.cross_entropy, rtol=0, atol=bits)
    np.testing.assert_allclose(got.accuracy, expected.accuracy, rtol=0, atol=top1)
    np.testing.assert_allclose(got.agreement, expected.agreement, rtol=0, atol=top1)


def test_an_explicit_cpu_device_scores_as_the_cpu_always_has(decoder_caches, fitted):
    cache = lc.LayerCache.open(decoder_caches["llama"])
    lens = fitted["llama"]
    on_cpu = lens.score(cache, "train", chunk_bytes=1 << 16)  # the lens's own device: "cpu"
    maps = {"logit": None, "tuned": lens.lens_map(torch.device("cpu"))}
    direct = score_lenses(cache, "train", lens_inputs(cache), maps, device="cpu", chunk_bytes=1 << 16)
    for name in ("logit", "tuned"):
        np.testing.assert_array_equal(direct[name].kl, on_cpu[name].kl)
        np.testing.assert_array_equal(direct[name].cross_entropy, on_cpu[name].cross_entropy)
        np.testing.assert_array_equal(direct[name].depth_counts, on_cpu[name].depth_counts)
    logit = logit_lens(cache, "train", device="cpu", chunk_bytes=1 << 16)
    np.testing.assert_array_equal(logit.kl, on_cpu["logit"].kl)
    np.testing.assert_array_equal(logit.accuracy, on_cpu["logit"].accuracy)


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a GPU")
def test_a_cuda_device_without_a_gpu_is_refused_in_one_sentence(decoder_caches, fitted):
    cache = lc.LayerCache.open(decoder_caches["gpt2"])
    refused = rf"^device='cuda' was asked for, but {NO_GPU}; use device='cpu' or auto\.$"
    with pytest.raises(ConfigError, match=refused):
        TunedLens(device="cuda", **FIT).fit(cache)
    with pytest.raises(ConfigError, match=refused):
        logit_lens(cache, device="cuda")
    moved = TunedLens.from_pretrained(fitted["gpt2"].save_pretrained(Path(cache.path).parent / "lens-to-cuda"))
    with pytest.raises(ConfigError, match=refused):
        moved.set_params(device="cuda").score(cache)


def test_a_logits_dtype_out_of_range_is_refused_in_one_sentence(decoder_caches):
    cache = lc.LayerCache.open(decoder_caches["gpt2"])
    refused = r"^logits_dtype must be one of float32, bfloat16, got 'float16'\.$"
    with pytest.raises(ConfigError, match=refused):
        TunedLens(logits_dtype="float16", **FIT).fit(cache)
    with pytest.raises(ConfigError, match=refused):
        logit_lens(cache, logits_dtype="float16")
    with pytest.raises(ConfigError, match=refused):
        lens_logits(torch.zeros(2, cache.hidden_size), cache.lens_weights(), logits_dtype="float16")


def test_lenses_of_two_devices_or_dtypes_are_not_scored_together(decoder_caches, fitted):
    cache = lc.LayerCache.open(decoder_caches["gpt2"])
    linear = TunedLens(objective="least_squares", logits_dtype="bfloat16", progress=False).fit(cache)
    with pytest.raises(ConfigError, match="^Score lenses of one device and logits dtype together"):
        score_fitted(cache, "train", [fitted["gpt2"], linear])


def test_bfloat16_logits_are_float32_logits_rounded_and_cast_back(decoder_caches):
    cache = lc.LayerCache.open(decoder_caches["llama"])
    lens = cache.lens_weights()
    normed = lens.norm(torch.from_numpy(cache.tokens("train", [0])[0][:, 0].copy()))  # (t, D) the first state
    exact = lens_logits(normed, lens, normed=True)  # (t, V)
    rounded = lens_logits(normed, lens, normed=True, logits_dtype="bfloat16")  # (t, V)
    assert rounded.dtype == torch.float32 and torch.equal(rounded, rounded.bfloat16().float())
    # bfloat16 keeps 8 bits: each input within 2^-9 of itself (a product within 2^-8), the sum within 2^-9 of itself
    bound = 2 ** -8 * (normed.abs() @ lens.unembedding.abs().T) + 2 ** -9 * exact.abs()  # (t, V)
    assert bool(((rounded - exact).abs() <= 1.01 * bound).all())


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_bfloat16_scores_are_within_the_measured_tolerance_of_float32s(decoder_caches, fitted, kind):
    cache = lc.LayerCache.open(decoder_caches[kind])
    lens = fitted[kind]
    exact = lens.score(cache, "train")
    rounded = TunedLens.from_pretrained(lens.save_pretrained(Path(cache.path).parent / f"lens-bf16-{kind}")).set_params(
        logits_dtype="bfloat16").score(cache, "train")
    for name in ("logit", "tuned"):
        assert_scores_close(rounded[name], exact[name])
        assert rounded[name].kl[-1] == 0.0  # the final layer is its own reference in either dtype


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_a_lens_fitted_with_bfloat16_logits_reaches_the_float32_fits_kl(decoder_caches, fitted, kind):
    cache = lc.LayerCache.open(decoder_caches[kind])
    lens = TunedLens(device="cpu", logits_dtype="bfloat16", **FIT).fit(cache, "train")
    scores = lens.set_params(logits_dtype="float32").score(cache, "train")  # both lenses judged in float32
    np.testing.assert_allclose(scores["tuned"].kl, fitted[kind].score(cache, "train")["tuned"].kl, rtol=0,
                               atol=KL_TOLERANCE)
    assert np.all(scores["tuned"].kl[:-1] < scores["logit"].kl[:-1])


@needs_gpu
@pytest.mark.parametrize("logits_dtype", ["float32", "bfloat16"])
def test_on_a_gpu_the_scores_are_the_cpus(decoder_caches, fitted, logits_dtype):
    cache = lc.LayerCache.open(decoder_caches["llama"])
    lens = fitted["llama"]
    on_cpu = lens.score(cache, "train")  # float32 on the CPU: the reference for both dtypes
    on_gpu = TunedLens.from_pretrained(lens.save_pretrained(Path(cache.path).parent / f"lens-gpu-{logits_dtype}")
                                       ).set_params(device="cuda", logits_dtype=logits_dtype).score(cache, "train")
    close = {} if logits_dtype == "bfloat16" else {"kl": 1e-5, "bits": 1e-4, "top1": 0.002}  # other kernels only
    for name in ("logit", "tuned"):
        assert_scores_close(on_gpu[name], on_cpu[name], **close)
    refit = TunedLens(device="cuda", logits_dtype=logits_dtype, **FIT).fit(cache, "train")
    np.testing.assert_allclose(refit.set_params(device="cpu", logits_dtype="float32").score(cache, "train")["tuned"].kl,
                               on_cpu["tuned"].kl, rtol=0, atol=KL_TOLERANCE)
