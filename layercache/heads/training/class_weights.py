"""Class weights in the cross-entropy loss of classification tasks: ``balanced``, or given per class.

``balanced`` is scikit-learn's rule: class ``c`` weighs ``n_samples / (n_classes * count_c)`` over
the training labels (the labelled words, for a token task), so each class present adds the same
total weight to the loss. ``n_classes`` counts the classes present; a class absent from the
training labels gets weight 1, which never enters the loss (no target has it). Explicit weights
name classes by label name, or by index when no class has that name; a class not named weighs 1.

The default is no weights. Weighting changes what the head optimises: it trades precision on
frequent classes for recall on rare ones and moves the predicted probabilities away from the
training prior, so it is a choice to make knowingly, not one to make silently for the user. The
failure it is usually wanted for, a head that collapses onto the majority class, is guarded
against without it: an imbalanced task selects its epoch on MCC (:mod:`..scoring.selection`), and a head
that has collapsed anyway is reported with this option as the first thing to try (:mod:`.collapse`).

The resolved numbers are part of the model's config (``HeadModel.get_config()["class_weights"]``),
so a loaded head has the same loss as the one that was trained.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from numbers import Real

import numpy as np

from ...core.option_names import option
from ...core.tasks import IGNORE_INDEX, LabelTask
from ...errors import ConfigError

BALANCED = "balanced"
CLASS_WEIGHT_MODES = (BALANCED,)
"""The named ways to weigh classes (besides explicit ``{class: weight}``)."""

def label_counts(gold: np.ndarray | Sequence[np.ndarray], n_classes: int) -> np.ndarray:
    """Examples per class ``(C,)`` of a task's labels: an array of class ids, or per-word arrays of a token task.

    Positions holding IGNORE_INDEX are not counted.
    """
    if isinstance(gold, np.ndarray):
        flat = gold.reshape(-1)
    else:
        flat = np.concatenate([np.asarray(g).reshape(-1) for g in gold]) if len(gold) else np.zeros(0, np.int64)
    flat = flat[flat != IGNORE_INDEX].astype(np.int64)
    return np.bincount(flat, minlength=n_classes)[:n_classes]


def balanced_weights(counts: np.ndarray) -> np.ndarray:
    """``n_samples / (n_classes * count_c)`` per class present in ``counts (C,)``, 1 for absent ones; ``(C,)``."""
    counts = np.asarray(counts, dtype=np.float64)
    present = counts > 0
    weights = np.ones_like(counts)
    weights[present] = counts.sum() / (present.sum() * counts[present])
    return weights


def _class_index(task: LabelTask, key) -> int:
    """A class named by label name, or by index when no class has that name."""
    names = task.label_names
    if isinstance(key, str) and key in names:
        return names.index(key)
    index = key if isinstance(key, int) and not isinstance(key, bool) else None
    if isinstance(key, str) and key.strip().lstrip("-").isdigit():
        index = int(key)
    if index is None or not 0 <= index < len(names):
        raise ConfigError(f"Task {task.name!r} has no class {key!r}; its classes are {', '.join(names)} (or give "
                          f"a class index 0..{len(names) - 1}).")
    return index


def _explicit(task: LabelTask, given: Mapping) -> dict[int, float]:
    """``{class: weight}`` with classes as indexes, refusing unknown classes and weights that are not positive."""
    out = {}
    for key, weight in given.items():
        index = _class_index(task, key)
        if not isinstance(weight, Real) or isinstance(weight, bool) or not math.isfinite(weight) or weight <= 0:
            raise ConfigError(f"The class weight of {key!r} in task {task.name!r} is {weight!r}; give a positive "
                              "number, e.g. 2.")
        out[index] = float(weight)
    return out


def parse_class_weight(spec: str | Mapping | None, tasks: Sequence[LabelTask]) -> dict[str, str | dict[int, float]]:
    """``{task: "balanced" | {class index: weight}}`` from what the user gave, checked against the tasks.

    ``spec``: ``None`` (no weights), ``"balanced"`` (every classification task), ``{class: weight}``
    (the head's one classification task), or ``{task: "balanced" | {class: weight}}``.
    """
    if spec is None:
        return {}
    classified = [t for t in tasks if t.kind != "regression"]
    by_name = {t.name: t for t in tasks}
    if isinstance(spec, str):
        if spec != BALANCED:
            raise ConfigError(f"Unknown class weight {spec!r}; give {BALANCED!r} or CLASS=WEIGHT pairs, e.g. "
                              "neg=2,pos=1.")
        if not classified:
            raise ConfigError("Class weights apply to classification tasks, and this head has none; drop "
                              f"{option('class_weight')}.")
        return {t.name: BALANCED for t in classified}
    if not isinstance(spec, Mapping):
        raise ConfigError(f"class_weight must be {BALANCED!r} or a mapping of class to weight, got "
                          f"{type(spec).__name__}.")
    per_task = bool(spec) and set(spec) <= set(by_name) and all(
        isinstance(v, (str, Mapping)) for v in spec.values())
    if not per_task:
        if len(classified) != 1:
            names = ", ".join(t.name for t in classified) or "none"
            raise ConfigError(f"Class weights by class need one classification task, and this head has {names}; "
                              f"name the task, e.g. {_per_task_example()}.")
        spec = {classified[0].name: spec}
    out: dict[str, str | dict[int, float]] = {}
    for name, given in spec.items():
        task = by_name[name]
        if task.kind == "regression":
            raise ConfigError(f"Class weights apply to classification tasks; {name!r} is a regression task.")
        if isinstance(given, str):
            if given != BALANCED:
                raise ConfigError(f"Unknown class weight {given!r} for task {name!r}; give {BALANCED!r} or "
                                  "CLASS=WEIGHT pairs.")
            out[name] = BALANCED
        else:
            out[name] = _explicit(task, given)
    return out


def class_weight_values(parsed: Mapping[str, str | Mapping[int, float]], tasks: Sequence[LabelTask],
                        counts: Mapping[str, np.ndarray]) -> dict[str, list[float]]:
    """Each weighted task's weight per class, from :func:`parse_class_weight`'s result.

    ``counts`` holds the training examples per class of the tasks weighted ``balanced``.
    """
    out = {}
    for task in tasks:
        given = parsed.get(task.name)
        if given is None:
            continue
        if given == BALANCED:
            weights = balanced_weights(counts[task.name])
        else:
            weights = np.ones(task.num_classes)
            for index, w in given.items():
                weights[index] = w
        out[task.name] = [float(w) for w in weights]
    return out


def _per_task_example() -> str:
    """Class weights for one task of several, as the reader writes them."""
    return option("class_weight", {"TASK": {"neg": 2, "pos": 1}}, typed="TASK:neg=2,pos=1")
