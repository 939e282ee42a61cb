"""The tuned lens and the linear shortcut from a decoder cache: fitted without the model, scored beside the logit
lens, saved and loaded with the cache's identity, refused where they cannot be read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import layercache as lc
from layercache.depth.lens_scores import prediction_depths
from layercache.depth.tuned_lens import TunedLens
from layercache.errors import CacheError, ConfigError


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_the_tuned_lens_starts_as_the_logit_lens_and_fits_closer_to_the_final_layer(decoder_caches, kind):
    cache = lc.LayerCache.open(decoder_caches[kind])
    lens = TunedLens(epochs=8, lr=1e-2, batch_tokens=64, progress=False).fit(cache, "train")
    assert lens.layer_names_ == cache.layer_names[:-1] and lens.history_[-1] < lens.history_[0]
    scores = lens.score(cache, "train")
    logit, tuned = scores["logit"], scores["tuned"]
    assert tuned.layer_names == logit.layer_names == tuple(cache.layer_names)
    assert np.all(tuned.kl[:-1] < logit.kl[:-1]) and tuned.kl[-1] == logit.kl[-1] == 0.0
    assert tuned.depth_counts.sum() == tuned.n_tokens == int(cache.lengths("train").sum())

    identity = TunedLens.from_pretrained(lens.save_pretrained(Path(cache.path).parent / f"lens-{kind}"))
    identity.weight_.zero_()
    identity.bias_.zero_()  # A = 0, b = 0: the identity map, which is the logit lens
    start = identity.score(cache, "train")["tuned"]
    np.testing.assert_allclose(start.kl, logit.kl, rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(start.depth_counts, logit.depth_counts)


def test_the_linear_shortcut_is_the_least_squares_map_to_the_last_state(decoder_caches):
    cache = lc.LayerCache.open(decoder_caches["llama"])
    lens = TunedLens(objective="least_squares", ridge=0.0, progress=False).fit(cache, "train")
    states = np.concatenate(cache.tokens("train", range(cache.num_examples("train"))))  # (t, S, D)
    x = np.concatenate([states[:, 0], np.ones((len(states), 1))], axis=1).astype(np.float64)
    solution, *_ = np.linalg.lstsq(x, states[:, -1].astype(np.float64), rcond=None)  # (D+1, D)
    mapped = lens.translate(0, torch.from_numpy(states[:, 0])).numpy()
    np.testing.assert_allclose(mapped, x @ solution, atol=2e-3, rtol=1e-3)
    scores = lens.score(cache, "train")
    assert set(scores) == {"logit", "linear"} and scores["linear"].kl[0] < scores["logit"].kl[0]


def test_a_saved_lens_reads_back_equal_and_refuses_another_models_cache(decoder_caches, tmp_path):
    cache = lc.LayerCache.open(decoder_caches["gpt2"])
    lens = TunedLens(epochs=1, batch_tokens=32, seed=3, progress=False).fit(cache, "train")
    loaded = TunedLens.from_pretrained(lens.save_pretrained(tmp_path / "lens"))
    assert loaded.get_params() == lens.get_params() and loaded.positions_ == lens.positions_
    torch.testing.assert_close(loaded.weight_, lens.weight_, rtol=0, atol=0)
    np.testing.assert_array_equal(loaded.score(cache)["tuned"].kl, lens.score(cache)["tuned"].kl)
    with pytest.raises(ConfigError, match="fitted on states of .* fit a lens on this cache"):
        loaded.score(lc.LayerCache.open(decoder_caches["llama"]))
    (tmp_path / "lens" / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="is not a lens written by TunedLens.save_pretrained"):
        TunedLens.from_pretrained(tmp_path / "lens")


def test_the_same_seed_fits_the_same_lens(decoder_caches):
    cache = lc.LayerCache.open(decoder_caches["gpt2"])
    a, b = (TunedLens(epochs=2, batch_tokens=32, max_tokens=200, seed=5, progress=False).fit(cache) for _ in "ab")
    torch.testing.assert_close(a.weight_, b.weight_, rtol=0, atol=0)
    assert a.n_tokens_ <= 200


def test_refusals_are_one_sentence(decoder_caches, tiny_models, tsv, tmp_path):
    encoder = lc.extract(str(tiny_models["bert"]), str(tsv), tmp_path / "bert", progress=False)
    with pytest.raises(ConfigError, match="^The tuned lens reads layers through a decoder's next-token head"):
        TunedLens(progress=False).fit(lc.LayerCache.open(encoder.path))
    headless = lc.extract(str(tiny_models["llama"]), str(tsv), tmp_path / "llama", progress=False)
    with pytest.raises(CacheError, match="no logit-lens weights"):
        TunedLens(progress=False).fit(lc.LayerCache.open(headless.path))
    folder = lc.LayerCache.open(decoder_caches["gpt2"]).manifest.model.source
    projected = lc.extract(folder, str(tsv), tmp_path / "projected", project=4, progress=False)
    with pytest.raises(ConfigError, match="stores them projected to 4 dimensions"):
        TunedLens(progress=False).fit(lc.LayerCache.open(projected.path))
    pooled = lc.extract(folder, str(tsv), tmp_path / "pooled", store="pooled", progress=False)
    with pytest.raises(CacheError, match="pooled vectors only"):
        TunedLens(progress=False).fit(lc.LayerCache.open(pooled.path))
    cache = lc.LayerCache.open(decoder_caches["gpt2"])
    for bad, message in [({"objective": "mse"}, "objective must be one of kl, least_squares"),
                         ({"epochs": 0}, "epochs must be"), ({"max_tokens": 0}, "max_tokens must be")]:
        with pytest.raises(ConfigError, match=message):
            TunedLens(progress=False, **bad).fit(cache)
    with pytest.raises(ConfigError, match="not fitted yet"):
        TunedLens().score(cache)


def test_prediction_depth_is_where_the_top_token_settles():
    agrees = torch.tensor([[True, True, True],     # settled from the start
                           [False, True, True],    # from the second state
                           [True, False, True],    # a wobble: from the last
                           [False, False, False]])  # never agrees: counted at the last
    np.testing.assert_array_equal(prediction_depths(agrees), [0, 1, 2, 2])


def test_tuned_lens_keywords_are_lens_options_fields_in_order_with_their_defaults():
    import inspect
    from dataclasses import asdict

    from layercache.core.option_specs import field_default, spec_fields
    from layercache.depth.lens_options import LensOptions

    keywords = list(inspect.signature(TunedLens).parameters.values())
    assert [p.name for p in keywords] == [f.name for f in spec_fields(LensOptions)]
    assert all(p.default == field_default(f) for p, f in zip(keywords, spec_fields(LensOptions)))
    assert TunedLens().get_params() == asdict(LensOptions())


def test_the_written_out_kl_gradient_is_autograds():
    import torch.nn.functional as F

    from layercache.depth.tuned_lens import _kl_backward

    torch.manual_seed(0)
    final_logp = F.log_softmax(torch.randn(5, 11) * 3, -1)
    final_p = final_logp.exp()
    a = torch.randn(5, 11, requires_grad=True)
    b = a.detach().clone().requires_grad_()
    expected = F.kl_div(F.log_softmax(a, -1), final_logp, reduction="batchmean", log_target=True)
    expected.backward()
    loss = _kl_backward(b, final_p, float(torch.special.xlogy(final_p, final_p).sum()))
    assert loss == pytest.approx(float(expected.detach()), rel=1e-5)
    torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-7)
