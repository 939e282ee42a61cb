"""Input-dependent attention over the layers, per token (not the heads' self-attention over tokens)."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from layercache.errors import ConfigError
from layercache.heads.mixers.base import LayerMixer, MixOutput, bare_layer_norm, register_mixer


@register_mixer
class AttentionMix(LayerMixer):
    """Input-dependent attention over layers, per token: ``s_l = qᵀ tanh(U · LN(h_l)) + b_l``.

    Weights ``softmax(s)`` over the S states of each token; ``mixed = Σ_l w_l h_l``. The score reads
    a parameter-free layer norm of each state because the scale of hidden states varies by orders of
    magnitude across layers of real models, which would saturate ``tanh`` and make the score a
    proxy for the norm; the mix itself uses the raw states (or normalised ones with
    ``layer_norm``). ``q`` starts at 0 so training starts from the plain mean of the states; the
    optional per-state bias ``b`` (``layer_bias``, starts at 0) lets the module learn a global
    layer preference, as a scalar mix does, on top of the per-token one.
    ``usage["weights"]`` is ``(B, T, S)``.
    """

    name: ClassVar[str] = "attention"
    input_dependent: ClassVar[bool] = True
    #: The scoring width a quarter and four times the default (64).
    sweep_options: ClassVar[tuple[dict, ...]] = ({"attn_dim": 16}, {"attn_dim": 256})

    def __init__(
        self,
        n_states: int,
        dim: int,
        *,
        attn_dim: int = 64,
        layer_bias: bool = True,
        layer_norm: bool = False,
    ) -> None:
        super().__init__(n_states, dim)
        if not isinstance(attn_dim, int) or attn_dim < 1:
            raise ConfigError(f"attn_dim must be a positive int, got {attn_dim!r}")
        self.attn_dim = attn_dim
        self.layer_bias = layer_bias
        self.layer_norm = layer_norm
        self.key = nn.Linear(dim, attn_dim, bias=False)  # U
        self.query = nn.Parameter(torch.zeros(attn_dim))  # q
        if layer_bias:
            self.bias = nn.Parameter(torch.zeros(n_states))  # (S,)
        else:
            self.register_parameter("bias", None)

    def _mix(self, states: Tensor, mask: Tensor) -> MixOutput:
        keys = torch.tanh(self.key(bare_layer_norm(states)))  # (B, T, S, a)
        scores = keys @ self.query  # (B, T, S)
        if self.bias is not None:
            scores = scores + self.bias
        w = torch.softmax(scores, dim=-1)  # (B, T, S)
        h = bare_layer_norm(states) if self.layer_norm else states  # (B, T, S, D)
        mixed = torch.einsum("bts,btsd->btd", w, h)  # (B, T, D)
        self._track_usage(w, mask)
        return MixOutput(mixed=mixed, aux_loss=self._zero(states), usage={"weights": w.detach()})
