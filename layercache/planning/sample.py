"""The labelled sample ``layercache plan`` measures storage quality on: chosen, forwarded once, held.

Two parts, named as the sample's own splits:

- ``train``: a seeded sample of the first split (at most ``examples``), stratified by the labels of
  the first classification task so that a rare class keeps its share (a token or regression task:
  a plain seeded sample). Probes and the quick head learn on it.
- ``test``: what they are scored on. A split the user gave that is not the first (a ``validation``
  or ``dev`` split first, then ``test``), sampled the same way; without one, a seeded 30 % of the
  first split's sample, held out. Where the loss shows matters: on a task whose signal is weak, a
  slice of the training split can show no loss where a held-out split does, so the plan says which
  one was used (:attr:`QualitySample.scored_on`).

Every example is forwarded once (:func:`~layercache.extraction.measure.forward_all`, whose timing is
the plan's forward speed) and its kept states are held in full precision (the forward's dtype), so
each storage choice's cache of the sample is written from them without running the model again.
The sample is cut to fit :data:`SAMPLE_SHARE` of the memory budget (at most :data:`SAMPLE_BYTES`):
a large model on long texts is measured on fewer examples, and the plan says how many.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.memory import current_budget
from ..extraction.held import HeldStates
from ..extraction.job import JobInputs
from ..extraction.measure import ForwardSpeed, forward_all
from ..extraction.plan import plan_split
from ..extraction.specs import BatchSpec
from ..sources.records import DatasetRecords, SplitRecords
from ..store.reader import TEST_NAMES, VALIDATION_NAMES

DEFAULT_EXAMPLES = 2000
"""Examples of the first split the quality check learns on by default (and at most as many scored)."""
MIN_TRAIN, MIN_TEST = 40, 20
"""Fewest examples to learn on and to score on: below them a cost would be noise, and none is measured."""
HELD_OUT = 0.3
"""Share of the first split's sample held out for scoring when the data has no other labelled split."""
SAMPLE_BYTES = 2 << 30
"""Most bytes of full-precision states the sample holds, whatever the memory budget."""
SAMPLE_SHARE = 0.25
"""Most share of the memory budget the sample's states take."""
TRAIN, TEST = "train", "test"
"""The sample's own split names (what the probes and the head read)."""


class SampleStates(HeldStates):
    """Held states that every cache of the sample reads: handed out as often as asked, never forgotten."""

    def take(self, split: str, b: int):
        """Batch ``b`` of ``split``'s states, still held for the next cache."""
        return self.peek(split, b)

    def keep_only(self, batches) -> None:
        """Keep every batch: the next cache of the sample needs them all."""


@dataclass
class QualitySample:
    """A labelled sample, forwarded once: the inputs of its caches and the states every cache reads."""

    inputs: JobInputs
    """Records of the sample's ``train`` and ``test`` splits, the loaded backbone, the kept states, their plans."""
    held: SampleStates
    forward: ForwardSpeed
    """The timed forward pass over the whole sample (the plan's forward speed)."""
    source: str
    """The split the ``train`` part was drawn from."""
    scored_on: str
    """What the ``test`` part is: ``split 'validation'`` or ``a held-out 30 % of split 'train'``."""
    available: int
    """Examples of the first split there were to sample from."""
    cut: bool = False
    """Whether the memory bound cut the sample below the asked number of examples."""

    @property
    def n_train(self) -> int:
        """Examples the probes and the head learn on."""
        return len(self.inputs.records.splits[TRAIN])

    @property
    def n_test(self) -> int:
        """Examples they are scored on."""
        return len(self.inputs.records.splits[TEST])

    def describe(self) -> str:
        """``1,400 of 6,920 examples of 'train', scored on 1,000 of split 'validation'``."""
        cut = ", cut to fit memory" if self.cut else ""
        return (f"{self.n_train:,} of {self.available:,} examples of {self.source!r}{cut}, scored on "
                f"{self.n_test:,} of {self.scored_on}")


