"""Training that resumes: ``train_model`` saves its state after every epoch, and a fit stopped mid-way continues to
the same weights as one that was never stopped."""

from __future__ import annotations

import errno
import logging
import os

import pytest
import torch

from layercache.errors import OutputWriteError
from layercache.heads.network.model import HeadModel
from layercache.heads.training.checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointFolder,
    EpochCheckpoint,
    checkpoint_bytes,
    fit_key,
)
from layercache.heads.training.trainer import TrainConfig, seed_everything, train_model
from layercache.store.cache_feed import CacheFeed
from layercache.store.reader import LayerCache


class Stop(Exception):
    pass


def _fit(cache_path, checkpoint=None, stop_at=None, mixer="gumbel", epochs=5):
    """A gumbel head (dropout and Gumbel noise: the random state matters) on the topic task, 5 epochs."""
    cache = LayerCache.open(cache_path)
    tasks = [t for t in cache.tasks if t.name in ("topic", "negation_scope")]
    seed_everything(3)
    model = HeadModel(len(cache.layer_names), cache.hidden_size, tasks, mixer=mixer)
    train = CacheFeed(cache, "train", tasks=[t.name for t in tasks], batch_size=8)
    val = CacheFeed(cache, "validation", tasks=[t.name for t in tasks], batch_size=32)

    def log(record):
        if record.epoch == stop_at:
            raise Stop  # killed during epoch ``stop_at``'s bookkeeping: its checkpoint is not written

    history = train_model(model, train, val, TrainConfig(epochs=epochs, patience=0, seed=3), progress=False,
                          log=log, checkpoint=checkpoint)
    return model, history


def test_a_stopped_fit_resumes_to_the_weights_of_an_uninterrupted_one(cache, tmp_path, one_torch_thread):
    whole, history = _fit(cache)
    checkpoint = EpochCheckpoint(tmp_path / ".checkpoints", fit_key("test", 1))
    with pytest.raises(Stop):
        _fit(cache, checkpoint, stop_at=3)
    saved = checkpoint.load()
    assert saved["epoch"] == 2 and saved["step"] > 0
    resumed, resumed_history = _fit(cache, checkpoint)
    for name, value in whole.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[name]), name
    assert [e.val_score for e in resumed_history.epochs] == [e.val_score for e in history.epochs]
    assert resumed_history.best_epoch == history.best_epoch
    # a finished fit's checkpoint continues to nothing: the same weights at once
    again, _ = _fit(cache, checkpoint)
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in whole.state_dict().items())


def test_a_checkpoint_of_another_fit_or_a_damaged_one_is_ignored(cache, tmp_path, one_torch_thread):
    whole, _ = _fit(cache, epochs=2)
    folder = tmp_path / ".checkpoints"
    other = EpochCheckpoint(folder, fit_key("another fit"))
    with pytest.raises(Stop):
        _fit(cache, other, stop_at=2, epochs=2)
    mine = EpochCheckpoint(folder, fit_key("this fit"))
    other.path.rename(mine.path)  # another fit's state under this fit's name
    assert mine.load() is None  # its key says so: training starts afresh
    fresh, _ = _fit(cache, mine, epochs=2)
    assert all(torch.equal(v, fresh.state_dict()[k]) for k, v in whole.state_dict().items())
    mine.path.write_bytes(b"not a checkpoint")
    assert mine.load() is None
    mine.path.write_bytes(checkpoint_bytes({"format": CHECKPOINT_FORMAT, "key": mine.key, "payload": Stop("planted")}))
    assert mine.load() is None  # a pickled object, checksum and all: weights_only refuses it, no code runs


