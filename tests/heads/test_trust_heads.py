"""Issue 13, heads side: a head refuses what it cannot trust, in one sentence with exit code 2.

- NaN / inf in a cache's states (token or pooled) is named by split, row and state; a loss that
  turns non-finite on finite states is reported as divergence; nothing is saved.
- A damaged run folder (sizes, class count, truncated weights, missing keys or tensors, wrong
  types) is refused by ``eval`` and ``LayerHead.load``.
- ``--out`` below a file, or in a place that cannot be written, is refused before training.
- A mixer or head that needs token states is refused on a pooled-only cache, unless
  ``--source pooled:<mode>`` asks for it explicitly (then a warning says so: tests/cli/test_heads.py).
"""

from __future__ import annotations

import json
import os
import shutil

import h5py
import numpy as np
import pytest
from cli_support import assert_refused, invoke
from rich.console import Console
from safetensors.torch import load_file, save_file

import layercache as lc
from layercache.errors import CacheError, ConfigError
from layercache.heads import LayerHead, train_head
from layercache.heads.run_folders.run_files import LayerWeights
from layercache.report.heads import render_layer_weights, render_metrics

QUICK = ("--epochs", "1", "-q", "--task", "sentiment")


@pytest.fixture(scope="module")
def clean_cache(tiny_models, tmp_path_factory):
    """A small token cache (with mean-pooled vectors too), never modified: tests damage copies."""
    out = tmp_path_factory.mktemp("trust") / "cache"
    return lc.extract(str(tiny_models["bert"]), "builtin", out, progress=False, limit=120).path


@pytest.fixture
def cache_copy(clean_cache, tmp_path):
    return shutil.copytree(clean_cache, tmp_path / "cache")


def poison(cache_path, split: str, row: int, state: int, dataset: str = "hidden", value=np.nan) -> str:
    """Overwrite one value of ``row``'s stored states (its first token, or its pooled vector) in place.

    Returns the state's name. The manifest's checksum of the shard no longer matches, which
    ``info --check`` would report; reading for training does not verify checksums.
    """
    with lc.LayerCache.open(cache_path) as opened:
        shard = next(s for s in opened.split_info(split).shards if s.first_row <= row < s.first_row + s.n_examples)
        name = opened.layer_names[state]
    local = row - shard.first_row
    with h5py.File(cache_path / shard.file, "r+") as h:
        position = int(h["offsets"][local]) if dataset == "hidden" else local
        h[dataset][position, state, 3] = value
    return name


# --- 1. non-finite states ------------------------------------------------------------------------
def test_nan_token_state_is_named_by_split_row_and_layer(cache_copy, tmp_path):
    name = poison(cache_copy, "train", row=17, state=2)
    result = invoke("train-head", cache_copy, "--mixer", "attention", *QUICK, "--out", tmp_path / "run")
    assert_refused(result, "not finite", "split 'train', row 17", name, "(NaN)", "re-extract")
    assert not (tmp_path / "run").exists()  # nothing saved


def test_inf_pooled_vector_is_named_by_split_row_and_layer(cache_copy, tmp_path):
    name = poison(cache_copy, "train", row=5, state=1, dataset="pooled/mean", value=np.inf)
    result = invoke("train-head", cache_copy, "--mixer", "scalar", *QUICK, "--out", tmp_path / "run")
    assert_refused(result, "not finite", "split 'train', row 5", name, "(inf)")
    with lc.LayerCache.open(cache_copy) as opened:  # the library call refuses the same way
        with pytest.raises(CacheError, match="row 5"):
            LayerHead("scalar", tasks=["sentiment"], epochs=1, progress=False, device="cpu").fit(opened)


def test_nan_in_validation_and_test_splits_is_refused(cache_copy, tmp_path):
    name = poison(cache_copy, "validation", row=3, state=0, dataset="pooled/mean")
    assert_refused(invoke("train-head", cache_copy, "--mixer", "scalar", *QUICK, "--out", tmp_path / "a"),
                   "split 'validation', row 3", name)
    run = tmp_path / "run"
    assert invoke("train-head", cache_copy, "--mixer", "scalar", *QUICK, "--val-split", "train",
                  "--test-split", "train", "--out", run).exit_code == 0
    poison(cache_copy, "test", row=0, state=1, dataset="pooled/mean")
    assert_refused(invoke("eval", run, cache_copy, "--split", "test"), "split 'test', row 0")


