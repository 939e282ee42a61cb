"""A full disk at every write of ``train-head``, ``sweep`` and ``probe-report`` (issue 36).

Each command runs once to find its write sites (:mod:`disk_full_support`: every folder, file, write
and flush it makes), then once per site with that write failing as a full disk does. Every such run
must end in one sentence that names the full disk and the fix, with exit code 2; leave no temporary
file and no staging folder; keep the cache and the earlier run, sweep or report in ``--out`` exactly as
they were; and keep any training checkpoint whole. ``train-head`` then runs again, as the sentence
says, to a complete run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_support import invoke
from disk_full_support import DiskFaults, left_behind
from fs_support import tree_state

from layercache.heads import LayerHead
from layercache.heads.training.checkpoint import read_checkpoint

COMMON = ("-q", "--threads", "1")
TRAIN = ("--mixer", "scalar", "--task", "sentiment", "--epochs", "2", "--patience", "0")


def _run(args, roots: list[Path], fail=None) -> tuple[DiskFaults, object]:
    with pytest.MonkeyPatch.context() as mp:
        faults = DiskFaults(roots, fail).install(mp)
        result = invoke(*args, *COMMON)
    return faults, result


def _sites(args, roots: list[Path]) -> list[tuple[str, str]]:
    faults, result = _run(args, roots)
    assert result.exit_code == 0, result.output
    assert faults.sites, "no write was seen"
    return faults.sites


def _checkpoints(cache: Path) -> Path:
    return cache.parent / f"{cache.name}.runs" / ".checkpoints"


def _clear_runs(cache: Path) -> None:
    """Remove ``<cache>.runs`` (its checkpoints): every run starts from the same state, so it meets the same writes."""
    shutil.rmtree(cache.parent / f"{cache.name}.runs", ignore_errors=True)


def _problems(site, faults: DiskFaults, result, roots: list[Path], kept: dict[Path, dict], cache: Path) -> list[str]:
    """What is wrong with the outcome of the full disk at ``site`` (nothing: an empty list)."""
    if not faults.failed:
        return [f"{site}: the write was not reached again"]
    problems = []
    text = " ".join(result.output.split())
    message = text.partition("Error: ")[2]
    if result.exit_code != 2 or "Traceback" in text:
        problems.append(f"exit code {result.exit_code}: {text[-300:]}")
    elif not (message.endswith(".") and ". " not in message):
        problems.append(f"not one sentence: {message}")
    elif "the disk is full" not in message or "free space" not in message:
        problems.append(f"does not name the full disk and the fix: {message}")
    for root in roots:
        problems += [f"left behind: {name}" for name in left_behind(root)]
    problems += [f"changed: {path}" for path, state in kept.items() if tree_state(path) != state]
    for file in sorted(_checkpoints(cache).glob("fit-*.pt")):
        try:
            read_checkpoint(file)
        except ValueError as err:
            problems.append(f"a checkpoint is not whole: {err}")
    return [f"{site}: {p}" for p in problems]


@pytest.mark.parametrize("into", ["a new folder", "an earlier run"])
def test_a_full_disk_at_every_write_of_train_head(cache, tmp_path, into):
    out = tmp_path / "run"
    new = into == "a new folder"
    args = ("train-head", cache, *TRAIN, "--out", out, *(() if new else ("--overwrite",)))
    roots = [tmp_path, cache.parent]
    if not new:
        assert invoke(*args, *COMMON).exit_code == 0  # the earlier run the full disk must not cost
    _clear_runs(cache)
    sites = _sites(args, roots)
    kept = {cache: tree_state(cache), **({} if new else {out: tree_state(out)})}
    problems = []
    for site in sites:
        if new:
            shutil.rmtree(out, ignore_errors=True)
        faults, result = _run(args, roots, fail=site)
        problems += _problems(site, faults, result, roots, kept, cache)
        if new:
            if out.exists():
                problems.append(f"{site}: --out was left, holding {sorted(p.name for p in out.iterdir())}")
            again = invoke(*args, *COMMON)  # the sentence says: run the same command again
            if again.exit_code != 0:
                problems.append(f"{site}: the same command again failed: {again.output[-300:]}")
            else:
                LayerHead.load(out)
        _clear_runs(cache)
    assert not problems, "\n".join(problems)


def test_a_full_disk_at_every_write_of_sweep(cache, tmp_path):
    out = tmp_path / "sweep"
    args = ("sweep", cache, "--mixer", "last", "--mixer", "scalar", "--no-grid", "--seeds", "1", "--epochs", "1",
            "--task", "sentiment", "--budget", "1h", "--out", out, "--overwrite")
    roots = [tmp_path, cache.parent]
    assert invoke(*args, *COMMON).exit_code == 0  # the earlier sweep the full disk must not cost
    _clear_runs(cache)
    sites = _sites(args, roots)
    kept = {cache: tree_state(cache), out: tree_state(out)}
    problems = []
    for site in sites:
        faults, result = _run(args, roots, fail=site)
        problems += _problems(site, faults, result, roots, kept, cache)
        _clear_runs(cache)
    assert not problems, "\n".join(problems)


def test_a_full_disk_at_every_write_of_probe_report(cache, tmp_path):
    out = tmp_path / "report"
    args = ("probe-report", cache, "--out", out, "--no-mdl", "--no-cumulative", "--act-epochs", "1",
            "--max-train", "50")
    roots = [tmp_path, cache.parent]
    assert invoke(*args, *COMMON).exit_code == 0  # the earlier report the full disk must not cost
    _clear_runs(cache)
    sites = _sites(args, roots)
    report = {name: (out / name).read_bytes() for name in ("report.json", "report.html")}
    kept = {cache: tree_state(cache)}
    problems = []
    for site in sites:
        faults, result = _run(args, roots, fail=site)
        problems += _problems(site, faults, result, roots, kept, cache)
        now = {name: (out / name).read_bytes() for name in report}
        if now != report:
            problems.append(f"{site}: the earlier report.json and report.html are not both as they were")
        LayerHead.load(out / "act-run")  # the report's act head: the earlier one, or a complete new one
        _clear_runs(cache)
    assert not problems, "\n".join(problems)
