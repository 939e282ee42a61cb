"""Selectivity (Hewitt & Liang 2019): how much of a probe's score the states, not the probe, earn.

``selectivity = task score - control score``, per layer, for the same probe family fitted on the
task and on its control task (:mod:`.control`). A layer whose probe scores high on the task and
low on the control holds the property; a high control score means the probe can memorise.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..core.threads import computes
from ..store.reader import LayerCache
from .linear import LinearProbes

CONTROL_MAX_ITER = 150
"""L-BFGS iterations of a control probe, here and in the probe report: enough for its score, a fraction of a full
fit on a token task (control labels of many word types are slow to fit to the last digit)."""


@dataclass
class Selectivity:
    """Per-layer task and control scores of two fitted probes, and their difference."""

    layer_names: list[str]
    task_scores: np.ndarray
    """(L,) the task probes' scores."""
    control_scores: np.ndarray
    """(L,) the control probes' scores on the control labels."""
    split: str
    """Where the scores come from (a split name, or ``validation``: each probe's validation scores)."""
    task_probe: LinearProbes = field(repr=False)
    control_probe: LinearProbes = field(repr=False)

    @property
    def control_converged(self) -> bool:
        """Whether the control probes converged within their iterations (:data:`CONTROL_MAX_ITER` by default)."""
        return bool(self.control_probe.converged_)

    @property
    def selectivity(self) -> np.ndarray:
        """(L,) task score - control score."""
        return self.task_scores - self.control_scores

    def to_json(self) -> dict:
        """Per-layer task, control and selectivity scores as plain lists, with the split and layer names."""
        return {"split": self.split, "layers": list(self.layer_names),
                "task": [float(x) for x in self.task_scores],
                "control": [float(x) for x in self.control_scores],
                "selectivity": [float(x) for x in self.selectivity]}


@computes
def selectivity(cache: LayerCache, task: str | None = None, *, split: str = "train", val_split: str | None = None,
                eval_split: str | None = None, control_max_iter: int | None = CONTROL_MAX_ITER,
                **params) -> Selectivity:
    """Fit :class:`LinearProbes` on ``task`` and on its control task, and compare them layer by layer.

    Both are fitted on ``split`` with the same parameters (``params``: ``C_grid``, ``seed``, ...),
    each choosing its ``C`` on its own validation labels; the control probes stop after
    ``control_max_iter`` iterations (None: ``params``' ``max_iter``, as the task's), as the probe report's
    do, so the two give the same selectivity (:attr:`Selectivity.control_converged` says whether they
    converged). Scores come from ``eval_split`` when given (the held-out split you report), else from
    the validation data.
    """
    params.pop("control", None)
    probe = LinearProbes(task=task, control=False, **params).fit(cache, split, val_split)
    control_params = params if control_max_iter is None else {**params, "max_iter": control_max_iter}
    with warnings.catch_warnings():  # a capped control fit is expected: control_converged says whether it stopped
        warnings.simplefilter("ignore", ConvergenceWarning)
        control = LinearProbes(task=probe.task_, control=True, **control_params).fit(cache, split, val_split)
    if eval_split is None:
        task_scores, control_scores, where = probe.scores_, control.scores_, "validation"
    else:
        task_scores, control_scores = probe.score(cache, eval_split), control.score(cache, eval_split)
        where = eval_split
    return Selectivity(list(probe.layer_names_), np.asarray(task_scores), np.asarray(control_scores), where,
                       probe, control)
