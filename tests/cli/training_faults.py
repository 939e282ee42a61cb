"""``python training_faults.py train-head|sweep ...``: the layercache command, killed (SIGKILL) right after its
``KILL_AFTER``-th epoch checkpoint is saved, as a machine that goes down would stop it."""

from __future__ import annotations

import os
import signal

from layercache.heads.training.checkpoint import EpochCheckpoint

after, saved = int(os.environ["KILL_AFTER"]), []
original = EpochCheckpoint.save


def save(self, state):
    original(self, state)
    saved.append(1)
    if len(saved) == after:
        os.kill(os.getpid(), signal.SIGKILL)


EpochCheckpoint.save = save

from layercache.cli import main  # noqa: E402 - after the fault is planted

main()
