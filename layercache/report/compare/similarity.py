"""Cross-model CKA on one seeded sample of the same examples: the states it compares, read from each cache.

Every cache reads the same examples (:mod:`.examples` lines them up by source row), so row ``i`` of each model's
states is one example (or one word) of the data:

- ``mean``: one vector per example: the cache's mean-pooled vector where it holds one, else the mean of the
  example's stored token states (the same vector, computed at read time). A sample of ``n`` examples of the split.
- ``words``: the state of each word's first sub-token (where a token task's label sits), for the words every
  cache kept (a word cut off by one model's truncation is left out), a sample of ``n`` of them. Every cache must
  hold token states.

:func:`cka_pairs` then computes, for every pair of models, the (L_a, L_b) matrix of :func:`~.cross_cka.cross_cka`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Any

import numpy as np

from ...core.option_names import option
from ...errors import ConfigError
from ...probes.features import first_subtokens
from ...store.reader import LayerCache
from .cross_cka import best_matches, cka_of_grams, cross_cka, grams_fit, grams_pay, least_examples, unit_grams
from .examples import SharedExamples

Step = Callable[[str], None]


def cka_states(caches: Sequence[LayerCache], labels: Sequence[str], asked: str) -> str:
    """``mean`` or ``words`` for ``asked`` (``auto``: ``mean``); ``words`` refused unless every cache stores token
    states."""
    states = "mean" if asked == "auto" else asked
    if states == "words":
        pooled = [label for cache, label in zip(caches, labels) if not cache.stores_tokens]
        if pooled:
            raise ConfigError(f"CKA on word states needs every cache's token states, and {pooled[0]} holds pooled "
                              f"vectors only; compare mean vectors ({option('cka_states', 'mean')}) or extract it "
                              f"with {option('store', 'tokens')}.")
    return states


def sample_positions(n: int, size: int, seed: int) -> np.ndarray:
    """(min(n, size),) ascending positions of a seeded sample of ``n`` items (all of them when ``n <= size``)."""
    if n <= size:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))


def mean_vectors(cache: LayerCache, split: str, rows: np.ndarray) -> np.ndarray:
    """(n, L, D) float32: each row's mean-pooled vector, or the mean of its token states when none is stored."""
    if "mean" in cache.manifest.pooling:
        pooled: np.ndarray = cache.pooled(split, "mean", rows=rows)
        return pooled
    return np.stack([states.mean(0) for states in cache.tokens(split, rows)])  # (t, L, D) per row


def word_positions(cache: LayerCache, split: str, rows: np.ndarray) -> dict[tuple[int, int], int]:
    """(example position in ``rows``, word id) -> split-wide position of the word's first sub-token, for every word
    of ``rows`` the cache kept."""
    starts = np.concatenate([[0], np.cumsum(cache.lengths(split))])  # (n + 1,) first token of each row
    out = {}
    for k, (row, ids) in enumerate(zip(rows, cache.token_arrays(split, "word_ids", rows))):
        ids = np.asarray(ids, np.int64)
        for position in first_subtokens(ids, int(ids.max(initial=-1)) + 1):
            out[(k, int(ids[position]))] = int(starts[row] + position)
    return out


def read_states(caches: Sequence[LayerCache], shared: SharedExamples, split: str, states: str, size: int,
                seed: int, step: Step) -> tuple[list[np.ndarray], int]:
    """Each cache's (n, L, D) states of one seeded sample of the same examples (words), and n."""
    picked = sample_positions(shared.sizes[split], size, seed)  # positions in the shared order
    if states == "mean":
        out = []
        for k, cache in enumerate(caches):
            step(f"CKA: mean vectors of {len(picked):,} examples, cache {k + 1} of {len(caches)}")
            out.append(mean_vectors(cache, split, shared.cache_rows(k, split, picked)))
        return out, len(picked)
    step("CKA: the words every cache kept")
    where = [word_positions(cache, split, shared.cache_rows(k, split, picked)) for k, cache in enumerate(caches)]
    words = sorted(set.intersection(*(set(w) for w in where)))  # (example, word id), in the shared order
    chosen = [words[i] for i in sample_positions(len(words), size, seed)]
    out = []
    for k, cache in enumerate(caches):
        step(f"CKA: states of {len(chosen):,} words, cache {k + 1} of {len(caches)}")
        (block,) = cache.gather_positions(split, [[where[k][word] for word in chosen]])  # (L, n, D)
        out.append(np.ascontiguousarray(block.transpose(1, 0, 2)))
    return out, len(chosen)


def cka_pairs(caches: Sequence[LayerCache], labels: Sequence[str], shared: SharedExamples, split: str, states: str,
              size: int, seed: int, step: Step, *, debiased: bool = True) -> list[dict[str, Any]]:
    """For every pair of caches (in the order given), the (L_a, L_b) CKA (``debiased`` or plain) between their
    states and each state's best match, on one seeded sample of ``size`` examples (words) of ``split``."""
    read, n = read_states(caches, shared, split, states, size, seed, step)
    least = least_examples(debiased)
    if n < least:
        raise ConfigError(f"CKA needs at least {least} examples (words) of split {split!r} that every cache holds, "
                          f"and there are {n}; choose another {option('eval_split')}.")
    pairs = []
    grams: dict[int, np.ndarray] = {}  # each model's Grams, computed once for all its pairs when they all fit
    keep = grams_fit(n, sum(states.shape[1] for states in read))

    def unit(k: int) -> np.ndarray:
        if k not in grams:
            grams[k] = unit_grams(read[k], debiased)
        return grams[k]

    for a, b in combinations(range(len(caches)), 2):
        step(f"CKA: {labels[a]} against {labels[b]}")
        if keep and grams_pay(read[a].shape, read[b].shape):
            matrix = cka_of_grams(unit(a), unit(b))  # (L_a, L_b)
        else:
            matrix = cross_cka(read[a], read[b], debiased=debiased)
        pairs.append({"a": labels[a], "b": labels[b], "split": split, "states": states, "n": n,
                      "rows": caches[a].layer_names, "columns": caches[b].layer_names, "cka": matrix,
                      "best_match_of_rows": best_matches(matrix), "best_match_of_columns": best_matches(matrix.T)})
    return pairs


def count_steps(n_caches: int, states: str) -> int:
    """How many ``step`` calls :func:`cka_pairs` makes."""
    return n_caches + int(states == "words") + n_caches * (n_caches - 1) // 2
