"""A sweep's own settings, each declared once: :func:`~layercache.heads.sweeps.sweep.sweep`'s keywords that are not a
head's (the budget, the candidates, the seeds, what is kept), their defaults, the rules their values follow, and
how ``layercache sweep`` types them.

:class:`SweepOptions` is the one declaration (:mod:`layercache.core.option_specs`), as
:class:`~layercache.heads.head_options.HeadOptions` is a head's: ``sweep()``'s signature takes its defaults from it
(``tests/cli/test_spec_options.py`` holds the two to the same names and defaults), ``sweep()`` checks the values
against the fields' constraints before it opens the cache, and the command's options are made from the flags. The
head's settings every candidate shares are ``HeadOptions``' (``sweep``'s ``**params``).

This module imports no torch: ``--help`` reads it, with :data:`PICKS`, the values ``--pick`` accepts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...core.option_specs import Constraint, Flag, at_least, fraction, option_field, option_spec

PICKS = {
    "seeds": "the winner's seeds averaged, a seed ensemble (one run when it had one seed or the convex fit)",
    "best-seed": "the winner's one run with the best validation score",
}
"""What the sweep keeps of its winner as ``best/``, by name (``--pick``)."""
DEFAULT_PICK = "seeds"
"""What ``best/`` keeps unless told otherwise: the winner's seeds averaged (see :mod:`.sweep`)."""
DEFAULT_BUDGET = "5m"
"""The sweep's time budget unless told otherwise."""
DEFAULT_SEEDS = 3
"""Seeds per candidate (a deterministic convex fit runs once)."""
VARIANT_CONFIDENCE = 0.95
"""A grid variant is kept over its mixer's default only when it scores above the default in at least this
share of paired bootstrap resamples of the validation rows (see :mod:`.sweep`)."""

CONFIDENCE = Constraint(fraction().test, "is a share of resamples from 0 (keep the leader) to under 1")
"""The rule of ``confidence``: a fraction in ``[0, 1)``, worded as what it is."""
ENSEMBLE = Constraint(at_least(0, whole=True).test, "is the number of top candidates to combine (0 for none)")
"""The rule of ``ensemble``: a whole number of at least 0, worded as what it is."""


@option_spec
@dataclass(frozen=True)
class SweepOptions:
    """The keywords of :func:`~layercache.heads.sweeps.sweep.sweep` that are the sweep's own, with its defaults.

    ``sweep(cache, **dataclasses.asdict(options))`` runs the sweep these options describe. Its ``--seeds`` and
    ``--seed`` are the sweep's (runs per candidate, the first seed), spelled as a head's.
    """

    budget: str | float | None = option_field(DEFAULT_BUDGET, Flag(
        "--budget", "Wall time for the whole sweep: 300s, 5m, 1h30m or plain seconds. Candidates whose estimated "
                    "cost no longer fits are not started."))
    """Seconds, or text such as ``300s``, ``5m``, ``1h`` (:func:`~layercache.core.units.parse_duration`); None: no
    limit."""
    mixers: Sequence[str] | None = option_field(None, Flag(
        "--mixer", "Mixers to try (repeatable); layer is every single state.", reader="list"))
    """Registry names to try (None: all)."""
    grid: bool = option_field(True, Flag(
        "--grid/--no-grid", "Also try learning rates, widths and temperatures around each mixer's defaults."))
    seeds: int = option_field(DEFAULT_SEEDS, Flag(
        "--seeds", "Runs per candidate (a deterministic convex fit runs once)."))
    """A count of runs per candidate (seeds ``seed``, ``seed+1`` ...); ``sweep()`` also takes the seeds themselves."""
    seed: int = option_field(0, Flag(
        "--seed", "First seed; also seeds the validation slice when the cache has no validation split."))
    pick: str = option_field(DEFAULT_PICK, Flag(
        "--pick", "What best/ keeps of the winner.", "seeds: its seeds' runs averaged (a seed ensemble, steadier than "
                  "any one seed); best-seed: its run with the best validation score."))
    """One of :data:`PICKS`."""
    confidence: float = option_field(VARIANT_CONFIDENCE, Flag(
        "--confidence", "Share of paired bootstrap resamples of the validation rows in which a grid variant must "
                        "beat its mixer's default to be kept instead of it; 0 keeps whichever candidate leads."),
        check=CONFIDENCE)
    ensemble: int = option_field(0, Flag(
        "--ensemble", "Also average the top K candidates (each as --pick keeps it) as one head, written as "
                      "ensemble/ beside best/; 0 = none."), check=ENSEMBLE)
    """The number of top candidates averaged as one head, ``ensemble/`` (0 or 1: none)."""
