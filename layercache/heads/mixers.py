"""Layer mixers: turn the cached states of every layer into one vector per token.

A mixer reads ``states`` of shape ``(B, T, S, D)`` — B examples, T tokens (T = 1 for pooled
vectors), S cached states in order (embeddings first, then layers 1..L), D hidden width — and a
``mask`` of shape ``(B, T)`` (True = real token), and returns a :class:`MixOutput` whose ``mixed``
tensor ``(B, T, D_out)`` feeds a task head. Each mixer is one method from ``METHODS.md``:

===============  ============================================================================
spec             method
===============  ============================================================================
``last``         the last cached state (the usual baseline)
``layer:<i>``    one chosen state; 0 = embeddings, negative indexes count from the end
``scalar``       ELMo / Tenney scalar mix ``γ · Σ softmax(w)_l · N(h_l)``
``adaptive``     adalayers: per-state projection + layer norm, sharpened softmax weights
``attention``    input-dependent attention over layers, per token
``gumbel``       SpotTune / BlockDrop per-example hard choice of states (Gumbel-softmax)
``act``          adaptive computation time over the layers, per token (Graves 2016)
===============  ============================================================================

Build one with :func:`make_mixer` (``make_mixer("layer:-2", n_states, dim)``); the registry
:data:`MIXERS` is the single list of names (the CLI takes its choices from :func:`mixer_names`).

Every mixer zeroes ``mixed`` at padded positions and never lets a padded token change a real
one, whatever (finite) values the padding holds.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from layercache.errors import ConfigError
from layercache.heads.dropout import Dropout
from layercache.heads.normalize import standardized

__all__ = [
    "MixOutput",
    "LayerMixer",
    "SelectLayer",
    "LastLayer",
    "ScalarMix",
    "AdaptiveMix",
    "AttentionMix",
    "GumbelMix",
    "ACTMix",
    "MIXERS",
    "make_mixer",
    "mixer_from_config",
    "mixer_names",
]


@dataclass
class MixOutput:
    """What a mixer returns for one batch.

    Attributes:
        mixed: ``(B, T, D_out)`` the mixed states, zero at padded positions.
        aux_loss: scalar tensor to add to the task loss (entropy penalty, budget penalty, ponder
            cost); a zero tensor for mixers without one.
        usage: per-token / per-example layer use for reports, or None for mixers whose weights do
            not depend on the input. Keys used here: ``weights`` ``(B, T, S)`` or ``(B, S)``,
            ``choices`` ``(B, S)``, ``steps`` and ``depth`` ``(B, T)``. Detached from the graph.
    """

    mixed: Tensor
    aux_loss: Tensor
    usage: dict[str, Tensor] | None = None


def _layer_norm(x: Tensor) -> Tensor:
    """Layer norm over the last dimension without a learned scale or shift."""
    return F.layer_norm(x, x.shape[-1:])


def mean_mask(mask: Tensor, skip_first: bool = False) -> Tensor:
    """The tokens a token mean averages: ``mask (B, T)``, without the first token when ``skip_first``.

    The first token is left out only of examples with another real token (a one-token example
    keeps it), as a cache whose manifest records ``mean_skip_first`` pools: a decoder's first token
    (BOS, the attention sink) carries huge values that have little to do with the text.
    """
    if not skip_first or mask.shape[1] < 2:
        return mask
    first = mask[:, :1] & ~mask[:, 1:].any(1, keepdim=True)  # (B, 1) kept only when it is alone
    return torch.cat([first, mask[:, 1:]], dim=1)  # (B, T)


def _masked_mean(x: Tensor, mask: Tensor, skip_first: bool = False) -> Tensor:
    """Mean of ``x (B, T, ...)`` over real tokens (see :func:`mean_mask`); no real token gives zeros."""
    mask = mean_mask(mask, skip_first)
    m = mask.to(x.dtype).reshape(*mask.shape, *([1] * (x.dim() - 2)))  # (B, T, 1...)
    count = m.sum(1).clamp_min(1.0)  # (B, 1...)
    return (x * m).sum(1) / count  # (B, ...)


class LayerMixer(nn.Module):
    """Base class of all layer mixers: validates inputs and keeps the layer-use statistics.

    Subclasses implement :meth:`_mix` and :meth:`layer_weights`. Hyper-parameters are keyword-only
    ``__init__`` arguments stored under the same attribute name, so :meth:`get_config` can list them
    and :func:`make_mixer` can rebuild the mixer from that config.
    """

    name: ClassVar[str] = ""
    #: True for mixers whose weights depend on the input; they keep a running mean of their usage.
    input_dependent: ClassVar[bool] = False
    #: True for mixers that widen half-precision states themselves (fused with their own re-layout),
    #: and standardise them in the same place when given ``standardize``; the others receive states
    #: already in their parameters' dtype.
    widens_own_inputs: ClassVar[bool] = False
    #: Token means leave out each example's first token (a model-wide setting that
    #: :class:`~layercache.heads.model.HeadModel` sets from the cache, not a mixer option).
    mean_skip_first: bool = False

    def __init__(self, n_states: int, dim: int) -> None:
        super().__init__()
        if not isinstance(n_states, int) or n_states < 1:
            raise ConfigError(f"n_states must be a positive int, got {n_states!r}")
        if not isinstance(dim, int) or dim < 1:
            raise ConfigError(f"dim must be a positive int, got {dim!r}")
        self.n_states = n_states
        self.dim = dim
        if self.input_dependent:
            # Persistent, so a head loaded from disk still reports the weights it was evaluated with.
            self.register_buffer("usage_sum", torch.zeros(n_states))  # (S,)
            self.register_buffer("usage_count", torch.zeros((), dtype=torch.long))
            self._last_batch_usage: np.ndarray | None = None
            self._new_pass = True

    # ----------------------------------------------------------------------------------- API
    @property
    def out_dim(self) -> int:
        """Width ``D_out`` of :attr:`MixOutput.mixed`."""
        return self.dim

    @property
    def spec(self) -> str:
        """The string :func:`make_mixer` parses to build this kind of mixer."""
        return self.name

    def get_config(self) -> dict:
        """``{"spec", "n_states", "dim", "options"}`` (JSON-ready); :func:`mixer_from_config` rebuilds it."""
        params = inspect.signature(type(self).__init__).parameters.values()
        options = {p.name: getattr(self, p.name) for p in params if p.kind is p.KEYWORD_ONLY}
        return {"spec": self.spec, "n_states": self.n_states, "dim": self.dim, "options": options}

    def commutes_with_token_mean(self) -> bool:
        """Whether mixing then averaging over tokens equals averaging then mixing.

        True for mixers that are the same linear map at every token; a trainer may then feed them
        the cache's mean-pooled vectors (T = 1) instead of every token, with identical results.
        """
        return False

    def layer_params(self) -> list[nn.Parameter]:
        """Parameters that encode the global layer weights.

        A trainer gives them their own parameter group with weight decay 0: decay would pull the
        weight logits toward 0, i.e. toward a uniform mix, fighting the very thing being learned.
        Empty for mixers without such parameters.
        """
        return []

    def layer_weights(self) -> np.ndarray | None:
        """Global weight of each state, shape ``(S,)``, summing to 1.

        Input-dependent mixers return the mean of their per-token (``attention``, ``act``) or
        per-example (``gumbel``) mixing weights over the most recent evaluation pass: every forward
        in eval mode since the module last switched from train to eval mode, counting real tokens
        only. Before any eval forward they fall back to the last training batch, and before any
        forward at all they return None (there is nothing to average yet).
        """
        if not self.input_dependent:
            raise NotImplementedError
        if int(self.usage_count) > 0:
            return (self.usage_sum / self.usage_count).double().cpu().numpy()
        return self._last_batch_usage

    def reset_usage(self) -> None:
        """Forget the usage statistics behind :meth:`layer_weights` (input-dependent mixers)."""
        if self.input_dependent:
            self.usage_sum.zero_()
            self.usage_count.zero_()
            self._last_batch_usage = None

    def train(self, mode: bool = True) -> LayerMixer:
        # Entering eval mode starts a new evaluation pass; the old statistics are replaced lazily
        # at the first eval forward, so weights loaded from disk survive a bare ``.eval()``.
        if self.input_dependent and self.training and not mode:
            self._new_pass = True
        return super().train(mode)

    def forward(self, states: Tensor, mask: Tensor | None = None, *,
                standardize: tuple[Tensor, Tensor] | None = None) -> MixOutput:
        """Mix ``states (B, T, S, D)`` under ``mask (B, T)`` (None = every token is real).

        ``standardize``: ``(shift, scale)``, each ``(S, D)``: mix ``h · scale + shift`` instead of ``h``
        (:func:`~layercache.heads.normalize.standardized`). A mixer that widens its own inputs applies
        it in that pass, to the states it reads.
        """
        states, mask = self._check_inputs(states, mask)
        if standardize is None:
            out = self._mix(states, mask)
        elif self.widens_own_inputs:
            out = self._mix(states, mask, standardize=standardize)
        else:
            out = self._mix(standardized(states, *standardize), mask)
        # Zero the padding with where (not a product): an inf/NaN at a padded position stays there.
        mixed = torch.where(mask.unsqueeze(-1), out.mixed, torch.zeros_like(out.mixed))  # (B, T, D_out)
        return MixOutput(mixed=mixed, aux_loss=out.aux_loss, usage=out.usage)

    # ------------------------------------------------------------------------------ internals
    def _mix(self, states: Tensor, mask: Tensor) -> MixOutput:
        raise NotImplementedError

    def _check_inputs(self, states: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        if not torch.is_tensor(states) or states.dim() != 4:
            shape = tuple(states.shape) if torch.is_tensor(states) else type(states).__name__
            raise ValueError(f"states must be a (B, T, S, D) tensor, got {shape}")
        B, T, S, D = states.shape
        if S != self.n_states or D != self.dim:
            raise ValueError(
                f"states have S={S} states of width D={D}, but this {self.name!r} mixer was built "
                f"for S={self.n_states}, D={self.dim} (every cached state needs its own weight; "
                "a mismatch would silently drop or misalign layers)"
            )
        if not states.is_floating_point():
            raise ValueError(f"states must be a floating-point tensor, got dtype {states.dtype}")
        if mask is None:
            mask = torch.ones(B, T, dtype=torch.bool, device=states.device)
        elif tuple(mask.shape) != (B, T):
            raise ValueError(f"mask must have shape (B, T) = {(B, T)}, got {tuple(mask.shape)}")
        mask = mask.to(device=states.device, dtype=torch.bool)
        # Caches store fp16/bf16; compute in the mixer's own precision.
        if states.dtype != self.compute_dtype and not self.widens_own_inputs:
            states = states.to(self.compute_dtype)
        return states, mask

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype a mixer computes in: its parameters', or torch's default for one without any."""
        param = next(self.parameters(), None)
        return torch.get_default_dtype() if param is None else param.dtype

    def _zero(self, like: Tensor) -> Tensor:
        return like.new_zeros(())

    @torch.no_grad()
    def _track_usage(self, weights: Tensor, mask: Tensor) -> None:
        """Accumulate mixing ``weights`` — ``(B, T, S)`` per token or ``(B, S)`` per example."""
        if weights.dim() == 3:
            m = mask.unsqueeze(-1).to(weights.dtype)  # (B, T, 1)
            total = (weights * m).sum((0, 1))  # (S,)
            count = int(mask.sum())
        else:
            total = weights.sum(0)  # (S,)
            count = weights.shape[0]
        if count == 0:
            return
        if self.training:
            self._last_batch_usage = (total / count).double().cpu().numpy()
            return
        if self._new_pass:
            self.usage_sum.zero_()
            self.usage_count.zero_()
            self._new_pass = False
        self.usage_sum += total.to(self.usage_sum.dtype)
        self.usage_count += count


