"""`layercache sweep` through the real command line: its leaderboard, its kept run, its refusals.

The cache is planted as tests/heads/test_sweep.py plants it: ``layer_1`` holds the six ``topic`` classes' means.
"""

from __future__ import annotations

import json

import pytest
from cli_support import assert_refused, invoke
from planted_support import plant_topic_means

from layercache.heads import SweepResult

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread, as in tests/heads
PLANTED = ("sweep", 300)  # the planted cache of the root conftest: its name and examples per split
plant = plant_topic_means


def test_cli_sweep_prints_the_leaderboard_and_keeps_an_evaluable_run(planted_path):
    done = invoke("sweep", planted_path, "--budget", "2m", "--task", "topic", "--mixer", "layer", "--mixer", "scalar",
                  "--no-grid", "--seeds", "2", "--epochs", "1", "--ensemble", "2", "-q")
    assert done.exit_code == 0, done.output
    text = " ".join(done.output.split())
    out = planted_path.parent / f"{planted_path.name}.runs" / "sweep-001"  # beside the cache, as train-head's runs
    for fact in ("layer:1", "scalar", "1*", "fitted by the convex solver: deterministic, so one seed", "±",
                 "ensemble of 2", "written to", "ranked by mcc on validation", "test", "best/: ",
                 "averaged as one model",
                 f"Best run written: {out / 'best'}"):
        assert fact in text, fact
    result = SweepResult.read(out / "sweep.json")
    assert result.leader.candidate == result.winner.candidate  # no grid, so no variant to doubt
    scored = invoke("eval", out / "best", planted_path, "--split", "test", "--json")
    assert scored.exit_code == 0, scored.output
    kept = json.loads((out / "best" / "metrics.json").read_text())["test"]["topic"]["accuracy"]
    assert json.loads(scored.stdout)["metrics"]["topic"]["accuracy"] == pytest.approx(kept)


def test_cli_sweep_refuses_bad_input_in_one_sentence(planted_path, tmp_path):
    assert_refused(invoke("sweep", planted_path, "--budget", "5 parsecs"), "The --budget '5 parsecs' is not a duration",
                   "5m")
    assert_refused(invoke("sweep", planted_path, "--budget", "0.000001", "--out", tmp_path / "s"),
                   "ran out while the sweep opened and checked the cache", "give a budget of at least")
    assert_refused(invoke("sweep", planted_path, "--task", "genre", "--out", tmp_path / "s"), "no task 'genre'")
    assert_refused(invoke("sweep", planted_path, "--mixer", "mean", "--out", tmp_path / "s"), "Unknown mixer 'mean'")
    assert_refused(invoke("sweep", planted_path, "--confidence", "1.5", "--out", tmp_path / "s"),
                   "confidence is a share of resamples from 0")
