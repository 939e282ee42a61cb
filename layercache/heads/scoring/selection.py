"""Model selection: which validation metric picks a run's epoch (and stops it early), and how.

One registry, :data:`SELECTION_METRICS`: each metric names the task kinds it applies to (``span_f1``
only to token tasks tagged IOB). Every metric in it is oriented so that higher is better, which the
selection rule relies on. ``r2`` stands in for the mean squared error: on a fixed validation set it
ranks epochs exactly as ``-MSE`` does, but it has no units, so it can be averaged with the other
tasks' metrics of a joint head (a ``neg_mse`` would weigh a task by the scale of its targets).

The default of a task (:func:`default_metric`) is what a researcher would pick for a task nobody
has tuned for:

- sequence classification: ``accuracy`` when the training classes are balanced, ``mcc`` (Matthews
  correlation) when they are not, i.e. when the most frequent class has at least
  :data:`IMBALANCE_RATIO` times the examples of the least frequent (60/40 for two classes).
  Accuracy rewards predicting the majority class on imbalanced data (a constant prediction scores
  that class's share), so an epoch that has collapsed onto it can win; MCC gives every constant
  prediction 0 and weighs all cells of the confusion matrix. On balanced data the two rank epochs
  nearly alike and accuracy is the number papers report, so a balanced task keeps it.
- token classification: entity-level ``span_f1`` for IOB tags (conlleval), else ``macro_f1``:
  one class (``O``) usually dominates the words, so their accuracy says little.
- regression: ``pearson``.

A head with several tasks selects on the loss-weighted mean of each task's selection metric
(:meth:`Selection.score`), the same weights its loss uses. A metric that is undefined on an epoch (a
correlation of constant predictions) counts as 0: no skill. The kept epoch is the first one with
the highest score (:func:`best_epoch`); training stops after ``patience`` epochs that did not beat
it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ...core.option_names import option
from ...core.tasks import LabelTask
from ...errors import ConfigError
from ...store.sections import JsonSection

#: A sequence task's training classes are imbalanced (and selected on ``mcc`` by default) when the
#: most frequent class has at least this many times the examples of the least frequent one.
IMBALANCE_RATIO = 1.5

KIND_NAMES = {"sequence": "sequence classification", "token": "token classification", "regression": "regression"}


def is_iob(task: LabelTask) -> bool:
    """Whether a token task's labels are IOB entity tags (scored with entity-level span F1)."""
    names = task.label_names or ()
    return any(n.startswith(("B-", "I-")) for n in names) and all(
        n == "O" or n.startswith(("B-", "I-", "E-", "S-")) for n in names)


def primary_metric(task: LabelTask) -> str:
    """The metric a task is reported by, and selected on by default when it is balanced.

    A run's selection metric may differ (``--metric``, or ``mcc`` for imbalanced classes): see
    :func:`default_metric`.
    """
    if task.kind == "regression":
        return "pearson"
    if task.kind == "token":
        # Entity F1 for IOB tags; otherwise macro-F1, since one class (O) usually dominates tokens.
        return "span_f1" if is_iob(task) else "macro_f1"
    return "accuracy"


@dataclass(frozen=True)
class SelectionMetric:
    """A validation metric a run can select its epoch on; higher is always better.

    ``name`` is also the key under which :func:`~layercache.heads.scoring.evaluation.score` reports it.
    """

    name: str
    kinds: tuple[str, ...]
    """Task kinds it applies to."""
    description: str
    iob_only: bool = False
    """Applies only to token tasks whose classes are IOB tags (see :func:`is_iob`)."""

    def applies_to(self, task: LabelTask) -> bool:
        """Whether this metric can score ``task``."""
        return task.kind in self.kinds and (not self.iob_only or is_iob(task))

    def read(self, task_metrics: Mapping[str, float]) -> float:
        """This metric's value in one task's scores; an undefined value (NaN) reads as 0, no skill."""
        value = float(task_metrics[self.name])
        return 0.0 if math.isnan(value) else value


