"""A backbone split over devices (``--device-map``): the same states, caches, checks and predictions as one on a
single device, with the disk-offloaded weights in a temporary folder that goes away.

This machine has no GPU, so the split here is CPU memory plus disk: blocks that fit under ``max_memory``
stay in memory, the rest are offloaded to disk and brought to the CPU block by block. That is the path
that lets a model larger than every device run at all; several GPUs take the same code with more devices.

Nothing here depends on what else runs on the machine: each test counts the offload folders of its own
temporary folder (another process's extraction or test run makes and removes its own in the system's), and
torch computes on one thread, so the bitwise comparisons never set two calls that each chose their threads
from the load against each other.
"""

from __future__ import annotations

import gc
import glob
import os
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

pytest.importorskip("accelerate")

from cli_support import assert_refused, invoke  # noqa: E402

import layercache  # noqa: E402
from layercache.backbone.loader import load_backbone  # noqa: E402
from layercache.backbone.placement import memory_limits, tokens_of  # noqa: E402
from layercache.errors import ConfigError  # noqa: E402
from layercache.live.predict import predict_texts  # noqa: E402
from layercache.live.verify import verify_cache  # noqa: E402

TEXTS = ["the film was not good", "a fine day", "every word of it"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def own_temporary_folder(tmp_path, monkeypatch):
    """The test's own TMPDIR: the offload folders counted are this test's, whatever other processes make."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _most_of_the_weights(folder: Path) -> dict[str, int]:
    """A CPU limit of 90 % of the checkpoint's bytes: the first blocks stay in memory, the rest go to disk
    (accelerate keeps room for the largest block, so a lower limit sends every block to disk)."""
    return {"cpu": int((folder / "model.safetensors").stat().st_size * 0.9)}


def _offload_folders() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "layercache-offload-*")))


@pytest.mark.parametrize("kind", ["bert", "llama", "t5"])
def test_split_model_gives_the_states_of_a_whole_one(tiny_models, kind):
    before = _offload_folders()
    whole = load_backbone(str(tiny_models[kind]), device="cpu")
    split = load_backbone(str(tiny_models[kind]), device_map="auto", max_memory=_most_of_the_weights(tiny_models[kind]))
    assert set(split.placement) == {"cpu", "disk"}, split.placement  # really split, both ways
    assert split.fingerprint == whole.fingerprint and split.device == torch.device("cpu")
    enc = whole.tokenizer(TEXTS, padding=True, return_tensors="pt")
    for a, b in zip(whole.hidden_states(enc["input_ids"], enc["attention_mask"]),
                    split.hidden_states(enc["input_ids"], enc["attention_mask"])):
        assert torch.equal(a, b)
    assert len(_offload_folders() - before) == 1  # the offloaded weights, in a folder of its own
    del split
    gc.collect()
    assert _offload_folders() == before  # removed with the backbone


def test_split_extraction_writes_the_same_cache(tiny_models, tmp_path):
    model = tiny_models["bert"]
    whole = layercache.extract(str(model), "builtin", tmp_path / "whole", limit=30, storage_dtype="int8",
                               progress=False)
    split = layercache.extract(str(model), "builtin", tmp_path / "split", limit=30, storage_dtype="int8",
                               device_map="auto", max_memory=_most_of_the_weights(model), progress=False)
    a, b = layercache.LayerCache.open(whole.path), layercache.LayerCache.open(split.path)
    assert a.manifest.config_hash == b.manifest.config_hash  # where the model ran is not its configuration
    assert set(b.manifest.model.placement) == {"cpu", "disk"} and a.manifest.model.placement is None
    for shard in sorted(Path(whole.path).glob("*/shard-*.h5")):
        other = Path(split.path) / shard.parent.name / shard.name
        with h5py.File(shard) as x, h5py.File(other) as y:
            for name in ("hidden", "scales/hidden", "pooled/mean", "example_index"):
                assert np.array_equal(x[name][()], y[name][()]), (shard, name)
    result = verify_cache(split.path, sample=4, device_map="auto", max_memory=_most_of_the_weights(model))
    assert result.passed, result.failure
    shown = " ".join(invoke("info", split.path).output.split())
    assert "split by --device-map (" in shown and " on disk)" in shown


def test_split_predict_equals_whole(runs, tiny_models):
    run = runs["bert"]["sentiment"]
    whole = predict_texts([run], TEXTS, device="cpu").rows()
    split = predict_texts([run], TEXTS, device_map="auto", max_memory=_most_of_the_weights(tiny_models["bert"])).rows()
    assert split == whole


def test_tokens_of_takes_rows_where_the_state_lies():
    state = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)  # (R, W, D)
    index = torch.tensor([0, 4, 5])
    assert torch.equal(tokens_of(state, index, torch.device("cpu")), state.reshape(6, 4)[index])


@pytest.mark.parametrize("limits, fragment", [
    ({"gpu": "2GiB"}, "names the device 'gpu'"),
    ({"cpu": -1}, "give a size such as 20GiB"),
    ({"cuda:x": 10}, "name devices cuda:N (or N), cpu"),
])
def test_memory_limits_refused(limits, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        memory_limits(limits)


def test_memory_limits_read_as_accelerate_writes_them(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert memory_limits({"cuda:1": "20GiB", "0": 5e9, "CPU": 7}) == {1: "20GiB", 0: 5_000_000_000, "cpu": 7}
    with pytest.raises(ConfigError, match="names cuda:2, but torch sees 2 GPU"):
        memory_limits({"cuda:2": "20GiB"})


def test_device_map_refusals(tiny_models, runs, tmp_path):
    model = str(tiny_models["bert"])
    assert_refused(invoke("extract", model, "builtin", "-o", tmp_path / "c", "--device", "cpu", "--device-map",
                          "auto"), "--device cpu and --device-map auto both place the model")
    assert_refused(invoke("predict", runs["bert"]["sentiment"], "a text", "--device-map", "sideways"),
                   "--device-map 'sideways' is not a placement", "auto, balanced")
    assert_refused(invoke("verify", tmp_path / "nothing", "--device-map", "auto", "--max-memory", "cpu"),
                   "--max-memory 'cpu' should look like DEVICE=SIZE")
    before = _offload_folders()
    if not torch.cuda.is_available():  # a GPU limit on a machine without one: refused before anything is written
        assert_refused(invoke("extract", model, "builtin", "-o", tmp_path / "c", "--device-map", "auto",
                              "--max-memory", "cuda:0=1GB"), "names cuda:0, but torch sees 0 GPU(s)")
    assert _offload_folders() == before
    assert not (tmp_path / "c").exists()


def test_torchrun_ranks_with_a_device_map_are_refused(tmp_path):
    from layercache.extraction.distributed import World, extract_on_ranks
    from layercache.extraction.specs import BatchSpec, DataSpec, StorageSpec

    with pytest.raises(ConfigError, match=r"run one process with device_map=\.\.\."):
        extract_on_ranks("minilm", DataSpec(), StorageSpec(), BatchSpec(device_map="auto"), tmp_path / "c", ["mean"],
                         World(rank=0, size=2, local_rank=0), overwrite=False, repair=False, allow_pickle=False,
                         progress=False)
    assert not (tmp_path / "c").exists()


def test_extract_verify_and_predict_say_how_the_model_was_split(tiny_models, runs, tmp_path):
    """One line on stderr: per device, how many parts of the model and how many bytes (issue 36)."""
    model = tiny_models["bert"]
    limits = [f"cpu={_most_of_the_weights(model)['cpu']}"]
    split = ["--device-map", "auto", "--max-memory", *limits, "--threads", "1"]
    commands = {"extract": ["extract", model, "builtin", "-o", tmp_path / "cache", "--limit", "4"],
                "verify": ["verify", tmp_path / "cache", "--sample", "2"],
                "predict": ["predict", runs["bert"]["sentiment"], "a fine day"]}
    for name, args in commands.items():
        result = invoke(*args, *split)
        assert result.exit_code == 0, result.output
        shown = " ".join(result.output.split())
        assert "--device-map auto split the model: cpu 1 part (" in shown, (name, shown)
        assert " disk 2 parts (" in shown and "the parts on disk are brought to cpu block by block" in shown
