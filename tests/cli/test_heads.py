"""`layercache train-head` and `layercache eval` through the real command line."""

from __future__ import annotations

import json

import pytest
from cli_support import assert_refused, invoke
from planted_support import SIGNAL, plant_linear_signals

import layercache as lc

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread, as in tests/heads
PLANTED = ("convex", 400)  # the planted cache of the root conftest (as tests/heads/test_convex_fit.py plants it)
plant = plant_linear_signals
QUICK = ("--epochs", "1", "-q", "--task", "sentiment")


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


def test_cli_solver_option(planted_path, tmp_path):
    refused = invoke("train-head", planted_path, "--mixer", "adaptive", "--solver", "lbfgs", "--task", "sentiment",
                     "-q", "--out", tmp_path / "no")
    assert_refused(refused, "--solver lbfgs fits a linear head on fixed features, but the mixer 'adaptive' learns",
                   "use --solver adamw")
    assert not (tmp_path / "no").exists()
    done = invoke("train-head", planted_path, "--mixer", f"layer:{SIGNAL}", "--solver", "lbfgs", "--task", "topic",
                  "-q", "--out", tmp_path / "run")
    assert done.exit_code == 0, done.output
    text = " ".join(done.output.split())
    assert "fitted by L-BFGS, C=" in text and "chosen on validation by accuracy" in text
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["fit"]["solver"] == "lbfgs"


def test_train_head_command_takes_and_prints_normalize(massive_paths, tmp_path):
    cache = massive_paths["plain"]
    result = invoke("train-head", cache, "--mixer", "scalar", "--task", "sentiment", "--epochs", "1", "-q",
                    "--out", tmp_path / "auto")
    assert result.exit_code == 0, result.output
    assert "normalize standardize" in " ".join(result.output.split())
    assert json.loads((tmp_path / "auto" / "metrics.json").read_text())["normalize"] == "standardize"
    result = invoke("train-head", cache, "--mixer", "scalar", "--task", "sentiment", "--epochs", "1", "-q",
                    "--normalize", "none", "--out", tmp_path / "none")
    assert result.exit_code == 0, result.output
    assert "normalize none" in " ".join(result.output.split())
    assert_refused(invoke("train-head", cache, "--normalize", "zscore", "-q"), "Unknown normalize 'zscore'",
                   "standardize")


def test_explicit_pooled_source_runs_with_a_warning(pooled_cache, tmp_path):
    run = tmp_path / "run"
    result = invoke("train-head", pooled_cache, "--mixer", "attention", "--source", "pooled:mean", *QUICK,
                    "--out", run)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "runs on one pooled vector per example" in text
    note = json.loads((run / "metrics.json").read_text())["data"]["source_note"]
    assert "attention" in note and "one pooled vector per example" in note
    linear = invoke("train-head", pooled_cache, "--mixer", "scalar", *QUICK, "--out", tmp_path / "linear")
    assert linear.exit_code == 0 and "pooled vector per example" not in linear.output


def test_train_head_seeds_writes_an_ensemble_run_that_eval_reads(cache, tmp_path):
    # its layer weights name every member's mixer
    run = tmp_path / "run"
    result = invoke("train-head", cache, "--mixer", "scalar", "--seeds", 2, "--epochs", 2, "--patience", 0,
                    "--out", run, "--quiet")
    assert result.exit_code == 0, result.output
    assert "2 seeds averaged" in result.output
    weights = json.loads((run / "layer_weights.json").read_text())
    assert set(weights["mixers"]) == {"shared[0]", "shared[1]"}
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["fit"]["seeds"] == [0, 1] and len(metrics["history"]["members"]) == 2
    evaluated = invoke("eval", run, cache, "--json")
    assert evaluated.exit_code == 0, evaluated.output
