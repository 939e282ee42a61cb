"""Issue 26, runs side: a run folder is written by one process, whole or not at all, readable by a team.

- Two runs into one ``--out`` at once: the second is refused, naming the first (the cache's lock);
  default names (``<cache>.runs/<mixer>-NNN``) are claimed atomically; a folder that holds only a
  lock file (a killed run's) still loads and counts as empty.
- Ctrl-C or a full disk leaves nothing half-written and says so truthfully; the same command then
  runs again. ``--overwrite`` replaces layercache's own files only.
- Every file a run writes lands with ``0666`` less the umask (``weights.safetensors`` was ``0600``).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import threading
from pathlib import Path

import pytest
from cli_support import assert_refused, invoke
from fs_support import tree_state

import layercache as lc
from layercache.errors import CacheLockedError, ConfigError
from layercache.heads import LayerHead, sweep, train_head

QUICK = {"tasks": ["sentiment"], "epochs": 1, "progress": False, "device": "cpu"}
CLI_QUICK = ("--mixer", "last", "--task", "sentiment", "-q")
RUN_FILES = {"config.json", "weights.safetensors", "metrics.json", "layer_weights.json", "layer_weights.png"}


def in_thread(call):
    """Start ``call()`` in a daemon thread; returns the thread and a dict that gets ``result`` or ``error``."""
    box: dict = {}

    def target():
        try:
            box["result"] = call()
        except BaseException as err:  # noqa: BLE001 - handed to the test
            box["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def _visible(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


# --- 1. one writer per run folder -------------------------------------------------------------------------
def _pause_fits(monkeypatch):
    """Fits outside the main thread wait at their start until released: a run in progress."""
    entered, release = threading.Event(), threading.Event()
    original, main = LayerHead.fit, threading.current_thread()

    def fit(self, *args, **kwargs):
        if threading.current_thread() is not main:
            entered.set()
            release.wait(120)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LayerHead, "fit", fit)
    return entered, release


def test_two_runs_into_one_out_at_once_the_second_is_refused(cache, tmp_path, monkeypatch):
    entered, release = _pause_fits(monkeypatch)
    out = tmp_path / "run"
    thread, box = in_thread(lambda: train_head(cache, "last", out=out, **QUICK))
    try:
        assert entered.wait(120)
        with pytest.raises(CacheLockedError, match="being written by another layercache process"):
            train_head(cache, "layer:1", out=out, overwrite=True, **QUICK)
        with pytest.raises(CacheLockedError):
            sweep(cache, out=out, overwrite=True, candidates=["layer:1"], seeds=1, budget=None, progress=False,
                  tasks=["sentiment"])
    finally:
        release.set()
        thread.join()
    assert "error" not in box, box
    assert LayerHead.load(out).mixer == "last"  # the first run, whole
    assert _visible(out) == RUN_FILES  # its lock file went with it


def test_a_sweep_in_progress_refuses_a_run_into_its_folder(cache, tmp_path, monkeypatch):
    entered, release = _pause_fits(monkeypatch)
    out = tmp_path / "sweep"
    thread, box = in_thread(lambda: sweep(cache, out=out, candidates=["last"], seeds=1, budget=None,
                                           progress=False, tasks=["sentiment"]))
    try:
        assert entered.wait(120)
        result = invoke("train-head", cache, *CLI_QUICK, "--out", out, "--overwrite")
        assert_refused(result, "being written by another layercache process", "choose another --out")
    finally:
        release.set()
        thread.join()
    assert "error" not in box, box
    assert _visible(out) == {"best", "sweep.json"}


def test_default_run_folders_are_claimed_atomically(cache, monkeypatch):
    entered, release = _pause_fits(monkeypatch)
    thread, box = in_thread(lambda: train_head(cache, "layer:1", **QUICK))
    try:
        assert entered.wait(120)
        second = train_head(cache, "layer:1", **QUICK).run  # while the first is still training
    finally:
        release.set()
        thread.join()
    first = box["result"].run
    assert first != second and first.parent == second.parent == cache.parent / "cache.runs"
    assert LayerHead.load(first).mixer == LayerHead.load(second).mixer == "layer:1"


def test_a_folder_holding_only_a_lock_file_counts_as_empty_and_a_run_with_one_loads(cache, good_run, tmp_path):
    left = tmp_path / "killed"
    left.mkdir()
    (left / ".layercache.lock").write_text("12345\nlayercache train-head\n")  # what a killed run leaves
    (left / ".layercache-partial-0badc0de").mkdir()  # and what it had staged
    (left / ".layercache-partial-0badc0de" / "weights.safetensors").write_bytes(b"half")
    result = invoke("train-head", cache, *CLI_QUICK, "--out", left)
    assert result.exit_code == 0, result.output
    assert _visible(left) == RUN_FILES | {".layercache.lock"}
    assert LayerHead.load(left).mixer == "last"


def test_a_stale_staging_folder_holding_someones_file_is_left_whole(cache, tmp_path):
    out = tmp_path / "run"
    stale = out / ".layercache-partial-0badc0de"  # what a killed run staged: layercache's own, removed
    (stale / "best").mkdir(parents=True)
    (stale / "weights.safetensors").write_bytes(b"half")
    (stale / ".config.json-k9x2a1b7.tmp").write_text("{")
    (stale / "best" / "config.json").write_text("{}")
    kept = out / ".layercache-partial-5eed5eed"  # the same, with someone's file put in it: nothing of it goes
    shutil.copytree(stale, kept)
    (kept / "best" / "thesis.tex").write_text("mine\n")
    before = tree_state(kept)
    (out / ".layercache-partial-f11e").write_text("a file of that name, which layercache never makes\n")
    result = invoke("train-head", cache, *CLI_QUICK, "--out", out)
    assert result.exit_code == 0, result.output
    assert tree_state(kept) == before
    assert (out / ".layercache-partial-f11e").is_file()
    assert _visible(out) == RUN_FILES | {kept.name, ".layercache-partial-f11e"}
    assert LayerHead.load(out).mixer == "last"


def test_a_sweep_overwrite_refuses_a_best_folder_whose_staging_holds_someones_file(cache, tmp_path):
    out = tmp_path / "sweep"
    (out / "best" / ".layercache-partial-0badc0de").mkdir(parents=True)
    (out / "best" / ".layercache-partial-0badc0de" / "thesis.tex").write_text("mine\n")
    (out / "sweep.json").write_text("{}\n")
    with pytest.raises(ConfigError, match="layercache did not write"):
        sweep(cache, out=out, overwrite=True, candidates=["last"], seeds=1, budget=None, progress=False,
              tasks=["sentiment"])
    assert (out / "best" / ".layercache-partial-0badc0de" / "thesis.tex").read_text() == "mine\n"


# --- 3. interrupted or failed runs leave nothing half-written ---------------------------------------------
def _interrupt_plot(monkeypatch):
    """Ctrl-C while the run's last file is written (weights and config are staged by then)."""
    import layercache.heads.workflow as runs

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runs, "plot_layer_weights", interrupted)


