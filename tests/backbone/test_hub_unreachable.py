"""A hub model without a reachable hub (issue 36): one sentence at once, never half a minute of retry lines.

Without a network (and without ``HF_HUB_OFFLINE``), a model that does not exist printed ~23 s of
``Retrying in 8s [Retry 4/5]`` before its sentence. Now one connection finds the hub unreachable, only the
local Hugging Face cache is read, and a model it does not hold is refused in one sentence naming the fixes; a
model it holds loads as it would online. The hub is a closed port on this machine (tests/hub_support.py) and
the attempts are counted, not timed.
"""

from __future__ import annotations

import logging
import os
import subprocess

import pytest
from hub_support import (
    attempts_in,
    cached_hub_model,
    closed_port,
    counting_command,
    record_attempts,
    unreachable_hub,
)

from layercache.backbone.loader import load_backbone
from layercache.errors import ModelLoadError

FIXES = ("the Hugging Face Hub cannot be reached (connection refused by 127.0.0.1:",
         "pass a local model folder or the built-in minilm", "HF_HUB_OFFLINE=1")


def test_extract_of_a_missing_hub_model_says_so_at_once(tmp_path):
    """The whole command in a process of its own, the hub's variables read at import as a user's are."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
                                                             "TRANSFORMERS_OFFLINE")}
    endpoint = f"http://127.0.0.1:{closed_port()}"
    env.update(HF_ENDPOINT=endpoint, HF_HUB_CACHE=str(tmp_path / "hub"), LAYERCACHE_HOME=str(tmp_path / "home"))
    report = tmp_path / "attempts"
    done = subprocess.run(counting_command(report, "extract", "nobody/no-such-model", "builtin", "-o",
                                           tmp_path / "cache", "--threads", "1"),
                          env=env, capture_output=True, text=True, timeout=600)
    output = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2, output
    assert "Retry" not in output and "Traceback" not in output
    assert output.count("Error:") == 1 and "Could not load model 'nobody/no-such-model'" in output
    assert all(fix in output for fix in FIXES), output
    host = ("127.0.0.1", int(endpoint.rsplit(":", 1)[1]))
    assert attempts_in(report) == [("lookup", host), ("connect", host)]  # one probe, no request, no retry
    assert not (tmp_path / "cache").exists()


def test_a_missing_hub_model_is_one_sentence_after_one_probe(tmp_path, monkeypatch, caplog):
    unreachable_hub(monkeypatch, hub_cache=tmp_path / "hub")
    attempts = record_attempts(monkeypatch.setattr)
    with caplog.at_level(logging.WARNING), pytest.raises(ModelLoadError) as refused:
        load_backbone("nobody/no-such-model", device="cpu")
    assert all(fix in str(refused.value) for fix in FIXES), refused.value
    assert [kind for kind, _ in attempts] == ["lookup", "connect"]
    assert "Retry" not in caplog.text


def test_a_hub_model_in_the_local_cache_loads_without_the_hub(tiny_models, tmp_path, monkeypatch):
    cached_hub_model(tmp_path / "hub", "org/tiny-bert", tiny_models["bert"])
    unreachable_hub(monkeypatch, hub_cache=tmp_path / "hub")
    attempts = record_attempts(monkeypatch.setattr)
    loaded = load_backbone("org/tiny-bert", device="cpu")
    assert loaded.fingerprint == load_backbone(str(tiny_models["bert"]), device="cpu").fingerprint  # the same files
    assert loaded.name == "org/tiny-bert" and [kind for kind, _ in attempts] == ["lookup", "connect"]

