"""The per-task part of the probe report: every registered probe, fitted on the task and placed in its entry.

The report iterates the probe registry (:data:`~layercache.probes.registry.PROBES`): a probe family
dropped into ``layercache/probes/`` with ``@register_probe`` is fitted on every task it applies to
(:meth:`~layercache.probes.base.Probe.applies_to`) and shown per layer under the task's ``per_layer``
entry (its :meth:`~layercache.probes.base.Probe.report_part`), with nothing else edited. The three
families the report has sections and figures of its own for fill their own entries (:data:`SECTIONS`):

- ``linear``: ``probe`` (scores per layer, ``C``, the best layer), ``control`` and its selectivity,
  and ``prediction_depth`` (classification tasks);
- ``mdl``: the online codelength (classification tasks);
- ``cumulative``: probes on the mix of layers ``0..l`` and their gains (:mod:`.cumulative_gains`).

The probes of one task read its word features once (:func:`~layercache.probes.features.sharing_word_features`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..depth import prediction_depth
from ..probes import CumulativeProbes, LinearProbes, OnlineCodeMDL
from ..probes.features import sharing_word_features
from ..probes.registry import PROBES
from ..probes.selectivity import CONTROL_MAX_ITER
from ..store.manifest import LabelTask
from ..store.reader import LayerCache
from .cumulative_gains import cumulative_part

Step = Callable[[str], None]


def no_step(description: str) -> None:
    """A step callback that shows nothing."""


class Timer:
    """``with timer("part"):`` adds the part's seconds to the report's timings."""

    def __init__(self, timings: dict[str, float]):
        self.timings = timings

    def __call__(self, part: str):
        """A context manager timing ``part``."""
        timer = self

        class _Part:
            def __enter__(self):
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                timer.timings[part] = timer.timings.get(part, 0.0) + time.perf_counter() - self.t0

        return _Part()


@dataclass
class TaskContext:
    """What every probe of one task is fitted with, and the task's entry (``out``) they fill."""

    cache: LayerCache
    spec: LabelTask
    eval_split: str | None
    seed: int
    max_train: int | None
    step: Step
    timer: Timer
    out: dict
    fitted: dict = field(default_factory=dict)
    """Probe name -> the fitted probe (``linear``'s for the families that start from it)."""
    sample: str = ""
    """The training sample, as the progress steps name it (``4,000 of 9,000 words``)."""

    @property
    def name(self) -> str:
        """The task's name."""
        return self.spec.name


def report_probes(spec: LabelTask, skip=()) -> list[str]:
    """The registered probes the report fits on a task of ``spec``'s kind, in registry order (``linear`` always)."""
    return [name for name, cls in PROBES.load().items()
            if name == "linear" or (name not in skip and cls.applies_to(spec))]


def task_steps(spec: LabelTask, eval_split: str | None, skip=()) -> int:
    """How many ``step`` calls :func:`task_report` makes for a task of ``spec``'s kind."""
    classification = spec.kind != "regression"
    extra = classification * (1 + int(eval_split is not None))  # linear's control and prediction depth
    return len(report_probes(spec, skip)) + extra


def task_report(cache: LayerCache, spec: LabelTask, eval_split: str | None, seed: int, max_train: int | None,
                step: Step, timer: Timer, skip=()) -> dict:
    """The per-layer analyses of one task: every registered probe but ``skip``, fitted on one seeded sample."""
    classification = spec.kind != "regression"
    out: dict = {"kind": spec.kind, "label_names": spec.label_names,
                 "metric": "accuracy" if classification else "r2"}
    ctx = TaskContext(cache, spec, eval_split, seed, max_train, step, timer, out)
    with sharing_word_features():
        for name in report_probes(spec, skip):
            SECTIONS.get(name, generic_part)(ctx, name)
    return out


