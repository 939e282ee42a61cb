"""``sweep``: train many candidate heads from one cache inside a time budget and keep the validation winner.

An epoch from a cache costs seconds, so trying every way to combine the layers costs minutes. The
sweep trains each candidate with a few seeds, ranks them on validation by each task's selection
metric (:mod:`..scoring.selection`; a joint head on the loss-weighted mean), reports the test split beside
it (never used to choose), and writes the winner as an ordinary run folder. Its parts:

- **the candidates** (:mod:`.candidates`): every registered mixer at its defaults, in registry
  order, then a small grid around each (the learning rate, and the widths and temperatures the mixer
  declares), one setting changed at a time. Single states come first because the convex fit makes
  each one cheap on pooled vectors; one that takes more than :data:`~.budget.DEFER_SHARE` of
  the budget (a token task's fit over every word of a large cache) sends the rest behind the
  learning mixers' defaults, so that a short budget still reaches them. The grid runs the variants
  of the mixers whose defaults scored best first, so a short budget refines the most promising one;
  a mixer whose default did not run is not refined. Each candidate trains with every seed; a convex
  fit is deterministic and trains once. Every run validates on the same data: the cache's
  validation split, or one seeded slice of train for all (``val_seed``).
- **the budget** (:mod:`.budget`, and the loop here): a candidate starts only when its
  estimated cost, priced from what it is and what has run, fits in what is left; one nothing
  predicts yet starts while time is left. Training gets the budget's end (less a reserve for the
  leaderboard) as a deadline and starts no epoch that would pass it, so at most a first epoch runs
  over. Only candidates that finish inside the budget count; a budget too small for any is refused
  with the time the first one took.
- **one read of the cache**: every fit takes its feeds from one :class:`~layercache.store.feed_pool.FeedPool`, built
  once and shared by all candidates and seeds.
- **the standings** (:mod:`.ranking`): what ``best/`` keeps of the winner (:data:`PICKS`) is by
  default its seeds averaged, a seed ensemble, because the best seed on a small validation slice is
  mostly luck; ``best-seed`` keeps its best run. The ranking follows what is kept (seeds averaged as
  one model, or their mean score). A grid variant is kept over its mixer's default only when a paired
  bootstrap over the validation rows has it ahead in :data:`VARIANT_CONFIDENCE` of the resamples:
  the best of several noisy scores is biased upwards. ``confidence=0`` keeps the leader.
- **the records** (:mod:`.records`): :class:`CandidateResult` per candidate and the leaderboard,
  :class:`SweepResult`, written as ``sweep.json``.

The measurements behind these choices (the seed ensemble against the best seed, variants that led
by noise, the reserve, single states that proved dear) are in ``benchmarks/README.md``.

**Output** (``out``, default ``<cache>.runs/sweep-<n>`` beside the cache; locked, and written whole at
the end, :mod:`..run_folders.run_folder`): ``best/``, the pick as the run folder :func:`~..workflow.train_head` writes
(``LayerHead.load``, ``eval``, ``predict``), staged again whenever the winner changes; ``sweep.json``,
the leaderboard (:class:`SweepResult`). With ``ensemble=K`` the top K candidates, each as it would be
picked (its seeds averaged, or its best run), are also averaged as one head, scored (:mod:`..ensembles.passes`)
and written as ``ensemble/``, a run folder like ``best/`` (:meth:`~..estimator.LayerHead.from_members`).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ...core.memory import memory_limit
from ...core.option_specs import check_options
from ...core.plotting import pyplot
from ...core.threads import computes
from ...core.units import human_seconds, parse_duration
from ...errors import ConfigError
from ...progress import steps_progress
from ...store.feed_pool import FeedPool
from ...store.reader import TEST_NAMES, LayerCache, using_cache
from ..data.finite import DivergedError, check_split_stats
from ..data.source import resolve_tasks
from ..estimator import LayerHead
from ..head_options import TRAIN_SPLIT, HeadOptions
from ..run_folders.run_folder import BEST_RUN, SWEEP_FILE
from ..scoring.evaluation import evaluate
from ..training.checkpoint import CheckpointFolder
from ..workflow import check_run_folder, checkpoints_root, claim_run_folder
from .budget import Costs
from .candidates import LR_FACTORS, Candidate, candidate_grid
from .ranking import EVAL_BATCH, Leaderboard, SeedRun
from .records import CandidateResult, SweepResult
from .sweep_options import DEFAULT_BUDGET, DEFAULT_PICK, DEFAULT_SEEDS, PICKS, VARIANT_CONFIDENCE, SweepOptions

__all__ = ["sweep", "Candidate", "candidate_grid", "CandidateResult", "SweepResult", "LR_FACTORS", "PICKS",
           "DEFAULT_PICK", "VARIANT_CONFIDENCE", "EVAL_BATCH", "DEFAULT_BUDGET", "DEFAULT_SEEDS", "CHOSEN",
           "SweepOptions"]

_S = SweepOptions()  # the sweep's own settings as left out: their types, defaults and rules are declared there
RESERVE_SHARE, RESERVE_MIN_S = 0.01, 0.5
"""The share of the budget (and its least seconds) kept back for the end of the sweep."""
#: LayerHead settings the sweep chooses itself, refused among ``**params``.
CHOSEN = ("mixer", "mixer_options", "lr", "seed", "seeds", "val_seed", "progress")


# --- the sweep ---------------------------------------------------------------------------------
@computes
def sweep(cache: str | os.PathLike | LayerCache | None = None, *, out: str | os.PathLike | None = None,
          tasks: str | Sequence[str] | None = None, budget: str | float | None = _S.budget,
          seeds: int | Sequence[int] = _S.seeds, seed: int = _S.seed, pick: str = _S.pick, ensemble: int = _S.ensemble,
          confidence: float = _S.confidence, mixers: Sequence[str] | None = _S.mixers, grid: bool = _S.grid,
          candidates: Sequence[Candidate | str] | None = None, split: str = TRAIN_SPLIT, val_split: str | None = None,
          test_split: str | None = None, overwrite: bool = False, progress: bool = True,
          memory_budget: int | None = None, **params) -> SweepResult:
    """Train candidate heads on a cache inside ``budget``, keep the validation winner as ``out/best``.

    Args:
        cache: a cache folder or an open :class:`LayerCache` (default: the most recent cache).
        out: the sweep's folder (default: a new ``<cache>.runs/sweep-<n>`` beside the cache).
        tasks: label tasks to learn jointly (default: every task of the cache).
        budget: wall time for the whole sweep: seconds, or text such as ``300s``, ``5m``, ``1h``
            (:func:`~layercache.core.units.parse_duration`); None: no limit.
        seeds: runs per candidate: a count (seeds ``seed``, ``seed+1`` ...) or the seeds themselves.
        seed: the first seed, and the seed of the validation slice when the cache has no validation split.
        pick: what ``best/`` keeps of the winner (:data:`PICKS`): ``seeds``, its seeds averaged, or
            ``best-seed``, its best run on validation.
        ensemble: also average the top ``K`` candidates as one head (each as ``pick`` keeps it), scored
            and written as ``out/ensemble``; 0 or 1: no ensemble.
        confidence: the share of paired bootstrap resamples of the validation rows in which a grid
            variant must beat its mixer's default to be kept instead of it (:data:`VARIANT_CONFIDENCE`);
            0 keeps whichever candidate leads.
        mixers: registry names to try (default: all); ``grid``: also try the grid around their defaults.
        candidates: the candidates themselves (specs or :class:`Candidate`), instead of ``mixers`` and ``grid``.
        split, val_split, test_split: as :func:`~..workflow.train_head` (test: ``test`` when the cache has one).
        overwrite: allow writing into a non-empty ``out``.
        progress: a progress bar over the candidates.
        memory_budget: bytes the shared feeds may hold, as :func:`~..workflow.train_head` (None: half the memory
            available).
        **params: other :class:`LayerHead` settings, shared by every candidate (``epochs``, ``patience``,
            ``batch_size``, ``metric``, ``class_weight``, ``normalize``, ``device`` ...).
    """
    started = time.perf_counter()
    seconds = None if budget is None else parse_duration(budget, "budget")
    chosen = sorted(set(params) & set(CHOSEN))
    if chosen:
        raise ConfigError(f"The sweep chooses {chosen[0]!r} for each candidate itself; leave it out (give the "
                          "candidates with candidates= or mixers=).")
    check_options(HeadOptions, params)  # every candidate's settings, refused before the cache is opened
    if pick not in PICKS:
        raise ConfigError(f"Unknown pick {pick!r}; choose one of {', '.join(PICKS)}.")
    check_options(SweepOptions, {"budget": budget, "mixers": mixers, "grid": grid, "seeds": seeds, "seed": seed,
                                 "pick": pick, "confidence": confidence, "ensemble": ensemble})  # the sweep's own rules
    seed_list = _seed_list(seeds, seed)
    with memory_limit(memory_budget), using_cache(cache) as handle:
        head_tasks = resolve_tasks(handle, tasks)
        if out is not None:
            check_run_folder(Path(out), overwrite)  # a bad --out is refused before anything is written
        handle.require_split(split)
        layer_names = [handle.layer_names[i] for i in handle.layer_index(params.get("layers"))]
        if val_split is not None:
            handle.require_split(val_split)
        test_name = handle.report_split(test_split, names=TEST_NAMES, exclude=split)
        if test_name is not None:
            check_split_stats(handle, test_name, layer_names)  # refuse a damaged test split before training
        if candidates is None:
            plan = candidate_grid(len(layer_names), mixers, grid=grid)
        elif mixers is not None:
            raise ConfigError("Give the sweep either candidates or mixers (with grid), not both.")
        else:
            given = [c if isinstance(c, Candidate) else Candidate(str(c)) for c in candidates]
            plan = [c for i, c in enumerate(given) if c.name not in {g.name for g in given[:i]}]  # each once
        if not plan:
            raise ConfigError("The sweep has no candidate to try; name a mixer or a candidate.")
        _import_plotting()  # once, before the clock counts candidates: the best run's plot would pay for it
        with claim_run_folder(handle.path, out, "sweep", overwrite, what="sweep folder") as folder:
            run = _Sweep(handle, folder, head_tasks, layer_names, seed_list, seed, split, val_split, test_name,
                         params, started, seconds, progress, pick, float(confidence))
            run.fresh = overwrite  # --overwrite: no candidate resumes from a checkpoint an earlier sweep left
            folder.resume_hint = run.checkpoints.resume_hint  # Ctrl-C says what the same command resumes
            result = run.run(plan, ensemble)
            folder.commit()  # best/, ensemble/ and sweep.json appear together, complete
            run.checkpoints.remove()  # every candidate's run is written: nothing left to resume
            return result


def _seed_list(seeds: int | Sequence[int], seed: int) -> list[int]:
    if isinstance(seeds, bool):
        seeds = [seeds]  # refused below
    if isinstance(seeds, int):
        if seeds < 1:
            raise ConfigError(f"seeds must be at least 1 run per candidate, got {seeds}.")
        return [seed + i for i in range(seeds)]
    out = list(dict.fromkeys(seeds))
    if not out or not all(isinstance(s, int) and not isinstance(s, bool) for s in out):
        raise ConfigError(f"seeds must be a count or a list of integer seeds, got {seeds!r}.")
    return out


def _import_plotting() -> None:
    pyplot()


@contextmanager
def _quiet_heads() -> Iterator[None]:
    """Keep the heads' per-run warnings out of the log while candidates train: dozens of runs would bury
    the leaderboard. Each candidate keeps its best run's warnings, and the winner's are in its metrics.json."""
    logger = logging.getLogger("layercache.heads")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


class _Sweep:
    """The state of one sweep: the cache, the shared feeds, the clock, and the results so far."""

    def __init__(self, cache: LayerCache, folder, tasks, layer_names: list[str], seeds: list[int], seed: int,
                 split: str, val_split: str | None, test_name: str | None, params: dict, started: float,
                 budget: float | None, progress: bool, pick: str = DEFAULT_PICK,
                 confidence: float = VARIANT_CONFIDENCE) -> None:
        self.cache, self.folder, self.out, self.tasks, self.layer_names = cache, folder, folder.path, tasks, layer_names
        self.seeds, self.seed, self.split, self.test_name, self.params = seeds, seed, split, test_name, params
        self.val_split = val_split or cache.validation_split(exclude=split)
        self.started, self.budget, self.progress = started, budget, progress
        # The end of the budget less a reserve for what follows the last candidate (the leaderboard, the
        # ensemble, sweep.json): 1 % of it, at least 0.5 s (but never more than a tenth; why: benchmarks/README.md).
        self.reserve = 0.0 if budget is None else min(max(RESERVE_MIN_S, RESERVE_SHARE * budget), 0.1 * budget)
        self.end = None if budget is None else started + budget - self.reserve
        self.pool = FeedPool(cache)
        self.costs = Costs(len(layer_names), cache.hidden_size, tasks, params)
        self.board = Leaderboard(cache, folder, self.pool, split, self.val_split, test_name, seed, pick, confidence)
        self.step = lambda description: None  # the progress bar's: called as a candidate starts training
        self.skipped: list[dict] = []
        self.budget_hit = False  # some candidate did not run, or did not count, for lack of time
        self.first_error_raises = True  # until one candidate has trained, a refusal is about the settings
        # Every fit saves its state after each epoch (:mod:`..training.checkpoint`), so a killed sweep run
        # again resumes each candidate where it stopped; a finished candidate's fit resumes at its end.
        self.fresh, self.checkpoints = False, CheckpointFolder(checkpoints_root(cache.path))

    # --- the clock ---------------------------------------------------------------------------
    def left(self) -> float:
        return math.inf if self.end is None else self.end - time.perf_counter()

    # --- the loop -----------------------------------------------------------------------------
    def run(self, plan: list[Candidate], ensemble: int) -> SweepResult:
        board = self.board
        board.ensemble_size = ensemble
        setup = time.perf_counter() - self.started
        if self.left() <= 0:
            raise ConfigError(f"The budget of {human_seconds(self.budget)} ran out while the sweep opened and checked "
                              f"the cache ({human_seconds(setup)}); give a budget of at least "
                              f"{_suggest(setup * 3)}.")
        queue = [c for c in plan if c.base is None]
        variants = [c for c in plan if c.base is not None]
        first: tuple[str, float] | None = None
        deferred = False
        with steps_progress(self.progress, total=len(plan), title="sweep",  # counts what runs
                            seconds_left=self.left()) as self.step:
            while queue:
                candidate = queue.pop(0)
                trained = self._try(candidate)
                first = first or trained
                if not deferred and self.costs.too_dear(candidate, self.budget):
                    # Single states are tried first because they are cheap; where one is not (a token
                    # task's convex fit over every word of a large cache), the rest wait behind the
                    # learning mixers' defaults instead of eating the budget before those ever run.
                    deferred = True
                    fixed = [c for c in queue if self.costs.is_fixed(c)]
                    queue = [c for c in queue if c not in fixed] + fixed
            for candidate in self._order_variants(variants):
                trained = self._try(candidate)
                first = first or trained
        if not board.results:
            raise self._too_small(setup, first)
        ranked = board.ranked()
        head = board.runs[board.winner.candidate][0].head
        result = SweepResult(out=self.out, best=self.out / BEST_RUN, leaderboard=ranked, skipped=self.skipped,
                             selection=head.selection_.to_json(), validation=head.data_["validation"],
                             test_split=self.test_name, budget=self.budget, elapsed=0.0, setup_seconds=setup,
                             feeds=self.pool.stats(), cache=str(self.cache.path), ranking=board.ranking,
                             pick=board.picked, confidence=board.confidence)
        if ensemble > 1:
            result.ensemble = board.ensemble(ranked[:ensemble])
        result.elapsed = time.perf_counter() - self.started
        result.write(self.folder.file(SWEEP_FILE))
        return result

    def _describe(self, candidate: Candidate) -> str:
        winner = self.board.winner
        if winner is None:
            return candidate.name
        return f"{candidate.name} (best: {winner.candidate} {winner.rank_score(self.board.ranking):.4f})"

    def _order_variants(self, variants: list[Candidate]) -> list[Candidate]:
        """Grid variants of the mixers whose defaults scored best first; those of a mixer that did not run, dropped."""
        ready = []
        for candidate in variants:
            if candidate.base not in self.board.defaults:
                self.skipped.append({"candidate": candidate.name,
                                     "reason": f"its default, {candidate.base}, did not run"})
            else:
                ready.append(candidate)
        return sorted(ready, key=lambda c: -self.board.defaults[c.base].rank_score(self.board.ranking))

    def _try(self, candidate: Candidate) -> tuple[str, float] | None:
        """Run ``candidate`` if it is worth it and fits; returns (name, seconds) when it trained at all."""
        lr = None
        if candidate.lr_factor is not None:
            base = self.board.defaults[candidate.base]
            if base.lr is None:
                self.skipped.append({"candidate": candidate.name, "reason": f"{base.candidate} is fitted by the convex "
                                                                            "solver, which has no learning rate"})
                return None
            lr = candidate.lr_factor * base.lr
        try:
            self.costs.shape(candidate)
        except ConfigError as err:  # a spec this cache cannot take (act on one state ...)
            if self.first_error_raises:
                raise
            self.skipped.append({"candidate": candidate.name, "reason": str(err)})
            return None
        reason = self.costs.refusal(candidate, len(self.seeds), self.left())
        if reason is not None:
            self.budget_hit = True
            self.skipped.append({"candidate": candidate.name, "reason": reason})
            return None
        self.step(self._describe(candidate))
        return self._train(candidate, lr)

    def _train(self, candidate: Candidate, lr: float | None) -> tuple[str, float] | None:
        runs: list[SeedRun] = []
        notes = []
        t0 = time.perf_counter()
        deterministic = False
        for i, seed in enumerate(self.seeds):
            if deterministic:
                break
            if i > 0 and self.costs.per_fit(candidate) + self.costs.write_seconds > self.left():
                self.budget_hit = True
                notes.append(f"{i} of {len(self.seeds)} seeds: the budget ran out")
                break
            head = LayerHead(candidate.mixer, tasks=[t.name for t in self.tasks],
                             mixer_options=candidate.mixer_options or None, lr=lr, seed=seed, val_seed=self.seed,
                             progress=False, **self.params)
            deadline = None if self.end is None else self.end - self.costs.after_training(candidate)
            try:
                run = self._fit(head, seed, deadline)
            except DivergedError as err:
                notes.append(f"seed {seed} diverged: {err}")
                break
            except ConfigError as err:
                if self.first_error_raises:
                    raise
                self.skipped.append({"candidate": candidate.name, "reason": str(err)})
                return None
            self.first_error_raises = False
            deterministic = head.fit_["solver"] == "lbfgs"
            self.costs.record(candidate, run.seconds, run.test_seconds)
            runs.append(run)
            if head.history_.out_of_time:
                notes.append(f"seed {seed} stopped at epoch {len(head.history_.epochs)} of "
                             f"{head.train_config_.epochs} by the budget")
        seconds = time.perf_counter() - t0
        if not runs:
            self.skipped.append({"candidate": candidate.name, "reason": "; ".join(notes)})
            return (candidate.name, seconds)
        if self.left() < 0:
            self.budget_hit = True
            self.skipped.append({"candidate": candidate.name,
                                 "reason": f"it finished {human_seconds(-self.left())} after the budget ran out"})
            return (candidate.name, seconds)
        best = max(runs, key=lambda r: r.score)  # the first of ties: the earliest seed
        head = best.head
        result = CandidateResult(
            candidate=candidate.name, mixer=candidate.mixer, mixer_options=dict(candidate.mixer_options),
            lr=None if deterministic else head.train_config_.lr, solver=head.fit_["solver"],
            seeds=[r.seed for r in runs], validation=[r.score for r in runs],
            test=None if self.test_name is None else [r.test_score for r in runs], seconds=seconds,
            epochs=[len(r.head.history_.epochs) for r in runs], deterministic=deterministic, note="; ".join(notes),
            warnings=list(head.warnings_))
        if self.board.add(result, runs, candidate.base, deterministic):  # the new winner: rewrite best/
            t0 = time.perf_counter()
            self.board.write_pick(result, runs)
            self.costs.write_seconds = time.perf_counter() - t0
        return (candidate.name, seconds)

    def _fit(self, head: LayerHead, seed: int, deadline: float | None) -> SeedRun:
        t0 = time.perf_counter()
        with _quiet_heads():
            head.fit(self.cache, self.split, self.val_split, feeds=self.pool, deadline=deadline,
                     checkpoints=self.checkpoints, fresh=self.fresh)
        fit_seconds = time.perf_counter() - t0
        score = head.selection_.score(head.validation_metrics_)
        test = test_score = None
        t1 = time.perf_counter()
        if self.test_name is not None:
            feed = self.pool.feed(self.test_name, tasks=[t.name for t in head.tasks_], layers=head.layer_names_,
                                  source=head.source_, batch_size=EVAL_BATCH)
            with _quiet_heads():
                metrics, passed = evaluate(head.model_, feed)  # on the CPU, as LayerHead.evaluate scores
            test, test_score = (self.test_name, metrics, passed), head.selection_.score(metrics)
        test_seconds = time.perf_counter() - t1
        return SeedRun(seed, head, score, test_score, test, fit_seconds + test_seconds, fit_seconds, test_seconds)

    def _too_small(self, setup: float, first: tuple[str, float] | None) -> ConfigError:
        budget = human_seconds(self.budget) if self.budget is not None else "no limit"
        if first is None or not self.budget_hit:
            reasons = "; ".join(f"{s['candidate']}: {s['reason']}" for s in self.skipped[:3])
            return ConfigError(f"No candidate could run ({reasons}); check the candidates and the cache.")
        name, took = first
        return ConfigError(f"The budget of {budget} is too small to train even one candidate: the sweep's set-up took "
                           f"{human_seconds(setup)} and the first candidate, {name}, {human_seconds(took)}; give a "
                           f"budget of at least {_suggest((setup + took) * 2)}.")


def _suggest(seconds: float) -> str:
    """A round budget of at least ``seconds``, as ``--budget`` takes it: ``5s``, ``2m``."""
    if seconds <= 60:
        return f"{max(1, math.ceil(seconds))}s"
    return f"{math.ceil(seconds / 60)}m"

