"""Issue 26: what is wrong in a run folder is refused where it is read, so every reader refuses alike.

A run config whose task kind was edited by hand (``predict`` failed with an IndexError; ``eval``
refused it) and weights that are NaN (``predict`` printed "0 (nan)" and exited 0; ``eval`` refused)
are refused by the run-config reader and the weights reader, which ``LayerHead.load`` (and through it
``eval``, ``predict`` and the live bundle) uses. And a head from another backbone is named in good
grammar.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from cli_support import assert_refused, invoke
from safetensors.torch import load_file, save_file

from layercache.errors import ConfigError
from layercache.heads import LayerHead, train_head

QUICK = {"tasks": ["sentiment"], "epochs": 1, "progress": False, "device": "cpu"}


def _edit(run: Path, change) -> None:
    config = json.loads((run / "config.json").read_text())
    change(config)
    (run / "config.json").write_text(json.dumps(config))


def _retype(kind: str):
    def change(config):
        config["model"]["tasks"][0]["kind"] = kind
    return change


@pytest.mark.parametrize("kind", ["token", "regression", "opinion"])
def test_a_run_whose_task_kind_was_edited_is_refused_by_every_reader(cache, good_run, tmp_path, kind):
    run = shutil.copytree(good_run, tmp_path / "run")
    _edit(run, _retype(kind))
    with pytest.raises(ConfigError, match="The run config"):
        LayerHead.load(run)
    assert_refused(invoke("eval", run, cache), "The run config", "cannot be used")
    assert_refused(invoke("predict", run, "--", "a fine day"), "The run config", "cannot be used")


def test_nan_weights_are_refused_by_every_reader(cache, good_run, tmp_path):
    run = shutil.copytree(good_run, tmp_path / "run")
    weights = load_file(str(run / "weights.safetensors"))
    name = next(k for k, v in weights.items() if v.is_floating_point() and v.numel() > 1)
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file(weights, str(run / "weights.safetensors"))
    with pytest.raises(ConfigError, match="NaN"):
        LayerHead.load(run)
    assert_refused(invoke("eval", run, cache), "holds NaN", name)
    predicted = invoke("predict", run, "--", "a fine day")
    assert_refused(predicted, "holds NaN", "train the head again")
    assert "nan" not in predicted.stdout


def test_a_head_from_another_backbone_is_named_in_good_grammar(cache, good_run, tmp_path):
    run = shutil.copytree(good_run, tmp_path / "run")
    _edit(run, lambda c: c["cache"].update(model_fingerprint="xxh3_128-files:0123456789abcdef"))
    result = invoke("eval", run, cache)
    assert_refused(result, "was extracted with different backbone weights")
    assert "a different backbone weights" not in " ".join(result.output.split())


def _without_timestamp(file: Path) -> dict:
    config = json.loads(file.read_text())
    config.pop("created_at")
    return config


@pytest.mark.parametrize("mixer", ["last", "adaptive"])
def test_a_loaded_run_saves_the_same_config_it_was_read_from(cache, tmp_path, mixer):
    """Issue 27: LayerHead.load reads config.json through its typed section (heads/run_folders/run_files.py); saving the
    loaded head writes the same config.json, byte for byte but for its timestamp, and the same weights."""
    run = train_head(cache, mixer, out=tmp_path / "run", **QUICK).run
    again = LayerHead.load(run).save(tmp_path / "again")
    first, second = (run / "config.json").read_text(), (again / "config.json").read_text()
    strip = [line for line in first.splitlines() if '"created_at"' not in line]
    assert strip == [line for line in second.splitlines() if '"created_at"' not in line]
    assert (run / "weights.safetensors").read_bytes() == (again / "weights.safetensors").read_bytes()


def test_a_run_saved_before_selection_and_fit_were_recorded_loads_with_their_defaults(good_run, tmp_path):
    run = tmp_path / "old"
    shutil.copytree(good_run, run)
    _edit(run, lambda c: [c.pop(k) for k in ("selection", "fit", "data")])
    head = LayerHead.load(run)
    assert head.fit_ == {"solver": "adamw"} and head.data_ == {}
    assert head.selection_.metrics == LayerHead.load(good_run).selection_.metrics
    assert _without_timestamp(good_run / "config.json")["cache"] == head.cache_info_.to_json()
