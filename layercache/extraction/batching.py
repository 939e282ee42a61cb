"""Group examples into batches by length under a token budget, so little padding is computed.

Sorting by padded width (longest first) and filling each batch up to ``batch_tokens`` padded
tokens keeps computed padding within a few percent of real tokens, against ~2x for batches in
dataset order. Longest first also makes an out-of-memory error happen in the first batch, not
after an hour. The plan is a pure function of the lengths, so a resumed run rebuilds exactly the
same batches and shard boundaries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError


@dataclass(frozen=True)
class BatchCost:
    """What one example costs a batch: forward rows (windows) and the padded width it forces."""

    rows: int
    width: int
    real_tokens: int


def plan_batches(costs: Sequence[BatchCost], batch_tokens: int, max_batch_size: int) -> list[np.ndarray]:
    """Example positions of each batch, longest examples first.

    A batch holds at most ``max_batch_size`` forward rows and at most ``batch_tokens`` padded
    tokens (rows x widest example); an example wider than the budget gets a batch of its own.
    """
    if batch_tokens < 1 or max_batch_size < 1:
        raise ConfigError(f"--batch-tokens ({batch_tokens}) and --batch-size ({max_batch_size}) must be positive.")
    order = sorted(range(len(costs)), key=lambda i: (-costs[i].width, i))
    batches: list[np.ndarray] = []
    current: list[int] = []
    rows = width = 0
    for i in order:
        cost = costs[i]
        new_rows, new_width = rows + cost.rows, max(width, cost.width)
        if current and (new_rows > max_batch_size or new_rows * new_width > batch_tokens):
            batches.append(np.array(current, np.int64))
            current, new_rows, new_width = [], cost.rows, cost.width
        current.append(i)
        rows, width = new_rows, new_width
    if current:
        batches.append(np.array(current, np.int64))
    return batches


def fixed_batches(n: int, batch_size: int) -> list[np.ndarray]:
    """Batches of ``batch_size`` in dataset order: the naive baseline the benchmark compares with."""
    return [np.arange(a, min(a + batch_size, n)) for a in range(0, n, batch_size)]


def padded_tokens(batches: Sequence[np.ndarray], costs: Sequence[BatchCost]) -> tuple[int, int]:
    """(padded tokens computed, real tokens) for a batch plan."""
    padded = real = 0
    for batch in batches:
        width = max(costs[i].width for i in batch)
        padded += sum(costs[i].rows for i in batch) * width
        real += sum(costs[i].rows * 0 + costs[i].real_tokens for i in batch)
    return padded, real
