"""`train-head --metric` and `--class-weight` through the real command line, and their refusals."""

from __future__ import annotations

import json

import pytest
from cli_support import assert_refused, invoke

import layercache as lc

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread, as in tests/heads


@pytest.fixture(scope="module")
def cache(tiny_models, tmp_path_factory):
    """A small labelled cache."""
    out = tmp_path_factory.mktemp("cli-selection") / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(out.parent / "home"))
        return lc.extract(str(tiny_models["bert"]), "builtin", out, progress=False, limit=120).path


def test_metric_and_class_weight_reach_the_run_and_its_output(cache, tmp_path):
    run = tmp_path / "run"
    result = invoke("train-head", cache, "--mixer", "scalar", "--task", "sentiment,negation_scope", "--epochs", "2",
                    "-q", "--metric", "sentiment=mcc", "--class-weight", "balanced", "--out", run)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "by mean of sentiment mcc, negation_scope macro_f1" in text
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["selection"]["metric"] == {"sentiment": "mcc", "negation_scope": "macro_f1"}
    assert metrics["selection"]["reason"]["sentiment"] == "asked"
    assert isinstance(metrics["warnings"], list)
    config = json.loads((run / "config.json").read_text())
    assert config["params"]["metric"] == {"sentiment": "mcc"} and config["params"]["class_weight"] == "balanced"
    assert set(config["model"]["class_weights"]) == {"sentiment", "negation_scope"}
    scored = invoke("eval", run, cache, "--split", "test", "--json")
    assert scored.exit_code == 0, scored.output
    assert json.loads(scored.stdout)["primary"] == {"sentiment": "mcc", "negation_scope": "macro_f1"}


def test_explicit_class_weights_by_name_and_index(cache, tmp_path):
    result = invoke("train-head", cache, "--mixer", "last", "--task", "sentiment,negation_scope", "--epochs", "1",
                    "-q", "--class-weight", "negation_scope:O=0.5,2=3", "--class-weight", "sentiment:balanced",
                    "--metric", "mcc", "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert "by mean of sentiment mcc, negation_scope mcc" in " ".join(result.output.split())
    weights = json.loads((tmp_path / "run" / "config.json").read_text())["model"]["class_weights"]
    assert weights["negation_scope"] == [0.5, 1.0, 3.0]


@pytest.mark.parametrize(("args", "fragments"), [
    (["--metric", "f1"], ["Unknown selection metric 'f1'; choose one of accuracy, macro_f1, mcc"]),
    (["--task", "sentiment", "--metric", "pearson"],
     ["'pearson' does not apply to task 'sentiment' (sequence classification)", "accuracy, macro_f1, mcc"]),
    (["--task", "sentiment,intensity", "--metric", "mcc"], ["--metric intensity=NAME"]),
    (["--metric", "mcc", "--metric", "sentiment=mcc"], ["--metric takes one NAME for every task or TASK=NAME"]),
    (["--task", "sentiment", "--metric", "topic=mcc"], ["names unknown task 'topic'"]),
    (["--task", "sentiment", "--class-weight", "neutral=2"],
     ["Task 'sentiment' has no class 'neutral'; its classes are negative, positive"]),
    (["--task", "sentiment", "--class-weight", "positive=high"], ["--class-weight positive='high' needs a number"]),
    (["--task", "sentiment", "--class-weight", "positive=0"], ["give a positive number"]),
    (["--task", "sentiment", "--class-weight", "inverse"], ["Unknown class weight 'inverse'"]),
    (["--task", "intensity", "--class-weight", "balanced"], ["this head has none; drop --class-weight"]),
    (["--class-weight", "positive=2"], ["name the task"]),
    (["--class-weight", "balanced", "--class-weight", "sentiment:balanced"], ["names no task"]),
])
def test_bad_values_exit_2_with_one_sentence(cache, tmp_path, args, fragments):
    result = invoke("train-head", cache, "--epochs", "1", "-q", "--out", tmp_path / "run", *args)
    assert_refused(result, *fragments)
    assert not (tmp_path / "run" / "weights.safetensors").exists()  # refused before training
