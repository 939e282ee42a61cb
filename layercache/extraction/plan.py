"""The plan of a split: its examples tokenized, and the batches they are run in.

The plan decides the cache's row order and shard boundaries, so the same data and options give
the same plan in every run: a resume, a repair and the size estimate all rely on it.
"""

from __future__ import annotations

import functools
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

    @functools.cached_property
    def first_rows(self) -> np.ndarray:
        """(n_batches + 1,) the cache row of each batch's first example; the last entry is the split's rows.

        Rows follow the batches in plan order, so any writer knows where its batch's rows go without
        waiting for the batches before it to be written.
        """
        counts = np.fromiter((len(batch) for batch in self.batches), np.int64, len(self.batches))
        return np.concatenate([[0], np.cumsum(counts)])

    def batch_tokens(self, b: int) -> int:
        """Real tokens of planned batch ``b`` (what a writer's share is balanced by)."""
        return int(sum(self.examples[i].n_tokens for i in self.batches[b]))


def plan_split(backbone: Backbone, split, stride, batch_tokens, batch_size) -> SplitPlan:
    """Tokenize ``split`` (windows of ``stride`` overlap when set) and plan its batches, longest first."""
    examples = list(encode_split(backbone.tokenizer, split, max_length=backbone.max_length, stride=stride,
                                 causal=backbone.is_causal))
    costs = [BatchCost(ex.n_rows, ex.width, ex.n_tokens) for ex in examples]
    return SplitPlan(
        examples=examples, batches=plan_batches(costs, batch_tokens, batch_size),
        n_tokens=sum(ex.n_tokens for ex in examples), n_truncated=sum(ex.truncated for ex in examples),
        n_windowed=sum(ex.n_rows > 1 for ex in examples))
