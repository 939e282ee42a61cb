"""The candidates a sweep tries: a mixer spec, options over its defaults, a learning rate factor; and their grid.

Every registered mixer at its defaults comes first, in registry order (each mixer says which specs
it is tried as: :meth:`~..mixers.LayerMixer.sweep_specs`, so ``layer`` is every single state);
then, with ``grid``, one setting changed at a time around each mixer's defaults: the learning rate
at :data:`LR_FACTORS` times its default run's, and the variants the mixer declares in
:attr:`~..mixers.LayerMixer.sweep_options`. A variant names its default (:attr:`Candidate.base`),
which must have run first: the sweep (:mod:`.sweep`) orders and judges variants against it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ...errors import ConfigError
from ..mixers import MIXERS, mixer_names

LR_FACTORS = (0.3, 3.0)
"""The learning rates a sweep tries besides a mixer's default, as multiples of it."""


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
    """The candidates a sweep of a cache with ``n_states`` states tries, in order (see :mod:`.sweep`).

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

