"""Probe families by name, for the command line and configuration files."""

from __future__ import annotations

from ..errors import ConfigError
from .linear import LinearProbes

PROBES: dict[str, type] = {"linear": LinearProbes}
"""Name -> probe class; each class takes a cache in ``fit(cache, split, val_split)``."""


def probe_class(name: str) -> type:
    """The probe class registered as ``name``."""
    try:
        return PROBES[name]
    except (KeyError, TypeError):
        raise ConfigError(f"Unknown probe {name!r}; choose one of {', '.join(sorted(PROBES))}.") from None
