"""``train-head`` and ``sweep`` killed mid-way resume from the same command to the weights of an uninterrupted run;
``--overwrite`` starts afresh. Ctrl-C says which epoch the same command resumes from, and the rerun says it resumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cli_support import invoke
from safetensors.torch import load_file

from layercache.heads.training.checkpoint import EpochCheckpoint

HERE = Path(__file__).parent
COMMON = ["--threads", "1", "--quiet"]


def layercache(*args, kill_after: int | None = None) -> subprocess.CompletedProcess:
    """The command in a fresh process; with ``kill_after``, SIGKILLed after that many epoch checkpoints."""
    target = [str(HERE / "training_faults.py")] if kill_after else ["-m", "layercache"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **({"KILL_AFTER": str(kill_after)} if kill_after else {})}
    return subprocess.run([sys.executable, *target, *map(str, args), *COMMON], capture_output=True, text=True,
                          env=env, timeout=900)


def same_weights(a: Path, b: Path) -> None:
    left, right = load_file(a / "weights.safetensors"), load_file(b / "weights.safetensors")
    assert left.keys() == right.keys()
    for name in left:
        assert (left[name] == right[name]).all(), name


def checkpoints(cache: Path) -> list[Path]:
    return sorted((cache.parent / f"{cache.name}.runs" / ".checkpoints").glob("fit-*.pt"))


def test_a_killed_train_head_resumes_to_the_weights_of_an_uninterrupted_run(cache, tmp_path):
    args = ["train-head", cache, "--mixer", "gumbel", "--epochs", "4", "--patience", "0"]
    whole = layercache(*args, "--out", tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr[-2000:]
    assert checkpoints(cache) == []  # a finished run leaves none
    killed = layercache(*args, "--out", tmp_path / "resumed", kill_after=2)
    assert killed.returncode != 0 and not (tmp_path / "resumed" / "weights.safetensors").exists()
    assert len(checkpoints(cache)) == 1
    resumed = layercache(*args, "--out", tmp_path / "resumed")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    same_weights(tmp_path / "whole", tmp_path / "resumed")
    assert checkpoints(cache) == []
    assert not (cache.parent / f"{cache.name}.runs" / ".checkpoints").exists()  # nor an empty folder


def test_overwrite_starts_afresh_rather_than_resuming(cache, tmp_path):
    args = ["train-head", cache, "--mixer", "scalar", "--epochs", "3", "--patience", "0", "--out", tmp_path / "run"]
    killed = layercache(*args, kill_after=1)
    assert killed.returncode != 0 and len(checkpoints(cache)) == 1
    fresh = layercache(*args, "--overwrite")
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    whole = layercache("train-head", cache, "--mixer", "scalar", "--epochs", "3", "--patience", "0",
                       "--out", tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr[-2000:]
    same_weights(tmp_path / "run", tmp_path / "whole")
    assert checkpoints(cache) == []


def test_a_killed_sweep_resumes_to_the_same_leaderboard_and_best_weights(cache, tmp_path):
    args = ["sweep", cache, "--mixer", "scalar", "--mixer", "gumbel", "--no-grid", "--seeds", "2", "--epochs", "3",
            "--patience", "0", "--budget", "1h"]
    whole = layercache(*args, "--out", tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr[-2000:]
    killed = layercache(*args, "--out", tmp_path / "resumed", kill_after=8)  # in the third of four fits
    assert killed.returncode != 0 and not (tmp_path / "resumed" / "sweep.json").exists()
    resumed = layercache(*args, "--out", tmp_path / "resumed")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    same_weights(tmp_path / "whole" / "best", tmp_path / "resumed" / "best")
    def board(path):
        data = json.loads((path / "sweep.json").read_text())
        return [(row["candidate"], row["validation"], row["test"], row["best_seed"], row["epochs"])
                for row in data["leaderboard"]]

    assert board(tmp_path / "whole") == board(tmp_path / "resumed")
    assert checkpoints(cache) == []


def test_ctrl_c_says_the_same_command_resumes_from_epoch_n_and_the_rerun_says_it_does(cache, tmp_path, monkeypatch):
    args = ["train-head", cache, "--mixer", "scalar", "--task", "sentiment", "--epochs", "4", "--patience", "0",
            "--out", tmp_path / "run", *COMMON]
    original, saved = EpochCheckpoint.save, []

    def save(self, state):
        original(self, state)
        saved.append(state["epoch"])
        if len(saved) == 2:
            raise KeyboardInterrupt  # Ctrl-C in epoch 3, epoch 2's checkpoint saved

    with monkeypatch.context() as patched:
        patched.setattr(EpochCheckpoint, "save", save)
        stopped = invoke(*args)
    said = " ".join(stopped.output.split())
    assert stopped.exit_code == 130, said
    assert "the fit's checkpoint after epoch 2 of 4 is kept" in said, said
    assert "running the same command again resumes from epoch 3" in said and "start the run afresh" not in said
    assert len(checkpoints(cache)) == 1
    again = invoke(*args)
    said = " ".join(again.output.split())
    assert again.exit_code == 0, said
    assert "Resuming the fit from epoch 3" in said, said
    assert checkpoints(cache) == []