SELECTION_METRICS: dict[str, SelectionMetric] = {m.name: m for m in (
    SelectionMetric("accuracy", ("sequence", "token"), "fraction of correct predictions (of words, for a token task)"),
    SelectionMetric("macro_f1", ("sequence", "token"), "unweighted mean of the per-class F1"),
    SelectionMetric("mcc", ("sequence", "token"), "Matthews correlation (multi-class R_K); 0 for any constant "
                                                  "prediction"),
    SelectionMetric("span_f1", ("token",), "entity-level F1 of IOB tags, as conlleval scores it", iob_only=True),
    SelectionMetric("pearson", ("regression",), "Pearson correlation of predictions and targets"),
    SelectionMetric("spearman", ("regression",), "Spearman rank correlation of predictions and targets"),
    SelectionMetric("r2", ("regression",), "coefficient of determination, 1 - MSE / variance of the targets"),
)}
"""Every metric a run can select on, by name (what ``--metric`` offers)."""


def metric_names() -> tuple[str, ...]:
    """The selection metrics' names, in registry order."""
    return tuple(SELECTION_METRICS)


def metrics_for(task: LabelTask) -> list[str]:
    """The names of the selection metrics that apply to ``task``."""
    return [name for name, m in SELECTION_METRICS.items() if m.applies_to(task)]


def is_imbalanced(counts: np.ndarray) -> bool:
    """Whether class ``counts (C,)`` are imbalanced: the largest at least IMBALANCE_RATIO times the smallest.

    A class with no example at all makes a task imbalanced.
    """
    counts = np.asarray(counts, dtype=np.float64)
    if counts.size < 2:
        return False
    return bool(counts.max() >= IMBALANCE_RATIO * counts.min())


def default_metric(task: LabelTask, counts: np.ndarray | None = None) -> tuple[str, str]:
    """``(metric, why)``: the metric ``task`` selects on when none is asked for (see the module docstring).

    ``counts (C,)`` are the training examples per class of a sequence task; without them the task
    is taken as balanced.
    """
    if task.kind == "sequence" and counts is not None and is_imbalanced(counts):
        counts = np.asarray(counts)
        top = int(np.argmax(counts))
        share = counts[top] / max(1, counts.sum())
        return "mcc", (f"default: imbalanced classes (largest, {task.label_names[top]!r}, is {share:.0%} of "
                       "train)")
    name = primary_metric(task)
    why = {"accuracy": "balanced classes", "span_f1": "IOB tags", "macro_f1": "token classes, not IOB tags",
           "pearson": "regression"}.get(name, task.kind)
    return name, f"default: {why}"


def requested_metrics(metric: str | Mapping[str, str] | None, tasks: Sequence[LabelTask]) -> dict[str, str]:
    """The metric asked for each task (tasks left out take their default), refusing what cannot apply.

    ``metric`` is ``None`` (every task its default), one name for every task, or ``{task: name}``.
    """
    if metric is None:
        return {}
    names = [t.name for t in tasks]
    if isinstance(metric, str):
        asked = {t: metric for t in names}
    elif isinstance(metric, Mapping):
        unknown = [str(k) for k in metric if k not in names]
        if unknown:
            raise ConfigError(f"The selection metric names unknown task {unknown[0]!r}; the head's tasks are: "
                              f"{', '.join(names)}.")
        asked = {task: name for task, name in metric.items() if name is not None}
    else:
        raise ConfigError(f"metric must be a metric name or {{task: name}}, got {type(metric).__name__}.")
    for task in tasks:
        name = asked.get(task.name)
        if name is None:
            continue
        if name not in SELECTION_METRICS:
            raise ConfigError(f"Unknown selection metric {name!r}; choose one of {', '.join(SELECTION_METRICS)}.")
        if not SELECTION_METRICS[name].applies_to(task):
            fits = ", ".join(metrics_for(task))
            kind = KIND_NAMES[task.kind] + (" without IOB tags" if name == "span_f1" and task.kind == "token" else "")
            per_task = option("metric", {task.name: "NAME"}, typed=f"{task.name}=NAME")
            hint = f" ({per_task} picks one task's metric)" if len(tasks) > 1 else ""
            raise ConfigError(f"The selection metric {name!r} does not apply to task {task.name!r} ({kind}); "
                              f"choose one of {fits} for it{hint}.")
    return asked


