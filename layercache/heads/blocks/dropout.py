"""Dropout whose random mask is cheap on a CPU.

Heads trained from a cache spend a large share of each step on dropout: the adalayers mixer drops
out a ``(B, T, S, k)`` stack, and torch's CPU ``bernoulli_`` draws each element from MT19937 one
at a time, which is slow (measurements: ``benchmarks/README.md``).

:class:`Dropout` draws the mask as 16-bit levels cut from numpy's PCG64 raw outputs (a fast,
vectorised generator) seeded from torch's generator, so ``torch.manual_seed`` still makes
training repeatable. The mask is built as floats (0 or the inverse keep rate) and multiplied in:
torch's CPU kernels that take a boolean operand (``where``, or a product with a bool tensor) are
not vectorised, so a float mask is faster (``benchmarks/README.md``). The drop probability is
``p`` rounded to a multiple of 1/65536 (0.1 becomes 0.100006), and kept values are scaled by the
inverse of the exact keep rate, so the expectation is unchanged. On other devices it is
``torch.nn.functional.dropout``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

_LEVELS = 1 << 16


def keep_mask(shape: torch.Size | tuple[int, ...], p: float) -> Tensor:
    """A CPU float32 mask of ``shape``: the inverse keep rate with probability ~``1 - p``, else 0.

    Each value is kept with probability ``1 - round(p * 65536) / 65536`` and then carries the
    inverse of that probability, so ``x * mask`` is inverted dropout.
    """
    drop_levels = round(p * _LEVELS)
    seed = int(torch.randint(0, 2**62, (1,)))  # from torch's default generator: repeatable under manual_seed
    n = math.prod(shape)
    # Raw 64-bit outputs cut into four 16-bit levels each: uniform, and cheaper than integers().
    bits = np.random.PCG64(seed).random_raw(-(-n // 4)).view(np.uint16)[:n]
    scale = np.float32(_LEVELS / (_LEVELS - drop_levels))
    return torch.from_numpy(np.multiply(bits >= drop_levels, scale, dtype=np.float32)).view(shape)


class Dropout(nn.Module):
    """Inverted dropout like :class:`torch.nn.Dropout`, with a faster mask on the CPU (module docstring)."""

    def __init__(self, p: float = 0.1) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        """``x`` with each value zeroed with probability ~``p`` and the rest scaled up (training only)."""
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu":
            return F.dropout(x, self.p, training=True)
        mask = keep_mask(x.shape, self.p)
        return x * (mask if x.dtype == mask.dtype else mask.to(x.dtype))  # the gradient is the same mask

    def extra_repr(self) -> str:
        """``p=...`` in the module's printout."""
        return f"p={self.p}"
