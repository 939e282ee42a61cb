"""The base class of every probe family: the scikit-learn estimator rules, the shared fit prologue, a report entry.

A probe family is a :class:`Probe` subclass in its own module of this package, listed with
:func:`~.registry.register_probe`. The rules it follows (scikit-learn's):

- ``__init__`` takes every setting as a keyword with a default and stores it, unchanged, under
  its own name (``get_params``, ``clone`` and ``repr`` read them back); every family takes at
  least ``task``, ``seed`` and ``max_train``, which is how the probe report builds it;
- ``fit(cache)`` learns from a cache and returns ``self``; what it learned is an attribute with a
  trailing underscore (``layer_names_``, ``scores_``, ...), set by ``fit`` only.

:meth:`Probe._setup` is the prologue every ``fit`` from a cache shares (the task, the feature
source, the states and the validation split), :meth:`Probe._check_common` the settings every family
checks alike. :meth:`Probe.report_part` is what the probe report shows of a probe it has no
section of its own for: one value per layer (``scores_``, with ``metric_``), in a generic table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator

from ..errors import CacheError, ConfigError
from ..store.manifest import LabelTask
from ..store.reader import LayerCache
from .features import check_solver_params, resolve_source, resolve_task
from .selection import check_max_train


@dataclass
class ProbeSetup:
    """What a probe's ``fit`` reads from a cache: the task, its feature source, the states and the validation split."""

    spec: LabelTask
    source: str
    index: list[int]
    """Positions of the probed states in the cache's states."""
    names: list[str]
    """Their names."""
    val_split: str | None
    """The split that validates (None: a seeded slice of the training split)."""


class Probe(BaseEstimator):
    """Base class of the probe families (see the module docstring for the rules a subclass follows)."""

    classification_only: ClassVar[bool] = False
    """True for a family that measures class labels only (the probe report skips it on a regression task)."""

    @classmethod
    def applies_to(cls, spec: LabelTask) -> bool:
        """Whether this family probes a task of ``spec``'s kind."""
        return not (cls.classification_only and spec.kind == "regression")

    def _setup(self, cache: LayerCache, split: str = "train", val_split: str | None = None) -> ProbeSetup:
        """The task (``task``, or the cache's only one), its source (``source``), the states (``layers``) and the
        validation split: ``val_split``, else the cache's validation split other than ``split``."""
        spec = resolve_task(cache, self.task)
        source = resolve_source(cache, spec, getattr(self, "source", "auto"))
        index = cache.layer_index(getattr(self, "layers", None))
        if val_split is None:
            val_split = cache.validation_split(exclude=split)
        return ProbeSetup(spec, source, index, [cache.layer_names[i] for i in index], val_split)

    def _record_setup(self, setup: ProbeSetup) -> None:
        """What every ``fit`` from a cache records of its setup: the task, the source and the states' names."""
        self.task_, self.source_ = setup.spec.name, setup.source
        self.layer_names_ = setup.names

    @staticmethod
    def _require_labelled(spec: LabelTask, train, val) -> None:
        """Refuse, in one sentence, training or validation data (``.y``) with no labelled example."""
        for name, part in (("training", train), ("validation", val)):
            if len(part.y) == 0:
                raise CacheError(f"The {name} data of task {spec.name!r} has no labelled examples; "
                                 "probe a split that has labels.")

    def _check_common(self, tol: float | None = None) -> np.ndarray:
        """Refuse bad shared settings in one sentence each; the ascending ``C`` grid (float64).

        The solver's (``C_grid``, ``max_iter``, ``seed``, ``tol``: the family's own, or ``tol`` given),
        ``val_fraction`` where the family has one, and ``max_train``.
        """
        Cs = check_solver_params(self.C_grid, self.max_iter, self.seed, self.tol if tol is None else tol)
        val_fraction = getattr(self, "val_fraction", None)
        if val_fraction is not None and not 0 < val_fraction < 1:
            raise ConfigError(f"val_fraction must be in (0, 1), got {val_fraction!r}.")
        check_max_train(self.max_train)
        return Cs

    def report_part(self, cache: LayerCache, eval_split: str | None) -> dict:
        """What the probe report shows of this fitted probe when it has no section of its own: per layer.

        ``metric`` and ``validation`` (``metric_``, ``scores_``), ``eval`` (:meth:`score` on ``eval_split``
        when the family scores a split, else None), ``best_layer`` (``best_layer_``, else the highest
        score) and ``seconds``. A family whose result is not one score per layer overrides this with the
        same keys.
        """
        scores = np.asarray(self.scores_, np.float64)
        evaluated = self.score(cache, eval_split) if eval_split and hasattr(self, "score") else None
        best = int(getattr(self, "best_layer_", np.nanargmax(scores)))
        return {"metric": getattr(self, "metric_", "score"), "validation": scores, "eval": evaluated,
                "layer_names": list(self.layer_names_), "best_layer": self.layer_names_[best], "best_index": best,
                "seconds": getattr(self, "fit_seconds_", None)}
