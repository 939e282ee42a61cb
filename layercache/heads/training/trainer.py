"""The training loop for head models: AdamW, a learning-rate schedule, early stopping.

Training reads minibatches from a feed (a cache, or a live backbone for comparison), computes in
float32 whatever the storage dtype, validates after every epoch on each task's selection metric
(:mod:`..scoring.selection`: the task's default, or the one asked for) and keeps the best epoch's weights.
Everything random (initialisation, order, dropout, Gumbel noise) is seeded, so the same call gives
the same model.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from ...core.option_names import option
from ...core.option_specs import check_options
from ...core.threads import computes
from ...errors import ConfigError
from ...progress import training_progress
from ...store.feed import Feed
from ..data.finite import DivergedError, NonFiniteOutputsError, check_loss, first_non_finite_input
from ..head_options import SCHEDULES as SCHEDULES  # declared with the head's options (no torch there)
from ..head_options import HeadOptions
from ..network.model import HeadModel
from ..scoring.evaluation import evaluate
from ..scoring.selection import Selection, best_epoch, default_selection
from .checkpoint import EpochCheckpoint, random_state, restore_random_state


@dataclass
class TrainConfig:
    """Optimisation settings of :func:`train_model`.

    ``schedule``: ``linear`` / ``cosine`` decay to 0 after ``warmup`` (a fraction of all steps),
    ``constant``, or ``plateau`` (halve the rate when the validation score stalls, as adalayers
    does). ``patience``: epochs without improvement before stopping (0 = never stop early).
    """

    epochs: int = 20
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.01
    schedule: str = "linear"
    warmup: float = 0.06
    patience: int = 3
    max_grad_norm: float | None = 1.0
    seed: int = 0

    def check(self) -> "TrainConfig":
        """Refuse settings training cannot run with, naming the setting; return the config itself."""
        # the rules of the head's settings of the same names (one declaration, on HeadOptions)
        check_options(HeadOptions, vars(self))
        if self.lr is None:
            raise ConfigError("The learning rate lr must be a positive number here, got None.")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"Unknown schedule {self.schedule!r}; choose one of {', '.join(SCHEDULES)}.")
        return self


@dataclass
class EpochRecord:
    """One epoch of training: its mean training loss, validation scores, learning rate and wall time."""

    epoch: int
    train_loss: float
    val_score: float
    val: dict[str, float]
    """task -> its selection metric on the validation data (``TrainHistory.metric`` names it)."""
    lr: float
    seconds: float


@dataclass
class TrainHistory:
    """What happened during training; ``best_epoch``'s weights are the ones kept."""

    epochs: list[EpochRecord] = field(default_factory=list)
    best_epoch: int = 0
    best_score: float = float("-inf")
    stopped_early: bool = False
    out_of_time: bool = False
    """Training ended before ``epochs`` because the next epoch would have run past its ``deadline``."""
    seconds: float = 0.0
    """Wall time of the whole loop, validation included."""
    metric: dict[str, str] = field(default_factory=dict)
    """task -> the validation metric that selected the epoch (their weighted mean is ``val_score``)."""
    solver: str = "adamw"
    """How the weights were fitted (:data:`~.fitting.SOLVERS`): ``adamw`` epochs here, or ``lbfgs``, the
    convex full-batch fit (:mod:`.convex`), whose history is one record: the fitted model."""
    fit: dict = field(default_factory=dict)
    """The convex fit's choices (empty for ``adamw``): ``C`` and ``method`` per task, ``C_grid``,
    ``grid_scores`` per task (the selection metric at each ``C``), ``n_iter`` and ``converged``."""

    def to_json(self) -> dict:
        """The history as plain JSON-ready dicts and lists."""
        return asdict(self)

    def summary(self, selection: str) -> str:
        """How the kept weights were chosen, for a title: ``best epoch 3 of 5 by mcc``, or for the convex
        fit ``fitted by L-BFGS, C=0.1 chosen on validation by mcc``. ``selection`` describes the metric."""
        if self.solver != "lbfgs":
            return f"best epoch {self.best_epoch} of {len(self.epochs)} by {selection}"
        methods = " and ".join(dict.fromkeys(self.fit.get("method", {}).values())) or "L-BFGS"
        chosen = self.fit.get("C", {})
        if len(set(chosen.values())) == 1:
            c_text = f"C={next(iter(chosen.values())):g}"
        else:
            c_text = "C " + ", ".join(f"{task}={value:g}" for task, value in chosen.items())
        return f"fitted by {methods}, {c_text} chosen on validation by {selection}"