def test_ctrl_c_during_an_overwrite_leaves_the_old_run_as_it_was(cache, good_run, tmp_path, monkeypatch):
    run = shutil.copytree(good_run, tmp_path / "run")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    _interrupt_plot(monkeypatch)
    result = invoke("train-head", cache, "--mixer", "layer:1", "--task", "sentiment", "-q", "--out", run,
                    "--overwrite")
    assert result.exit_code == 130, result.output
    assert "left as it was" in " ".join(result.output.split())
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_ctrl_c_during_a_sweep_leaves_no_partial_best(cache, tmp_path, monkeypatch):
    out = tmp_path / "sweep"
    original, calls = LayerHead.fit, []

    def fit(self, *args, **kwargs):
        calls.append(self.mixer)
        if len(calls) == 2:  # best/ holds the first candidate by now
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(LayerHead, "fit", fit)
        args = ("sweep", cache, "--out", out, "--mixer", "last", "--mixer", "layer", "--no-grid", "--task",
                "sentiment", "--budget", "10m", "-q")
        result = invoke(*args)
        assert result.exit_code == 130, result.output
        assert "nothing of it was written" in " ".join(result.output.split())
    assert not out.exists()
    again = invoke(*args)
    assert again.exit_code == 0, again.output
    assert _visible(out) == {"best", "sweep.json"} and _visible(out / "best") == RUN_FILES


