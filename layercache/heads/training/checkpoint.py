"""A training run's state between epochs, so that a fit killed mid-way resumes to the same weights.

After every epoch :func:`~.trainer.train_model` saves, to one file, everything the next epoch
depends on: the model's and the optimizer's state, the schedule, the history and the best epoch's
weights so far, the step count, the wall time spent, and the random generators' states (dropout and
Gumbel noise draw from torch's; the minibatch order is seeded per epoch). Restoring it and running
the remaining epochs gives the same weights as a run that was never stopped.

The file is written atomically (a temporary file, fsynced, renamed over the last one), so a kill
leaves the previous epoch's checkpoint or the new one, never half of one. It is read with
``torch.load(weights_only=True)``: tensors, numbers, strings, lists and dicts only, so a file
planted in a run folder cannot run code. Each checkpoint carries the ``key`` of its fit (a digest of
everything that determines the weights); one with another key, or one that cannot be read, is
ignored and training starts afresh. The checkpoints live in one folder (``<cache>.runs/.checkpoints``),
every path below it checked as every write of layercache is (:class:`~layercache.core.confine.OwnedFolder`):
a link planted in place of the folder or a file is never written through.
"""

from __future__ import annotations

import logging
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ...core.checksum import json_sha256
from ...core.confine import OwnedFolder, lstat_or_none
from ...core.files import write_file_atomic
from ...errors import UnsafePathError

log = logging.getLogger("layercache")

CHECKPOINT_FORMAT = 1


def fit_key(*parts) -> str:
    """The key of a fit: a digest of the JSON-able ``parts`` that determine its weights."""
    return json_sha256(list(parts), compact=True)


@dataclass
class EpochCheckpoint:
    """Where one fit keeps its state between epochs (``path``), and which fit it is (``key``)."""

    folder: Path
    """The checkpoints' folder, ``.checkpoints`` below the owned ``folder.parent``."""
    key: str
    broken: bool = False
    """A save failed (a full or read-only disk): training goes on without checkpoints, as it always could."""

    @classmethod
    def of_fit(cls, folder: Path, params: dict, config_hash: str, split: str, val_split: str | None,
               layer_names: list[str], *, fresh: bool = False) -> EpochCheckpoint:
        """The checkpoint in ``folder`` of the fit of a head with ``params`` on a cache (its configuration hash),
        ``split``, ``val_split`` and ``layer_names``; ``fresh`` removes what an earlier run left of it."""
        key = fit_key(params, config_hash, split, val_split, layer_names)
        checkpoint = cls(Path(folder), key)
        if fresh:
            checkpoint.remove()
        return checkpoint

    @property
    def name(self) -> str:
        """The file's name: ``fit-<key>.pt``."""
        return f"fit-{self.key[:24]}.pt"

    @property
    def path(self) -> Path:
        """Where the state is saved (for reading: checked before it is opened)."""
        return self.folder / self.name

    def load(self) -> dict | None:
        """The saved state of this fit, or None (no file, another fit's, or unreadable: training starts afresh)."""
        st = lstat_or_none(self.path)
        if st is None or not stat.S_ISREG(st.st_mode):  # a link or anything else is not read
            return None
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - any unreadable checkpoint means: start afresh
            log.warning("Ignoring the unreadable training checkpoint %s (%s); training starts afresh.", self.path,
                        str(err)[:120])
            return None
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT or state.get("key") != self.key:
            log.info("The checkpoint %s is of another training; training starts afresh.", self.path)
            return None
        return state

    def save(self, state: dict) -> None:
        """Write ``state`` (with this fit's key) atomically; a failure is logged once and saving stops."""
        if self.broken:
            return
        payload = {**state, "format": CHECKPOINT_FORMAT, "key": self.key}
        try:
            owned = OwnedFolder.at(self.folder.parent, "runs folder")
            owned.check_root(create=True)
            target = owned.file(self.folder.name, self.name, create_parents=True)
            write_file_atomic(target, lambda tmp: torch.save(payload, tmp))
        except (OSError, UnsafePathError) as err:
            self.broken = True
            log.warning("Training goes on without checkpoints: %s cannot be written (%s), so a stopped run would "
                        "start afresh.", self.path, getattr(err, "strerror", None) or err)

    def remove(self) -> None:
        """Delete the checkpoint (the fit finished, or starts afresh); a link is removed, never followed."""
        try:
            owned = OwnedFolder.at(self.folder.parent, "runs folder")
            owned.remove(self.folder.name, self.name)
            owned.remove_folder_if_empty(self.folder.name)  # the last fit's checkpoint: no empty folder stays
        except (OSError, UnsafePathError) as err:  # missing, a link in the way, a read-only disk: nothing to undo
            log.debug("Could not remove the checkpoint %s: %s", self.path, err)


def random_state() -> dict:
    """torch's (and CUDA's) and numpy's global generator states, as plain tensors and lists."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"torch": torch.get_rng_state(),
             "numpy": [str(kind), torch.from_numpy(np.asarray(keys, dtype=np.int64)), int(pos), int(has_gauss),
                       float(cached)]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_random_state(state: dict) -> None:
    """Put back what :func:`random_state` saved."""
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
