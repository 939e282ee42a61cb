"""Property-based: a training checkpoint damaged, swapped, or replaced by a link, a FIFO or a folder (issue 36).

A checkpoint is what a fit resumes from, so anything wrong with it would carry silently into the
weights of a finished run. Hypothesis takes a real checkpoint and zeroes bytes in it, flips one,
truncates it, swaps in another fit's checkpoint or one of the older format, or puts in its place a
link (to an intact copy of it outside, to a file, to a folder, dangling, a loop), a FIFO, a folder or
someone's file. Then the fit runs again from that folder. A checkpoint whose bytes are not the ones
saved is never resumed: it is named in a warning and the fit starts afresh, to the weights of a fit
that never had a checkpoint; a link is never followed (nor read, nor written through), a FIFO never
opened, and nothing outside the checkpoints' folder or planted in it changes.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
import torch
from fs_support import make_outside, no_hang, plant, tree_state
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from layercache.heads import LayerHead
from layercache.heads.training.checkpoint import CheckpointFolder, EpochCheckpoint, read_checkpoint
from layercache.store.reader import LayerCache

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True, print_blob=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
BYTES = ("zero", "flip", "truncate")
WHOLE = ("another fit's", "older format", "empty")
PLANTED = ("link to an intact copy", "link-to-file", "link-to-folder", "dangling", "loop", "fifo", "foreign-folder")
HEAD = {"tasks": ["sentiment"], "epochs": 2, "patience": 0, "progress": False, "device": "cpu"}


def _fit(cache: LayerCache, folder: Path, seed: int = 0) -> tuple[LayerHead, EpochCheckpoint]:
    checkpoints = CheckpointFolder(folder)
    head = LayerHead("scalar", seed=seed, **HEAD).fit(cache, checkpoints=checkpoints)
    return head, checkpoints.fits[0]


@pytest.fixture(scope="module")
def opened(cache):
    with LayerCache.open(cache) as handle:
        yield handle


@pytest.fixture(scope="module")
def saved(opened, tmp_path_factory):
    """(the weights of a fit, its checkpoint's key and bytes, another fit's checkpoint bytes, its state)."""
    folder = tmp_path_factory.mktemp("checkpoints") / ".checkpoints"
    head, checkpoint = _fit(opened, folder)
    _, other = _fit(opened, folder, seed=1)
    state = read_checkpoint(checkpoint.path)
    return head.model_.state_dict(), checkpoint.key, checkpoint.path.read_bytes(), other.path.read_bytes(), state


def _damage(path: Path, kind: str, where: float, pristine: bytes, other: bytes, state: dict, outside: Path) -> None:
    """Put ``kind`` of damage at the checkpoint ``path`` (``where``: how far into the file, for damaged bytes)."""
    data = bytearray(pristine)
    at = min(int(where * len(data)), len(data) - 1)
    if kind == "zero":
        data[at:at + 64] = bytes(len(data[at:at + 64]))
    elif kind == "flip":
        data[at] ^= 0xFF
    elif kind == "truncate":
        data = data[:at]
    elif kind == "another fit's":
        data = bytearray(other)
    elif kind == "older format":  # what layercache wrote before checkpoints carried a checksum: torch.save alone
        torch.save({**state, "format": 1}, path)
        return
    elif kind == "empty":
        data = bytearray()
    elif kind == "link to an intact copy":
        (outside / "copy.pt").write_bytes(pristine)
        path.symlink_to(outside / "copy.pt")
        return
    else:
        plant(path, kind, outside, inside="thesis.tex")
        return
    path.write_bytes(bytes(data))


@SETTINGS
@example(kind="zero", where=0.5)
@example(kind="link to an intact copy", where=0.0)
@example(kind="foreign-folder", where=0.0)
@given(kind=st.sampled_from(BYTES + WHOLE + PLANTED), where=st.floats(0.0, 1.0))
def test_a_checkpoint_is_resumed_only_when_it_is_the_one_saved(opened, saved, logged, kind, where):
    weights, key, pristine, other, state = saved
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        outside = make_outside(root / "outside")
        folder = root / "runs" / ".checkpoints"
        folder.mkdir(parents=True)
        checkpoint = EpochCheckpoint(folder, key)
        _damage(checkpoint.path, kind, where, pristine, other, state, outside)
        intact = stat.S_ISREG(os.lstat(checkpoint.path).st_mode) and checkpoint.path.read_bytes() == pristine
        before = tree_state(outside)
        planted = tree_state(folder) if kind in PLANTED else None
        logged.clear()
        with no_hang(60):
            loaded = checkpoint.load()
            warnings = [r.getMessage() for r in logged.records if r.levelno == logging.WARNING]
            if intact:  # zeroes written over zeroes: nothing was damaged, and the fit resumes
                assert loaded is not None and loaded["epoch"] == 2
            else:
                assert loaded is None
                assert any(str(checkpoint.path) in w and "starts afresh" in w for w in warnings), warnings
            head, _ = _fit(opened, folder)
        for name, value in weights.items():  # afresh or resumed, the weights of a fit never stopped
            assert torch.equal(value, head.model_.state_dict()[name]), name
        assert tree_state(outside) == before, "something outside the checkpoints' folder changed"
        if planted is not None:
            assert tree_state(folder) == planted, "what was planted for the checkpoint changed"
        else:  # a regular file, damaged or not, is replaced by the fit's own checkpoint
            assert EpochCheckpoint(folder, key).load()["epoch"] == 2
        shutil.rmtree(root / "runs", ignore_errors=True)
