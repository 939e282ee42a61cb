"""Which stored features a learner reads: ``tokens``, ``pooled:<mode>`` or ``auto``.

Heads, probes and depth analyses all take a ``source`` string. It is parsed here, once, so that
every consumer accepts the same spellings and refuses a bad one with the same sentence; what
``auto`` resolves to is each consumer's own policy (a probe and a head want different things), but
whether a cache can serve a concrete source is decided here too, and so is the one rule of ``auto``
(:func:`auto_source`), to which each consumer gives the pooled modes it would rather read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..core.option_names import option
from ..core.tasks import LabelTask
from ..errors import CacheError, ConfigError, SourceError
from .schema import POOLING_MODES

if TYPE_CHECKING:  # for annotations only: reading the spellings (--help) loads no h5py nor torch
    from .cache_view import CacheView

SOURCE_KINDS = ("auto", "tokens", "pooled")


@dataclass(frozen=True)
class FeatureSource:
    """A parsed ``source``: ``kind`` is ``auto``, ``tokens`` or ``pooled``; ``mode`` the pooling of ``pooled``."""

    kind: Literal["auto", "tokens", "pooled"]
    mode: str | None = None

    @property
    def is_pooled(self) -> bool:
        """Whether this is one pooled vector per example."""
        return self.kind == "pooled"

    def __str__(self) -> str:
        return f"pooled:{self.mode}" if self.kind == "pooled" else self.kind


def source_spellings(allow_auto: bool = True) -> tuple[str, ...]:
    """Every accepted spelling, for CLI choices and messages."""
    concrete = ("tokens", *(f"pooled:{mode}" for mode in POOLING_MODES))
    return ("auto", *concrete) if allow_auto else concrete


def parse_source(source: object, *, allow_auto: bool = True) -> FeatureSource:
    """Parse a ``source`` string; refuse (:class:`ConfigError`) anything else in one sentence."""
    if isinstance(source, FeatureSource):
        parsed = source
    elif not isinstance(source, str):
        raise ConfigError(f"source must be a string such as 'tokens' or 'pooled:mean', got {source!r}.")
    elif source in ("auto", "tokens"):
        parsed = FeatureSource(source)  # type: ignore[arg-type]
    elif source.startswith("pooled:") and source[len("pooled:"):] in POOLING_MODES:
        parsed = FeatureSource("pooled", source[len("pooled:"):])
    else:
        raise ConfigError(f"source {source!r} is not known; use one of: {', '.join(source_spellings(allow_auto))}.")
    if parsed.kind == "auto" and not allow_auto:
        raise ConfigError(f"source 'auto' is not accepted here; use one of: {', '.join(source_spellings(False))}.")
    return parsed


def require_source(cache: CacheView, source: object) -> FeatureSource:
    """Parse a concrete ``source`` and refuse (:class:`CacheError`) one the cache does not store."""
    parsed = parse_source(source, allow_auto=False)
    if parsed.kind == "tokens" and not cache.stores_tokens:
        have = ", ".join(f"pooled:{mode}" for mode in cache.manifest.pooling)
        raise CacheError(f"The cache holds pooled vectors only ({have}), not token states; use one of those "
                         f"or re-extract with {option('store', 'tokens')}.")
    if parsed.is_pooled and parsed.mode not in cache.manifest.pooling:
        have = ", ".join(cache.manifest.pooling) or "none"
        raise CacheError(f"The cache has no pooled {parsed.mode!r} vectors (it has: {have}); choose one of those "
                         f"or re-extract with {option('pooling', [parsed.mode], typed=parsed.mode)}.")
    return parsed


def auto_source(cache: CacheView, tasks: Sequence[LabelTask], prefer: Sequence[str] = ()) -> FeatureSource:
    """What ``source="auto"`` reads from ``cache`` for ``tasks``.

    Token states for a token task (refused, :class:`~layercache.errors.SourceError`, when the cache
    holds pooled vectors only); else the first of the pooled modes in ``prefer`` that the cache
    stores; else token states when stored; else the cache's first pooled mode. A probe prefers any
    pooled vector (mean first), a head only the mean, and only when its model cannot tell it from
    token states.
    """
    token_tasks = [t.name for t in tasks if t.kind == "token"]
    if token_tasks:
        if not cache.stores_tokens:
            raise SourceError(f"Token task {token_tasks[0]!r} needs token states, but the cache holds pooled "
                              f"vectors only; re-extract with {option('store', 'tokens')}.")
        return FeatureSource("tokens")
    pooling = cache.manifest.pooling
    mode = next((m for m in prefer if m in pooling), None)
    if mode is not None:
        return FeatureSource("pooled", mode)
    return FeatureSource("tokens") if cache.stores_tokens or not pooling else FeatureSource("pooled", pooling[0])