def linear_part(ctx: TaskContext, name: str = "linear") -> None:
    """``probe``, then (classification tasks) ``control`` with selectivity and ``prediction_depth``."""
    cache, eval_split, task = ctx.cache, ctx.eval_split, ctx.name
    unit = "words" if ctx.spec.kind == "token" else "examples"
    ctx.step(f"{task}: linear probes")
    with ctx.timer(f"{task}: probes"):
        probes = LinearProbes(task=task, seed=ctx.seed, max_train=ctx.max_train).fit(cache)
        evaluated = probes.score(cache, eval_split) if eval_split else None
    ctx.fitted[name] = probes
    ctx.sample = (f"{probes.n_train_:,} of {probes.n_train_available_:,} {unit}"
                  if probes.n_train_ < probes.n_train_available_ else f"all {probes.n_train_:,} {unit}")
    ctx.out["source"] = probes.source_
    ctx.out["probe"] = {"validation": probes.scores_, "eval": evaluated, "C": probes.C_,
                        "best_layer": probes.layer_names_[probes.best_layer_], "best_index": probes.best_layer_,
                        "validated_on": probes.validation_, "n_train": probes.n_train_,
                        "n_train_available": probes.n_train_available_, "seconds": probes.fit_seconds_}
    if ctx.spec.kind == "regression":
        return
    ctx.step(f"{task}: control task ({ctx.sample})")
    with ctx.timer(f"{task}: control"), warnings.catch_warnings():
        # Capped as selectivity() caps them (CONTROL_MAX_ITER), so a notebook gets the report's numbers; the
        # report says when the cap was reached.
        warnings.simplefilter("ignore", ConvergenceWarning)
        control = LinearProbes(task=task, seed=ctx.seed, control=True, max_iter=CONTROL_MAX_ITER,
                               max_train=ctx.max_train).fit(cache)
        control_eval = control.score(cache, eval_split) if eval_split else None
    task_scores = evaluated if evaluated is not None else probes.scores_
    control_scores = control_eval if control_eval is not None else control.scores_
    ctx.out["control"] = {"validation": control.scores_, "eval": control_eval,
                          "selectivity": np.asarray(task_scores) - np.asarray(control_scores),
                          "on": eval_split or "validation", "converged": bool(control.converged_),
                          "max_iter": CONTROL_MAX_ITER}
    if eval_split:
        ctx.step(f"{task}: prediction depth")
        with ctx.timer(f"{task}: prediction depth"):
            predicted, target = probes.predictions(cache, eval_split)
            depth = prediction_depth(predicted.T, target)
        ctx.out["prediction_depth"] = {"counts": depth.counts, "accuracy_by_depth": depth.accuracy_by_depth,
                                       "mean": depth.mean_depth, "on": eval_split}


def mdl_part(ctx: TaskContext, name: str = "mdl") -> None:
    """``mdl``: the online codelength in bits and the compression per layer."""
    ctx.step(f"{ctx.name}: MDL, online code ({ctx.sample})")
    with ctx.timer(f"{ctx.name}: mdl"):
        code = OnlineCodeMDL(task=ctx.name, seed=ctx.seed, max_train=ctx.max_train).fit(ctx.cache)
    ctx.fitted[name] = code
    ctx.out["mdl"] = {"codelength_bits": code.codelength_, "compression": code.compression_,
                      "uniform_bits": code.uniform_codelength_, "best_layer": code.layer_names_[code.best_layer_],
                      "n": int(code.portions_[-1]), "seconds": code.fit_seconds_}


def cumulative_section(ctx: TaskContext, name: str = "cumulative") -> None:
    """``cumulative``: probes on the scalar mix of layers ``0..l``, started from ``linear``'s probes."""
    ctx.step(f"{ctx.name}: cumulative scoring ({ctx.sample})")
    with ctx.timer(f"{ctx.name}: cumulative"):
        cum = CumulativeProbes(task=ctx.name, seed=ctx.seed, max_train=ctx.max_train).fit(
            ctx.cache, probes=ctx.fitted["linear"])
        ctx.fitted[name] = cum
        ctx.out["cumulative"] = cumulative_part(cum, ctx.cache, ctx.eval_split, ctx.seed)


def generic_part(ctx: TaskContext, name: str) -> None:
    """``per_layer[name]``: a registered probe without a section of its own, fitted with the task, the seed and
    ``max_train`` and shown by its :meth:`~layercache.probes.base.Probe.report_part`."""
    ctx.step(f"{ctx.name}: {name} probe ({ctx.sample})")
    with ctx.timer(f"{ctx.name}: {name}"):
        probe = PROBES.lookup(name)(task=ctx.name, seed=ctx.seed, max_train=ctx.max_train).fit(ctx.cache)
        part = probe.report_part(ctx.cache, ctx.eval_split)
    ctx.fitted[name] = probe
    ctx.out.setdefault("per_layer", {})[name] = part


SECTIONS: dict[str, Callable[[TaskContext, str], None]] = {
    "linear": linear_part, "mdl": mdl_part, "cumulative": cumulative_section}
"""The probes whose results the report shows in sections of their own; any other registered probe gets
:func:`generic_part`."""