# ------------------------------------------------------------------------------ single states
class SelectLayer(LayerMixer):
    """One cached state, unchanged: ``layer:<i>`` (0 = embeddings, negative counts from the end)."""

    name: ClassVar[str] = "layer"
    widens_own_inputs: ClassVar[bool] = True  # one state of S: widen only that one

    def __init__(self, n_states: int, dim: int, *, index: int = -1) -> None:
        super().__init__(n_states, dim)
        if not isinstance(index, int) or not -n_states <= index < n_states:
            raise ConfigError(
                f"layer index {index!r} is out of range for {n_states} cached states: "
                f"valid indexes are 0..{n_states - 1} (0 = embeddings) or -{n_states}..-1"
            )
        self.index = index

    def commutes_with_token_mean(self) -> bool:
        return True

    @property
    def resolved_index(self) -> int:
        """The index counted from 0 (embeddings)."""
        return self.index % self.n_states

    @property
    def spec(self) -> str:
        return f"layer:{self.index}"

    def _mix(self, states: Tensor, mask: Tensor, standardize: tuple[Tensor, Tensor] | None = None) -> MixOutput:
        i = self.resolved_index
        if standardize is None:
            mixed = states[:, :, i].to(self.compute_dtype)  # (B, T, D)
        else:  # only the state read: the others never need it
            shift, scale = standardize
            mixed = standardized(states[:, :, i], shift[i], scale[i]).to(self.compute_dtype)  # (B, T, D)
        return MixOutput(mixed=mixed, aux_loss=mixed.new_zeros(()))

    def layer_weights(self) -> np.ndarray:
        """One-hot on the selected state."""
        w = np.zeros(self.n_states)
        w[self.resolved_index] = 1.0
        return w


