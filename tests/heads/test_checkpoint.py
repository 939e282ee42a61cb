"""Training that resumes: ``train_model`` saves its state after every epoch, and a fit stopped mid-way continues to
the same weights as one that was never stopped."""

from __future__ import annotations

import pytest
import torch

from layercache.heads.network.model import HeadModel
from layercache.heads.training.checkpoint import EpochCheckpoint, fit_key
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
    torch.save({"format": 1, "key": mine.key, "payload": Stop("planted")}, mine.path)  # a pickled object
    assert mine.load() is None  # weights_only refuses it: no code runs


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
