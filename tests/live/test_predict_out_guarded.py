"""``predict --out`` over every file the command reads or owns (issue 36): refused in one sentence, bytes untouched.

``predict RUN --out MODEL/model.safetensors`` exited 0 and replaced the backbone's weights with JSON lines
(every later ``predict`` then failed on a damaged safetensors header); ``--out RUN/metrics.json`` replaced a
run's own file. Here every file of the run folder, the backbone's folder (a local folder, and a hub id's
folder in the local Hugging Face cache), the cache folder the run records and the input file is given as
``--out``: by its path, through a link to it, through a link to its folder and as a second hard link. Each is
refused with exit code 2 in one sentence before any model is loaded, and every byte of the sandbox is the
same afterwards (fs_support.tree_state). New names inside those folders are refused too.
"""

from __future__ import annotations

import json
import shutil

import pytest
from cli_support import assert_refused, invoke
from fs_support import ALIASES, alias, regular_files, tree_state
from hub_support import cached_hub_model

from layercache.errors import ConfigError
from layercache.live.predict import predict_texts

TEXTS = ["the film was not good", "a fine day in the park"]
EXPECTED = {"runs/topic": {"config.json", "weights.safetensors", "metrics.json", "layer_weights.png"},
            "model": {"config.json", "model.safetensors", "tokenizer.json"},
            "cache": {"manifest.json", "vocab.json", "shard-00000.h5"}}
"""Files each folder must have, so that the test is known to reach the ones that matter."""


@pytest.fixture(scope="module")
def world(tiny_models, live_caches, runs, tmp_path_factory):
    """A sandbox of the test's own: a copy of the tiny BERT, of its cache and of a run trained on it whose config
    names both copies, with the files train-head writes beside the weights, in a sweep folder; an input file;
    a hub cache."""
    root = tmp_path_factory.mktemp("guarded")
    model = shutil.copytree(tiny_models["bert"], root / "model")
    cache = shutil.copytree(live_caches["bert"], root / "cache")
    run = shutil.copytree(runs["bert"]["topic"], root / "runs" / "topic")
    config = json.loads((run / "config.json").read_text())
    config["cache"]["model"], config["data"]["cache"] = str(model), str(cache)
    (run / "config.json").write_text(json.dumps(config))
    (run / "metrics.json").write_text('{"validation": {}}\n')
    (run / "layer_weights.json").write_text('{"mixers": {}}\n')
    (run / "layer_weights.png").write_bytes(b"\x89PNG\r\n\x1a\n a figure")
    (root / "runs" / "sweep.json").write_text('{"runs": ["topic"]}\n')  # the run lies in a sweep folder
    (root / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    cached_hub_model(root / "hub", "org/tiny-bert", model)
    return root


def _refused_untouched(world, out, *args):
    """``predict RUN [args] --out out`` is refused in one sentence and nothing in the sandbox changed."""
    before = tree_state(world)
    result = invoke("predict", world / "runs" / "topic", *args, "--out", out, "--threads", "1")
    assert_refused(result)
    assert result.output.count("Error:") == 1, result.output
    assert tree_state(world) == before, out
    return " ".join(result.output.split())


@pytest.mark.parametrize("how", ALIASES)
@pytest.mark.parametrize("owner", ["runs/topic", "model", "cache"])
def test_every_file_of_a_run_the_backbone_and_the_cache_is_refused(world, tmp_path, owner, how):
    files = regular_files(world / owner)
    assert EXPECTED[owner] <= {f.name for f in files}  # really every file: weights, configs, shards, figures
    for file in files:
        out = alias(file, how, tmp_path / "elsewhere")
        _refused_untouched(world, out, "a text")


@pytest.mark.parametrize("how", ALIASES)
def test_the_input_file_is_refused(world, tmp_path, how):
    text = _refused_untouched(world, alias(world / "texts.txt", how, tmp_path / "elsewhere"), "--file",
                              world / "texts.txt")
    assert "would destroy it" in text or "symbolic link" in text


@pytest.mark.parametrize("owner, name", [("runs/topic", "predictions.jsonl"), ("model", "model.jsonl"),
                                         ("cache", "train/predictions.jsonl"), ("runs", "topic"),
                                         ("runs", "sweep.json"), ("runs", "predictions.jsonl")])
def test_a_new_file_inside_their_folders_is_refused(world, owner, name):
    text = _refused_untouched(world, world / owner / name, "a text")
    assert "which this command reads or owns" in text or "is a folder" in text


def test_the_hub_cache_folder_of_a_hub_backbone_is_refused(world, tmp_path, monkeypatch):
    """``--backbone org/name``: its snapshot's files, the blobs they link to and the refs, before anything loads."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(world / "hub"))
    repo = world / "hub" / "models--org--tiny-bert"
    snapshot = next((repo / "snapshots").iterdir())
    for out in [*sorted(snapshot.iterdir()), *regular_files(repo), snapshot / "predictions.jsonl"]:
        text = _refused_untouched(world, out, "a text", "--backbone", "org/tiny-bert")
        assert "the folder of the backbone 'org/tiny-bert'" in text or "symbolic link" in text
    linked = alias(snapshot / "model.safetensors", "through-a-linked-folder", tmp_path / "elsewhere")
    _refused_untouched(world, linked, "a text", "--backbone", "org/tiny-bert")


def test_the_library_call_refuses_before_loading(world, monkeypatch):
    import layercache.live.bundle as bundle

    def never(*args, **kwargs):
        raise AssertionError("the backbone was loaded")

    monkeypatch.setattr(bundle, "load_backbone", never)
    before = tree_state(world)
    with pytest.raises(ConfigError, match="is inside the folder of the backbone"):
        predict_texts([world / "runs" / "topic"], TEXTS, out=world / "model" / "model.safetensors")
    with pytest.raises(ConfigError, match="is inside the run folder"):
        predict_texts([world / "runs" / "topic"], TEXTS, out=world / "runs" / "topic" / "metrics.json")
    assert tree_state(world) == before


def test_an_output_beside_them_is_written(world, tmp_path):
    out = tmp_path / "predictions.jsonl"
    before = tree_state(world)
    result = invoke("predict", world / "runs" / "topic", *TEXTS, "--out", out, "--threads", "1")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["text"] for line in out.read_text().splitlines()] == TEXTS
    assert tree_state(world) == before