class LastLayer(SelectLayer):
    """The last cached state: the baseline every layer-mixing method is compared with."""

    name: ClassVar[str] = "last"

    def __init__(self, n_states: int, dim: int) -> None:
        super().__init__(n_states, dim, index=-1)

    @property
    def spec(self) -> str:
        return "last"


# --------------------------------------------------------------------------------- scalar mix
class ScalarMix(LayerMixer):
    """ELMo / Tenney et al. scalar mix: ``γ · Σ_l softmax(w)_l · N(h_l)``.

    ``w`` starts at 0 (a plain mean) and ``γ`` at 1. With ``layer_norm`` each state is normalised
    per token without affine parameters (AllenNLP normalises over the whole batch, which makes a
    prediction depend on its batch-mates). With ``include_embeddings=False`` state 0 gets weight 0.
    """

    name: ClassVar[str] = "scalar"

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
        h = _layer_norm(states) if self.layer_norm else states  # (B, T, S, D)
        mixed = self.gamma * torch.einsum("s,btsd->btd", self.weights(), h)  # (B, T, D)
        return MixOutput(mixed=mixed, aux_loss=self._zero(states))

    def layer_params(self) -> list[nn.Parameter]:
        return [self.scalar_weights, self.gamma]

    def layer_weights(self) -> np.ndarray:
        """``softmax(w)`` (0 for the embeddings when they are excluded)."""
        return self.weights().detach().double().cpu().numpy()


