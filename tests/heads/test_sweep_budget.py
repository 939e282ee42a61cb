"""Issue 26, sweep side: a candidate is priced by what it is, the bar counts what ran, and the feeds line is plain.

On the demo cache a 60 s sweep skipped every ``layer:<i>`` as "would take about 1 min 19 s" after the
convex ``last`` took 26 s: a convex fit was priced as three seeds. The sweep's clock is replaced
by a fake one here, so every fit takes exactly 10 s and the decisions can be checked exactly.
"""

from __future__ import annotations

import contextlib
import importlib
import time
import types

import pytest
from conftest import tiny_builtin_cache
from rich.console import Console

from layercache.heads import LayerHead, sweep

sweep_module = importlib.import_module("layercache.heads.sweeps.sweep")  # the module, not the function

FIT_SECONDS = 10.0


@pytest.fixture(scope="module")
def cache(tiny_models, tmp_path_factory):
    return tiny_builtin_cache(tiny_models, tmp_path_factory, "sweep-budget", 60)


@pytest.fixture
def clock(monkeypatch):
    """The sweep's clock, moved on by :data:`FIT_SECONDS` by every fit and by nothing else."""
    fake = types.SimpleNamespace(now=time.perf_counter())  # the trainer's own deadline check reads the real clock
    monkeypatch.setattr(sweep_module, "time", types.SimpleNamespace(perf_counter=lambda: fake.now))
    original = LayerHead.fit

    def fit(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        fake.now += FIT_SECONDS
        return out

    monkeypatch.setattr(LayerHead, "fit", fit)
    return fake


@pytest.fixture
def steps(monkeypatch):
    """What the sweep's progress bar was told: one description per step it counted."""
    told: list[str] = []

    @contextlib.contextmanager
    def recording(enabled=True, total=0, title="", seconds_left=None):
        yield told.append

    monkeypatch.setattr(sweep_module, "steps_progress", recording)
    return told


def _sweep(cache, tmp_path, budget, candidates):
    return sweep(cache, out=tmp_path / "sweep", budget=budget, seeds=3, candidates=candidates, progress=True,
                 tasks=["sentiment"])


def test_a_convex_single_state_is_priced_as_one_convex_fit(cache, tmp_path, clock, steps):
    # 30 s, less the 0.5 s reserve: `last` takes 10 s; three seeds of 10 s (30 s) would not fit in the
    # 19.5 s left, one convex fit (10 s) does, twice.
    result = _sweep(cache, tmp_path, 30.0, ["last", "layer:0", "layer:1"])
    assert {r.candidate for r in result.leaderboard} == {"last", "layer:0"}
    skipped = {s["candidate"]: s["reason"] for s in result.skipped}
    assert set(skipped) == {"layer:1"}
    assert "one convex fit would take about 10 s" in skipped["layer:1"], skipped


def test_the_progress_bar_counts_the_candidates_that_ran(cache, tmp_path, clock, steps):
    result = _sweep(cache, tmp_path, 22.0, ["last", "layer:0", "layer:1"])
    ran = sorted(r.candidate for r in result.leaderboard)
    assert ran == ["last", "layer:0"] and [s["candidate"] for s in result.skipped] == ["layer:1"]
    assert sorted(s.split()[0] for s in steps) == ran  # the skipped one was never counted as a step


def test_a_learning_mixer_is_still_priced_per_seed(cache, tmp_path, clock, steps):
    # scalar's first seed (10 s) prices each next one: the second fits in the 14.5 s left, the third does not.
    result = _sweep(cache, tmp_path, 25.0, ["scalar", "layer:0"])
    scalar = next(r for r in result.leaderboard if r.candidate == "scalar")
    assert len(scalar.seeds) == 2 and "2 of 3 seeds: the budget ran out" in scalar.note


def test_the_shared_reads_are_told_in_plain_words(cache, tmp_path, clock, steps):
    from layercache.cli.sweep import render_leaderboard

    result = _sweep(cache, tmp_path, None, ["last", "layer:0"])
    console = Console(record=True, width=200)
    render_leaderboard(result, console)
    text = console.export_text()
    assert "Shared feeds" not in text and "requests" not in text
    assert "Data read from the cache:" in text and "reused" in text
