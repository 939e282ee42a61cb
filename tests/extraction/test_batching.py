"""The batch planner: length-sorted, under budget, never growing, and deterministic."""

from __future__ import annotations

import numpy as np
import pytest

from layercache.errors import ConfigError
from layercache.extraction.batching import BatchCost, fixed_batches, padded_tokens, plan_batches


def _costs(seed: int, n: int = 3000) -> list[BatchCost]:
    rng = np.random.default_rng(seed)
    widths = np.clip(rng.lognormal(3.5, 0.6, n).astype(int), 3, 512)
    rows = np.where(rng.random(n) < 0.02, 2, 1)  # a few windowed examples
    return [BatchCost(int(r), int(w), int(r * w - rng.integers(0, 3))) for r, w in zip(rows, widths)]


def _sizes(batches, costs):
    return [(sum(costs[i].rows for i in b), max(costs[i].width for i in b)) for b in batches]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_example_once_within_budget_and_never_growing(seed):
    costs = _costs(seed)
    batches = plan_batches(costs, 2048, 64)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(costs)))
    sizes = _sizes(batches, costs)
    for (rows, width), batch in zip(sizes, batches):
        assert rows <= 64 or len(batch) == 1
        assert rows * width <= 2048 or len(batch) == 1
    products = [rows * width for rows, width in sizes]
    assert all(b <= a for a, b in zip(products[1:], products[2:]))  # after any lone over-wide example
    widths = [width for _, width in sizes]
    assert widths == sorted(widths, reverse=True)  # longest first: an out-of-memory error comes at once


def test_a_lone_over_wide_example_does_not_shrink_later_batches():
    costs = [BatchCost(1, 600, 600)] + [BatchCost(1, 10, 10)] * 100
    batches = plan_batches(costs, 200, 256)
    assert [len(b) for b in batches] == [1, 20, 20, 20, 20, 20]


def test_padding_stays_small_and_the_plan_is_a_pure_function_of_the_lengths():
    costs = _costs(3)
    first, again = plan_batches(costs, 4096, 128), plan_batches(list(costs), 4096, 128)
    assert all(np.array_equal(a, b) for a, b in zip(first, again)) and len(first) == len(again)
    padded, real = padded_tokens(first, costs)
    naive_padded, naive_real = padded_tokens(fixed_batches(len(costs), 32), costs)
    assert real == naive_real == sum(c.real_tokens for c in costs)
    assert padded / real < 1.10 < naive_padded / naive_real


def test_bad_budgets_are_refused():
    with pytest.raises(ConfigError, match="must be positive"):
        plan_batches([BatchCost(1, 5, 5)], 0, 8)