# ---------------------------------------------------------------------------- adalayers (adaptive)
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
    fp32; the states are GELU'd in fp32 and rounded once): on a CPU with native bf16 (AVX512-BF16,
    AMX) or a recent GPU the product is 2-3x faster. For the adalayers SST-2 head on a MiniLM
    cache (k 64) a fixed-batch training step takes ~8.8 ms against ~10.3 ms, with the same dev
    accuracy; whole runs on this project's VM moved less than its run-to-run noise, and a larger
    backbone's wider states gain more. Where the hardware has no bf16 units it is slower, so it is
    not the default.
    """

    name: ClassVar[str] = "adaptive"
    widens_own_inputs: ClassVar[bool] = True

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

    @property
    def out_dim(self) -> int:
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

    def _mix(self, states: Tensor, mask: Tensor, standardize: tuple[Tensor, Tensor] | None = None) -> MixOutput:
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
        x = self._activated_inputs(states, keep, low, standardize)  # (S', B*T, D)
        if low is None:
            f = torch.bmm(x, projection.transpose(1, 2))  # (S', B*T, k)
        else:  # bf16 operands, fp32 accumulation inside the kernel, fp32 from here on
            f = torch.bmm(x, projection.to(low).transpose(1, 2)).float()  # (S', B*T, k)
        f = self.drop(_layer_norm(f))  # (S', B*T, k)
        mixed = F.gelu(torch.einsum("s,snk->nk", w, f)).view(B, T, self.k)  # (B, T, k)
        if self.position_encoding:
            pe = sinusoidal_positions(T, self.k, device=states.device, dtype=mixed.dtype)  # (T, k)
            mixed = mixed + pe.unsqueeze(0)  # (B, T, k)
        return MixOutput(mixed=mixed, aux_loss=self.entropy_weight * entropy)

    def _activated_inputs(self, states: Tensor, keep: list[int], dtype: torch.dtype | None = None,
                          standardize: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """``GELU(h_i)`` of the kept states, state-major ``(S', B*T, D)``, in ``dtype`` or the projection's.

        The states are constants (no gradient reaches them), so this runs without autograd, in one
        copy that converts, selects and lays out state-major (what the batched projection reads
        without another copy) and an in-place GELU: two passes over the batch's largest tensor
        instead of the four a select, a GELU and an einsum's own re-layout would make. With
        ``standardize`` (``(shift, scale)``, each ``(S, D)``) the copy is standardised in place
        before the GELU: one more pass, instead of a standardised float32 copy of the whole batch.
        """
        B, T, _, D = states.shape
        with torch.no_grad():
            x = torch.empty((len(keep), B, T, D), dtype=self.projection.dtype, device=states.device)
            if keep == list(range(states.shape[2])):
                x.copy_(states.permute(2, 0, 1, 3))
            else:
                for i, s in enumerate(keep):
                    x[i].copy_(states[:, :, s])
            if standardize is not None:
                shift, scale = (t[keep].unsqueeze(1).unsqueeze(1) for t in standardize)  # (S', 1, 1, D)
                torch.addcmul(shift, x, scale, out=x)
            torch.ops.aten.gelu_(x)
            if dtype is not None and dtype != x.dtype:
                # GELU in float32, then one contiguous cast: on a CPU, torch's copy from a strided
                # float16 tensor into bfloat16 and a bfloat16 GELU are not vectorised (1.2 ms against
                # 0.6 ms for this way round, MiniLM's batch of 5 states), and the result is rounded once.
                x = x.to(dtype)
        return x.view(len(keep), B * T, D)

    def layer_params(self) -> list[nn.Parameter]:
        return [self.p]

    def layer_weights(self) -> np.ndarray:
        """``p̃`` as used in the forward pass (after top-k and cutoff)."""
        return self.weights().detach().double().cpu().numpy()


# ------------------------------------------------------------------- attention over layers
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
        keys = torch.tanh(self.key(_layer_norm(states)))  # (B, T, S, a)
        scores = keys @ self.query  # (B, T, S)
        if self.bias is not None:
            scores = scores + self.bias
        w = torch.softmax(scores, dim=-1)  # (B, T, S)
        h = _layer_norm(states) if self.layer_norm else states  # (B, T, S, D)
        mixed = torch.einsum("bts,btsd->btd", w, h)  # (B, T, D)
        self._track_usage(w, mask)
        return MixOutput(mixed=mixed, aux_loss=self._zero(states), usage={"weights": w.detach()})


# ------------------------------------------------------------------------ gumbel layer policy
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
    :meth:`set_temperature_progress`), so early steps still explore. ``tau`` starts at ``tau_start``; :meth:`set_temperature_progress`
    anneals it exponentially to ``tau_end``. ``usage["choices"]`` is ``(B, S)`` in {0, 1};
    ``usage["weights"]`` ``(B, S)`` the resulting mixing weights.
    """

    name: ClassVar[str] = "gumbel"
    input_dependent: ClassVar[bool] = True

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

    def policy_logits(self, states: Tensor, mask: Tensor) -> Tensor:
        """Per-example (skip, use) logits for each state, shape ``(B, S, 2)``."""
        summary = _layer_norm(_masked_mean(states[:, :, 0], mask, self.mean_skip_first))  # (B, D)
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


# ----------------------------------------------------------------- adaptive computation time
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

    def _mix(self, states: Tensor, mask: Tensor) -> MixOutput:
        layers = states[:, :, 1:]  # (B, T, L, D)
        L = layers.shape[2]
        p = torch.sigmoid(self.halting(_layer_norm(layers)).squeeze(-1))  # (B, T, L)
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


# ---------------------------------------------------------------------------------- registry
MIXERS: dict[str, type[LayerMixer]] = {
    cls.name: cls for cls in (LastLayer, SelectLayer, ScalarMix, AdaptiveMix, AttentionMix, GumbelMix, ACTMix)
}


def mixer_names() -> list[str]:
    """The registry's names, for CLI choices (``layer`` takes an index: ``layer:<i>``)."""
    return list(MIXERS)


def _spec_help() -> str:
    return ", ".join("layer:<i>" if name == "layer" else name for name in MIXERS)


def make_mixer(spec: str, n_states: int, dim: int, **options) -> LayerMixer:
    """Build the mixer named by ``spec`` for ``n_states`` cached states of width ``dim``.

    ``spec`` is a registry name (``last``, ``scalar``, ``adaptive``, ``attention``, ``gumbel``,
    ``act``) or ``layer:<i>`` (0 = embeddings, negative from the end). ``options`` are the mixer's
    keyword arguments (e.g. ``k=64, alpha=70`` for ``adaptive``). Raises ``ConfigError`` (a
    ``ValueError``) for an unknown spec, a bad index or an option the mixer does not take.
    """
    if not isinstance(spec, str):
        raise ConfigError(f"mixer spec must be a string, got {spec!r}; known: {_spec_help()}")
    name, sep, arg = spec.strip().partition(":")
    name = name.strip().lower()
    if name not in MIXERS:
        raise ConfigError(f"unknown mixer {spec!r}; known: {_spec_help()}")
    cls = MIXERS[name]
    if sep:
        if cls is not SelectLayer:
            raise ConfigError(f"mixer {name!r} takes no ':<argument>' (got {spec!r}); only layer:<i> does")
        try:
            index = int(arg)
        except ValueError:
            raise ConfigError(
                f"layer index in {spec!r} must be an integer, e.g. layer:3 or layer:-2"
            ) from None
        if "index" in options and options["index"] != index:
            raise ConfigError(f"{spec!r} conflicts with index={options['index']!r}")
        options = {**options, "index": index}
    elif cls is SelectLayer and "index" not in options:
        raise ConfigError("mixer 'layer' needs an index: layer:<i> (0 = embeddings, -1 = last)")
    params = inspect.signature(cls.__init__).parameters.values()
    valid = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(
            f"mixer {name!r} does not take option(s) {', '.join(unknown)}; "
            f"valid: {', '.join(valid) if valid else 'none'}"
        )
    return cls(n_states, dim, **options)


def mixer_from_config(config: dict) -> LayerMixer:
    """Rebuild a mixer (untrained) from :meth:`LayerMixer.get_config`; load its state dict next."""
    missing = {"spec", "n_states", "dim"} - set(config)
    if missing:
        raise ConfigError(
            f"mixer config lacks {', '.join(sorted(missing))}; it needs spec, n_states, dim, options"
        )
    return make_mixer(config["spec"], config["n_states"], config["dim"], **config.get("options", {}))
