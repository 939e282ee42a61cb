"""A sweep's standings: the candidates ranked, what is kept of them, and how a grid variant stands against its default.

The ranking follows what ``best/`` keeps (:data:`PICKS`): with ``seeds`` a candidate is ranked by its
seeds averaged as one model (scored from its runs' passes: no pass runs again), with ``best-seed`` by
its seeds' mean score. A variant is compared with its default by a paired bootstrap over the
validation rows (:mod:`..scoring.bootstrap`); the winner is the first candidate on the leaderboard that is a
default or a variant that cleared the bar. The top candidates' picks may also be averaged as one head,
the ensemble. Why the sweep ranks and picks this way is in :mod:`.sweep`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.holdout import validation_slice
from ..ensembles.passes import combine_passes
from ..estimator import LayerHead
from ..run_folders.run_folder import BEST_RUN, ENSEMBLE_RUN
from ..scoring.bootstrap import RESAMPLES, paired_bootstrap
from ..scoring.evaluation import PassResult
from ..scoring.evaluation import score as score_predictions
from ..workflow import write_trained_run
from .records import CandidateResult
from .sweep_options import DEFAULT_PICK, VARIANT_CONFIDENCE
from .sweep_options import PICKS as PICKS  # declared with the sweep's options (no torch there)

EVAL_BATCH = 128
"""Examples per batch when scoring the test split (no gradients: larger batches are cheaper)."""


@dataclass
class SeedRun:
    """One fitted seed of a candidate: its head, its validation and test scores, what it cost."""

    seed: int
    head: LayerHead
    score: float
    test_score: float | None
    test: tuple[str, dict, PassResult] | None
    seconds: float
    fit_seconds: float
    test_seconds: float


class Leaderboard:
    """The results of the candidates that trained, and the runs kept while a candidate may lead or join the ensemble.

    Args:
        cache, folder, pool: the open cache, the sweep's claimed folder, the shared
            :class:`~layercache.store.feed_pool.FeedPool`.
        split, val_split, test_name: the splits every run trains, validates and is tested on (``val_split``
            None: the seeded slice of train, ``seed``).
        seed: the sweep's first seed (the validation slice's, and the bootstrap's).
        pick: what ``best/`` keeps of the winner (:data:`PICKS`); it decides the ranking.
        confidence: the share of paired resamples a variant must win against its default to be kept.
    """

    def __init__(self, cache, folder, pool, split: str, val_split: str | None, test_name: str | None, seed: int,
                 pick: str = DEFAULT_PICK, confidence: float = VARIANT_CONFIDENCE) -> None:
        self.cache, self.folder, self.out, self.pool = cache, folder, folder.path, pool
        self.split, self.val_split, self.test_name, self.seed = split, val_split, test_name, seed
        self.pick, self.confidence = pick, confidence
        self.ranking = "averaged" if pick == "seeds" else "mean"  # rank by what best/ will hold
        self.results: list[CandidateResult] = []
        self.runs: dict[str, list[SeedRun]] = {}  # candidate -> its runs, kept while it may lead or join the ensemble
        self.picked: dict | None = None  # what best/ holds (SweepResult.pick)
        self.defaults: dict[str, CandidateResult] = {}  # default candidate -> its result, for its grid variants
        self.validation_picks: dict[str, PassResult] = {}  # default candidate -> its pick's validation pass
        self.winner: CandidateResult | None = None  # the candidate best/ holds (SweepResult.winner)
        self.ensemble_size = 0

    def add(self, result: CandidateResult, runs: list[SeedRun], base: str | None, deterministic: bool) -> bool:
        """Enter a candidate's ``result`` and ``runs`` (``base``: the default a grid variant varies); returns
        whether it is the new winner, whose pick :meth:`write_pick` must then write as ``best/``."""
        best = max(runs, key=lambda r: r.score)  # the first of ties: the earliest seed
        head = best.head
        combined = None  # the seeds' validation passes averaged as one model's
        if not deterministic and len(runs) > 1:
            combined = combine_passes([r.head.validation_pass_ for r in runs], head.tasks_)
            result.averaged = self._averaged(runs, combined)
        validation = combined if self.pick == "seeds" and combined is not None else best.head.validation_pass_
        if base is None:
            self.defaults[result.candidate] = result
            self.validation_picks[result.candidate] = validation
        else:
            result.versus_default = self._versus_default(base, head, validation)
        self.results.append(result)
        return self._keep(result, runs)

    def _keep(self, result: CandidateResult, runs: list[SeedRun]) -> bool:
        """Keep the runs the end needs (the winner's, the ensemble's); True when the winner changes.

        The winner is the first candidate on the leaderboard that may be kept
        (:meth:`CandidateResult.beats_default`); a variant's standing against its default is settled when
        it trains, so the winner changes only to the candidate that has just trained."""
        self.runs[result.candidate] = runs
        ranked = self.ranked()
        winner = next(r for r in ranked if r.beats_default(self.confidence))
        keep = {winner.candidate} | {r.candidate for r in ranked[:max(1, self.ensemble_size)]}
        self.runs = {name: kept for name, kept in self.runs.items() if name in keep}
        if self.winner is None or winner is result:
            self.winner = result
            return True
        return False

    def ranked(self) -> list[CandidateResult]:
        """The results so far, best first by :attr:`ranking` (stable: the earlier, cheaper candidate first on ties)."""
        return sorted(self.results, key=lambda r: -r.rank_score(self.ranking))

    def pick_of(self, runs: list[SeedRun]) -> tuple[LayerHead, tuple | None, float, dict]:
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

    def write_pick(self, result: CandidateResult, runs: list[SeedRun]) -> None:
        """Write the leader's pick (:data:`PICKS`) as ``best/``: its seeds averaged, or its best run."""
        head, test, seconds, picked = self.pick_of(runs)
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

    def _averaged(self, runs: list[SeedRun], validation: PassResult) -> dict:
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

    def ensemble(self, members: list[CandidateResult]) -> dict:
        """The top candidates' picks (each its seeds averaged, or its best run) as one head, written as
        ``out/ensemble``; its validation and test scores combined from their passes."""
        picks = [self.pick_of(self.runs[m.candidate]) for m in members]
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


def _scalars(metrics: dict[str, dict]) -> dict[str, dict]:
    """Each task's scalar metrics (the per-class reports left out)."""
    return {task: {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            for task, values in metrics.items()}
