"""The logit lens from the cache equals the model's own head: tiny causal LMs with each kind of final norm.

Each model is saved with its LM head (the tiny backbones of ``tiny_models`` are base models) and
its final norm's weight (and bias) randomised, so a wrong formula (LayerNorm for RMSNorm, a missing
``1 + weight``) or a norm applied twice cannot pass: GPT-2 (LayerNorm, head tied to the input
embeddings), Llama (RMSNorm, a head of its own), Gemma (RMSNorm scaling by ``1 + weight``, tied).
The lens of every layer is compared with the model's own ``lm_head(norm(h_l))``, and the last
layer's with the model's logits.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from tiny_models import MAX_PARAMETERS, _config, make_tokenizer

import layercache as lc
from layercache.depth import layer_logits, lens_logits, logit_lens
from layercache.errors import CacheError, ConfigError
from layercache.store.lens import FinalNorm, LensWeights

CAUSAL_KINDS = ("gpt2", "llama", "gemma")
NORM_OF = {"gpt2": ("layernorm", 0.0), "llama": ("rmsnorm", 0.0), "gemma": ("rmsnorm", 1.0)}


def _causal_config(kind: str, vocab_size: int):
    if kind == "gemma":
        return transformers.GemmaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, head_dim=8, intermediate_size=64,
                                        max_position_embeddings=64, vocab_size=vocab_size, bos_token_id=2,
                                        eos_token_id=3, pad_token_id=0)
    config = _config(kind, vocab_size)
    if kind == "llama":
        config.tie_word_embeddings = False  # a head of its own, saved as lm_head.weight
    return config


def make_causal_lm(folder: Path, kind: str) -> Path:
    """A tiny ``kind`` ForCausalLM with its head, and a random final norm, saved like a hub model."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(folder, encoder=False)
    torch.manual_seed(1)
    model = transformers.AutoModelForCausalLM.from_config(_causal_config(kind, len(tokenizer)))
    norm = model.base_model.ln_f if kind == "gpt2" else model.base_model.norm
    with torch.no_grad():
        norm.weight.normal_(0.0 if kind == "gemma" else 1.0, 0.5)
        if getattr(norm, "bias", None) is not None:
            norm.bias.normal_(0.0, 0.5)
        model.get_output_embeddings().weight.mul_(20.0)  # peaked distributions, so KL and top-1 mean something
    assert sum(p.numel() for p in model.parameters()) < MAX_PARAMETERS
    model.save_pretrained(folder)
    return folder


def causal_lm_caches(root: Path, kinds: tuple[str, ...], texts: int, batch_size: int) -> dict[str, Path]:
    """Per kind: a float32 cache of ``texts`` texts of different lengths, the last a single token."""
    data = root / "texts.tsv"
    rows = [f"the lamp {'is good' if i % 2 else 'is not good'} today {'and the keys are bad ' * (i % 4)}"
            for i in range(texts - 1)] + ["a"]
    data.write_text("text\tlabel\n" + "".join(f"{t}\t{'pos' if i % 2 else 'neg'}\n" for i, t in enumerate(rows)))
    caches = {}
    for kind in kinds:
        folder = make_causal_lm(root / kind, kind)
        caches[kind] = lc.extract(str(folder), str(data), root / f"cache-{kind}", storage_dtype="float32",
                                  batch_size=batch_size, progress=False).path
    return caches


@pytest.fixture(scope="module")
def causal_caches(tmp_path_factory) -> dict[str, Path]:
    """Per kind: a float32 cache of 13 texts of different lengths (one a single token)."""
    return causal_lm_caches(tmp_path_factory.mktemp("causal"), CAUSAL_KINDS, texts=13, batch_size=4)


def model_of(cache: lc.LayerCache):
    return transformers.AutoModelForCausalLM.from_pretrained(cache.manifest.model.source).eval()


def final_norm_of(model):
    return model.base_model.ln_f if isinstance(model, transformers.GPT2LMHeadModel) else model.base_model.norm


