"""One model's probes of one task, as the probe report computes them, placed on the axis of relative depth.

The probes are the probe report's own (:mod:`layercache.report.probe_parts`): ``linear_part`` fits the linear probe
of every state (its ``C`` chosen on validation), the control task's probes and their selectivity, and the
prediction depth; ``cumulative_section`` the probes on the mix of layers ``0..l`` whose gains give the expected
layer ``E_Delta`` (Tenney et al. 2019) and the full mix's ``E_s``. So a model's numbers here are its numbers in its
own probe report with the same seed and training sample. The comparison hands them each cache read in the shared
order (:mod:`.shared_order`), so every model's sample is the same examples; where a sample or a validation slice is
drawn, that is another draw than the probe report's over the cache's own row order.

Models of different depths meet on one axis: the relative depth of a state is its layer over the model's number
of layers (0 = embeddings, 1 = last layer; a cache that kept some layers only places each where it is in the
model). A best layer is a state; an expected layer is a position between states, placed on the axis by
interpolating the depths of the states around it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...probes.features import sharing_word_features
from ...store.manifest import LabelTask
from ...store.reader import LayerCache
from ..probe_parts import TaskContext, Timer, cumulative_section, linear_part

Step = Callable[[str], None]
TASK_KEYS = ("kind", "label_names", "metric")
"""What the probe report's task entry says of the task itself (the same for every model), not of a model."""


def relative_depth(cache: LayerCache) -> list[float]:
    """Each kept state's layer over the model's number of layers: 0 = embeddings, 1 = last layer."""
    n_layers = max(int(cache.manifest.model.n_layers), 1)
    return [layer / n_layers for layer in cache.manifest.storage.layers]


def depth_at(position: float | None, depths: list[float]) -> float | None:
    """The relative depth of a (fractional) position among the states, interpolated; None stays None."""
    if position is None or not np.isfinite(position):
        return None
    return float(np.interp(position, np.arange(len(depths)), depths))


def can_probe(cache: LayerCache, spec: LabelTask) -> str | None:
    """Why ``cache`` cannot probe a task of ``spec``'s kind (one clause), or None when it can."""
    if spec.kind == "token" and not cache.stores_tokens:
        return "its cache holds pooled vectors only, and a token task is probed on word states"
    return None


def task_steps(spec: LabelTask, eval_split: str | None, cumulative: bool) -> int:
    """How many ``step`` calls :func:`model_task` makes for a task of ``spec``'s kind."""
    classification = spec.kind != "regression"
    return 1 + classification * (1 + int(eval_split is not None)) + int(cumulative)


def model_task(cache: LayerCache, spec: LabelTask, eval_split: str | None, seed: int, max_train: int | None,
               cumulative: bool, step: Step, timings: dict[str, float]) -> dict[str, Any]:
    """One model's entry of a task: the probe report's ``probe``, ``control``, ``prediction_depth`` and
    ``cumulative`` parts, and their ``summary`` in relative depth (:func:`summarise`)."""
    out: dict[str, Any] = {"kind": spec.kind, "label_names": spec.label_names,
                           "metric": "accuracy" if spec.kind != "regression" else "r2"}
    ctx = TaskContext(cache, spec, eval_split, seed, max_train, step, Timer(timings), out)
    with sharing_word_features():  # the probes of a token task read its word states once
        linear_part(ctx)
        if cumulative:
            cumulative_section(ctx)
    for key in TASK_KEYS:
        out.pop(key)
    out["summary"] = summarise(out, relative_depth(cache), cache.layer_names)
    return out


def _scores(part: dict[str, Any]) -> list[float | None]:
    """A part's scores on the evaluation split, else on validation."""
    values = part["eval"] if part.get("eval") is not None else part["validation"]
    return [None if v is None else float(v) for v in np.asarray(values, np.float64)]


def summarise(entry: dict[str, Any], depths: list[float], names: list[str]) -> dict[str, Any]:
    """The best layer (chosen on validation) with its score, the last layer's score, selectivity at the best layer,
    and the expected layers E_Delta (cumulative gains) and E_s (the full mix's weights), each also as a relative
    depth."""
    probe = entry["probe"]
    scores = _scores(probe)
    best = int(probe["best_index"])
    out: dict[str, Any] = {"best_layer": names[best], "best_index": best, "best_depth": depths[best],
                           "best_score": scores[best], "last_score": scores[-1],
                           "peak_score": max((s for s in scores if s is not None), default=None)}
    control = entry.get("control")
    out["selectivity_at_best"] = None if control is None else control["selectivity"][best]
    cum = entry.get("cumulative") or {}
    centre = cum.get("expected_layer")
    mix = cum.get("expected_layer_of_mix")
    out.update({"expected_layer": centre, "expected_depth": depth_at(centre, depths),
                "expected_layer_is_noise": cum.get("expected_layer_is_noise"),
                "expected_layer_of_mix": mix, "expected_mix_depth": depth_at(mix, depths)})
    return out