def test_non_finite_manifest_stats_refuse_before_training(cache_copy, tmp_path):
    manifest = json.loads((cache_copy / "manifest.json").read_text())
    stats = manifest["splits"]["train"]["stats"]
    layer = sorted(stats)[0]
    stats[layer]["rms"] = float("inf")
    (cache_copy / "manifest.json").write_text(json.dumps(manifest))
    assert_refused(invoke("train-head", cache_copy, "--mixer", "scalar", *QUICK, "--out", tmp_path / "run"),
                   "not finite in split 'train'", layer, "rms")


def test_divergence_on_finite_states_names_epoch_and_step(clean_cache, tmp_path):
    result = invoke("train-head", clean_cache, "--mixer", "scalar", "--source", "tokens", *QUICK, "--lr", "1e38",
                    "--schedule", "constant", "--out", tmp_path / "run")
    assert_refused(result, "Training diverged at epoch 1", "step", "lower --lr")
    assert not (tmp_path / "run").exists()


def test_renderers_print_nan_instead_of_crashing():
    console = Console(record=True, width=120)
    render_layer_weights(LayerWeights(layer_names=["embeddings", "layer_1", "layer_2"],
                                      mixer_weights={"shared": [float("nan"), 0.5, None]},
                                      usage={"shared": {"mean_depth": float("nan")}}), console)
    render_metrics({"validation": {"intensity": {"pearson": float("nan"), "mse": None, "n": 3},
                                   "sentiment": {"accuracy": float("nan"), "macro_f1": 0.5, "n": 3}}},
                   console, primary={"intensity": "pearson", "sentiment": "accuracy"})
    text = console.export_text()
    assert text.count("nan") >= 4 and "layer_1" in text and "0.500" in text


def test_the_metrics_table_lists_every_scalar_metric_of_a_regression_task():
    console = Console(record=True, width=120)
    render_metrics({"test": {"intensity": {"pearson": 0.9, "spearman": 0.8, "mse": 0.3, "r2": 0.7, "n": 5}}},
                   console, primary={"intensity": "pearson"})
    assert "spearman 0.800, r2 0.700, mse 0.300, n 5" in " ".join(console.export_text().split())


# --- 2. damaged run folders ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def good_run(clean_cache, tmp_path_factory):
    run = tmp_path_factory.mktemp("trust-run") / "run"
    train_head(clean_cache, "scalar", out=run, tasks=["sentiment"], epochs=1, progress=False, device="cpu")
    return run


def _edit_config(run, change):
    config = json.loads((run / "config.json").read_text())
    config = change(config)
    (run / "config.json").write_text(json.dumps(config))


def _more_classes(c):
    c["model"]["tasks"][0]["label_names"].append("neutral")
    return c


def _wider(c):
    c["model"]["dim"] = c["cache"]["hidden_size"] = 2 * c["cache"]["hidden_size"]
    return c


