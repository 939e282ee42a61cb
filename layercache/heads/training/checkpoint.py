"""A training run's state between epochs, so that a fit killed mid-way resumes to the same weights.

After every epoch :func:`~.trainer.train_model` saves, to one file, everything the next epoch
depends on: the model's and the optimizer's state, the schedule, the history and the best epoch's
weights so far, the step count, the wall time spent, and the random generators' states (dropout and
Gumbel noise draw from torch's; the minibatch order is seeded per epoch). Restoring it and running
the remaining epochs gives the same weights as a run that was never stopped.

The file is written atomically (a temporary file, fsynced, renamed over the last one), so a kill
leaves the previous epoch's checkpoint or the new one, never half of one. It carries its own
checksum (:func:`checkpoint_bytes`: a header line with the format, the checksum and the length of
what ``torch.save`` wrote), so bytes damaged on disk afterwards (zeroed by a crash, a truncated copy)
are found before anything is restored: a damaged checkpoint, one of another fit (each carries the
``key`` of its fit, a digest of everything that determines the weights), or anything but a regular
file in its place is named in a warning and the fit starts afresh, never resumed from it. It is read
with ``torch.load(weights_only=True)``: tensors, numbers, strings, lists and dicts only, so a file
planted in a run folder cannot run code. The checkpoints live in one folder
(``<cache>.runs/.checkpoints``), every path below it checked as every write of layercache is
(:class:`~layercache.core.confine.OwnedFolder`): a link planted in place of the folder or a file is
never written through, nor read.

A full disk stops training at once with one sentence (:class:`~layercache.errors.OutputWriteError`),
the last epoch's checkpoint kept, so freeing space and running the same command again loses nothing;
a checkpoint that cannot be written for any other reason (a read-only disk, a link in its place)
only means training goes on without checkpoints. :class:`CheckpointFolder` keeps the checkpoints of
one command's fits, so that an interrupted command can say which epoch the same command resumes from.
"""

from __future__ import annotations

import io
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ...core.checksum import data_checksum, json_sha256
from ...core.confine import OwnedFolder, kind_of, lstat_or_none, open_regular
from ...core.files import is_disk_full, why_unwritable, write_file_atomic
from ...core.option_names import option
from ...errors import OutputWriteError, UnsafePathError

log = logging.getLogger("layercache")

CHECKPOINT_FORMAT = 2
"""2: the file starts with :data:`MAGIC` and a checksummed header (1, a bare ``torch.save`` file, is not resumed)."""
MAGIC = b"layercache training checkpoint\n"
STATE_KEYS = frozenset(("format", "key", "epoch", "step", "done", "seconds", "model", "optimizer", "scheduler",
                        "history", "best_state", "random"))
"""What every checkpoint holds (:func:`~.trainer.train_model` restores each)."""


def fit_key(*parts) -> str:
    """The key of a fit: a digest of the JSON-able ``parts`` that determine its weights."""
    return json_sha256(list(parts), compact=True)


