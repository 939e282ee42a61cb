"""One C selection and one training sample for every probe, one holdout for heads and probes."""

from __future__ import annotations

import numpy as np
import pytest

from layercache.core.holdout import stratified_holdout, validation_slice
from layercache.errors import ConfigError
from layercache.probes import CumulativeProbes, LinearProbes
from layercache.probes.selection import choose_c, sample_rows


def test_choose_c_takes_the_smallest_loss_with_a_tie_margin():
    losses = np.array([[0.50, 0.30, 0.700],
                       [0.40, 0.30001, 0.690],
                       [0.41, 0.25, np.nan]])  # (G=3 ascending C, L=3)
    # layer 0: smallest loss at C index 1; layer 1: C 2 is lower by far more than 0.1 %;
    # layer 2: C index 1 is best, the NaN never wins
    assert choose_c(losses).tolist() == [1, 2, 1]
    near = np.array([[1.0000], [0.9995]])  # within 0.1 %: the smaller C (stronger regularisation)
    assert choose_c(near).tolist() == [0]


def test_sample_rows_is_seeded_and_none_when_everything_fits():
    assert sample_rows(10, None, 0) is None and sample_rows(10, 10, 0) is None
    a, b = sample_rows(1000, 50, 3), sample_rows(1000, 50, 3)
    assert np.array_equal(a, b) and len(np.unique(a)) == 50 and np.all(np.diff(a) > 0)


@pytest.mark.parametrize("bad", [1, 2.5, True, "10"])
def test_max_train_refused_in_one_sentence(bad):
    X, y = np.random.default_rng(0).normal(size=(40, 2, 3)), np.arange(40) % 2
    with pytest.raises(ConfigError, match="max_train"):
        LinearProbes(max_train=bad).fit_arrays(X, y)


def test_head_and_probe_hold_out_the_same_rows(builtin_cache):
    """A head's validation slice and a probe's are one draw (they were two functions that could drift)."""
    spec = next(t for t in builtin_cache.tasks if t.kind == "sequence")
    _, head_val = validation_slice(builtin_cache, "train", [spec], 0.1, 7)
    _, probe_val = stratified_holdout(builtin_cache.num_examples("train"), 0.1, 7,
                                      builtin_cache.labels("train", spec.name))
    assert np.array_equal(head_val, probe_val)


def test_cumulative_fits_on_the_probes_sample_and_starts_from_them(builtin_cache):
    spec = next(t for t in builtin_cache.tasks if t.kind == "token")
    probes = LinearProbes(task=spec.name, max_train=300).fit(builtin_cache, "train")
    assert probes.n_train_ == 300 < probes.n_train_available_
    cum = CumulativeProbes(task=spec.name, max_train=300).fit(builtin_cache, "train", probes=probes)
    assert cum.n_train_ == 300
    # the embeddings-only prefix starts from (and cannot end below) layer 0's probe
    assert cum.scores_[0] >= probes.scores_[0] - 0.02
    # a longer prefix holds its best single layer within a small margin
    for p in range(len(cum.scores_)):
        assert cum.scores_[p] >= probes.scores_[: p + 1].max() - 0.05, p