def test_a_checkpoint_with_zeroed_bytes_is_named_and_never_resumed(cache, tmp_path, logged, one_torch_thread):
    # What a kill -9 left on a disk that lost a block: the file reads, its tensors do not hold what was saved.
    whole, _ = _fit(cache)
    checkpoint = EpochCheckpoint(tmp_path / ".checkpoints", fit_key("zeroed"))
    with pytest.raises(Stop):
        _fit(cache, checkpoint, stop_at=3)
    data = bytearray(checkpoint.path.read_bytes())
    middle = len(data) // 2
    assert any(data[middle:middle + 64])  # the bytes zeroed were not zero: the file changes
    data[middle:middle + 64] = bytes(64)
    checkpoint.path.write_bytes(bytes(data))
    assert checkpoint.load() is None
    warnings = [r.getMessage() for r in logged.records if r.levelno == logging.WARNING]
    assert any(str(checkpoint.path) in w and "checksum" in w and "starts afresh" in w for w in warnings), warnings
    resumed, _ = _fit(cache, checkpoint)  # trained afresh: the weights of a run that was never stopped
    assert all(torch.equal(v, resumed.state_dict()[k]) for k, v in whole.state_dict().items())


def test_a_full_disk_at_a_checkpoint_stops_training_in_one_sentence_keeping_the_last(cache, tmp_path, monkeypatch,
                                                                                    one_torch_thread):
    import layercache.heads.training.checkpoint as module

    checkpoint = EpochCheckpoint(tmp_path / ".checkpoints", fit_key("full disk"))
    original, saves = module.write_file_atomic, []

    def write(path, write_bytes, after=None):
        saves.append(path)
        if len(saves) == 3:  # epoch 3's state: the disk is full by then
            def full(tmp):
                write_bytes(tmp)  # half of it landed in the temporary file
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return original(path, full, after)
        return original(path, write_bytes, after)

    monkeypatch.setattr(module, "write_file_atomic", write)
    with pytest.raises(OutputWriteError) as refused:
        _fit(cache, checkpoint)
    message = str(refused.value)
    assert message == (f"The training checkpoint {checkpoint.path} cannot be written (the disk is full); free space "
                       "on that disk and run the same command again, which resumes from epoch 3.")
    assert [p.name for p in checkpoint.folder.iterdir()] == [checkpoint.name]  # no temporary file beside it
    assert EpochCheckpoint(checkpoint.folder, checkpoint.key).load()["epoch"] == 2  # epoch 2's, whole


def test_a_link_planted_for_the_checkpoint_folder_is_never_written_through(cache, tmp_path, one_torch_thread):
    outside = tmp_path / "outside"
    outside.mkdir()
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / ".checkpoints").symlink_to(outside)
    checkpoint = EpochCheckpoint(runs / ".checkpoints", fit_key("linked"))
    _fit(cache, checkpoint, epochs=1)  # trains, warns once, saves nothing
    assert checkpoint.broken and list(outside.iterdir()) == []
    (outside / checkpoint.name).write_bytes(b"someone else's file")
    checkpoint.remove()  # never through the link either
    assert (outside / checkpoint.name).exists()


def test_what_an_interruption_keeps_is_said_with_the_epoch_the_same_command_resumes_from(tmp_path):
    folder = CheckpointFolder(tmp_path / ".checkpoints")
    assert folder.resume_hint() is None  # nothing saved yet: the message says the run starts afresh
    first = folder.fit({"epochs": 5, "seed": 0}, "hash", "train", None, ["layer_1"])
    first._holds({"epoch": 3, "done": True})  # stopped early after epoch 3
    assert folder.resume_hint() == (f"the fit's checkpoint after epoch 3 of 5 is kept in {folder.path}, so running the "
                                    "same command again restores its weights without training (overwrite=True "
                                    "starts afresh)")
    second = folder.fit({"epochs": 5, "seed": 1}, "hash", "train", None, ["layer_1"])
    second._holds({"epoch": 2, "done": False})
    assert folder.resume_hint() == (f"the checkpoints of 2 fits are kept in {folder.path} (1 finished, the last after "
                                    "epoch 2 of 5), so running the same command again resumes the last from epoch 3 "
                                    "(overwrite=True starts afresh)")
