"""The ELMo / Tenney scalar mix: one learned softmax weight per state and a global scale."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from layercache.errors import ConfigError
from layercache.heads.mixers.base import LayerMixer, MixOutput, bare_layer_norm, register_mixer


@register_mixer
class ScalarMix(LayerMixer):
    """ELMo / Tenney et al. scalar mix: ``γ · Σ_l softmax(w)_l · N(h_l)``.

    ``w`` starts at 0 (a plain mean) and ``γ`` at 1. With ``layer_norm`` each state is normalised
    per token without affine parameters (AllenNLP normalises over the whole batch, which makes a
    prediction depend on its batch-mates). With ``include_embeddings=False`` state 0 gets weight 0.
    """

    name: ClassVar[str] = "scalar"
    pooled_form: ClassVar[str | None] = "scalar without layer_norm"

    def __init__(
        self, n_states: int, dim: int, *, layer_norm: bool = False, include_embeddings: bool = True
    ) -> None:
        super().__init__(n_states, dim)
        if not include_embeddings and n_states < 2:
            raise ConfigError("include_embeddings=False needs at least 2 cached states, got 1")
        self.layer_norm = layer_norm
        self.include_embeddings = include_embeddings
        self.scalar_weights = nn.Parameter(torch.zeros(n_states))  # (S,)
        self.gamma = nn.Parameter(torch.ones(()))

    def commutes_with_token_mean(self) -> bool:
        """True without ``layer_norm``: one weighted sum of the states at every token."""
        return not self.layer_norm  # a per-token norm is not linear

    def weights(self) -> Tensor:
        """The mixing weights ``softmax(w)``, shape ``(S,)``, with gradient."""
        logits = self.scalar_weights  # (S,)
        if not self.include_embeddings:
            excluded = torch.zeros_like(logits, dtype=torch.bool)
            excluded[0] = True
            logits = logits.masked_fill(excluded, float("-inf"))
        return torch.softmax(logits, dim=0)  # (S,)

    def _mix(self, states: Tensor, mask: Tensor) -> MixOutput:
        h = bare_layer_norm(states) if self.layer_norm else states  # (B, T, S, D)
        mixed = self.gamma * torch.einsum("s,btsd->btd", self.weights(), h)  # (B, T, D)
        return MixOutput(mixed=mixed, aux_loss=self._zero(states))

    def layer_params(self) -> list[nn.Parameter]:
        """The weight logits ``w`` and the scale ``γ``."""
        return [self.scalar_weights, self.gamma]

    def layer_weights(self) -> np.ndarray:
        """``softmax(w)`` (0 for the embeddings when they are excluded)."""
        return self.weights().detach().double().cpu().numpy()
