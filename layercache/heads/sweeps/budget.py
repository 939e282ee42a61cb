"""What a sweep candidate should cost, from what it is and from what has run: the sweep's budget decisions.

A candidate is judged by its shape (:class:`Shape`) before it runs: whether its mixer learns
nothing (``last``, ``layer:<i>``: a fixed map) and whether the convex solver will fit it (a fixed
map under linear heads, unless ``solver="adamw"``). A convex fit is deterministic, so it runs once
whatever the seeds, and every convex fit reads one state the same way, so it costs what the convex
fits that ran cost: ``layer:3`` is priced like the ``last`` that ran before it, once, not like a
learning mixer and not three times. Other candidates are priced, in turn, by their own earlier fits,
by the slowest fit of their mixer family, or by the mean fit of the candidates of their kind (fixed
maps or learning mixers) that ran; nothing predicts the first of a kind, which starts while time is
left. The estimate adds the time the last write of the best run took.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ...core.units import human_seconds
from ...errors import ConfigError
from ..network.model import HeadModel
from ..training.fitting import resolve_solver

DEFER_SHARE = 0.02
"""A single-state fit that takes more than this share of the budget sends the remaining single states
behind the learning mixers' defaults (see :mod:`.sweep`)."""


@dataclass(frozen=True)
class Shape:
    """What decides a candidate's cost before it runs."""

    fixed: bool
    """Its mixer learns nothing (a single state)."""
    convex: bool
    """The convex solver fits it: one deterministic fit, whatever the seeds."""


class Costs:
    """The candidates' shapes, the fits that ran, and what the next candidate should therefore cost.

    Args:
        n_states, dim: the states each head reads, and their width.
        tasks: the label tasks every candidate learns.
        params: the :class:`~..estimator.LayerHead` settings shared by every candidate (head options,
            ``solver`` ...), which decide with the mixer whether the convex solver applies.
    """

    def __init__(self, n_states: int, dim: int, tasks, params: dict) -> None:
        self.n_states, self.dim, self.tasks, self.params = n_states, dim, list(tasks), params
        self._shapes: dict[str, Shape] = {}
        self.fits: dict[str, list[float]] = {}  # candidate name -> seconds of each fit (test scoring included)
        self.by_family: dict[str, list[float]] = {}
        self.by_kind: dict[bool, list[float]] = {}  # fixed map? -> seconds of each fit the solver did not fit
        self.convex: list[float] = []  # seconds of each convex fit
        self.tests: dict[str, list[float]] = {}  # family -> seconds of each test scoring
        self.write_seconds = 0.0

    def shape(self, candidate) -> Shape:
        """``candidate``'s :class:`Shape`; a spec this cache cannot take raises :class:`ConfigError`."""
        if candidate.name not in self._shapes:
            p = self.params
            model = HeadModel(self.n_states, self.dim, self.tasks, mixer=candidate.mixer,
                              mixer_options=candidate.mixer_options, head_options=p.get("head_options"),
                              share_mixer=p.get("share_mixer", True), loss_weights=p.get("loss_weights"))
            fixed = all(m.is_fixed_map() for m in model.mixers.values())
            try:
                convex = resolve_solver(p.get("solver", "auto"), model) == "lbfgs"
            except ConfigError:  # solver="lbfgs" on a learning mixer: the fit itself refuses it
                convex = False
            self._shapes[candidate.name] = Shape(fixed, convex)
        return self._shapes[candidate.name]

    def is_fixed(self, candidate) -> bool:
        """Whether ``candidate``'s mixer learns nothing (a spec this cache refuses counts as not)."""
        try:
            return self.shape(candidate).fixed
        except ConfigError:
            return False

    def record(self, candidate, seconds: float, test_seconds: float) -> None:
        """One fit of ``candidate`` took ``seconds`` (``test_seconds`` of them scoring the test split)."""
        shape = self.shape(candidate)
        self.fits.setdefault(candidate.name, []).append(seconds)
        if shape.convex:
            self.convex.append(seconds)
        else:
            self.by_family.setdefault(candidate.family, []).append(seconds)
            self.by_kind.setdefault(shape.fixed, []).append(seconds)
        self.tests.setdefault(candidate.family, []).append(test_seconds)

    def per_fit(self, candidate) -> float | None:
        """Seconds one fit of ``candidate`` should take; None when nothing that ran predicts it."""
        shape = self.shape(candidate)
        if candidate.name in self.fits:
            return statistics.fmean(self.fits[candidate.name])
        if shape.convex:  # every convex fit reads one state alike: priced by those that ran
            return statistics.fmean(self.convex) if self.convex else None
        if candidate.family in self.by_family:
            return max(self.by_family[candidate.family])
        if shape.fixed in self.by_kind:  # a mixer not run yet: the mean of its kind, between the cheap and the dear
            return statistics.fmean(self.by_kind[shape.fixed])
        return None

    def fits_needed(self, candidate, seeds: int) -> int:
        """How many fits ``candidate`` runs: one when the convex solver fits it, else one per seed."""
        return 1 if self.shape(candidate).convex else seeds

    def refusal(self, candidate, seeds: int, left: float) -> str | None:
        """Why ``candidate`` may not start with ``left`` seconds to go (a skip reason), or None when it may."""
        estimate = self.per_fit(candidate)
        if estimate is None:
            return None if left > 0 else "the budget ran out"
        n = self.fits_needed(candidate, seeds)
        needed = n * estimate + self.write_seconds
        if needed <= left:
            return None
        fits = "one convex fit" if self.shape(candidate).convex else f"{n} fits"
        return (f"the budget: {fits} would take about {human_seconds(needed)}, {human_seconds(max(left, 0.0))} "
                "were left")

    def after_training(self, candidate) -> float:
        """Seconds a fit needs after its last epoch: scoring the test split, and writing the best run."""
        tests = self.tests.get(candidate.family) or [t for ts in self.tests.values() for t in ts] or [0.0]
        return max(tests) + self.write_seconds

    def too_dear(self, candidate, budget: float | None) -> bool:
        """Whether ``candidate`` was a single-state fit that took more than :data:`DEFER_SHARE` of ``budget``."""
        fits = self.fits.get(candidate.name)
        return budget is not None and bool(fits) and self.is_fixed(candidate) and statistics.fmean(
            fits) > DEFER_SHARE * budget


def describe_feeds(feeds: dict) -> str:
    """The sweep's shared reads in plain words (``feeds``: :meth:`~layercache.store.feed_pool.FeedPool.stats`)."""
    built, reused = feeds["built"], feeds["served"] - feeds["built"]
    loads = f"{built} load{'s' if built != 1 else ''}"
    return (f"Data read from the cache: {loads} of states and labels, shared by every candidate (reused {reused} "
            "times instead of read again).")
