"""``--project K``: states stored as K principal coordinates per state, fitted on the first split at extraction.

The tiny BERT is 32 wide; its 40-example splits have ~550 tokens, all of which the fit sees, so the
recorded variance can be checked against the states themselves. Each check runs on both bases
(``--project-basis pca`` and ``standardized``) where both must behave alike.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import numpy as np
import pytest
import torch

import layercache as lc
from layercache.errors import CacheError, CacheMismatchError, ConfigError
from layercache.live.verify import verify_cache

K = 8


def _extract(tiny_models, out, **options):
    options.setdefault("quality_examples", 0)  # the basis is fitted by extraction alone (the check fits its own)
    return lc.extract(str(tiny_models["bert"]), "builtin", out, limit=40, progress=False, batch_size=8,
                      pooling=["mean", "first"], **options).path


@pytest.fixture(scope="module")
def caches(tiny_models, tmp_path_factory):
    """float32 at full width; float32 and int8 projected to K, each with a pca and a standardized basis."""
    root = tmp_path_factory.mktemp("projection")
    standardized = {"project": K, "project_basis": "standardized"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        return {"full": _extract(tiny_models, root / "full", storage_dtype="float32"),
                "projected": _extract(tiny_models, root / "projected", storage_dtype="float32", project=K),
                "int8": _extract(tiny_models, root / "int8", storage_dtype="int8", project=K),
                "standardized": _extract(tiny_models, root / "standardized", storage_dtype="float32",
                                         **standardized),
                "standardized-int8": _extract(tiny_models, root / "standardized-int8", storage_dtype="int8",
                                              **standardized)}


BASES = {"pca": "projected", "standardized": "standardized"}
"""Basis -> the float32 cache projected with it."""
INT8 = {"pca": "int8", "standardized": "standardized-int8"}


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


@pytest.mark.parametrize("basis", BASES)
def test_the_basis_is_orthonormal_and_the_states_are_its_coordinates(caches, basis):
    full, projected = lc.LayerCache.open(caches["full"]), lc.LayerCache.open(caches[BASES[basis]])
    projection = projected.projection()
    S = len(projected.layer_names)
    assert projection.kind == basis and projected.manifest.storage.project_basis == basis
    assert projection.basis.shape == (S, K, 32) and projection.mean.shape == (S, 32)
    directions = projection.directions()  # (S, K, D): the basis itself for pca, basis * scale standardised
    eye = torch.einsum("skd,sjd->skj", directions, directions)
    torch.testing.assert_close(eye, torch.eye(K).expand(S, K, K), atol=1e-5, rtol=0)
    if basis == "standardized":  # the stored rows are V / sigma, and sigma is each dimension's spread
        assert projection.scale.shape == (S, 32) and (projection.scale > 0).all()
        assert not torch.allclose(projection.scale, torch.ones_like(projection.scale))
    rows = [0, 7, 39]
    for x, z in zip(full.tokens("train", rows), projected.tokens("train", rows)):  # (t, S, 32), (t, S, K)
        torch.testing.assert_close(torch.from_numpy(z), projection.apply(torch.from_numpy(x)), atol=1e-4, rtol=1e-4)
    # pooled vectors: the mean of projected tokens is the projection of the mean; first tokens are projected
    for mode in ("mean", "first"):
        torch.testing.assert_close(torch.from_numpy(projected.pooled("validation", mode)),
                                   projection.apply(torch.from_numpy(full.pooled("validation", mode))),
                                   atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("basis", BASES)
def test_the_recorded_variance_is_what_the_coordinates_keep(caches, basis):
    """pca: of the states' variance; standardized: of the standardised states' (each dimension over its scale)."""
    full, projected = lc.LayerCache.open(caches["full"]), lc.LayerCache.open(caches[BASES[basis]])
    n = full.num_examples("train")
    x = np.concatenate(full.tokens("train", range(n)))  # (t, S, 32): every train token (the fit saw them all)
    z = np.concatenate(projected.tokens("train", range(n)))  # (t, S, K)
    assert projected.manifest.extraction.projection_tokens == len(x)
    if basis == "standardized":
        x = x / projected.projection().scale.numpy()  # (t, S, 32) standardised: about unit variance each
        np.testing.assert_allclose(x.var(0), 1, atol=1e-3)
    kept = z.var(0).sum(-1) / x.var(0).sum(-1)  # (S,)
    np.testing.assert_allclose(kept, projected.manifest.extraction.projection_variance, atol=1e-3)
    assert (kept > 0.3).all() and (kept < 1).all()
    # the first coordinate carries the most variance, as principal directions do
    assert (np.diff(z.var(0), axis=-1) <= 1e-6).all()


@pytest.mark.parametrize("basis", BASES)
def test_int8_and_projection_together_are_the_projected_states_within_half_a_step(caches, basis):
    projected, int8 = lc.LayerCache.open(caches[BASES[basis]]), lc.LayerCache.open(caches[INT8[basis]])
    np.testing.assert_allclose(int8.projection().basis.numpy(), projected.projection().basis.numpy(), atol=1e-5)
    for z, q in zip(projected.tokens("test", range(10)), int8.tokens("test", range(10))):
        assert (np.abs(z - q) <= np.abs(z).max(-1, keepdims=True) / 254 * (1 + 1e-4) + 1e-5).all()


def test_verify_projects_fresh_states_and_passes(caches):
    for name in (*BASES.values(), *INT8.values()):
        result = verify_cache(caches[name], sample=8)
        assert result.passed, (name, result.failure)


@pytest.mark.parametrize("basis", BASES)
def test_a_head_keeps_the_basis_and_its_live_path_projects_like_the_cache(caches, tmp_path, one_torch_thread, basis):
    """The head saves the affine map ``z = basis (x - mean)`` (for standardized, the rows divided by the scale)."""
    from layercache.live.parity import parity

    cache = lc.LayerCache.open(caches[INT8[basis]])
    head = lc.LayerHead(mixer="scalar", epochs=2, seed=0, progress=False).fit(cache)
    run = head.save(tmp_path / "run")
    loaded = lc.LayerHead.load(run)
    torch.testing.assert_close(loaded.projection_.basis, cache.projection().basis)
    result = parity(run, cache=cache, split="test", rows=range(12))
    assert result.agreement == 1.0, result.tasks
    with pytest.raises(CacheMismatchError, match="projection"):
        loaded.evaluate(lc.LayerCache.open(caches["full"]), "test")


def test_refusals_are_one_sentence(tiny_models, tmp_path, caches):
    with pytest.raises(ConfigError, match=r"^project takes a number of dimensions, at least 1, got 0"):
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


# --- the basis kinds: reconstruction, the file's formats, the manifest, refusals -----------------------------
@pytest.mark.parametrize("basis", BASES)
def test_reconstruct_inverts_the_basis_of_either_kind(caches, basis):
    """``mean + V^T z`` (pca) or ``mean + scale * (V^T z)`` (standardized): the orthogonal projection of the state in
    the space the basis was fitted in, so projecting it again gives back the same coordinates."""
    full, projected = lc.LayerCache.open(caches["full"]), lc.LayerCache.open(caches[BASES[basis]])
    projection = projected.projection()
    x = torch.from_numpy(full.tokens("test", [0, 3])[1])  # (t, S, 32)
    z = torch.from_numpy(projected.tokens("test", [0, 3])[1])  # (t, S, K)
    mean, directions = projection.mean, projection.directions()  # (S, D), (S, K, D)
    scale = projection.scale if basis == "standardized" else torch.ones_like(mean)
    inside = torch.einsum("tsd,skd,skj->tsj", (x - mean) / scale, directions, directions)  # (t, S, D)
    back = projection.reconstruct(z)
    torch.testing.assert_close(back, mean + scale * inside, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(projection.apply(back), z, atol=1e-4, rtol=1e-4)
    picked = projection.reconstruct(z[:, [2, 0]], states=[2, 0])  # a subset of states, in any order
    torch.testing.assert_close(picked, back[:, [2, 0]])


def test_a_pca_file_is_format_1_unchanged_and_a_standardized_file_records_its_kind_and_scale(caches):
    """A pca basis is written in the format layercache always wrote (so an older cache's basis fits again to the
    bytes its manifest recorded); the standardized one is format 2, with its kind and the scale."""
    from safetensors import safe_open
    from safetensors.torch import save

    pca = caches["projected"] / "projection.safetensors"
    with safe_open(str(pca), framework="pt") as handle:
        meta = json.loads(handle.metadata()["layercache_projection"])
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    assert meta["format"] == 1 and "kind" not in meta and set(tensors) == {"mean", "basis", "variance_kept"}
    old_recipe = save(tensors, metadata={"layercache_projection": json.dumps(
        {"format": 1, "tokens": meta["tokens"], "split": meta["split"], "seed": meta["seed"]}, sort_keys=True)})
    assert pca.read_bytes() == old_recipe  # what the writer of format 1 wrote, byte for byte
    standardized = caches["standardized"] / "projection.safetensors"
    with safe_open(str(standardized), framework="pt") as handle:
        meta = json.loads(handle.metadata()["layercache_projection"])
        assert set(handle.keys()) == {"mean", "basis", "variance_kept", "scale"}
    assert meta["format"] == 2 and meta["kind"] == "standardized"


def test_an_older_cache_without_the_basis_key_reads_and_resumes_as_pca(tiny_models, caches, tmp_path):
    """A manifest written before --project-basis has no ``project_basis``: it is a pca cache, its configuration
    hash is the one a pca run computes now, so the same command finds it complete rather than refusing it."""
    old = tmp_path / "old"
    shutil.copytree(caches["projected"], old)
    manifest = json.loads((old / "manifest.json").read_text())
    assert manifest["storage"].pop("project_basis") == "pca"
    (old / "manifest.json").write_text(json.dumps(manifest))
    cache = lc.LayerCache.open(old)
    assert cache.manifest.storage.project_basis is None and cache.manifest.storage.projection_basis == "pca"
    assert cache.projection().kind == "pca"
    assert _extract(tiny_models, old, storage_dtype="float32", project=K) == old  # not refused: the same hash
    assert "project_basis" not in json.loads((old / "manifest.json").read_text())["storage"]  # left as it was
    with pytest.raises(CacheMismatchError, match=r"different projection basis \(project_basis=\.\.\.\)"):
        _extract(tiny_models, old, storage_dtype="float32", project=K, project_basis="standardized")


def test_the_basis_is_in_the_configuration_hash_and_a_resume_with_another_is_refused(tiny_models, caches):
    pca, standardized = (lc.read_manifest(caches[name]) for name in ("projected", "standardized"))
    assert pca.storage.to_json()["project_basis"] == "pca"  # recorded, but hashed as an older cache without it
    assert pca.storage.hashed() == dataclasses.replace(pca.storage, project_basis=None).hashed()
    assert standardized.storage.hashed()["project_basis"] == "standardized"
    assert pca.config_hash != standardized.config_hash
    with pytest.raises(CacheMismatchError, match=r"^\S+ already holds a cache made with a different projection "
                                                 r"basis \(project_basis=\.\.\.\); pass overwrite=True"):
        _extract(tiny_models, caches["standardized"], storage_dtype="float32", project=K)


def test_basis_refusals_are_one_sentence(tiny_models, tmp_path):
    with pytest.raises(ConfigError, match=r"^project_basis='standardized' chooses how a projection's basis is "
                                          r"fitted, but no projection was asked for: add project=\.\.\. "):
        _extract(tiny_models, tmp_path / "alone", project_basis="standardized")
    with pytest.raises(ConfigError, match="^project_basis='zca' is not known; choose one of pca, standardized."):
        _extract(tiny_models, tmp_path / "unknown", project=K, project_basis="zca")
    assert not (tmp_path / "alone").exists() and not (tmp_path / "unknown").exists()


def test_the_command_line_takes_the_basis_and_refuses_it_without_a_projection(tiny_models, caches, tmp_path):
    from cli_support import assert_refused, invoke

    result = invoke("extract", tiny_models["bert"], "builtin", "--out", tmp_path / "alone", "--limit", "8",
                    "--project-basis", "standardized", "--quiet")
    assert_refused(result, "--project-basis standardized chooses how a projection's basis is fitted, but no "
                           "projection was asked for: add --project (the number of dimensions to keep)")
    result = invoke("extract", tiny_models["bert"], "builtin", "--out", caches["standardized"], "--limit", "40",
                    "--batch-size", "8", "--pooling", "mean", "--pooling", "first", "--storage-dtype", "float32",
                    "--project", K, "--project-basis", "standardized", "--quiet")
    assert result.exit_code == 0 and "already complete" in result.output, result.output
    result = invoke("info", caches["standardized"])
    text = " ".join(result.output.split())
    assert result.exit_code == 0 and "(standardized: PCA of the states scaled to unit variance per dimension)" in text
    assert "standardised variance kept: embeddings" in text, text


def test_info_names_the_basis_and_what_its_variance_is_a_fraction_of(caches):
    from layercache.report.info import _projection_text, cache_summary

    pca, standardized = (cache_summary(lc.LayerCache.open(caches[name])) for name in ("projected", "standardized"))
    assert pca["projection"]["basis"] == "pca" and standardized["projection"]["basis"] == "standardized"
    assert f"{K} of 32 principal coordinates (pca)" in _projection_text(pca["projection"])
    assert "; variance kept: " in _projection_text(pca["projection"])
    assert "; standardised variance kept: " in _projection_text(standardized["projection"])


def test_the_size_estimate_counts_the_standardized_scale(caches):
    """What ``plan`` and the disk check price for the basis file: a standardized one adds its (S, D) float32 scale."""
    from layercache.extraction.estimate import projection_bytes

    sizes = {}
    for basis, name in BASES.items():
        manifest = lc.read_manifest(caches[name])
        sizes[basis] = projection_bytes(manifest)
        on_disk = (caches[name] / "projection.safetensors").stat().st_size
        assert 0 <= on_disk - sizes[basis] < 1024  # the safetensors header and the (S,) float64 fractions
    S = len(lc.read_manifest(caches["projected"]).storage.layers)
    assert sizes["standardized"] - sizes["pca"] == S * 32 * 4


@pytest.mark.parametrize("change", ["no scale", "zero scale", "unknown kind", "format 3", "pca in the file"])
def test_a_basis_file_that_does_not_say_what_the_manifest_does_is_refused(caches, tmp_path, change):
    """With a matching checksum (as if extraction had written it), a standardized file without its scale, with a
    scale that would divide by zero, of a kind or format this layercache does not know, or a pca basis where the
    manifest records standardized, is refused in one sentence rather than read as something else."""
    from safetensors import safe_open
    from safetensors.torch import save

    from layercache.core.checksum import file_checksum

    copy = tmp_path / "cache"
    shutil.copytree(caches["standardized"], copy)
    path = copy / "projection.safetensors"
    with safe_open(str(path), framework="pt") as handle:
        meta = json.loads(handle.metadata()["layercache_projection"])
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    if change == "no scale":
        del tensors["scale"]
    elif change == "zero scale":
        tensors["scale"][0, 3] = 0
    elif change == "unknown kind":
        meta["kind"] = "zca"
    elif change == "format 3":
        meta["format"] = 3
    else:
        del tensors["scale"]
        meta = {key: value for key, value in meta.items() if key != "kind"} | {"format": 1}
    path.write_bytes(save(tensors, metadata={"layercache_projection": json.dumps(meta)}))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["side_files"]["projection"]["checksum"] = file_checksum(path)
    manifest["side_files"]["projection"]["bytes"] = path.stat().st_size
    (copy / "manifest.json").write_text(json.dumps(manifest))
    expected = ("holds a pca basis where the manifest records project_basis='standardized'"
                if change == "pca in the file" else "is not a projection file this layercache can read")
    with lc.LayerCache.open(copy) as opened, pytest.raises(CacheError, match=re.escape(expected)):
        opened.projection()


@pytest.mark.parametrize("value", ["standardized", "zca"])
def test_a_manifest_with_a_basis_but_no_projection_or_an_unknown_basis_is_damaged(caches, tmp_path, value):
    name = "full" if value == "standardized" else "standardized"
    copy = tmp_path / "cache"
    shutil.copytree(caches[name], copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["storage"]["project_basis"] = value
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CacheError, match=r"is damaged: storage\.project_basis "):
        lc.LayerCache.open(copy)
