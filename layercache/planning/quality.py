"""What each storage choice costs in quality, measured on the user's own labels before the cache is written.

For a :class:`~.sample.QualitySample` (a labelled sample forwarded once, its states held in full
precision), every storage choice is made for real: a cache of the sample in that storage, written
by extraction itself from the held states (:func:`~layercache.extraction.run.extract_loaded`: the
same codec, the same projection fit, the same pooled vectors a full run would write), and a
reference cache in float32. (Where every task is probed on pooled vectors, the probes read a pooled-only cache
of the very vectors a choice stores beside its token states, shared by the choices that store the same ones, and
the token states are written only for a head: :meth:`QualityCheck._probes_cache`.) On each cache, for every
label task:

- per-state linear probes (:class:`~layercache.probes.LinearProbes`, on at most its default sample of
  training examples or words), each scored at the state its own validation picks, as a user of that cache
  would. Each task's ``C`` is the one the reference's probes choose most often over the states from the
  probes' grid; the reference and every choice are then fitted at that ``C`` (one batched fit over every
  state), so both sides learn alike and a difference is the storage's;
- where asked (:meth:`QualityCheck.head`), one quick default head (:class:`~layercache.heads.LayerHead`,
  the default mixer, :data:`HEAD_EPOCHS` epochs, one seed, every task at once; on a pooled-only cache, on
  the pooled means). A head costs seconds to minutes where a probe costs a fraction of a second, so the
  plan measures it for the choices its answer rests on (:mod:`.plan`), where it can show a loss
  (:func:`head_measures`: a lossy codec, a projection, pooled vectors alone).

The cost of a choice is the reference's score minus the choice's on the sample's ``test`` part, in
points of the task's selection metric (100 x accuracy, MCC, F1 or Pearson's r), with a 95 % interval
from a paired bootstrap over the scored examples (:func:`~layercache.heads.scoring.bootstrap.paired_bootstrap`):
both sides are scored on the same resampled rows, so what they get right or wrong together cancels.
A head's interval also counts what training alone moves its score: the reference's head is trained with a
second seed, and their difference joins the bootstrap's error (:meth:`_Scored.compare`).
Everything is seeded: the same data and options give the same numbers.
"""

from __future__ import annotations

import copy
import logging
import math
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..extraction.run import extract_loaded
from ..extraction.specs import StorageSpec
from ..extraction.storage_choices import POOLED, StorageChoice
from ..heads.estimator import LayerHead
from ..heads.scoring.bootstrap import paired_bootstrap
from ..heads.scoring.evaluation import Predictions
from ..heads.scoring.evaluation import score as score_predictions
from ..heads.scoring.selection import Selection, default_metric
from ..probes.linear import LinearProbes
from ..store.manifest import LabelTask
from ..store.reader import LayerCache
from ..store.storage import pooled_dtype_for
from .sample import TEST, TRAIN, QualitySample

HEAD_EPOCHS = 4
"""Epochs of the quick head: enough to see a storage's loss, a fraction of a real run."""
RESAMPLES = 1000
Z95 = 1.959964
"""The normal quantile of a two-sided 95 % interval (the interval is the loss ± Z95 bootstrap standard errors)."""
REFERENCE = StorageChoice("tokens", "float32")
"""What every choice is compared with: the forward pass's states, unrounded."""


@dataclass(frozen=True)
class Cost:
    """One kind of learner's score on the reference and on a choice, and what the choice loses, in points."""

    metric: str
    reference: float
    score: float
    loss: float
    """``reference - score`` in points (100 x the metric): positive when the choice is worse."""
    low: float
    high: float
    """The 95 % interval of ``loss`` (paired bootstrap)."""

    def to_json(self) -> dict:
        """Plain JSON of the fields, rounded to what the sample can tell (0.01 point)."""
        return {"metric": self.metric, "reference": round(self.reference, 4), "score": round(self.score, 4),
                "loss_points": round(self.loss, 2), "interval_points": [round(self.low, 2), round(self.high, 2)]}


