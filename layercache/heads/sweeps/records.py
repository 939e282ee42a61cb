"""What a sweep produced: each candidate's runs (:class:`CandidateResult`) and the leaderboard (:class:`SweepResult`).

Plain records, read and written as ``sweep.json`` in the sweep's folder; the ranking and the rule that
a grid variant must beat its default (:data:`VARIANT_CONFIDENCE`) are explained in :mod:`.sweep`.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ...core.confine import OwnedFolder
from ...core.files import write_text_atomic
from ...errors import ConfigError
from ..run_folders.run_folder import SWEEP_FILE, unwritable_folder
from .sweep_options import VARIANT_CONFIDENCE as VARIANT_CONFIDENCE  # declared with the sweep's options


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
    ``{"default", "difference", "se", "p_better", "rows", "resamples"}`` (:mod:`..scoring.bootstrap`); None for a
    default."""

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
    """How runs are scored (:meth:`~..scoring.selection.Selection.to_json`)."""
    validation: str
    """The validation data: a split, or the seeded slice of train every run used."""
    test_split: str | None
    budget: float | None
    """Seconds; None: no budget."""
    elapsed: float
    setup_seconds: float
    """Opening the cache and checking it, before the first candidate."""
    feeds: dict
    """The shared feeds: ``{"built", "served", "build_seconds"}`` (:class:`~layercache.store.feed_pool.FeedPool`)."""
    ensemble: dict | None = None
    """With ``ensemble=K``: ``{"members": [{"candidate", "kind", "seeds"}], "run": the ensemble's run folder,
    "validation": score, "test": score, "validation_metrics": {...}, "test_metrics": {...}}``."""
    cache: str = ""
    ranking: str = "mean"
    """What ranks the candidates on validation: ``averaged`` (their seeds averaged as one model; a
    single run's own score) or ``mean`` (their seeds' mean score); see :mod:`.sweep`."""
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
            raise unwritable_folder("sweep folder", self.out, err) from None
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