def _history(data: dict) -> TrainHistory:
    """A :class:`TrainHistory` from its :meth:`~TrainHistory.to_json` form (a checkpoint's)."""
    return TrainHistory(**{**data, "epochs": [EpochRecord(**e) for e in data["epochs"]]})


def seed_everything(seed: int) -> torch.Generator:
    """Seed torch's global generator (initialisation, dropout, Gumbel noise) and numpy's."""
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))
    return torch.Generator().manual_seed(seed)


def _param_groups(model: HeadModel, weight_decay: float) -> list[dict]:
    """Layer-weight logits, biases and norms get no weight decay; everything else does."""
    layer_params = {id(p) for mixer in model.mixers.values() for p in mixer.layer_params()}
    decay, no_decay = [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        (no_decay if id(p) in layer_params or p.dim() < 2 else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _adamw(groups: list[dict], lr: float) -> torch.optim.AdamW:
    """AdamW with its fused kernel where torch has one for the parameters' device and dtype.

    A head's step is many small tensors, so the per-tensor dispatch of the unfused update is a
    visible share of a step from the cache (measured in ``benchmarks/README.md``); the arithmetic
    is the same.
    """
    try:
        return torch.optim.AdamW(groups, lr=lr, fused=True)
    except (RuntimeError, ValueError):  # no fused kernel here (an older torch, or another device or dtype)
        return torch.optim.AdamW(groups, lr=lr, foreach=True)


def clip_gradients(parameters, max_norm: float) -> None:
    """Scale the gradients so their joint 2-norm is at most ``max_norm``, as ``clip_grad_norm_`` does.

    The same total norm and the same scale (so the same numbers), but the product runs only when
    it changes something, with the scale as a number: torch multiplies every gradient by a 0-dim
    tensor, which its CPU kernel does one value at a time (slow for the adalayers head's large
    projection gradient; see ``benchmarks/README.md``). The trainer reads the loss every step anyway, so the extra
    device sync costs nothing. One difference: a NaN total norm leaves the gradients as they are,
    where torch would turn them all into NaN; the step is lost either way.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    scale = max_norm / (total + 1e-6)  # a float32 tensor, computed as torch computes it
    if scale < 1.0:
        torch._foreach_mul_(grads, float(scale))


def _schedule(optimizer, config: TrainConfig, total_steps: int):
    if config.schedule == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=0.5, patience=1)
    warm = int(config.warmup * total_steps)

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        if config.schedule == "constant":
            return 1.0
        frac = (step - warm) / max(1, total_steps - warm)
        return max(0.0, 1.0 - frac) if config.schedule == "linear" else 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@computes
def train_model(model: HeadModel, train_feed: Feed, val_feed: Feed, config: TrainConfig, *, device: str = "cpu",
                progress: bool = True, log=None, selection: Selection | None = None,
                deadline: float | None = None, checkpoint: EpochCheckpoint | None = None) -> TrainHistory:
    """Fit ``model`` on ``train_feed``, select the best epoch on ``val_feed``, restore its weights.

    Either feed is a :class:`~layercache.store.feed.Feed` (a cache's or a live backbone's):
    ``train_feed`` yields batches through ``epoch(shuffle=True, seed=...)`` and has ``len()``;
    ``val_feed`` is scored with :func:`~layercache.heads.scoring.evaluation.evaluate`. ``selection`` says
    which validation metric picks the epoch (default: each task's default metric, every sequence
    task taken as balanced; :class:`~..estimator.LayerHead` resolves it from the training labels).

    ``deadline`` (a :func:`time.perf_counter` value) ends training between epochs: an epoch is not
    started when the mean time of the epochs so far says it would finish after it, and the best epoch
    so far is kept (``history.out_of_time``). The first epoch always runs: a head needs one.

    ``checkpoint`` (:mod:`.checkpoint`): the state after every epoch is saved there, and a fit that
    finds its own checkpoint continues after its last saved epoch, to the same weights as a fit that
    was never stopped (the caller removes it once the run is saved).
    """
    config.check()
    selection = selection or default_selection(model.tasks, model.loss_weights)
    model.to(device)
    optimizer = _adamw(_param_groups(model, config.weight_decay), config.lr)
    steps_per_epoch = len(train_feed)
    total = steps_per_epoch * config.epochs
    scheduler = _schedule(optimizer, config, total)
    history = TrainHistory(metric=dict(selection.metrics))
    best_state, step, first, done = None, 0, 1, False
    started = time.perf_counter()
    saved = checkpoint.load() if checkpoint is not None else None
    if saved is not None:  # a stopped fit: continue after its last saved epoch
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        history = _history(saved["history"])
        best_state, step, first, done = saved["best_state"], saved["step"], saved["epoch"] + 1, saved["done"]
        started -= saved["seconds"]
        restore_random_state(saved["random"])
    with training_progress(progress, epochs=config.epochs, total=total, step=step, first_epoch=first) as bar:
        for epoch in range(first, config.epochs + 1 if not done else first):
            t0 = time.perf_counter()
            # Checked between epochs only: a part of an epoch would leave the schedule and the
            # validation score of a run nobody asked for.
            if deadline is not None and history.epochs and t0 + (t0 - started) / len(history.epochs) > deadline:
                history.out_of_time = True
                bar.end_at(step)
                break
            bar.epoch(epoch)
            model.train()
            losses = []
            for batch in train_feed.epoch(shuffle=True, seed=config.seed * 1_000_003 + epoch):
                for mixer in model.mixers.values():  # e.g. gumbel anneals its temperature
                    mixer.training_progress(min(1.0, step / max(1, total - 1)))
                states, scales = batch.stored_on(device)  # int8: dequantised where the mixer widens them
                out = model(states, batch.mask.to(device), scales)
                loss, _ = model.loss(out, {k: v.to(device) for k, v in batch.labels.items()})
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if config.max_grad_norm:
                    clip_gradients(model.parameters(), config.max_grad_norm)
                optimizer.step()
                if config.schedule != "plateau":
                    scheduler.step()
                step += 1
                value = float(loss.detach())  # the one device sync of a step, needed for the bar anyway
                # A non-finite loss means NaN/inf states or labels (named by row and state) or a
                # diverged optimisation; either way nothing after this step would mean anything.
                check_loss(value, train_feed, batch, epoch=epoch, step=step, lr=config.lr)
                losses.append(value)
                bar.step(float(np.mean(losses[-50:])))
            try:
                metrics, _ = evaluate(model, val_feed, device)
            except NonFiniteOutputsError:
                error = first_non_finite_input(train_feed)  # NaN states the loss ignored poisoned the weights
                if error is not None:
                    raise error from None
                raise DivergedError(f"Training diverged at epoch {epoch}: the head's validation outputs are not "
                                    f"finite on finite states; lower {option('lr')} (it was {config.lr:g}).") from None
            score = selection.score(metrics)
            if config.schedule == "plateau":
                scheduler.step(score)
            val = selection.values(metrics)
            record = EpochRecord(epoch, float(np.mean(losses)) if losses else float("nan"), score, val,
                                 optimizer.param_groups[0]["lr"], time.perf_counter() - t0)
            history.epochs.append(record)
            bar.validated(epoch, {task: (selection.metrics[task], value) for task, value in val.items()})
            if log is not None:
                log(record)
            # The one selection rule (best_epoch), applied to the epochs so far.
            best = best_epoch([e.val_score for e in history.epochs])
            if best == epoch:
                history.best_score, history.best_epoch = score, epoch
                best_state = copy.deepcopy(model.state_dict())
            elif config.patience and epoch - best >= config.patience:
                history.stopped_early = True
            if checkpoint is not None:
                checkpoint.save({"epoch": epoch, "step": step, "done": history.stopped_early,
                                 "seconds": time.perf_counter() - started, "model": model.state_dict(),
                                 "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                                 "history": history.to_json(), "best_state": best_state, "random": random_state()})
            if history.stopped_early:
                bar.end_at(step)
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    history.seconds = time.perf_counter() - started
    return history
