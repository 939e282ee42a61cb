"""Adaptive layer aggregation (adalayers): a learned projection per state and sharpened layer weights."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from layercache.errors import ConfigError
from layercache.heads.blocks.dropout import Dropout
from layercache.heads.mixers.base import LayerMixer, MixOutput, bare_layer_norm, register_mixer


def sinusoidal_positions(n_positions: int, width: int, *, device=None, dtype=None) -> Tensor:
    """The Transformer's sinusoidal position encoding, shape ``(n_positions, width)``."""
    pos = torch.arange(n_positions, device=device, dtype=torch.float32).unsqueeze(1)  # (T, 1)
    freq = torch.exp(
        torch.arange(0, width, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / width)
    )  # (ceil(k/2),)
    pe = torch.zeros(n_positions, width, device=device)  # (T, k)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)[:, : width // 2]
    return pe.to(dtype) if dtype is not None else pe


#: ``matmul_dtype`` choices of :class:`AdaptiveMix`: None = the projection's own dtype.
MATMUL_DTYPES: dict[str, torch.dtype | None] = {"float32": None, "bfloat16": torch.bfloat16}


@register_mixer
class AdaptiveMix(LayerMixer):
    """Adaptive layer aggregation (adalayers): learned projection per state, sharpened weights.

    Per state i: ``f_i = LN(W_i · GELU(h_i))`` with ``W_i ∈ R^{k×D}`` (no bias) and a layer norm
    without scale or shift; dropout on the stack of all ``f_i``; weights
    ``p̃ = softmax(alpha · p)`` (``p`` starts at ones, i.e. uniform), optionally restricted to the
    ``topk`` largest logits and/or with weights ``<= cutoff`` zeroed and the rest renormalised;
    ``F = GELU(Σ_i p̃_i f_i)`` (+ sinusoidal position encoding when ``position_encoding``).
    ``aux_loss`` is the entropy penalty ``entropy_weight · mean_i(−p̃_i log(p̃_i + 1e-6))``.

    The S projections are one ``(S, k, D)`` parameter applied with an einsum: a batch with a
    different number of states is refused instead of silently dropping one (the original code
    zipped L projections with L+1 states and lost the last layer).

    ``matmul_dtype="bfloat16"`` runs the projection, the head's largest matrix product, on bf16
    operands with fp32 accumulation (parameters, gradients and everything after the product stay
    fp32; the states are GELU'd in fp32 and rounded once): on hardware with native bf16 units
    (AVX512-BF16, AMX, a recent GPU) the product is faster, with the same accuracy, and a larger
    backbone's wider states gain more. Where the hardware has no bf16 units it is slower, so it is
    not the default (measurements: ``benchmarks/README.md``).
    """

    name: ClassVar[str] = "adaptive"
    widens_own_inputs: ClassVar[bool] = True
    prefers_low_lr: ClassVar[bool] = True  # a learned projection per state
    #: Projection width a quarter and four times the default; the weights' sharpness α a third and three times.
    sweep_options: ClassVar[tuple[dict, ...]] = ({"k": 32}, {"k": 512}, {"alpha": 3.0}, {"alpha": 30.0})

    def __init__(
        self,
        n_states: int,
        dim: int,
        *,
        k: int = 128,
        alpha: float = 10.0,
        entropy_weight: float = 0.02,
        dropout: float = 0.1,
        topk: int | None = None,
        cutoff: float | None = None,
        position_encoding: bool = False,
        matmul_dtype: str = "float32",
    ) -> None:
        super().__init__(n_states, dim)
        if matmul_dtype not in MATMUL_DTYPES:
            raise ConfigError(f"matmul_dtype must be one of {', '.join(MATMUL_DTYPES)}, got {matmul_dtype!r}")
        if not isinstance(k, int) or k < 1:
            raise ConfigError(f"k (projection width) must be a positive int, got {k!r}")
        if topk is not None and (not isinstance(topk, int) or not 1 <= topk <= n_states):
            raise ConfigError(f"topk must be None or an int in 1..{n_states}, got {topk!r}")
        if cutoff is not None and not 0.0 <= cutoff < 1.0:
            raise ConfigError(f"cutoff must be None or in [0, 1), got {cutoff!r}")
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {dropout!r}")
        self.k = k
        self.alpha = alpha
        self.entropy_weight = entropy_weight
        self.dropout = dropout
        self.topk = topk
        self.cutoff = cutoff
        self.position_encoding = position_encoding
        self.matmul_dtype = matmul_dtype
        # One k×D matrix per state, initialised like nn.Linear(D, k).
        bound = 1.0 / math.sqrt(dim)
        self.projection = nn.Parameter(torch.empty(n_states, k, dim).uniform_(-bound, bound))  # (S, k, D)
        self.p = nn.Parameter(torch.ones(n_states))  # (S,)
        self.drop = Dropout(dropout)

    @classmethod
    def default_head_options(cls, task_kind: str) -> dict:
        """The adalayers heads: one encoder layer of 8 heads per token, or 16-head attention then a mean."""
        if task_kind == "token":
            return {"encoder_layers": 1, "attention_heads": 8}
        return {"attention_heads": 16, "pooling": "mean"}

    @property
    def out_dim(self) -> int:
        """The projection width ``k``."""
        return self.k

    def weights(self) -> Tensor:
        """The layer weights ``p̃`` after top-k and cutoff, shape ``(S,)``, with gradient."""
        logits = self.alpha * self.p  # (S,)
        if self.topk is not None and self.topk < self.n_states:
            keep = torch.zeros_like(logits, dtype=torch.bool)
            keep[logits.topk(self.topk).indices] = True  # exactly k kept, ties broken by topk
            logits = logits.masked_fill(~keep, float("-inf"))
        w = torch.softmax(logits, dim=0)  # (S,)
        if self.cutoff is not None and self.cutoff > 0:
            keep = w > self.cutoff
            keep[w.argmax()] = True  # never cut everything when every weight is <= cutoff
            w = torch.where(keep, w, torch.zeros_like(w))
            w = w / w.sum()
        return w

    def _mix(self, states: Tensor, mask: Tensor, standardize: tuple[Tensor, Tensor] | None = None,
             scales: Tensor | None = None) -> MixOutput:
        B, T, S, D = states.shape
        w = self.weights()  # (S,)
        entropy = -(w * torch.log(w + 1e-6)).mean()  # over all S states; a cut one adds 0
        # States whose weight top-k or the cutoff set to exactly 0 add nothing to the mix, and their
        # projection gets a zero gradient either way, so only the others are projected: the same
        # result and gradients for less work (with alpha 70 and cutoff 0.005, 3-4 of MiniLM's 7
        # states are left after a few epochs).
        alive = torch.nonzero(w).squeeze(1) if (self.cutoff or self.topk) else None  # (S',)
        projection = self.projection  # (S, k, D)
        if alive is not None and len(alive) < S:
            projection, w = projection.index_select(0, alive), w.index_select(0, alive)  # (S', k, D), (S',)
            keep = alive.tolist()
        else:
            keep = list(range(S))
        low = MATMUL_DTYPES[self.matmul_dtype]
        x = self._activated_inputs(states, keep, low, standardize, scales)  # (S', B*T, D)
        if low is None:
            f = torch.bmm(x, projection.transpose(1, 2))  # (S', B*T, k)
        else:  # bf16 operands, fp32 accumulation inside the kernel, fp32 from here on
            f = torch.bmm(x, projection.to(low).transpose(1, 2)).float()  # (S', B*T, k)
        f = self.drop(bare_layer_norm(f))  # (S', B*T, k)
        mixed = F.gelu(torch.einsum("s,snk->nk", w, f)).view(B, T, self.k)  # (B, T, k)
        if self.position_encoding:
            pe = sinusoidal_positions(T, self.k, device=states.device, dtype=mixed.dtype)  # (T, k)
            mixed = mixed + pe.unsqueeze(0)  # (B, T, k)
        return MixOutput(mixed=mixed, aux_loss=self.entropy_weight * entropy)

    def _activated_inputs(self, states: Tensor, keep: list[int], dtype: torch.dtype | None = None,
                          standardize: tuple[Tensor, Tensor] | None = None, scales: Tensor | None = None) -> Tensor:
        """``GELU(h_i)`` of the kept states, state-major ``(S', B*T, D)``, in ``dtype`` or the projection's.

        The states are constants (no gradient reaches them), so this runs without autograd, in one
        copy that converts, selects and lays out state-major (what the batched projection reads
        without another copy) and an in-place GELU: two passes over the batch's largest tensor
        instead of the four a select, a GELU and an einsum's own re-layout would make. ``scales``
        (``(B, T, S, 1)``, int8 states) multiply the copy in place: one pass over it, where dequantising
        first cost two more over a float32 batch and made an int8 epoch slower than a float16 one on a
        CPU (benchmarks/README.md). With ``standardize`` (``(shift, scale)``, each ``(S, D)``) the copy
        is standardised in place before the GELU: one more pass, instead of a standardised float32 copy
        of the whole batch.
        """
        B, T, _, D = states.shape
        with torch.no_grad():
            x = torch.empty((len(keep), B, T, D), dtype=self.projection.dtype, device=states.device)
            if keep == list(range(states.shape[2])):
                x.copy_(states.permute(2, 0, 1, 3))
                if scales is not None:
                    x.mul_(scales.permute(2, 0, 1, 3))  # (S, B, T, 1) over the width
            else:
                for i, s in enumerate(keep):
                    x[i].copy_(states[:, :, s])
                    if scales is not None:
                        x[i].mul_(scales[:, :, s])  # (B, T, 1)
            if standardize is not None:
                shift, scale = (t[keep].unsqueeze(1).unsqueeze(1) for t in standardize)  # (S', 1, 1, D)
                torch.addcmul(shift, x, scale, out=x)
            torch.ops.aten.gelu_(x)
            if dtype is not None and dtype != x.dtype:
                # GELU in float32, then one contiguous cast: on a CPU, torch's copy from a strided
                # float16 tensor into bfloat16 and a bfloat16 GELU are not vectorised (this way round
                # is faster; see benchmarks/README.md), and the result is rounded once.
                x = x.to(dtype)
        return x.view(len(keep), B * T, D)

    def layer_params(self) -> list[nn.Parameter]:
        """The weight logits ``p``."""
        return [self.p]

    def layer_weights(self) -> np.ndarray:
        """``p̃`` as used in the forward pass (after top-k and cutoff)."""
        return self.weights().detach().double().cpu().numpy()
