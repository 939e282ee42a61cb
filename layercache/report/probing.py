"""The probing report of a cache, computed: which layer knows what, and how deep examples and tokens need to go.

    report = build_probe_report(cache)                    # every analysis, from the cache alone
    paths = save_report(report, "runs/demo-cache.report")  # report.json + a self-contained report.html
    ProbeReport.load(paths.json) == report                # the JSON is the report

This module is the report's orchestration: it fills the data model (:mod:`.model`) and hands it to
the renderers (:mod:`.saving`), which never import it back.

For every label task of the cache (on the evaluation split: ``test`` when there is one), every
registered probe (:mod:`.probe_parts`; a probe added to ``layercache/probes/`` shows up under
``per_layer``), among them:

- ``probe``: a linear probe per layer (:class:`~layercache.probes.LinearProbes`): validation and
  evaluation scores, the chosen ``C``, the best layer;
- ``control``: the same probes on the control task, and selectivity = task - control
  (classification tasks);
- ``mdl``: the online codelength in bits and the compression per layer (classification tasks);
- ``cumulative``: probes on the scalar mix of layers ``0..l`` for every ``l``, the gains and
  their expected layer ``E_Delta``, and the expected layer of the full mix's weights ``E_s``;
- ``prediction_depth``: from the per-layer probes' predictions, each example's (word's) depth,
  its distribution and accuracy by depth (classification tasks).

For the cache as a whole: linear CKA between layers (``similarity``); the layer weights of every
trained run found for this cache (``runs``: the runs folder beside it and any run given), with
their expected layers and the metric each run selected on; per-token depth from a head whose mixer has one
(``act``: :attr:`~layercache.heads.mixers.base.LayerMixer.per_token_depth`) by token category (``token_depth``);
the logit lens of a decoder cache that holds its final norm and unembedding (``logit_lens``), and beside it a tuned
lens and the linear shortcut fitted on the train split (``lenses``: KL, next-token bits, agreement, prediction depth).

Missing values (a score of an empty split, an expected layer without positive gains) are
``None`` here and ``null`` in the JSON, never NaN, so any JSON reader takes the file.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..core.memory import memory_limit
from ..core.option_names import call, option
from ..core.option_specs import check_options
from ..core.threads import computes
from ..core.version import __version__
from ..depth import LensOptions, expected_layer, layer_similarity
from ..errors import CacheError, ConfigError
from ..heads.mixers.registry import per_token_depth_mixers
from ..heads.run_folders.run_files import RunConfig, RunFiles, RunMetrics, find_runs, reported_metric
from ..probes.selection import DEFAULT_MAX_TRAIN, check_max_train
from ..store.reader import TEST_NAMES, VALIDATION_NAMES, LayerCache, using_cache
from .model import ProbeReport, ReportPaths
from .probe_parts import CONTROL_MAX_ITER, Step, Timer, task_report, task_steps
from .probe_parts import no_step as _no_step
from .report_options import ReportOptions, report_options
from .saving import save_report

DEFAULT_LENS = LensOptions()
"""The tuned lens's settings unless told otherwise (its defaults)."""

__all__ = ["CONTROL_MAX_ITER", "ProbeReport", "ReportPaths", "build_probe_report", "count_steps",
           "default_eval_split", "find_runs", "probe_report", "save_report"]


def default_eval_split(cache: LayerCache, asked: str | None = None) -> str | None:
    """The split a report scores on: ``asked`` (refused when the cache has no such split), else ``test`` when
    present, else the validation split, else None (then the probes' validation scores are reported)."""
    return cache.report_split(asked, names=TEST_NAMES + VALIDATION_NAMES, exclude="train")


