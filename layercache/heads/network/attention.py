"""Self-attention for task heads: multi-head attention and a pre-norm encoder layer, written out.

The math is that of ``torch.nn.MultiheadAttention`` and ``torch.nn.TransformerEncoderLayer``
(``norm_first=True``, GELU): one packed q/k/v projection, scaled dot products, a softmax over the
example's real tokens, an output projection. It is written as two batched matrix products
because heads over cached states are narrow — the adalayers sequence head runs 16 heads of width
4 — and on a CPU torch's fused attention kernels are slow at that width, so written out it is
faster than ``nn.MultiheadAttention`` (measurements belong in ``benchmarks/README.md``).

Padded keys get half the dtype's most negative value added to their scores rather than ``-inf``,
so a row whose every key is padding (it never occurs for real examples) gives finite weights
instead of NaN.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..blocks.dropout import Dropout

MIN_KEYS = 16
"""Keys each query's softmax runs over at least, on a CPU. torch's CPU softmax takes a scalar path for rows shorter than
its vector width (16 floats with AVX-512, 8 with AVX2): 7,168 rows of 14 took 1,166 us against 127 us for rows of 16,
and sentence batches are often that short. Shorter batches get zero keys, masked like padding (weight exactly 0)."""


def fit_heads(width: int, wanted: int) -> int:
    """The largest head count ``<= wanted`` that divides ``width`` (attention needs equal head widths)."""
    for n in range(min(wanted, width), 0, -1):
        if width % n == 0:
            return n
    return 1


class SelfAttention(nn.Module):
    """Multi-head self-attention over a right-padded batch.

    Args:
        dim: width of the tokens (and of the output).
        heads: number of heads; must divide ``dim``.
        dropout: dropout on the attention weights.
    """

    def __init__(self, dim: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"{heads} heads do not divide width {dim}")
        self.dim, self.heads = dim, heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.drop = Dropout(dropout)
        # nn.MultiheadAttention's initialisation: Xavier for the packed projection, zero biases.
        nn.init.xavier_uniform_(self.qkv.weight)
        nn.init.zeros_(self.qkv.bias)
        nn.init.zeros_(self.out.bias)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """``x (B, T, D)``, ``mask (B, T)`` True on real tokens -> ``(B, T, D)``."""
        B, T, D = x.shape
        H = self.heads
        q, k, v = self.qkv(x).view(B, T, 3, H, D // H).permute(2, 0, 3, 1, 4)  # 3 x (B, H, T, d)
        keys = max(T, MIN_KEYS) if x.device.type == "cpu" else T
        if keys > T:  # zero keys and values after the real ones, masked below like padding: their weights are 0
            k, v = F.pad(k, (0, 0, 0, keys - T)), F.pad(v, (0, 0, 0, keys - T))  # (B, H, keys, d)
            mask = F.pad(mask, (0, keys - T), value=False)  # (B, keys)
        # An additive bias on padded keys (one (B, 1, 1, keys) tensor) costs less than masking (B, H, T, keys)
        # scores; half the dtype's range stays finite when a real score is added to it.
        bias = torch.zeros(B, 1, 1, keys, dtype=x.dtype, device=x.device)
        bias.masked_fill_(~mask[:, None, None, :], torch.finfo(x.dtype).min / 2)
        scores = torch.matmul(q * (1.0 / math.sqrt(D // H)), k.transpose(-1, -2)) + bias  # (B, H, T, keys)
        weights = self.drop(torch.softmax(scores, dim=-1))  # (B, H, T, keys)
        mixed = torch.matmul(weights, v).transpose(1, 2).reshape(B, T, D)  # (B, T, D)
        return self.out(mixed)


class EncoderLayer(nn.Module):
    """A pre-norm transformer encoder layer: ``x + attn(LN(x))``, then ``x + FF(LN(x))`` with GELU.

    Args:
        dim: token width.
        heads: attention heads (must divide ``dim``).
        ff_dim: width of the feed-forward layer.
        dropout: on the attention weights, after attention and inside / after the feed-forward.
    """

    def __init__(self, dim: int, heads: int, ff_dim: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attention = SelfAttention(dim, heads, dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.ff1 = nn.Linear(dim, ff_dim)
        self.ff2 = nn.Linear(ff_dim, dim)
        self.drop = Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """``x (B, T, D)``, ``mask (B, T)`` -> ``(B, T, D)``."""
        x = x + self.drop(self.attention(self.norm1(x), mask))
        return x + self.drop(self.ff2(self.drop(F.gelu(self.ff1(self.norm2(x))))))
