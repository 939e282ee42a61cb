"""Probe families by name, for the command line and configuration files.

A probe family is a :class:`~.base.Probe` subclass in its own module of this package, decorated with
:func:`register_probe`; this registry imports every module of the package when first asked, so
adding a probe is adding one file (and its test). Each class is a scikit-learn style estimator
whose ``fit`` takes a cache and the split to learn from (a probe that selects hyper-parameters
takes a validation split too).
"""

from __future__ import annotations

from ..core.registry import Registry

PROBES: Registry[type] = Registry("probe", __package__, first=("linear", "mdl", "cumulative"))
"""Name -> probe class (a :class:`~.base.Probe`): linear, mdl, cumulative, then any other module's alphabetically
(complete once :func:`probe_names` ran). The probe report fits every one on every task it applies to."""


def register_probe(name: str):
    """Class decorator: list the probe family under ``name`` (``@register_probe("linear")``)."""
    return PROBES.register(name)


def probe_names() -> list[str]:
    """Every registered probe family's name (for CLI choices)."""
    return PROBES.names()


def probe_class(name: str) -> type:
    """The probe class registered as ``name``."""
    return PROBES.lookup(name)