@dataclass
class ChoiceQuality:
    """What one storage choice costs on each task: its probes' cost, and its quick head's where measured."""

    choice: StorageChoice
    probes: dict[str, Cost] = field(default_factory=dict)
    head: dict[str, Cost] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds of each part: writing the sample's cache, fitting the probes, the head."""
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The choice's name (``tokens int8 + project 96``)."""
        return self.choice.name

    def costs(self) -> list[Cost]:
        """Every cost measured, probes and head, every task."""
        return [*self.probes.values(), *self.head.values()]

    @property
    def worst(self) -> Cost | None:
        """The cost whose interval reaches highest (the loss this choice may cost at worst); None if none."""
        costs = self.costs()
        return max(costs, key=lambda c: c.high) if costs else None

    def within(self, max_loss: float) -> bool | None:
        """Whether the choice loses at most ``max_loss`` points: every probe's loss with 95 % confidence (the
        interval's top), and no quick head's shown to lose more (its interval's bottom); None when nothing was
        measured.

        The probes are the measurement: fitted to one optimum, two of them differ only by what the storage changed,
        so their intervals are narrow. A quick head's interval also holds what its training alone moves it (a
        few points on a small sample), so it could rarely show a loss under a point; it vetoes a choice that
        loses where the probes do not look (the mix of layers, the token states a head reads) by more than that.
        """
        if not self.probes and not self.head:
            return None
        return all(c.high <= max_loss for c in self.probes.values()) and \
            all(c.low <= max_loss for c in self.head.values())

    def to_json(self) -> dict:
        """Plain JSON: per task, the probes' cost and the head's (null when not measured)."""
        return {"choice": self.name, "probes": {t: c.to_json() for t, c in self.probes.items()},
                "head": {t: c.to_json() for t, c in self.head.items()} if self.head else None,
                "timings": {part: round(v, 2) for part, v in self.timings.items()}, "notes": list(self.notes)}


@dataclass
class QualityReport:
    """The costs of every choice measured on one sample, and how it was measured."""

    sample: str
    """The sample (:meth:`~.sample.QualitySample.describe`)."""
    choices: list[ChoiceQuality]
    seconds: float
    """The whole check, after the sample's forward pass (caches written, probes and heads fitted)."""
    head_epochs: int = HEAD_EPOCHS
    seed: int = 0
    head_noise: dict[str, float] = field(default_factory=dict)
    """task -> points a float32 quick head's score moves with its training alone (two seeds; see
    :func:`_training_noise`), a part of every head interval; empty when no head was measured."""

    def of(self, name: str) -> ChoiceQuality | None:
        """The quality of the choice called ``name``; None when it was not measured."""
        return next((q for q in self.choices if q.name == name), None)

    def to_json(self) -> dict:
        """Plain JSON of the report."""
        return {"sample": self.sample, "seconds": round(self.seconds, 2), "head_epochs": self.head_epochs,
                "seed": self.seed, "reference": REFERENCE.name,
                "head_training_noise_points": {t: round(v, 2) for t, v in self.head_noise.items()},
                "choices": [q.to_json() for q in self.choices]}


