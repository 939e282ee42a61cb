"""The labelled sample the plan's quality check learns and scores on: stratified, seeded, on the split the user
gave, bounded by memory, forwarded once."""

from __future__ import annotations

import numpy as np
import pytest

from layercache.extraction.job import load_inputs
from layercache.extraction.specs import BatchSpec, DataSpec, StorageSpec
from layercache.planning import sample as sampling
from layercache.planning.sample import TEST, TRAIN, labelled_sample

SIZES = {"train": 300, "validation": 120, "test": 100}


@pytest.fixture
def inputs(tiny_models, small_builtin):
    return load_inputs(str(tiny_models["bert"]), DataSpec("builtin"), StorageSpec(), BatchSpec(), allow_pickle=False)


def _labels(sample, split, task="topic"):
    return np.asarray(sample.inputs.records.splits[split].labels[task])


def test_the_sample_is_stratified_seeded_and_scored_on_the_validation_split(inputs):
    sample = labelled_sample(inputs, BatchSpec(), examples=150, seed=3)
    assert sample.n_train == 150 and sample.n_test == 120  # all of validation: it has fewer than 150
    assert sample.scored_on == "split 'validation'" and sample.source == "train"
    assert "150 of 300 examples of 'train', scored on 120 of split 'validation'" == sample.describe()
    full = np.asarray(inputs.records.splits["train"].labels["topic"])
    shares = np.bincount(_labels(sample, TRAIN), minlength=6) / 150
    assert np.abs(shares - np.bincount(full, minlength=6) / len(full)).max() <= 1 / 150 + 1e-9  # each class's share
    again = labelled_sample(inputs, BatchSpec(), examples=150, seed=3)
    assert again.inputs.records.splits[TRAIN].source_index == sample.inputs.records.splits[TRAIN].source_index
    other = labelled_sample(inputs, BatchSpec(), examples=150, seed=4)
    assert other.inputs.records.splits[TRAIN].source_index != sample.inputs.records.splits[TRAIN].source_index


def test_every_batch_is_forwarded_once_and_held(inputs):
    sample = labelled_sample(inputs, BatchSpec(), examples=100)
    batches = sum(len(p.batches) for p in sample.inputs.plans.values())
    assert len(sample.held) == sample.forward.batches == batches
    assert sample.forward.tokens == sum(p.n_tokens for p in sample.inputs.plans.values())
    first = sample.held.take(TRAIN, 0)
    assert first is not None and sample.held.take(TRAIN, 0) is first  # handed out as often as asked
    sample.held.keep_only({})
    assert len(sample.held) == batches


def test_one_split_holds_out_a_part_of_its_sample(tiny_models, tmp_path):
    path = tmp_path / "reviews.tsv"
    path.write_text("text\tlabel\n" + "".join(f"review {i} was {'good' if i % 3 else 'bad'}\t{int(i % 3 == 0)}\n"
                                               for i in range(120)))
    one = load_inputs(str(tiny_models["bert"]), DataSpec(str(path)), StorageSpec(), BatchSpec(), allow_pickle=False)
    sample = labelled_sample(one, BatchSpec(), examples=100)
    assert sample.scored_on == "a held-out 30% of split 'train'"
    assert (sample.n_train, sample.n_test) == (70, 30)
    trained = set(sample.inputs.records.splits[TRAIN].source_index)
    assert not trained & set(sample.inputs.records.splits[TEST].source_index)  # never scored on what it learned


def test_the_memory_bound_cuts_the_sample_and_says_so(inputs, monkeypatch):
    per_token = len(inputs.keep) * inputs.backbone.hidden_size * 4
    monkeypatch.setattr(sampling, "SAMPLE_BYTES", 3000 * per_token)  # room for about 3,000 tokens
    sample = labelled_sample(inputs, BatchSpec(), examples=300)
    assert sample.cut and "cut to fit memory" in sample.describe()
    assert sample.forward.tokens <= 3000 and sample.n_train < 300


def test_too_few_labelled_examples_measure_nothing(inputs):
    assert labelled_sample(inputs, BatchSpec(), examples=10) is None  # under MIN_TRAIN
    assert labelled_sample(inputs, BatchSpec(), examples=0) is None