@computes
def build_probe_report(cache: LayerCache, *, tasks: Sequence[str] | None = None, eval_split: str | None = None,
                       runs: Iterable[str | os.PathLike] = (), act_run: str | os.PathLike | None = None,
                       mdl: bool = True, cumulative: bool = True, tuned_lens: bool = True, seed: int = 0,
                       max_train: int | None = DEFAULT_MAX_TRAIN, lens: LensOptions = DEFAULT_LENS,
                       step: Step = _no_step) -> ProbeReport:
    """Every analysis of the module docstring on ``cache``, from the cache alone.

    Args:
        cache: an open cache with labels.
        tasks: the tasks to probe (default: every task of the cache).
        eval_split: the split scores are reported on (default: :func:`default_eval_split`).
        runs: more run folders to show beside those found in ``<cache>.runs/``.
        act_run: the ``act`` run whose per-token depth is broken down by token category (default:
            the newest ``act`` run found among the runs; none: no token depth).
        mdl: compute the online codelength (the slowest part on large token tasks).
        cumulative: fit the cumulative scoring probes.
        seed: seeds the probes' validation slices, control tasks and samples.
        max_train: fit every probe of a task (linear, control, MDL, cumulative) on at most this many
            training examples (words for a token task): one seeded sample, the probes' own default
            (:data:`~layercache.probes.selection.DEFAULT_MAX_TRAIN`), so a notebook's
            ``LinearProbes(task=...)`` gives the report's numbers. ``None``: every example.
        tuned_lens: on a decoder cache with a train split and unprojected states, fit a tuned lens and the linear
            shortcut on train (``lens``: their settings, :class:`~layercache.depth.LensOptions`; the objective is
            each's own) and score them beside the logit lens (``lenses``).
        step: called with a description before each part (progress display).
    """
    check_max_train(max_train)
    chosen, eval_split = _check_asked(cache, tasks, eval_split)
    m = cache.manifest
    report = ProbeReport(meta={
        "cache": str(cache.path), "model": m.model.name, "model_kind": m.model.kind,
        "architecture": m.model.architecture, "dataset": m.dataset.name, "layer_names": cache.layer_names,
        "hidden_size": cache.hidden_size, "store": m.storage.store, "storage_dtype": m.storage.dtype,
        "splits": {s: cache.num_examples(s) for s in cache.splits}, "eval_split": eval_split,
        "validation": cache.validation_split(exclude="train"), "seed": seed, "max_train": max_train,
        "threads": torch.get_num_threads(),  # a tol-stopped fit's last digits follow it (see the README)
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "layercache_version": __version__,
    })
    timer = Timer(report.timings)
    skip = _skipped(mdl, cumulative)
    for spec in cache.tasks:
        if spec.name in chosen:
            report.tasks[spec.name] = task_report(cache, spec, eval_split, seed, max_train, step, timer, skip)
    _add_similarity(report, cache, eval_split, seed, step, timer)
    run_paths = find_runs(cache, runs)
    step("layer weights of trained runs")
    with timer("runs"):
        report.runs = [_run_summary(run) for run in run_paths]
    _add_token_depth(report, cache, eval_split, act_run, run_paths, step, timer)
    _add_lenses(report, cache, eval_split, replace(lens, seed=seed) if tuned_lens else None, max_train, step, timer)
    return report.clean()


def _skipped(mdl: bool, cumulative: bool) -> tuple[str, ...]:
    """The registered probes the options leave out (``mdl=False``, ``cumulative=False``)."""
    return tuple(name for name, keep in (("mdl", mdl), ("cumulative", cumulative)) if not keep)


def _add_similarity(report: ProbeReport, cache: LayerCache, eval_split: str | None, seed: int, step: Step,
                    timer: Timer) -> None:
    pooling = cache.manifest.pooling
    if not pooling:
        report.notes.append("No layer similarity: the cache holds no pooled vectors (extract with "
                            f"{option('pooling', ['mean'], typed='mean')}).")
        return
    step("layer similarity (linear CKA)")
    with timer("similarity"):
        mode = "mean" if "mean" in pooling else pooling[0]
        sim = layer_similarity(cache, eval_split, source=f"pooled:{mode}", seed=seed)
    report.similarity = {"layers": sim.layer_names, "cka": sim.matrix, "split": sim.split,
                         "n": sim.num_examples, "source": sim.source}


def _run_summary(run: Path) -> dict:
    """A run's mixer, test score and layer weights (with each weight vector's expected layer)."""
    files = RunFiles.read(run)
    weights = files.layer_weights
    mixers = weights.mixers
    centres = {}
    for key, values in mixers.items():
        try:
            centres[key] = expected_layer(np.asarray(values, np.float64))
        except ConfigError:
            centres[key] = None
    return {"path": str(run), "name": run.name, "mixer": files.mixer, "scores": _selected_scores(files.metrics),
            "scored_on": files.metrics.scored_on, "layer_names": weights.layer_names, "weights": mixers,
            "expected_layer": centres, "usage": weights.usage}