@dataclass(frozen=True)
class Selection:
    """How a run picks its epoch: each task's selection metric, combined by the tasks' loss weights."""

    metrics: dict[str, str]
    """task -> the name of its selection metric."""
    weights: dict[str, float]
    """task -> its weight in the mean (the model's loss weights)."""
    reasons: dict[str, str] = field(default_factory=dict)
    """task -> why that metric (``asked``, or the default's reason)."""

    def values(self, metrics: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        """Each task's selection metric in ``metrics`` (``{task: scores}``), as reported (NaN kept)."""
        return {task: float(metrics[task][name]) for task, name in self.metrics.items()}

    def score(self, metrics: Mapping[str, Mapping[str, float]]) -> float:
        """One number to select on: the weighted mean of the tasks' selection metrics (NaN as 0)."""
        total = weight = 0.0
        for task, name in self.metrics.items():
            w = self.weights.get(task, 1.0)
            total += w * SELECTION_METRICS[name].read(metrics[task])
            weight += w
        return total / weight if weight else 0.0

    def describe(self) -> str:
        """``mcc``, or ``mean of sentiment accuracy, intensity pearson`` for a joint head."""
        if len(self.metrics) == 1:
            return next(iter(self.metrics.values()))
        weighted = len(set(self.weights.values())) > 1
        return ("loss-weighted " if weighted else "") + "mean of " + ", ".join(
            f"{task} {name}" for task, name in self.metrics.items())

    def to_json(self) -> dict:
        """``{"metric": {task: name}, "reason": {task: why}, "score": how the tasks combine}``."""
        return {"metric": dict(self.metrics), "reason": dict(self.reasons), "score": self.describe(),
                "weights": dict(self.weights)}

    @classmethod
    def from_json(cls, data: Mapping | JsonSection) -> "Selection":
        """Rebuild from :meth:`to_json`, or from the section of a run's files that holds it
        (:class:`~..run_folders.run_sections.SelectionRecord`)."""
        if isinstance(data, JsonSection):
            data = data.to_json()
        return cls(dict(data["metric"]), {k: float(v) for k, v in data["weights"].items()},
                   dict(data.get("reason", {})))


def resolve_selection(tasks: Sequence[LabelTask], asked: Mapping[str, str], weights: Mapping[str, float],
                      counts: Mapping[str, np.ndarray] | None = None) -> Selection:
    """The selection of a run: ``asked`` metrics (from :func:`requested_metrics`), defaults for the rest.

    ``counts`` holds the training examples per class of the sequence tasks that take their default.
    """
    metrics, reasons = {}, {}
    for task in tasks:
        if task.name in asked:
            metrics[task.name], reasons[task.name] = asked[task.name], "asked"
        else:
            metrics[task.name], reasons[task.name] = default_metric(task, (counts or {}).get(task.name))
    return Selection(metrics, {t.name: float(weights.get(t.name, 1.0)) for t in tasks}, reasons)


def default_selection(tasks: Sequence[LabelTask], weights: Mapping[str, float] | None = None) -> Selection:
    """Every task's default metric without looking at its data (each sequence task taken as balanced)."""
    return resolve_selection(tasks, {}, weights or {})


def best_epoch(scores: Sequence[float]) -> int:
    """The 1-based epoch of the highest score, the earliest of ties; 0 when there is none (NaN never wins)."""
    best, best_score = 0, -math.inf
    for epoch, value in enumerate(scores, start=1):
        if value > best_score:  # strict: a later epoch must beat the kept one, not tie it
            best, best_score = epoch, value
    return best


def select_epoch(per_epoch: Sequence[Mapping[str, Mapping[str, float]]], selection: Selection) -> int:
    """The epoch (1-based) ``selection`` keeps, given each epoch's validation metrics ``{task: scores}``."""
    return best_epoch([selection.score(m) for m in per_epoch])
