"""Several models compared from their caches over the same examples: the comparison's orchestration.

    comparison = compare_caches(["runs/minilm", "runs/gpt2"])     # probes per model and task, CKA per pair
    paths = save_comparison(comparison, "runs/minilm-vs-gpt2")      # report.json + a self-contained report.html
    Comparison.load(paths.json) == comparison

The caches must hold the same examples (:mod:`.examples`: the same dataset, splits, rows and labels; refused in
one sentence naming what differs). For every task they all hold, each model is probed as its probe report probes
it (:mod:`.scores`): the linear probe of every state with its control task and selectivity, and the cumulative
probes whose gains give the expected layer, all placed on one axis of relative depth. Every model's probes read its
cache in the shared order (:mod:`.shared_order`), so they fit, validate and score on the same examples. For every
pair of models, linear CKA (debiased by default, :mod:`.cross_cka`) between each state of one and each state of
the other on one seeded sample of the same examples (:mod:`.similarity`). The caches may differ in everything
else: width, depth, storage (int8, a projection), the model's family (encoder or decoder), token states or pooled
vectors only (a token task is then not probed on the pooled cache, and is refused if asked for).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from ...core.memory import memory_limit
from ...core.option_names import option
from ...core.threads import computes
from ...core.version import __version__
from ...errors import ConfigError
from ...progress import steps_progress
from ...store.manifest import LabelTask
from ...store.reader import LayerCache, using_cache
from ..probe_parts import Step
from ..probing import default_eval_split
from .examples import shared_examples
from .model import Comparison
from .options import CompareOptions, compare_options
from .scores import can_probe, model_task, relative_depth, task_steps
from .shared_order import shared_order
from .similarity import cka_pairs, cka_states
from .similarity import count_steps as cka_steps

CacheLike = str | os.PathLike[str] | LayerCache


@computes
def compare_caches(caches: Sequence[CacheLike], *, options: CompareOptions | None = None, progress: bool = True,
                   memory_budget: int | None = None, **keywords: Any) -> Comparison:
    """Compare the models of ``caches`` (folders or open caches, at least two) over the same examples.

    Args:
        caches: the caches, in the order tables and figures show them.
        options: a :class:`~.options.CompareOptions`, or its fields as keywords (``tasks``, ``eval_split``,
            ``names``, ``cumulative``, ``cka_states``, ``cka_estimator``, ``cka_examples``, ``seed``, ``max_train``):
            the tasks to compare (default: every task all the caches hold; a token task only where every cache has
            token states), the split scores and CKA are on (default: test, else validation), a name for each cache,
            the cumulative probes (each model's expected layer), what CKA compares (``mean`` vectors or ``words``),
            how it is estimated (``debiased``, the default, or ``plain``) and on how many examples, the seed of
            every sample, slice and control task, and the probes' training sample (the same examples for every
            model).
        progress: show a progress bar over the parts.
        memory_budget: bytes the reads may hold (:func:`~layercache.core.memory.memory_budget`; None: half the
            memory available).

    Returns a :class:`~.model.Comparison`; :func:`~.saving.save_comparison` writes it.
    """
    spec = compare_options(options, keywords)
    with memory_limit(memory_budget), ExitStack() as stack:
        handles = [stack.enter_context(using_cache(cache)) for cache in _at_least_two(caches)]
        return build_comparison(handles, spec, progress)


def build_comparison(caches: Sequence[LayerCache], spec: CompareOptions, progress: bool = True) -> Comparison:
    """:func:`compare_caches` on open caches (every check before any work)."""
    labels = model_labels(caches, spec.names)
    shared = shared_examples(caches)  # its refusals name the folders: the data are the folders' concern
    first = caches[0]
    eval_split = default_eval_split(first, spec.eval_split)
    cka_split = eval_split or first.report_split(fallback="train") or first.splits[0]
    states = cka_states(caches, labels, spec.cka_states)
    tasks, notes = chosen_tasks(caches, labels, spec.tasks)
    comparison = Comparison(meta={
        "dataset": first.manifest.dataset.name, "dataset_config": first.manifest.dataset.config,
        "splits": shared.sizes, "eval_split": eval_split, "validation": first.validation_split(exclude="train"),
        "seed": spec.seed, "max_train": spec.max_train, "cumulative": spec.cumulative,
        "cka": {"states": states, "estimator": spec.cka_estimator, "asked": spec.cka_examples, "split": cka_split},
        "threads": torch.get_num_threads(),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "layercache_version": __version__,
    }, models=[model_entry(cache, label) for cache, label in zip(caches, labels)], notes=notes)
    total = sum(task_steps(task, eval_split, spec.cumulative) for task in tasks for cache in caches
                if can_probe(cache, task) is None) + cka_steps(len(caches), states)
    with steps_progress(progress, total, "compare") as step, ExitStack() as views:
        ordered: Sequence[LayerCache] = caches
        if tasks:  # every model's probes draw in one order, so they fit on the same examples (shared_order)
            ordered, dropped = shared_order(caches, shared, words=any(t.kind == "token" for t in tasks))
            for view, cache in zip(ordered, caches):
                if view is not cache:
                    views.callback(view.close)
            comparison.meta["words_not_kept_by_all"] = dropped
        for task in tasks:
            comparison.tasks[task.name] = _task(ordered, labels, task, eval_split, spec, step, comparison.timings)
        t0 = time.perf_counter()
        comparison.similarity = cka_pairs(caches, labels, shared, cka_split, states, spec.cka_examples, spec.seed,
                                          step, debiased=spec.cka_estimator == "debiased")
        comparison.timings["CKA"] = time.perf_counter() - t0
    comparison.meta["cka"]["n"] = comparison.similarity[0]["n"]
    comparison.notes += sample_notes(comparison)
    return comparison.clean()


def _at_least_two(caches: Sequence[CacheLike]) -> list[CacheLike]:
    if isinstance(caches, (str, os.PathLike, LayerCache)) or len(caches) < 2:
        raise ConfigError("A comparison needs at least two caches of the same examples; give two or more.")
    return list(caches)


def _task(caches: Sequence[LayerCache], labels: Sequence[str], task: LabelTask, eval_split: str | None,
          spec: CompareOptions, step: Step, timings: dict[str, float]) -> dict[str, Any]:
    """A task's entry: its kind and metric, each model's probes, and the models that cannot probe it."""
    entry: dict[str, Any] = {"kind": task.kind, "label_names": task.label_names,
                             "metric": "accuracy" if task.kind != "regression" else "r2", "models": {}, "skipped": {}}
    for cache, label in zip(caches, labels):
        reason = can_probe(cache, task)
        if reason is not None:
            entry["skipped"][label] = reason
            continue
        own: dict[str, float] = {}
        entry["models"][label] = model_task(cache, task, eval_split, spec.seed, spec.max_train, spec.cumulative,
                                            _naming(step, label), own)
        for part, seconds in own.items():  # "sentiment: probes" -> "<label>: probes", summed over the tasks
            key = f"{label}: {part.split(': ', 1)[-1]}"
            timings[key] = timings.get(key, 0.0) + seconds
    return entry


def _naming(step: Step, label: str) -> Step:
    """``step``, each description naming the model first."""
    return lambda text: step(f"{label}: {text}")


def model_entry(cache: LayerCache, label: str) -> dict[str, Any]:
    """What the comparison says of one model and its cache."""
    m = cache.manifest
    return {"label": label, "cache": str(cache.path), "model": m.model.name, "kind": m.model.kind,
            "architecture": m.model.architecture, "n_layers": m.model.n_layers, "model_width": m.model.hidden_size,
            "width": cache.hidden_size, "storage_dtype": m.storage.dtype, "project": m.storage.project,
            "store": m.storage.store, "pooling": m.pooling, "layer_names": cache.layer_names,
            "layers": m.storage.layers, "relative_depth": relative_depth(cache)}


def model_labels(caches: Sequence[LayerCache], names: Sequence[str] | None) -> list[str]:
    """One distinct name per cache: ``names`` as given, else each model's name, and where two would read alike, their
    storage (``minilm int8``), else their folders, else their positions (``minilm #2``)."""
    if names is not None:
        names = [str(n) for n in names]
        if len(names) != len(caches) or len(set(names)) != len(names) or not all(names):
            raise ConfigError(f"Give each of the {len(caches)} caches its own name, in their order (got "
                              f"{', '.join(names) or 'none'}).")
        return names
    labels = [Path(cache.manifest.model.name).name or cache.manifest.model.name for cache in caches]
    for label in set(labels):
        group = [k for k, other in enumerate(labels) if other == label]
        if len(group) == 1:
            continue
        for more in (_storage_text, lambda cache: cache.path.name, lambda cache: ""):
            texts = [more(caches[k]) for k in group]
            if len(set(texts)) == len(texts):
                break
        for k, text in zip(group, texts):
            labels[k] = f"{label} {text}" if text else f"{label} #{group.index(k) + 1}"
    return labels


def _storage_text(cache: LayerCache) -> str:
    """How a cache stores its states, in a few words: ``int8``, ``float16 K=96``, ``float16 pooled``."""
    storage = cache.manifest.storage
    parts = [storage.dtype] + ([f"K={storage.project}"] if storage.project else [])
    return " ".join(parts + ([] if storage.stores_tokens else ["pooled"]))


def chosen_tasks(caches: Sequence[LayerCache], labels: Sequence[str],
                 asked: Sequence[str] | None) -> tuple[list[LabelTask], list[str]]:
    """The tasks to compare and the notes on those left out: ``asked`` (each refused unless every cache holds it,
    and unless every cache can probe it; ``[]``: none, CKA only), else every task all the caches hold (a note names
    those some lack)."""
    held = [{t.name: t for t in cache.tasks} for cache in caches]
    common = [t for t in caches[0].tasks if all(t.name in h for h in held)]
    notes: list[str] = []
    if asked is not None:
        for name in asked:
            lacking = next((label for h, label in zip(held, labels) if name not in h), None)
            if lacking is not None:
                known = ", ".join(t.name for t in common) or "none"
                raise ConfigError(f"{lacking} holds no task {name!r}; the tasks every cache holds are: {known}.")
            task = held[0][name]
            for cache, label in zip(caches, labels):
                reason = can_probe(cache, task)
                if reason is not None:
                    raise ConfigError(f"{label} cannot be probed on task {name!r}: {reason}; leave the task out "
                                      f"or extract that cache with {option('store', 'tokens')}.")
        return [held[0][name] for name in dict.fromkeys(asked)], notes
    some = sorted({name for h in held for name in h} - {t.name for t in common})
    if some:
        notes.append(f"Not compared: {', '.join(some)}, which not every cache holds.")
    return common, notes


def sample_notes(comparison: Comparison) -> list[str]:
    """Notes on what the models were not probed on alike: a task a model could not probe, and the words of token
    tasks left out of every model's probes because one model's truncation cut them off."""
    notes = [f"{task} is not probed on {label}: {reason}." for task, entry in comparison.tasks.items()
             for label, reason in entry["skipped"].items()]
    dropped = {split: n for split, n in comparison.meta.get("words_not_kept_by_all", {}).items() if n}
    words = [task for task, entry in comparison.tasks.items() if entry["kind"] == "token"]
    if dropped and words:
        counts = ", ".join(f"{n:,} of {split}" for split, n in sorted(dropped.items()))
        notes.append(f"Words some model's truncation cut off ({counts}) are left out of every model's probes of "
                     f"{', '.join(words)}, so that all of them fit and score on the same words.")
    return notes
