"""`layercache train-head` and `layercache eval` through the real command line."""

from __future__ import annotations

import json

import pytest
from cli_support import assert_refused, invoke

import layercache as lc

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread, as in tests/heads


@pytest.fixture
def cache(tiny_models, tmp_path):
    """A small labelled cache, recorded as the most recent one."""
    return lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "cache", progress=False, limit=120).path


def test_train_head_defaults_then_eval(cache):
    result = invoke("train-head", "--epochs", "2", "--quiet", "--mixer", "scalar")  # cache: the latest one
    assert result.exit_code == 0, result.output
    run = cache.parent / "cache.runs" / "scalar-001"
    assert f"Run written: {run}" in result.output
    for name in ("config.json", "weights.safetensors", "metrics.json", "layer_weights.json", "layer_weights.png"):
        assert (run / name).is_file(), name
    for fact in ("negation_scope", "macro_f1", "sentiment", "accuracy", "intensity", "pearson", "layer weights",
                 "embeddings", "test", "validation"):
        assert fact in result.output, fact
    config = json.loads((run / "config.json").read_text())
    assert config["cache"]["model_fingerprint"] == lc.LayerCache.open(cache).manifest.model.fingerprint
    metrics = json.loads((run / "metrics.json").read_text())
    assert set(metrics["test"]) == {"topic", "sentiment", "negation_scope", "intensity"}

    scored = invoke("eval", run, cache, "--split", "test", "--json")
    assert scored.exit_code == 0, scored.output
    again = json.loads(scored.stdout)["metrics"]
    assert again["sentiment"]["accuracy"] == pytest.approx(metrics["test"]["sentiment"]["accuracy"])

    second = invoke("train-head", cache, "--epochs", "1", "-q", "--mixer", "layer:2", "--task", "sentiment",
                    "--head-option", "pooling=attention", "--lr", "0.01")
    assert second.exit_code == 0, second.output
    assert (cache.parent / "cache.runs" / "layer2-001" / "config.json").is_file()


def test_mixer_options_reach_the_mixer(cache, tmp_path):
    result = invoke("train-head", cache, "--mixer", "adaptive", "--mixer-option", "k=8", "--mixer-option",
                    "alpha=20", "--task", "sentiment", "--epochs", "1", "-q", "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    options = json.loads((tmp_path / "run" / "config.json").read_text())["model"]["mixer_options"]
    assert options == {"k": 8, "alpha": 20}


def test_bad_inputs_exit_2_with_one_sentence(cache, tiny_models, tmp_path):
    assert_refused(invoke("train-head", cache, "--mixer", "mean"), "unknown mixer 'mean'", "adaptive", "act")
    assert_refused(invoke("train-head", cache, "--mixer", "layer:9"), "layer")
    assert_refused(invoke("train-head", cache, "--mixer", "adaptive", "--mixer-option", "width=3"),
                   "does not take option(s) width")
    assert_refused(invoke("train-head", cache, "--task", "genre"), "no task 'genre'", "sentiment")
    assert_refused(invoke("train-head", cache, "--val-split", "dev"), "no split 'dev'", "train, validation, test")
    assert_refused(invoke("train-head", cache, "--loss-weight", "sentiment=high"), "needs a number")
    assert_refused(invoke("train-head", cache, "--schedule", "steps", "-q"), "Unknown schedule")
    assert_refused(invoke("train-head", tmp_path / "nowhere"), "No cache at")
    pooled = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "pooled", progress=False, limit=20,
                        store="pooled").path
    assert_refused(invoke("train-head", pooled, "--task", "negation_scope"), "needs token states")
    run = tmp_path / "run"
    assert invoke("train-head", cache, "--task", "sentiment", "--mixer", "last", "--epochs", "1", "-q",
                  "--out", run).exit_code == 0
    assert_refused(invoke("train-head", cache, "--out", run), "not empty", "--overwrite")
    assert_refused(invoke("eval", run, cache, "--split", "dev"), "no split 'dev'")
    assert_refused(invoke("eval", tmp_path, cache), "not a layercache run folder")
    other = lc.extract(str(tiny_models["gpt2"]), "builtin", tmp_path / "other", progress=False, limit=20).path
    assert_refused(invoke("eval", run, other), "different backbone weights")
