"""Input normalisation of cached states, applied before any mixer sees them.

Pre-LN backbones (GPT-2, Llama, the T5 encoder) hand out raw residual streams: their scale grows
with depth, and decoders put very large values (~10^4) in a few dimensions, most of all on the
first token (the attention sink). A mixer that adds states up (``scalar``, ``attention``, ``act``,
``gumbel``) then mostly adds up those few dimensions, and a linear head fed their mean sees inputs
of ~10^3 that swamp its learning rate: on such a cache the ``scalar`` mixer learns nothing. Post-LN
encoders (BERT, MiniLM) layer-norm every layer's output, so their states need nothing.

Modes (:data:`NORMALIZATIONS`):

- ``none``: the states as cached.
- ``standardize``: ``(h - mean) / std`` per state and per dimension, with the training split's
  statistics, which a cache holds exactly (:meth:`~layercache.store.reader.LayerCache.layer_stats`).
  One affine map per dimension, the same at every token, so it commutes with the token mean: a
  model that could read mean-pooled vectors still can.
- ``layer_norm``: a per-token layer norm of each state (no scale or shift). Not linear, so the
  model then needs every token's states.
- ``auto``: ``standardize`` for a pre-LN cache (the manifest's ``final_norm`` is ``applied`` or
  ``not-applied``), ``none`` for a post-LN one (``final_norm`` ``none``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError
from ..head_options import NORMALIZATIONS as NORMALIZATIONS  # declared with the head's options (no torch there)

#: What ``auto`` resolves to is read from this: ``none`` means every layer output is already normed.
POST_LN = "none"


def resolve_normalize(requested: str, final_norm: str | None) -> str:
    """``requested`` with ``auto`` resolved by the cache's ``final_norm`` (``none`` = post-LN)."""
    if requested not in NORMALIZATIONS:
        raise ConfigError(f"Unknown normalize {requested!r}; choose one of {', '.join(NORMALIZATIONS)}.")
    if requested != "auto":
        return requested
    return "none" if final_norm == POST_LN else "standardize"


def standardized(states: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    """``states · scale + shift`` in float32, in a new tensor: ``states (..., D)`` of any float dtype.

    A widening copy (vectorised, and one a mixer would make anyway), then one in-place pass: cheaper
    on a CPU than one out-of-place op on mixed dtypes, which is not vectorised for half precision.
    """
    x = states.to(torch.float32, copy=True)
    return torch.addcmul(shift, x, scale, out=x)


class StateNorm(nn.Module):
    """Normalise ``states (B, T, S, D)`` before mixing; output float32 whatever the stored dtype.

    ``standardize`` keeps ``mean`` and ``std`` ``(S, D)`` as persistent float64 buffers (saved with
    the weights, so a loaded head normalises with its training statistics) and derives float32
    ``scale = 1 / std`` and ``shift = -mean / std`` from them once (:attr:`affine`): one fused
    multiply-add per value. Its rounding error, ~1e-7 · |h / std|, stays far below one standard
    deviation even for a dimension whose mean is 10^4 of its spreads. Mixers that widen their own
    inputs take that pair and apply it in their own widening pass, so a model that reads one state
    standardises only that one (see :class:`~layercache.heads.network.model.HeadModel`). A dimension that
    is constant in the training split (std ~ 0) is centred, not scaled, and no dimension is scaled
    by more than ``1000 / |mean|`` (see :meth:`_derive`).
    """

    mean: Tensor  # the buffers register_buffer makes, as a type checker should see them
    std: Tensor
    shift: Tensor
    scale: Tensor

    def __init__(self, mode: str, n_states: int, dim: int) -> None:
        super().__init__()
        if mode not in NORMALIZATIONS or mode == "auto":
            raise ConfigError(f"A head model's normalize must be none, standardize or layer_norm, got {mode!r}.")
        self.mode = mode
        if mode == "standardize":
            self.register_buffer("mean", torch.zeros(n_states, dim, dtype=torch.float64))  # (S, D)
            self.register_buffer("std", torch.ones(n_states, dim, dtype=torch.float64))  # (S, D)
            self.register_buffer("shift", torch.zeros(n_states, dim), persistent=False)  # (S, D) float32
            self.register_buffer("scale", torch.ones(n_states, dim), persistent=False)  # (S, D) float32
            self._derive()

    def set_stats(self, mean: np.ndarray, std: np.ndarray) -> None:
        """Standardise with these per-state, per-dimension statistics ``(S, D)``."""
        means = torch.as_tensor(np.asarray(mean, dtype=np.float64))
        stds = torch.as_tensor(np.asarray(std, dtype=np.float64))
        if means.shape != self.mean.shape or stds.shape != self.std.shape:
            raise ConfigError(f"State statistics of shape {tuple(means.shape)} do not fit {tuple(self.mean.shape)}.")
        self.mean.copy_(means)
        self.std.copy_(stds)
        self._derive()

    @torch.no_grad()
    def _derive(self) -> None:
        # The cache's variance is E[h²] - mean², from sums of squares accumulated in float32 per
        # block: it cannot resolve a spread below ~1e-3 of |mean| (a dimension at 1e4 ± 1), so the
        # scale never grows past that, lest rounding noise be amplified into signal.
        spread = torch.maximum(self.std, 1e-3 * self.mean.abs())  # (S, D)
        scale = torch.where(spread > 1e-6, 1.0 / spread, torch.ones_like(spread))  # constant dimensions: centred only
        self.scale.copy_(scale)  # float64 until stored
        self.shift.copy_(-self.mean * scale)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        if self.mode == "standardize":  # the derived buffers are not saved: derive them from what was loaded
            self._derive()

    @property
    def affine(self) -> tuple[Tensor, Tensor]:
        """``(shift, scale)``, each ``(S, D)`` float32: standardised ``h`` is ``h · scale + shift``."""
        return self.shift, self.scale

    def forward(self, states: Tensor) -> Tensor:
        """``states (B, T, S, D)`` any float dtype -> normalised ``(B, T, S, D)`` float32."""
        if self.mode == "standardize":
            return standardized(states, self.shift, self.scale)  # (B, T, S, D)
        if self.mode == "layer_norm":
            return F.layer_norm(states.float(), states.shape[-1:])  # (B, T, S, D)
        return states
