"""Task heads: what sits on top of a layer mixer and turns mixed states into predictions.

- :class:`SequenceHead` (sequence classification and regression): optional multi-head
  self-attention over the tokens, then mask-aware pooling (``mean``, ``first``, ``last`` or learned
  ``attention`` pooling), then an optional hidden layer, then a linear output. With
  ``attention_heads > 0`` and mean pooling it is the adalayers sequence head (MHSA → GELU →
  dropout → masked mean → linear).
- :class:`TokenHead` (token classification): optional pre-norm transformer encoder layers, then a
  linear output per token. With one encoder layer it is the adalayers token head.

Every head reads ``x (B, T, D_in)`` and ``mask (B, T)``; padding never changes a real output.
:func:`task_loss` is the matching loss; regression heads predict standardised targets so one
learning rate suits any scale.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...core.tasks import IGNORE_INDEX, LabelTask
from ...errors import ConfigError
from ..blocks.dropout import Dropout
from ..mixers import mean_mask
from .attention import EncoderLayer, SelfAttention, fit_heads

POOLINGS = ("mean", "first", "last", "attention")


class SequenceHead(nn.Module):
    """One prediction per example from mixed token states.

    Args:
        in_dim: width of the mixed states.
        n_out: classes, or 1 for regression.
        pooling: ``mean`` | ``first`` | ``last`` | ``attention`` (a learned score per token).
        attention_heads: heads of a self-attention layer before pooling (0 = none).
        hidden: width of a GELU hidden layer before the output (0 = linear output).
        dropout: dropout before the output.

    ``mean_skip_first`` (set by the model from the cache, not an option): mean pooling leaves out
    each example's first token, as the cache's pooled means do.
    """

    mean_skip_first: bool = False

    def __init__(self, in_dim: int, n_out: int, *, pooling: str = "mean", attention_heads: int = 0,
                 hidden: int = 0, dropout: float = 0.1) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ConfigError(f"Unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}.")
        self.pooling = pooling
        self.attention = SelfAttention(in_dim, fit_heads(in_dim, attention_heads)) if attention_heads > 0 else None
        self.score = nn.Linear(in_dim, 1) if pooling == "attention" else None
        self.drop = Dropout(dropout)
        self.hidden = nn.Linear(in_dim, hidden) if hidden > 0 else None
        self.out = nn.Linear(hidden if hidden > 0 else in_dim, n_out)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """``x (B, T, D)``, ``mask (B, T)`` -> ``(B, n_out)``."""
        if self.attention is not None:
            x = self.drop(F.gelu(self.attention(x, mask)))  # (B, T, D)
        pooled = self.pool(x, mask)  # (B, D)
        if self.hidden is not None:
            pooled = self.drop(F.gelu(self.hidden(pooled)))
        else:
            pooled = self.drop(pooled)
        return self.out(pooled)

    def pool(self, x: Tensor, mask: Tensor) -> Tensor:
        """Mask-aware pooling of ``x (B, T, D)`` to ``(B, D)``."""
        if self.pooling == "mean":
            m = mean_mask(mask, self.mean_skip_first).to(x.dtype)  # (B, T)
            return (x * m.unsqueeze(-1)).sum(1) / m.sum(1, keepdim=True).clamp_min(1.0)
        if self.pooling == "first":
            return x[:, 0]
        if self.pooling == "last":
            last = (mask.sum(1) - 1).clamp_min(0)  # (B,) index of the last real token (right padding)
            return x[torch.arange(len(x), device=x.device), last]
        scores = self.score(x).squeeze(-1).masked_fill(~mask, float("-inf"))  # (B, T)
        return torch.einsum("bt,btd->bd", torch.softmax(scores, dim=1), x)


class TokenHead(nn.Module):
    """One prediction per token.

    Args:
        in_dim: width of the mixed states.
        n_out: classes.
        encoder_layers: pre-norm transformer encoder layers before the output (0 = linear probe).
        attention_heads: heads of those layers.
        ff_dim: feed-forward width of those layers.
        dropout: dropout inside the layers and before the output.
    """

    def __init__(self, in_dim: int, n_out: int, *, encoder_layers: int = 0, attention_heads: int = 8,
                 ff_dim: int = 512, dropout: float = 0.1) -> None:
        super().__init__()
        heads = fit_heads(in_dim, attention_heads)
        self.encoder = nn.ModuleList(EncoderLayer(in_dim, heads, ff_dim, dropout) for _ in range(encoder_layers))
        self.drop = Dropout(dropout)
        self.out = nn.Linear(in_dim, n_out)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """``x (B, T, D)``, ``mask (B, T)`` -> ``(B, T, n_out)``."""
        for layer in self.encoder:
            x = layer(x, mask)  # (B, T, D)
        return self.out(self.drop(x))


def make_task_head(task: LabelTask, in_dim: int, options: dict) -> nn.Module:
    """The head for ``task`` over mixed states of width ``in_dim``."""
    n_out = 1 if task.kind == "regression" else task.num_classes
    try:
        if task.kind == "token":
            return TokenHead(in_dim, n_out, **options)
        return SequenceHead(in_dim, n_out, **options)
    except TypeError as err:  # an option the head does not take
        raise ConfigError(f"Bad head option for {task.kind} task {task.name!r}: {err}.") from None


def task_loss(task: LabelTask, output: Tensor, target: Tensor, class_weights: Tensor | None = None) -> Tensor:
    """Mean loss of one head: cross-entropy (token positions with IGNORE_INDEX skipped) or MSE."""
    if task.kind == "regression":
        return F.mse_loss(output.squeeze(-1), target)
    if task.kind == "token":
        if not bool((target != IGNORE_INDEX).any()):  # no labelled word in the batch: no signal, no NaN
            return output.sum() * 0.0
        return F.cross_entropy(output.flatten(0, 1), target.flatten(), weight=class_weights,
                               ignore_index=IGNORE_INDEX)
    return F.cross_entropy(output, target, weight=class_weights)