def _selected_scores(metrics: RunMetrics) -> dict[str, dict]:
    """``{task: {"metric", "value"}}``: each scored task's score in the metric the run selected its epoch on
    (:attr:`RunMetrics.selection`), else the one a report shows by default (:func:`reported_metric`)."""
    selection = metrics.selection
    out = {}
    for task, values in metrics.scored().items():
        metric = selection.get(task) if selection.get(task) in values else reported_metric(values)
        if metric:
            out[task] = {"metric": metric, "value": values[metric]}
    return out


def _has_token_depth(mixer: str | None) -> bool:
    """Whether a run of ``mixer`` has a per-token depth (its mixer's capability, from the registry)."""
    return mixer in per_token_depth_mixers()


def _add_token_depth(report: ProbeReport, cache: LayerCache, eval_split: str | None, act_run, run_paths: list[Path],
                     step: Step, timer: Timer) -> None:
    """Per-token depth by token category, from ``act_run`` or the newest run found whose mixer has a per-token
    depth (``act``)."""
    if not cache.stores_tokens:
        report.notes.append("No per-token depth: the cache holds pooled vectors only.")
        return
    if act_run is None:
        act_runs = [r for r in report.runs if _has_token_depth(r["mixer"])]
        if not act_runs:
            mixers = " or ".join(per_token_depth_mixers())
            report.notes.append(f"No per-token depth: no {mixers} run found for this cache (train one with "
                                f"{call('train_head', mixer=per_token_depth_mixers()[0])}, or let the probe report "
                                "train one).")
            return
        act_run = max(act_runs, key=lambda r: Path(r["path"]).stat().st_mtime)["path"]
    from ..depth import depth_by_category, token_categories
    from ..heads import LayerHead
    from ..heads.token_usage import per_token_usage

    split = cache.report_split(eval_split, exclude="train", fallback="train")
    config = RunConfig.peek(act_run)
    mixer = (config.mixer if config is not None else None) or per_token_depth_mixers()[0]
    step(f"per-token depth ({mixer}) by token category")
    with timer("token depth"):
        head = LayerHead.load(act_run)
        usage = per_token_usage(head, cache, split)
        key, depth = next(iter(usage.items()))
        try:
            categories = token_categories(cache, split)
        except CacheError as err:  # a cache written before vocab.json: report the rest, say how to add it
            report.notes.append(f"No per-token depth by category: {err}")
            return
        table = depth_by_category(depth, categories)
    families: dict[str, list[dict]] = {}
    for row in table.rows():
        families.setdefault(row.pop("family"), []).append(row)
    n_steps = len(head.layer_names_) - 1
    counts, edges = np.histogram(depth[np.isfinite(depth)], bins=np.arange(1, n_steps + 2))
    report.token_depth = {"run": str(act_run), "about": f"{mixer} run {act_run}", "mixer": mixer, "mixer_key": key,
                          "split": split,
                          "n_tokens": int(np.isfinite(depth).sum()), "mean": float(np.nanmean(depth)),
                          "histogram": {"edges": edges, "counts": counts},
                          "by_category": {"families": families, "categories_of": categories.split}}


def _add_lenses(report: ProbeReport, cache: LayerCache, eval_split: str | None, lens: LensOptions | None,
                max_train: int | None, step: Step, timer: Timer) -> None:
    """For a decoder cache with lens weights: the logit lens per layer (``logit_lens``) and, with ``lens`` (seeded by
    the report's seed), a tuned lens and the linear shortcut fitted on the train split and scored beside it
    (``lenses``): on the tokens of a seeded sample of at most ``max_train`` examples, as the probes are, unless the
    lens is given its own ``max_tokens``."""
    if cache.manifest.model.kind != "decoder" or not cache.stores_tokens:
        return
    from ..depth.tuned_lens import LENS_NAMES, TunedLens, score_fitted

    split = str(cache.report_split(eval_split, exclude="train", fallback="train"))
    fitted: list[TunedLens] = []
    fits: dict[str, dict] = {}
    if lens is not None:
        why_not = _why_no_tuned_lens(cache, split)
        if why_not:
            report.notes.append(f"No tuned lens: {why_not}")
        else:
            n_train = cache.num_examples("train")
            rows = None
            if lens.max_tokens is None and max_train is not None and n_train > max_train:  # the probes' sample size
                rows = np.sort(np.random.default_rng(lens.seed).choice(n_train, max_train, replace=False))
            for objective in ("kl", "least_squares"):
                name = LENS_NAMES[objective]
                step(f"{name} lens: fitting on train")
                with timer(f"{name} lens (fit)"):
                    try:
                        settings = {**vars(lens), "objective": objective, "progress": False}
                        fitted.append(TunedLens(**settings).fit(cache, "train", rows=rows))
                    except CacheError as err:  # an older cache without its final norm and unembedding, say
                        report.notes.append(f"No tuned lens: {err}")
                        break
                fits[name] = {"objective": objective, "train_split": "train",
                              "train_examples": n_train if rows is None else len(rows),
                              "train_tokens": fitted[-1].n_tokens_,
                              "loss_history": getattr(fitted[-1], "history_", None),
                              "settings": {k: v for k, v in settings.items() if k not in ("progress", "layers")}}
    step("logit lens" if not fitted else "lenses: scoring")
    with timer("logit lens" if not fitted else "lenses (scores)"):
        try:
            scores = score_fitted(cache, split, fitted)
        except CacheError as err:  # an older cache without its final norm and unembedding, say
            report.notes.append(f"No logit lens: {err}")
            return
    logit = scores["logit"]
    report.logit_lens = {"split": logit.split, "layer_names": list(logit.layer_names), "accuracy": logit.accuracy,
                         "kl_to_final": logit.kl, "agreement": logit.agreement, "n_tokens": logit.n_tokens,
                         "n_predictions": logit.n_predictions}
    if fitted:
        report.lenses = {"split": split, "fits": fits, "scores": {name: s.to_json() for name, s in scores.items()}}


