"""Collapse: a trained head that predicts (nearly) one class for everything, reported with what to try.

It is checked on the validation predictions of the kept epoch, per classification task (per word
for a token task). A task has collapsed when one class takes at least :data:`COLLAPSE_SHARE` of the
predictions while the other classes, together, get at most :data:`COLLAPSE_RATIO` of their true
share. The second condition keeps the warning off a good head on a skewed task: on words that are
97% ``O`` a good tagger predicts about 97% ``O`` (the rest get their share), where one that has
collapsed predicts ``O`` for 99.5% or more. A task whose truth holds one class only never warns.

The warning is one sentence that names the task, the class, both shares and what to try:
``--class-weight balanced`` (unless the task is weighted so already), ``--metric`` with a metric
that a constant prediction cannot win (``mcc`` for sequences, ``span_f1`` or ``macro_f1`` for
tokens; unless it already selects on it), and a lower ``--lr`` / more ``--epochs``, or, for a
head fitted exactly by the convex solver (where no learning rate or epoch is involved), a mixer that
learns more than one state.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ...core.option_names import option
from ...core.tasks import IGNORE_INDEX, LabelTask
from ...store.feed import Feed
from ..scoring.evaluation import PassResult, is_iob
from ..scoring.selection import Selection
from .class_weights import BALANCED

log = logging.getLogger(__name__)

#: Share of the predictions one class must take for a head to count as collapsed.
COLLAPSE_SHARE = 0.95
#: ... while the other classes get at most this fraction of their true share of the predictions.
COLLAPSE_RATIO = 0.25


@dataclass(frozen=True)
class Collapse:
    """One class taking (nearly) all predictions of a task."""

    class_id: int
    predicted_share: float
    true_share: float


def _flat(values: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    """Class ids as one array: the per-word arrays of a token task are concatenated."""
    if isinstance(values, np.ndarray) and values.dtype != object:
        return values.reshape(-1).astype(np.int64)
    if not len(values):
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.asarray(v).reshape(-1) for v in values]).astype(np.int64)


def find_collapse(gold, predicted) -> Collapse | None:
    """The collapse of predictions onto one class (see the module docstring), or None.

    ``gold`` and ``predicted`` are class ids: ``(n,)`` arrays, or per-word arrays of a token task;
    positions whose gold label is IGNORE_INDEX are left out.
    """
    truth, pred = _flat(gold), _flat(predicted)
    if len(truth) != len(pred):
        raise ValueError(f"got {len(truth)} gold labels and {len(pred)} predictions; they must match")
    keep = truth != IGNORE_INDEX
    truth, pred = truth[keep], pred[keep]
    if len(truth) == 0:
        return None
    classes, counts = np.unique(pred, return_counts=True)
    top = int(classes[np.argmax(counts)])
    predicted_share = float(counts.max() / len(pred))
    true_share = float(np.mean(truth == top))
    others_true, others_pred = 1.0 - true_share, 1.0 - predicted_share
    if predicted_share >= COLLAPSE_SHARE and others_true > 0 and others_pred <= COLLAPSE_RATIO * others_true:
        return Collapse(top, predicted_share, true_share)
    return None


def robust_metric(task: LabelTask) -> str:
    """A selection metric a constant prediction cannot win for ``task``."""
    if task.kind == "token":
        return "span_f1" if is_iob(task) else "macro_f1"
    return "mcc"


def collapse_warning(task: LabelTask, gold, predicted, *, metric: str | None = None,
                     balanced: bool = False, exact: bool = False) -> str | None:
    """The warning for a collapsed classification task, or None when it has not collapsed.

    ``metric``: the metric the run selected on; ``balanced``: whether its classes were weighted
    ``balanced`` already (neither is then suggested again); ``exact``: the head was fitted by the
    convex solver, at its optimum (no learning rate or epochs to change).
    """
    if task.kind == "regression":
        return None
    found = find_collapse(gold, predicted)
    if found is None:
        return None
    tries = []
    if not balanced:
        tries.append(option("class_weight", "balanced"))
    better = robust_metric(task)
    if metric != better:
        tries.append(option("metric", better))
    tries.append(f"a mixer that learns from every state ({option('mixer', 'scalar')} or adaptive)" if exact
                 else f"a lower {option('lr')} / more {option('epochs')}")
    what = tries[0] if len(tries) == 1 else f"{', '.join(tries[:-1])}, or {tries[-1]}"
    name = task.label_names[found.class_id]
    return (f"Task {task.name!r} has collapsed onto one class: {found.predicted_share:.1%} of the validation "
            f"predictions are {name!r}, whose true share is {found.true_share:.1%}; try {what}.")


def collapse_warnings(tasks: Sequence[LabelTask], val_feed: Feed, validation_pass: PassResult, selection: Selection,
                      class_weight: Mapping, exact: bool) -> list[str]:
    """The collapse warning of every task whose validation predictions sit on (nearly) one class, each logged:
    what a fitted head, or an ensemble of them, keeps in ``warnings_``.

    ``validation_pass``: the predictions over ``val_feed``, whose gold labels they are checked against;
    ``selection``: the metric each task selected on; ``class_weight``: the parsed class weights
    (:func:`~.class_weights.parse_class_weight`); ``exact``: fitted by the convex solver.
    """
    warnings = []
    for t in tasks:
        warning = collapse_warning(t, val_feed.gold(t.name), validation_pass.predictions[t.name].labels,
                                   metric=selection.metrics[t.name], balanced=class_weight.get(t.name) == BALANCED,
                                   exact=exact)
        if warning is not None:
            warnings.append(warning)
            log.warning(warning)
    return warnings
