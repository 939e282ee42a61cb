"""An ensemble head: fitted head models over the same states and tasks, predicting with their average.

Two kinds are built (:class:`~..estimator.LayerHead`): a **seed ensemble** (``seeds=M``,
:meth:`~..estimator.LayerHead.from_seeds`), one head trained from several seeds, and an ensemble
of **different heads** (:meth:`~..estimator.LayerHead.from_members`; ``layercache sweep --ensemble
K`` saves its top ``K`` candidates so). Minibatch training ends in a different optimum for every
seed (initialisation, shuffling, dropout, Gumbel noise), and which seed is best on a validation
slice of a few hundred examples is mostly noise: a sweep's best seed scored under the mean of its
seeds on SST-2's held-out split. The average of the seeds' class probabilities is both steadier
and better than a typical seed (three MiniLM ``adaptive`` seeds on SST-2 score 0.857, 0.854 and
0.865; their average 0.866; ``benchmarks/README.md``), for the price of running the head ``M``
times, which beside a backbone's forward pass is small.

:class:`EnsembleModel` stands in for a :class:`~..network.model.HeadModel` wherever a fitted head is used:
evaluation, the live bundle, saving and loading; a member may itself be an ensemble (a sweep's
top candidates, each its seeds averaged). Its output per task is what the members agree on:

- classification (sequence ``(B, C)``, token ``(B, T, C)``): ``log`` of the members' mean class
  probabilities, so a softmax of it gives the mean probabilities back and its argmax is the soft vote;
- regression ``(B, 1)``: the mean of the members' predictions in the targets' own units.

Usage summaries and layer weights keep each member's under ``<mixer key>[<member>]``
(:func:`~.passes.member_key`). The model is never trained as one; its members were.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...core.tasks import LabelTask
from ...errors import ConfigError
from ..network.model import HeadModel, HeadOutput
from ..training.trainer import TrainHistory
from .passes import member_key

KIND = "ensemble"
"""``config["kind"]`` of a saved ensemble (a plain head model's config has no ``kind``)."""


class EnsembleModel(nn.Module):
    """Several head models over the same states and tasks, predicting with their average (see the module docstring).

    Args:
        members: the fitted models (head models or ensembles); they must read the same number of
            states of the same width, with the same tasks (names, kinds and labels) and the same
            token means.
    """

    def __init__(self, members: Sequence[HeadModel | EnsembleModel]) -> None:
        super().__init__()
        if len(members) < 2:
            raise ConfigError(f"An ensemble needs at least 2 members, got {len(members)}.")
        first = members[0]
        for i, m in enumerate(members[1:], start=1):
            if ([t.to_json() for t in m.tasks] != [t.to_json() for t in first.tasks]
                    or (m.n_states, m.dim, m.mean_skip_first) != (first.n_states, first.dim, first.mean_skip_first)):
                raise ConfigError(f"Member {i} of the ensemble reads other states or predicts other tasks than "
                                  "member 0; an ensemble averages heads trained on the same states of one cache.")
        self.members = nn.ModuleList(members)

    # --- what a HeadModel exposes -----------------------------------------------------------
    @property
    def first(self) -> HeadModel | EnsembleModel:
        """The first member (its states, tasks and token means are every member's)."""
        return self.members[0]

    @property
    def tasks(self) -> list[LabelTask]:
        """The members' label tasks."""
        return self.first.tasks

    @property
    def n_states(self) -> int:
        """States per token the members read (S)."""
        return self.first.n_states

    @property
    def dim(self) -> int:
        """Their width (D)."""
        return self.first.dim

    @property
    def normalize(self) -> str:
        """The members' input normalisation."""
        return self.first.normalize

    @property
    def mean_skip_first(self) -> bool:
        """Whether token means leave out the first token."""
        return self.first.mean_skip_first

    @property
    def loss_weights(self) -> dict[str, float]:
        """The first member's loss weights per task (what weighs a joint selection score)."""
        return self.first.loss_weights

    @property
    def mixer_spec(self) -> str:
        """The members' mixer specs: ``adaptive``, or ``ensemble of adaptive, layer:3``."""
        specs = list(dict.fromkeys(m.mixer_spec for m in self.members))
        return specs[0] if len(specs) == 1 else f"ensemble of {', '.join(specs)}"

    @property
    def mixers(self) -> dict[str, nn.Module]:
        """Every member's mixers, keyed ``<key>[<member>]`` as their usage is (a plain dict: the members own them)."""
        return {member_key(key, i): mixer for i, m in enumerate(self.members) for key, mixer in m.mixers.items()}

    def task(self, name: str) -> LabelTask:
        """The label task called ``name``."""
        return self.first.task(name)

    # --- computation --------------------------------------------------------------------
    def forward(self, states: Tensor, mask: Tensor, scales: Tensor | None = None) -> HeadOutput:
        """``states (B, T, S, D)``, ``mask (B, T)`` (``scales (B, T, S, 1)`` for int8 states) -> every task's
        averaged output (see the module docstring)."""
        outs = [m(states, mask, scales) for m in self.members]
        outputs = {}
        for t in self.tasks:
            if t.kind == "regression":
                values = torch.stack([m.regression_values(t.name, o.outputs[t.name])
                                      for m, o in zip(self.members, outs)])  # (M, B)
                outputs[t.name] = values.float().mean(0).unsqueeze(-1)  # (B, 1)
            else:
                # (M, B, C) or (M, B, T, C)
                logp = torch.stack([torch.log_softmax(o.outputs[t.name].float(), dim=-1) for o in outs])
                outputs[t.name] = torch.logsumexp(logp, dim=0) - math.log(len(outs))  # log mean probability
        usage = {member_key(key, i): u for i, o in enumerate(outs) for key, u in o.usage.items()}
        return HeadOutput(outputs=outputs, aux_loss=torch.zeros((), device=states.device), usage=usage)

    def regression_values(self, task: str, output: Tensor) -> Tensor:
        """Predictions of a regression task ``(B,)``: the averaged output is already in the targets' units."""
        return output.squeeze(-1)

    def layer_weights(self) -> dict[str, list[float] | None]:
        """Each member's global layer weights, keyed ``<key>[<member>]``."""
        return {member_key(key, i): w for i, m in enumerate(self.members) for key, w in m.layer_weights().items()}

    # --- persistence --------------------------------------------------------------------
    def get_config(self) -> dict:
        """JSON-ready settings: ``kind`` and every member's :meth:`HeadModel.get_config`."""
        return {"kind": KIND, "members": [m.get_config() for m in self.members]}

    @classmethod
    def from_config(cls, config: dict) -> "EnsembleModel":
        """Untrained members from :meth:`get_config`; load the state dict next."""
        return cls([model_from_config(c) for c in config["members"]])


def model_from_config(config: dict) -> HeadModel | EnsembleModel:
    """The untrained model a saved run's ``config["model"]`` describes: a head model or an ensemble."""
    if config.get("kind") == KIND:
        return EnsembleModel.from_config(config)
    if "kind" in config:
        raise ConfigError(f"Unknown head model kind {config['kind']!r}; a newer layercache may have written it.")
    return HeadModel.from_config(config)


@dataclass
class EnsembleHistory:
    """How an ensemble's members trained, with :class:`TrainHistory`'s ``summary`` and ``to_json``."""

    members: list
    """Each member's :class:`TrainHistory` (or :class:`EnsembleHistory`, a member that is an ensemble)."""
    labels: list[str]
    """How each member is named: ``seed 0``, or a sweep candidate ``adaptive lr×0.3``."""
    seeds: list[int] | None = None
    """A seed ensemble's seeds; None for an ensemble of different heads."""

    @property
    def out_of_time(self) -> bool:
        """Whether any member stopped early for lack of time."""
        return any(h.out_of_time for h in self.members)

    @property
    def seconds(self) -> float:
        """Wall time of every member's training."""
        return sum(h.seconds for h in self.members)

    def to_json(self) -> dict:
        """``{"seeds", "labels", "members": [each member's history]}``."""
        return {"seeds": self.seeds, "labels": list(self.labels), "members": [h.to_json() for h in self.members]}

    def summary(self, selection: str) -> str:
        """``3 seeds averaged (best epochs 7, 5, 7 by accuracy)`` or ``3 heads averaged (adaptive, ...)``."""
        if self.seeds is not None and all(isinstance(h, TrainHistory) for h in self.members):
            epochs = ", ".join(str(h.best_epoch) for h in self.members)
            return f"{len(self.members)} seeds averaged (best epochs {epochs} by {selection})"
        return f"{len(self.members)} heads averaged ({', '.join(self.labels)}), each selected by {selection}"