def _why_no_tuned_lens(cache: LayerCache, split: str) -> str | None:
    """Why a tuned lens cannot be fitted for the report (one sentence), or None."""
    if "train" not in cache.splits or split == "train":
        return ("it is fitted on the train split and scored on another, and this cache has "
                f"{'no train split' if 'train' not in cache.splits else 'only the train split'}.")
    if cache.projection() is not None:
        return (f"the cache stores its states projected to {cache.hidden_size} dimensions, and a translator reads "
                f"the full states (extract without {option('project')}).")
    return None


def count_steps(cache: LayerCache, tasks: Sequence[str] | None, eval_split: str | None, mdl: bool,
                cumulative: bool, token_depth: bool, tuned_lens: bool = False) -> int:
    """How many ``step`` calls :func:`build_probe_report` makes (the length of its progress bar)."""
    chosen = [t for t in cache.tasks if not tasks or t.name in tasks]
    n = sum(task_steps(spec, eval_split, _skipped(mdl, cumulative)) for spec in chosen)
    n += int(bool(cache.manifest.pooling)) + 1 + int(token_depth)
    if cache.manifest.model.kind == "decoder" and cache.stores_tokens:
        lens_split = str(cache.report_split(eval_split, exclude="train", fallback="train"))
        n += 1 + 2 * int(tuned_lens and _why_no_tuned_lens(cache, lens_split) is None)  # score; fit two lenses
    return n


def _check_asked(cache: LayerCache, tasks: Sequence[str] | None,
                 eval_split: str | None) -> tuple[list[str], str | None]:
    """(the tasks to probe, the split to score on) of ``cache``; a cache without labels, a task it does not hold or a
    split it lacks refused in one sentence, before any work."""
    if not cache.tasks:
        raise CacheError(f"The cache {cache.path} holds no labels, so there is nothing to probe; extract it with "
                         f"a label column (without {option('no_labels', True)}).")
    known = [t.name for t in cache.tasks]
    chosen = list(tasks) if tasks else known
    unknown = [t for t in chosen if t not in known]
    if unknown:
        raise ConfigError(f"The cache has no task {unknown[0]!r}; its tasks are: {', '.join(known)}.")
    return chosen, default_eval_split(cache, eval_split)