def checkpoint_bytes(state: dict) -> bytes:
    """The bytes of a checkpoint file: :data:`MAGIC`, then ``<format> <checksum> <length>`` on one line, then what
    ``torch.save`` writes of ``state``."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    body = buffer.getvalue()
    return MAGIC + f"{CHECKPOINT_FORMAT} {data_checksum(body)} {len(body)}\n".encode("ascii") + body


def read_checkpoint(path: str | os.PathLike) -> dict:
    """The state in the checkpoint file ``path``, checked whole before it is unpickled.

    Raises ``ValueError`` saying why it cannot be used (not a checkpoint of this format, truncated,
    its checksum does not match, unreadable, incomplete); a link, a FIFO or a folder at ``path`` is
    refused (:class:`~layercache.errors.UnsafePathError`) and never followed or opened.
    """
    fd = open_regular(path, what="training checkpoint")  # O_NOFOLLOW, and no wait on a FIFO
    with os.fdopen(fd, "rb") as handle:
        data = handle.read()
    if not data.startswith(MAGIC):
        raise ValueError("it is not a checkpoint of this layercache version")
    header, _, body = data[len(MAGIC):].partition(b"\n")
    fields = header.decode("ascii", errors="replace").split()
    if len(fields) != 3 or fields[0] != str(CHECKPOINT_FORMAT) or not fields[2].isdigit():
        raise ValueError("its header is damaged or of another layercache version")
    if len(body) != int(fields[2]):
        raise ValueError(f"it is truncated or damaged ({len(body):,} of {int(fields[2]):,} bytes)")
    if data_checksum(body) != fields[1]:
        raise ValueError("its checksum does not match its bytes: it is damaged")
    try:
        state = torch.load(io.BytesIO(body), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - whatever torch says, the file cannot be used
        detail = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise ValueError(f"it cannot be read ({detail[:120]})") from None
    missing = STATE_KEYS - set(state) if isinstance(state, dict) else STATE_KEYS
    if missing:
        raise ValueError(f"it lacks {sorted(missing)[0]!r}")
    return state


@dataclass
class EpochCheckpoint:
    """Where one fit keeps its state between epochs (``path``), and which fit it is (``key``)."""

    folder: Path
    """The checkpoints' folder, ``.checkpoints`` below the owned ``folder.parent``."""
    key: str
    broken: bool = False
    """A save failed (a read-only disk, a link in the way): training goes on without checkpoints, as it always could."""
    epochs: int | None = None
    """The epochs the fit was asked for (for messages; None when unknown)."""
    saved_epoch: int | None = None
    """The last epoch the file holds, once this process saved or restored one (None: no checkpoint of it)."""
    finished: bool = False
    """Whether that state is the end of the fit (all epochs, or stopped early): resuming restores it, no epoch runs."""

    @classmethod
    def of_fit(cls, folder: Path, params: dict, config_hash: str, split: str, val_split: str | None,
               layer_names: list[str], *, fresh: bool = False) -> EpochCheckpoint:
        """The checkpoint in ``folder`` of the fit of a head with ``params`` on a cache (its configuration hash),
        ``split``, ``val_split`` and ``layer_names``; ``fresh`` removes what an earlier run left of it."""
        key = fit_key(params, config_hash, split, val_split, layer_names)
        epochs = params.get("epochs")
        checkpoint = cls(Path(folder), key, epochs=epochs if isinstance(epochs, int) else None)
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

    def after(self, epoch: int) -> str:
        """``epoch 2 of 5``: where a fit stands after ``epoch``."""
        return f"epoch {epoch}" + (f" of {self.epochs}" if self.epochs is not None else "")

    def load(self) -> dict | None:
        """The saved state of this fit, or None: no file, or one that cannot be resumed (damaged, another fit's, not a
        regular file), which is named in a warning: training starts afresh."""
        st = lstat_or_none(self.path)
        if st is None:
            return None
        why = None
        if not stat.S_ISREG(st.st_mode):  # a link or anything else is neither followed nor read
            why = f"it is {kind_of(st)}, not a checkpoint file layercache wrote"
        else:
            try:
                state = read_checkpoint(self.path)
            except ValueError as err:
                why = str(err)
            except (OSError, UnsafePathError) as err:
                why = f"it cannot be read: {why_unwritable(err) if isinstance(err, OSError) else err}"
            else:
                if state["key"] != self.key:
                    why = "it is the checkpoint of another fit"
        if why is not None:
            log.warning("The training checkpoint %s cannot be resumed (%s), so the fit starts afresh.", self.path, why)
            return None
        self._holds(state)
        if self.finished:
            log.info("Resuming the fit from its checkpoint %s: it finished after %s, so its weights are restored "
                     "without training.", self.path, self.after(self.saved_epoch))
        else:
            log.info("Resuming the fit from epoch %d: its checkpoint %s holds the state after %s.",
                     self.saved_epoch + 1, self.path, self.after(self.saved_epoch))
        return state

    def save(self, state: dict) -> None:
        """Write ``state`` (with this fit's key) atomically; a full disk is refused in one sentence, any other
        failure is logged once and saving stops."""
        if self.broken:
            return
        data = checkpoint_bytes({**state, "format": CHECKPOINT_FORMAT, "key": self.key})
        try:
            owned = OwnedFolder.at(self.folder.parent, "runs folder")
            owned.check_root(create=True)
            target = owned.file(self.folder.name, self.name, create_parents=True)
            write_file_atomic(target, lambda tmp: tmp.write_bytes(data))
        except (OSError, UnsafePathError) as err:
            if isinstance(err, OSError) and is_disk_full(err):
                # Training on would only lose more: the run itself could not be written either. The last
                # epoch's checkpoint is whole, so the same command resumes from it once there is space.
                resumes = ("starts the fit afresh" if self.saved_epoch is None
                           else f"resumes from epoch {self.saved_epoch + 1}")
                raise OutputWriteError(f"The training checkpoint {self.path} cannot be written (the disk is full); "
                                       f"free space on that disk and run the same command again, which {resumes}."
                                       ) from None
            self.broken = True
            log.warning("Training goes on without checkpoints: %s cannot be written (%s), so a stopped run would "
                        "start afresh.", self.path, getattr(err, "strerror", None) or err)
            return
        self._holds(state)

    def _holds(self, state: dict) -> None:
        """Remember which epoch the file holds, and whether it ends the fit (stopped early, or the last epoch)."""
        self.saved_epoch = int(state["epoch"])
        self.finished = bool(state["done"]) or (self.epochs is not None and self.saved_epoch >= self.epochs)

    def remove(self) -> None:
        """Delete the checkpoint (the fit finished, or starts afresh); a link is removed, never followed."""
        try:
            owned = OwnedFolder.at(self.folder.parent, "runs folder")
            owned.remove(self.folder.name, self.name)
            owned.remove_folder_if_empty(self.folder.name)  # the last fit's checkpoint: no empty folder stays
        except (OSError, UnsafePathError) as err:  # missing, a link in the way, a read-only disk: nothing to undo
            log.debug("Could not remove the checkpoint %s: %s", self.path, err)
        self.saved_epoch, self.finished = None, False


