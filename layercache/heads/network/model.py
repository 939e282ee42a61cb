"""A head model: layer mixer(s) plus one task head per label task, trained jointly.

``HeadModel`` reads cached states ``(B, T, S, D)`` and returns one output per task. By default all
tasks share one mixer (the transformer-heads multi-task case: one representation, several heads);
``share_mixer=False`` gives each task its own mixer, so each learns its own layer weights from the
same pass over the cache. The total loss is ``Σ_task weight_task · loss_task + Σ mixer aux losses``;
a classification task's cross-entropy may weigh its classes (``class_weights``, resolved by
:mod:`..training.class_weights`).

Before the mixers, the states pass through the input normalisation (:mod:`.normalize`); with
``mean_skip_first`` every token mean in the model (mean pooling, the ``gumbel`` policy's summary)
leaves out each example's first token, as a cache that records ``mean_skip_first`` pools.

The model is rebuilt from :meth:`HeadModel.get_config` (plain JSON) plus a state dict: nothing is
pickled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from ...core.tasks import LabelTask
from ...errors import ConfigError
from ..blocks.normalize import StateNorm
from ..mixers import LayerMixer, MixOutput, dequantized, make_mixer
from .tasks import make_task_head, task_loss


@dataclass
class HeadOutput:
    """Per-task outputs of one forward pass, the mixers' auxiliary loss and their usage."""

    outputs: dict[str, Tensor]
    """task -> ``(B, C)`` / ``(B, 1)`` for sequence tasks, ``(B, T, C)`` for token tasks."""
    aux_loss: Tensor
    usage: dict[str, dict[str, Tensor] | None]
    """mixer key -> the mixer's usage for this batch (per-token depth for ``act`` ...)."""


