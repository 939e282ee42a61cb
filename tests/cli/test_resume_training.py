"""``train-head`` and ``sweep`` killed mid-way resume from the same command to the weights of an uninterrupted run;
``--overwrite`` starts afresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from safetensors.torch import load_file

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