@dataclass
class CheckpointFolder:
    """The folder where the fits of one command keep their checkpoints (``<cache>.runs/.checkpoints``), and the
    checkpoints those fits made: what an interruption keeps (:meth:`resume_hint`) and what a written run removes."""

    path: Path
    fits: list[EpochCheckpoint] = field(default_factory=list)

    @classmethod
    def at(cls, folder: str | os.PathLike | CheckpointFolder) -> CheckpointFolder:
        """``folder`` itself when it is one, else a new one at that path."""
        return folder if isinstance(folder, CheckpointFolder) else cls(Path(folder))

    def fit(self, params: dict, config_hash: str, split: str, val_split: str | None, layer_names: list[str], *,
            fresh: bool = False) -> EpochCheckpoint:
        """The checkpoint of one fit (:meth:`EpochCheckpoint.of_fit`), remembered."""
        checkpoint = EpochCheckpoint.of_fit(self.path, params, config_hash, split, val_split, layer_names,
                                            fresh=fresh)
        self.fits.append(checkpoint)
        return checkpoint

    def resume_hint(self) -> str | None:
        """What running the same command again resumes, as the end of a sentence; None when no checkpoint is kept."""
        kept = [c for c in self.fits if c.saved_epoch is not None]
        if not kept:
            return None
        last, done = kept[-1], sum(c.finished for c in kept)
        if len(kept) == 1:
            what = f"the fit's checkpoint after {last.after(last.saved_epoch)} is kept in {self.path}"
        else:
            what = (f"the checkpoints of {len(kept)} fits are kept in {self.path} ({done} finished"
                    + ("" if last.finished else f", the last after {last.after(last.saved_epoch)}") + ")")
        if last.finished:
            again = "restores " + ("its weights" if len(kept) == 1 else "them") + " without training"
        else:
            again = f"resumes {'the last ' if len(kept) > 1 else ''}from epoch {last.saved_epoch + 1}"
        return f"{what}, so running the same command again {again} ({option('overwrite', True)} starts afresh)"

    def remove(self) -> None:
        """Delete every fit's checkpoint (their run is written)."""
        for checkpoint in self.fits:
            checkpoint.remove()


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
