"""``--project K``: states stored as K principal coordinates per state, fitted on the first split at extraction.

The tiny BERT is 32 wide; its 40-example splits have ~550 tokens, all of which the fit sees, so the
recorded variance can be checked against the states themselves.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

import layercache as lc
from layercache.errors import CacheError, CacheMismatchError, ConfigError
from layercache.live.verify import verify_cache

K = 8


def _extract(tiny_models, out, **options):
    return lc.extract(str(tiny_models["bert"]), "builtin", out, limit=40, progress=False, batch_size=8,
                      pooling=["mean", "first"], **options).path


@pytest.fixture(scope="module")
def caches(tiny_models, tmp_path_factory):
    """float32 at full width, float32 projected to K, and int8 projected to K."""
    root = tmp_path_factory.mktemp("projection")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        return {"full": _extract(tiny_models, root / "full", storage_dtype="float32"),
                "projected": _extract(tiny_models, root / "projected", storage_dtype="float32", project=K),
                "int8": _extract(tiny_models, root / "int8", storage_dtype="int8", project=K)}


def test_the_manifest_records_the_projection_and_the_states_are_k_wide(caches):
    cache = lc.LayerCache.open(caches["projected"])
    m = cache.manifest
    assert m.storage.project == K and cache.hidden_size == K and m.model.hidden_size == 32
    assert m.side_files["projection"].file == "projection.safetensors"
    assert len(m.extraction.projection_variance) == len(cache.layer_names)
    assert cache.tokens("train", [0])[0].shape[1:] == (len(cache.layer_names), K)
    assert cache.pooled("train", "first").shape[1:] == (len(cache.layer_names), K)
    from layercache.report.info import cache_summary
    summary = cache_summary(cache)
    assert summary["projection"]["dim"] == K and set(summary["projection"]["variance_kept"]) == set(cache.layer_names)


def test_the_basis_is_orthonormal_and_the_states_are_its_coordinates(caches):
    full, projected = lc.LayerCache.open(caches["full"]), lc.LayerCache.open(caches["projected"])
    projection = projected.projection()
    S = len(projected.layer_names)
    assert projection.basis.shape == (S, K, 32) and projection.mean.shape == (S, 32)
    eye = torch.einsum("skd,sjd->skj", projection.basis, projection.basis)
    torch.testing.assert_close(eye, torch.eye(K).expand(S, K, K), atol=1e-5, rtol=0)
    rows = [0, 7, 39]
    for x, z in zip(full.tokens("train", rows), projected.tokens("train", rows)):  # (t, S, 32), (t, S, K)
        torch.testing.assert_close(torch.from_numpy(z), projection.apply(torch.from_numpy(x)), atol=1e-4, rtol=1e-4)
    # pooled vectors: the mean of projected tokens is the projection of the mean; first tokens are projected
    for mode in ("mean", "first"):
        torch.testing.assert_close(torch.from_numpy(projected.pooled("validation", mode)),
                                   projection.apply(torch.from_numpy(full.pooled("validation", mode))),
                                   atol=1e-4, rtol=1e-4)


def test_the_recorded_variance_is_what_the_coordinates_keep(caches):
    full, projected = lc.LayerCache.open(caches["full"]), lc.LayerCache.open(caches["projected"])
    n = full.num_examples("train")
    x = np.concatenate(full.tokens("train", range(n)))  # (t, S, 32): every train token (the fit saw them all)
    z = np.concatenate(projected.tokens("train", range(n)))  # (t, S, K)
    assert projected.manifest.extraction.projection_tokens == len(x)
    kept = z.var(0).sum(-1) / x.var(0).sum(-1)  # (S,)
    np.testing.assert_allclose(kept, projected.manifest.extraction.projection_variance, atol=1e-3)
    assert (kept > 0.3).all() and (kept < 1).all()
    # the first coordinate carries the most variance, as principal directions do
    assert (np.diff(z.var(0), axis=-1) <= 1e-6).all()


def test_int8_and_projection_together_are_the_projected_states_within_half_a_step(caches):
    projected, int8 = lc.LayerCache.open(caches["projected"]), lc.LayerCache.open(caches["int8"])
    np.testing.assert_allclose(int8.projection().basis.numpy(), projected.projection().basis.numpy(), atol=1e-5)
    for z, q in zip(projected.tokens("test", range(10)), int8.tokens("test", range(10))):
        assert (np.abs(z - q) <= np.abs(z).max(-1, keepdims=True) / 254 * (1 + 1e-4) + 1e-5).all()


def test_verify_projects_fresh_states_and_passes(caches):
    for name in ("projected", "int8"):
        result = verify_cache(caches[name], sample=8)
        assert result.passed, (name, result.failure)


def test_a_head_keeps_the_basis_and_its_live_path_projects_like_the_cache(caches, tmp_path, one_torch_thread):
    from layercache.live.parity import parity

    cache = lc.LayerCache.open(caches["int8"])
    head = lc.LayerHead(mixer="scalar", epochs=2, seed=0, progress=False).fit(cache)
    run = head.save(tmp_path / "run")
    loaded = lc.LayerHead.load(run)
    torch.testing.assert_close(loaded.projection_.basis, cache.projection().basis)
    result = parity(run, cache=cache, split="test", rows=range(12))
    assert result.agreement == 1.0, result.tasks
    with pytest.raises(CacheMismatchError, match="projection"):
        loaded.evaluate(lc.LayerCache.open(caches["full"]), "test")


def test_refusals_are_one_sentence(tiny_models, tmp_path, caches):
    with pytest.raises(ConfigError, match=r"^project=\.\.\. takes a number of dimensions, at least 1, got 0"):
        _extract(tiny_models, tmp_path / "zero", project=0)
    assert not (tmp_path / "zero").exists()  # refused before any folder is made
    with pytest.raises(ConfigError, match="^project=32 must lie between 1 and 31"):
        _extract(tiny_models, tmp_path / "wide", project=32)
    with pytest.raises(ConfigError, match="^project=31 needs more than 31 tokens to fit, but split 'train' has only"):
        lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "few", limit=1, progress=False, project=31)
    with pytest.raises(CacheMismatchError, match=r"project=\.\.\. or shard size"):
        _extract(tiny_models, caches["projected"], storage_dtype="float32", project=K + 1)
    copy = tmp_path / "damaged"
    shutil.copytree(caches["projected"], copy)
    (copy / "projection.safetensors").write_bytes(b"not a projection")
    with pytest.raises(CacheError, match="re-extract with overwrite=True"):
        verify_cache(copy, sample=2)
    # the states themselves stay readable: only the paths that need the basis refuse
    assert lc.LayerCache.open(copy).tokens("train", [0])[0].shape[-1] == K


def test_a_stopped_projected_int8_run_resumes_with_its_basis_to_the_same_cache(tiny_models, tmp_path, monkeypatch,
                                                                                caches):
    """The basis is fitted once: a resume reads it back (never refits), and the shards equal an uninterrupted run's."""
    import h5py

    from layercache.extraction import job as job_module
    from layercache.store.writer import ShardWriter

    out = tmp_path / "cache"
    original, calls = ShardWriter.append, []

    def append(self, batch):
        calls.append(1)
        original(self, batch)
        if len(calls) == 4:
            raise KeyboardInterrupt  # a stop after some shards were committed

    with monkeypatch.context() as mp:
        mp.setattr(ShardWriter, "append", append)
        with pytest.raises(KeyboardInterrupt):
            _extract(tiny_models, out, storage_dtype="int8", project=K, shard_bytes=1_000)
    fitted = (out / "projection.safetensors").read_bytes()
    with monkeypatch.context() as mp:
        mp.setattr(job_module, "fit_projection", lambda *a, **k: pytest.fail("a resume must not refit the basis"))
        resumed = _extract(tiny_models, out, storage_dtype="int8", project=K, shard_bytes=1_000)
    assert (out / "projection.safetensors").read_bytes() == fitted
    whole = _extract(tiny_models, tmp_path / "whole", storage_dtype="int8", project=K, shard_bytes=1_000)
    a, b = lc.LayerCache.open(resumed), lc.LayerCache.open(whole)
    assert [s.file for s in a.split_info("train").shards] == [s.file for s in b.split_info("train").shards]
    for x, y in zip(a.split_info("train").shards, b.split_info("train").shards):
        with h5py.File(resumed / x.file) as f, h5py.File(whole / y.file) as g:
            for name in ("hidden", "scales/hidden", "pooled/mean"):  # pooled: float16 beside int8 tokens
                np.testing.assert_array_equal(f[name][:], g[name][:])