def labelled_sample(inputs: JobInputs, batching: BatchSpec, examples: int = DEFAULT_EXAMPLES,
                    seed: int = 0) -> QualitySample | None:
    """The quality sample of ``inputs`` (data, backbone and plans as ``plan`` loaded them, batched as ``batching``
    says); None without labels, or with fewer than :data:`MIN_TRAIN` examples to learn on or :data:`MIN_TEST` to
    score on.

    ``examples``: at most this many of the first split to learn on (and at most as many to score on).
    """
    records = inputs.records
    if not records.tasks or examples < 1 or not records.splits:
        return None
    first = next(iter(records.splits))
    others = [n for n in records.splits if n != first]
    scored = next((n for names in (VALIDATION_NAMES, TEST_NAMES) for n in others if n in names), None)
    if scored is None and others:
        scored = others[0]
    per_token = len(inputs.keep) * inputs.backbone.hidden_size * 4  # float32 bytes of one token's kept states
    budget = min(SAMPLE_BYTES, int(SAMPLE_SHARE * current_budget())) // per_token  # tokens the sample may hold
    rng = np.random.default_rng(seed)
    task = next((t for t in records.tasks if t.kind != "regression"), records.tasks[0])
    train_rows = _stratified(records.splits[first], task, examples, rng)
    if scored is None:
        n_test = max(1, int(round(HELD_OUT * len(train_rows))))
        test_rows, train_rows = train_rows[:n_test], train_rows[n_test:]
        test_split, scored_on = first, f"a held-out {HELD_OUT:.0%} of split {first!r}"
    else:
        test_split, scored_on = scored, f"split {scored!r}"
        test_rows = _stratified(records.splits[scored], task, examples, rng)
    lengths = {name: np.array([ex.n_tokens for ex in inputs.plans[name].examples]) for name in (first, test_split)}
    need = int(lengths[first][train_rows].sum() + lengths[test_split][test_rows].sum())
    cut = need > budget
    if cut:  # the same share of each part, each still stratified (the rows are in a seeded random order)
        train_rows = _within(train_rows, lengths[first], budget * len(train_rows) / (len(train_rows) + len(test_rows)))
        test_rows = _within(test_rows, lengths[test_split], budget - lengths[first][train_rows].sum())
    if len(train_rows) < MIN_TRAIN or len(test_rows) < MIN_TEST:
        return None  # the plan says why: too few labelled examples (or too little memory) to tell a loss from noise
    sample = DatasetRecords(
        name=records.name, config=records.config, fingerprint=records.fingerprint, columns=records.columns,
        text_columns=records.text_columns, tasks=records.tasks,
        splits={TRAIN: _subset(records.splits[first], np.sort(train_rows)),
                TEST: _subset(records.splits[test_split], np.sort(test_rows))})
    backbone = inputs.backbone
    plans = {name: plan_split(backbone, split, batching.stride, batching.batch_tokens, batching.batch_size)
             for name, split in sample.splits.items()}
    held = SampleStates(budget_bytes=1 << 62)  # sized above: every batch fits
    forward = forward_all(backbone, plans, inputs.keep, held)
    return QualitySample(JobInputs(sample, backbone, inputs.keep, plans), held, forward, first, scored_on,
                         len(records.splits[first]), cut)


def _stratified(split: SplitRecords, task, n: int, rng: np.random.Generator) -> np.ndarray:
    """At most ``n`` rows of ``split`` in a seeded random order, each class of ``task`` keeping its share
    (rounded, at least one row of a class that has any) for a sequence task; else a plain seeded sample."""
    rows = np.arange(len(split))
    labels = split.labels.get(task.name)
    if len(rows) <= n or labels is None or task.kind != "sequence":
        return rng.permutation(rows)[:n]
    labels = np.asarray(labels)
    classes, counts = np.unique(labels, return_counts=True)
    quotas = n * counts / len(rows)  # (C,) each class's share of n
    take = np.floor(quotas).astype(int)
    take[np.argsort(take - quotas)[:n - take.sum()]] += 1  # largest remainders first: exactly n rows in all
    picked = [rng.permutation(rows[labels == label])[:k] for label, k in zip(classes, take)]
    return rng.permutation(np.concatenate(picked))


def _within(rows: np.ndarray, lengths: np.ndarray, tokens: float) -> np.ndarray:
    """The first of ``rows`` whose stored tokens (``lengths``) add up to at most ``tokens``."""
    return rows[:int(np.searchsorted(np.cumsum(lengths[rows]), tokens, side="right"))]


def _subset(split: SplitRecords, rows: np.ndarray) -> SplitRecords:
    """The records of ``rows`` of ``split``, their source rows kept (what the cache's example index names)."""
    def take(column):
        return None if column is None else [column[i] for i in rows]

    return SplitRecords(texts=take(split.texts), text_pairs=take(split.text_pairs), words=take(split.words),
                        labels={name: take(column) for name, column in split.labels.items()},
                        source_index=take(split.source_index))
