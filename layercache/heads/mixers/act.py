"""Adaptive computation time over the cached layers, per token (Graves 2016)."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from layercache.errors import ConfigError
from layercache.heads.mixers.base import LayerMixer, MixOutput, bare_layer_norm, register_mixer


@register_mixer
class ACTMix(LayerMixer):
    """Adaptive computation time over the cached layers, per token (Graves 2016).

    Steps n = 1..L walk states 1..S−1 (the embeddings are not a step). Halting probability
    ``p_n = σ(w · LN(h_n) + b)``; the token halts at the first n with ``Σ_{m≤n} p_m ≥ 1 − eps``
    (or at n = L) with remainder ``R = 1 − Σ_{m<N} p_m``. Weights: ``p_m`` before the halting step,
    ``R`` at it; ``mixed = Σ_n weight_n h_n`` (Graves' weighted mean). Ponder cost
    ``ρ = N + R``; ``aux_loss = ponder_weight · mean(ρ)`` over real tokens (``ponder_weight`` is
    Graves' τ), with gradient through R and the p's.

    Bounds: ``N ∈ [1, L]``; R = 1 when N = 1, otherwise ``eps < R ≤ 1`` (the sum before the halting
    step is below 1 − eps), so ``ρ ∈ [2, L + 1]``.

    The halting unit reads a parameter-free layer norm of the state (ALBERT-ACT's halting unit
    read post-LN states; pre-LN backbones have residual streams whose norm grows with depth).
    ``w`` starts at 0 and ``b`` at ``logit(1/L)``: every step then halts with probability 1/L, so
    training starts from the plain mean of layers 1..L with every layer receiving gradient.
    A bias of 0 would give p = 0.5 and halt every token at step 2 before learning anything.
    ``usage``: ``weights (B, T, S)`` (0 for the embeddings), ``steps`` N and ``depth`` N + R, both
    ``(B, T)``.
    """

    name: ClassVar[str] = "act"
    input_dependent: ClassVar[bool] = True
    per_token_depth: ClassVar[bool] = True
    #: The price of depth, Graves' τ (default 1e-3), ten times lower and higher.
    sweep_options: ClassVar[tuple[dict, ...]] = ({"ponder_weight": 1e-4}, {"ponder_weight": 1e-2})
    usage_labels: ClassVar[dict[str, str]] = {"mean_depth": "mean depth N+R per token"}

    def __init__(
        self, n_states: int, dim: int, *, eps: float = 0.01, ponder_weight: float = 1e-3
    ) -> None:
        super().__init__(n_states, dim)
        if n_states < 2:
            raise ConfigError(
                f"act needs at least one layer after the embeddings (n_states >= 2), got {n_states}"
            )
        if not 0.0 <= eps < 1.0:
            raise ConfigError(f"eps must be in [0, 1), got {eps!r}")
        self.eps = eps
        self.ponder_weight = ponder_weight
        n_steps = n_states - 1
        self.halting = nn.Linear(dim, 1)
        with torch.no_grad():
            self.halting.weight.zero_()
            # logit(1/L); a single step (L = 1) always halts anyway, so any bias does.
            self.halting.bias.fill_(-math.log(n_steps - 1) if n_steps > 1 else 0.0)

    @property
    def n_steps(self) -> int:
        """L, the number of layers walked."""
        return self.n_states - 1

    def usage_totals(self, usage: dict[str, Tensor], mask: Tensor) -> dict[str, tuple[float, int]]:
        """The depth N + R summed over the batch's real tokens, and the number of real tokens."""
        return {"mean_depth": (float(usage["depth"][mask].sum()), int(mask.sum()))}

    def _mix(self, states: Tensor, mask: Tensor) -> MixOutput:
        layers = states[:, :, 1:]  # (B, T, L, D)
        L = layers.shape[2]
        p = torch.sigmoid(self.halting(bare_layer_norm(layers)).squeeze(-1))  # (B, T, L)
        reached = p.cumsum(-1) >= 1.0 - self.eps  # (B, T, L)
        reached[..., -1] = True  # step L always halts
        halt = reached.to(torch.uint8).argmax(-1)  # (B, T) first halting step, 0-based
        step = torch.arange(L, device=states.device)  # (L,)
        before = step < halt.unsqueeze(-1)  # (B, T, L)
        remainder = 1.0 - (p * before).sum(-1)  # (B, T)
        at_halt = (step == halt.unsqueeze(-1)).to(p.dtype)  # (B, T, L)
        w = torch.where(before, p, torch.zeros_like(p)) + at_halt * remainder.unsqueeze(-1)  # (B, T, L)
        mixed = torch.einsum("btl,btld->btd", w, layers)  # (B, T, D)
        n_taken = (halt + 1).to(p.dtype)  # (B, T) N in [1, L]
        ponder = n_taken + remainder  # (B, T)
        real = mask.to(p.dtype)  # (B, T)
        aux = self.ponder_weight * (ponder * real).sum() / real.sum().clamp_min(1.0)
        w_states = F.pad(w, (1, 0))  # (B, T, S) embeddings weigh 0
        self._track_usage(w_states, mask)
        usage = {"weights": w_states.detach(), "steps": n_taken.detach(), "depth": ponder.detach()}
        return MixOutput(mixed=mixed, aux_loss=aux, usage=usage)
