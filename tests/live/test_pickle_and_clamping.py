"""--allow-pickle for a pickle-only model's cache: verify, predict, train-head --live; verify counts clamped values."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from cli_support import assert_refused, invoke
from safetensors.torch import load_file

import layercache as lc
from layercache.live import LiveBundle, parity, verify_cache
from layercache.live.predict import predict_texts
from layercache.store.dtypes import FP16_MAX


@pytest.fixture(scope="module")
def pickle_cache(tiny_models, tmp_path_factory):
    """The tiny BERT with its weights as pytorch_model.bin only, a cache extracted with allow_pickle, a run on it."""
    root = tmp_path_factory.mktemp("pickle")
    model = root / "bert-pickle"
    shutil.copytree(tiny_models["bert"], model)
    torch.save(load_file(model / "model.safetensors"), model / "pytorch_model.bin")
    (model / "model.safetensors").unlink()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        cache = lc.extract(str(model), "builtin", root / "cache", limit=16, progress=False, allow_pickle=True).path
    head = lc.LayerHead("last", tasks=["topic"], layers=["layer_1"], progress=False).fit(lc.LayerCache.open(cache))
    return cache, head.save(root / "run")


def test_verify_takes_allow_pickle(pickle_cache):
    cache, run = pickle_cache
    assert_refused(invoke("verify", cache, "--sample", "2", "--threads", "1"), "pickle", "--allow-pickle")
    result = invoke("verify", cache, "--sample", "2", "--threads", "1", "--allow-pickle", "--json", "--run", run)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["passed"] is True
    assert verify_cache(cache, sample=2, allow_pickle=True).passed
    assert parity(run, cache, "test", rows=[0, 1], allow_pickle=True).agreement == 1.0


def test_predict_takes_allow_pickle(pickle_cache):
    _, run = pickle_cache
    assert_refused(invoke("predict", run, "a fine day", "--threads", "1"), "pickle", "--allow-pickle")
    result = invoke("predict", run, "a fine day", "--threads", "1", "--allow-pickle")
    assert result.exit_code == 0, result.output
    assert "Predictions" in result.output
    assert predict_texts([run], ["a fine day"], allow_pickle=True).texts == ["a fine day"]
    assert LiveBundle.from_runs([run], allow_pickle=True).predict(["a fine day"]).texts == ["a fine day"]


def test_train_head_live_takes_allow_pickle(pickle_cache, tmp_path):
    cache, _ = pickle_cache
    args = ("train-head", cache, "--live", "--mixer", "last", "--task", "topic", "--layers", "layer_1",
            "--threads", "1", "--quiet")
    assert_refused(invoke(*args, "--out", tmp_path / "refused"), "pickle", "--allow-pickle")
    assert not (tmp_path / "refused").exists()
    result = invoke(*args, "--out", tmp_path / "run", "--allow-pickle")
    assert result.exit_code == 0, result.output
    assert "live backbone" in result.output and "Run written" in result.output
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["data"]["trained"] == "live"
    assert lc.LayerHead.load(tmp_path / "run").mixer == "last"
    # Without --live no backbone is loaded: the flag would do nothing, so it is refused rather than ignored.
    assert_refused(invoke("train-head", cache, "--allow-pickle", "--out", tmp_path / "cached", "--quiet"),
                   "--allow-pickle loads the cache's backbone", "add --live")
    assert not (tmp_path / "cached").exists()


@pytest.fixture(scope="module")
def huge_cache(tiny_models, tmp_path_factory):
    """The tiny Llama with states far beyond the float16 range before its final norm, cached as float16."""
    import transformers

    root = tmp_path_factory.mktemp("huge")
    folder = root / "huge-llama"
    model = transformers.AutoModel.from_pretrained(tiny_models["llama"])
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(1e7)
    model.save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(tiny_models["llama"]).save_pretrained(folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        return lc.extract(str(folder), "builtin", root / "cache", limit=6, progress=False, storage_dtype="float16",
                          splits=["train"]).path


def test_verify_says_how_many_values_were_clamped(huge_cache):
    manifest = lc.read_manifest(huge_cache)
    assert manifest.storage.dtype == "float16" and manifest.extraction.overflow > 0
    n = manifest.splits["train"].n_examples
    result = verify_cache(huge_cache, sample=n)  # every row: the count covers what extraction clamped
    tokens = sum(r.clamped for r in result.rows if r.what == "tokens")
    assert tokens == manifest.extraction.overflow
    assert result.clamped >= tokens and result.clamped == sum(r.clamped for r in result.rows)
    as_json = invoke("verify", huge_cache, "--sample", str(n), "--json", "--threads", "1")
    data = json.loads(as_json.stdout)
    assert data["clamped"] == result.clamped and data["overflow_at_extraction"] == manifest.extraction.overflow
    assert f"{result.clamped:,} of" in data["clamping"]
    text = invoke("verify", huge_cache, "--sample", str(n), "--threads", "1")
    said = " ".join(text.output.split())
    assert f"{result.clamped:,} of {result.compared:,} fresh values" in said
    assert f"clamped to ±{FP16_MAX:,.0f}" in said and "--storage-dtype bfloat16" in said


def test_verify_of_an_unclamped_cache_says_none_was(live_caches):
    result = verify_cache(live_caches["bert"], sample=2)
    assert result.clamped == 0 and "none was clamped" in result.clamping()
    assert result.to_json()["clamping"] == result.clamping()
