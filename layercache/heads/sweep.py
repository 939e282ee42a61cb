"""``sweep``: train many candidate heads from one cache inside a time budget and keep the validation winner.

An epoch from a cache costs seconds, so trying every way to combine the layers costs minutes. The
sweep trains each candidate with a few seeds, ranks them on validation by each task's selection
metric (:mod:`.selection`; a joint head on the loss-weighted mean), reports the test split beside
it (never used to choose), and writes the winner as an ordinary run folder.

**Candidates** (:func:`candidate_grid`), in the order they run:

1. every registered mixer at its defaults, in registry order (:data:`~.mixers.MIXERS`): ``last``,
   every single state ``layer:0`` ... ``layer:<S-2>``, ``scalar``, ``adaptive``, ``attention``,
   ``gumbel``, ``act``, and any mixer added later (each mixer says which specs it is tried as:
   :meth:`~.mixers.LayerMixer.sweep_specs`). Single states come first because on pooled vectors
   the convex fit makes each one a fraction of a second; when one takes more than
   :data:`DEFER_SHARE` of the budget (a token task's fit over every word of a large cache: 40 to
   70 s per state on CoNLL-2003), the remaining ones move behind the learning mixers' defaults, so
   that a short budget still reaches ``adaptive``;
2. a small grid around each mixer's defaults, one setting changed at a time: the learning rate at
   :data:`LR_FACTORS` times the one its default run used (mixers trained by minibatches; a head
   fitted by the convex solver has no learning rate), and the variants the mixer declares in
   :attr:`~.mixers.LayerMixer.sweep_options`: a width and a temperature below and above the default
   (``adaptive``: ``k`` 32 / 512, ``alpha`` 3 / 30; ``attention``: ``attn_dim`` 16 / 256;
   ``gumbel``: ``tau`` 2 -> 0.2 / 10 -> 1; ``act``: ``ponder_weight`` 1e-4 / 1e-2). This stage runs
   the mixers' variants in the order of their defaults' validation scores, best first, so a short
   budget refines the most promising mixer; a mixer whose default did not run is not refined.

Each candidate trains with every seed (default three); a head that the convex solver fitted
(``last`` / ``layer:<i>`` with linear sequence, token or regression heads) is deterministic and
trains once. Every run validates on the same data: the cache's validation split, or one seeded slice of
train for all (``val_seed``).

**Budget.** A candidate starts only when its estimated cost fits in what is left, priced from what
it is (:mod:`.sweep_budget`): a convex fit runs once and costs what the convex fits so far cost;
another candidate costs its seeds times its own earlier fits, else its mixer's, else its kind's.
A candidate nothing predicts yet (the first of its kind) starts while time is left. Training
itself gets the budget's end (less a reserve of 1 %, at least 0.5 s, for writing the leaderboard)
as a deadline and starts no epoch that its mean epoch time says would
pass it (:func:`~.trainer.train_model`), so at most a first epoch can run over. Only candidates
that finish inside the budget count; a budget too small for any is refused with the time the
first one took.

**One read of the cache.** Every fit takes its feeds from one :class:`~.feed_pool.FeedPool`: the
train, validation and test feeds of the token states and of the pooled vectors are built once
(offsets, word ids and labels read out of every shard, the shards mapped) and shared by all
candidates and seeds; what they read stays in the OS page cache.

**The pick** (:data:`PICKS`). What is kept of the winner is, by default (``seeds``), the average
of all its seeds' runs, a seed ensemble (:mod:`.ensemble_model`), or (``best-seed``) its one run
that scored best on validation. A seed ensemble is the default because the best seed on a
validation slice of a few hundred examples is mostly luck: on SST-2 a 320 s sweep's best seed
scored under its seeds' mean on the held-out split, while the average of three seeds scores above
any typical one (``benchmarks/README.md``). A winner fitted by the convex solver is one
deterministic run.

**The ranking** follows what is kept: with ``seeds`` each candidate is ranked by the validation
score of its seeds averaged as one model (:attr:`CandidateResult.averaged`, scored from its runs'
passes: no pass runs again), the estimate of the model ``best/`` will hold; with ``best-seed`` by
its seeds' mean score (the best seed's own score is the maximum of noisy draws). Candidates that
respond to averaging differently rank differently under the two: on MPQA a candidate whose seeds
scatter widely led on their mean and fell back once averaged.

**A variant must beat its default** to be kept (:data:`VARIANT_CONFIDENCE`). The grid tries several
variants of each mixer, and the best of several noisy scores is biased upwards: in the 320 s sweeps of
``benchmarks/quality.py`` the leader on validation was a variant of ``adaptive``, ahead of ``adaptive``
itself by 0.2 to 2.2 points on slices of 302 to 848 examples, with paired standard errors of 1.1 to
1.8 points, and it scored under ``adaptive`` on the held-out split on two tasks of three. So when a variant
trains, its pick's validation predictions are compared with its default's by a paired bootstrap over
the validation rows (:mod:`.bootstrap`), and the variant may be kept only when it scores above the
default in at least 95 % of the resamples. The leaderboard still ranks every candidate by its score and
shows each variant's lead and share of resamples won; the winner (what ``best/`` holds,
:attr:`SweepResult.winner`) is the first candidate on it that is a default or a variant that cleared the
bar. ``confidence=0`` keeps the leader whatever its margin.

**Output** (``out``, default ``<cache>.runs/sweep-<n>`` beside the cache; locked, and written whole at
the end, :mod:`.run_folder`): ``best/``, the pick as the run folder :func:`~.runs.train_head` writes
(``LayerHead.load``, ``eval``, ``predict``), staged again whenever the winner changes; ``sweep.json``,
the leaderboard (:class:`SweepResult`). With ``ensemble=K`` the top K candidates, each as it would be
picked (its seeds averaged, or its best run), are also averaged as one head, scored (:mod:`.ensemble`)
and written as ``ensemble/``, a run folder like ``best/`` (:meth:`~.estimator.LayerHead.from_members`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..core.confine import OwnedFolder
from ..core.files import write_text_atomic
from ..core.units import human_seconds, parse_duration
from ..errors import ConfigError
from ..progress import steps_progress
from ..store.reader import LayerCache
from .bootstrap import RESAMPLES, paired_bootstrap
from .ensemble import combine_passes
from .estimator import LayerHead, resolve_tasks
from .evaluation import PassResult, evaluate
from .evaluation import score as score_predictions
from .feed_pool import FeedPool
from .finite import DivergedError, check_split_stats
from .mixers import MIXERS, mixer_names
from .run_folder import BEST_RUN, ENSEMBLE_RUN, SWEEP_FILE
from .runs import TEST_NAMES, check_run_folder, claim_run_folder, write_trained_run
from .sweep_budget import Costs
from .validation import validation_slice

DEFAULT_BUDGET = "5m"
"""The sweep's time budget unless told otherwise."""
DEFAULT_SEEDS = 3
"""Seeds per candidate (a deterministic convex fit runs once)."""
RESERVE_SHARE, RESERVE_MIN_S = 0.01, 0.5
"""The share of the budget (and its least seconds) kept back for the end of the sweep."""
LR_FACTORS = (0.3, 3.0)
"""The learning rates a sweep tries besides a mixer's default, as multiples of it."""
VARIANT_CONFIDENCE = 0.95
"""A grid variant is kept over its mixer's default only when it scores above the default in at least this
share of paired bootstrap resamples of the validation rows (see the module docstring)."""
EVAL_BATCH = 128
"""Examples per batch when scoring the test split (no gradients: larger batches are cheaper)."""
PICKS = {
    "seeds": "the winner's seeds averaged, a seed ensemble (one run when it had one seed or the convex fit)",
    "best-seed": "the winner's one run with the best validation score",
}
"""What the sweep keeps of its winner as ``best/``, by name (``--pick``)."""
DEFAULT_PICK = "seeds"
#: LayerHead settings the sweep chooses itself, refused among ``**params``.
CHOSEN = ("mixer", "mixer_options", "lr", "seed", "seeds", "val_seed", "progress")


