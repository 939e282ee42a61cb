"""A SpotTune / BlockDrop-style policy: each example makes a hard, learned choice of the states it uses."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from layercache.errors import ConfigError
from layercache.heads.mixers.base import LayerMixer, MixOutput, bare_layer_norm, masked_mean, register_mixer


@register_mixer
class GumbelMix(LayerMixer):
    """SpotTune / BlockDrop-style policy: each example picks which states to use, hard 0/1.

    A small policy (linear, or one hidden layer when ``policy_hidden > 0``) reads a cheap summary —
    the masked mean over tokens of state 0 (the embeddings, parameter-free layer-normed so its scale
    does not depend on the backbone) — and emits two logits (skip, use) per state. Training:
    straight-through Gumbel-softmax ``softmax((logits + g)/tau)`` with a hard one-hot forward and the
    soft gradient; eval: argmax, no noise. ``mixed`` is the mean of the used states; an example
    that would use none uses the state the policy wants most (largest use − skip logit).

    ``aux_loss = budget_weight · (mean_usage − budget/S)² + decision_weight · mean H(P(use))``: the
    first term pulls usage toward ``budget`` states (default ``ceil(S/2)``); the second (mean binary
    entropy of each state's use probability, in bits) makes the policy decisive. Without it the
    policy can meet the budget *in expectation* by using every state with probability budget/S,
    and the noise-free argmax at evaluation then uses every state (BlockDrop adds a usage-entropy
    term for the same reason). The decisiveness term grows with training progress (see
    :meth:`set_temperature_progress`), so early steps still explore. ``tau`` starts at ``tau_start``;
    :meth:`set_temperature_progress` (called by the trainer through :meth:`training_progress`)
    anneals it exponentially to ``tau_end``. ``usage["choices"]`` is ``(B, S)`` in {0, 1};
    ``usage["weights"]`` ``(B, S)`` the resulting mixing weights.
    """

    name: ClassVar[str] = "gumbel"
    input_dependent: ClassVar[bool] = True
    #: The Gumbel-softmax temperature schedule (5 -> 0.5) at 0.4 and 2 times, start and end alike.
    sweep_options: ClassVar[tuple[dict, ...]] = ({"tau_start": 2.0, "tau_end": 0.2},
                                                 {"tau_start": 10.0, "tau_end": 1.0})
    usage_labels: ClassVar[dict[str, str]] = {"mean_states_used": "states used per example"}

    def __init__(
        self,
        n_states: int,
        dim: int,
        *,
        budget: int | None = None,
        budget_weight: float = 10.0,
        decision_weight: float = 0.1,
        policy_hidden: int = 0,
        tau_start: float = 5.0,
        tau_end: float = 0.5,
    ) -> None:
        super().__init__(n_states, dim)
        if budget is None:
            budget = math.ceil(n_states / 2)
        if not isinstance(budget, int) or not 1 <= budget <= n_states:
            raise ConfigError(f"budget must be an int in 1..{n_states} (states to use), got {budget!r}")
        if not isinstance(policy_hidden, int) or policy_hidden < 0:
            raise ConfigError(f"policy_hidden must be an int >= 0 (0 = linear), got {policy_hidden!r}")
        if not (tau_start > 0 and tau_end > 0):
            raise ConfigError(f"tau_start and tau_end must be > 0, got {tau_start!r}, {tau_end!r}")
        self.budget = budget
        self.budget_weight = budget_weight
        self.decision_weight = decision_weight
        self.policy_hidden = policy_hidden
        self.tau_start = tau_start
        self.tau_end = tau_end
        self.tau = float(tau_start)
        self.progress = 0.0
        if policy_hidden:
            out = nn.Linear(policy_hidden, 2 * n_states)
            self.policy = nn.Sequential(nn.Linear(dim, policy_hidden), nn.GELU(), out)
        else:
            out = nn.Linear(dim, 2 * n_states)
            self.policy = out
        # Start at the budget: P(use) = budget/S for every state, so the penalty does not yank the
        # policy around in the first steps (clamped: a full budget would need an infinite bias).
        with torch.no_grad():
            rate = min(max(budget / n_states, 0.02), 0.98)
            out.bias.view(n_states, 2)[:, 0] = 0.0
            out.bias.view(n_states, 2)[:, 1] = math.log(rate / (1 - rate))

    def set_temperature_progress(self, frac: float) -> float:
        """Set ``tau = tau_start · (tau_end/tau_start)^frac`` for training progress ``frac`` in [0, 1];
        the decisiveness penalty is scaled by ``frac`` too."""
        if not 0.0 <= frac <= 1.0:
            raise ValueError(f"training progress must be in [0, 1], got {frac!r}")
        self.tau = self.tau_start * (self.tau_end / self.tau_start) ** frac
        self.progress = frac
        return self.tau

    def training_progress(self, fraction: float) -> None:
        """Anneal ``tau`` and scale the decisiveness penalty to training progress ``fraction``."""
        self.set_temperature_progress(fraction)

    def usage_totals(self, usage: dict[str, Tensor], mask: Tensor) -> dict[str, tuple[float, int]]:
        """States used, summed over the batch's examples, and the number of examples."""
        return {"mean_states_used": (float(usage["choices"].sum()), mask.shape[0])}

    def policy_logits(self, states: Tensor, mask: Tensor) -> Tensor:
        """Per-example (skip, use) logits for each state, shape ``(B, S, 2)``."""
        summary = bare_layer_norm(masked_mean(states[:, :, 0], mask, self.mean_skip_first))  # (B, D)
        return self.policy(summary).view(-1, self.n_states, 2)  # (B, S, 2)

    def _mix(self, states: Tensor, mask: Tensor) -> MixOutput:
        logits = self.policy_logits(states, mask)  # (B, S, 2)
        if self.training:
            # -log(Exponential(1)) is Gumbel(0, 1), i.e. -log(-log U), without log(0) at U = 0.
            g = -torch.empty_like(logits).exponential_().log()  # (B, S, 2)
            soft = torch.softmax((logits + g) / self.tau, dim=-1)  # (B, S, 2)
            hard = F.one_hot(soft.argmax(-1), 2).to(soft.dtype)  # (B, S, 2)
            # Parenthesised so the value is exactly hard: (soft - soft.detach()) is exactly 0.
            choices = (hard + (soft - soft.detach()))[..., 1]  # (B, S) values 0/1, soft gradient
        else:
            choices = (logits[..., 1] > logits[..., 0]).to(logits.dtype)  # (B, S)
        none = choices.detach().sum(-1) == 0  # (B,)
        if none.any():
            preferred = (logits[..., 1] - logits[..., 0]).argmax(-1)  # (B,)
            forced = F.one_hot(preferred, self.n_states).to(choices.dtype)  # (B, S)
            choices = choices + none.unsqueeze(-1).to(choices.dtype) * forced  # (B, S)
        w = choices / choices.sum(-1, keepdim=True)  # (B, S)
        mixed = torch.einsum("bs,btsd->btd", w, states)  # (B, T, D)
        aux = self.budget_weight * (choices.mean() - self.budget / self.n_states) ** 2
        if self.decision_weight and self.progress > 0:
            p_use = torch.softmax(logits, dim=-1)[..., 1].clamp(1e-6, 1 - 1e-6)  # (B, S)
            entropy = -(p_use * p_use.log2() + (1 - p_use) * (1 - p_use).log2())  # (B, S) bits
            aux = aux + self.decision_weight * self.progress * entropy.mean()
        self._track_usage(w, mask)
        usage = {"choices": choices.detach(), "weights": w.detach()}
        return MixOutput(mixed=mixed, aux_loss=aux, usage=usage)