def _truncate_weights(run):
    data = (run / "weights.safetensors").read_bytes()
    (run / "weights.safetensors").write_bytes(data[: len(data) // 2])


def _drop_tensor(run):
    state = load_file(str(run / "weights.safetensors"))
    state.pop(sorted(state)[-1])
    save_file(state, str(run / "weights.safetensors"))


DAMAGES = {
    "more classes": (lambda run: _edit_config(run, _more_classes), "do not fit", "size mismatch"),
    "other hidden size": (lambda run: _edit_config(run, _wider), "do not fit", "size mismatch"),
    "truncated weights": (_truncate_weights, "weights.safetensors cannot be read", "truncated"),
    "missing tensor": (_drop_tensor, "do not fit", "Missing key"),
    "missing key": (lambda run: _edit_config(run, lambda c: {k: v for k, v in c.items() if k != "source"}),
                    "lacks the setting 'source'", "damaged"),
    "not an object": (lambda run: _edit_config(run, lambda c: [c]), "JSON list, not an object", "damaged"),
    "not JSON": (lambda run: (run / "config.json").write_text('{"params": '), "not readable JSON", "damaged"),
    "cache is a string": (lambda run: _edit_config(run, lambda c: {**c, "cache": "elsewhere"}),
                          "'cache' is a str, not a dict", "damaged"),
    "layer names a string": (lambda run: _edit_config(run, lambda c: {**c, "layer_names": "embeddings"}),
                             "'layer_names' is a str", "damaged"),
    "states count": (lambda run: _edit_config(run, lambda c: {**c, "layer_names": c["layer_names"][:-1]}),
                     "names 2 states", "damaged"),
    "selection a string": (lambda run: _edit_config(run, lambda c: {**c, "selection": "accuracy"}),
                           "'selection' is not an object", "damaged"),
    "fit a list": (lambda run: _edit_config(run, lambda c: {**c, "fit": ["adamw"]}), "'fit' is not an object",
                   "damaged"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_run_folder_is_refused_in_one_sentence(good_run, clean_cache, tmp_path, damage):
    apply, *fragments = DAMAGES[damage]
    run = shutil.copytree(good_run, tmp_path / "run")
    apply(run)
    assert_refused(invoke("eval", run, clean_cache), *fragments)
    with pytest.raises(ConfigError):
        LayerHead.load(run)


def test_paths_in_a_run_config_are_never_opened(good_run, clean_cache, tmp_path):
    run = shutil.copytree(good_run, tmp_path / "run")
    _edit_config(run, lambda c: {**c, "data": {**c["data"], "cache": "/nonexistent/../../etc"}})
    result = invoke("eval", run, clean_cache, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["cache"] == str(clean_cache)


# --- 3. run folders that cannot be written ------------------------------------------------------------------
def test_out_below_a_file_or_on_a_file_is_refused_before_training(clean_cache, tmp_path):
    note = tmp_path / "somefile.txt"
    note.write_text("notes\n")
    assert_refused(invoke("train-head", clean_cache, "--mixer", "last", *QUICK, "--out", note / "run"),
                   f"lies below {note}", "which is a file")
    assert_refused(invoke("train-head", clean_cache, "--mixer", "last", *QUICK, "--out", note),
                   f"--out {note} is a file")
    head = LayerHead.load(_trained(clean_cache, tmp_path))
    with pytest.raises(ConfigError, match="a file stands on its path"):
        head.save(note / "run")


def _trained(cache_path, tmp_path):
    return train_head(cache_path, "last", out=tmp_path / "ok", tasks=["sentiment"], epochs=1, progress=False,
                      device="cpu").run


def test_unwritable_run_location_is_refused(clean_cache, tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, *a, **k: False if str(p).startswith(str(locked))
                        else real_access(p, mode, *a, **k))
    assert_refused(invoke("train-head", clean_cache, "--mixer", "last", *QUICK, "--out", locked / "run"),
                   "cannot be written", "not writable", "choose another --out")
    assert not (locked / "run").exists()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_folder_is_refused(clean_cache, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        assert_refused(invoke("train-head", clean_cache, "--mixer", "last", *QUICK, "--out", locked / "run"),
                       "not writable")
    finally:
        locked.chmod(0o755)


# --- 4. token-only models on a pooled-only cache -----------------------------------------------------------
@pytest.mark.parametrize("args, what", [
    (("--mixer", "attention"), "The mixer 'attention'"),
    (("--mixer", "act"), "The mixer 'act'"),
    (("--mixer", "layer:1", "--head-option", "pooling=attention"), "pooling=attention"),
])
def test_token_models_on_pooled_only_cache_are_refused(pooled_cache, tmp_path, args, what):
    result = invoke("train-head", pooled_cache, *args, *QUICK, "--out", tmp_path / "run")
    assert_refused(result, what, "needs token states but the cache holds pooled vectors only",
                   "--store tokens", "(last, layer:<i>, or scalar", "--source pooled:mean")


def test_nan_at_a_token_the_loss_ignores_is_still_named(cache_copy, tmp_path):
    # The first token is a special token without a word label: the token loss skips it, but its
    # NaN still reaches the weights through the gradient, and a later (clean) batch's loss is NaN.
    name = poison(cache_copy, "train", row=40, state=1)
    result = invoke("train-head", cache_copy, "--mixer", "scalar", "--task", "negation_scope", "--epochs", "1",
                    "-q", "--out", tmp_path / "run")
    assert_refused(result, "split 'train', row 40", name, "(NaN)")
