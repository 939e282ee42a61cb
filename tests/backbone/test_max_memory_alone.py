"""``--max-memory`` without ``--device-map`` is refused (issue 36): only a split model has per-device limits, and
the option used to be ignored without a word, the model loaded whole wherever ``--device`` put it.

The command line refuses it before anything is read or loaded; the library calls refuse it too, before the
model loads and before any folder is written.
"""

from __future__ import annotations

import pytest
from cli_support import assert_refused, invoke

import layercache
from layercache.backbone.loader import load_backbone
from layercache.errors import ConfigError
from layercache.live.predict import predict_texts

REFUSAL = ("--max-memory limits what --device-map puts on each device", "add --device-map auto")
LIBRARY_REFUSAL = (r"max_memory=\.\.\. limits what device_map=\.\.\. puts on each device, and no device_map=\.\.\. "
                   "was given")
"""The same sentence to a Python caller: the keywords of the call, not the command's flags."""


@pytest.mark.parametrize("command", [
    ["extract", "{model}", "builtin", "-o", "{out}"],
    ["plan", "{model}", "builtin", "-o", "{out}"],
    ["verify", "{out}"],
    ["predict", "{out}", "a text"],
])
def test_every_command_refuses_max_memory_without_a_device_map(tiny_models, tmp_path, command):
    out = tmp_path / "out"
    args = [a.format(model=tiny_models["bert"], out=out) for a in command]
    assert_refused(invoke(*args, "--max-memory", "cpu=1GiB"), *REFUSAL)
    assert_refused(invoke(*args, "--device", "cpu", "--max-memory", "cpu=1GiB", "--max-memory", "cuda:0=2GiB"),
                   *REFUSAL)
    assert not out.exists()


def test_the_library_refuses_it_before_loading_or_writing(tiny_models, tmp_path):
    model = str(tiny_models["bert"])
    with pytest.raises(ConfigError, match=LIBRARY_REFUSAL) as refused:
        load_backbone(model, device="cpu", max_memory={"cpu": "1GiB"})
    assert "--" not in str(refused.value) and "add device_map='auto'" in str(refused.value)
    with pytest.raises(ConfigError, match=LIBRARY_REFUSAL):
        layercache.extract(model, "builtin", tmp_path / "cache", limit=4, max_memory={"cpu": 10**9}, progress=False)
    assert not (tmp_path / "cache").exists()
    with pytest.raises(ConfigError, match=LIBRARY_REFUSAL):  # before the runs are even read
        predict_texts([tmp_path / "no-run"], ["a text"], max_memory={"cpu": 10**9})


def test_no_limits_is_no_refusal(tiny_models):
    """An empty mapping (no --max-memory) loads as before."""
    assert load_backbone(str(tiny_models["bert"]), device="cpu", max_memory={}).placement is None
