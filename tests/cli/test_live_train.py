"""``layercache train-head --live``: a minibatch-trained (scalar) and a pooled run written by the command, with
the backbone in the loop. train_head_live itself is tested in tests/live/test_train_live.py; the caches are the
root conftest's."""

from __future__ import annotations

import json

import pytest
from cli_support import invoke

import layercache as lc

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread, as in tests/live


def test_train_head_live_minibatch_and_cli(live_caches, tmp_path):
    out = invoke("train-head", live_caches["bert"], "--live", "--mixer", "scalar", "--task", "negation_scope",
                 "--epochs", "1", "--out", tmp_path / "run", "--quiet")
    assert out.exit_code == 0, out.output
    assert "live backbone" in out.output
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["data"]["trained"] == "live"
    assert 0.0 <= metrics["validation"]["negation_scope"]["macro_f1"] <= 1.0
    lc.LayerHead.load(tmp_path / "run")  # a loadable run folder

    pooled = invoke("train-head", live_caches["gpt2"], "--live", "--mixer", "last", "--task", "topic",
                    "--source", "pooled:mean", "--out", tmp_path / "pooled")
    assert pooled.exit_code == 0, pooled.output