# --- the candidates ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """One way to build a head: a mixer spec, options over its defaults, and a learning rate factor."""

    mixer: str
    """The mixer spec (``last``, ``layer:3``, ``adaptive`` ...)."""
    mixer_options: dict = field(default_factory=dict)
    lr_factor: float | None = None
    """A multiple of the learning rate the default run of this mixer used; None: the head's default."""
    base: str | None = None
    """For a grid variant, the name of the default candidate it varies (which must have run first)."""

    @property
    def name(self) -> str:
        """``adaptive``, ``adaptive k=32``, ``scalar lr×3``: how tables and messages name it."""
        parts = [self.mixer, *(f"{k}={_short(v)}" for k, v in self.mixer_options.items())]
        if self.lr_factor is not None:
            parts.append(f"lr×{_short(self.lr_factor)}")
        return " ".join(parts)

    @property
    def family(self) -> str:
        """The registry name of its mixer (``layer`` for ``layer:3``): candidates of a family cost alike."""
        return self.mixer.partition(":")[0].strip().lower()


def _short(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def candidate_grid(n_states: int, mixers: Sequence[str] | None = None, *, grid: bool = True) -> list[Candidate]:
    """The candidates a sweep of a cache with ``n_states`` states tries, in order (see the module docstring).

    ``mixers``: registry names to try (default: every registered mixer; ``layer`` is every single
    state but the last, ``last`` the last one). ``grid=False`` keeps the defaults only.
    """
    asked = mixer_names() if mixers is None else [m.strip().lower() for m in mixers]
    unknown = [m for m in asked if m not in MIXERS]
    if unknown:
        raise ConfigError(f"Unknown mixer {unknown[0]!r} to sweep; choose among: {', '.join(mixer_names())}.")
    names = [name for name in mixer_names() if name in asked]  # registry order: the cheap ones first
    defaults = [Candidate(spec) for name in names for spec in MIXERS[name].sweep_specs(n_states)]
    if not grid:
        return defaults
    variants = []
    for name in names:
        cls = MIXERS[name]
        if cls.sweep_specs(n_states) != [name]:  # tried state by state (layer:<i>): the states are its variants
            continue
        variants += [Candidate(name, lr_factor=f, base=name) for f in LR_FACTORS]
        variants += [Candidate(name, dict(options), base=name) for options in cls.sweep_options]
    return defaults + variants


# --- what a sweep produced ---------------------------------------------------------------------
@dataclass
class CandidateResult:
    """One candidate's runs: a validation (and test) score per seed, and what they cost."""

    candidate: str
    mixer: str
    mixer_options: dict
    lr: float | None
    """The learning rate its runs used (None for the convex fit, which has none)."""
    solver: str
    seeds: list[int]
    validation: list[float]
    """The selection score on validation of each seed's run."""
    test: list[float] | None
    """The same score on the test split (reported, never used to choose), or None without one."""
    seconds: float
    """Wall time of its runs: fits, validation and test scoring."""
    epochs: list[int]
    """Epochs each run trained (1 for the convex fit)."""
    deterministic: bool = False
    """Fitted by the convex solver: the same result for every seed, so one run."""
    note: str = ""
    warnings: list[str] = field(default_factory=list)
    """The warnings of its best run (a collapse onto one class ...)."""
    averaged: dict | None = None
    """Its seeds' runs averaged as one model (what ``--pick seeds`` keeps): ``{"validation", "test"}``
    scores; None for one run or a deterministic fit."""
    versus_default: dict | None = None
    """For a grid variant: its pick against its mixer's default's on the validation rows,
    ``{"default", "difference", "se", "p_better", "rows", "resamples"}`` (:mod:`.bootstrap`); None for a default."""

    @property
    def best_seed(self) -> int:
        """The seed of the run with the best validation score (the first of ties)."""
        return self.seeds[max(range(len(self.seeds)), key=lambda i: (self.validation[i], -i))]

    @property
    def validation_mean(self) -> float:
        """Mean validation score over its seeds."""
        return statistics.fmean(self.validation)

    def beats_default(self, confidence: float) -> bool:
        """Whether it may be kept: a default, or a variant that beat its default in at least ``confidence``
        of the paired resamples."""
        return self.versus_default is None or self.versus_default["p_better"] >= confidence

    def rank_score(self, ranking: str) -> float:
        """Its validation score under ``ranking``: ``averaged`` (its seeds averaged, or its one run) or ``mean``."""
        if ranking == "averaged" and self.averaged is not None:
            return self.averaged["validation"]
        return self.validation_mean

    @property
    def validation_sd(self) -> float | None:
        """Sample standard deviation over its seeds; None for one run."""
        return statistics.stdev(self.validation) if len(self.validation) > 1 else None

    @property
    def test_mean(self) -> float | None:
        """Mean test score over its seeds, or None."""
        return statistics.fmean(self.test) if self.test else None

    @property
    def test_sd(self) -> float | None:
        """Sample standard deviation of the test scores; None for one run or without a test split."""
        return statistics.stdev(self.test) if self.test and len(self.test) > 1 else None

    def to_json(self) -> dict:
        """Plain JSON: the fields, plus means and standard deviations for readers that do not recompute them."""
        return {"candidate": self.candidate, "mixer": self.mixer, "mixer_options": self.mixer_options, "lr": self.lr,
                "solver": self.solver, "seeds": self.seeds, "deterministic": self.deterministic,
                "validation": {"mean": self.validation_mean, "sd": self.validation_sd, "runs": self.validation},
                "test": None if self.test is None else {"mean": self.test_mean, "sd": self.test_sd, "runs": self.test},
                "best_seed": self.best_seed, "seconds": self.seconds, "epochs": self.epochs, "note": self.note,
                "warnings": self.warnings, "averaged": self.averaged, "versus_default": self.versus_default}

    @classmethod
    def from_json(cls, data: dict) -> "CandidateResult":
        """Rebuild from :meth:`to_json`."""
        return cls(data["candidate"], data["mixer"], dict(data["mixer_options"]), data["lr"], data["solver"],
                   list(data["seeds"]), list(data["validation"]["runs"]),
                   None if data["test"] is None else list(data["test"]["runs"]), float(data["seconds"]),
                   list(data["epochs"]), bool(data["deterministic"]), data.get("note", ""),
                   list(data.get("warnings", [])), data.get("averaged"), data.get("versus_default"))


@dataclass
class SweepResult:
    """What :func:`sweep` produced; ``sweep.json`` in its folder holds the same (:meth:`read`)."""

    out: Path
    """The sweep's folder."""
    best: Path
    """The winner's run folder (``out/best``)."""
    leaderboard: list[CandidateResult]
    """Every candidate that finished inside the budget, best first by :attr:`ranking`."""
    skipped: list[dict]
    """``{"candidate", "reason"}`` for each candidate that did not run or did not count."""
    selection: dict
    """How runs are scored (:meth:`~.selection.Selection.to_json`)."""
    validation: str
    """The validation data: a split, or the seeded slice of train every run used."""
    test_split: str | None
    budget: float | None
    """Seconds; None: no budget."""
    elapsed: float
    setup_seconds: float
    """Opening the cache and checking it, before the first candidate."""
    feeds: dict
    """The shared feeds: ``{"built", "served", "build_seconds"}`` (:class:`~.feed_pool.FeedPool`)."""
    ensemble: dict | None = None
    """With ``ensemble=K``: ``{"members": [{"candidate", "kind", "seeds"}], "run": the ensemble's run folder,
    "validation": score, "test": score, "validation_metrics": {...}, "test_metrics": {...}}``."""
    cache: str = ""
    ranking: str = "mean"
    """What ranks the candidates on validation: ``averaged`` (their seeds averaged as one model; a
    single run's own score) or ``mean`` (their seeds' mean score); see the module docstring."""
    pick: dict | None = None
    """What ``best/`` holds: ``{"kind": "seeds" | "best-seed", "candidate", "seeds", "validation", "test"}``
    (the pick's own scores: a seed ensemble's differ from its runs' mean)."""
    confidence: float = VARIANT_CONFIDENCE
    """The share of paired resamples a grid variant had to win against its default to be kept."""

    @property
    def winner(self) -> CandidateResult:
        """The candidate ``best/`` holds: the first on the leaderboard that is a mixer's default, or a grid
        variant that beat its default with :attr:`confidence` (:meth:`CandidateResult.beats_default`)."""
        return next(c for c in self.leaderboard if c.beats_default(self.confidence))

    @property
    def leader(self) -> CandidateResult:
        """The candidate ranked first on validation (the winner, unless a variant led by no more than noise)."""
        return self.leaderboard[0]

    def to_json(self) -> dict:
        """The leaderboard and its context as plain JSON (what ``sweep.json`` holds)."""
        return {"cache": self.cache, "out": str(self.out), "best": str(self.best),
                "best_candidate": self.winner.candidate, "best_seed": self.winner.best_seed,
                "selection": self.selection, "validation": self.validation, "test_split": self.test_split,
                "budget_seconds": self.budget, "elapsed_seconds": self.elapsed, "setup_seconds": self.setup_seconds,
                "feeds": self.feeds, "leaderboard": [c.to_json() for c in self.leaderboard],
                "skipped": self.skipped, "ensemble": self.ensemble, "ranking": self.ranking, "pick": self.pick,
                "confidence": self.confidence}

    @classmethod
    def from_json(cls, data: dict) -> "SweepResult":
        """Rebuild from :meth:`to_json`."""
        return cls(Path(data["out"]), Path(data["best"]), [CandidateResult.from_json(c) for c in data["leaderboard"]],
                   list(data["skipped"]), dict(data["selection"]), data["validation"], data["test_split"],
                   data["budget_seconds"], float(data["elapsed_seconds"]), float(data["setup_seconds"]),
                   dict(data["feeds"]), data.get("ensemble"), data.get("cache", ""), data.get("ranking", "mean"),
                   data.get("pick"), float(data.get("confidence", VARIANT_CONFIDENCE)))

    def write(self, path: str | os.PathLike | None = None) -> Path:
        """Write :meth:`to_json` to ``path`` (default ``out/sweep.json``)."""
        path = Path(path) if path is not None else OwnedFolder.at(self.out, "sweep folder").file(SWEEP_FILE)
        try:
            write_text_atomic(path, json.dumps(self.to_json(), indent=2, default=float) + "\n")
        except OSError as err:
            raise ConfigError(f"The sweep folder {self.out} cannot be written ({err.strerror or err}); choose "
                              "another --out.") from None
        return path

    @classmethod
    def read(cls, path: str | os.PathLike) -> "SweepResult":
        """Read a ``sweep.json`` (or the folder holding one)."""
        path = Path(path)
        path = path / SWEEP_FILE if path.is_dir() else path
        try:
            return cls.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ConfigError(f"{path} is not a readable sweep leaderboard ({err}); run the sweep again.") from None


# --- the sweep ---------------------------------------------------------------------------------
def sweep(cache: str | os.PathLike | LayerCache | None = None, *, out: str | os.PathLike | None = None,
          tasks: str | list[str] | None = None, budget: str | float | None = DEFAULT_BUDGET,
          seeds: int | Sequence[int] = DEFAULT_SEEDS, seed: int = 0, pick: str = DEFAULT_PICK, ensemble: int = 0,
          confidence: float = VARIANT_CONFIDENCE,
          mixers: Sequence[str] | None = None, grid: bool = True, candidates: Sequence[Candidate | str] | None = None,
          split: str = "train", val_split: str | None = None, test_split: str | None = None, overwrite: bool = False,
          progress: bool = True, **params) -> SweepResult:
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
        split, val_split, test_split: as :func:`~.runs.train_head` (test: ``test`` when the cache has one).
        overwrite: allow writing into a non-empty ``out``.
        progress: a progress bar over the candidates.
        **params: other :class:`LayerHead` settings, shared by every candidate (``epochs``, ``patience``,
            ``batch_size``, ``metric``, ``class_weight``, ``normalize``, ``device`` ...).
    """
    started = time.perf_counter()
    seconds = None if budget is None else parse_duration(budget, "budget")
    chosen = sorted(set(params) & set(CHOSEN))
    if chosen:
        raise ConfigError(f"The sweep chooses {chosen[0]!r} for each candidate itself; leave it out (give the "
                          "candidates with candidates= or mixers=).")
    if pick not in PICKS:
        raise ConfigError(f"Unknown pick {pick!r}; choose one of {', '.join(PICKS)}.")
    if isinstance(ensemble, bool) or not isinstance(ensemble, int) or ensemble < 0:
        raise ConfigError(f"ensemble is the number of top candidates to combine (0 for none), got {ensemble!r}.")
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 <= confidence < 1:
        raise ConfigError(f"confidence is a share of resamples from 0 (keep the leader) to under 1, got "
                          f"{confidence!r}; the default is {VARIANT_CONFIDENCE}.")
    seed_list = _seed_list(seeds, seed)
    owned = not isinstance(cache, LayerCache)
    handle = LayerCache.open(cache) if owned else cache
    try:
        head_tasks = resolve_tasks(handle, tasks)
        if out is not None:
            check_run_folder(Path(out), overwrite)  # a bad --out is refused before anything is written
        handle.require_split(split)
        layer_names = [handle.layer_names[i] for i in handle.layer_index(params.get("layers"))]
        if val_split is not None:
            handle.require_split(val_split)
        if test_split is not None and test_split not in handle.splits:
            raise ConfigError(f"The cache has no split {test_split!r}; its splits are: {', '.join(handle.splits)}.")
        test_name = test_split or next((s for s in TEST_NAMES if s in handle.splits and s != split), None)
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
            result = run.run(plan, ensemble)
            folder.commit()  # best/, ensemble/ and sweep.json appear together, complete
            return result
    finally:
        if owned:
            handle.close()


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401


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


@dataclass
class _Run:
    """One fitted seed of a candidate."""

    seed: int
    head: LayerHead
    score: float
    test_score: float | None
    test: tuple[str, dict, PassResult] | None
    seconds: float
    fit_seconds: float
    test_seconds: float


class _Sweep:
    """The state of one sweep: the cache, the shared feeds, the clock, and the results so far."""

    def __init__(self, cache: LayerCache, folder, tasks, layer_names: list[str], seeds: list[int], seed: int,
                 split: str, val_split: str | None, test_name: str | None, params: dict, started: float,
                 budget: float | None, progress: bool, pick: str = DEFAULT_PICK,
                 confidence: float = VARIANT_CONFIDENCE) -> None:
        self.cache, self.folder, self.out, self.tasks, self.layer_names = cache, folder, folder.path, tasks, layer_names
        self.seeds, self.seed, self.split, self.test_name, self.params = seeds, seed, split, test_name, params
        self.val_split = val_split or cache.validation_split(exclude=split)
        self.started, self.budget, self.progress, self.pick = started, budget, progress, pick
        self.ranking = "averaged" if pick == "seeds" else "mean"  # rank by what best/ will hold
        self.confidence = confidence
        # The end of the budget less a reserve for what follows the last candidate (the leaderboard, the
        # ensemble, sweep.json): 1 % of it, at least 0.5 s (but never more than a tenth). Without it a
        # 320 s sweep on MPQA ended 0.5 s late.
        self.reserve = 0.0 if budget is None else min(max(RESERVE_MIN_S, RESERVE_SHARE * budget), 0.1 * budget)
        self.end = None if budget is None else started + budget - self.reserve
        self.pool = FeedPool(cache)
        self.costs = Costs(len(layer_names), cache.hidden_size, tasks, params)
        self.step = lambda description: None  # the progress bar's: called as a candidate starts training
        self.results: list[CandidateResult] = []
        self.skipped: list[dict] = []
        self.runs: dict[str, list[_Run]] = {}  # candidate -> its runs, kept while it may lead or join the ensemble
        self.picked: dict | None = None  # what best/ holds (SweepResult.pick)
        self.defaults: dict[str, CandidateResult] = {}  # default candidate -> its result, for its grid variants
        self.validation_picks: dict[str, PassResult] = {}  # default candidate -> its pick's validation pass
        self.budget_hit = False  # some candidate did not run, or did not count, for lack of time
        self.winner: CandidateResult | None = None  # the candidate best/ holds (SweepResult.winner)
        self.ensemble_size = 0
        self.first_error_raises = True  # until one candidate has trained, a refusal is about the settings

    # --- the clock ---------------------------------------------------------------------------
    def left(self) -> float:
        return math.inf if self.end is None else self.end - time.perf_counter()

    # --- the loop -----------------------------------------------------------------------------
    def run(self, plan: list[Candidate], ensemble: int) -> SweepResult:
        self.ensemble_size = ensemble
        setup = time.perf_counter() - self.started
        if self.left() <= 0:
            raise ConfigError(f"The budget of {human_seconds(self.budget)} ran out while the sweep opened and checked "
                              f"the cache ({human_seconds(setup)}); give a budget of at least "
                              f"{_suggest(setup * 3)}.")
        queue = [c for c in plan if c.base is None]
        variants = [c for c in plan if c.base is not None]
        first: tuple[str, float] | None = None
        deferred = False
        with steps_progress(self.progress, total=len(plan), title="sweep") as self.step:  # counts what runs
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
        if not self.results:
            raise self._too_small(setup, first)
        ranked = self._ranked()
        head = self.runs[self.winner.candidate][0].head
        result = SweepResult(out=self.out, best=self.out / BEST_RUN, leaderboard=ranked, skipped=self.skipped,
                             selection=head.selection_.to_json(), validation=head.data_["validation"],
                             test_split=self.test_name, budget=self.budget, elapsed=0.0, setup_seconds=setup,
                             feeds=self.pool.stats(), cache=str(self.cache.path), ranking=self.ranking,
                             pick=self.picked, confidence=self.confidence)
        if ensemble > 1:
            result.ensemble = self._ensemble(ranked[:ensemble])
        result.elapsed = time.perf_counter() - self.started
        result.write(self.folder.file(SWEEP_FILE))
        return result

    def _describe(self, candidate: Candidate) -> str:
        if self.winner is None:
            return candidate.name
        return f"{candidate.name} (best: {self.winner.candidate} {self.winner.rank_score(self.ranking):.4f})"

    def _order_variants(self, variants: list[Candidate]) -> list[Candidate]:
        """Grid variants of the mixers whose defaults scored best first; those of a mixer that did not run, dropped."""
        ready = []
        for candidate in variants:
            if candidate.base not in self.defaults:
                self.skipped.append({"candidate": candidate.name,
                                     "reason": f"its default, {candidate.base}, did not run"})
            else:
                ready.append(candidate)
        return sorted(ready, key=lambda c: -self.defaults[c.base].rank_score(self.ranking))

    def _try(self, candidate: Candidate) -> tuple[str, float] | None:
        """Run ``candidate`` if it is worth it and fits; returns (name, seconds) when it trained at all."""
        lr = None
        if candidate.lr_factor is not None:
            base = self.defaults[candidate.base]
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
        runs: list[_Run] = []
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
        combined = None  # the seeds' validation passes averaged as one model's
        if not deterministic and len(runs) > 1:
            combined = combine_passes([r.head.validation_pass_ for r in runs], head.tasks_)
            result.averaged = self._averaged(runs, combined)
        validation = combined if self.pick == "seeds" and combined is not None else best.head.validation_pass_
        if candidate.base is None:
            self.defaults[candidate.name] = result
            self.validation_picks[candidate.name] = validation
        else:
            result.versus_default = self._versus_default(candidate.base, head, validation)
        self.results.append(result)
        self._keep(result, runs)
        return (candidate.name, seconds)

    def _fit(self, head: LayerHead, seed: int, deadline: float | None) -> _Run:
        t0 = time.perf_counter()
        with _quiet_heads():
            head.fit(self.cache, self.split, self.val_split, feeds=self.pool, deadline=deadline)
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
        return _Run(seed, head, score, test_score, test, fit_seconds + test_seconds, fit_seconds, test_seconds)

    def _keep(self, result: CandidateResult, runs: list[_Run]) -> None:
        """Keep the runs the end needs (the winner's, the ensemble's), and rewrite ``best/`` when the winner changes.

        The winner is the first candidate on the leaderboard that may be kept
        (:meth:`CandidateResult.beats_default`); a variant's standing against its default is settled when
        it trains, so the winner changes only to the candidate that has just trained."""
        self.runs[result.candidate] = runs
        ranked = self._ranked()
        winner = next(r for r in ranked if r.beats_default(self.confidence))
        keep = {winner.candidate} | {r.candidate for r in ranked[:max(1, self.ensemble_size)]}
        self.runs = {name: kept for name, kept in self.runs.items() if name in keep}
        if self.winner is None or winner is result:
            self.winner = result
            t0 = time.perf_counter()
            self._write_pick(result, runs)
            self.costs.write_seconds = time.perf_counter() - t0

    def _ranked(self) -> list[CandidateResult]:
        """The results so far, best first by :attr:`ranking` (stable: the earlier, cheaper candidate first on ties)."""
        return sorted(self.results, key=lambda r: -r.rank_score(self.ranking))

    def _pick_of(self, runs: list[_Run]) -> tuple[LayerHead, tuple | None, float, dict]:
        """What is kept of a candidate's ``runs`` (:data:`PICKS`): (head, its test ``(split, metrics, pass)``
        or None, training seconds, ``{"kind", "seeds"}``). An average is scored from the runs' passes."""
        if self.pick == "seeds" and len(runs) > 1:
            head = LayerHead.from_seeds([r.head for r in runs], self.cache, self.split, self.val_split,
                                        feeds=self.pool)
            test = None
            if self.test_name is not None:  # the members' test passes combined: no pass runs again
                passed = combine_passes([r.test[2] for r in runs], head.tasks_)
                test = (self.test_name, self._score(head, self._gold(head, self.test_name), passed), passed)
            return head, test, sum(r.fit_seconds for r in runs), {"kind": "seeds", "seeds": [r.seed for r in runs]}
        best = max(runs, key=lambda r: r.score)  # the first of ties: the earliest seed
        return best.head, best.test, best.fit_seconds, {"kind": "best-seed", "seeds": [best.seed]}

    def _write_pick(self, result: CandidateResult, runs: list[_Run]) -> None:
        """Write the leader's pick (:data:`PICKS`) as ``best/``: its seeds averaged, or its best run."""
        head, test, seconds, picked = self._pick_of(runs)
        write_trained_run(self.folder.run(BEST_RUN), head, self.cache, train_seconds=seconds, test=test)
        self.picked = {**picked, "candidate": result.candidate,
                       "validation": head.selection_.score(head.validation_metrics_),
                       "test": None if test is None else head.selection_.score(test[1])}

    def _gold(self, head: LayerHead, split: str | None = None) -> dict:
        """``{task: labels}`` of the validation data every run used (``split`` None), or of ``split``, in row order."""
        names, rows = [t.name for t in head.tasks_], None
        if split is None:
            split = self.val_split or self.split
            if self.val_split is None:  # the seeded slice of train that every run held out
                rows = validation_slice(self.cache, self.split, head.tasks_, head.val_fraction, self.seed)[1]
        feed = self.pool.feed(split, tasks=names, rows=rows, layers=head.layer_names_, source=head.source_,
                              batch_size=EVAL_BATCH)
        return {t: feed.gold(t) for t in names}

    @staticmethod
    def _score(head: LayerHead, gold: dict, passed: PassResult) -> dict:
        """``{task: metrics}`` of a combined pass against ``gold``."""
        return {t.name: score_predictions(t, gold[t.name], passed.predictions[t.name]) for t in head.tasks_}

    def _averaged(self, runs: list[_Run], validation: PassResult) -> dict:
        """The selection score of ``runs`` averaged as one model, on validation (``validation``: their
        passes combined) and test, from their passes."""
        head = runs[0].head
        out = {"validation": head.selection_.score(self._score(head, self._gold(head), validation)), "test": None}
        if self.test_name is not None:
            test = combine_passes([r.test[2] for r in runs], head.tasks_)
            out["test"] = head.selection_.score(self._score(head, self._gold(head, self.test_name), test))
        return out

    def _versus_default(self, default: str, head: LayerHead, validation: PassResult) -> dict:
        """A variant's validation pick (``validation``) against its default's, compared by a paired bootstrap."""
        tasks = head.tasks_
        compared = paired_bootstrap(head.selection_, tasks, self._gold(head), validation.predictions,
                                    self.validation_picks[default].predictions, resamples=RESAMPLES, seed=self.seed)
        return {"default": default, **compared.to_json()}

    def _ensemble(self, members: list[CandidateResult]) -> dict:
        """The top candidates' picks (each its seeds averaged, or its best run) as one head, written as
        ``out/ensemble``; its validation and test scores combined from their passes."""
        picks = [self._pick_of(self.runs[m.candidate]) for m in members]
        labels = [m.candidate for m in members]
        head = LayerHead.from_members([p[0] for p in picks], self.cache, self.split, self.val_split, feeds=self.pool,
                                      labels=labels)
        test = None
        if self.test_name is not None:
            passed = combine_passes([p[1][2] for p in picks], head.tasks_)
            test = (self.test_name, self._score(head, self._gold(head, self.test_name), passed), passed)
        write_trained_run(self.folder.run(ENSEMBLE_RUN), head, self.cache, train_seconds=sum(p[2] for p in picks),
                          test=test)
        return {"members": [{"candidate": name, **p[3]} for name, p in zip(labels, picks)],
                "combine": "mean of class probabilities (per word for token tasks), of predictions (regression)",
                "run": str(self.out / ENSEMBLE_RUN),
                "validation": head.selection_.score(head.validation_metrics_),
                "validation_metrics": _scalars(head.validation_metrics_),
                "test": None if test is None else head.selection_.score(test[1]),
                "test_metrics": None if test is None else _scalars(test[1])}

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


def _scalars(metrics: dict[str, dict]) -> dict[str, dict]:
    """Each task's scalar metrics (the per-class reports left out)."""
    return {task: {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            for task, values in metrics.items()}
