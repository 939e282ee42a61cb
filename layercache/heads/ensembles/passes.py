"""Ensembles of fitted heads: their predictions over one split combined task by task, then scored.

- classification (sequence, and token tasks word by word): the members' class probabilities
  averaged, the class of the highest mean probability predicted (soft voting), as an ensemble
  head's model computes it (:class:`~.model.EnsembleModel`);
- regression: the members' predictions averaged;
- a token pass that kept labels without probabilities: each word's label by majority vote, a tie
  going to the member listed first (the best one, in a sweep).

Every member must have made its pass over the same rows (the predictions come in row order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ...core.tasks import LabelTask
from ...errors import ConfigError
from ..scoring.evaluation import PassResult, Predictions, score


def _vote(labels: Sequence[np.ndarray]) -> np.ndarray:
    """The most frequent label at each position of ``labels`` (M arrays of (n,)), ties to the earliest member."""
    stacked = np.stack(labels)  # (M, n)
    counts = (stacked[:, None, :] == stacked[None, :, :]).sum(1)  # (M, n): votes for member m's label
    # argmax takes the first of equal counts: the earliest member holding a most-voted label.
    return stacked[counts.argmax(0), np.arange(stacked.shape[1])]  # (n,)


def average_predictions(passes: Sequence[PassResult], tasks: Sequence[LabelTask]) -> dict[str, Predictions]:
    """The ensemble's predictions of every task from its members' passes (see the module docstring)."""
    if not passes:
        raise ConfigError("An ensemble needs at least one member.")
    out = {}
    for task in tasks:
        preds = [p.predictions[task.name] for p in passes]
        rows = preds[0].rows
        if any(not np.array_equal(p.rows, rows) for p in preds[1:]):
            raise ConfigError(f"The ensemble's members predicted task {task.name!r} on different rows; score them on "
                              "the same split.")
        if task.kind == "regression":
            values = np.mean([np.asarray(p.labels, dtype=np.float64) for p in preds], axis=0)  # (n,)
            out[task.name] = Predictions(task, rows, values)
        elif task.kind == "sequence":
            probabilities = np.mean([p.probabilities for p in preds], axis=0)  # (n, C)
            out[task.name] = Predictions(task, rows, probabilities.argmax(-1), probabilities)
        elif all(p.probabilities is not None for p in preds):  # token: per-word probabilities of every example
            probabilities = [np.mean([p.probabilities[i] for p in preds], axis=0) for i in range(len(rows))]
            out[task.name] = Predictions(task, rows, [w.argmax(-1) for w in probabilities], probabilities)
        else:  # token passes with labels only
            words = [_vote([p.labels[i] for p in preds]) for i in range(len(rows))]
            out[task.name] = Predictions(task, rows, words)
    return out


def combine_passes(passes: Sequence[PassResult], tasks: Sequence[LabelTask]) -> PassResult:
    """One pass of the ensemble from its members' passes: predictions averaged (:func:`average_predictions`),
    each member's usage summaries kept under ``<mixer key>[<member>]`` as a seed ensemble's model names them."""
    usage = {member_key(key, i): values for i, p in enumerate(passes) for key, values in p.usage.items()}
    return PassResult(average_predictions(passes, tasks), usage)


def member_key(key: str, member: int) -> str:
    """How an ensemble names member ``member``'s mixer ``key`` in usage and layer weights: ``shared[0]``;
    a member that is itself an ensemble keeps its own index after it (``shared[2][0]``)."""
    base, bracket, rest = key.partition("[")
    return f"{base}[{member}]{bracket}{rest}"


def ensemble_metrics(passes: Sequence[PassResult], tasks: Sequence[LabelTask],
                     gold: Mapping[str, np.ndarray | list[np.ndarray]]) -> dict[str, dict]:
    """``{task: metrics}`` of the ensemble of ``passes`` against ``gold`` (``{task: labels in row order}``)."""
    combined = average_predictions(passes, tasks)
    return {t.name: score(t, gold[t.name], combined[t.name]) for t in tasks}
