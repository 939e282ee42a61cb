"""--allow-pickle on the commands that load a cache's backbone (verify, predict, train-head --live), refused
without it; verify's JSON and table say how many values were clamped. The caches (pickle_cache, huge_cache) are
the root conftest's, shared with tests/live/test_pickle_and_clamping.py."""

from __future__ import annotations

import json

import pytest
from cli_support import assert_refused, invoke

import layercache as lc
from layercache.live import verify_cache
from layercache.store.codecs.float16 import FP16_MAX

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread, as in tests/live


def test_verify_takes_allow_pickle(pickle_cache):
    cache, run = pickle_cache
    assert_refused(invoke("verify", cache, "--sample", "2", "--threads", "1"), "pickle", "--allow-pickle")
    result = invoke("verify", cache, "--sample", "2", "--threads", "1", "--allow-pickle", "--json", "--run", run)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["passed"] is True


def test_predict_takes_allow_pickle(pickle_cache):
    _, run = pickle_cache
    assert_refused(invoke("predict", run, "a fine day", "--threads", "1"), "pickle", "--allow-pickle")
    result = invoke("predict", run, "a fine day", "--threads", "1", "--allow-pickle")
    assert result.exit_code == 0, result.output
    assert "Predictions" in result.output


def test_train_head_live_takes_allow_pickle(pickle_cache, tmp_path):
    cache, _ = pickle_cache
    args = ("train-head", cache, "--live", "--mixer", "last", "--task", "topic", "--layers", "layer_1",
            "--threads", "1", "--quiet")
    assert_refused(invoke(*args, "--out", tmp_path / "refused"), "pickle", "--allow-pickle")
    assert not (tmp_path / "refused").exists()
    result = invoke(*args, "--out", tmp_path / "run", "--allow-pickle")
    assert result.exit_code == 0, result.output
    assert "live backbone" in result.output and "Run written" in result.output
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["data"]["trained"] == "live"
    assert lc.LayerHead.load(tmp_path / "run").mixer == "last"
    # Without --live no backbone is loaded: the flag would do nothing, so it is refused rather than ignored.
    assert_refused(invoke("train-head", cache, "--allow-pickle", "--out", tmp_path / "cached", "--quiet"),
                   "--allow-pickle loads the cache's backbone", "add --live")
    assert not (tmp_path / "cached").exists()


def test_verify_says_how_many_values_were_clamped(huge_cache):
    manifest = lc.read_manifest(huge_cache)
    n = manifest.splits["train"].n_examples
    result = verify_cache(huge_cache, sample=n)  # what the command's JSON and table must say
    as_json = invoke("verify", huge_cache, "--sample", str(n), "--json", "--threads", "1")
    data = json.loads(as_json.stdout)
    assert data["clamped"] == result.clamped and data["overflow_at_extraction"] == manifest.extraction.overflow
    assert f"{result.clamped:,} of" in data["clamping"]
    text = invoke("verify", huge_cache, "--sample", str(n), "--threads", "1")
    said = " ".join(text.output.split())
    assert f"{result.clamped:,} of {result.compared:,} fresh values" in said
    assert f"clamped to ±{FP16_MAX:,.0f}" in said and "--storage-dtype bfloat16" in said