@pytest.mark.parametrize("kind", CAUSAL_KINDS)
def test_the_lens_of_every_layer_is_the_models_own_head(causal_caches, kind):
    cache = lc.LayerCache.open(causal_caches[kind])
    lens = cache.lens_weights()
    assert (lens.norm.kind, lens.norm.weight_offset) == NORM_OF[kind]
    assert lens.normed_last and cache.manifest.storage.final_norm == "applied"
    assert lens.source == "lm_head.weight" if kind == "llama" else lens.source.startswith("tied input embeddings")
    model = model_of(cache)
    n_layers = cache.manifest.model.n_layers
    for row in range(cache.num_examples("train")):
        ids = torch.from_numpy(cache.token_arrays("train", "input_ids", [row])[0].astype(np.int64))[None]  # (1, T)
        with torch.no_grad():
            out = model(input_ids=ids, output_hidden_states=True)
            own = [model.lm_head(final_norm_of(model)(h))[0] for h in out.hidden_states[:-1]]  # (T, V) each
        lensed = [layer_logits(cache, "train", [row], layer)[0] for layer in range(n_layers + 1)]
        for layer in range(n_layers):
            np.testing.assert_allclose(lensed[layer], own[layer].numpy(), atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(lensed[-1], out.logits[0].numpy(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", CAUSAL_KINDS)
def test_kl_accuracy_and_agreement_against_the_model(causal_caches, kind):
    cache = lc.LayerCache.open(causal_caches[kind])
    model = model_of(cache)
    n = cache.num_examples("train")
    correct = predictions = 0
    kl_sums = np.zeros(cache.manifest.model.n_layers + 1)
    tokens = 0
    for row in range(n):
        ids = torch.from_numpy(cache.token_arrays("train", "input_ids", [row])[0].astype(np.int64))[None]
        with torch.no_grad():
            out = model(input_ids=ids, output_hidden_states=True)
            final = torch.log_softmax(out.logits[0], -1)  # (T, V)
            for layer, h in enumerate(out.hidden_states[:-1]):
                logp = torch.log_softmax(model.lm_head(final_norm_of(model)(h))[0], -1)
                kl_sums[layer] += float((final.exp() * (final - logp)).sum())
        correct += int((out.logits[0, :-1].argmax(-1) == ids[0, 1:]).sum())
        predictions += ids.shape[1] - 1
        tokens += ids.shape[1]

    result = logit_lens(cache, "train")
    S = len(cache.layer_names)
    assert result.layer_names == tuple(cache.layer_names)
    assert result.accuracy.shape == result.kl.shape == result.agreement.shape == (S,)
    assert (result.n_tokens, result.n_predictions) == (tokens, predictions)  # the one-token row predicts nothing
    assert result.accuracy[-1] == pytest.approx(correct / predictions, abs=1e-12)
    assert abs(result.kl[-1]) < 1e-6 and result.agreement[-1] == 1.0
    np.testing.assert_allclose(result.kl[:-1], kl_sums[:-1] / tokens, rtol=1e-3, atol=1e-6)
    # The random norm and head make every earlier layer differ, far beyond the last layer's rounding.
    assert (result.kl[:-1] > 1e-7).all() and (result.kl[:-1] > 100 * abs(result.kl[-1])).all()

    # The same numbers a few tokens at a time (chunk_bytes of one token's logits), and for chosen layers and rows.
    chunked = logit_lens(cache, "train", chunk_bytes=1)
    np.testing.assert_allclose(chunked.kl, result.kl, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(chunked.accuracy, result.accuracy)
    picked = logit_lens(cache, "train", layers=["layer_1", -1])
    assert picked.layer_names == ("layer_1", cache.layer_names[-1])
    np.testing.assert_allclose(picked.kl, result.kl[[1, -1]], rtol=1e-6, atol=1e-9)
    one = logit_lens(cache, "train", rows=[0])
    assert one.n_tokens == len(cache.token_arrays("train", "input_ids", [0])[0])


def test_a_half_precision_head_is_read_in_blocks_as_float32():
    rng = torch.Generator().manual_seed(0)
    weight = torch.randn(50, 8, generator=rng).to(torch.bfloat16)  # (V, D)
    lens = LensWeights(norm=FinalNorm("rmsnorm", weight=torch.rand(8, generator=rng), eps=1e-6),
                       unembedding=weight, unembedding_bias=torch.randn(50, generator=rng), logit_scale=0.5,
                       logit_softcap=3.0)
    h = torch.randn(7, 8, generator=rng)  # (n, D)
    normed = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * lens.norm.weight
    expected = 3.0 * torch.tanh((normed @ weight.float().T + lens.unembedding_bias) * 0.5 / 3.0)
    torch.testing.assert_close(lens_logits(h, lens), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lens_logits(normed, lens, normed=True), expected, atol=1e-5, rtol=1e-5)


def test_refusals(causal_caches, tiny_models, tsv, tmp_path):
    encoder = lc.extract(str(tiny_models["bert"]), str(tsv), tmp_path / "bert", progress=False)
    with pytest.raises(ConfigError, match="decoder"):
        logit_lens(lc.LayerCache.open(encoder.path))
    assert "lens" not in encoder.manifest.side_files and not (encoder.path / "lens.safetensors").exists()

    # The tiny base Llama has no LM head in its checkpoint and does not tie one: no lens, said at read time.
    headless = lc.extract(str(tiny_models["llama"]), str(tsv), tmp_path / "llama", progress=False)
    assert "lens" not in headless.manifest.side_files
    with pytest.raises(CacheError, match="no logit-lens weights"):
        logit_lens(lc.LayerCache.open(headless.path))

    folder = Path(lc.LayerCache.open(causal_caches["gpt2"]).manifest.model.source)
    partial = lc.extract(str(folder), str(tsv), tmp_path / "partial", layers=[0, 1], progress=False)
    with pytest.raises(ConfigError, match="does not keep"):
        logit_lens(lc.LayerCache.open(partial.path))
    with pytest.raises(ConfigError, match="rows must be"):
        logit_lens(lc.LayerCache.open(causal_caches["gpt2"]), "train", rows=[10_000])

    pooled = lc.extract(str(folder), str(tsv), tmp_path / "pooled", store="pooled", progress=False)
    assert "lens" not in pooled.manifest.side_files  # the lens reads token states: none saved without them
    with pytest.raises(CacheError, match="pooled vectors only"):
        logit_lens(lc.LayerCache.open(pooled.path))


def test_a_changed_lens_file_is_refused_and_rewritten_by_the_same_command(causal_caches, tmp_path, tsv):
    folder = lc.LayerCache.open(causal_caches["gpt2"]).manifest.model.source
    out = tmp_path / "cache"
    first = lc.extract(folder, str(tsv), out, progress=False)
    lens_file = out / "lens.safetensors"
    data = bytearray(lens_file.read_bytes())
    data[-1] ^= 0xFF
    lens_file.write_bytes(bytes(data))
    with pytest.raises(CacheError, match="changed since extraction"):
        lc.LayerCache.open(out).lens_weights()
    again = lc.extract(folder, str(tsv), out, progress=False)
    assert again.already_complete and again.manifest.config_hash == first.manifest.config_hash
    reopened = lc.LayerCache.open(out)
    assert reopened.lens_weights().vocab_size == len(reopened.vocabulary())
    assert json.loads((out / "manifest.json").read_text())["side_files"]["lens"] == \
        {"file": "lens.safetensors", "bytes": lens_file.stat().st_size,
         "checksum": first.manifest.side_files["lens"].checksum}


@pytest.mark.parametrize("basis", ["pca", "standardized"])
def test_a_projected_caches_lens_reads_its_states_mapped_back_through_the_basis(causal_caches, tmp_path, basis):
    """``--project K``: the lens sees ``mean + V^T V (x - mean)`` (pca) or, standardised, the same projection taken
    in the space of ``(x - mean) / scale`` and scaled back: the part of each state the stored coordinates keep."""
    full = lc.LayerCache.open(causal_caches["gpt2"])
    root = causal_caches["gpt2"].parent  # the fixture's model folder and data file
    projected = lc.LayerCache.open(lc.extract(str(root / "gpt2"), str(root / "texts.tsv"), tmp_path / basis,
                                              storage_dtype="float32", batch_size=4, progress=False, project=8,
                                              project_basis=basis).path)
    projection = projected.projection()
    (position,) = projected.layer_index("layer_1")  # not the final layer: no norm question
    mean, directions = projection.mean[position], projection.directions()[position]  # (D,), (K, D)
    scale = projection.scale[position] if basis == "standardized" else torch.ones_like(mean)
    rows = [0, 5, 12]
    for x, logits in zip(full.tokens("train", rows, ["layer_1"]),
                         layer_logits(projected, "train", rows, "layer_1")):  # (t, 1, D), (t, V)
        inside = (torch.from_numpy(x[:, 0]) - mean) / scale @ directions.T @ directions  # (t, D)
        expected = lens_logits(mean + scale * inside, full.lens_weights())
        np.testing.assert_allclose(logits, expected.numpy(), atol=2e-3, rtol=1e-3)