def test_a_full_disk_leaves_no_run_folder_and_one_sentence(cache, tmp_path, monkeypatch):
    import layercache.heads.run_folders.persistence as persistence

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(persistence, "save_file", full)
    out = tmp_path / "run"
    result = invoke("train-head", cache, *CLI_QUICK, "--out", out)
    assert_refused(result, f"The run folder {out} cannot be written (the disk is full)")
    message = " ".join(result.output.split()).partition("Error: ")[2]
    assert message.count(". ") == 0 and message.endswith("."), message  # one sentence
    assert not out.exists()


def test_overwrite_replaces_only_layercaches_own_files(cache, good_run, tmp_path):
    run = shutil.copytree(good_run, tmp_path / "run")
    (run / "notes.txt").write_text("mine\n")
    (run / "photos").mkdir()
    (run / "photos" / "a.jpg").write_bytes(b"jpg")
    shutil.copytree(good_run, run / "best")  # what a sweep wrote here before: layercache's own, so replaced
    (run / "sweep.json").write_text("{}\n")
    result = invoke("train-head", cache, "--mixer", "layer:1", "--task", "sentiment", "-q", "--out", run,
                    "--overwrite")
    assert result.exit_code == 0, result.output
    assert (run / "notes.txt").read_text() == "mine\n" and (run / "photos" / "a.jpg").read_bytes() == b"jpg"
    assert _visible(run) == RUN_FILES | {"notes.txt", "photos"}
    assert LayerHead.load(run).mixer == "layer:1"


def test_an_occupied_run_folder_is_refused_in_the_words_of_its_caller(cache, tmp_path):
    """The README's example: ``train_head(cache, "scalar", out=...)`` after ``layercache train-head ... --out`` into
    the same folder names the keywords of the call, and the command its flags (layercache/core/option_names.py)."""
    out = tmp_path / "scalar"
    command = ("train-head", cache, "--mixer", "scalar", "--task", "sentiment", "--epochs", "1", "-q", "--out", out)
    assert invoke(*command).exit_code == 0
    with pytest.raises(ConfigError) as refused:
        train_head(cache, "scalar", out=out, **QUICK)
    message = str(refused.value)
    assert message == f"The run folder {out} is not empty; choose another out=... or pass overwrite=True."
    assert "--" not in message
    assert_refused(invoke(*command), f"The run folder {out} is not empty; choose another --out or pass --overwrite.")
    assert train_head(cache, "scalar", out=out, overwrite=True, **QUICK).run == out  # the fix it names works


def test_a_sweep_overwrite_refuses_a_best_folder_with_foreign_files(cache, tmp_path):
    out = tmp_path / "sweep"
    (out / "best").mkdir(parents=True)
    (out / "best" / "thesis.tex").write_text("mine\n")
    with pytest.raises(ConfigError, match="thesis.tex"):
        sweep(cache, out=out, overwrite=True, candidates=["last"], seeds=1, budget=None, progress=False,
              tasks=["sentiment"])
    assert (out / "best" / "thesis.tex").read_text() == "mine\n"


# --- 4. one rule for the mode of every written file -------------------------------------------------------
@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_every_run_file_follows_the_umask(cache, tmp_path, mask):
    previous = os.umask(mask)
    try:
        run = train_head(cache, "last", out=tmp_path / "run", **QUICK).run
    finally:
        os.umask(previous)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in run.iterdir()}
    assert modes == dict.fromkeys(RUN_FILES, 0o666 & ~mask)


def test_the_lock_and_staging_never_outlive_a_finished_run(cache, tmp_path):
    run = lc.train_head(cache, "last", out=tmp_path / "run", **QUICK).run
    assert _visible(run) == RUN_FILES
