"""The probing report of a cache: which layer knows what, and how deep examples and tokens need to go.

    report = build_probe_report(cache)               # every analysis, from the cache alone
    paths = report.save("runs/demo-cache.report")    # report.json + a self-contained report.html
    ProbeReport.load(paths.json) == report           # the JSON is the report

For every label task of the cache (on the evaluation split: ``test`` when there is one):

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
their expected layers; per-token depth from an ``act`` head by token category (``token_depth``);
the logit lens of a decoder cache that holds its final norm and unembedding (``logit_lens``).

Missing values (a score of an empty split, an expected layer without positive gains) are
``None`` here and ``null`` in the JSON, never NaN, so any JSON reader takes the file.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..core.version import __version__
from ..depth import expected_layer, layer_similarity, prediction_depth
from ..errors import CacheError, ConfigError
from ..heads.run_files import RunFiles, find_runs
from ..probes import CumulativeProbes, LinearProbes, OnlineCodeMDL
from ..probes.selection import DEFAULT_MAX_TRAIN, check_max_train
from ..store.reader import TEST_NAMES, VALIDATION_NAMES, LayerCache, using_cache
from .cumulative_gains import cumulative_part
from .document import ProbeReport, ReportPaths

CONTROL_MAX_ITER = 150
"""L-BFGS iterations of the control probes: enough for their score, a fraction of a full fit on a token task."""


# --- building --------------------------------------------------------------------------
Step = Callable[[str], None]


def _no_step(description: str) -> None:
    """A step callback that shows nothing."""


def default_eval_split(cache: LayerCache, asked: str | None = None) -> str | None:
    """The split a report scores on: ``asked`` (refused when the cache has no such split), else ``test`` when
    present, else the validation split, else None (then the probes' validation scores are reported)."""
    return cache.report_split(asked, names=TEST_NAMES + VALIDATION_NAMES, exclude="train")


def build_probe_report(cache: LayerCache, *, tasks: Sequence[str] | None = None, eval_split: str | None = None,
                       runs: Iterable[str | os.PathLike] = (), act_run: str | os.PathLike | None = None,
                       mdl: bool = True, cumulative: bool = True, seed: int = 0,
                       max_train: int | None = DEFAULT_MAX_TRAIN, step: Step = _no_step) -> ProbeReport:
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
        step: called with a description before each part (progress display).
    """
    check_max_train(max_train)
    if not cache.tasks:
        raise CacheError(f"The cache {cache.path} holds no labels, so there is nothing to probe; extract it with "
                         "a label column (without --no-labels).")
    known = [t.name for t in cache.tasks]
    chosen = list(tasks) if tasks else known
    unknown = [t for t in chosen if t not in known]
    if unknown:
        raise ConfigError(f"The cache has no task {unknown[0]!r}; its tasks are: {', '.join(known)}.")
    eval_split = default_eval_split(cache, eval_split)
    m = cache.manifest
    report = ProbeReport(meta={
        "cache": str(cache.path), "model": m.model.name, "model_kind": m.model.kind,
        "architecture": m.model.architecture, "dataset": m.dataset.name, "layer_names": cache.layer_names,
        "hidden_size": cache.hidden_size, "store": m.storage.store, "storage_dtype": m.storage.dtype,
        "splits": {s: cache.num_examples(s) for s in cache.splits}, "eval_split": eval_split,
        "validation": cache.validation_split(exclude="train"), "seed": seed, "max_train": max_train,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "layercache_version": __version__,
    })
    timer = _Timer(report.timings)
    for spec in cache.tasks:
        if spec.name in chosen:
            report.tasks[spec.name] = _task_report(cache, spec, eval_split, mdl, cumulative, seed, max_train, step,
                                                   timer)
    _add_similarity(report, cache, eval_split, seed, step, timer)
    run_paths = find_runs(cache, runs)
    step("layer weights of trained runs")
    with timer("runs"):
        report.runs = [_run_summary(run) for run in run_paths]
    _add_token_depth(report, cache, eval_split, act_run, run_paths, step, timer)
    _add_logit_lens(report, cache, eval_split, step, timer)
    return report.clean()


class _Timer:
    """``with timer("part"):`` adds the part's seconds to the report's timings."""

    def __init__(self, timings: dict[str, float]):
        self.timings = timings

    def __call__(self, part: str):
        timer = self

        class _Part:
            def __enter__(self):
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                timer.timings[part] = timer.timings.get(part, 0.0) + time.perf_counter() - self.t0

        return _Part()


def _task_report(cache: LayerCache, spec, eval_split: str | None, mdl: bool, cumulative: bool, seed: int,
                 max_train: int | None, step: Step, timer: _Timer) -> dict:
    """The per-layer analyses of one task, every probe fitted on one seeded sample of ``max_train``."""
    name = spec.name
    classification = spec.kind != "regression"
    out: dict = {"kind": spec.kind, "label_names": spec.label_names,
                 "metric": "accuracy" if classification else "r2"}
    unit = "words" if spec.kind == "token" else "examples"
    step(f"{name}: linear probes")
    with timer(f"{name}: probes"):
        probes = LinearProbes(task=name, seed=seed, max_train=max_train).fit(cache)
        evaluated = probes.score(cache, eval_split) if eval_split else None
    sample = (f"{probes.n_train_:,} of {probes.n_train_available_:,} {unit}"
              if probes.n_train_ < probes.n_train_available_ else f"all {probes.n_train_:,} {unit}")
    out["source"] = probes.source_
    out["probe"] = {"validation": probes.scores_, "eval": evaluated, "C": probes.C_,
                    "best_layer": probes.layer_names_[probes.best_layer_], "best_index": probes.best_layer_,
                    "validated_on": probes.validation_, "n_train": probes.n_train_,
                    "n_train_available": probes.n_train_available_, "seconds": probes.fit_seconds_}
    if classification:
        step(f"{name}: control task ({sample})")
        with timer(f"{name}: control"), warnings.catch_warnings():
            # Control labels of many word types are slow to fit to the last digit, and the report only
            # needs the score: cap the iterations and say so when the cap was reached.
            warnings.simplefilter("ignore", ConvergenceWarning)
            control = LinearProbes(task=name, seed=seed, control=True, max_iter=CONTROL_MAX_ITER,
                                   max_train=max_train).fit(cache)
            control_eval = control.score(cache, eval_split) if eval_split else None
        task_scores = evaluated if evaluated is not None else probes.scores_
        control_scores = control_eval if control_eval is not None else control.scores_
        out["control"] = {"validation": control.scores_, "eval": control_eval,
                          "selectivity": np.asarray(task_scores) - np.asarray(control_scores),
                          "on": eval_split or "validation", "converged": bool(control.converged_),
                          "max_iter": CONTROL_MAX_ITER}
        if eval_split:
            step(f"{name}: prediction depth")
            with timer(f"{name}: prediction depth"):
                predicted, target = probes.predictions(cache, eval_split)
                depth = prediction_depth(predicted.T, target)
            out["prediction_depth"] = {"counts": depth.counts, "accuracy_by_depth": depth.accuracy_by_depth,
                                       "mean": depth.mean_depth, "on": eval_split}
        if mdl:
            step(f"{name}: MDL, online code ({sample})")
            with timer(f"{name}: mdl"):
                code = OnlineCodeMDL(task=name, seed=seed, max_train=max_train).fit(cache)
            out["mdl"] = {"codelength_bits": code.codelength_, "compression": code.compression_,
                          "uniform_bits": code.uniform_codelength_,
                          "best_layer": code.layer_names_[code.best_layer_], "n": int(code.portions_[-1]),
                          "seconds": code.fit_seconds_}
    if cumulative:
        step(f"{name}: cumulative scoring ({sample})")
        with timer(f"{name}: cumulative"):
            cum = CumulativeProbes(task=name, seed=seed, max_train=max_train).fit(cache, probes=probes)
            out["cumulative"] = cumulative_part(cum, cache, eval_split, seed)
    return out


def _add_similarity(report: ProbeReport, cache: LayerCache, eval_split: str | None, seed: int, step: Step,
                    timer: _Timer) -> None:
    pooling = cache.manifest.pooling
    if not pooling:
        report.notes.append("No layer similarity: the cache holds no pooled vectors (extract with --pooling mean).")
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
    return {"path": str(run), "name": run.name, "mixer": files.mixer, "scores": files.metrics.scores(),
            "scored_on": files.metrics.scored_on, "layer_names": weights.layer_names, "weights": mixers,
            "expected_layer": centres, "usage": weights.usage}


def _add_token_depth(report: ProbeReport, cache: LayerCache, eval_split: str | None, act_run, run_paths: list[Path],
                     step: Step, timer: _Timer) -> None:
    """Per-token ``act`` depth by token category, from ``act_run`` or the newest ``act`` run found."""
    if not cache.stores_tokens:
        report.notes.append("No per-token depth: the cache holds pooled vectors only.")
        return
    if act_run is None:
        act_runs = [r for r in report.runs if r["mixer"] == "act"]
        if not act_runs:
            report.notes.append("No per-token depth: no act run found for this cache (train one with "
                                "layercache train-head --mixer act, or let probe-report train one).")
            return
        act_run = max(act_runs, key=lambda r: Path(r["path"]).stat().st_mtime)["path"]
    from ..depth import depth_by_category, token_categories
    from ..heads import LayerHead
    from ..heads.token_usage import per_token_usage

    split = cache.report_split(eval_split, exclude="train", fallback="train")
    step("per-token depth (act) by token category")
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
    report.token_depth = {"run": str(act_run), "about": f"act run {act_run}", "mixer_key": key, "split": split,
                          "n_tokens": int(np.isfinite(depth).sum()), "mean": float(np.nanmean(depth)),
                          "histogram": {"edges": edges, "counts": counts},
                          "by_category": {"families": families, "categories_of": categories.split}}


def _add_logit_lens(report: ProbeReport, cache: LayerCache, eval_split: str | None, step: Step,
                    timer: _Timer) -> None:
    """Next-token accuracy and KL to the final layer per layer, for a decoder cache with lens weights."""
    if cache.manifest.model.kind != "decoder" or not cache.stores_tokens:
        return
    from ..depth import logit_lens

    split = cache.report_split(eval_split, exclude="train", fallback="train")
    step("logit lens")
    with timer("logit lens"):
        try:
            lens = logit_lens(cache, split)
        except CacheError as err:  # an older cache without its final norm and unembedding, say
            report.notes.append(f"No logit lens: {err}")
            return
    report.logit_lens = {"split": lens.split, "layer_names": list(lens.layer_names), "accuracy": lens.accuracy,
                         "kl_to_final": lens.kl, "agreement": lens.agreement, "n_tokens": lens.n_tokens,
                         "n_predictions": lens.n_predictions}


def count_steps(cache: LayerCache, tasks: Sequence[str] | None, eval_split: str | None, mdl: bool,
                cumulative: bool, token_depth: bool) -> int:
    """How many ``step`` calls :func:`build_probe_report` makes (the length of its progress bar)."""
    chosen = [t for t in cache.tasks if not tasks or t.name in tasks]
    n = 0
    for spec in chosen:
        classification = spec.kind != "regression"
        n += 1 + int(cumulative) + (classification * (1 + int(mdl) + int(eval_split is not None)))
    n += int(bool(cache.manifest.pooling)) + 1 + int(token_depth)
    n += int(cache.manifest.model.kind == "decoder" and cache.stores_tokens)
    return n


def probe_report(cache: str | os.PathLike | LayerCache | None = None, out: str | os.PathLike | None = None, *,
                 train_act: bool = True, act_epochs: int = 8, progress: bool = True,
                 say: Callable[[str], None] = _no_step, **options) -> tuple[ProbeReport, ReportPaths]:
    """Build the probing report of a cache and write ``report.json`` and ``report.html``.

    Args:
        cache: a cache folder or an open :class:`LayerCache` (default: the most recent cache).
        out: the report folder (default: ``<cache>.report`` beside the cache).
        train_act: when the cache stores token states and no ``act`` run of it exists, train one
            (``act_epochs`` epochs, into ``<out>/act-run``) for the per-token depth: a quick
            estimate, labelled so in ``token_depth["about"]`` and in its ``runs`` entry.
        act_epochs: epochs of that head.
        progress: show a progress bar over the parts.
        say: called with each line the console shows before the parts (the training sample, the act head).
        **options: :func:`build_probe_report` options (``tasks``, ``eval_split``, ``runs``, ``act_run``,
            ``mdl``, ``cumulative``, ``seed``, ``max_train``).
    """
    from ..progress import steps_progress

    check_max_train(options.get("max_train", DEFAULT_MAX_TRAIN))
    with using_cache(cache) as handle:
        folder = Path(out) if out is not None else handle.path.parent / f"{handle.path.name}.report"
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"--out {folder} is a file, not a folder; choose a folder for the report.")
        options["runs"] = list(options.get("runs") or ())
        act_run = options.pop("act_run", None)
        found = find_runs(handle, options["runs"])
        has_act = any(_run_summary(run)["mixer"] == "act" for run in found)
        max_train = options.get("max_train", DEFAULT_MAX_TRAIN)
        say(f"Probes fit on a seeded sample of at most {max_train:,} training examples (words) per task; "
            "--max-train all fits every one." if max_train else "Probes fit on every training example (word).")
        act_seconds = None
        if act_run is None and not has_act and train_act and handle.stores_tokens:
            say(f"Training an act head for per-token depth: a quick {act_epochs}-epoch estimate; pass --act-run "
                "for a converged one.")
            t0 = time.perf_counter()
            act_run = _train_act(handle, folder / "act-run", act_epochs, options.get("seed", 0), progress)
            act_seconds = time.perf_counter() - t0
            options["runs"].append(act_run)  # its layer weights belong in the report too
        eval_split = options.get("eval_split") or default_eval_split(handle)
        total = count_steps(handle, options.get("tasks"), eval_split, options.get("mdl", True),
                            options.get("cumulative", True),
                            token_depth=handle.stores_tokens and (act_run is not None or has_act))
        with steps_progress(progress, total, "probe-report") as step:
            report = build_probe_report(handle, act_run=act_run, step=step, **options)
        if act_seconds is not None:  # part of what the report cost, though trained before the parts
            report.timings = {"act head (trained for token depth)": act_seconds, **report.timings}
            _label_quick_act(report, Path(act_run), act_epochs)
        return report, report.save(folder)


def _label_quick_act(report: ProbeReport, run: Path, epochs: int) -> None:
    """Mark the act head the report trained as a quick estimate, in ``token_depth`` and in ``runs``."""
    about = f"quick depth estimate: act head trained {epochs} epochs for this report"
    if report.token_depth is not None:
        report.token_depth["about"] = about
    for entry in report.runs:
        if Path(entry["path"]).resolve() == run.resolve():
            entry["about"], entry["quick_estimate"] = about, True


def _train_act(cache: LayerCache, run: Path, epochs: int, seed: int, progress: bool) -> Path:
    """An ``act`` head on every task of ``cache``, for its per-token depth (the run lands in ``run``)."""
    from ..heads.runs import train_head

    train_head(cache, "act", out=run, overwrite=True, epochs=epochs, seed=seed, source="tokens", progress=progress)
    return run