class HeadModel(nn.Module):
    """Mixer(s) and task heads over cached states.

    Args:
        n_states: states per token in the batches (S).
        dim: their width (D).
        tasks: the label tasks to predict.
        mixer: a mixer spec (``adaptive``, ``scalar``, ``layer:3`` ... see :func:`make_mixer`).
        mixer_options: keyword options of that mixer.
        head_options: options of the task heads, one dict for all tasks or ``{task: dict}``;
            missing settings take the mixer's :meth:`~LayerMixer.default_head_options`.
        share_mixer: one mixer for all tasks (True) or one per task.
        loss_weights: ``{task: weight}``, default 1 each.
        normalize: ``none``, ``standardize`` (then give the statistics with :meth:`set_state_stats`)
            or ``layer_norm``; see :mod:`.normalize`.
        mean_skip_first: token means leave out each example's first token when it has more than
            one (a decoder's BOS / attention sink), matching a cache that pools that way.
        class_weights: ``{task: [weight per class]}`` for the cross-entropy of classification
            tasks (default: unweighted); also settable later with :meth:`set_class_weights`.
    """

    def __init__(self, n_states: int, dim: int, tasks: list[LabelTask], *, mixer: str = "adaptive",
                 mixer_options: dict | None = None, head_options: dict | None = None, share_mixer: bool = True,
                 loss_weights: dict[str, float] | None = None, normalize: str = "none",
                 mean_skip_first: bool = False, class_weights: dict[str, list[float]] | None = None) -> None:
        super().__init__()
        if not tasks:
            raise ConfigError("A head model needs at least one label task.")
        self.n_states, self.dim, self.tasks = n_states, dim, list(tasks)
        self.mixer_spec, self.mixer_options = mixer, dict(mixer_options or {})
        self.share_mixer = share_mixer or len(tasks) == 1
        names = [t.name for t in tasks]
        self.loss_weights = {t: float((loss_weights or {}).get(t, 1.0)) for t in names}
        unknown = sorted(set(loss_weights or {}) - set(names))
        if unknown:
            raise ConfigError(f"Loss weights name unknown task(s) {', '.join(unknown)}; tasks: {', '.join(names)}.")
        self.normalize, self.mean_skip_first = normalize, bool(mean_skip_first)
        # Built first, buffers only: no random numbers drawn, so "none" initialises exactly as before.
        self.norm = StateNorm(normalize, n_states, dim)
        keys = ["shared"] if self.share_mixer else names
        self.mixers = nn.ModuleDict({k: make_mixer(mixer, n_states, dim, **self.mixer_options) for k in keys})
        self.head_options = self._resolve_head_options(head_options)
        self.heads = nn.ModuleDict({
            t.name: make_task_head(t, self.mixer_for(t.name).out_dim, self.head_options[t.name]) for t in tasks})
        # Mixers that widen their own inputs standardise them in that same pass (layer:<i> only the
        # state it reads): no standardised float32 copy of the whole batch first.
        self._mixers_standardize = normalize == "standardize" and all(
            m.widens_own_inputs for m in self.mixers.values())
        # A model-wide setting, not a per-mixer or per-head option: every token mean pools alike.
        for module in [*self.mixers.values(), *self.heads.values()]:
            module.mean_skip_first = self.mean_skip_first
        # Regression heads predict standardised targets; the trainer sets these from the train split.
        for t in tasks:
            if t.kind == "regression":
                self.register_buffer(f"target_mean_{t.name}", torch.zeros(()))
                self.register_buffer(f"target_std_{t.name}", torch.ones(()))
        self.class_weights: dict[str, list[float]] = {}
        for name, weights in (class_weights or {}).items():
            self.set_class_weights(name, weights)

    def _resolve_head_options(self, options: dict | None) -> dict[str, dict]:
        options = dict(options or {})
        names = {t.name for t in self.tasks}
        per_task = bool(options) and set(options) <= names and all(isinstance(v, dict) for v in options.values())
        out = {}
        for task in self.tasks:
            given = options.get(task.name, {}) if per_task else options
            merged = {**self.mixer_for(task.name).default_head_options(task.kind), **given}
            if task.kind == "token":
                merged = {k: v for k, v in merged.items() if k not in ("pooling", "hidden")}
            else:
                merged = {k: v for k, v in merged.items() if k not in ("encoder_layers", "ff_dim")}
            out[task.name] = merged
        return out

    # --- structure ----------------------------------------------------------------------
    def mixer_for(self, task: str) -> LayerMixer:
        """The mixer whose output ``task``'s head reads (the shared one, or the task's own)."""
        return self.mixers[self.mixer_key(task)]

    def task(self, name: str) -> LabelTask:
        """The label task called ``name``."""
        return next(t for t in self.tasks if t.name == name)

    def get_config(self) -> dict:
        """JSON-ready settings; :meth:`from_config` rebuilds an untrained model from them."""
        return {"n_states": self.n_states, "dim": self.dim, "tasks": [t.to_json() for t in self.tasks],
                "mixer": self.mixer_spec, "mixer_options": self.mixer_options, "head_options": self.head_options,
                "share_mixer": self.share_mixer, "loss_weights": self.loss_weights, "normalize": self.normalize,
                "mean_skip_first": self.mean_skip_first, "class_weights": self.class_weights}

    @classmethod
    def from_config(cls, config: dict) -> "HeadModel":
        """An untrained model from :meth:`get_config`'s settings; load its state dict next."""
        # Runs saved before these settings existed read raw states and pooled over every token.
        return cls(config["n_states"], config["dim"], [LabelTask.from_json(t) for t in config["tasks"]],
                   mixer=config["mixer"], mixer_options=config["mixer_options"],
                   head_options=config["head_options"], share_mixer=config["share_mixer"],
                   loss_weights=config["loss_weights"], normalize=config.get("normalize", "none"),
                   mean_skip_first=config.get("mean_skip_first", False),
                   class_weights=config.get("class_weights"))

    def set_state_stats(self, mean: np.ndarray, std: np.ndarray) -> None:
        """The per-state, per-dimension training statistics ``(S, D)`` that ``standardize`` uses."""
        if self.normalize != "standardize":
            raise ConfigError(f"State statistics are for normalize='standardize'; this model has {self.normalize!r}.")
        self.norm.set_stats(mean, std)

    # --- computation --------------------------------------------------------------------
    def mix(self, states: Tensor, mask: Tensor, scales: Tensor | None = None) -> dict[str, MixOutput]:
        """``states (B, T, S, D)`` and ``mask (B, T)``, normalised and mixed: mixer key -> its output.

        ``scales (B, T, S, 1)``: the factors of int8 states (:func:`~layercache.heads.mixers.base.dequantized`),
        handed to the mixers, which apply them where they widen the states. What every head reads
        (``mixed (B, T, D_out)``); :meth:`forward` puts the heads on top.
        """
        standardize = None
        if self._mixers_standardize:
            standardize = self.norm.affine
        elif self.normalize != "none":
            if scales is not None:
                states, scales = dequantized(states, scales, torch.float32), None
            states = self.norm(states)  # (B, T, S, D) float32
        return {key: mixer(states, mask, scales=scales, standardize=standardize) for key, mixer in self.mixers.items()}

    def mixer_key(self, task: str) -> str:
        """The key in ``self.mixers`` (and in :meth:`mix`'s result) of the mixer ``task``'s head reads."""
        return "shared" if self.share_mixer else task

    def forward(self, states: Tensor, mask: Tensor, scales: Tensor | None = None) -> HeadOutput:
        """``states (B, T, S, D)``, ``mask (B, T)`` (and an int8 cache's ``scales (B, T, S, 1)``) -> every task's
        output."""
        mixed = self.mix(states, mask, scales)
        outputs = {}
        for t in self.tasks:
            mix = mixed[self.mixer_key(t.name)]
            outputs[t.name] = self.heads[t.name](mix.mixed, mask)
        aux = sum((m.aux_loss for m in mixed.values()), torch.zeros((), device=states.device))
        return HeadOutput(outputs=outputs, aux_loss=aux, usage={k: m.usage for k, m in mixed.items()})

    def loss(self, out: HeadOutput, labels: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        """Weighted sum of task losses plus the mixers' auxiliary loss; also each task's loss value."""
        total = out.aux_loss
        parts = {}
        for t in self.tasks:
            target = labels[t.name]
            if t.kind == "regression":
                target = (target - getattr(self, f"target_mean_{t.name}")) / getattr(self, f"target_std_{t.name}")
            loss = task_loss(t, out.outputs[t.name], target, self.class_weight_tensor(t.name))
            parts[t.name] = float(loss.detach())
            total = total + self.loss_weights[t.name] * loss
        return total, parts

    def set_class_weights(self, task: str, weights) -> None:
        """Weigh ``task``'s classes in its cross-entropy by ``weights`` (one positive number per class)."""
        known = {t.name: t for t in self.tasks}
        if task not in known or known[task].kind == "regression":
            classified = ", ".join(t.name for t in self.tasks if t.kind != "regression") or "none"
            raise ConfigError(f"Class weights name {task!r}, which is not a classification task of this model "
                              f"(those are: {classified}).")
        values = [float(w) for w in weights]
        n = known[task].num_classes
        if len(values) != n or not all(math.isfinite(w) and w > 0 for w in values):
            raise ConfigError(f"Task {task!r} needs {n} positive class weights, got {values}.")
        self.class_weights[task] = values
        # A buffer, so it follows the model to its device; not persistent: the config holds it. Named
        # by the task's position: a task name need not be a valid attribute name.
        device = next(iter([*self.parameters(), *self.buffers()]), torch.empty(0)).device
        self.register_buffer(self._class_weight_buffer(task), torch.tensor(values, dtype=torch.float32, device=device),
                             persistent=False)

    def _class_weight_buffer(self, task: str) -> str:
        return f"class_weight_{[t.name for t in self.tasks].index(task)}"

    def class_weight_tensor(self, task: str) -> Tensor | None:
        """``task``'s class weights ``(C,)`` on the model's device, or None when its classes weigh alike."""
        return getattr(self, self._class_weight_buffer(task)) if task in self.class_weights else None

    def set_target_stats(self, task: str, values: np.ndarray) -> None:
        """Standardise a regression task's targets with the mean and std of ``values``."""
        std = float(np.std(values)) or 1.0
        getattr(self, f"target_mean_{task}").fill_(float(np.mean(values)))
        getattr(self, f"target_std_{task}").fill_(std)

    def regression_values(self, task: str, output: Tensor) -> Tensor:
        """Predictions of a regression head in the targets' own units, ``(B,)``."""
        return output.squeeze(-1) * getattr(self, f"target_std_{task}") + getattr(self, f"target_mean_{task}")

    def layer_weights(self) -> dict[str, list[float] | None]:
        """Each mixer's global layer weights (``(S,)``, summing to 1), keyed like ``self.mixers``."""
        out = {}
        for key, mixer in self.mixers.items():
            w = mixer.layer_weights()
            out[key] = None if w is None else [float(x) for x in np.asarray(w)]
        return out