class QualityCheck:
    """The quality check of one sample: ``with QualityCheck(sample, storage) as check:``, then :meth:`probes` for
    the choices, :meth:`head` where a head is wanted, and :meth:`report`. The sample's caches live in ``folder``
    (default: a temporary folder, removed when the block ends)."""

    def __init__(self, sample: QualitySample, storage: StorageSpec, *, seed: int = 0, head_epochs: int = HEAD_EPOCHS,
                 folder: str | Path | None = None, step=lambda description: None) -> None:
        self.sample, self.storage, self.seed, self.head_epochs, self.step = sample, storage, seed, head_epochs, step
        self._owned = folder is None
        self._folder = None if folder is None else Path(folder)
        self._measured: dict[str, ChoiceQuality] = {}
        self._caches: dict[tuple, Path] = {}
        """(store, dtype, projection, pooling) -> the sample's cache written so (see :meth:`_probes_cache`)."""
        self._fitted: dict[Path, _Probes] = {}
        """A cache -> its probes at the reference's C (two choices whose probes read one cache share them)."""
        self._reference: _Probes | None = None
        self._reference_head: _Head | None = None
        self._head_noise: dict[str, float] = {}
        """task -> points between two float32 quick heads of different seeds: what training alone moves a score."""
        self._seconds = 0.0

    def __enter__(self) -> QualityCheck:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="layercache-quality-"))
        return self

    def __exit__(self, *exc) -> None:
        if self._owned and self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)

    def probes(self, choices: Sequence[StorageChoice]) -> None:
        """Write each choice's cache of the sample and measure its probes' cost against the reference's."""
        with self._timed():
            reference = self._reference_probes()
            for choice in choices:
                self.step(f"quality: {choice.name}, probes")
                quality = self._quality(choice)
                path = self._probes_cache(choice, quality)
                t0 = time.perf_counter()
                probes = self._fitted.get(path)
                if probes is None:  # else another choice's probes read the very same stored vectors
                    # full width: each probe starts from the reference's optimum, which the same states stored
                    # another way barely move (the negation-scope words of the built-in data: 250 L-BFGS
                    # iterations from zero); a projection changes the width, and those fits are small
                    start = reference if not choice.project else None
                    probes = self._fitted[path] = _Probes.fit(path, self.seed, C=reference.C, start=start)
                quality.timings["probes"] = time.perf_counter() - t0
                for task in probes.tasks:
                    quality.probes[task.name] = reference.compare(probes, task, self.seed)

    def head(self, choice: StorageChoice) -> ChoiceQuality:
        """Measure ``choice``'s quick head against the reference's (once; its probes too, if not yet)."""
        quality = self._measured.get(choice.name)
        if quality is None or not quality.probes:
            self.probes([choice])
            quality = self._measured[choice.name]
        if quality.head:
            return quality
        with self._timed():
            if self._reference_head is None:
                self.step("quality: the float32 reference, quick heads of two seeds")
                self._reference_head = _Head.fit(self._cache(REFERENCE), self.seed, self.head_epochs)
                other = _Head.fit(self._cache(REFERENCE), self.seed + 1, self.head_epochs)
                self._head_noise = {t.name: _training_noise(self._reference_head.compare(other, t, self.seed))
                                    for t in other.tasks}
            self.step(f"quality: {choice.name}, quick head")
            t0 = time.perf_counter()
            head = _Head.fit(self._cache(choice, quality), self.seed, self.head_epochs, pooled=choice.store == POOLED)
            quality.timings["head"] = time.perf_counter() - t0
            for task in head.tasks:
                quality.head[task.name] = self._reference_head.compare(head, task, self.seed,
                                                                       training_noise=self._head_noise[task.name])
        return quality

    def head_if_lossy(self, choice: StorageChoice) -> ChoiceQuality:
        """:meth:`head` where a head can show what ``choice`` loses (:func:`head_measures`); else its probes only
        (measured if not yet), and a note says why: what ``plan`` and ``extract`` ask."""
        if head_measures(choice):
            return self.head(choice)
        quality = self._measured.get(choice.name)
        if quality is None or not quality.probes:
            self.probes([choice])
            quality = self._measured[choice.name]
        note = "no quick head: it only rounds float32 states, below what a second training seed moves a head"
        if note not in quality.notes:
            quality.notes.append(note)
        return quality

    def report(self) -> QualityReport:
        """Everything measured so far, in the order the choices were first asked for."""
        return QualityReport(self.sample.describe(), list(self._measured.values()), self._seconds, self.head_epochs,
                             self.seed, dict(self._head_noise))

    # --- the parts -------------------------------------------------------------------------------------------
    def _reference_probes(self) -> _Probes:
        if self._reference is None:
            self.step(f"quality: the float32 reference, probes ({self.sample.describe()})")
            path = self._probes_cache(REFERENCE)
            grid = _Probes.fit(path, self.seed)  # each task's most chosen C over the states, from the grid
            # refitted at that C, as every choice is: with C chosen per state on one side only, float16 showed
            # a 0.4-point 'loss' that was the C, not the storage; from the grid's optimum, most states' own
            self._reference = _Probes.fit(path, self.seed, C=grid.C, start=grid)
        return self._reference

    def _quality(self, choice: StorageChoice) -> ChoiceQuality:
        quality = self._measured.get(choice.name)
        if quality is None:
            quality = self._measured[choice.name] = ChoiceQuality(choice)
            tasks = self.sample.inputs.records.tasks
            if choice.store == POOLED and any(t.kind == "token" for t in tasks):
                quality.notes.append("token tasks are not measured: a pooled cache has no token states")
        return quality

    def _probes_cache(self, choice: StorageChoice, quality: ChoiceQuality | None = None) -> Path:
        """The sample's cache that ``choice``'s probes read: its own, or where every task is probed on pooled
        vectors, a pooled-only cache of the very vectors ``choice`` would store beside its token states.

        A sequence task's probe reads a cache's pooled vectors (``auto``: the mean first), which extraction
        pools from the (projected) float32 states and stores in :func:`~layercache.store.codecs.pooled_dtype_for`
        the token states' codec (float16 beside int8 and int4): a pooled-only cache of that dtype, projection and
        pooling holds them bit for bit (``tests/planning/test_quality.py``) without the token states, which are
        most of a cache's bytes and all of its write time. Choices that store the same vectors (float16, int8 and
        int4 tokens: float16 means) then share one cache and one fit. A token task reads word states: then, or
        without pooled vectors, each choice's own cache is written. The quick heads always read their own.
        """
        tasks = self.sample.inputs.records.tasks
        if choice.store == POOLED or not self.storage.pooling or any(t.kind == "token" for t in tasks):
            return self._cache(choice, quality)
        vectors = StorageChoice(POOLED, pooled_dtype_for(choice.dtype, choice.store), choice.project)
        return self._cache(vectors, quality, pooling=tuple(self.storage.pooling))

    def _cache(self, choice: StorageChoice, quality: ChoiceQuality | None = None,
               pooling: tuple[str, ...] | None = None) -> Path:
        """The sample's cache in ``choice``'s storage, written from the held states once (no forward pass).

        ``pooling``: the pooled vectors to store (default: the user's, and ``mean`` for a pooled choice, which
        a pooled head reads)."""
        if pooling is None:
            pooling = tuple(self.storage.pooling) if choice.store != POOLED else \
                tuple(dict.fromkeys([*self.storage.pooling, "mean"]))
        key = (choice.store, choice.dtype, choice.project, pooling)
        path = self._caches.get(key)
        if path is None:
            t0 = time.perf_counter()
            spec = StorageSpec(store=choice.store, storage_dtype=choice.dtype, project=choice.project,
                               project_basis=self.storage.project_basis if choice.project else "pca",
                               pooling=pooling, mean_skip_first=self.storage.mean_skip_first)
            name = choice.name.replace(" + ", "-").replace(" ", "-")
            path = self._folder / (name if pooling == tuple(self.storage.pooling) or choice.store != POOLED
                                   else f"{name}-{'-'.join(pooling)}")
            with _quiet():
                extract_loaded(self.sample.inputs, path, spec, held=self.sample.held)
            self._caches[key] = path
            if quality is not None:
                quality.timings["write"] = quality.timings.get("write", 0.0) + time.perf_counter() - t0
        return path

    @contextmanager
    def _timed(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            with _quiet():
                yield
        finally:
            self._seconds += time.perf_counter() - t0


def head_measures(choice: StorageChoice) -> bool:
    """Whether a quick head is worth its seconds on ``choice``: a lossy codec or a projection
    (:attr:`~layercache.extraction.storage_choices.StorageChoice.lossy`), or pooled vectors alone (a pooled head
    reads other features than a token head). float16 and bfloat16 token states only round the forward's float32
    ones, which no probe felt (0.00 points on every task of ``benchmarks/choice_quality.py``) and which moves a
    4-epoch head less than a second seed does: its three trainings (the reference's two seeds and its own) would
    measure that noise, at most of the check's time."""
    return choice.lossy or choice.store == POOLED


def measure_quality(sample: QualitySample, choices: Sequence[StorageChoice], storage: StorageSpec, *,
                    heads: Sequence[StorageChoice] = (), seed: int = 0, head_epochs: int = HEAD_EPOCHS,
                    folder: str | Path | None = None, step=lambda description: None) -> QualityReport:
    """The probes' cost of each of ``choices`` on ``sample`` (and the quick head's of ``heads``) against float32.

    ``storage``: the user's other storage options (pooling, first-token skipping), kept for every cache.
    ``folder``: where the sample's caches are written (default: a temporary folder, removed after).
    ``step(description)`` is called as each part starts (a progress display).
    """
    with QualityCheck(sample, storage, seed=seed, head_epochs=head_epochs, folder=folder, step=step) as check:
        check.probes(choices)
        for choice in heads:
            check.head(choice)
        return check.report()


@contextmanager
def _quiet() -> Iterator[None]:
    """The sample caches' and quick heads' own log lines (sizes, a quick head's collapse) are not the plan's."""
    logger = logging.getLogger("layercache")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():  # a probe stopped at its iterations still scores: a cost is a difference
            warnings.simplefilter("ignore", ConvergenceWarning)
            yield
    finally:
        logger.setLevel(level)


# --- learners and their predictions -----------------------------------------------------------------------
@dataclass
class _Scored:
    """Predictions of the sample's ``test`` part by one kind of learner on one cache, per task, and their gold."""

    tasks: list[LabelTask]
    gold: dict[str, np.ndarray | list]
    predictions: dict[str, Predictions]
    metrics: dict[str, str]
    """task -> the selection metric it is compared by (the reference's default for the task)."""

    def compare(self, other: _Scored, task: LabelTask, seed: int, training_noise: float = 0.0) -> Cost:
        """``task``'s cost of ``other`` against these (the reference's) predictions.

        ``training_noise`` (points): how far a second training of the reference moved its score. A head's
        trajectory diverges on the smallest change of its inputs (float16 against float32 moved a 4-epoch head
        2.6 points), which the bootstrap over rows does not see; it is added to the interval as a standard error
        of its own (one draw of the difference of two trainings), so such a move reads as noise, not as a loss.
        Probes converge to one optimum and pass 0."""
        selection = Selection(metrics={task.name: self.metrics[task.name]}, weights={task.name: 1.0})
        gold, mine = {task.name: self.gold[task.name]}, {task.name: self.predictions[task.name]}
        compared = paired_bootstrap(selection, [task], gold, mine, {task.name: other.predictions[task.name]},
                                    resamples=RESAMPLES, seed=seed)
        points, se = 100 * compared.difference, math.hypot(100 * compared.se, training_noise)
        reference = selection.score({task.name: score_predictions(task, gold[task.name], mine[task.name])})
        return Cost(selection.metrics[task.name], reference, reference - compared.difference, points,
                    points - Z95 * se, points + Z95 * se)


@dataclass
class _Probes(_Scored):
    C: dict[str, float] = field(default_factory=dict)
    """The L2 strength each task's probes chose most often over the states (the reference's: what choices use)."""

    fitted: dict[str, LinearProbes] = field(default_factory=dict)
    """task -> its fitted probes (what a warm start starts from)."""

    @classmethod
    def fit(cls, path: Path, seed: int, C: dict[str, float] | None = None, start: _Probes | None = None) -> _Probes:
        """Per-state probes of every task on the cache at ``path`` (but a token task on a pooled-only cache), each
        task scored at its validation's best state;
        ``C``: one L2 strength per task (else chosen per state from the grid); ``start``: probes of the same states
        and width whose optimum each fit starts from (``warm_start``: the same optimum, fewer iterations)."""
        with LayerCache.open(path) as cache:
            tasks = [t for t in cache.tasks if cache.stores_tokens or t.kind != "token"]
            predictions, gold, chosen, metrics, probes = {}, {}, {}, {}, {}
            for task in tasks:
                grid = {} if C is None else {"C_grid": [C[task.name]]}
                if start is not None and task.name in start.fitted:
                    fitted = copy.deepcopy(start.fitted[task.name]).set_params(warm_start=True, **grid)
                else:
                    fitted = LinearProbes(task=task.name, seed=seed, **grid)
                probes[task.name] = fitted.fit(cache, TRAIN)
                predicted, _ = fitted.predictions(cache, TEST)  # (L, n)
                gold[task.name] = _gold(task, cache.labels(TEST, task.name))
                predictions[task.name] = _predictions(task, predicted[fitted.best_layer_], gold[task.name])
                values, counts = np.unique(np.asarray(fitted.C_, dtype=float), return_counts=True)
                chosen[task.name] = float(values[np.argmax(counts)])
                counted = np.bincount(cache.labels(TRAIN, task.name), minlength=task.num_classes) \
                    if task.kind == "sequence" else None
                metrics[task.name] = default_metric(task, counted)[0]
        return cls(tasks, gold, predictions, metrics, chosen, probes)


@dataclass
class _Head(_Scored):
    @classmethod
    def fit(cls, path: Path, seed: int, epochs: int, pooled: bool = False) -> _Head:
        """One quick default head on every task of the cache at ``path`` (its pooled means when ``pooled``)."""
        with LayerCache.open(path) as cache:
            tasks = [t for t in cache.tasks if not (pooled and t.kind == "token")]
            head = LayerHead(tasks=[t.name for t in tasks], epochs=epochs, seed=seed, progress=False,
                             source="pooled:mean" if pooled else "auto").fit(cache, TRAIN)
            passed = head.predict(cache, TEST)
            feed = head.make_feed(cache, TEST, head.tasks_, head.layer_names_, head.source_)
            return cls(tasks, {t.name: feed.gold(t.name) for t in tasks}, dict(passed.predictions),
                       dict(head.selection_.metrics))


def _training_noise(seeds: Cost) -> float:
    """Points a head's score moves with its training alone, from two trainings' ``seeds`` comparison: their
    difference, or the bootstrap error of it where larger. That error counts the rows the two disagree on (a row
    either gets right is as likely to go to one as the other in a third training), so two seeds whose scores
    tie by chance still show the noise their disagreements hold."""
    return max(abs(seeds.loss), (seeds.high - seeds.low) / (2 * Z95))


def _gold(task: LabelTask, labels) -> np.ndarray | list:
    """The labels probes are scored against: every example's, or every sentence's labelled words."""
    if task.kind == "token":
        return [np.asarray(sentence)[np.asarray(sentence) >= 0] for sentence in labels]
    return np.asarray(labels)


def _predictions(task: LabelTask, flat: np.ndarray, gold) -> Predictions:
    """A probe's ``(n,)`` predictions as :class:`Predictions` in row order: per sentence for a token task (a
    probe predicts every labelled word, sentence after sentence)."""
    if task.kind != "token":
        return Predictions(task, np.arange(len(gold)), np.asarray(flat))
    bounds = np.cumsum([0, *(len(words) for words in gold)])
    if bounds[-1] != len(flat):
        raise RuntimeError(f"the probes of task {task.name!r} predicted {len(flat)} words of {bounds[-1]}")
    return Predictions(task, np.arange(len(gold)), [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])])