@computes
def probe_report(cache: str | os.PathLike | LayerCache | None = None, out: str | os.PathLike | None = None, *,
                 options: ReportOptions | None = None, lens: LensOptions | None = None, progress: bool = True,
                 say: Callable[[str], None] = _no_step, memory_budget: int | None = None,
                 **keywords: Any) -> tuple[ProbeReport, ReportPaths]:
    """Build the probing report of a cache and write ``report.json`` and ``report.html``.

    Args:
        cache: a cache folder or an open :class:`LayerCache` (default: the most recent cache).
        out: the report folder (default: ``<cache>.report`` beside the cache).
        options: what the report computes (:class:`~.report_options.ReportOptions`), or its fields as flat keywords
            (``tasks``, ``eval_split``, ``runs``, ``act_run``, ``train_act``, ``act_epochs``, ``mdl``,
            ``cumulative``, ``seed``, ``max_train``). ``train_act``: when the cache stores token states and no run
            of it has a per-token depth (an ``act`` run), train an ``act`` head (``act_epochs`` epochs, into
            ``<out>/act-run``) for it: a quick estimate, labelled so in ``token_depth["about"]`` and in its
            ``runs`` entry; the others are :func:`build_probe_report`'s.
        lens: the tuned lens's settings (:class:`~layercache.depth.LensOptions`; default its defaults), when
            ``tuned_lens`` fits one.
        progress: show a progress bar over the parts.
        say: called with each line the console shows before the parts (the training sample, the act head).
        memory_budget: bytes the report's reads may hold (:func:`~layercache.core.memory.memory_budget`; None:
            half the memory available): the probes read their validation and scoring features in layer groups
            (or runs of rows) that fit it, the shared word features keep a quarter of it, and the act head's
            feeds take their shares of it. The scores are the same under any budget.
    """
    from ..progress import steps_progress

    spec = report_options(options, keywords, "probe_report")
    check_max_train(spec.max_train)
    if spec.tuned_lens:  # its settings refused now, not after the probes' minutes
        check_options(LensOptions, vars(lens or DEFAULT_LENS))
    with memory_limit(memory_budget), using_cache(cache) as handle:
        folder = Path(out) if out is not None else handle.path.parent / f"{handle.path.name}.report"
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"{option('out', folder)} is a file, not a folder; choose a folder for the report.")
        _check_asked(handle, spec.tasks, spec.eval_split)  # before an act head is trained for a report refused later
        runs = list(spec.runs or ())
        act_run = spec.act_run
        found = find_runs(handle, runs)
        has_act = any(_has_token_depth(_run_summary(run)["mixer"]) for run in found)
        max_train = spec.max_train
        say(f"Probes fit on a seeded sample of at most {max_train:,} training examples (words) per task; "
            f"{option('max_train', None, typed='all')} fits every one." if max_train else
            "Probes fit on every training example (word).")
        act_seconds = None
        if act_run is None and not has_act and spec.train_act and handle.stores_tokens:
            say(f"Training an {per_token_depth_mixers()[0]} head for per-token depth: a quick {spec.act_epochs}-epoch "
                f"estimate; pass {option('act_run')} for a converged one.")
            t0 = time.perf_counter()
            act_run = _train_act(handle, folder / "act-run", spec.act_epochs, spec.seed, progress)
            act_seconds = time.perf_counter() - t0
            runs.append(act_run)  # its layer weights belong in the report too
        eval_split = spec.eval_split or default_eval_split(handle)
        total = count_steps(handle, spec.tasks, eval_split, spec.mdl, spec.cumulative,
                            token_depth=handle.stores_tokens and (act_run is not None or has_act),
                            tuned_lens=spec.tuned_lens)
        with steps_progress(progress, total, "probe-report") as step:
            report = build_probe_report(handle, tasks=spec.tasks, eval_split=spec.eval_split, runs=runs,
                                        act_run=act_run, mdl=spec.mdl, cumulative=spec.cumulative,
                                        tuned_lens=spec.tuned_lens, seed=spec.seed, max_train=max_train,
                                        lens=lens or DEFAULT_LENS, step=step)
        if act_seconds is not None:  # part of what the report cost, though trained before the parts
            report.timings = {"act head (trained for token depth)": act_seconds, **report.timings}
            _label_quick_act(report, Path(act_run), spec.act_epochs)
        return report, save_report(report, folder)


def _label_quick_act(report: ProbeReport, run: Path, epochs: int) -> None:
    """Mark the head the report trained as a quick estimate, in ``token_depth`` and in ``runs``."""
    about = f"quick depth estimate: {per_token_depth_mixers()[0]} head trained {epochs} epochs for this report"
    if report.token_depth is not None:
        report.token_depth["about"] = about
    for entry in report.runs:
        if Path(entry["path"]).resolve() == run.resolve():
            entry["about"], entry["quick_estimate"] = about, True


def _train_act(cache: LayerCache, run: Path, epochs: int, seed: int, progress: bool) -> Path:
    """A head on every task of ``cache`` whose mixer has a per-token depth (the registry's first such: ``act``),
    for that depth (the run lands in ``run``)."""
    from ..heads.workflow import train_head

    train_head(cache, per_token_depth_mixers()[0], out=run, overwrite=True, epochs=epochs, seed=seed,
               source="tokens", progress=progress)
    return run
