"""The plan of a split: its examples tokenized, and the batches they are run in.

The plan decides the cache's row order and shard boundaries, so the same data and options give
the same plan in every run: a resume, a repair and the size estimate all rely on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..backbone.loader import Backbone
from .batching import BatchCost, plan_batches
from .tokenize import EncodedExample, encode_split


@dataclass
class SplitPlan:
    """One split tokenized and cut into batches, before any forward pass."""

    examples: list[EncodedExample]
    batches: list[np.ndarray]
    n_tokens: int
    n_truncated: int
    n_windowed: int


def plan_split(backbone: Backbone, split, stride, batch_tokens, batch_size) -> SplitPlan:
    """Tokenize ``split`` (windows of ``stride`` overlap when set) and plan its batches, longest first."""
    examples = list(encode_split(backbone.tokenizer, split, max_length=backbone.max_length, stride=stride,
                                 causal=backbone.is_causal))
    costs = [BatchCost(ex.n_rows, ex.width, ex.n_tokens) for ex in examples]
    return SplitPlan(
        examples=examples, batches=plan_batches(costs, batch_tokens, batch_size),
        n_tokens=sum(ex.n_tokens for ex in examples), n_truncated=sum(ex.truncated for ex in examples),
        n_windowed=sum(ex.n_rows > 1 for ex in examples))
